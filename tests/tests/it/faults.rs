//! Fault injection against the mock model server: a server that never answers, one
//! that sends headers and goes silent, a stall mid-stream, content blocks orch does not
//! know, and a rate limit that never lifts. Every wait is bounded by the configured
//! timeouts and retry budget, and deterministic answers are not retried.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::time::{Duration, Instant};

use orch_agents::model::anthropic::{AnthropicConfig, AnthropicProvider};
use orch_agents::model::openai::{OpenAiConfig, OpenAiProvider};
use orch_agents::model::{ModelProvider, RetryPolicy, Timeouts};
use orch_agents::{ContentBlock, Message, QueryConfig, QueryOutcome, Terminal, query};
use orch_testkit::mock::{MockServer, Step, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::{Collect, TestTools};

/// Many attempts, short waits: only the time budget can end the retries.
fn patient_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 1000,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_retry_after: Duration::from_secs(1),
    }
}

fn anthropic(url: &str) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: url.to_string(),
        api_key: Some("test-key".into()),
        auth_token: None,
        retry: patient_retries(),
        max_concurrent_requests: 64,
    })
    .unwrap()
}

fn openai(url: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{url}/v1"),
        api_key: Some("test-key".into()),
        retry: patient_retries(),
        max_concurrent_requests: 64,
    })
    .unwrap()
}

/// Waits of a few hundred milliseconds, so a dead server costs about a second.
fn config(retry_budget: Duration) -> QueryConfig {
    let mut c = QueryConfig::new("main", "claude-sonnet-4-5");
    c.limits.max_turns = Some(10);
    c.timeouts = Timeouts { first_byte: Duration::from_millis(300), idle: Duration::from_millis(300), retry_budget };
    c
}

async fn run(provider: &dyn ModelProvider, config: &QueryConfig) -> (QueryOutcome, Duration) {
    let started = Instant::now();
    let out = query(
        provider,
        &TestTools::default(),
        config,
        vec![Message::user("go")],
        &Collect::default(),
        &CancellationToken::new(),
    )
    .await;
    (out, started.elapsed())
}

fn model_error(out: &QueryOutcome) -> (&str, &str) {
    match &out.terminal {
        Terminal::ModelError { kind, message } => (kind.as_str(), message.as_str()),
        other => panic!("expected a model error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_server_that_never_answers_costs_at_most_the_retry_budget() {
    for provider in ["anthropic", "openai"] {
        let mock = MockServer::start().await;
        mock.set_default(Some(Step::NoReply));
        let (out, took) = match provider {
            "anthropic" => run(&anthropic(&mock.url()), &config(Duration::from_millis(800))).await,
            _ => run(&openai(&mock.url()), &config(Duration::from_millis(800))).await,
        };
        let (kind, message) = model_error(&out);
        assert_eq!(kind, "network", "{provider}");
        assert!(message.contains("no answer within 0.3s"), "{provider}: {message}");
        assert!(message.contains("retry budget"), "{provider}: {message}");
        // About 0.8 s of budget plus one last 0.3 s attempt; far from forever.
        assert!(took < Duration::from_secs(10), "{provider}: {took:?}");
        let attempts = mock.requests().len();
        assert!((2..=5).contains(&attempts), "{provider}: {attempts} attempts");
    }
}

#[tokio::test]
async fn headers_then_silence_is_a_first_byte_timeout_and_the_retry_recovers() {
    let mock = MockServer::start().await;
    mock.push_all([Step::StallAfter { turn: Turn::text("lost"), events: 0 }, Step::text("ok")]);
    let (out, took) = run(&anthropic(&mock.url()), &config(Duration::from_secs(30))).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    assert_eq!(out.final_text, "ok");
    assert_eq!(mock.requests().len(), 2);
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test]
async fn a_stall_mid_stream_is_an_idle_timeout_and_the_partial_answer_is_dropped() {
    for provider in ["anthropic", "openai"] {
        let mock = MockServer::start().await;
        let long = "a fairly long answer that stalls after a few events";
        mock.push_all([Step::StallAfter { turn: Turn::text(long), events: 4 }, Step::text("whole answer")]);
        let (out, took) = match provider {
            "anthropic" => run(&anthropic(&mock.url()), &config(Duration::from_secs(30))).await,
            _ => run(&openai(&mock.url()), &config(Duration::from_secs(30))).await,
        };
        assert_eq!(out.terminal, Terminal::Completed, "{provider}: {:?}", out.terminal);
        assert_eq!(out.final_text, "whole answer", "{provider}");
        assert_eq!(out.messages.len(), 2, "{provider}: only the prompt and the whole answer");
        assert_eq!(mock.requests().len(), 2, "{provider}");
        assert!(took < Duration::from_secs(10), "{provider}: {took:?}");
    }
}

#[tokio::test]
async fn a_stream_that_stays_silent_ends_within_the_budget_with_the_reason() {
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::StallAfter { turn: Turn::text("never finished"), events: 3 }));
    let (out, took) = run(&anthropic(&mock.url()), &config(Duration::from_millis(700))).await;
    let (kind, message) = model_error(&out);
    assert_eq!(kind, "network");
    assert!(message.contains("the stream sent nothing for 0.3s"), "{message}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[tokio::test]
async fn unknown_content_blocks_are_dropped_and_the_turn_goes_on() {
    let mock = MockServer::start().await;
    let server_tool =
        json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}});
    let server_result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []});
    mock.push_all([
        Step::Reply(Turn::tool("Echo", json!({"text": "e"})).with_raw_block(server_tool).with_raw_block(server_result)),
        Step::text("done"),
    ]);
    let (out, _) = run(&anthropic(&mock.url()), &config(Duration::from_secs(30))).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    // One request per turn: nothing was retried.
    assert_eq!(mock.requests().len(), 2);
    mock.assert_tool_pairing();
    // The known blocks are kept; the unknown ones are not sent back.
    let assistant = &out.messages[1].content;
    assert!(matches!(assistant.as_slice(), [ContentBlock::ToolUse { name, .. }] if name == "Echo"), "{assistant:?}");
    let sent = mock.requests()[1].body.to_vec();
    assert!(!String::from_utf8_lossy(&sent).contains("server_tool_use"));
}

#[tokio::test]
async fn a_rate_limit_that_never_lifts_ends_at_the_retry_budget() {
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::retry_after(429, "0.1")));
    let (out, took) = run(&anthropic(&mock.url()), &config(Duration::from_millis(900))).await;
    let (kind, message) = model_error(&out);
    assert_eq!(kind, "rate_limit");
    assert!(message.contains("retry budget of 0.9s"), "{message}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let attempts = mock.requests().len();
    // Retry-after 0.1 s within 0.9 s: several attempts, far fewer than the policy's 1000.
    assert!((3..=10).contains(&attempts), "{attempts} attempts");
}

#[tokio::test]
async fn a_bad_request_is_named_at_once_without_retries() {
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::status(400)));
    let (out, _) = run(&anthropic(&mock.url()), &config(Duration::from_secs(30))).await;
    let (kind, _) = model_error(&out);
    assert_eq!(kind, "invalid_request");
    assert_eq!(mock.requests().len(), 1);
}
