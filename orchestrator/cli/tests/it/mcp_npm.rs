//! The real MCP servers from npm, `@modelcontextprotocol/server-everything` and
//! `@modelcontextprotocol/server-filesystem`, declared in a `.mcp.json` of Claude Code's
//! form (`mcpServers`, `command`, `args`, `env` with `${VAR:-default}`) and run by
//! `orch run` under the default landlock backend with `network: none`, against the mock
//! model server: what the servers answer is checked in the requests the model receives.
//!
//! `.ci/setup.sh` installs both packages into `target/mcp-npm` (or `$ORCH_MCP_NPM` names
//! a directory holding their `node_modules`). Without them these tests fail under
//! `CI=true` and are skipped with a printed reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support::{Fixture, Run, processes_left};

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use orch_testkit::mock::{MockServer, Step};
use serde_json::{Value, json};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// The `node_modules` directory holding both servers, when they and `node` are there.
fn npm_servers() -> Option<PathBuf> {
    let root =
        std::env::var_os("ORCH_MCP_NPM").map(PathBuf::from).unwrap_or_else(|| workspace().join("target/mcp-npm"));
    let modules = root.join("node_modules");
    let node_ok = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let missing: Vec<String> = ["server-everything", "server-filesystem"]
        .iter()
        .map(|name| modules.join("@modelcontextprotocol").join(name).join("dist/index.js"))
        .filter(|script| !script.is_file())
        .map(|script| script.display().to_string())
        .collect();
    if node_ok && missing.is_empty() {
        return Some(modules);
    }
    let reason = if node_ok { format!("missing {}", missing.join(", ")) } else { "`node` is not on PATH".to_owned() };
    let help = "install them with `npm install --prefix target/mcp-npm @modelcontextprotocol/server-everything \
                @modelcontextprotocol/server-filesystem` (as .ci/setup.sh does)";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the npm MCP server tests need the npm servers ({reason}); {help}");
    }
    eprintln!("skipping: the npm MCP servers are not installed ({reason}); {help}");
    None
}

fn server_script(modules: &Path, name: &str) -> String {
    modules.join("@modelcontextprotocol").join(name).join("dist/index.js").display().to_string()
}

/// `orch run` of `workflow` on `fx` against `mock`, waiting in a blocking thread.
async fn run(fx: &Fixture, workflow: &str, mock: &MockServer) -> (Run, f64) {
    let mut cmd = fx.mock_command(workflow, &mock.url());
    cmd.env_remove("GITHUB_EVENT_NAME").env_remove("ORCH_TEST_NPM_GREETING");
    let started = Instant::now();
    let run = fx.run_off_runtime(cmd).await;
    (run, started.elapsed().as_secs_f64())
}

/// Every `tool_result` block the model was sent, by tool use id order of arrival:
/// (tool_use_id, content as sent).
fn tool_results_sent(mock: &MockServer) -> Vec<(String, Value)> {
    let mut seen = Vec::<(String, Value)>::new();
    for request in mock.requests() {
        for message in request.messages() {
            let Some(blocks) = message["content"].as_array() else { continue };
            for block in blocks.iter().filter(|b| b["type"] == "tool_result") {
                let id = block["tool_use_id"].as_str().unwrap_or_default().to_owned();
                if !seen.iter().any(|(seen_id, _)| *seen_id == id) {
                    seen.push((id, block["content"].clone()));
                }
            }
        }
    }
    seen
}

/// The text of a tool result's content (a string, or its text blocks joined).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
        _ => String::new(),
    }
}

const EVERYTHING_MCP_JSON: &str = r#"{
  "mcpServers": {
    "everything": {
      "command": "node",
      "args": ["${ORCH_TEST_NPM_DIR_UNSET:-MODULES}/@modelcontextprotocol/server-everything/dist/index.js"],
      "env": { "ORCH_NPM_GREETING": "${ORCH_TEST_NPM_GREETING:-hello from the default}" }
    }
  }
}
"#;

const EVERYTHING_WORKFLOW: &str = r#"
version: 1
name: mcp-npm-everything
defaults:
  tools: [mcp__everything__echo, mcp__everything__get-tiny-image, mcp__everything__get-env]
  limits: { max_turns: 8, timeout: 2m }
  sandbox: { network: none, read: ["MODULES"] }
agents:
  a:
    prompt: Use the tools.
integrate: none
"#;

/// server-everything from `.mcp.json`: its tools are offered under the names it lists,
/// the echo text comes back, the tiny image reaches the model as an image block, and
/// the server's `env` got its `${VAR:-default}` default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_everything_echoes_and_sends_an_image_from_a_claude_code_mcp_json() {
    let Some(modules) = npm_servers() else { return };
    let modules_str = modules.to_str().unwrap();
    let mcp_json = EVERYTHING_MCP_JSON.replace("MODULES", modules_str);
    let fx = Fixture::new("t-mcp-npm-everything", &[(".mcp.json", &mcp_json), ("f.txt", "f\n")]);
    let workflow = EVERYTHING_WORKFLOW.replace("MODULES", modules_str);
    let mock = MockServer::start().await;
    mock.push_all([
        Step::tool("mcp__everything__echo", json!({"message": "npm echo 7f3a"})),
        Step::tool("mcp__everything__get-tiny-image", json!({})),
        Step::tool("mcp__everything__get-env", json!({})),
        Step::text("Done."),
        Step::text("Summary."),
    ]);
    let (run, seconds) = run(&fx, &workflow, &mock).await;
    run.expect_code(0);
    eprintln!("the server-everything run took {seconds:.1} s");
    assert!(seconds < 120.0, "the run took {seconds:.1} s");

    // The server's tools, under the names it lists, after nothing else.
    let first = &mock.requests()[0];
    assert_eq!(
        first.tool_names(),
        ["mcp__everything__echo", "mcp__everything__get-env", "mcp__everything__get-tiny-image"]
    );

    let results = run.tool_results("a");
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results.iter().all(|(_, is_error, _)| !is_error), "{results:?}");

    let sent = tool_results_sent(&mock);
    assert_eq!(sent.len(), 3, "{sent:#?}");
    // The echo text came back to the model.
    assert!(text_of(&sent[0].1).contains("npm echo 7f3a"), "{:#}", sent[0].1);
    // The image reached the model as an image block with the PNG's bytes.
    let blocks = sent[1].1.as_array().unwrap_or_else(|| panic!("no blocks: {:#}", sent[1].1));
    let image =
        blocks.iter().find(|b| b["type"] == "image").unwrap_or_else(|| panic!("no image block: {:#}", sent[1].1));
    assert_eq!(image["source"]["type"], "base64", "{image:#}");
    assert_eq!(image["source"]["media_type"], "image/png", "{image:#}");
    let data = image["source"]["data"].as_str().unwrap();
    // A PNG's signature, base64-encoded.
    assert!(data.starts_with("iVBORw0KGgo"), "{}", &data[..data.len().min(40)]);
    // `${ORCH_TEST_NPM_GREETING:-...}` was unset, so the server got the default.
    let env = text_of(&sent[2].1);
    assert!(env.contains("hello from the default"), "{env}");

    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

const FILESYSTEM_MCP_JSON: &str = r#"{
  "mcpServers": {
    "filesystem": {
      "command": "node",
      "args": ["SCRIPT", "${ORCH_TEST_NPM_ROOT_UNSET:-.}"]
    }
  }
}
"#;

const FILESYSTEM_WORKFLOW: &str = r#"
version: 1
name: mcp-npm-filesystem
defaults:
  tools: [mcp__filesystem__read_text_file, mcp__filesystem__list_allowed_directories]
  limits: { max_turns: 8, timeout: 2m }
  sandbox: { network: none, read: ["MODULES", "OUTSIDE_DIR"] }
agents:
  a:
    prompt: Read the notes.
integrate: none
"#;

/// server-filesystem with the worktree as its root: a file of the worktree is read and
/// its content reaches the model; a file outside the root (readable by the sandbox) is
/// refused by the server, and its content appears in no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_filesystem_reads_inside_its_root_and_refuses_outside() {
    let Some(modules) = npm_servers() else { return };
    let modules_str = modules.to_str().unwrap();
    let mcp_json = FILESYSTEM_MCP_JSON.replace("SCRIPT", &server_script(&modules, "server-filesystem"));
    let fx = Fixture::new("t-mcp-npm-filesystem", &[(".mcp.json", &mcp_json), ("notes.txt", "inside marker 41c9\n")]);
    let outside_dir = fx.dir.path().join("elsewhere");
    std::fs::create_dir(&outside_dir).unwrap();
    let outside = outside_dir.join("secret.txt");
    std::fs::write(&outside, "outside marker 9d2e\n").unwrap();
    let workflow =
        FILESYSTEM_WORKFLOW.replace("MODULES", modules_str).replace("OUTSIDE_DIR", outside_dir.to_str().unwrap());
    let mock = MockServer::start().await;
    mock.push_all([
        Step::tool("mcp__filesystem__list_allowed_directories", json!({})),
        Step::tool("mcp__filesystem__read_text_file", json!({"path": "notes.txt"})),
        Step::tool("mcp__filesystem__read_text_file", json!({"path": outside.to_str().unwrap()})),
        Step::text("Done."),
        Step::text("Summary."),
    ]);
    let (run, seconds) = run(&fx, &workflow, &mock).await;
    run.expect_code(0);
    eprintln!("the server-filesystem run took {seconds:.1} s");
    assert!(seconds < 120.0, "the run took {seconds:.1} s");

    let sent = tool_results_sent(&mock);
    assert_eq!(sent.len(), 3, "{sent:#?}");
    // Its root is the agent's worktree, not the user's repository.
    let allowed = text_of(&sent[0].1);
    assert!(!allowed.contains(fx.repo.to_str().unwrap()), "{allowed}");
    // Inside the root: the content came back.
    assert!(text_of(&sent[1].1).contains("inside marker 41c9"), "{:#}", sent[1].1);
    // Outside: refused, and the content is in no request the model received.
    let results = run.tool_results("a");
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(results[2].1, "{results:?}");
    for request in mock.requests() {
        let body = String::from_utf8_lossy(&request.body);
        assert!(!body.contains("outside marker 9d2e"), "the outside file reached the model: {body}");
    }
    assert!(!run.transcript_text("a").contains("outside marker 9d2e"));

    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}
