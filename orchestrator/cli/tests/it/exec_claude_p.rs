//! `orch exec` in place of `claude -p`: the same turns as the reference captures of the
//! real Claude Code CLI (tests/fixtures/claude-code-headless, see its README), served by
//! the mock model server, give output of the same shapes (line kinds in the same
//! order, and every key of Claude Code's lines but those listed as its own), and the
//! flags Claude Code's documentation uses act as there: `-p`, a piped prompt, piped
//! input after a prompt, `--system-prompt`, `--append-system-prompt`,
//! `--allowedTools`, `--disallowedTools`, `--dangerously-skip-permissions` and
//! `--mcp-config`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use orch_testkit::mock::{MockServer, parse_steps};
use serde_json::Value;

use crate::support::{git, orch};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/claude-code-headless")
}

/// Keys only Claude Code has (its product's state and timings), by line kind.
fn claude_only(kind: &str) -> &'static [&'static str] {
    match kind {
        "system/init" => &[
            "additional_directories",
            "analytics_disabled",
            "capabilities",
            "claude_code_version",
            "fast_mode_disabled_reason",
            "fast_mode_state",
            "memory_paths",
            "messaging_socket_path",
            "original_cwd",
            "per_turn_effort_active",
            "product_feedback_disabled",
            "terminal_slash_commands",
            "ultrathink_available",
            "ultrathink_typed_raises",
            "view_mode",
        ],
        "user" => &["timestamp", "tool_use_result", "tool_result_meta"],
        // Claude Code keeps each task's output in a file of its own.
        "system/task_notification" => &["output_file"],
        "assistant" => &["timestamp"],
        "message" => &["context_management"],
        _ => &[
            "api_error_status",
            "duration_api_ms",
            "fast_mode_disabled_reason",
            "fast_mode_state",
            "first_content_frame_ms",
            "model_usage_since_last_result",
            "queued_turn_count",
            "result_index",
            "safety_stops",
            "subagent_stats",
            "time_to_request_ms",
            "ttft_ms",
            "ttft_stream_ms",
        ],
    }
}

/// `system/init`, `assistant/text`, `user/tool_result`, `result/success`, ...
fn kind(line: &Value) -> String {
    let ty = line["type"].as_str().unwrap_or("?");
    match ty {
        "assistant" | "user" => format!("{ty}/{}", line["message"]["content"][0]["type"].as_str().unwrap_or("?")),
        _ => format!("{ty}/{}", line["subtype"].as_str().unwrap_or("?")),
    }
}

fn keys(v: &Value) -> BTreeSet<String> {
    v.as_object().map(|o| o.keys().cloned().collect()).unwrap_or_default()
}

/// Every key of Claude Code's `reference` line that orch's `ours` lacks, but those of
/// [`claude_only`] (and the same for an assistant line's message).
fn missing(reference: &Value, ours: &Value) -> Vec<String> {
    let group = match (reference["type"].as_str(), reference["subtype"].as_str()) {
        (Some("system"), Some("task_notification")) => "system/task_notification",
        (Some("system"), _) => "system/init",
        (Some(t @ ("user" | "assistant")), _) => t,
        _ => "result",
    };
    let mut out: Vec<String> = keys(reference)
        .difference(&keys(ours))
        .filter(|k| !claude_only(group).contains(&k.as_str()))
        .cloned()
        .collect();
    if group == "assistant" {
        out.extend(
            keys(&reference["message"])
                .difference(&keys(&ours["message"]))
                .filter(|k| !claude_only("message").contains(&k.as_str()))
                .map(|k| format!("message.{k}")),
        );
    }
    out
}

fn lines(text: &str) -> Vec<Value> {
    text.lines().filter(|l| !l.trim().is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A repository with note.txt, and a mock server that serves the captures' turns.
async fn setup() -> (tempfile::TempDir, MockServer) {
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("note.txt"), "hello world\n").unwrap();
    let script = std::fs::read_to_string(fixtures().join("mock-script.yaml")).unwrap();
    let script = script.replace("NOTE_PATH", &dir.path().join("note.txt").display().to_string());
    let mock = MockServer::start().await;
    mock.push_all(parse_steps(&script).unwrap());
    (dir, mock)
}

/// `orch exec` as the captures ran `claude`: `-p "Read note.txt"` and `extra`.
fn exec(dir: &Path, mock: &MockServer, extra: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    let mut child = orch()
        .current_dir(dir)
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "-p", "Read note.txt", "--model", "claude-sonnet-4-5"])
        .args(extra)
        .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(text) = stdin {
        child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_json_has_claude_codes_lines_in_its_order() {
    let reference = lines(&std::fs::read_to_string(fixtures().join("stream-json.jsonl")).unwrap());
    let (dir, mock) = setup().await;
    let (code, stdout, stderr) = exec(dir.path(), &mock, &["--output-format", "stream-json", "--verbose"], None);
    assert_eq!(code, 0, "{stderr}");
    let ours = lines(&stdout);
    let kinds = |l: &[Value]| l.iter().map(kind).collect::<Vec<_>>();
    assert_eq!(kinds(&ours), kinds(&reference), "{stdout}");
    for (theirs, mine) in reference.iter().zip(&ours) {
        let gap = missing(theirs, mine);
        assert!(gap.is_empty(), "orch's {} line lacks {gap:?}: {mine}", kind(mine));
    }
    // One session id on every line; the result carries the answer and the totals.
    let session = ours[0]["session_id"].as_str().unwrap();
    assert!(ours.iter().all(|l| l["session_id"] == session), "{stdout}");
    let result = ours.last().unwrap();
    assert_eq!(result["result"], "The note says hello world.");
    assert_eq!(result["num_turns"], 2);
    assert_eq!(result["stop_reason"], "end_turn");
    assert!(result["usage"]["input_tokens"].as_u64().unwrap() > 0, "{result}");
    assert_eq!(ours[3]["message"]["content"][0]["content"], "1\thello world\n");
    assert!(ours[0]["tools"].as_array().unwrap().iter().any(|t| t == "Read"), "{}", ours[0]);
    mock.assert_tool_pairing();
}

/// The `parent_tool_use_id` of each line but the init and result lines, in order.
fn parents(lines: &[Value]) -> Vec<Option<String>> {
    lines[1..lines.len() - 1].iter().map(|l| l["parent_tool_use_id"].as_str().map(str::to_string)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_lines_carry_its_agent_call_and_denied_calls_are_listed() {
    let reference = lines(&std::fs::read_to_string(fixtures().join("stream-json-agent.jsonl")).unwrap());
    let dir = tempfile::tempdir().unwrap();
    git(dir.path(), &["init", "-q", "-b", "main"]);
    std::fs::write(dir.path().join("note.txt"), "hello world\n").unwrap();
    let script = std::fs::read_to_string(fixtures().join("mock-script-agent.yaml")).unwrap();
    let script = script
        .replace("NOTE_PATH", &dir.path().join("note.txt").display().to_string())
        .replace("OUT_PATH", &dir.path().join("out.txt").display().to_string());
    let mock = MockServer::start().await;
    mock.push_all(parse_steps(&script).unwrap());
    let extra = ["--permission-mode", "default", "--tools", "Agent,Read,Write", "--output-format", "stream-json"];
    let (code, stdout, stderr) = exec(dir.path(), &mock, &extra, None);
    assert_eq!(code, 0, "{stderr}");
    let ours = lines(&stdout);
    // Claude Code's own progress lines of a task, which orch does not have.
    let reference: Vec<Value> = reference
        .into_iter()
        .filter(|l| {
            !["system/task_progress", "system/task_updated", "system/background_tasks_changed"]
                .contains(&kind(l).as_str())
        })
        .collect();
    let kinds = |l: &[Value]| l.iter().map(kind).collect::<Vec<_>>();
    assert_eq!(kinds(&ours), kinds(&reference), "{stdout}");
    for (theirs, mine) in reference.iter().zip(&ours) {
        let gap = missing(theirs, mine);
        assert!(gap.is_empty(), "orch's {} line lacks {gap:?}: {mine}", kind(mine));
    }
    // The same lines are the sub-agent's: they name the Agent call, the others null.
    let agent_call = |l: &[Value]| {
        l.iter()
            .flat_map(|l| l["message"]["content"].as_array().cloned().unwrap_or_default())
            .find(|b| b["type"] == "tool_use" && b["name"] == "Agent")
            .and_then(|b| b["id"].as_str().map(str::to_string))
            .unwrap()
    };
    let shape = |l: &[Value], id: &str| parents(l).into_iter().map(|p| p.map(|p| p == id)).collect::<Vec<_>>();
    assert_eq!(shape(&ours, &agent_call(&ours)), shape(&reference, &agent_call(&reference)), "{stdout}");
    assert!(parents(&ours).iter().any(Option::is_some), "{stdout}");
    // The Write that default mode denied: not run, and listed as Claude Code lists it.
    assert!(!dir.path().join("out.txt").exists());
    let denials = |l: &[Value]| l.last().unwrap()["permission_denials"].as_array().cloned().unwrap_or_default();
    let (theirs, mine) = (denials(&reference), denials(&ours));
    assert_eq!(mine.len(), theirs.len(), "{}", ours.last().unwrap());
    assert_eq!(mine[0]["tool_name"], theirs[0]["tool_name"]);
    assert_eq!(mine[0]["tool_input"]["content"], "hello\n");
    let gap = missing(&theirs[0], &mine[0]);
    assert!(gap.is_empty(), "orch's denial lacks {gap:?}: {}", mine[0]);
    mock.assert_tool_pairing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_result_has_claude_codes_keys_on_success_and_at_the_turn_limit() {
    for (file, extra, subtype) in [
        ("json.json", &["--output-format", "json"][..], "success"),
        ("max-turns-1.json", &["--output-format", "json", "--max-turns", "1"][..], "error_max_turns"),
    ] {
        let reference: Value = serde_json::from_str(&std::fs::read_to_string(fixtures().join(file)).unwrap()).unwrap();
        let (dir, mock) = setup().await;
        let (code, stdout, stderr) = exec(dir.path(), &mock, extra, None);
        let ours = lines(&stdout);
        assert_eq!(ours.len(), 1, "{stdout}");
        let ours = &ours[0];
        assert_eq!(ours["subtype"], reference["subtype"], "{ours}");
        assert_eq!(ours["subtype"], subtype);
        assert_eq!(ours["is_error"], reference["is_error"], "{ours}");
        assert_eq!(ours["terminal_reason"], reference["terminal_reason"], "{ours}");
        let gap = missing(&reference, ours);
        assert!(gap.is_empty(), "{file}: orch's result lacks {gap:?}: {ours}");
        // Claude Code exits 1 on an error result; orch keeps its documented codes.
        match subtype {
            "success" => assert_eq!(code, 0, "{stderr}"),
            _ => {
                assert_eq!(code, 4, "{stderr}");
                assert!(ours["errors"].as_array().is_some_and(|e| !e.is_empty()), "{ours}");
            }
        }
    }
}

/// The text of the first request's first user message.
fn first_prompt(mock: &MockServer) -> String {
    let requests = mock.requests();
    let first = &requests[0].messages()[0]["content"];
    match first {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join(""),
        _ => String::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn piped_input_is_the_prompt_or_follows_it() {
    // A prompt and piped input: the prompt, a line break, the input (as Claude Code
    // sends them).
    let (dir, mock) = setup().await;
    let (code, _, stderr) = exec(dir.path(), &mock, &[], Some("piped content\n"));
    assert_eq!(code, 0, "{stderr}");
    assert!(first_prompt(&mock).ends_with("Read note.txt\npiped content\n"), "{}", first_prompt(&mock));

    // No prompt argument: the pipe is the prompt.
    let (dir, mock) = setup().await;
    let mut child = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "-p"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"only stdin prompt\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(first_prompt(&mock).ends_with("only stdin prompt\n"), "{}", first_prompt(&mock));

    // Nothing at all: a usage error, not a hang.
    let (dir, mock) = setup().await;
    let out = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "-p"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(mock.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn system_prompt_and_tool_flags_act_as_in_claude_code() {
    let system = |mock: &MockServer| mock.requests()[0].system().map(Value::to_string).unwrap_or_default();

    let (dir, mock) = setup().await;
    let (code, _, stderr) = exec(dir.path(), &mock, &["--system-prompt", "You are a terse note reader."], None);
    assert_eq!(code, 0, "{stderr}");
    let text = system(&mock);
    assert!(text.contains("You are a terse note reader."), "{text}");
    // It replaces orch's own text, not the environment that follows it.
    assert!(!text.contains("running unattended inside a CI job"), "{text}");
    assert!(text.contains("Environment:"), "{text}");

    let (dir, mock) = setup().await;
    let (code, _, stderr) = exec(dir.path(), &mock, &["--append-system-prompt", "Answer in French."], None);
    assert_eq!(code, 0, "{stderr}");
    let blocks = mock.requests()[0].system().cloned().unwrap_or_default();
    let last = blocks.as_array().and_then(|b| b.last()).and_then(|b| b["text"].as_str()).unwrap_or_default();
    assert!(last.ends_with("\n\nAnswer in French."), "{blocks}");

    // Tools that rules allow join the agent's; a bare name denied takes its tool away.
    let (dir, mock) = setup().await;
    let extra = ["--allowedTools", "Bash(git log:*),Edit", "--disallowedTools", "Glob", "--output-format", "json"];
    let (code, _, stderr) = exec(dir.path(), &mock, &extra, None);
    assert_eq!(code, 0, "{stderr}");
    let offered = mock.requests()[0].tool_names().into_iter().map(str::to_string).collect::<BTreeSet<_>>();
    assert!(offered.contains("Bash") && offered.contains("Edit") && offered.contains("Read"), "{offered:?}");
    assert!(!offered.contains("Glob"), "{offered:?}");

    // An unknown tool in the lists is a usage error with the closest name.
    let (dir, mock) = setup().await;
    let (code, _, stderr) = exec(dir.path(), &mock, &["--allowedTools", "Raed"], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("did you mean `Read`?"), "{stderr}");

    // --dangerously-skip-permissions is bypassPermissions.
    let (dir, mock) = setup().await;
    let extra = ["--dangerously-skip-permissions", "--output-format", "stream-json", "--verbose"];
    let (code, stdout, stderr) = exec(dir.path(), &mock, &extra, None);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(lines(&stdout)[0]["permissionMode"], "bypassPermissions", "{stdout}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_config_errors_are_usage_errors_naming_the_file() {
    let (dir, mock) = setup().await;
    let (code, _, stderr) = exec(dir.path(), &mock, &["--mcp-config", "missing.json"], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot read --mcp-config missing.json"), "{stderr}");
    let bad = r#"{"mcpServers": {"bad name": {"command": "true"}}}"#;
    let (code, _, stderr) = exec(dir.path(), &mock, &["--mcp-config", bad], None);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("cannot name an MCP server"), "{stderr}");
    assert!(mock.requests().is_empty(), "no model call after a bad --mcp-config");
}
