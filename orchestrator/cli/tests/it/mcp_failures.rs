//! MCP servers that fail, seen from outside: a server that needs a network it does not
//! have fails fast with npm's own error (a fake `npx` on `PATH` that behaves as npm does
//! without a network: offline it fails at once, online it retries for a minute), is
//! named on stderr without `-v` (its wildcard tool list too), and is listed in
//! report.json and report.md with the tail of its stderr; a working server's stderr
//! reaches the agent's transcript.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::mcp::{python, read_roots, server_script};
use crate::support::{Fixture, Run, orch, processes_left};

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

/// npm without a network and without the package in its cache: with
/// `npm_config_offline=true` it fails at once with `ENOTCACHED`; online, it retries the
/// registry for a minute before it gives up.
const FAKE_NPX: &str = r#"#!/bin/sh
echo "npm warn exec The following package was not found and will be installed: $2" >&2
if [ "$npm_config_offline" = "true" ]; then
  echo "npm error code ENOTCACHED" >&2
  echo "npm error request to https://registry.npmjs.org/@modelcontextprotocol%2fserver-everything failed: cache mode is 'only-if-cached' but no cached response is available." >&2
  echo "npm error A complete log of this run can be found in: /tmp/npm-cache/_logs/debug-0.log" >&2
  exit 1
fi
sleep 60
echo "npm error code EAI_AGAIN" >&2
echo "npm error network request to https://registry.npmjs.org/ failed, reason: getaddrinfo EAI_AGAIN registry.npmjs.org" >&2
exit 1
"#;

/// A `bin/` directory holding the fake `npx`, and a `PATH` that finds it first.
fn fake_npx(fx: &Fixture) -> (PathBuf, String) {
    let bin = fx.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let npx = bin.join("npx");
    std::fs::write(&npx, FAKE_NPX).unwrap();
    std::fs::set_permissions(&npx, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    (bin, path)
}

fn run(fx: &Fixture, workflow: &str, script: &str, path: &str) -> (Run, f64) {
    let workflow_file = fx.write("workflow.yaml", workflow);
    let script_file = fx.write("script.yaml", script);
    let mut cmd = orch();
    cmd.current_dir(fx.dir.path())
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .env_remove("GITHUB_ACTIONS")
        .arg("run")
        .arg(&workflow_file)
        .args(["--provider", "scripted", "--script"])
        .arg(&script_file)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&fx.out)
        .args(["--run-id", &fx.run_id]);
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let seconds = started.elapsed().as_secs_f64();
    (Run::from_output(&fx.out, out), seconds)
}

fn events_of_type(run: &Run, agent: &str, kind: &str) -> Vec<Value> {
    run.events(agent).into_iter().filter(|e| e["type"] == kind).collect()
}

const NPX_WORKFLOW: &str = r#"
version: 1
name: mcp-npx
defaults:
  tools: [Read, mcp__everything__*]
  limits: { max_turns: 4, timeout: 2m }
  sandbox: { network: none, read: ["BIN"] }
mcp_servers:
  everything: { command: npx, args: ["-y", "@modelcontextprotocol/server-everything"] }
agents:
  a:
    prompt: Use what you have.
integrate: none
"#;

const DONE_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - text: Done without it.
  synthesis:
    - text: Summary.
"#;

/// `npx -y` under `network: none` with no npm cache: the server fails in well under
/// 5 s (asserted loosely, < 15 s) with npm's error, not after a 30 s wait; the failure
/// is named on stderr without `-v`, with the wildcard that gave no tools, and is in
/// report.json, report.md and the transcript with npm's stderr.
#[test]
fn npx_without_a_network_fails_fast_with_npms_own_error() {
    let fx = Fixture::new("t-mcp-npx", &[("f.txt", "f\n")]);
    let (bin, path) = fake_npx(&fx);
    let workflow = NPX_WORKFLOW.replace("BIN", bin.to_str().unwrap());
    let (run, seconds) = run(&fx, &workflow, DONE_SCRIPT, &path);
    run.expect_code(0);
    let a = run.agent("a");
    let host_ms = a["timings"]["host_ms"].as_u64().unwrap();
    eprintln!("the failed npx server took {host_ms} ms of the agent's start ({seconds:.1} s for the whole run)");
    assert!(host_ms < 15_000, "starting the agent took {host_ms} ms");
    assert!(seconds < 40.0, "the run took {seconds:.1} s");

    // Named on stderr without `-v`, with npm's reason and the wildcard that is empty.
    let warning = run
        .stderr
        .lines()
        .find(|l| l.starts_with("warning: ") && l.contains("MCP server `everything`"))
        .unwrap_or_else(|| panic!("no warning names the server:\n{}", run.stderr));
    assert!(warning.contains("`mcp__everything__*` gives it no tools"), "{warning}");
    assert!(warning.contains("npm error code ENOTCACHED"), "{warning}");

    // In report.json: the reason, the tools it took away, npm's stderr.
    let failures = a["mcp_failures"].as_array().unwrap_or_else(|| panic!("{a:#}"));
    assert_eq!(failures.len(), 1, "{failures:#?}");
    let failure = &failures[0];
    assert_eq!(failure["server"], "everything");
    assert_eq!(failure["tools"], serde_json::json!(["mcp__everything__*"]));
    let reason = failure["reason"].as_str().unwrap();
    assert!(reason.contains("ENOTCACHED") && reason.contains("`npx`"), "{reason}");
    let stderr = failure["stderr"].as_str().unwrap();
    assert!(stderr.starts_with("npm warn exec") && stderr.contains("only-if-cached"), "{stderr}");

    // In report.md.
    let md = std::fs::read_to_string(fx.out.join("report.md")).unwrap();
    assert!(md.contains("The MCP server `everything` failed (`mcp__everything__*` unavailable)"), "{md}");
    assert!(md.contains("npm error code ENOTCACHED"), "{md}");

    // In the transcript, as an `mcp_server` event.
    let events = events_of_type(&run, "a", "mcp_server");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["server"], "everything");
    assert!(events[0]["error"].as_str().unwrap().contains("ENOTCACHED"), "{:#}", events[0]);
    assert!(events[0]["stderr"].as_str().unwrap().contains("npm error code ENOTCACHED"), "{:#}", events[0]);
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

/// The real `npx`, where this machine has one (with node and npm), under
/// `network: none` and an empty npm cache: npm's own `ENOTCACHED` well under 5 s
/// (asserted < 15 s). Without the offline setting it wrote nothing and hung for the
/// whole 30 s start timeout.
#[test]
fn the_real_npx_without_a_network_fails_fast_with_npms_own_error() {
    let npx = std::env::var("PATH")
        .unwrap_or_default()
        .split(':')
        .map(|d| PathBuf::from(d).join("npx"))
        .find(|p| p.is_file());
    let Some(npx) = npx else {
        eprintln!("skipping: no npx on PATH (the fake-npx tests above still run)");
        return;
    };
    // npm's own files (`…/node_modules/npm/bin/npx-cli.js` → `…/node_modules`).
    let real = std::fs::canonicalize(&npx).unwrap();
    let modules = real.ancestors().find(|a| a.file_name().is_some_and(|n| n == "node_modules")).unwrap();
    let fx = Fixture::new("t-mcp-real-npx", &[("f.txt", "f\n")]);
    let workflow = NPX_WORKFLOW.replace("BIN", modules.to_str().unwrap());
    let (run, seconds) = run(&fx, &workflow, DONE_SCRIPT, &std::env::var("PATH").unwrap_or_default());
    run.expect_code(0);
    let a = run.agent("a");
    let host_ms = a["timings"]["host_ms"].as_u64().unwrap();
    eprintln!("the real npx failed after {host_ms} ms of the agent's start ({seconds:.1} s for the whole run)");
    assert!(host_ms < 15_000, "starting the agent took {host_ms} ms");
    let reason = a["mcp_failures"][0]["reason"].as_str().unwrap();
    assert!(reason.contains("ENOTCACHED"), "{reason}");
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

/// With npm online (the server's own `env` says so, and wins), the fake npm retries past
/// the start timeout: the server fails at the timeout with the stderr it wrote so far,
/// and nothing it started is left running.
#[test]
fn a_server_that_hangs_fails_at_the_timeout_with_its_stderr() {
    let fx = Fixture::new("t-mcp-npx-online", &[("f.txt", "f\n")]);
    let (bin, path) = fake_npx(&fx);
    let workflow = NPX_WORKFLOW.replace("BIN", bin.to_str().unwrap()).replace(
        r#"args: ["-y", "@modelcontextprotocol/server-everything"] }"#,
        r#"args: ["-y", "@modelcontextprotocol/server-everything"], env: { npm_config_offline: "false" } }"#,
    );
    let (run, seconds) = run(&fx, &workflow, DONE_SCRIPT, &path);
    run.expect_code(0);
    eprintln!("the hanging server was given up after {seconds:.1} s (the whole run)");
    let failure = &run.agent("a")["mcp_failures"][0];
    let reason = failure["reason"].as_str().unwrap();
    assert!(reason.contains("did not answer within 30s") && reason.contains("npm warn exec"), "{reason}");
    assert!(!reason.contains("ENOTCACHED"), "{reason}");
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}

const NOISY_WORKFLOW: &str = r#"
version: 1
name: mcp-noisy
defaults:
  tools: [mcp__fx__add, mcp__bad__add, Bash]
  limits: { max_turns: 4, timeout: 2m }
  sandbox: { read: READ_ROOTS }
mcp_servers:
  fx: { command: sh, args: ["-c", "echo 'fixture server: starting up' >&2; (while [ ! -e go ]; do sleep 0.1; done; echo 'fixture server: later' >&2) & exec \"$0\" \"$1\"", "PYTHON", "SERVER"] }
  bad: { command: "PYTHON", args: ["SERVER", "fail"] }
agents:
  a:
    prompt: Add.
integrate: none
"#;

const NOISY_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: mcp__fx__add, input: { a: 2, b: 2 } }]
    - tool_calls: [{ name: mcp__bad__add, input: { a: 2, b: 2 } }]
    - tool_calls: [{ name: Bash, input: { command: "touch go; sleep 1" } }]
    - text: Four.
  synthesis:
    - text: Summary.
"#;

/// A working server's stderr is in the transcript, what it wrote at start and what it
/// wrote while the agent worked (and it is not a failure); a server that exits at once
/// is a failure with its own words, and the named tool says why.
#[test]
fn stderr_of_working_and_failing_servers_reaches_the_transcript_and_report() {
    let Some(python) = python() else { return };
    let fx = Fixture::new("t-mcp-noisy", &[("f.txt", "f\n")]);
    let workflow = NOISY_WORKFLOW
        .replace("READ_ROOTS", &read_roots(&python))
        .replace("PYTHON", python.to_str().unwrap())
        .replace("SERVER", server_script().to_str().unwrap());
    let path = std::env::var("PATH").unwrap_or_default();
    let (run, _) = run(&fx, &workflow, NOISY_SCRIPT, &path);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results[0], ("mcp__fx__add".into(), false, "4".into()), "{results:?}");
    assert!(results[1].1 && results[1].2.contains("this fixture server refuses to start"), "{results:?}");

    let events = events_of_type(&run, "a", "mcp_server");
    let fx_events: Vec<&Value> = events.iter().filter(|e| e["server"] == "fx").collect();
    assert!(!fx_events.is_empty(), "{events:#?}");
    assert!(fx_events.iter().all(|e| e.get("error").is_none()), "{events:#?}");
    let fx_stderr: String = fx_events.iter().map(|e| e["stderr"].as_str().unwrap()).collect();
    assert!(fx_stderr.contains("fixture server: starting up"), "{fx_stderr}");
    assert!(fx_stderr.contains("fixture server: later"), "{fx_stderr}");
    // The later line was written while the agent worked: the stop reports it.
    let last = fx_events.last().unwrap()["stderr"].as_str().unwrap();
    assert_eq!(last, "fixture server: later\n", "{events:#?}");
    let bad: Vec<&Value> = events.iter().filter(|e| e["server"] == "bad").collect();
    assert_eq!(bad.len(), 1, "{events:#?}");
    assert!(bad[0]["stderr"].as_str().unwrap().contains("refuses to start"), "{:#}", bad[0]);

    let failures = run.agent("a")["mcp_failures"].as_array().unwrap().clone();
    let servers: Vec<&str> = failures.iter().map(|f| f["server"].as_str().unwrap()).collect();
    assert_eq!(servers, ["bad"], "{failures:#?}");
    assert_eq!(failures[0]["tools"], serde_json::json!(["mcp__bad__add"]));
    assert!(run.stderr.contains("warning: agent `a`: the MCP server `bad` is not available"), "{}", run.stderr);
    assert!(!run.stderr.contains("MCP server `fx`"), "{}", run.stderr);
    assert!(processes_left(fx.dir.path()).is_empty(), "{:?}", processes_left(fx.dir.path()));
}
