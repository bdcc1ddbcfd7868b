//! `orch exec` end to end, through the real binary: the scripted provider offline, the
//! Anthropic provider against the mock server, tools in a separate tool host process,
//! exit codes and signals.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use orch_testkit::mock::{MockServer, Step, Turn};
use serde_json::json;

fn orch() -> Command {
    let mut cmd = Command::cargo_bin("orch").unwrap();
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ORCH_PROVIDER",
        "ORCH_MODEL",
        "ORCH_SCRIPT",
        "RUST_LOG",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("NO_COLOR", "1");
    cmd
}

fn script(dir: &Path, text: &str) -> std::path::PathBuf {
    let path = dir.join("script.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

fn run(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn the_exec_example_runs_offline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap();
    let (code, stdout, stderr) = run(orch().current_dir(root).args([
        "exec",
        "--provider",
        "scripted",
        "--script",
        "examples/exec/script.yaml",
        "Say hello",
    ]));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("Hello from orch."), "{stdout}");
}

#[test]
fn usage_errors_exit_2_and_missing_credentials_exit_3() {
    let (code, _, stderr) = run(orch().args(["exec", "--provider", "scripted", "hi"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("needs a turn script"), "{stderr}");
    let (code, _, stderr) = run(orch().args(["exec", "hi"]));
    assert_eq!(code, 3);
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "version: 1\nagents: {}\n");
    let (code, _, stderr) =
        run(orch().args(["exec", "--provider", "scripted", "--tools", "Read,Teleport", "hi"]).arg("--script").arg(&s));
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown tool `Teleport`"), "{stderr}");
    let (code, _, stderr) =
        run(orch().args(["exec", "--provider", "scripted", "--deny", "Bash(git *", "hi"]).arg("--script").arg(&s));
    assert_eq!(code, 2);
    assert!(stderr.contains("bad permission rule"), "{stderr}");
    let (code, _, stderr) = run(orch().args(["exec", "--timeout", "10 parsecs", "hi"]));
    assert_eq!(code, 2);
    assert!(stderr.contains("unknown unit"), "{stderr}");
}

#[test]
fn a_script_that_runs_out_is_a_clear_failure() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "version: 1\nagents:\n  main:\n    - tool_calls: [{name: LS, input: {path: .}}]\n");
    let (code, _, stderr) =
        run(orch().current_dir(dir.path()).args(["exec", "--provider", "scripted", "go"]).arg("--script").arg(&s));
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("asked for model turn 2") && stderr.contains("scripts only 1"), "{stderr}");
}

#[test]
fn hitting_the_turn_limit_exits_4() {
    let dir = tempfile::tempdir().unwrap();
    let turn = "    - tool_calls: [{name: LS, input: {path: .}}]\n";
    let s = script(dir.path(), &format!("version: 1\nagents:\n  main:\n{turn}{turn}{turn}"));
    let (code, _, stderr) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--max-turns", "2", "go"])
        .arg("--script")
        .arg(&s));
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("turn limit of 2"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_run_in_a_separate_tool_host_process() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    // The shell's parent is the tool host; print the host's pid and its parent's.
    let cmd = "echo host=$PPID; grep PPid /proc/$PPID/status";
    mock.push_all([Step::tool("Bash", json!({"command": cmd})), Step::text("done")]);
    let mut child = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--tools", "Bash", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let orch_pid = child.id();
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert!(status.success());
    let requests = mock.requests();
    let result = requests[1].messages()[2]["content"][0]["content"].as_str().unwrap().to_string();
    let host: u32 = result.lines().next().unwrap().trim_start_matches("host=").parse().unwrap();
    assert_ne!(host, orch_pid, "the tool ran inside the coordinator");
    assert!(result.contains(&format!("PPid:\t{orch_pid}")), "the tool host is not orch's child: {result}");
}

/// A command cannot kill the tool host that runs it (its own Landlock domain scopes its
/// signals): the kill fails, the host stays, and the next call still works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_kill_its_tool_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "still here\n").unwrap();
    let mock = MockServer::start().await;
    mock.push_all([
        Step::tool("Bash", json!({"command": "kill -9 $PPID; echo status=$?"})),
        Step::tool("Read", json!({"file_path": "a.txt"})),
        Step::text("done"),
    ]);
    let started = Instant::now();
    let (code, stdout, stderr) = run(orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--tools", "Bash,Read", "go"]));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.trim(), "done");
    assert!(started.elapsed() < Duration::from_secs(30));
    let requests = mock.requests();
    let kill = requests[1].messages().last().unwrap()["content"][0].clone();
    let text = kill["content"].as_str().unwrap_or_default();
    assert!(text.contains("status=1") && text.contains("not permitted"), "the kill must fail: {kill}");
    let read = requests[2].messages().last().unwrap()["content"][0].clone();
    assert_ne!(read["is_error"], true, "the host must still serve calls: {read}");
    assert!(read["content"].as_str().unwrap_or_default().contains("still here"), "{read}");
    mock.assert_tool_pairing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_events_stream_on_stdout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let mock = MockServer::start().await;
    // TodoWrite never starts early, so the order of events is fixed.
    let todos = json!({"todos": [{"content": "Read a.txt", "status": "in_progress"}]});
    mock.push_all([Step::tool("TodoWrite", todos), Step::Reply(Turn::text("read it"))]);
    let (code, stdout, stderr) = run(orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--json", "go"]));
    assert_eq!(code, 0, "{stderr}");
    let kinds: Vec<String> = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event"]["type"].as_str().unwrap().to_string())
        .collect();
    insta::assert_snapshot!(kinds.join("\n"), @r"
    turn_started
    usage
    assistant_message
    tool_use_started
    tool_use_finished
    turn_started
    usage
    assistant_message
    terminal
    ");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_a_tool_exits_130_and_kills_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pid");
    let mock = MockServer::start().await;
    let cmd = format!("echo $$ > {}; sleep 600", marker.display());
    mock.push(Step::tool("Bash", json!({"command": cmd})));
    let mut child = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--tools", "Bash", "go"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !marker.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shell: i32 = std::fs::read_to_string(&marker).unwrap().trim().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let started = Instant::now();
    let status = tokio::task::spawn_blocking(move || child.wait()).await.unwrap().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(started.elapsed() < Duration::from_secs(10));
    let gone = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(shell), None).is_err()
    });
    assert!(gone, "the command outlived orch");
    let _ = std::io::stdout().flush();
}

/// Needs the Docker engine and `orch-test:busybox` that `.ci/docker.sh` provides; set
/// `ORCH_SKIP_DOCKER_TESTS=1` to skip on purpose.
#[test]
fn the_container_backend_runs_tools_in_a_container() {
    if std::env::var_os("ORCH_SKIP_DOCKER_TESTS").is_some_and(|v| v == "1") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "version: 1\nagents:\n  main:\n    - tool_calls: [{name: Bash, input: {command: \"test -e /.dockerenv && echo in-docker; id -u; echo hi > made.txt\"}}]\n    - text: done\n",
    );
    let (code, stdout, stderr) = run(orch().current_dir(dir.path()).arg("exec").arg("--script").arg(&s).args([
        "--provider",
        "scripted",
        "--tools",
        "Bash",
        "--backend",
        "container",
        "--image",
        "orch-test:busybox",
        "--json",
        "go",
    ]));
    assert_eq!(code, 0, "is the engine up and the image built (.ci/docker.sh)? {stderr}");
    let finished = stdout.lines().find(|l| l.contains("tool_use_finished")).unwrap();
    let output: serde_json::Value = serde_json::from_str(finished).unwrap();
    let lines: Vec<&str> = output["event"]["output"].as_str().unwrap().lines().collect();
    assert_eq!(lines[0], "in-docker", "{lines:?}");
    assert_ne!(lines[1], "0", "the container ran the tools as root");
    assert_eq!(std::fs::read_to_string(dir.path().join("made.txt")).unwrap(), "hi\n");
    let (code, out, _) = run(Command::new("docker").args(["ps", "-aq", "--filter", "label=orch.managed"]));
    assert_eq!(code, 0);
    assert!(out.trim().is_empty(), "containers left behind: {out}");
}

#[test]
fn the_container_backend_needs_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "version: 1\nagents: {}\n");
    let (code, _, stderr) = run(orch().current_dir(dir.path()).arg("exec").arg("--script").arg(&s).args([
        "--provider",
        "scripted",
        "--backend",
        "container",
        "go",
    ]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("needs an image"), "{stderr}");
}
