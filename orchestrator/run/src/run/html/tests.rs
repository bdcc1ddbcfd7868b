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
