#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // benchmark code

//! `bench-publish`: what publishing a 30-comment review adds to a run (issue 13). The
//! numbers live in `BENCHMARKS.md`, section "Publishing"; `tests/bench/publish.sh`
//! builds orch and this binary in release and runs it.
//!
//! The same review workflow (one agent whose structured output holds `--inline` (30)
//! findings on lines of the pull request's diff and `--off-diff` (6) findings outside
//! it; `publish.review` with `max_comments: 30`) runs through the `orch` binary given
//! by `--orch`, with the scripted provider, `--runs` (10) times with `--publish off`
//! and as many with `--publish on`, interleaved (off, on, off, on, ...) after one
//! warm-up of each, so both meet the same load. Every run gets a fresh fake GitHub
//! server (in this process) holding the pull request, so every `on` run posts a new
//! review instead of finding the last one. Reported: the median wall time of the
//! process with publishing off and on, their difference, and for the `on` runs the
//! median span from the first request the fake server received to its last answer
//! (the HTTP part of the step) and the number of requests. It exits non-zero when an
//! `on` run did not post one review with the expected inline comments, or a run failed.
//!
//! ```text
//! cargo run --release -p orch-testkit --bin bench-publish -- --orch target/release/orch [--runs 10 --inline 30 --off-diff 6]
//! ```

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use orch_testkit::github::{Access, FakeGitHub, PullSpec};
use serde_json::{Value, json};

const TOKEN: &str = "ghs_benchpublish0123456789";
const REPO: &str = "acme/app";

struct Args {
    orch: PathBuf,
    runs: usize,
    inline: usize,
    off_diff: usize,
}

fn args() -> Args {
    let mut a = Args { orch: PathBuf::new(), runs: 10, inline: 30, off_diff: 6 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", argv[i]));
        match argv[i].as_str() {
            "--orch" => a.orch = PathBuf::from(value),
            "--runs" => a.runs = value.parse().unwrap(),
            "--inline" => a.inline = value.parse().unwrap(),
            "--off-diff" => a.off_diff = value.parse().unwrap(),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    assert!(a.orch.is_file(), "--orch must name the orch binary (got {:?})", a.orch);
    // Runs start in a scratch directory: a relative path would not be found there.
    a.orch = std::fs::canonicalize(&a.orch).unwrap();
    assert!(a.runs > 0, "--runs must be at least 1");
    a
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@example.com"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The world every run shares: the repository, the workflow, the script, the event.
struct World {
    dir: tempfile::TempDir,
    repo: PathBuf,
    workflow: PathBuf,
    script: PathBuf,
    event: PathBuf,
    head: String,
    patch: String,
}

fn world(a: &Args) -> World {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir_all(repo.join("src")).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    // The pull request adds lines 1..=inline of src/lib.rs; the file is longer, so the
    // off-diff findings point at lines that exist but are not in the diff.
    let lines = a.inline + 20 + a.off_diff;
    let text: String = (1..=lines).map(|i| format!("pub fn f{i}() -> u32 {{ {i} }}\n")).collect();
    std::fs::write(repo.join("src/lib.rs"), text).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "fixture"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    let mut patch = format!("@@ -0,0 +1,{} @@\n", a.inline);
    for i in 1..=a.inline {
        patch.push_str(&format!("+pub fn f{i}() -> u32 {{ {i} }}\n"));
    }
    let mut findings: Vec<Value> = (1..=a.inline)
        .map(|i| {
            json!({"path": "src/lib.rs", "line": i, "severity": if i % 3 == 0 { "error" } else { "warning" },
                   "message": format!("f{i} returns a constant; finding {i} of the benchmark"),
                   "suggestion": format!("pub fn f{i}() -> u32 {{ compute({i}) }}")})
        })
        .collect();
    findings.extend((0..a.off_diff).map(|k| {
        json!({"path": "src/lib.rs", "line": a.inline + 20 + k + 1, "severity": "note",
               "message": format!("off-diff finding {k}")})
    }));
    let workflow = dir.path().join("workflow.yaml");
    std::fs::write(
        &workflow,
        r#"version: 1
name: bench-review
agents:
  review:
    prompt: Review the pull request.
    output:
      schema:
        type: object
        required: [findings]
        properties:
          findings: { type: array }
integrate: none
publish:
  review: { event: COMMENT, max_comments: 30 }
"#,
    )
    .unwrap();
    let script = dir.path().join("script.yaml");
    let answer = serde_json::to_string(&json!({ "findings": findings })).unwrap();
    std::fs::write(
        &script,
        format!("version: 1\nagents:\n  review:\n    - text: |\n        Review done.\n        ```json\n        {answer}\n        ```\n"),
    )
    .unwrap();
    let event = dir.path().join("event.json");
    let payload = json!({"pull_request": {"number": 7, "head": {"sha": head, "repo": {"full_name": REPO}},
                         "base": {"repo": {"full_name": REPO}}}, "repository": {"default_branch": "main"}});
    std::fs::write(&event, payload.to_string()).unwrap();
    World { dir, repo, workflow, script, event, head, patch }
}

/// One run's measures.
struct Measure {
    wall: Duration,
    /// First request received to last answer (publishing on).
    span: Option<Duration>,
    requests: usize,
}

async fn one_run(a: &Args, w: &World, publish: bool, n: usize) -> Measure {
    let gh = FakeGitHub::start().await;
    gh.add_token(TOKEN, Access::Write);
    gh.add_pull(REPO, PullSpec::new(7, &w.head).file("src/lib.rs", &w.patch));
    let out = w.dir.path().join(format!("run-{n}"));
    let mut cmd = Command::new(&a.orch);
    cmd.current_dir(w.dir.path())
        .arg("run")
        .arg(&w.workflow)
        .args(["--provider", "scripted", "--script"])
        .arg(&w.script)
        .arg("--repo")
        .arg(&w.repo)
        .arg("--out")
        .arg(&out)
        .args(["--run-id", &format!("bench-{n}"), "--trust-repo-config"])
        .args(["--publish", if publish { "on" } else { "off" }])
        .env("GITHUB_API_URL", gh.url())
        .env("GITHUB_REPOSITORY", REPO)
        .env("GITHUB_EVENT_NAME", "pull_request")
        .env("GITHUB_EVENT_PATH", &w.event)
        .env("GITHUB_SHA", &w.head)
        .env("GITHUB_REF", "refs/pull/7/merge")
        .env("GITHUB_TOKEN", TOKEN)
        .env("NO_COLOR", "1");
    for var in ["ANTHROPIC_API_KEY", "ORCH_PROVIDER", "ORCH_MODEL", "ORCH_GITHUB_TOKEN", "GITHUB_ACTIONS", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    let start = Instant::now();
    let output = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let wall = start.elapsed();
    assert!(output.status.success(), "run {n} (publish {publish}) failed: {}", String::from_utf8_lossy(&output.stderr));
    let requests = gh.requests();
    let reviews = gh.reviews(REPO, 7);
    if publish {
        assert_eq!(reviews.len(), 1, "run {n}: expected one review, got {}", reviews.len());
        assert_eq!(reviews[0].comments.len(), a.inline.min(30), "run {n}: inline comments");
    } else {
        assert!(requests.is_empty(), "run {n}: publishing off sent {} request(s)", requests.len());
    }
    let span = match (requests.first(), requests.iter().map(|r| r.answered).max()) {
        (Some(first), Some(last)) => Some(last.duration_since(first.received)),
        _ => None,
    };
    let _ = std::fs::remove_dir_all(&out);
    Measure { wall, span, requests: requests.len() }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n == 0 {
        return Duration::ZERO;
    }
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2 }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main]
async fn main() {
    let a = args();
    let w = world(&a);
    eprintln!("bench-publish: warm-up");
    one_run(&a, &w, false, 0).await;
    one_run(&a, &w, true, 1).await;
    let (mut off, mut on, mut spans, mut requests) = (Vec::new(), Vec::new(), Vec::new(), 0);
    for i in 0..a.runs {
        off.push(one_run(&a, &w, false, 2 + 2 * i).await.wall);
        let m = one_run(&a, &w, true, 3 + 2 * i).await;
        on.push(m.wall);
        spans.extend(m.span);
        requests = m.requests;
        eprintln!("bench-publish: run {}/{}: off {} on {}", i + 1, a.runs, ms(off[i]), ms(on[i]));
    }
    let (off_m, on_m) = (median(off), median(on));
    let added = on_m.saturating_sub(off_m);
    println!(
        "| review | runs | `--publish off` (median) | `--publish on` (median) | added | HTTP span of the step (median) | requests |"
    );
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {} inline comments, {} off-diff findings | {} | {} | {} | {} | {} | {} |",
        a.inline.min(30),
        a.off_diff + a.inline.saturating_sub(30),
        a.runs,
        ms(off_m),
        ms(on_m),
        ms(added),
        ms(median(spans)),
        requests
    );
    if added >= Duration::from_secs(1) {
        eprintln!("bench-publish: publishing added {} (the target is under 1 s)", ms(added));
        std::process::exit(1);
    }
}
