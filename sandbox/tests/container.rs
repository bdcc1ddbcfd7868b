//! The container backend against a real Docker engine: one container per tool host,
//! built from the local test image (`orch-test:busybox`, or `ORCH_TEST_IMAGE`), with
//! this crate's `orch-sandbox-test-host` as the mounted binary (its `run` op looks
//! around inside the container).
//!
//! These tests need a running engine and the image: `.ci/docker.sh` (as root, or with
//! sudo) installs and starts dockerd and builds the image. Without an engine they FAIL,
//! saying so; set `ORCH_SKIP_DOCKER_TESTS=1` to skip them on purpose.

// Test helpers live outside #[test] functions, where the workspace lints do not relax.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{CreateContainerOptionsBuilder, RemoveContainerOptionsBuilder};
use orch_sandbox::container::{
    self, ContainerError, ContainerHost, ContainerOptions, Docker, LABEL_AGENT, LABEL_BOOT, LABEL_MANAGED, LABEL_PID,
    LABEL_PID_START, LABEL_RUN,
};
use orch_sandbox::host::{HostClient, HostError};
use orch_sandbox::policy::{Backend, Limits, Network, Policy};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const TEST_HOST: &str = env!("CARGO_BIN_EXE_orch-sandbox-test-host");

fn image() -> String {
    std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:busybox".into())
}

/// The engine, or `None` when the tests are skipped on purpose; panics (fails the test)
/// when the engine or the image is missing.
async fn engine() -> Option<Docker> {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping a container backend test");
        return None;
    }
    let docker = container::connect().await.unwrap_or_else(|e| {
        panic!(
            "the container backend tests need a Docker engine and none answers: {e}. Run `.ci/docker.sh` to install \
             and start one and build the test image, or set ORCH_SKIP_DOCKER_TESTS=1 to skip these tests on purpose"
        )
    });
    if let Err(e) = docker.inspect_image(&image()).await {
        panic!(
            "the container backend tests need the image `{}`: {e}. Run `.ci/docker.sh` to build it, or set \
             ORCH_SKIP_DOCKER_TESTS=1 to skip these tests on purpose",
            image()
        );
    }
    Some(docker)
}

/// A worktree (plus home) for one test, and a policy that writes only there.
struct Sandbox {
    _dir: tempfile::TempDir,
    worktree: PathBuf,
    policy: Policy,
}

fn sandbox() -> Sandbox {
    let dir = tempfile::tempdir().unwrap();
    let worktree = dir.path().join("worktree");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&worktree).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let env = BTreeMap::from([
        ("PATH".to_string(), "/usr/bin:/bin".to_string()),
        ("HOME".to_string(), home.display().to_string()),
        ("ORCH_TEST_VAR".to_string(), "visible".to_string()),
    ]);
    let policy = Policy {
        backend: Backend::Container,
        read: vec!["/usr".into(), "/etc".into()],
        write: vec![worktree.clone(), home],
        network: Network::None,
        limits: Limits { memory_bytes: Some(256 << 20), processes: Some(64), ..Limits::default() },
        env,
        cwd: worktree.clone(),
        image: Some(image()),
        uid: None,
        name: None,
        private_tmpfs: None,
        egress: None,
        masked: Vec::new(),
    };
    Sandbox { _dir: dir, worktree, policy }
}

fn options(agent: &str) -> ContainerOptions {
    ContainerOptions { run: "test".into(), agent: agent.into(), cpus: Some(1.5), ..ContainerOptions::default() }
}

async fn start(docker: &Docker, sandbox: &Sandbox, agent: &str) -> (ContainerHost, HostClient) {
    ContainerHost::start(docker, &sandbox.policy, Path::new(TEST_HOST), &[], &options(agent))
        .await
        .unwrap_or_else(|e| panic!("the container tool host starts: {e}"))
}

async fn call(client: &HostClient, payload: Value) -> Result<Value, HostError> {
    client.call(payload, CancellationToken::new()).await
}

/// Runs `sh -c script` in the container; returns (code, stdout, stderr).
async fn sh(client: &HostClient, script: &str) -> (i64, String, String) {
    let out = call(client, json!({"run": ["/bin/sh", "-c", script]})).await.unwrap();
    (
        out["code"].as_i64().unwrap_or(-1),
        out["stdout"].as_str().unwrap().to_string(),
        out["stderr"].as_str().unwrap().to_string(),
    )
}

async fn exists(docker: &Docker, id: &str) -> bool {
    match docker.inspect_container(id, None).await {
        Ok(_) => true,
        Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => false,
        Err(e) => panic!("inspecting {id} failed: {e}"),
    }
}

async fn wait_gone(docker: &Docker, id: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while exists(docker, id).await {
        assert!(Instant::now() < deadline, "container {id} still exists after {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn mean_ms(samples: &[Duration]) -> f64 {
    samples.iter().map(Duration::as_secs_f64).sum::<f64>() * 1000.0 / samples.len() as f64
}

fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_round_trip_and_the_container_is_removed_after_stop() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let (host, client) = start(&docker, &sandbox, "roundtrip").await;
    let startup = host.startup();

    assert_eq!(call(&client, json!({"echo": {"hello": [1, 2]}})).await.unwrap(), json!({"hello": [1, 2]}));
    let concurrent = (0..50u64).map(|i| {
        let client = &client;
        async move { (i, call(client, json!({"echo": i})).await.unwrap()) }
    });
    for (i, answer) in futures::future::join_all(concurrent).await {
        assert_eq!(answer, json!(i));
    }
    // Large answers cross the attach stream's framing intact.
    let big = call(&client, json!({"big": 5_000_000})).await.unwrap();
    assert_eq!(big.as_str().map(str::len), Some(5_000_000));
    // stderr of the host reaches tracing and does not disturb the protocol.
    assert_eq!(call(&client, json!({"stderr": "a line on stderr"})).await.unwrap(), Value::Null);

    // Per-call costs in a running container host: a protocol round trip, and a command.
    let mut echo = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        call(&client, json!({"echo": i})).await.unwrap();
        echo.push(t.elapsed());
    }
    let mut run_true = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        let out = call(&client, json!({"run": ["/bin/true"]})).await.unwrap();
        run_true.push(t.elapsed());
        assert_eq!(out["code"], 0);
    }
    let mut sh_true = Vec::new();
    for _ in 0..100 {
        let t = Instant::now();
        call(&client, json!({"run": ["/bin/sh", "-c", "true"]})).await.unwrap();
        sh_true.push(t.elapsed());
    }
    eprintln!(
        "container tool host: start-up {:.1} ms; median round trip: echo {:.3} ms, /bin/true {:.3} ms, sh -c true \
         {:.3} ms",
        startup.as_secs_f64() * 1000.0,
        median_ms(&mut echo),
        median_ms(&mut run_true),
        median_ms(&mut sh_true),
    );

    let exit = client.shutdown(Duration::from_secs(5)).await;
    assert!(!exit.killed, "the host ends on shutdown without being killed: {exit:?}");
    assert_eq!(exit.status.and_then(|s| s.code()), Some(0), "{exit:?}");
    let id = host.id().to_string();
    assert!(exists(&docker, &id).await);
    host.stop().await.unwrap();
    assert!(!exists(&docker, &id).await, "stop removes the container");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worktree_is_writable_by_the_container_user_and_nothing_else_is() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    std::fs::write(sandbox.worktree.join("from-host.txt"), "host data\n").unwrap();
    let (host, client) = start(&docker, &sandbox, "fs").await;
    let wt = sandbox.worktree.display().to_string();

    let (code, out, err) =
        sh(&client, "id -u; id -g; pwd; cat from-host.txt; echo container data > from-container.txt").await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let uid: u32 = lines[0].parse().unwrap();
    assert_ne!(uid, 0, "the container does not run as root");
    assert_eq!(lines[2], wt, "the worktree is at the same path inside, and is the working directory");
    assert_eq!(lines[3], "host data");
    let written = sandbox.worktree.join("from-container.txt");
    assert_eq!(std::fs::read_to_string(&written).unwrap(), "container data\n", "the file appears on the host");
    assert_eq!(std::fs::metadata(&written).unwrap().uid(), uid, "and belongs to the container's uid");

    // Home (a writable root) and the private /tmp are writable; the image is not.
    let (code, _, err) = sh(&client, "echo x > \"$HOME/h\" && echo y > /tmp/t && cat /tmp/t").await;
    assert_eq!(code, 0, "{err}");
    let (code, _, _) = sh(&client, "echo x > /etc/owned").await;
    assert_ne!(code, 0, "the image's root filesystem is read-only");
    let (code, _, _) = sh(&client, "echo x > /orch/orch").await;
    assert_ne!(code, 0, "the mounted binary is read-only");

    // Host system directories are not bound: the image's /etc is not the host's.
    let (_, out, _) = sh(&client, "cat /etc/passwd | wc -l").await;
    let host_lines = std::fs::read_to_string("/etc/passwd").unwrap().lines().count();
    assert_ne!(out.trim().parse::<usize>().unwrap(), host_lines, "/etc comes from the image");

    // Only the policy's environment (plus Docker's HOSTNAME).
    let (_, out, _) = sh(&client, "env").await;
    assert!(out.contains("ORCH_TEST_VAR=visible"), "{out}");
    for line in out.lines() {
        let name = line.split('=').next().unwrap();
        assert!(["PATH", "HOME", "ORCH_TEST_VAR", "HOSTNAME", "PWD", "SHLVL"].contains(&name), "unexpected {line}");
    }

    client.shutdown(Duration::from_secs(5)).await;
    let owner = std::fs::metadata(&sandbox.worktree).unwrap().uid();
    host.stop().await.unwrap();
    if nix::unistd::getuid().is_root() {
        // As root the worktree was handed to the container's uid, and is handed back.
        assert_eq!(owner, uid, "the worktree belonged to the container's uid");
        assert_eq!(std::fs::metadata(&written).unwrap().uid(), 0, "stop hands the worktree back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_none_leaves_only_loopback_and_limits_are_set() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let (host, client) = start(&docker, &sandbox, "limits").await;

    let (code, out, err) = sh(&client, "ls /sys/class/net").await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.split_whitespace().collect::<Vec<_>>(), ["lo"], "no interface but lo");
    let (code, _, _) =
        sh(&client, "wget -q -T 2 -O /dev/null http://172.17.0.1/ || nc -w 2 172.17.0.1 2375 </dev/null").await;
    assert_ne!(code, 0, "nothing outside is reachable");

    let inspect = docker.inspect_container(host.id(), None).await.unwrap();
    let config = inspect.host_config.unwrap();
    assert_eq!(config.network_mode.as_deref(), Some("none"));
    assert_eq!(config.memory, Some(256 << 20));
    assert_eq!(config.memory_swap, Some(256 << 20));
    assert_eq!(config.pids_limit, Some(64));
    assert_eq!(config.nano_cpus, Some(1_500_000_000));
    assert_eq!(config.cap_drop, Some(vec!["ALL".to_string()]));
    assert!(config.security_opt.unwrap().iter().any(|o| o.starts_with("no-new-privileges")));
    assert_eq!(config.readonly_rootfs, Some(true));
    assert_eq!(config.privileged, Some(false));
    let ulimits = config.ulimits.unwrap();
    assert!(ulimits.iter().any(|u| u.name.as_deref() == Some("cpu") && u.hard == Some(3_600)), "{ulimits:?}");
    let labels = inspect.config.unwrap().labels.unwrap();
    assert_eq!(labels.get(LABEL_MANAGED).map(String::as_str), Some("true"));
    assert_eq!(labels.get(LABEL_RUN).map(String::as_str), Some("test"));
    assert_eq!(labels.get(LABEL_AGENT).map(String::as_str), Some("limits"));
    assert_eq!(labels.get(LABEL_PID), Some(&std::process::id().to_string()));

    // The limits bind: the container sees them in its own cgroup.
    let (_, out, _) = sh(
        &client,
        "cat /sys/fs/cgroup/pids.max /sys/fs/cgroup/pids/pids.max 2>/dev/null; \
         cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null",
    )
    .await;
    let values: Vec<&str> = out.split_whitespace().collect();
    assert!(values.contains(&"64"), "pids.max inside: {values:?}");
    assert!(values.contains(&(256u64 << 20).to_string().as_str()), "memory limit inside: {values:?}");

    client.shutdown(Duration::from_secs(5)).await;
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_is_a_tool_error_and_the_container_is_still_removed() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let (host, client) = start(&docker, &sandbox, "crash").await;
    match call(&client, json!({"crash": 3})).await {
        Err(HostError::Crashed { status, message }) => {
            assert_eq!(status.and_then(|s| s.code()), Some(3), "{message}");
            assert!(message.contains("exit status 3"), "{message}");
            assert!(message.contains("crashing with exit code 3"), "stderr is quoted: {message}");
        }
        other => panic!("expected Crashed, got {other:?}"),
    }
    assert!(matches!(call(&client, json!({"echo": 1})).await, Err(HostError::Crashed { .. })));
    let id = host.id().to_string();
    host.stop().await.unwrap();
    assert!(!exists(&docker, &id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_aborted_agent_does_not_leak_its_container() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let (host, client) = start(&docker, &sandbox, "abort").await;
    let id = host.id().to_string();
    // A call in flight, then the agent is aborted: everything is dropped, nothing stopped.
    let pending = tokio::spawn(async move {
        let _ = client.call(json!({"sleep_ms": 60_000}), CancellationToken::new()).await;
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    pending.abort();
    drop(host);
    wait_gone(&docker, &id, Duration::from_secs(20)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_client_kills_the_container() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let (host, client) = start(&docker, &sandbox, "dropclient").await;
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = docker.inspect_container(host.id(), None).await.unwrap().state.unwrap();
        if state.running != Some(true) {
            break;
        }
        assert!(Instant::now() < deadline, "the container still runs 10 s after its client was dropped");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    host.stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_image_is_a_clear_error() {
    let Some(docker) = engine().await else { return };
    let mut sandbox = sandbox();
    sandbox.policy.image = Some("orch-test:no-such-image".into());
    let err = ContainerHost::start(&docker, &sandbox.policy, Path::new(TEST_HOST), &[], &options("noimage"))
        .await
        .unwrap_err();
    assert!(matches!(err, ContainerError::MissingImage { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("`orch-test:no-such-image`") && message.contains("docker pull"), "{message}");

    sandbox.policy.image = None;
    let err = ContainerHost::start(&docker, &sandbox.policy, Path::new(TEST_HOST), &[], &options("noimage"))
        .await
        .unwrap_err();
    assert!(matches!(err, ContainerError::NoImage), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_fails_before_ready_leaves_no_container() {
    let Some(docker) = engine().await else { return };
    let sandbox = sandbox();
    let args = vec!["--exit-before-ready".to_string(), "7".to_string()];
    let err = ContainerHost::start(&docker, &sandbox.policy, Path::new(TEST_HOST), &args, &options("notready"))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ContainerError::Host { error: HostError::NotReady { .. }, .. }), "{err:?}");
    assert!(message.contains("exit status 7") && message.contains("exiting with 7"), "{message}");
    // The failed container is removed in the background.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = list_by_agent(&docker, "notready").await;
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "containers left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn list_by_agent(docker: &Docker, agent: &str) -> Vec<String> {
    let filters = HashMap::from([(
        "label",
        vec![format!("{LABEL_AGENT}={agent}"), format!("{LABEL_PID}={}", std::process::id())],
    )]);
    let options = bollard::query_parameters::ListContainersOptionsBuilder::new().all(true).filters(&filters).build();
    docker.list_containers(Some(options)).await.unwrap().into_iter().filter_map(|c| c.id).collect()
}

/// Creates (without starting) a container labelled as if an orch coordinator with `pid`
/// and `pid_start` had made it.
async fn labelled_container(docker: &Docker, name: &str, pid: u32, pid_start: &str) -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap().trim().to_string();
    let labels = HashMap::from([
        (LABEL_MANAGED.to_string(), "true".to_string()),
        (LABEL_RUN.to_string(), "leftover".to_string()),
        (LABEL_AGENT.to_string(), name.to_string()),
        (LABEL_PID.to_string(), pid.to_string()),
        (LABEL_PID_START.to_string(), pid_start.to_string()),
        (LABEL_BOOT.to_string(), boot),
    ]);
    let body = ContainerCreateBody {
        image: Some(image()),
        cmd: Some(vec!["/bin/sleep".into(), "600".into()]),
        labels: Some(labels),
        ..Default::default()
    };
    let name = format!("orch-test-{name}-{}", std::process::id());
    let options = CreateContainerOptionsBuilder::new().name(&name).build();
    let created = docker.create_container(Some(options), body).await.unwrap();
    if let Err(e) = docker.start_container(&created.id, None).await {
        // Another test's orch may reap a dead coordinator's container between its
        // creation and its start; the caller checks the outcome either way.
        assert!(pid != std::process::id(), "cannot start the live coordinator's container: {e}");
    }
    created.id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_of_a_dead_coordinator_are_reaped_and_live_ones_kept() {
    let Some(docker) = engine().await else { return };
    // A coordinator that is gone: a process that has exited (its start time cannot match).
    let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
    let dead_pid = child.id();
    child.wait().unwrap();
    let dead = labelled_container(&docker, "dead", dead_pid, "1").await;
    // A coordinator that is alive: this process, with its real start time.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let start = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().nth(19).unwrap().to_string();
    let alive = labelled_container(&docker, "alive", std::process::id(), &start).await;

    // (Another test's first start may reap it first: only the outcome is checked.)
    container::reap_leftovers(&docker).await.unwrap();
    // (If another test process reaps it at the same time, its removal may still be
    // finishing.)
    wait_gone(&docker, &dead, Duration::from_secs(10)).await;
    assert!(exists(&docker, &alive).await, "a live coordinator's container is kept");

    // Only this test's run: the other tests of this process have containers too.
    assert_eq!(container::remove_own(&docker, Some("leftover")).await.unwrap(), 1);
    assert!(!exists(&docker, &alive).await, "remove_own removes this process's containers");
    let options = RemoveContainerOptionsBuilder::new().force(true).build();
    let _ = docker.remove_container(&alive, Some(options)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dynamically_linked_binary_in_an_image_without_glibc_is_explained() {
    let Some(docker) = engine().await else { return };
    let bare = std::env::var("ORCH_TEST_BARE_IMAGE").unwrap_or_else(|_| "orch-test:bare".into());
    if docker.inspect_image(&bare).await.is_err() {
        panic!("the image `{bare}` (busybox alone) is missing; run `.ci/docker.sh`, or set ORCH_SKIP_DOCKER_TESTS=1");
    }
    if container::elf_interpreter(Path::new(TEST_HOST)).is_none() {
        eprintln!("the test host is statically linked; nothing to explain");
        return;
    }
    let mut sandbox = sandbox();
    sandbox.policy.image = Some(bare);
    for init in [true, false] {
        let options = ContainerOptions { init, ..options("bare") };
        let err =
            ContainerHost::start(&docker, &sandbox.policy, Path::new(TEST_HOST), &[], &options).await.unwrap_err();
        let message = err.to_string();
        eprintln!("init {init}: {message}");
        assert!(message.contains("dynamically linked") && message.contains("glibc"), "init {init}: {message}");
    }
    assert!(list_by_agent(&docker, "bare").await.is_empty(), "failed starts leave no container");
}

/// Start-up and per-command cost of the real orch tool host in a container (not run by
/// default): `ORCH_CONTAINER_BENCH_BINARY=target/release/orch cargo test -p orch-sandbox
/// --test container -- --ignored --nocapture real_orch`. `ORCH_CONTAINER_BENCH_IMAGE`
/// picks the image (e.g. `orch-test:bare` for a statically linked orch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark; needs ORCH_CONTAINER_BENCH_BINARY"]
async fn real_orch_tool_host_in_a_container() {
    let Some(docker) = engine().await else { return };
    let binary = PathBuf::from(std::env::var("ORCH_CONTAINER_BENCH_BINARY").expect("set ORCH_CONTAINER_BENCH_BINARY"));
    let mut sandbox = sandbox();
    if let Ok(image) = std::env::var("ORCH_CONTAINER_BENCH_IMAGE") {
        sandbox.policy.image = Some(image);
    }
    let policy_json = serde_json::to_string(&sandbox.policy).unwrap();
    let args: Vec<String> = ["__tool-host", "--cwd", &sandbox.worktree.display().to_string(), "--tools", "Bash"]
        .into_iter()
        .map(String::from)
        .chain(["--policy".to_string(), policy_json])
        .collect();
    let mut startups = Vec::new();
    for round in 0..5 {
        let (host, client) = ContainerHost::start(&docker, &sandbox.policy, &binary, &args, &options("bench"))
            .await
            .unwrap_or_else(|e| panic!("the orch tool host starts in a container: {e}"));
        startups.push(host.startup());
        if round == 4 {
            let bash = json!({"tool": "Bash", "input": {"command": "true"}});
            let first = call(&client, bash.clone()).await.unwrap();
            eprintln!("first Bash answer: {first}");
            let mut samples = Vec::new();
            for _ in 0..200 {
                let t = Instant::now();
                call(&client, bash.clone()).await.unwrap();
                samples.push(t.elapsed());
            }
            eprintln!(
                "orch tool host in a container: Bash `true` mean {:.3} ms, median {:.3} ms",
                mean_ms(&samples),
                median_ms(&mut samples)
            );
        }
        client.shutdown(Duration::from_secs(5)).await;
        host.stop().await.unwrap();
    }
    eprintln!(
        "orch tool host in a container: start-up mean {:.1} ms, median {:.1} ms (5 starts)",
        mean_ms(&startups),
        median_ms(&mut startups)
    );

    // The same host and call without a container (backend none), for comparison.
    let mut local = sandbox.policy.clone();
    local.backend = Backend::None;
    let mut command = tokio::process::Command::new(&binary);
    command.args(&args[..5]).arg("--policy").arg(serde_json::to_string(&local).unwrap());
    let t = Instant::now();
    let client = HostClient::spawn(command).await.unwrap();
    let local_startup = t.elapsed();
    let bash = json!({"tool": "Bash", "input": {"command": "true"}});
    let mut samples = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        call(&client, bash.clone()).await.unwrap();
        samples.push(t.elapsed());
    }
    eprintln!(
        "orch tool host without a container: start-up {:.1} ms; Bash `true` mean {:.3} ms, median {:.3} ms",
        local_startup.as_secs_f64() * 1000.0,
        mean_ms(&samples),
        median_ms(&mut samples)
    );
    client.shutdown(Duration::from_secs(5)).await;
}
