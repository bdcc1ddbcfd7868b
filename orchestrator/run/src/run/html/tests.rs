#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::process::Command;

use super::*;
use crate::run::report::{AgentStatus, SynthesisGroup, SynthesisLevel, SynthesisReport, SynthesisTree};

/// Model text that would run if it became markup: each marks `<body>` when it runs.
const ATTACK: &str = "Done. <script>document.body.setAttribute('data-pwned','script')</script>\
<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\"></pre></details><b>bold</b>";

/// The fixed report of the snapshots, with the attack in an answer, a transcript and
/// the synthesis, and a synthesis tree; its transcripts written under `dir`.
fn report_in(dir: &Path) -> RunReport {
    let mut r: RunReport = serde_json::from_str(include_str!("../testdata/report.json")).unwrap();
    r.run_dir = dir.to_path_buf();
    for (i, a) in r.agents.iter_mut().enumerate() {
        a.timings.waiting_ms = 100 * i as u64;
        a.timings.worktree_ms = 40;
        a.timings.host_ms = 60;
        a.timings.loop_ms = 1000 + 500 * i as u64;
        a.timings.finish_ms = 30;
    }
    r.agents[0].text = ATTACK.into();
    let transcript = [
        serde_json::json!({"agent": "survey", "event": {"type": "prompt", "text": "Survey the <repo>."}}),
        serde_json::json!({"agent": "survey", "event": {"type": "tool_use_started", "id": "t1", "name": "Bash",
            "input": {"command": "echo '<script>document.body.setAttribute(\"data-pwned\",\"tool\")</script>'"}}}),
        serde_json::json!({"agent": "survey", "event": {"type": "tool_use_finished", "id": "t1", "name": "Bash",
            "is_error": false, "duration_ms": 3, "output": ATTACK}}),
        serde_json::json!({"agent": "survey", "event": {"type": "assistant_message", "turn": 2,
            "message": {"role": "assistant", "content": [{"type": "text", "text": ATTACK}]}}}),
    ];
    let lines: Vec<String> = transcript.iter().map(|v| v.to_string()).collect();
    std::fs::create_dir_all(dir.join("transcripts")).unwrap();
    std::fs::write(dir.join("transcripts/survey.jsonl"), lines.join("\n")).unwrap();
    let mut s = SynthesisReport::skipped("");
    s.status = AgentStatus::Succeeded;
    s.reason = None;
    s.text = ATTACK.into();
    s.budget_tokens = Some(100_000);
    s.prompt_tokens = Some(1_234);
    s.tree = Some(SynthesisTree {
        group_size: Some(2),
        levels: vec![SynthesisLevel {
            level: 1,
            groups: vec![SynthesisGroup {
                id: "L1-G1".into(),
                members: r.agents.iter().map(|a| a.id.clone()).collect(),
                agents: r.agents.len(),
                status: AgentStatus::Succeeded,
                reason: None,
                prompt_tokens: 999,
                turns: 1,
                usage: Default::default(),
                cost_usd: 0.0,
                prompt: None,
                transcript: None,
            }],
        }],
    });
    r.synthesis = Some(s);
    r
}

#[test]
fn model_text_is_escaped_and_nothing_is_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let page = render(&report_in(dir.path()), dir.path()).unwrap();
    assert!(!page.contains("<script>document"), "model text became markup");
    assert!(!page.contains("<img"), "model text became markup");
    assert!(!page.contains("<b>bold</b>"));
    assert!(page.contains("&lt;script&gt;document.body.setAttribute("), "the answer is not shown as text");
    assert_eq!(page.matches("<script").count(), 2, "only the page's own scripts");
    for fetch in ["<link", "<img", "<iframe", "<object", "<embed", "<base", "@import", "url(", "http://", "https://"] {
        assert!(!page.contains(fetch), "the page refers to something outside it: {fetch}");
    }
    // Transcript, costs and the tree are in it.
    assert!(page.contains("Survey the &lt;repo&gt;."));
    assert!(page.contains("<code>L1-G1</code>"));
    assert!(page.contains("Level 1: 1 groups"));
}

#[test]
fn the_timeline_data_cannot_close_its_script_element() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = report_in(dir.path());
    r.agents[1].id = "</script><script>document.body.setAttribute('data-pwned','id')</script>".into();
    let page = render(&r, dir.path()).unwrap();
    let data = page.split("id=\"timeline-data\">").nth(1).unwrap().split("</script>").next().unwrap();
    assert!(data.contains("\\u003c/script\\u003e"), "{data}");
    let v: Value = serde_json::from_str(data).unwrap();
    assert_eq!(v["agents"].as_array().unwrap().len(), 3);
}

/// Where Chromium is, if it is installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|name| Command::new(name).arg("--version").output().map(|o| o.status.success()).unwrap_or(false))
}

#[test]
fn the_timeline_renders_in_headless_chromium_and_model_text_stays_inert() {
    let Some(browser) = chromium() else {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("chromium is not installed; .ci/setup.sh installs it (apt-get install chromium)");
        }
        eprintln!("skipped: chromium is not installed (apt-get install chromium), and CI is not set");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let r = report_in(dir.path());
    write(dir.path(), &r).unwrap();
    let page = dir.path().join("report.html");
    let profile = dir.path().join("profile");
    let out = Command::new("timeout")
        .arg("120")
        .arg(browser)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}\n{dom}", String::from_utf8_lossy(&out.stderr));
    let body = dom.split("<body").nth(1).unwrap().split('>').next().unwrap();
    assert!(body.contains("data-timeline=\"ready\""), "the page's script did not run: <body{body}>");
    assert!(!body.contains("data-pwned"), "model text ran as script: <body{body}>");
    // One bar per agent, each with its five segments, built by the script.
    assert_eq!(dom.matches("class=\"bar status-").count(), r.agents.len(), "{dom}");
    assert_eq!(dom.matches("class=\"seg seg-loop\"").count(), r.agents.len());
    for a in &r.agents {
        assert!(dom.contains(&format!("data-agent=\"{}\"", a.id)), "no bar for {}", a.id);
    }
    assert!(dom.contains("full width: "), "the scale was not written");
    assert!(dom.contains("&lt;script&gt;document.body.setAttribute("));
}

/// The timeline's data as the page's script reads it.
fn timeline_data(page: &str) -> Value {
    let data = page.split("id=\"timeline-data\">").nth(1).unwrap().split("</script>").next().unwrap();
    serde_json::from_str(data).unwrap()
}

/// `report_in`'s report with what `report.md` shows beyond the agents: branches and
/// changed files, a likely conflict, an integration branch with a skipped merge, the
/// fetched and pruned branches, and publishing.
fn report_with_work(dir: &Path) -> RunReport {
    use crate::run::report::{ChangedFile, FetchedBranch, MergeEntry, MergeReport, Overlap};
    let mut r = report_in(dir);
    for (i, a) in r.agents.iter_mut().enumerate() {
        a.branch = Some(format!("orch/fixed-run/agent-{i}"));
        a.commit = Some(format!("{i}abc"));
        a.changed_files = vec![
            ChangedFile { path: "src/shared.rs".into(), kind: "modified".into() },
            ChangedFile { path: format!("src/only-{i}.rs").into(), kind: "added".into() },
        ];
    }
    r.agents[2].worktree = Some("/tmp/kept <wt>".into());
    let ids: Vec<String> = r.agents.iter().map(|a| a.id.clone()).collect();
    r.overlaps = vec![Overlap { path: "src/shared.rs".into(), agents: ids[..2].to_vec() }];
    r.integration.mode = "merge".into();
    r.integration.merge = Some(MergeReport {
        branch: "orch/fixed-run/integration".into(),
        merges: vec![
            MergeEntry {
                agent: ids[0].clone(),
                branch: "orch/fixed-run/agent-0".into(),
                merged: true,
                conflicts: vec![],
            },
            MergeEntry {
                agent: ids[1].clone(),
                branch: "orch/fixed-run/agent-1".into(),
                merged: false,
                conflicts: vec!["src/shared.rs".into()],
            },
        ],
    });
    r.integration.fetched =
        vec![FetchedBranch { branch: "orch/fixed-run/integration".into(), commit: "feedbeef".into() }];
    r.integration.pruned = vec!["orch/fixed-run/agent-0".into()];
    r.publish = Some(serde_json::json!({
        "mode": "dry-run",
        "requests_file": "publish.json",
        "outcomes": [{"output": "review", "state": "planned", "detail": "2 inline comment(s) <b>x</b>"}],
    }));
    r
}

#[test]
fn the_page_shows_what_report_md_shows() {
    let dir = tempfile::tempdir().unwrap();
    let r = report_with_work(dir.path());
    // Escaping writes `/` as `&#x2f;`: the checks read it back.
    let page = render(&r, dir.path()).unwrap().replace("&#x2f;", "/");
    let md = crate::run::report::markdown(&r);
    // Branches, changed files, the conflict, the integration and publishing: each in
    // report.md and in the page.
    for (what, in_md, in_page) in [
        ("a branch", "`orch/fixed-run/agent-1`", "<code>orch/fixed-run/agent-1</code>"),
        ("a changed file", "- added `src/only-2.rs`", "added <code>src/only-2.rs</code>"),
        ("the likely conflict", "## Likely conflicts", "<h2>Likely conflicts</h2>"),
        (
            "the integration branch",
            "## Integration branch `orch/fixed-run/integration`",
            "Integration branch <code>orch/fixed-run/integration</code>",
        ),
        (
            "a skipped merge",
            "**not merged**, conflicts in `src/shared.rs`",
            "not merged</b>, conflicts in <code>src/shared.rs</code>",
        ),
        ("a kept worktree", "Worktree kept at `/tmp/kept <wt>`", "Worktree kept at /tmp/kept &lt;wt&gt;"),
        ("publishing", "the requests are in `publish.json`", "the requests are in <code>publish.json</code>"),
        ("an outcome", "`review`: planned", "<code>review</code>: <span class=\"state-planned\">planned</span>"),
    ] {
        assert!(md.contains(in_md), "report.md lacks {what} ({in_md}):\n{md}");
        assert!(page.contains(in_page), "the page lacks {what} ({in_page})");
    }
    assert!(page.contains("2 inline comment(s) &lt;b&gt;x&lt;/b&gt;"), "publishing text is escaped");
    // The page lists the pruned and fetched branches too.
    assert!(page.contains("Pruned (the integration branch holds them): <code>orch/fixed-run/agent-0</code>"));
    assert!(page.contains("<code>orch/fixed-run/integration</code> at <code>feedbeef</code>"));
}

#[test]
fn synthesis_that_did_not_run_is_not_on_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let mut r = report_in(dir.path());
    r.timings.synthesis_ms = 2_500;
    assert_eq!(timeline_data(&render(&r, dir.path()).unwrap())["synthesis_ms"], 2_500);
    // An interrupted run: no synthesis at all.
    r.synthesis = None;
    r.timings.synthesis_ms = 0;
    let page = render(&r, dir.path()).unwrap();
    assert!(timeline_data(&page)["synthesis_ms"].is_null());
    assert!(!page.contains("<h2>Synthesis"), "a synthesis section without a synthesis");
    // Skipped: its reason is shown, but no time on the timeline.
    r.synthesis = Some(SynthesisReport::skipped("every agent failed"));
    let page = render(&r, dir.path()).unwrap();
    assert!(timeline_data(&page)["synthesis_ms"].is_null());
    assert!(page.contains("<h2>Synthesis (skipped)</h2>") && page.contains("every agent failed"));
}

#[test]
fn the_time_axis_has_round_marks_up_to_the_longest_bar() {
    let dir = tempfile::tempdir().unwrap();
    let data = timeline_data(&render(&report_in(dir.path()), dir.path()).unwrap());
    // The longest bar: 200 waiting + 40 + 60 + 2000 loop + 30.
    assert_eq!(data["end_ms"], 2_330);
    let labels: Vec<&str> = data["axis"].as_array().unwrap().iter().map(|t| t["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["0", "500ms", "1s", "1.5s", "2s"]);
    let marks = |end: u64| axis(end).into_iter().map(|t| t.label).collect::<Vec<_>>();
    assert_eq!(marks(1), ["0", "1ms"]);
    assert_eq!(marks(95_000), ["0", "15s", "30s", "45s", "1m", "1m15s", "1m30s"]);
    assert_eq!(marks(4 * 3_600_000), ["0", "30m", "1h", "1h30m", "2h", "2h30m", "3h", "3h30m", "4h"]);
    for end in [1, 7, 999, 1_000, 61_234, 10_000_000] {
        let ticks = axis(end);
        assert!(ticks.len() >= 2 && ticks.len() <= 9, "{end}: {ticks:?}");
        assert!(ticks.last().unwrap().ms <= end && ticks[0].ms == 0, "{end}: {ticks:?}");
    }
}

#[test]
fn report_html_body() {
    // The page's markup without its style and script, which only a browser can check.
    let dir = tempfile::tempdir().unwrap();
    let r = report_with_work(dir.path());
    let page = render(&r, dir.path()).unwrap();
    let body = page.split("<body>").nth(1).unwrap().split("<script nonce=").next().unwrap();
    insta::assert_snapshot!("report_html_body", body.replace(&dir.path().display().to_string(), "[DIR]"));
}
