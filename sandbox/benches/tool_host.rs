//! Per-command cost of a running tool host, and tool host start-up, per backend: the
//! real orch binary's `__tool-host` (landlock: a confined child process; container: the
//! long-lived process of an `orch-test:busybox` container), timing `Bash` calls of
//! `true` over the host protocol, as an agent's tool calls go.
//!
//! `cargo bench -p orch-sandbox --bench tool_host` after `cargo build --release -p orch`;
//! `ORCH_BIN` picks the binary (default `target/release/orch`), `ORCH_BENCH_CALLS` the
//! calls per host (default 300), `ORCH_BENCH_STARTS` the start-ups (default 10),
//! `ORCH_TEST_IMAGE` the image, `ORCH_SKIP_DOCKER_TESTS=1` leaves the container out.
//! `tests/bench/sandbox.sh` runs it next to the whole-process measurements.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // bench code

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use orch_sandbox::container::{ContainerHost, ContainerOptions};
use orch_sandbox::host::HostClient;
use orch_sandbox::policy::{Backend, Limits, Network, Policy, default_read_roots, filter_env};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn policy(backend: Backend, worktree: &Path, private: &Path) -> Policy {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut read = default_read_roots(home.as_deref());
    read.push(worktree.to_path_buf());
    let outer: Vec<(String, String)> = std::env::vars().collect();
    let env = filter_env(outer.iter().map(|(k, v)| (k.as_str(), v.as_str())), private, private);
    let uid =
        nix::unistd::geteuid().is_root().then(|| orch_sandbox::sandbox_uid(&format!("bench-{}", std::process::id())));
    Policy {
        backend,
        read,
        write: vec![worktree.to_path_buf(), private.to_path_buf()],
        network: Network::None,
        limits: Limits::default(),
        env,
        cwd: worktree.to_path_buf(),
        image: Some(std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:busybox".into())),
        uid,
        name: Some(format!("bench-{}", std::process::id())),
        private_tmpfs: None,
        egress: None,
        masked: Vec::new(),
    }
}

fn host_args(worktree: &Path, policy: &Policy) -> Vec<String> {
    vec![
        "__tool-host".into(),
        "--cwd".into(),
        worktree.display().to_string(),
        "--tools".into(),
        "Bash".into(),
        "--policy".into(),
        serde_json::to_string(policy).unwrap(),
    ]
}

fn stats(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mean = samples.iter().map(|d| ms(*d)).sum::<f64>() / samples.len() as f64;
    let median = ms(samples[samples.len() / 2]);
    let p90 = ms(samples[samples.len() * 9 / 10]);
    println!("{label:<46} median {median:8.3} ms  mean {mean:8.3} ms  p90 {p90:8.3} ms  (n={})", samples.len());
}

async fn time_calls(client: &HostClient, calls: usize) -> Vec<Duration> {
    let bash = json!({"request": "tool", "tool": "Bash", "input": {"command": "true"}});
    let first = client.call(bash.clone(), CancellationToken::new()).await.unwrap();
    assert!(first.get("is_error").is_none_or(|e| e == false), "Bash `true` failed in the host: {first}");
    let mut samples = Vec::with_capacity(calls);
    for _ in 0..calls {
        let t = Instant::now();
        client.call(bash.clone(), CancellationToken::new()).await.unwrap();
        samples.push(t.elapsed());
    }
    samples
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

async fn landlock(binary: &Path, calls: usize, starts: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (worktree, private) = (dir.path().join("w"), dir.path().join("p"));
    std::fs::create_dir(&worktree).unwrap();
    std::fs::create_dir(&private).unwrap();
    let policy = policy(Backend::Landlock, &worktree, &private);
    let handover = orch_sandbox::prepare_writable(&policy).unwrap();
    let args = host_args(&worktree, &policy);
    let mut startups = Vec::new();
    for round in 0..starts {
        let mut command = tokio::process::Command::new(binary);
        command.args(&args).env_clear().envs(&policy.env).current_dir(&worktree);
        let t = Instant::now();
        let client = HostClient::spawn(command).await.unwrap();
        startups.push(t.elapsed());
        if round + 1 == starts {
            stats("landlock: Bash `true` in a running tool host", &mut time_calls(&client, calls).await);
        }
        client.shutdown(Duration::from_secs(5)).await;
    }
    stats("landlock: tool host start-up (spawn to ready)", &mut startups);
    if let Some(name) = &policy.name {
        orch_sandbox::cgroup::kill_and_remove(name);
    }
    handover.restore();
}

async fn container(binary: &Path, calls: usize, starts: usize) {
    let docker = orch_sandbox::container::connect().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (worktree, private) = (dir.path().join("w"), dir.path().join("p"));
    std::fs::create_dir(&worktree).unwrap();
    std::fs::create_dir(&private).unwrap();
    let policy = policy(Backend::Container, &worktree, &private);
    let args = host_args(&worktree, &policy);
    let options = ContainerOptions { run: "bench".into(), agent: "bench".into(), ..ContainerOptions::default() };
    let mut startups = Vec::new();
    for round in 0..starts {
        let t = Instant::now();
        let (host, client) = ContainerHost::start(&docker, &policy, binary, &args, &options).await.unwrap();
        startups.push(t.elapsed());
        if round + 1 == starts {
            stats("container: Bash `true` in a running tool host", &mut time_calls(&client, calls).await);
        }
        client.shutdown(Duration::from_secs(5)).await;
        host.stop().await.unwrap();
    }
    stats("container: tool host start-up (create to ready)", &mut startups);
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else to parse.
    let binary = std::env::var_os("ORCH_BIN")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/orch"), PathBuf::from);
    let binary = std::fs::canonicalize(&binary)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo build --release -p orch` or set ORCH_BIN", binary.display()));
    let calls = env_number("ORCH_BENCH_CALLS", 300);
    let starts = env_number("ORCH_BENCH_STARTS", 10);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    println!("tool host benchmark: {} ({calls} calls, {starts} start-ups per backend)", binary.display());
    runtime.block_on(landlock(&binary, calls, starts));
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        println!("container: skipped (ORCH_SKIP_DOCKER_TESTS=1)");
    } else {
        runtime.block_on(container(&binary, calls, starts));
    }
}
