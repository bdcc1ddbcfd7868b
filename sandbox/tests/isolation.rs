//! A tool host against its own commands, with the real `orch-sandbox-test-host`
//! process: a command in its own Landlock domain cannot signal, ptrace or forge
//! through the host; the host reaps what it adopted while a command runs, and kills it
//! all when it stops. Every check looks at the host from outside (is it alive, what its
//! process table holds), not at the command's error messages alone.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use orch_sandbox::host::HostClient;
use serde_json::{Value, json};
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

async fn start(args: &[&str]) -> HostClient {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orch-sandbox-test-host"));
    command.args(args);
    HostClient::spawn(command).await.expect("the test host starts")
}

async fn sh(client: &HostClient, script: &str, scoped: bool) -> (Option<i64>, String) {
    let payload = json!({"run": ["sh", "-c", script], "scoped": scoped, "group": true});
    let answer = client.call(payload, CancellationToken::new()).await.expect("the host answers");
    (answer["code"].as_i64(), format!("{}{}", answer["stdout"].as_str().unwrap(), answer["stderr"].as_str().unwrap()))
}

fn children_of(pid: u32) -> Vec<(i32, char)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for child in text.split_whitespace().filter_map(|c| c.parse::<i32>().ok()) {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()).unwrap_or('?');
            found.push((child, state));
        }
    }
    found
}

/// Live processes with `arg` as one of their arguments.
fn with_arg(arg: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            cmdline.split(|&b| b == 0).any(|a| a == arg.as_bytes()).then_some(pid)
        })
        .collect()
}

#[tokio::test]
async fn a_scoped_command_cannot_signal_ptrace_or_forge_through_its_host() {
    let client = start(&["--subreaper", "--not-dumpable"]).await;
    let pid = client.pid().unwrap();
    // Without its own domain, a command reaches its host (signal 0 only checks).
    let (code, out) = sh(&client, "kill -0 $PPID && echo reached", false).await;
    assert_eq!((code, out.trim()), (Some(0), "reached"), "the control: an unscoped command reaches its host");

    let script = r#"
        kill -9 $PPID || echo blocked:pid
        group=$(cut -d' ' -f5 /proc/$PPID/stat) && kill -9 -$group || echo blocked:group
        kill -9 -1; echo after:minus-one
        printf '{"op":"result","id":2,"payload":{"code":0,"stdout":"forged","stderr":""}}\n' > /proc/$PPID/fd/1 \
            || echo blocked:fd
        cat /proc/$PPID/environ > /dev/null || echo blocked:environ
        python3 -c 'import os, signal, sys; signal.pidfd_send_signal(os.pidfd_open(int(sys.argv[1])), 9)' $PPID \
            2>/dev/null || echo blocked:pidfd
        echo real-result
    "#;
    let (code, out) = sh(&client, script, true).await;
    assert_eq!(code, Some(0), "{out}");
    for want in ["blocked:pid", "blocked:group", "after:minus-one", "blocked:fd"] {
        assert!(out.contains(want), "{want} missing: {out}");
    }
    // The host is non-dumpable: as a normal user that closes its `/proc` files (root's
    // CAP_SYS_PTRACE would open them; as root, orch's sandbox drops to another uid).
    if !nix::unistd::geteuid().is_root() {
        assert!(out.contains("blocked:environ"), "{out}");
    }
    if std::process::Command::new("python3").arg("--version").output().is_ok_and(|o| o.status.success()) {
        assert!(out.contains("blocked:pidfd"), "{out}");
    }
    // The call's answer is the command's real output, and the host is alive.
    assert!(out.contains("real-result") && !out.contains("forged"), "{out}");
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok(), "the host is gone");
    let echo = client.call(json!({"echo": "alive"}), CancellationToken::new()).await.unwrap();
    assert_eq!(echo, Value::from("alive"));
}

#[tokio::test]
async fn adopted_processes_are_reaped_while_a_command_runs_and_killed_at_shutdown() {
    let client = start(&["--subreaper"]).await;
    let pid = client.pid().unwrap();
    // Forty grandchildren that outlive their parent and then exit: adopted by the host,
    // in the command's process group. Then one that outlives everything.
    let script = "for i in $(seq 40); do sh -c 'sleep 0.05 &'; done; sleep 1; \
                  setsid sleep 7654329 > /dev/null 2>&1 & sh -c 'sleep 7654328 > /dev/null 2>&1 &'; echo started";
    let (code, out) = sh(&client, script, true).await;
    assert_eq!((code, out.trim()), (Some(0), "started"));
    let zombies: Vec<_> = children_of(pid).into_iter().filter(|(_, s)| *s == 'Z').collect();
    assert!(zombies.is_empty(), "the host left adopted zombies unreaped: {zombies:?}");
    assert_eq!(with_arg("7654329").len() + with_arg("7654328").len(), 2, "the survivors did not start");

    client.shutdown(Duration::from_secs(2)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !(with_arg("7654329").is_empty() && with_arg("7654328").is_empty()) {
        assert!(Instant::now() < deadline, "processes the host adopted outlived it");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
