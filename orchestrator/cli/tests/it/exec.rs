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
    // The shell's parent is the tool host; print its pid and, where `/proc` shows it (as
    // a normal user; as root each host sees only its sandbox uid's processes), its parent's.
    let cmd = "echo host=$PPID; grep PPid /proc/$PPID/status 2>/dev/null || echo hidden";
    mock.push_all([Step::tool("Bash", json!({"command": cmd})), Step::text("done")]);
    let mut child = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--allow-outside-repo", "--tools", "Bash", "go"])
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
    if nix::unistd::geteuid().is_root() {
        assert!(result.contains("hidden"), "the tool host is visible to its commands as root: {result}");
    } else {
        assert!(result.contains(&format!("PPid:\t{orch_pid}")), "the tool host is not orch's child: {result}");
    }
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
        .args(["exec", "--allow-outside-repo", "--tools", "Bash,Read", "go"]));
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
        .args(["exec", "--allow-outside-repo", "--tools", "Bash", "go"])
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
    let (code, stdout, stderr) =
        run(orch().current_dir(dir.path()).arg("exec").arg("--allow-outside-repo").arg("--script").arg(&s).args([
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
    // Other tests run containers on the same engine at the same time: only those that
    // mount this test's directory are this run's.
    let (code, out, _) = run(Command::new("docker").args(["ps", "-aq", "--filter", "label=orch.managed"]));
    assert_eq!(code, 0);
    let mine = dir.path().to_string_lossy().into_owned();
    for id in out.split_whitespace() {
        let (_, mounts, _) =
            run(Command::new("docker").args(["inspect", "--format", "{{range .Mounts}}{{.Source}} {{end}}", id]));
        assert!(!mounts.split_whitespace().any(|m| m.starts_with(&mine)), "container {id} left behind: {mounts}");
    }
}

#[test]
fn the_container_backend_needs_an_image() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), "version: 1\nagents: {}\n");
    let (code, _, stderr) = run(orch()
        .current_dir(dir.path())
        .arg("exec")
        .arg("--allow-outside-repo")
        .arg("--script")
        .arg(&s)
        .args(["--provider", "scripted", "--backend", "container", "go"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("needs an image"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// At a terminal (issue 14)

const ANSWER: &str = "version: 1\nagents:\n  main:\n    - text: The files are a.txt and b.txt.\n";

#[test]
fn a_dash_reads_the_prompt_from_stdin() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(
        dir.path(),
        "version: 1\nagents:\n  main:\n    - expect: { contains: \"list the files\" }\n      text: Listed.\n",
    );
    let mut child = orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--script"])
        .arg(&s)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"list the files\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "Listed.\n");

    // Nothing on stdin is a usage error, not a prompt of "-".
    let (code, _, stderr) =
        run(orch().current_dir(dir.path()).args(["exec", "--provider", "scripted", "--script"]).arg(&s).arg("-"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("stdin is empty"), "{stderr}");
}

#[test]
fn write_tools_are_refused_in_home_outside_a_repository() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().canonicalize().unwrap();
    let bashrc = home.join(".bashrc");
    std::fs::write(&bashrc, "# mine\n").unwrap();
    let scripts = tempfile::tempdir().unwrap();
    let s = script(
        scripts.path(),
        "version: 1\nagents:\n  main:\n    - tool_calls: [{name: Bash, input: {command: \"echo evil >> .bashrc\"}}]\n    - text: Done.\n",
    );
    let attempt = |extra: &[&str]| {
        run(orch()
            .current_dir(&home)
            .env("HOME", &home)
            .args(["exec", "--provider", "scripted", "--tools", "Bash", "--backend", "none"])
            .args(extra)
            .arg("--script")
            .arg(&s)
            .arg("go"))
    };
    let (code, _, stderr) = attempt(&[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("your home directory") && stderr.contains("--allow-outside-repo"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# mine\n", "the refused agent wrote anyway");

    // Read-only tools are fine there, and the flag lets the user take the risk.
    let (code, _, stderr) = run(orch()
        .current_dir(&home)
        .env("HOME", &home)
        .args(["exec", "--provider", "scripted", "--tools", "Read,Grep", "--script"])
        .arg(script(scripts.path(), ANSWER))
        .arg("go"));
    assert_eq!(code, 0, "{stderr}");
    let s = script(
        scripts.path(),
        "version: 1\nagents:\n  main:\n    - tool_calls: [{name: Bash, input: {command: \"echo evil >> .bashrc\"}}]\n    - text: Done.\n",
    );
    let (code, _, stderr) = run(orch()
        .current_dir(&home)
        .env("HOME", &home)
        .args(["exec", "--provider", "scripted", "--tools", "Bash", "--backend", "none", "--allow-outside-repo"])
        .arg("--script")
        .arg(&s)
        .arg("go"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(std::fs::read_to_string(&bashrc).unwrap(), "# mine\nevil\n");

    // A directory that is not in a git repository is refused the same way.
    let plain = tempfile::tempdir().unwrap();
    let (code, _, stderr) = run(orch()
        .current_dir(plain.path())
        .args(["exec", "--provider", "scripted", "--tools", "Write", "--script"])
        .arg(&s)
        .arg("go"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not inside a git repository"), "{stderr}");
}

#[test]
fn output_format_json_prints_one_result_with_usage_and_cost() {
    let dir = tempfile::tempdir().unwrap();
    let s = script(dir.path(), ANSWER);
    let (code, stdout, stderr) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--output-format", "json", "--script"])
        .arg(&s)
        .arg("list"));
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["type"], "result");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["is_error"], false);
    assert_eq!(result["result"], "The files are a.txt and b.txt.");
    assert_eq!(result["num_turns"], 1);
    assert!(result["usage"]["output_tokens"].as_u64().unwrap() > 0, "{result}");
    assert!(result["total_cost_usd"].is_number(), "{result}");
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["agent"], "main");
    assert_eq!(result["session_id"].as_str().unwrap().len(), 36, "{result}");

    // --json is orch's event stream; --output-format stream-json is Claude Code's
    // (tests/it/exec_claude_p.rs), which starts with its init line.
    let (_, a, _) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--json", "--script"])
        .arg(&s)
        .arg("x"));
    let (_, b, _) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--output-format", "stream-json", "--script"])
        .arg(&s)
        .arg("x"));
    let events: Vec<serde_json::Value> = a.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(events.len() > 2 && events.iter().all(|e| e["event"]["type"].is_string()), "{a}");
    let first: serde_json::Value = serde_json::from_str(b.lines().next().unwrap()).unwrap();
    assert_eq!((first["type"].as_str(), first["subtype"].as_str()), (Some("system"), Some("init")), "{b}");
    let last: serde_json::Value = serde_json::from_str(b.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "result", "{b}");
}

#[test]
fn output_schema_checks_the_answer_and_asks_again() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "required": ["files"], "properties": {"files": {"type": "array", "items": {"type": "string"}}}}"#,
    )
    .unwrap();
    // The first answer is not JSON: the agent is asked again and then matches.
    let s = script(
        dir.path(),
        "version: 1\nagents:\n  main:\n    - text: a.txt and b.txt\n    - expect: { contains: \"does not match\" }\n      text: '{\"files\": [\"a.txt\", \"b.txt\"]}'\n",
    );
    let (code, stdout, stderr) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--output-format", "json", "--output-schema"])
        .arg(&schema)
        .arg("--script")
        .arg(&s)
        .arg("list"));
    assert_eq!(code, 0, "{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["structured_output"], json!({"files": ["a.txt", "b.txt"]}));
    assert_eq!(result["num_turns"], 2);

    // Never matching: failed, exit 1, with the reason.
    let s =
        script(dir.path(), "version: 1\nagents:\n  main:\n    - text: no\n    - text: still no\n    - text: never\n");
    let (code, stdout, stderr) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--output-format", "json", "--output-schema"])
        .arg(&schema)
        .arg("--script")
        .arg(&s)
        .arg("list"));
    assert_eq!(code, 1, "{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["status"], "failed");
    assert!(result["reason"].as_str().unwrap().contains("output.schema"), "{result}");

    // A schema that is not a schema is a usage error.
    std::fs::write(&schema, r#"{"type": 5}"#).unwrap();
    let (code, _, stderr) = run(orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--output-schema"])
        .arg(&schema)
        .arg("--script")
        .arg(&s)
        .arg("list"));
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--output-schema"), "{stderr}");
}

#[test]
fn large_tool_results_stay_private_and_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    assert!(Command::new("git").arg("init").arg("-q").arg(&repo).status().unwrap().success());
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // A result too large to send inline is saved; the second command gives the test time
    // to look at the directory from outside.
    let s = script(
        dir.path(),
        "version: 1\nagents:\n  main:\n    - tool_calls: [{name: Bash, input: {command: \"seq 1 20000 > big.txt\"}}]\n    - tool_calls: [{name: Grep, input: {pattern: \"1\", path: big.txt, output_mode: content}}]\n    - tool_calls: [{name: Bash, input: {command: \"sleep 3\"}}]\n    - text: Done.\n",
    );
    let child = orch()
        .current_dir(&repo)
        .env("TMPDIR", &tmp)
        .args(["exec", "--provider", "scripted", "--tools", "Bash,Grep", "--script"])
        .arg(&s)
        .arg("go")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let private = loop {
        let found = std::fs::read_dir(&tmp)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("orch-exec-"));
        if let Some(found) = found
            && std::fs::read_dir(found.join("tool-results")).is_ok_and(|mut d| d.next().is_some())
        {
            break found;
        }
        assert!(Instant::now() < deadline, "no saved tool result appeared under {}", tmp.display());
        std::thread::sleep(Duration::from_millis(50));
    };
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let results = private.join("tool-results");
    if nix::unistd::geteuid().is_root() {
        // Passable but not listable by others; the results the sandbox uid's alone.
        assert_eq!(mode(&private), 0o711);
        assert_eq!(mode(&results) & 0o077, 0, "{:o}", mode(&results));
        assert_ne!(std::fs::metadata(&results).unwrap().uid(), 0);
    } else {
        assert_eq!(mode(&private), 0o700);
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!private.exists(), "{} is left behind", private.display());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_system_prompt_says_where_exec_runs() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::text("done")));
    let bin = assert_cmd::cargo::cargo_bin("orch");
    // Not attended (stderr is a pipe): the CI wording.
    let (code, _, stderr) = run(orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--tools", "Read", "go"]));
    assert_eq!(code, 0, "{stderr}");
    // At a terminal (`script` gives orch one), outside CI: the terminal wording.
    let command = format!("{} exec --tools Read go", bin.display());
    let cwd = dir.path().to_path_buf();
    let url = mock.url();
    let status = tokio::task::spawn_blocking(move || {
        Command::new("script")
            .args(["-q", "-e", "-c", &command, "/dev/null"])
            .current_dir(cwd)
            .env_remove("CI")
            .env_remove("GITHUB_ACTIONS")
            .env("TERM", "xterm")
            .env("NO_COLOR", "1")
            .env("ANTHROPIC_API_KEY", "k")
            .env("ANTHROPIC_BASE_URL", url)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("`script` (util-linux) gives orch a terminal")
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(0));
    let system = |i: usize| mock.requests()[i].system().map(|s| s.to_string()).unwrap_or_default();
    assert_eq!(mock.requests().len(), 2);
    assert!(system(0).contains("inside a CI job"), "{}", system(0));
    assert!(system(1).contains("from their terminal with `orch exec`"), "{}", system(1));
    assert!(!system(1).contains("CI job"), "{}", system(1));
}
