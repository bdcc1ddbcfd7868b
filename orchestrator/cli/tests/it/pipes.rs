//! Closed pipes (issue 26): a reader of stdout or stderr that goes away (`orch run … 2>&1
//! | head -2`, `orch exec … | head -1`) is not an error. orch stops writing there, never
//! panics (exit 101), and exits with the run's own code, its work committed and its
//! report complete.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::support::{Fixture, git, orch};

const WORKFLOW: &str = r#"
version: 1
name: pipes
defaults:
  tools: [Bash]
agents:
  done: { prompt: Work. }
  partial: { prompt: Work more., limits: { max_turns: 1 } }
"#;

/// `done` writes a file and answers in several lines; `partial` writes a file and stops
/// at its turn limit, so the run's exit code is 4 (partial), not 0.
const SCRIPT: &str = r#"
version: 1
agents:
  done:
    - tool_calls: [{name: Bash, input: {command: "echo done > done.txt; seq 1 200"}}]
    - text: "line one\nline two\nline three"
  partial:
    - tool_calls: [{name: Bash, input: {command: "echo partial > partial.txt"}}]
    - text: never asked
  synthesis:
    - text: "both\nagents\nreported"
"#;

/// A pipe whose reader is already gone: every write to it fails with EPIPE.
fn closed_pipe() -> Stdio {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    drop(read);
    Stdio::from(write)
}

/// The run finished as it would have with its output read: partial, exit 4 in the
/// report, both agents' work on their branches, the report files written.
#[track_caller]
fn run_complete(fx: &Fixture, code: Option<i32>, stderr: &str) {
    assert_ne!(code, Some(101), "orch panicked:\n{stderr}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fx.out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["status"], "partial", "{report:#}");
    assert_eq!(report["exit_code"], 4, "{report:#}");
    assert_eq!(code, Some(4), "the exit code is not the run's:\n{stderr}");
    assert_eq!(git(&fx.repo, &["show", &format!("orch/{}/done:done.txt", fx.run_id)]), "done\n");
    assert_eq!(git(&fx.repo, &["show", &format!("orch/{}/partial:partial.txt", fx.run_id)]), "partial\n");
    for file in ["report.md", "report.html", "transcripts/done.jsonl", "transcripts/synthesis.jsonl"] {
        assert!(fx.out.join(file).exists(), "{file} is missing");
    }
}

#[test]
fn run_with_stderr_closed_exits_with_the_runs_code() {
    let fx = Fixture::new("t-pipe-err", &[("a.txt", "a\n")]);
    let out = fx.command(WORKFLOW, SCRIPT).stdout(Stdio::piped()).stderr(closed_pipe()).output().unwrap();
    run_complete(&fx, out.status.code(), "(stderr was closed)");
    // stdout still gets the answer.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "both\nagents\nreported\n");
}

#[test]
fn run_with_stdout_closed_exits_with_the_runs_code() {
    let fx = Fixture::new("t-pipe-out", &[("a.txt", "a\n")]);
    let out = fx.command(WORKFLOW, SCRIPT).arg("--json").stdout(closed_pipe()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    run_complete(&fx, out.status.code(), &stderr);
    assert!(!stderr.contains("panicked") && !stderr.contains("error:"), "{stderr}");
    assert!(stderr.contains("orch: run t-pipe-out finished with partial agents"), "{stderr}");
}

/// The shell pipeline of the issue: `2>&1 | head -2`, with `pipefail` giving orch's code.
#[test]
fn run_into_head_exits_with_the_runs_code() {
    let fx = Fixture::new("t-pipe-head", &[("a.txt", "a\n")]);
    let cmd = fx.command(WORKFLOW, SCRIPT);
    let out = pipeline(&cmd, "2>&1 | head -2");
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(shown.lines().count(), 2, "{shown}");
    run_complete(&fx, out.status.code(), &String::from_utf8_lossy(&out.stderr));
}

/// `bash -o pipefail -c '<cmd> <tail>'`, with `cmd`'s directory and environment.
fn pipeline(cmd: &Command, tail: &str) -> std::process::Output {
    let quote = |s: &std::ffi::OsStr| format!("'{}'", s.to_string_lossy().replace('\'', r"'\''"));
    let line = std::iter::once(quote(cmd.get_program())).chain(cmd.get_args().map(quote)).collect::<Vec<_>>().join(" ");
    let mut shell = Command::new("bash");
    shell.args(["-o", "pipefail", "-c", &format!("{line} {tail}")]);
    if let Some(dir) = cmd.get_current_dir() {
        shell.current_dir(dir);
    }
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => shell.env(k, v),
            None => shell.env_remove(k),
        };
    }
    shell.output().unwrap()
}

const EXEC_SCRIPT: &str = r#"
version: 1
agents:
  main:
    - tool_calls: [{name: Bash, input: {command: "echo made > made.txt; seq 1 200"}}]
    - text: "first\nsecond\nthird"
"#;

fn exec(repo: &Path, script: &Path, extra: &[&str]) -> Command {
    let mut cmd = orch();
    cmd.current_dir(repo)
        .args(["exec", "--provider", "scripted", "--tools", "Bash", "--script"])
        .arg(script)
        .args(extra)
        .arg("Make a file.");
    cmd
}

#[test]
fn exec_with_a_closed_stdout_or_stderr_exits_0_and_does_its_work() {
    for (case, format) in [("stdout", "text"), ("stdout", "stream-json"), ("stderr", "text"), ("head", "text")] {
        let fx = Fixture::new("t-pipe-exec", &[("a.txt", "a\n")]);
        let script = fx.write("script.yaml", EXEC_SCRIPT);
        let mut cmd = exec(&fx.repo, &script, &["--output-format", format]);
        let out = match case {
            "stdout" => cmd.stdout(closed_pipe()).output().unwrap(),
            "stderr" => cmd.stdout(Stdio::piped()).stderr(closed_pipe()).output().unwrap(),
            _ => pipeline(&cmd, "| head -1"),
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{case} {format}: {stderr}");
        assert_eq!(std::fs::read_to_string(fx.repo.join("made.txt")).unwrap(), "made\n", "{case} {format}");
        match case {
            "stderr" => assert_eq!(String::from_utf8_lossy(&out.stdout), "first\nsecond\nthird\n"),
            "head" => assert_eq!(String::from_utf8_lossy(&out.stdout), "first\n"),
            _ => assert!(!stderr.contains("panicked"), "{stderr}"),
        }
    }
}
