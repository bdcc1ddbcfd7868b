//! Hooks fail closed: a hook runs as `sh -c`, and when the program it names (`bash`,
//! an interpreter on a script's `#!` line, any program) is not in the agent's sandbox,
//! the agent does not start: exit 3 with a message that names the hook and what it
//! lacks, no request reaches the model and no file is written. Checked in the container
//! backend with `orch-test:busybox` (no bash) against `orch-test:tools` (bash), where
//! the same hooks run, time out or block at runtime by Claude Code's rules; and in the
//! default backend with a program that exists nowhere.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support::{Fixture, Run, git};

use std::os::unix::fs::PermissionsExt;

use orch_testkit::mock::{MockServer, Step};
use serde_json::{Value, json};

fn docker_available() -> bool {
    if std::env::var_os("ORCH_SKIP_DOCKER_TESTS").is_some() {
        eprintln!("skipped: ORCH_SKIP_DOCKER_TESTS is set");
        return false;
    }
    let ok = std::process::Command::new("docker").args(["image", "inspect", "orch-test:tools"]).output();
    assert!(
        ok.is_ok_and(|o| o.status.success()),
        "the container tests need a Docker engine and the images orch-test:busybox and orch-test:tools: run \
         `bash .ci/docker.sh` (or set ORCH_SKIP_DOCKER_TESTS=1 to skip them)"
    );
    true
}

/// A repository with a hook script whose `#!` line asks for bash, committed executable.
fn fixture(run_id: &str) -> Fixture {
    let fx = Fixture::new(run_id, &[("hooks/guard.sh", "#!/bin/bash\necho \"guarded $((1 + 1))\" >> guard.log\n")]);
    std::fs::set_permissions(fx.repo.join("hooks/guard.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    git(&fx.repo, &["add", "-A"]);
    git(&fx.repo, &["commit", "-q", "-m", "executable hook"]);
    fx
}

/// Runs `workflow` against a mock model server that answers `steps`; the run and every
/// request the server got.
async fn run_against_mock(fx: &Fixture, workflow: &str, steps: Vec<Step>) -> (Run, Vec<Value>) {
    let mock = MockServer::start().await;
    mock.push_all(steps);
    let mut cmd = fx.mock_command(workflow, &mock.url());
    cmd.env_remove("GITHUB_EVENT_NAME").env_remove("GITHUB_ACTIONS");
    let run = fx.run_off_runtime(cmd).await;
    let requests = mock.requests().iter().map(|r| r.json.clone()).collect();
    (run, requests)
}

const WORKFLOW: &str = r#"
version: 1
name: hooks-closed
defaults:
  tools: [Bash, Write]
  limits: { max_turns: 6, timeout: 3m }
  sandbox: { backend: container, image: "IMAGE" }
hooks:
  SessionStart:
    - hooks: [{ command: "echo started > session-hook.txt" }]
  PreToolUse:
    - matcher: Bash
      hooks:
        - { command: "bash -c 'echo \"bash $BASH_VERSION\" >> bash-hook.log'" }
        - { command: "\"$CLAUDE_PROJECT_DIR\"/hooks/guard.sh" }
        - { command: "sleep 20", timeout: 1 }
        - { command: "kill -KILL $$" }
    - matcher: Write
      hooks: [{ command: "echo 'no writes today' >&2; exit 2" }]
agents:
  a:
    prompt: Run a command, then write a file.
integrate: branches
"#;

fn steps() -> Vec<Step> {
    vec![
        Step::tool("Bash", json!({"command": "echo ran > bash-ran.txt"})),
        Step::tool("Write", json!({"file_path": "written.txt", "content": "x\n"})),
        Step::text("Done."),
        Step::text("Summary."),
    ]
}

/// In an image without bash, a hook that names `bash` (or a script whose `#!` line
/// does) stops the agent before it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_without_bash_stops_an_agent_whose_hooks_need_it() {
    if !docker_available() {
        return;
    }
    let fx = fixture("t-hooks-closed");
    let (run, requests) = run_against_mock(&fx, &WORKFLOW.replace("IMAGE", "orch-test:busybox"), steps()).await;
    run.expect_code(3);
    // The agent never asked the model anything.
    let agent_requests: Vec<&Value> =
        requests.iter().filter(|r| r.to_string().contains("Run a command, then write a file.")).collect();
    assert!(agent_requests.is_empty(), "{agent_requests:#?}");
    // A clear reason, on stderr and in the report: each hook and what it lacks.
    let a = run.agent("a");
    assert_eq!(a["status"], "failed", "{a:#}");
    let reason = a["reason"].as_str().unwrap();
    for part in [
        "agent `a` was not started because its hooks cannot run",
        "the hook `bash -c 'echo \"bash $BASH_VERSION\" >> bash-hook.log'` needs `bash` (its first word)",
        "needs `/bin/bash` (the `#!` line of",
        "the container image `orch-test:busybox` does not have",
    ] {
        assert!(reason.contains(part), "{part}\nin: {reason}");
    }
    assert!(run.stderr.contains("agent `a` was not started because its hooks cannot run"), "{}", run.stderr);
    // Nothing was written: no hook ran, no tool ran.
    let worktree = fx.out.join("worktrees/a");
    assert!(worktree.join("hooks/guard.sh").exists(), "the failed agent's worktree is kept");
    for file in ["session-hook.txt", "bash-hook.log", "guard.log", "bash-ran.txt", "written.txt"] {
        assert!(!worktree.join(file).exists(), "{file} was written");
    }
}

/// The same hooks in an image with bash: they run, and at runtime follow Claude Code's
/// rules: a hook that times out or is killed is reported and blocks nothing, exit 2
/// blocks the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_with_bash_runs_the_same_hooks_by_claude_codes_rules() {
    if !docker_available() {
        return;
    }
    let fx = fixture("t-hooks-open");
    let (run, requests) = run_against_mock(&fx, &WORKFLOW.replace("IMAGE", "orch-test:tools"), steps()).await;
    run.expect_code(0);
    assert!(!requests.is_empty());
    let results = run.tool_results("a");
    assert_eq!(results.len(), 2, "{results:?}");
    // The timed-out hook did not block the Bash call; exit 2 blocked the Write.
    assert!(!results[0].1, "{results:?}");
    assert!(results[1].1 && results[1].2.contains("no writes today"), "{results:?}");
    let outcomes: Vec<String> = run
        .events("a")
        .into_iter()
        .filter(|e| e["type"] == "hook")
        .map(|e| format!("{}: {}", e["command"].as_str().unwrap(), e["outcome"].as_str().unwrap()))
        .collect();
    assert!(outcomes.iter().any(|o| o.starts_with("sleep 20: timed out after 1s")), "{outcomes:#?}");
    assert!(outcomes.iter().any(|o| o.starts_with("kill -KILL $$: killed by a signal")), "{outcomes:#?}");
    let branch = fx.branch("a");
    assert_eq!(fx.show(&branch, "session-hook.txt").trim(), "started");
    assert!(fx.show(&branch, "bash-hook.log").starts_with("bash 5"), "{}", fx.show(&branch, "bash-hook.log"));
    assert_eq!(fx.show(&branch, "guard.log").trim(), "guarded 2");
    assert_eq!(fx.show(&branch, "bash-ran.txt").trim(), "ran");
    let files = git(&fx.repo, &["ls-tree", "-r", "--name-only", &branch]);
    assert!(!files.contains("written.txt"), "{files}");
}

const SH_ONLY: &str = r#"
version: 1
name: hooks-sh
defaults:
  tools: [Write]
  limits: { max_turns: 4, timeout: 3m }
  sandbox: { backend: container, image: "orch-test:busybox" }
hooks:
  SessionStart:
    - hooks: [{ command: "echo started > session-hook.txt" }]
  PostToolUse:
    - matcher: Write
      hooks: [{ command: "cat > post.json; printf '%s' \"$(wc -c < post.json)\" > post-size.txt" }]
agents:
  a:
    prompt: Write a file.
integrate: branches
"#;

/// Hooks that need only `sh` run in busybox: failing closed does not refuse them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sh_hooks_run_in_an_image_without_bash() {
    if !docker_available() {
        return;
    }
    let fx = fixture("t-hooks-sh");
    let steps = vec![
        Step::tool("Write", json!({"file_path": "written.txt", "content": "x\n"})),
        Step::text("Done."),
        Step::text("Summary."),
    ];
    let (run, _) = run_against_mock(&fx, SH_ONLY, steps).await;
    run.expect_code(0);
    let branch = fx.branch("a");
    assert_eq!(fx.show(&branch, "session-hook.txt").trim(), "started");
    assert_eq!(fx.show(&branch, "written.txt"), "x\n");
    let size: u64 = fx.show(&branch, "post-size.txt").trim().parse().unwrap();
    assert!(size > 20, "{size}");
}

const MISSING: &str = r#"
version: 1
name: hooks-missing
defaults:
  tools: [Write]
  limits: { max_turns: 4, timeout: 1m }
hooks:
  Stop:
    - hooks: [{ command: "CHECK=1 no-such-interpreter-for-orch hook.py" }]
agents:
  a:
    prompt: Write a file.
integrate: branches
"#;

/// In the default backend too: a hook whose program exists nowhere stops its agent
/// before the first model call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_program_missing_from_the_sandbox_stops_the_agent() {
    let fx = Fixture::new("t-hooks-missing", &[("f.txt", "f\n")]);
    let steps = vec![
        Step::tool("Write", json!({"file_path": "written.txt", "content": "x\n"})),
        Step::text("Done."),
        Step::text("Summary."),
    ];
    let (run, requests) = run_against_mock(&fx, MISSING, steps).await;
    run.expect_code(3);
    let agent_requests = requests.iter().filter(|r| r.to_string().contains("Write a file.")).count();
    assert_eq!(agent_requests, 0, "{requests:#?}");
    let reason = run.agent("a")["reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("needs `no-such-interpreter-for-orch` (its first word), which the agent's sandbox"),
        "{reason}"
    );
    assert!(!fx.out.join("worktrees/a/written.txt").exists());
}
