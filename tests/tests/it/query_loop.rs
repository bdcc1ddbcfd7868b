//! The query loop against the mock model server: every terminal reason, every
//! retryable fault, non-retryable errors, cancellation, budgets and limits.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Collect, TestTools, anthropic, openai};
use orch_agents::model::ModelProvider;
use orch_agents::{
    Budget, ContentBlock, Event, Message, NullSink, Phase, Price, PriceTable, QueryConfig, QueryOutcome, Terminal,
    query,
};
use orch_testkit::mock::{MockServer, MockUsage, Step, ToolCall, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn config() -> QueryConfig {
    let mut c = QueryConfig::new("main", "claude-sonnet-4-5");
    c.limits.max_turns = Some(20);
    c
}

async fn run(provider: &dyn ModelProvider, config: &QueryConfig) -> (QueryOutcome, Collect) {
    let sink = Collect::default();
    let out =
        query(provider, &TestTools::default(), config, vec![Message::user("go")], &sink, &CancellationToken::new())
            .await;
    (out, sink)
}

fn echo(text: &str) -> Step {
    Step::tool("Echo", json!({ "text": text }))
}

#[tokio::test]
async fn completes_after_tool_turns_and_pairs_every_call() {
    let mock = MockServer::start().await;
    mock.push_all([echo("one"), echo("two"), Step::text("all done")]);
    let (out, events) = run(&anthropic(&mock.url()), &config()).await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert_eq!(out.final_text, "all done");
    assert_eq!(out.turns, 3);
    let requests = mock.requests();
    assert_eq!(requests.len(), 3);
    mock.assert_tool_pairing();
    // The third request carries both tool results, in order.
    let history = requests[2].messages();
    assert_eq!(history.len(), 5);
    assert_eq!(history[2]["content"][0]["type"], "tool_result");
    assert_eq!(history[2]["content"][0]["content"], "one");
    assert_eq!(history[4]["content"][0]["content"], "two");
    let kinds = events.kinds();
    assert_eq!(kinds.first().map(String::as_str), Some("turn_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("terminal"));
    for k in ["assistant_message", "tool_use_started", "tool_use_finished", "usage"] {
        assert!(kinds.iter().any(|x| x == k), "no {k} event in {kinds:?}");
    }
    assert!(events.events().iter().any(|e| matches!(e, Event::TextDelta { .. })));
}

#[tokio::test]
async fn request_carries_key_version_and_cache_breakpoints() {
    let mock = MockServer::start().await;
    mock.push_all([echo("x"), Step::text("ok")]);
    let mut cfg = config();
    cfg.system = vec![orch_agents::SystemPart { text: "static rules".into(), cache: true }];
    run(&anthropic(&mock.url()), &cfg).await;
    let req = &mock.requests()[1];
    assert_eq!(req.header("x-api-key"), Some("test-key"));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.json["stream"], true);
    assert_eq!(req.json["system"][0]["cache_control"]["type"], "ephemeral");
    let tools = req.tools();
    assert!(tools.last().unwrap().get("cache_control").is_some());
    let last = req.messages().last().unwrap();
    assert!(last["content"].as_array().unwrap().last().unwrap().get("cache_control").is_some());
}

#[tokio::test]
async fn thinking_blocks_go_back_unchanged() {
    let mock = MockServer::start().await;
    let turn = Turn::tool("Echo", json!({"text": "t"})).with_thinking("let me think", "sig-123");
    mock.push_all([Step::Reply(turn), Step::text("done")]);
    let (out, _) = run(&anthropic(&mock.url()), &config()).await;
    assert_eq!(out.terminal, Terminal::Completed);
    let requests = mock.requests();
    let sent = &requests[1].messages()[1]["content"][0];
    assert_eq!(sent["type"], "thinking");
    assert_eq!(sent["thinking"], "let me think");
    assert_eq!(sent["signature"], "sig-123");
}

#[tokio::test]
async fn usage_records_cache_tokens_and_cost() {
    let mock = MockServer::start().await;
    let usage = MockUsage {
        input_tokens: 100,
        output_tokens: 50,
        cache_creation_input_tokens: 1000,
        cache_read_input_tokens: 4000,
    };
    mock.push(Step::Reply(Turn::text("hi").with_usage(usage)));
    let mut cfg = config();
    let mut prices = PriceTable::empty();
    prices.set("claude-sonnet-4-5", Price::new(3.0, 15.0));
    cfg.prices = Arc::new(prices);
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    assert_eq!(out.usage.cache_read_input_tokens, 4000);
    assert_eq!(out.usage.cache_creation_input_tokens, 1000);
    let expected = (100.0 * 3.0 + 50.0 * 15.0 + 1000.0 * 3.75 + 4000.0 * 0.3) / 1e6;
    assert!((out.cost_usd - expected).abs() < 1e-12, "{} != {expected}", out.cost_usd);
}

#[tokio::test]
async fn max_turns_stops_the_loop_with_results_paired() {
    let mock = MockServer::start().await;
    mock.set_default(Some(echo("again")));
    let mut cfg = config();
    cfg.limits.max_turns = Some(3);
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    assert_eq!(out.terminal, Terminal::MaxTurns { limit: 3 });
    assert_eq!(mock.requests().len(), 3);
    assert!(matches!(out.messages.last().unwrap().content[0], ContentBlock::ToolResult { .. }));
}

#[tokio::test]
async fn token_budget_stops_the_loop_before_a_call_that_would_not_fit() {
    let mock = MockServer::start().await;
    let usage = MockUsage { input_tokens: 600, output_tokens: 100, ..Default::default() };
    mock.set_default(Some(Step::Reply(Turn::tool("Echo", json!({"text": "x"})).with_usage(usage))));
    let mut cfg = config();
    cfg.limits.max_tokens = Some(1500);
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    // After one call (700 tokens, 600 of them prompt), the next one's prompt alone
    // leaves less than the smallest useful output cap: the loop stops under the limit.
    assert_eq!(out.terminal, Terminal::BudgetExceeded { budget: Budget::Tokens, limit: 1500.0, used: 700.0 });
    assert_eq!(out.turns, 1);
    assert_eq!(out.overshoot, None);
    // The one call's output cap was shrunk to what the budget had left.
    let cap = mock.requests()[0].json["max_tokens"].as_u64().unwrap();
    assert!(cap < 1500, "{cap}");
}

#[tokio::test]
async fn cost_budget_stops_the_loop() {
    let mock = MockServer::start().await;
    let usage = MockUsage { input_tokens: 1_000_000, output_tokens: 0, ..Default::default() };
    mock.set_default(Some(Step::Reply(Turn::tool("Echo", json!({"text": "x"})).with_usage(usage))));
    let mut cfg = config();
    let mut prices = PriceTable::empty();
    prices.set("claude-sonnet-4-5", Price::new(3.0, 15.0));
    cfg.prices = Arc::new(prices);
    cfg.limits.max_cost_usd = Some(5.0);
    // A million input tokens is far over the context window; this test is about cost.
    cfg.context.enabled = false;
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    assert!(matches!(out.terminal, Terminal::BudgetExceeded { budget: Budget::CostUsd, .. }), "{:?}", out.terminal);
    // The second call's prompt (a million tokens, $3 or more) would not fit the $2 left.
    assert_eq!(out.turns, 1);
    assert!((out.cost_usd - 3.0).abs() < 1e-9);
    assert_eq!(out.overshoot, None);
}

#[tokio::test]
async fn timeout_during_streaming() {
    let mock = MockServer::start().await;
    mock.push(Step::Stall);
    let mut cfg = config();
    cfg.limits.timeout = Some(Duration::from_millis(300).into());
    let started = Instant::now();
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    assert!(matches!(out.terminal, Terminal::Timeout { .. }), "{:?}", out.terminal);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn timeout_during_tools_pairs_the_call() {
    let mock = MockServer::start().await;
    mock.push(Step::tool("Sleep", json!({"ms": 60_000})));
    let mut cfg = config();
    cfg.limits.timeout = Some(Duration::from_millis(300).into());
    let (out, _) = run(&anthropic(&mock.url()), &cfg).await;
    assert!(matches!(out.terminal, Terminal::Timeout { .. }), "{:?}", out.terminal);
    match &out.messages.last().unwrap().content[0] {
        ContentBlock::ToolResult { is_error, content, .. } => {
            assert!(is_error);
            assert!(content.contains("time limit"), "{content}");
        }
        other => panic!("expected a tool result, got {other:?}"),
    }
}

/// Starts a loop, cancels it after `after`, and returns the outcome and how long the
/// loop took to return after the cancel.
async fn cancel_after(mock: &MockServer, after: Duration) -> (QueryOutcome, Duration) {
    let provider = anthropic(&mock.url());
    let cancel = CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            cancel.cancel();
            Instant::now()
        })
    };
    let out = query(&provider, &TestTools::default(), &config(), vec![Message::user("go")], &NullSink, &cancel).await;
    let returned = Instant::now();
    let cancelled_at = canceller.await.unwrap();
    (out, returned.saturating_duration_since(cancelled_at))
}

#[tokio::test]
async fn cancel_mid_stream_returns_promptly() {
    let mock = MockServer::start().await;
    mock.push(Step::Stall);
    let (out, latency) = cancel_after(&mock, Duration::from_millis(200)).await;
    assert_eq!(out.terminal, Terminal::Aborted { during: Phase::Streaming });
    assert!(latency < Duration::from_millis(100), "returned {latency:?} after the cancel");
}

#[tokio::test]
async fn cancel_mid_tool_returns_promptly_and_pairs_the_call() {
    let mock = MockServer::start().await;
    let turn = Turn::tools(vec![
        ToolCall::new("Echo", json!({"text": "fast"})),
        ToolCall::new("Sleep", json!({"ms": 60_000})),
        ToolCall::new("Echo", json!({"text": "never"})),
    ]);
    mock.push(Step::Reply(turn));
    let (out, latency) = cancel_after(&mock, Duration::from_millis(300)).await;
    assert_eq!(out.terminal, Terminal::Aborted { during: Phase::Tools });
    assert!(latency < Duration::from_millis(100), "returned {latency:?} after the cancel");
    let results: Vec<_> = out.messages.last().unwrap().content.iter().collect();
    assert_eq!(results.len(), 3);
    let texts: Vec<(&str, bool)> = results
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult { content, is_error, .. } => (content.as_str(), *is_error),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts[0], ("fast", false));
    assert!(texts[1].1 && texts[1].0.contains("aborted"));
    assert!(texts[2].1 && texts[2].0.contains("aborted"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_fifty_concurrent_loops() {
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::Stall));
    let provider: Arc<dyn ModelProvider> = Arc::new(anthropic(&mock.url()));
    let root = CancellationToken::new();
    let mut handles = Vec::new();
    for i in 0..50 {
        let provider = provider.clone();
        let cancel = root.child_token();
        handles.push(tokio::spawn(async move {
            let mut cfg = config();
            cfg.agent_id = format!("agent-{i}");
            query(provider.as_ref(), &TestTools::default(), &cfg, vec![Message::user("go")], &NullSink, &cancel).await
        }));
    }
    // Wait until every loop is streaming.
    let deadline = Instant::now() + Duration::from_secs(10);
    while mock.requests().len() < 50 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.requests().len(), 50, "not every loop reached the model");
    root.cancel();
    let all = tokio::time::timeout(Duration::from_secs(5), futures::future::join_all(handles))
        .await
        .expect("a cancelled loop hung");
    for out in all {
        assert_eq!(out.unwrap().terminal, Terminal::Aborted { during: Phase::Streaming });
    }
}

#[tokio::test]
async fn retryable_faults_end_in_success() {
    let faults: Vec<(&str, Step)> = vec![
        ("429 with retry-after", Step::retry_after(429, "0")),
        ("500", Step::status(500)),
        ("502", Step::status(502)),
        ("503", Step::status(503)),
        ("504", Step::status(504)),
        ("529", Step::status(529)),
        ("stream cut midway", Step::CutAfter { turn: Turn::text("partial answer that never ends"), events: 4 }),
        ("connection dropped before any event", Step::CutAfter { turn: Turn::text("x"), events: 0 }),
        ("overloaded error event", Step::overloaded_mid_stream()),
    ];
    for (name, fault) in faults {
        let mock = MockServer::start().await;
        mock.push_all([fault, Step::text("recovered")]);
        let (out, events) = run(&anthropic(&mock.url()), &config()).await;
        assert_eq!(out.terminal, Terminal::Completed, "{name}");
        assert_eq!(out.final_text, "recovered", "{name}: partial text leaked into the answer");
        assert_eq!(mock.requests().len(), 2, "{name}");
        assert!(events.kinds().contains(&"retry".to_string()), "{name}: no retry event");
        assert_eq!(out.turns, 1, "{name}: a retry counted as a turn");
    }
}

/// A malformed event is a protocol error: named at once, never retried.
#[tokio::test]
async fn a_malformed_event_is_named_at_once() {
    let mock = MockServer::start().await;
    mock.push_all([Step::Malformed { turn: Turn::text("garbled") }, Step::text("never asked for")]);
    let (out, events) = run(&anthropic(&mock.url()), &config()).await;
    assert!(
        matches!(&out.terminal, Terminal::ModelError { message, .. } if message.contains("cannot read")),
        "{:?}",
        out.terminal
    );
    assert_eq!(mock.requests().len(), 1, "a protocol error was retried");
    assert!(!events.kinds().contains(&"retry".to_string()));
}

#[tokio::test]
async fn added_latency_still_succeeds() {
    let mock = MockServer::start().await;
    mock.set_latency(Duration::from_millis(50));
    mock.push_all([Step::delay(Duration::from_millis(100), echo("slow")), Step::text("done")]);
    let (out, _) = run(&anthropic(&mock.url()), &config()).await;
    assert_eq!(out.terminal, Terminal::Completed);
}

#[tokio::test]
async fn retry_after_is_honoured() {
    let mock = MockServer::start().await;
    mock.push_all([Step::retry_after(429, "0.4"), Step::text("ok")]);
    let started = Instant::now();
    let (out, events) = run(&anthropic(&mock.url()), &config()).await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert!(started.elapsed() >= Duration::from_millis(400));
    assert!(events.events().iter().any(|e| matches!(e, Event::Retry { delay_ms: 400, .. })));
}

#[tokio::test]
async fn retries_give_up_after_the_policy_limit() {
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::status(503)));
    let (out, _) = run(&anthropic(&mock.url()), &config()).await;
    match out.terminal {
        Terminal::ModelError { kind, message } => {
            assert_eq!(kind.as_str(), "server");
            assert!(message.contains("after 4 attempts"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(mock.requests().len(), 4);
}

#[tokio::test]
async fn non_retryable_errors_surface_at_once_with_the_server_message() {
    for (code, kind) in [(401, "auth"), (403, "auth"), (400, "invalid_request")] {
        let mock = MockServer::start().await;
        let body =
            json!({"type": "error", "error": {"type": "some_error", "message": format!("server says no ({code})")}});
        mock.push(Step::Status { code, retry_after: None, body: Some(body.to_string()) });
        let (out, _) = run(&anthropic(&mock.url()), &config()).await;
        match out.terminal {
            Terminal::ModelError { kind: k, message } => {
                assert_eq!(k.as_str(), kind);
                assert!(message.contains(&format!("server says no ({code})")), "{message}");
            }
            other => panic!("{code}: {other:?}"),
        }
        assert_eq!(mock.requests().len(), 1, "{code} was retried");
    }
}

#[tokio::test]
async fn prompt_too_long_is_its_own_terminal() {
    let mock = MockServer::start().await;
    mock.push(Step::PromptTooLong);
    let (out, _) = run(&anthropic(&mock.url()), &config()).await;
    assert!(matches!(out.terminal, Terminal::PromptTooLong { .. }), "{:?}", out.terminal);
    // The reactive compaction's summary request found no answer, so the error stands.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].tools().is_empty());
}

#[tokio::test]
async fn falls_back_after_repeated_overload() {
    let mock = MockServer::start().await;
    mock.push_all([Step::status(529), Step::status(529), Step::status(529), Step::text("from the fallback")]);
    let mut cfg = config();
    cfg.fallback_model = Some("claude-haiku-4-5".into());
    let (out, events) = run(&anthropic(&mock.url()), &cfg).await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert_eq!(out.final_text, "from the fallback");
    let models: Vec<_> = mock.requests().iter().map(|r| r.model().unwrap_or_default().to_string()).collect();
    assert_eq!(models, ["claude-sonnet-4-5", "claude-sonnet-4-5", "claude-sonnet-4-5", "claude-haiku-4-5"]);
    assert!(events.kinds().contains(&"fallback".to_string()));
    assert_eq!(out.turns, 1);
}

#[tokio::test]
async fn openai_provider_runs_the_same_loop() {
    let mock = MockServer::start().await;
    let turn =
        Turn::tools(vec![ToolCall::new("Echo", json!({"text": "a"})), ToolCall::new("Echo", json!({"text": "b"}))]);
    mock.push_all([Step::Reply(turn), Step::status(503), Step::text("done via openai")]);
    let (out, _) = run(&openai(&mock.url()), &config()).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    assert_eq!(out.final_text, "done via openai");
    let requests = mock.requests();
    assert!(requests.iter().all(|r| r.is_openai()));
    assert_eq!(requests.last().unwrap().header("authorization"), Some("Bearer test-key"));
    mock.assert_tool_pairing();
    let history = requests.last().unwrap().messages();
    let tool_msgs: Vec<_> = history.iter().filter(|m| m["role"] == "tool").map(|m| m["content"].clone()).collect();
    assert_eq!(tool_msgs, [json!("a"), json!("b")]);
}

#[tokio::test]
async fn openai_prompt_too_long_and_auth() {
    let mock = MockServer::start().await;
    mock.push(Step::PromptTooLong);
    let (out, _) = run(&openai(&mock.url()), &config()).await;
    assert!(matches!(out.terminal, Terminal::PromptTooLong { .. }), "{:?}", out.terminal);
    let mock = MockServer::start().await;
    mock.push(Step::status(401));
    let (out, _) = run(&openai(&mock.url()), &config()).await;
    assert!(
        matches!(&out.terminal, Terminal::ModelError { kind, .. } if kind.as_str() == "auth"),
        "{:?}",
        out.terminal
    );
}
