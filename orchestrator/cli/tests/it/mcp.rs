//! MCP servers end to end, with a real server built on the official Python SDK
//! (`tests/fixtures/mcp/server.py`): over stdio (started inside the agent's sandbox,
//! its tools listed after the built-in ones with their schemas, permission rules and
//! hooks applied to them, stopped with the agent), over streamable HTTP (started here
//! on 127.0.0.1), and servers that crash or never start.
//!
//! The SDK must be installed (`.ci/run` puts it in `target/mcp-venv`); without it these
//! tests fail, unless `ORCH_SKIP_MCP_TESTS=1`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use orch_testkit::mock::{MockServer, Step};
use serde_json::json;
use support::{Fixture, Run, orch, processes_left};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

pub(crate) fn server_script() -> PathBuf {
    workspace().join("tests/fixtures/mcp/server.py")
}

/// A Python that has the MCP SDK: `$ORCH_MCP_PYTHON`, the venv `.ci/run` makes, or
/// `python3`. `None` only when `ORCH_SKIP_MCP_TESTS=1`.
pub(crate) fn python() -> Option<PathBuf> {
    let candidates: Vec<PathBuf> = std::env::var_os("ORCH_MCP_PYTHON")
        .map(PathBuf::from)
        .into_iter()
        .chain([workspace().join("target/mcp-venv/bin/python"), PathBuf::from("python3")])
        .collect();
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", "import mcp"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return Some(python);
        }
    }
    if std::env::var("ORCH_SKIP_MCP_TESTS").as_deref() == Ok("1") {
        eprintln!("skipping: the Python MCP SDK is not installed and ORCH_SKIP_MCP_TESTS=1");
        return None;
    }
    panic!(
        "the MCP tests need the Python MCP SDK: run `python3 -m venv target/mcp-venv && \
         target/mcp-venv/bin/pip install mcp` (as .ci/run does), or point ORCH_MCP_PYTHON at a python that has \
         it; set ORCH_SKIP_MCP_TESTS=1 to skip these tests"
    );
}

/// What the sandbox must be able to read for the server to start: the fixture and the
/// venv (or nothing extra for a system python).
pub(crate) fn read_roots(python: &Path) -> String {
    let mut roots = vec![server_script().parent().unwrap().to_path_buf()];
    if let Some(venv) = python.parent().and_then(Path::parent).filter(|v| v.join("pyvenv.cfg").is_file()) {
        roots.push(venv.to_path_buf());
    }
    let roots: Vec<String> = roots.iter().map(|r| format!("\"{}\"", r.display())).collect();
    format!("[{}]", roots.join(", "))
}

fn run_cmd(fx: &Fixture, workflow: &str, script: Option<&str>) -> Command {
    let path = fx.write("workflow.yaml", workflow);
    let mut cmd = orch();
    cmd.current_dir(fx.dir.path())
        .env_remove("GITHUB_EVENT_NAME")
        .arg("run")
        .arg(&path)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&fx.out)
        .args(["--run-id", &fx.run_id]);
    if let Some(script) = script {
        let script = fx.write("script.yaml", script);
        cmd.args(["--provider", "scripted", "--script"]).arg(script);
    }
    cmd
}

const STDIO: &str = r#"
version: 1
name: mcp-stdio
defaults:
  tools: [Read, mcp__fx__add, mcp__fx__whereami, mcp__fx__touch, mcp__fx__crash]
  limits: { max_turns: 8, timeout: 2m }
  sandbox: { read: READ_ROOTS }
  permissions: { deny: [mcp__fx__crash] }
mcp_servers:
  fx: { command: "PYTHON", args: ["SERVER"] }
hooks:
  PostToolUse:
    - matcher: "mcp__fx__.*"
      hooks:
        - command: >-
            printf '%s' '{"hookSpecificOutput": {"additionalContext": "seen by the MCP hook"}}'
agents:
  a:
    prompt: Use the tools.
integrate: none
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_runs_in_the_sandbox_under_the_rules_and_hooks() {
    let Some(python) = python() else { return };
    let fx = Fixture::new("t-mcp-stdio", &[("f.txt", "f\n")]);
    let outside = fx.dir.path().join("outside.txt");
    let workflow = STDIO
        .replace("READ_ROOTS", &read_roots(&python))
        .replace("PYTHON", python.to_str().unwrap())
        .replace("SERVER", server_script().to_str().unwrap());
    let mock = MockServer::start().await;
    mock.push_all([
        Step::tool("mcp__fx__add", json!({"a": 2, "b": 3})),
        Step::tool("mcp__fx__whereami", json!({})),
        Step::tool("mcp__fx__touch", json!({"path": outside.to_str().unwrap()})),
        Step::tool("mcp__fx__crash", json!({})),
        Step::text("Done."),
        Step::text("Summary."),
    ]);
    let mut cmd = run_cmd(&fx, &workflow, None);
    cmd.env("ANTHROPIC_API_KEY", "test").env("ANTHROPIC_BASE_URL", mock.url());
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let run = Run::from_output(&fx.out, out);
    run.expect_code(0);

    // The server's tools come after the built-in ones, sorted, with its schemas.
    let first = &mock.requests()[0];
    let names: Vec<&str> = first.tools().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Read", "mcp__fx__add", "mcp__fx__crash", "mcp__fx__touch", "mcp__fx__whereami"]);
    let add = &first.tools()[1];
    assert_eq!(add["description"], "Add two integers and return the sum as text.");
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer", "{add}");
    assert_eq!(add["input_schema"]["required"], json!(["a", "b"]), "{add}");

    let results = run.tool_results("a");
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(results[0], ("mcp__fx__add".into(), false, "5\n\nseen by the MCP hook".into()));
    // It runs in the agent's worktree...
    let cwd = results[1].2.lines().next().unwrap();
    assert!(cwd.contains("/worktrees/") || cwd.ends_with("/a"), "{cwd}");
    // ...inside the sandbox: it cannot write outside it.
    assert!(results[2].2.starts_with("cannot create"), "{}", results[2].2);
    assert!(!outside.exists());
    // Permission rules apply to MCP tools.
    assert!(results[3].1 && results[3].2.contains("denied by the permission rule `mcp__fx__crash`"), "{results:?}");
    // The server stopped with the agent.
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_streamable_http_server_is_reached_from_the_coordinator() {
    let Some(python) = python() else { return };
    let port = free_port();
    let server = Command::new(&python)
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Killed(server);
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the HTTP MCP server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fx = Fixture::new("t-mcp-http", &[("f.txt", "f\n")]);
    let workflow = format!(
        r#"
version: 1
name: mcp-http
defaults:
  tools: [mcp__web__*]
  limits: {{ max_turns: 4, timeout: 1m }}
mcp_servers:
  web: {{ type: http, url: "http://127.0.0.1:{port}/mcp" }}
agents:
  a:
    prompt: Add.
integrate: none
"#
    );
    let script = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: mcp__web__add, input: { a: 20, b: 22 } }]
    - expect: { contains: "42" }
      text: It is 42.
  synthesis:
    - text: Summary.
"#;
    let run = Run::from_output(&fx.out, run_cmd(&fx, &workflow, Some(script)).output().unwrap());
    run.expect_code(0);
    assert_eq!(run.tool_results("a"), [("mcp__web__add".to_owned(), false, "42".to_owned())]);
}

const BROKEN: &str = r#"
version: 1
name: mcp-broken
defaults:
  tools: [mcp__fx__*, mcp__bad__add, mcp__gone__add]
  limits: { max_turns: 6, timeout: 2m }
  sandbox: { read: READ_ROOTS }
mcp_servers:
  fx: { command: "PYTHON", args: ["SERVER"] }
  bad: { command: "PYTHON", args: ["SERVER", "fail"] }
  gone: { type: http, url: "http://127.0.0.1:PORT/mcp" }
agents:
  a:
    prompt: Try.
integrate: none
"#;

const BROKEN_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls:
        - { name: mcp__bad__add, input: { a: 1, b: 1 } }
    - tool_calls:
        - { name: mcp__gone__add, input: { a: 1, b: 1 } }
    - tool_calls:
        - { name: mcp__fx__crash, input: {} }
    - tool_calls:
        - { name: mcp__fx__add, input: { a: 1, b: 1 } }
    - text: Done anyway.
  synthesis:
    - text: Summary.
"#;

#[test]
fn servers_that_fail_to_start_or_die_give_tool_errors_not_a_crashed_run() {
    let Some(python) = python() else { return };
    let fx = Fixture::new("t-mcp-broken", &[("f.txt", "f\n")]);
    let workflow = BROKEN
        .replace("READ_ROOTS", &read_roots(&python))
        .replace("PYTHON", python.to_str().unwrap())
        .replace("SERVER", server_script().to_str().unwrap())
        .replace("PORT", &free_port().to_string());
    let run = Run::from_output(&fx.out, run_cmd(&fx, &workflow, Some(BROKEN_SCRIPT)).output().unwrap());
    run.expect_code(0);
    let a = run.agent("a");
    assert_eq!(a["status"], "succeeded", "{a:#}");
    assert_eq!(a["text"], "Done anyway.");
    let results = run.tool_results("a");
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results.iter().all(|(_, is_error, _)| *is_error), "{results:?}");
    assert!(results[0].2.contains("could not be started"), "{}", results[0].2);
    assert!(results[1].2.contains("could not be started"), "{}", results[1].2);
    let after: Vec<&str> = results[2..].iter().map(|r| r.2.as_str()).collect();
    assert!(after.iter().all(|r| r.contains("MCP server `fx`")), "{after:?}");
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

#[test]
fn a_tool_of_an_undeclared_server_is_a_usage_error() {
    let fx = Fixture::new("t-mcp-undeclared", &[("f.txt", "f\n")]);
    let workflow = "version: 1\nname: x\nagents:\n  a:\n    prompt: Hi.\n    tools: [mcp__nowhere__x]\n";
    let run = Run::from_output(&fx.out, run_cmd(&fx, workflow, Some("version: 1\nagents: {}\n")).output().unwrap());
    run.expect_code(2);
    assert!(run.stderr.contains("names the MCP server `nowhere`, which is not configured"), "{}", run.stderr);
}

const EXPANDED: &str = r#"
version: 1
name: mcp-expanded
defaults:
  tools: [mcp__web__add, mcp__leak__add, mcp__unset__add, mcp__old__add]
  limits: { max_turns: 6, timeout: 1m }
mcp_servers:
  web: { type: http, url: "http://127.0.0.1:${ORCH_TEST_MCP_PORT_UNSET:-PORT}/mcp" }
  leak: { type: http, url: "http://127.0.0.1:PORT/mcp?k=${ORCH_TEST_MCP_SECRET}" }
  unset: { type: http, url: "http://127.0.0.1:${ORCH_TEST_MCP_PORT_UNSET}/mcp" }
  old: { type: sse, url: "http://127.0.0.1:PORT/sse" }
agents:
  a:
    prompt: Add.
integrate: none
"#;

const EXPANDED_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: mcp__web__add, input: { a: 20, b: 22 } }]
    - tool_calls: [{ name: mcp__leak__add, input: { a: 1, b: 1 } }]
    - tool_calls: [{ name: mcp__unset__add, input: { a: 1, b: 1 } }]
    - tool_calls: [{ name: mcp__old__add, input: { a: 1, b: 1 } }]
    - text: Done.
  synthesis:
    - text: Summary.
"#;

/// `${VAR:-default}` is expanded; a variable outside the allowlist (a secret) is not
/// read into a URL, and a server whose reference fails is named in the run's output
/// without `-v` and fails alone; so does a `type: sse` server.
#[test]
fn env_references_expand_from_an_allowlist_and_fail_one_server_alone() {
    let Some(python) = python() else { return };
    let port = free_port();
    let server = Command::new(&python)
        .arg(server_script())
        .args(["http", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Killed(server);
    let started = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the HTTP MCP server did not start");
        std::thread::sleep(Duration::from_millis(100));
    }
    let fx = Fixture::new("t-mcp-expanded", &[("f.txt", "f\n")]);
    let workflow = EXPANDED.replace("PORT", &port.to_string());
    let mut cmd = run_cmd(&fx, &workflow, Some(EXPANDED_SCRIPT));
    cmd.env("ORCH_TEST_MCP_SECRET", "s3cr3t-value").env_remove("ORCH_TEST_MCP_PORT_UNSET").env_remove("RUST_LOG");
    let run = Run::from_output(&fx.out, cmd.output().unwrap());
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results.len(), 4, "{results:?}");
    assert_eq!(results[0], ("mcp__web__add".to_owned(), false, "42".to_owned()));
    assert!(results[1].1 && results[1].2.contains("ORCH_TEST_MCP_SECRET"), "{results:?}");
    assert!(results[2].1 && results[2].2.contains("is not set"), "{results:?}");
    assert!(results[3].1 && results[3].2.contains("`sse` transport"), "{results:?}");
    // The failed servers are named on stderr without `-v`, and the secret appears nowhere.
    for server in ["leak", "unset", "old"] {
        assert!(run.stderr.contains(&format!("MCP server `{server}`")), "{}", run.stderr);
    }
    assert!(!run.stderr.contains("s3cr3t-value"), "{}", run.stderr);
    assert!(results.iter().all(|r| !r.2.contains("s3cr3t-value")), "{results:?}");
}
