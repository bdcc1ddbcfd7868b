//! Budgets and caps, through the binary: a cost limit with a model orch has no price
//! for refuses to start (exit 2, naming the model and `--prices`) before any agent runs;
//! with a price given it runs; a misspelled model without a limit gets a "did you mean"
//! warning. One answer with 3,000 tool calls runs only the per-turn cap of them, and the
//! next request stays small.

use crate::support::{Fixture, Run, orch};

use orch_testkit::mock::{MockServer, Step, ToolCall, Turn};
use serde_json::json;

const SCRIPT: &str = "version: 1\nagents:\n  a:\n    - text: Done.\n  synthesis:\n    - text: S.\n";

fn workflow(model: &str, limits: &str) -> String {
    format!(
        "version: 1\nname: budget\nmodel: {model}\ndefaults:\n  limits: {{ max_turns: 3{limits} }}\nagents:\n  a:\n    prompt: Go.\nintegrate: none\n"
    )
}

#[test]
fn a_cost_limit_with_an_unpriced_model_refuses_to_start() {
    let fx = Fixture::new("t-budget", &[("f.txt", "f\n")]);
    let run = fx.run(&workflow("claude-sonet-4-5", ", max_cost_usd: 1"), SCRIPT, &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("no price for the model `claude-sonet-4-5`"), "{}", run.stderr);
    assert!(run.stderr.contains("did you mean `claude-sonnet-4`?"), "{}", run.stderr);
    assert!(run.stderr.contains("--prices FILE"), "{}", run.stderr);
    assert!(run.report.is_null() && fx.orch_branches().is_empty(), "an agent ran:\n{}", run.stderr);

    // A price for it makes the limit hold, and the run starts.
    let prices = fx.write("prices.yaml", "claude-sonet-4-5: { input: 3, output: 15 }\n");
    let run =
        fx.run(&workflow("claude-sonet-4-5", ", max_cost_usd: 1"), SCRIPT, &["--prices", prices.to_str().unwrap()]);
    run.expect_code(0);

    // Without a limit the run starts, with a warning naming the likely model.
    let fx = Fixture::new("t-budget-warn", &[("f.txt", "f\n")]);
    let run = fx.run(&workflow("claude-haiku-4.5", ""), SCRIPT, &[]);
    run.expect_code(0);
    assert!(
        run.stderr.contains("`claude-haiku-4.5`") && run.stderr.contains("did you mean `claude-haiku-4-5`?"),
        "{}",
        run.stderr
    );
}

#[test]
fn exec_max_cost_usd_with_an_unpriced_model_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(&script, "version: 1\nagents:\n  main:\n    - text: Hello.\n").unwrap();
    let out = orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--model", "gpt-4o", "--max-cost-usd", "0.5", "--script"])
        .arg(&script)
        .arg("hi")
        .output()
        .unwrap();
    let run = Run::from_output(dir.path(), out);
    run.expect_code(2);
    assert!(
        run.stderr.contains("--max-cost-usd cannot hold: orch has no price for the model `gpt-4o`"),
        "{}",
        run.stderr
    );
    assert!(!run.stdout.contains("Hello."), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_with_3000_tool_calls_runs_only_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
    let mock = MockServer::start().await;
    let calls = (0..3000).map(|_| ToolCall::new("Read", json!({"file_path": "a.txt"}))).collect();
    mock.push_all([Step::Reply(Turn::tools(calls)), Step::text("done")]);
    let mut cmd = orch();
    cmd.current_dir(dir.path()).env("ANTHROPIC_API_KEY", "k").env("ANTHROPIC_BASE_URL", mock.url()).args([
        "exec",
        "--allow-outside-repo",
        "--tools",
        "Read",
        "go",
    ]);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let run = Run::from_output(dir.path(), out);
    run.expect_code(0);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{}", run.stderr);
    let next = &requests[1];
    let messages = next.messages();
    let uses = messages[1]["content"].as_array().unwrap();
    assert_eq!(uses.iter().filter(|b| b["type"] == "tool_use").count(), 65, "the cap and the refused call");
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(results.len(), 65);
    assert!(results[..64].iter().all(|r| r["is_error"] != true), "{:?}", &results[..2]);
    let refused = &results[64];
    assert_eq!(refused["is_error"], true, "{refused}");
    let text = refused["content"].as_str().unwrap_or_default();
    assert!(text.contains("3000 tool calls") && text.contains("at most 64"), "{text}");
    assert!(next.body.len() < 64 * 1024, "the next request is {} bytes", next.body.len());
    mock.assert_tool_pairing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbage_stream_is_named_at_once_without_retries() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    // Were the garbage retried, the second step would answer and the run succeed.
    mock.push_all([Step::Malformed { turn: Turn::text("hello") }, Step::text("retried")]);
    let mut cmd = orch();
    cmd.current_dir(dir.path()).env("ANTHROPIC_API_KEY", "k").env("ANTHROPIC_BASE_URL", mock.url()).args([
        "exec",
        "--allow-outside-repo",
        "go",
    ]);
    let started = std::time::Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let run = Run::from_output(dir.path(), out);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert_eq!(mock.requests().len(), 1, "the protocol error was retried:\n{}", run.stderr);
    assert!(run.stderr.contains("bad json"), "{}", run.stderr);
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(!run.stdout.contains("retried"), "{}", run.stdout);
}

#[test]
fn a_refused_connection_fails_in_seconds_naming_the_url_and_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}");
    let started = std::time::Instant::now();
    let out = orch()
        .current_dir(dir.path())
        .env("ANTHROPIC_API_KEY", "k")
        .env("ANTHROPIC_BASE_URL", &url)
        .args(["exec", "--allow-outside-repo", "go"])
        .output()
        .unwrap();
    let run = Run::from_output(dir.path(), out);
    let took = started.elapsed();
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}:\n{}", run.stderr);
    assert!(run.stderr.contains(&format!("cannot connect to the model api at {url}")), "{}", run.stderr);
    assert!(run.stderr.contains("ANTHROPIC_BASE_URL"), "{}", run.stderr);
    assert!(run.stderr.contains("retr"), "the retries were not shown:\n{}", run.stderr);
}
