//! `orch exec` through the one agent session: the repository's hooks
//! (`.orch/settings.yaml`) and MCP servers (`.mcp.json`) work there as in `orch run`.
//! Each test attempts the thing and checks its effect on disk and in the event stream.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;

use serde_json::Value;

use crate::mcp::{python, server_script};
use crate::support::{orch, processes_left};

fn events(stdout: &str) -> Vec<Value> {
    stdout.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn finished(events: &[Value]) -> Vec<&Value> {
    events.iter().map(|e| &e["event"]).filter(|e| e["type"] == "tool_use_finished").collect()
}

fn exec(dir: &Path, script: &str, args: &[&str]) -> (i32, String, String) {
    let path = dir.join("script.yaml");
    std::fs::write(&path, script).unwrap();
    let out = orch()
        .current_dir(dir)
        .env_remove("GITHUB_EVENT_NAME")
        .args(["exec", "--allow-outside-repo", "--provider", "scripted", "--json", "--script"])
        .arg(&path)
        .args(args)
        .arg("go")
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn a_repository_hook_runs_under_exec_and_blocks_the_call() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join(".orch")).unwrap();
    std::fs::write(
        dir.path().join(".orch/settings.yaml"),
        "hooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks: [{ command: \"touch hook-ran; echo 'no shell here' >&2; exit 2\" }]\n",
    )
    .unwrap();
    let script = r#"
version: 1
agents:
  main:
    - tool_calls: [{ name: Bash, input: { command: "touch victim" } }]
    - expect: { contains: "no shell here" }
      text: Done.
"#;
    let (code, stdout, stderr) = exec(dir.path(), script, &["--tools", "Bash,Read"]);
    assert_eq!(code, 0, "{stderr}");
    // The hook ran (in the working directory), and the call it blocked did not.
    assert!(dir.path().join("hook-ran").is_file(), "{stderr}");
    assert!(!dir.path().join("victim").exists());
    let events = events(&stdout);
    let done = finished(&events);
    assert_eq!(done.len(), 1, "{stdout}");
    assert_eq!(done[0]["is_error"], true);
    assert!(done[0]["output"].as_str().unwrap().contains("blocked by a PreToolUse hook: no shell here"), "{stdout}");
}

#[test]
fn a_stdio_mcp_server_from_the_repository_serves_exec() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();
    let mcp = serde_json::json!({ "mcpServers": { "fx": { "command": python, "args": [server_script()] } } });
    std::fs::write(dir.path().join(".mcp.json"), mcp.to_string()).unwrap();
    let script = r#"
version: 1
agents:
  main:
    - tool_calls: [{ name: mcp__fx__add, input: { a: 2, b: 3 } }]
    - text: Five.
"#;
    let mut args = vec!["--tools".to_string(), "Read,mcp__fx__add".to_string()];
    args.extend(["--read".to_string(), server_script().parent().unwrap().display().to_string()]);
    if let Some(venv) = python.parent().and_then(Path::parent).filter(|v| v.join("pyvenv.cfg").is_file()) {
        args.extend(["--read".to_string(), venv.display().to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, stdout, stderr) = exec(dir.path(), script, &args);
    assert_eq!(code, 0, "{stderr}");
    let events = events(&stdout);
    let done = finished(&events);
    assert_eq!(done.len(), 1, "{stdout}\n{stderr}");
    assert_eq!(done[0]["name"], "mcp__fx__add");
    assert_eq!(done[0]["is_error"], false, "{stdout}");
    assert_eq!(done[0]["output"].as_str().unwrap().trim(), "5", "{stdout}");
    // The server stopped with the session.
    assert!(processes_left(dir.path()).is_empty(), "{:?}", processes_left(dir.path()));
}

#[test]
fn an_undeclared_mcp_server_is_a_usage_error_under_exec() {
    let dir = tempfile::tempdir().unwrap();
    let script = "version: 1\nagents: {}\n";
    let (code, _, stderr) = exec(dir.path(), script, &["--tools", "Read,mcp__nope__x"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no MCP server `nope` is declared"), "{stderr}");
}
