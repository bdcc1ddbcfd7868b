//! One run per run id (issue 26): a second `orch run` with the `--run-id` of a run
//! that is still going is refused at start (exit 2, naming the run id), before it
//! makes its run directory, and the first run finishes untouched. Its lock goes with
//! the process: after the first run ends, the id can be used again.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Fixture, Run, orch};

const WORKFLOW: &str = r#"
version: 1
name: run-ids
agents:
  a: { prompt: Work., tools: [Bash] }
"#;

/// `a` sleeps in its first command until `go` exists next to the repository, then
/// writes its file.
fn script(fx: &Fixture) -> String {
    let go = fx.dir.path().join("go");
    format!(
        "version: 1\nagents:\n  a:\n    - tool_calls: [{{name: Bash, input: {{command: \"touch started; while [ ! -e \
         {go} ]; do sleep 0.1; done; echo a > a.txt\"}}}}]\n    - text: a done\n",
        go = go.display()
    )
}

/// `orch run` as the fixture's, into `out`.
fn run_into(fx: &Fixture, out: &Path) -> std::process::Output {
    orch()
        .current_dir(fx.dir.path())
        .arg("run")
        .arg(fx.dir.path().join("workflow.yaml"))
        .args(["--provider", "scripted", "--script"])
        .arg(fx.dir.path().join("script.yaml"))
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(out)
        .args(["--run-id", &fx.run_id])
        .env("XDG_STATE_HOME", fx.dir.path().join("state"))
        .output()
        .unwrap()
}

#[test]
fn a_second_run_with_a_run_id_in_use_is_refused() {
    let fx = Fixture::new("t-run-id-in-use", &[("x.txt", "x\n")]);
    let script = script(&fx);
    let mut first = fx.command(WORKFLOW, &script).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fx.out.join("worktrees/a/started").exists() {
        assert!(Instant::now() < deadline, "the first run's agent never started");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Same run id, another run directory.
    let second_out = fx.dir.path().join("out2");
    let out = run_into(&fx, &second_out);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the run id `t-run-id-in-use` is in use by another orch run"), "{stderr}");
    assert!(!second_out.exists(), "the refused run made its run directory");

    std::fs::write(fx.dir.path().join("go"), "").unwrap();
    let status = first.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(first.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() });
    run.expect_code(0);
    assert_eq!(fx.show(&fx.branch("a"), "a.txt"), "a\n");

    // The first run is over: its id is free again. (Its branch stays in the repository;
    // the next run with that id would refuse to move it to another commit, which it
    // makes whenever the two runs commit in different seconds, so it goes first.)
    crate::support::git(&fx.repo, &["branch", "-D", &fx.branch("a")]);
    let third_out = fx.dir.path().join("out3");
    let out = run_into(&fx, &third_out);
    let report = std::fs::read_to_string(third_out.join("report.md")).unwrap_or_default();
    assert_eq!(out.status.code(), Some(0), "{}\n{report}", String::from_utf8_lossy(&out.stderr));
}
