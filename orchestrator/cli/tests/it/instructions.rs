//! Project instructions and the git snapshot through the real binary against the mock
//! model server: a subdirectory's `CLAUDE.md` reaches the model once, with the result
//! of the first tool call that touches that directory (as Claude Code does), and an
//! agent with a writing tool gets its git snapshot also when orch runs as root (its
//! worktree then belongs to the sandbox uid).

use orch_testkit::mock::{MockServer, Step};
use serde_json::json;

use crate::support::{Fixture, Run};

/// `orch run` of `workflow` against the mock server.
async fn run_on_mock(fx: &Fixture, mock: &MockServer, workflow: &str) -> Run {
    fx.run_off_runtime(fx.mock_command(workflow, &mock.url())).await
}

const WORKFLOW: &str = r#"
version: 1
name: nested
defaults:
  tools: [Read, Grep, Edit]
  limits: { max_turns: 6, timeout: 2m }
agents:
  worker:
    prompt: Look at the sub crate.
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subdirectory_claude_md_comes_once_with_the_first_call_that_touches_it() {
    let fx = Fixture::new(
        "t-nested",
        &[
            ("CLAUDE.md", "ROOT-RULES: be brief.\n"),
            ("sub/CLAUDE.md", "SUB-RULES: tabs, not spaces. See @style.md\n"),
            ("sub/style.md", "SUB-STYLE: no trailing spaces.\n"),
            ("sub/a.txt", "alpha\n"),
            ("sub/b.txt", "beta\n"),
            ("top.txt", "top\n"),
        ],
    );
    let mock = MockServer::start().await;
    mock.push(Step::tool("Read", json!({ "file_path": "top.txt" })));
    mock.push(Step::tool("Read", json!({ "file_path": "sub/a.txt" })));
    mock.push(Step::tool("Grep", json!({ "pattern": "beta", "path": "sub" })));
    mock.push(Step::text("Done."));
    let run = run_on_mock(&fx, &mock, WORKFLOW).await;
    run.expect_code(0);

    let requests = mock.requests();
    assert_eq!(requests.len(), 4, "{}", run.stderr);
    let whole = |n: usize| requests[n].json.to_string();
    // The root's file is in the system prompt from the start; the subdirectory's is not.
    let system = requests[0].system().unwrap().to_string();
    assert!(system.contains("ROOT-RULES"), "{system}");
    assert!(!whole(0).contains("SUB-RULES"));
    // A call outside `sub/` brings nothing.
    assert!(!whole(1).contains("SUB-RULES"), "{}", whole(1));
    // The first call under `sub/`: its result carries the file and its import, once.
    let results = tool_results(requests[2].messages());
    assert_eq!(results.len(), 2);
    assert!(results[1].contains("alpha"), "{}", results[1]);
    assert!(results[1].contains("sub/CLAUDE.md") && results[1].contains("SUB-STYLE"), "{}", results[1]);
    assert_eq!(whole(2).matches("SUB-RULES").count(), 1, "{}", whole(2));
    // Touching `sub/` again repeats nothing: the history holds the one copy.
    assert_eq!(whole(3).matches("SUB-RULES").count(), 1, "{}", whole(3));
    assert_eq!(whole(3).matches("SUB-STYLE").count(), 1, "{}", whole(3));
    let results = tool_results(requests[3].messages());
    assert!(results[2].contains("sub/b.txt") && !results[2].contains("SUB-RULES"), "{}", results[2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writing_agent_gets_its_git_snapshot_also_as_root() {
    let fx = Fixture::new("t-gitsnap", &[("a.txt", "alpha\n")]);
    let mock = MockServer::start().await;
    mock.push(Step::text("Done."));
    let run = run_on_mock(&fx, &mock, WORKFLOW).await;
    run.expect_code(0);
    let requests = mock.requests();
    let system = requests[0].system().unwrap().to_string();
    assert!(system.contains("git repository: yes"), "{system}");
    assert!(system.contains(&format!("- branch: {}", fx.branch("worker"))), "{system}");
    assert!(system.contains(" fixture"), "the last commit is listed: {system}");
}

/// The text of every `tool_result` block in a request's messages.
fn tool_results(messages: &[serde_json::Value]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}
