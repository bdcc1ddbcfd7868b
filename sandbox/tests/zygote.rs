//! The tool host zygote end to end: the `orch-sandbox-test-host` binary as a fork
//! server (`--zygote`), hosts forked from it driven through a real [`HostClient`].
//! Checked from outside: the process table (whose child a host is, whether it is
//! gone), the host's environment and directory as a command in it sees them, exit
//! statuses, and the memory of a later host.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{Duration, Instant};

use orch_sandbox::host::zygote::Zygote;
use orch_sandbox::host::{HostClient, HostError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn zygote() -> Zygote {
    Zygote::start(Path::new(env!("CARGO_BIN_EXE_orch-sandbox-test-host")), &["--zygote"]).expect("the zygote starts")
}

async fn host(zygote: &Zygote, env: &[(&str, &str)], cwd: &Path, flags: &str) -> HostClient {
    let env: BTreeMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let spawned = zygote.spawn(&env, cwd, flags.to_owned()).expect("the zygote forks a host");
    HostClient::from_streams(spawned.into_streams("forked test host".into()).unwrap()).await.expect("it is ready")
}

async fn call(client: &HostClient, payload: Value) -> Result<Value, HostError> {
    client.call(payload, CancellationToken::new()).await
}

/// The parent pid in `/proc/<pid>/status`, `None` once the process is gone (reaped).
fn parent_of(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("PPid:")).and_then(|p| p.trim().parse().ok())
}

#[tokio::test]
async fn a_forked_host_is_the_callers_child_with_the_requested_environment_and_directory() {
    let zygote = zygote();
    let dir = tempfile::tempdir().unwrap();
    let client = host(&zygote, &[("ZYGOTE_PROBE", "forty-two"), ("PATH", "/usr/bin:/bin")], dir.path(), "").await;
    assert_eq!(call(&client, json!({"echo": "hi"})).await.unwrap(), json!("hi"));
    let pid = client.pid().expect("a forked host has a pid");
    assert_ne!(pid, zygote.pid());
    assert_eq!(parent_of(pid), Some(std::process::id()), "the host is not our child");
    assert_eq!(parent_of(zygote.pid()), Some(std::process::id()));
    let out = call(&client, json!({"run": ["sh", "-c", "echo $ZYGOTE_PROBE; pwd; env"]})).await.unwrap();
    let lines: Vec<&str> = out["stdout"].as_str().unwrap().lines().collect();
    assert_eq!(lines[0], "forty-two");
    assert_eq!(Path::new(lines[1]).canonicalize().unwrap(), dir.path().canonicalize().unwrap());
    // Only the requested variables (and what sh sets itself): nothing of ours.
    for ours in ["CARGO", "HOME=", "RUST"] {
        assert!(!lines[2..].iter().any(|l| l.starts_with(ours)), "{ours} leaked into the host: {out}");
    }
    let exit = client.shutdown(Duration::from_secs(5)).await;
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0), "{exit:?}");
    assert_eq!(parent_of(pid), None, "the host was not reaped");
}

#[tokio::test]
async fn exit_codes_come_through_the_pidfd_and_a_dropped_client_kills_its_host() {
    let zygote = zygote();
    let dir = tempfile::tempdir().unwrap();
    let crashing = host(&zygote, &[], dir.path(), "").await;
    let pid = crashing.pid().unwrap();
    match call(&crashing, json!({"crash": 7})).await {
        Err(HostError::Crashed { status, .. }) => assert_eq!(status.and_then(|s| s.code()), Some(7)),
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert_eq!(parent_of(pid), None);

    let dropped = host(&zygote, &[], dir.path(), "").await;
    let pid = dropped.pid().unwrap();
    assert!(call(&dropped, json!({"echo": 1})).await.is_ok());
    drop(dropped);
    let deadline = Instant::now() + Duration::from_secs(5);
    while parent_of(pid).is_some() {
        assert!(Instant::now() < deadline, "the dropped host {pid} is still there");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Flags reach the forked host: it exits before ready as asked.
    let env = BTreeMap::new();
    let spawned = zygote.spawn(&env, dir.path(), "--exit-before-ready\n9".into()).unwrap();
    match HostClient::from_streams(spawned.into_streams("early".into()).unwrap()).await {
        Err(HostError::NotReady { status, .. }) => assert_eq!(status.and_then(|s| s.code()), Some(9)),
        other => panic!("expected NotReady, got {other:?}"),
    }
}

#[tokio::test]
async fn a_dead_zygote_is_an_error_not_a_hang() {
    let zygote = zygote();
    let dir = tempfile::tempdir().unwrap();
    let client = host(&zygote, &[], dir.path(), "").await;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygote.pid() as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    let env = BTreeMap::new();
    let error = zygote.spawn(&env, dir.path(), String::new()).expect_err("a dead zygote forks nothing");
    assert!(!error.to_string().is_empty());
    // The hosts it forked before live on: they are ours, not its.
    assert_eq!(call(&client, json!({"echo": "still here"})).await.unwrap(), json!("still here"));
}

/// The readable and writable memory of process `pid`, concatenated.
fn memory_of(pid: u32) -> Vec<u8> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut all = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        if !perms.starts_with("rw") {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        let mut chunk = vec![0u8; (end - start) as usize];
        if mem.seek(SeekFrom::Start(start)).is_ok() && mem.read_exact(&mut chunk).is_ok() {
            all.extend_from_slice(&chunk);
        }
    }
    all
}

#[tokio::test]
async fn a_later_host_does_not_inherit_an_earlier_hosts_request() {
    let zygote = zygote();
    let dir = tempfile::tempdir().unwrap();
    let secret = format!("ZYGOTE-SECRET-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    let first = host(&zygote, &[("TOKEN", &secret)], dir.path(), "").await;
    let first_pid = first.pid().unwrap();
    let second = host(&zygote, &[("TOKEN", "nothing")], dir.path(), "").await;
    let second_pid = second.pid().unwrap();
    // The attack's baseline: the secret is in the first host's memory (its environment).
    assert!(memory_of(first_pid).windows(secret.len()).any(|w| w == secret.as_bytes()));
    // Forked after it, from the same zygote: not a byte of it in the second host's.
    assert!(!memory_of(second_pid).windows(secret.len()).any(|w| w == secret.as_bytes()));
    assert!(!memory_of(zygote.pid()).windows(secret.len()).any(|w| w == secret.as_bytes()));
    drop((first, second));
}
