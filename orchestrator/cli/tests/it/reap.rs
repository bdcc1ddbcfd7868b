//! Nothing outlives its agent and no secret reaches one, through the real binary: a
//! tool host killed from outside or by its own command fails its agent with the reason
//! and leaves no process behind; the coordinator's API keys are in no child's
//! environment, not in `/proc/<coordinator>/environ`, and not in the run directory.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::{Fixture, Run, processes_left};

/// Pids of the processes whose command line is exactly `cmdline` (NUL-separated).
fn running(cmdline: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let text = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let text = String::from_utf8_lossy(&text).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, r)| r.trim_start().starts_with('Z')));
        if text.trim_end() == cmdline && !zombie {
            found.push(entry.file_name().to_string_lossy().into_owned());
        }
    }
    found
}

/// Waits up to 5 s for no process to run `cmdline`.
fn survivors(cmdline: &str) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = running(cmdline);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

const ONE_BASH_AGENT: &str = r#"
version: 1
name: hostdeath
agents:
  worker:
    prompt: Work.
    tools: [Bash]
    limits: { max_turns: 4, timeout: 1m }
integrate: branches
"#;

#[test]
fn a_tool_host_killed_from_outside_fails_its_agent_and_leaves_no_survivor() {
    let fx = Fixture::new("t-hostkill", &[("a.txt", "a\n")]);
    let script = r#"
version: 1
agents:
  worker:
    - tool_calls: [{name: Bash, input: {command: "echo x > wip.txt; sleep 6171 >/dev/null 2>&1 & setsid sleep 6172 >/dev/null 2>&1 & echo $PPID > host.pid; sleep 30"}}]
    - text: never
"#;
    let mut child = fx.command(ONE_BASH_AGENT, script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid_file = fx.out.join("worktrees/worker/host.pid");
    let deadline = Instant::now() + Duration::from_secs(20);
    let host: i32 = loop {
        let pid = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok());
        if let Some(pid) = pid.filter(|_| !running("sleep 6172").is_empty() && !running("sleep 6171").is_empty()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    let cmdline = std::fs::read(format!("/proc/{host}/cmdline")).unwrap();
    assert!(String::from_utf8_lossy(&cmdline).contains("__tool-host"), "{host} is not the tool host");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(host), nix::sys::signal::Signal::SIGKILL).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() });
    let worker = run.agent("worker");
    assert_ne!(worker["status"], "succeeded", "{worker:#}");
    assert!(["failed", "partial"].contains(&worker["status"].as_str().unwrap()), "{worker:#}");
    let reason = worker["reason"].as_str().unwrap();
    assert!(reason.contains("tool host") && reason.contains("signal 9"), "{reason}");
    assert!(worker["killed_processes"].as_u64().unwrap() >= 1, "{worker:#}");
    assert_ne!(status.code(), Some(0));
    for cmd in ["sleep 6171", "sleep 6172", "sleep 30"] {
        assert_eq!(survivors(cmd), Vec::<String>::new(), "`{cmd}` outlived its tool host");
    }
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
    let md = std::fs::read_to_string(fx.out.join("report.md")).unwrap();
    assert!(md.contains("tool host"), "{md}");
}

#[test]
fn a_command_that_kills_its_tool_host_leaves_no_survivor() {
    let fx = Fixture::new("t-selfkill", &[("a.txt", "a\n")]);
    let script = r#"
version: 1
agents:
  worker:
    - tool_calls: [{name: Bash, input: {command: "setsid sleep 6173 >/dev/null 2>&1 & sleep 6174 >/dev/null 2>&1 & sleep 0.3; kill -9 $PPID; echo kill=$?; sleep 1"}}]
    - text: done
"#;
    let run = fx.run(ONE_BASH_AGENT, script, &[]);
    let worker = run.agent("worker");
    let transcript = std::fs::read_to_string(fx.out.join("transcripts/worker.jsonl")).unwrap();
    if worker["status"] == "succeeded" {
        // Only if the kill itself was refused (the host is out of the command's reach).
        assert!(transcript.contains("kill=1"), "the host died and the agent succeeded: {worker:#}\n{transcript}");
    } else {
        let reason = worker["reason"].as_str().unwrap();
        assert!(reason.contains("tool host"), "{reason}");
    }
    for cmd in ["sleep 6173", "sleep 6174"] {
        assert_eq!(survivors(cmd), Vec::<String>::new(), "`{cmd}` outlived its agent");
    }
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

fn assert_nowhere_under(dir: &Path, secret: &str) {
    for entry in walk(dir) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&bytes).contains(secret), "the secret is in {}", entry.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => files.extend(walk(&path)),
            Ok(t) if t.is_file() => files.push(path),
            _ => {}
        }
    }
    files
}

#[test]
fn an_unconfined_agent_finds_no_key_in_its_environment_or_the_coordinators() {
    let fx = Fixture::new("t-secrets", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: secrets
agents:
  snoop:
    prompt: Look around.
    tools: [Bash]
    sandbox: { backend: none }
integrate: none
"#;
    // The host's parent is the coordinator.
    let snoop = "c=$(awk '/^PPid/{print $2}' /proc/$PPID/status); echo coordinator=$c; \
                 tr '\\0' '\\n' < /proc/$c/environ; echo; env; tr '\\0' '\\n' < /proc/$PPID/environ";
    let script = format!(
        "version: 1\nagents:\n  snoop:\n    - tool_calls: [{{name: Bash, input: {{command: {}}}}}]\n    - text: done\n",
        serde_json::to_string(snoop).unwrap()
    );
    let mut cmd = fx.command(workflow, &script);
    cmd.env("ANTHROPIC_API_KEY", "sk-hardprocs-anthropic")
        .env("GITHUB_TOKEN", "gh-hardprocs-token")
        .env("OPENAI_API_KEY", "sk-hardprocs-openai");
    let out = cmd.output().unwrap();
    let run = Run::from_output(&fx.out, out);
    let transcript = std::fs::read_to_string(fx.out.join("transcripts/snoop.jsonl")).unwrap();
    assert!(transcript.contains("coordinator="), "the command did not run: {transcript}");
    for secret in ["sk-hardprocs-anthropic", "gh-hardprocs-token", "sk-hardprocs-openai"] {
        assert!(!transcript.contains(secret), "{secret} reached the agent: {transcript}");
        assert_nowhere_under(&fx.out, secret);
    }
    assert_eq!(run.agent("snoop")["status"], "succeeded");
}
