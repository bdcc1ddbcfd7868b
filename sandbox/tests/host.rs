//! The tool host protocol end to end, against a real child process: the
//! `orch-sandbox-test-host` binary of this crate (see its doc comment for its ops).

// Test helpers live outside #[test] functions, where the workspace lints do not relax.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::future::join_all;
use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use orch_sandbox::host::{HostClient, HostError, HostOptions};
use serde_json::{Value, json};
use std::os::unix::process::ExitStatusExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

fn host_command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_orch-sandbox-test-host"));
    command.args(args);
    command
}

async fn start(args: &[&str]) -> HostClient {
    HostClient::spawn(host_command(args)).await.expect("the test host starts")
}

async fn call(client: &HostClient, payload: Value) -> Result<Value, HostError> {
    client.call(payload, CancellationToken::new()).await
}

async fn stats(client: &HostClient) -> Value {
    call(client, json!({"stats": true})).await.unwrap()
}

/// Polls `stats` until `cancels` reaches `want` (the host sees a cancel asynchronously).
async fn wait_for_cancels(client: &HostClient, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let seen = stats(client).await["cancels"].as_u64().unwrap();
        if seen == want {
            return;
        }
        assert!(Instant::now() < deadline, "the host saw {seen} cancels, expected {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn crashed(result: Result<Value, HostError>) -> (Option<std::process::ExitStatus>, String) {
    match result {
        Err(HostError::Crashed { status, message }) => (status, message),
        other => panic!("expected Crashed, got {other:?}"),
    }
}

#[tokio::test]
async fn many_concurrent_calls_get_their_own_answers() {
    let client = start(&[]).await;
    assert!(client.pid().is_some());
    let calls = (0..300u64).map(|i| {
        let client = &client;
        async move {
            // Mix slow and instant calls so answers come back out of order.
            let payload = if i % 3 == 0 { json!({"sleep_ms": (i * 7) % 100}) } else { json!({"echo": {"i": i}}) };
            (i, call(client, payload).await)
        }
    });
    for (i, answer) in join_all(calls).await {
        let want = if i % 3 == 0 { json!({"slept_ms": (i * 7) % 100}) } else { json!({"i": i}) };
        assert_eq!(answer.unwrap(), want, "call {i}");
    }
    assert_eq!(stats(&client).await["calls"], 301);
    let exit = client.shutdown(Duration::from_secs(5)).await;
    assert!(!exit.killed);
    assert!(exit.status.unwrap().success());
}

#[tokio::test]
async fn cancel_returns_promptly_and_reaches_the_host() {
    let client = start(&[]).await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let result = client.call(json!({"sleep_ms": 60_000}), cancel).await;
    assert!(matches!(result, Err(HostError::Cancelled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(1), "cancel took {:?}", started.elapsed());
    wait_for_cancels(&client, 1).await;

    // Dropping the call future cancels the call too.
    let dropped = tokio::time::timeout(Duration::from_millis(100), call(&client, json!({"sleep_ms": 60_000}))).await;
    assert!(dropped.is_err());
    wait_for_cancels(&client, 2).await;

    // A token cancelled before the call means the call is never sent.
    let calls_before = stats(&client).await["calls"].as_u64().unwrap();
    let cancel = CancellationToken::new();
    cancel.cancel();
    assert!(matches!(client.call(json!({"echo": 1}), cancel).await, Err(HostError::Cancelled)));
    assert_eq!(stats(&client).await["calls"].as_u64().unwrap(), calls_before + 1);

    // Other calls are unaffected.
    assert_eq!(call(&client, json!({"echo": "fine"})).await.unwrap(), "fine");
}

#[tokio::test]
async fn a_crash_fails_pending_and_later_calls_with_the_status() {
    let client = start(&[]).await;
    let (pending, crashing) = tokio::join!(call(&client, json!({"sleep_ms": 60_000})), async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        call(&client, json!({"crash": 9})).await
    });
    for result in [pending, crashing] {
        let (status, message) = crashed(result);
        assert_eq!(status.and_then(|s| s.code()), Some(9));
        assert!(message.contains("exited with exit status 9"), "{message}");
        assert!(message.contains("crashing with exit code 9"), "stderr tail missing: {message}");
    }
    let later = call(&client, json!({"echo": 1})).await;
    let error = later.as_ref().unwrap_err().to_string();
    assert!(error.contains("the tool host is gone"), "{error}");
    assert_eq!(crashed(later).0.and_then(|s| s.code()), Some(9));
    assert_eq!(client.pid(), None);
    let exit = client.shutdown(Duration::from_secs(1)).await;
    assert_eq!(exit.status.and_then(|s| s.code()), Some(9));
}

#[tokio::test]
async fn a_host_killed_by_a_signal_reports_the_signal() {
    let client = start(&[]).await;
    let pid = client.pid().unwrap();
    let pending = call(&client, json!({"sleep_ms": 60_000}));
    let killer = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGKILL).unwrap();
    };
    let (result, ()) = tokio::join!(pending, killer);
    let (status, message) = crashed(result);
    assert_eq!(status.and_then(|s| s.signal()), Some(9));
    assert!(message.contains("was killed by signal"), "{message}");
}

#[tokio::test]
async fn a_host_that_exits_before_ready_is_a_clear_spawn_error() {
    let error = HostClient::spawn(host_command(&["--exit-before-ready", "3"])).await.unwrap_err();
    let HostError::NotReady { status, message, .. } = &error else { panic!("{error:?}") };
    assert_eq!(status.and_then(|s| s.code()), Some(3));
    assert!(message.contains("exited with exit status 3 before saying it was ready"), "{message}");
    assert!(message.contains("exiting with 3 before ready as asked"), "{message}");
    assert!(error.to_string().contains("did not become ready"), "{error}");
}

#[tokio::test]
async fn a_host_that_says_something_else_first_is_refused() {
    let error = HostClient::spawn(host_command(&["--garbage-before-ready"])).await.unwrap_err();
    let HostError::NotReady { message, .. } = &error else { panic!("{error:?}") };
    assert!(message.contains("hello, I am not a tool host"), "{message}");
    assert!(message.contains("instead of the ready frame"), "{message}");
}

#[tokio::test]
async fn a_silent_host_times_out_and_is_killed() {
    let options = HostOptions { ready_timeout: Duration::from_millis(300), ..HostOptions::default() };
    let started = Instant::now();
    let error = HostClient::spawn_with(host_command(&["--never-ready"]), options).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let HostError::NotReady { status, message, .. } = &error else { panic!("{error:?}") };
    assert!(message.contains("did not say it was ready within 300 ms"), "{message}");
    assert_eq!(status.and_then(|s| s.signal()), Some(9));
}

#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let error = HostClient::spawn(Command::new("/nonexistent/orch-tool-host")).await.unwrap_err();
    assert!(matches!(error, HostError::Spawn { .. }), "{error:?}");
    assert!(error.to_string().contains("/nonexistent/orch-tool-host"), "{error}");
}

#[tokio::test]
async fn shutdown_is_clean_or_kills_after_the_grace_period() {
    let client = start(&[]).await;
    let started = Instant::now();
    let exit = client.shutdown(Duration::from_secs(5)).await;
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    assert!(!exit.killed);
    assert!(exit.status.unwrap().success());

    // A host that lingers after serving is killed once the grace period is over.
    let client = start(&["--linger-ms", "60000"]).await;
    let started = Instant::now();
    let exit = client.shutdown(Duration::from_millis(300)).await;
    assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
    assert!(exit.killed);
    assert_eq!(exit.status.and_then(|s| s.signal()), Some(9));
}

#[tokio::test]
async fn dropping_the_client_kills_the_host() {
    let client = start(&["--linger-ms", "60000"]).await;
    let pid = Pid::from_raw(i32::try_from(client.pid().unwrap()).unwrap());
    drop(client);
    let deadline = Instant::now() + Duration::from_secs(5);
    while kill(pid, None) != Err(Errno::ESRCH) {
        assert!(Instant::now() < deadline, "the tool host outlived its client");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn big_results_pass_and_oversize_frames_are_errors() {
    let client = start(&["--max-frame", "1000000"]).await;
    let big = call(&client, json!({"big": 900_000})).await.unwrap();
    assert_eq!(big.as_str().unwrap().len(), 900_000);

    // An answer over the host's limit becomes an error for that call only.
    let error = call(&client, json!({"big": 2_000_000})).await.unwrap_err();
    assert!(matches!(&error, HostError::Failed(m) if m.contains("over the limit of 1000000 bytes")), "{error:?}");

    // A call over the client's limit is refused before it is sent.
    let options = HostOptions { max_frame_bytes: 1000, ..HostOptions::default() };
    let small = HostClient::spawn_with(host_command(&[]), options).await.unwrap();
    let error = call(&small, json!({"echo": "y".repeat(2000)})).await.unwrap_err();
    assert!(matches!(error, HostError::TooLarge { limit: 1000, .. }), "{error:?}");
    assert!(error.to_string().contains("send less data per call"), "{error}");

    // An answer over the client's limit breaks the protocol: the host is killed.
    let (_, message) = crashed(call(&small, json!({"big": 5000})).await);
    assert!(message.contains("broke the protocol") && message.contains("over the limit of 1000"), "{message}");
    assert!(matches!(call(&small, json!({"echo": 1})).await, Err(HostError::Crashed { .. })));

    assert_eq!(call(&client, json!({"echo": "still fine"})).await.unwrap(), "still fine");
}

#[tokio::test]
async fn a_large_result_under_the_default_limit_passes() {
    let client = start(&[]).await;
    let big = call(&client, json!({"big": 20 * 1024 * 1024})).await.unwrap();
    assert_eq!(big.as_str().unwrap().len(), 20 * 1024 * 1024);
}

#[tokio::test]
async fn printing_to_stdout_in_the_host_is_a_protocol_error() {
    let client = start(&[]).await;
    let (_, message) = crashed(call(&client, json!({"print": "oops"})).await);
    assert!(message.contains("oops") && message.contains("must not print to stdout"), "{message}");
    assert_eq!(client.pid(), None);
}

#[tokio::test]
async fn handler_errors_are_returned_as_failed() {
    let client = start(&[]).await;
    let error = call(&client, json!({"no such op": 1})).await.unwrap_err();
    assert!(matches!(&error, HostError::Failed(m) if m.starts_with("unknown test op")), "{error:?}");
    assert_eq!(call(&client, json!({"stderr": "a line on stderr"})).await.unwrap(), Value::Null);
}
