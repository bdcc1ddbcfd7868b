//! Output-limit recovery and budget reservation in the query loop, against the mock
//! model server: a cut tool call, a text answer still cut after its continuations, the
//! output cap, extended thinking, and budgets that reserve the next call's worst case.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::HashSet;
use std::time::Duration;

use orch_agents::model::{ModelSettings, Thinking};
use orch_agents::query::CUT_TOOL_CALL;
use orch_agents::{Budget, Message, QueryConfig, QueryOutcome, Terminal, query};
use orch_testkit::mock::{MockServer, MockUsage, Step, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::common::{Collect, TestTools, anthropic, openai};

fn config() -> QueryConfig {
    let mut c = QueryConfig::new("main", "claude-sonnet-4-5");
    c.limits.max_turns = Some(20);
    c
}

async fn run(mock: &MockServer, config: &QueryConfig, tools: &TestTools) -> QueryOutcome {
    query(
        &anthropic(&mock.url()),
        tools,
        config,
        vec![Message::user("go")],
        &Collect::default(),
        &CancellationToken::new(),
    )
    .await
}

fn caps(mock: &MockServer) -> Vec<u64> {
    mock.requests().iter().map(|r| r.json["max_tokens"].as_u64().unwrap()).collect()
}

fn assert_no_identical_requests(mock: &MockServer) {
    let mut seen = HashSet::new();
    for (n, r) in mock.requests().iter().enumerate() {
        assert!(seen.insert(r.body.to_vec()), "request {n} was sent before, unchanged");
    }
}

fn cut_write(text: &str) -> Step {
    Step::Reply(Turn::tool("Echo", json!({ "text": text })).with_stop_reason("max_tokens"))
}

#[tokio::test]
async fn a_cut_tool_call_is_asked_again_with_the_largest_cap_then_split() {
    let mock = MockServer::start().await;
    mock.push_all([
        cut_write("a huge file"),
        cut_write("a huge file, again"),
        Step::tool("Echo", json!({"text": "part one"})),
        Step::text("done"),
    ]);
    let tools = TestTools::default();
    let out = run(&mock, &config(), &tools).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    // The model's default cap, then its ceiling for the retry, which the told-to-split
    // request keeps.
    assert_eq!(caps(&mock), vec![32_000, 64_000, 64_000, 32_000]);
    // The first cut answer was dropped: the second request holds only the prompt.
    let reqs = mock.requests();
    assert_eq!(reqs[1].messages().len(), 1);
    // The third request answers the cut call with the instruction to split the write.
    let third = reqs[2].messages();
    let result = &third.last().unwrap()["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["is_error"], true);
    assert_eq!(result["content"], CUT_TOOL_CALL);
    // Recovered by the third request; no cut call ever ran.
    assert_eq!(*tools.calls.lock().unwrap(), vec!["Echo".to_string()]);
    assert_no_identical_requests(&mock);
    mock.assert_tool_pairing();
}

#[tokio::test]
async fn a_cut_tool_call_that_fits_the_larger_cap_runs_once() {
    let mock = MockServer::start().await;
    mock.push_all([cut_write("big"), Step::tool("Echo", json!({"text": "big"})), Step::text("done")]);
    let tools = TestTools::default();
    let out = run(&mock, &config(), &tools).await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert_eq!(caps(&mock), vec![32_000, 64_000, 32_000]);
    assert_eq!(tools.calls.lock().unwrap().len(), 1);
    assert_no_identical_requests(&mock);
}

#[tokio::test]
async fn at_the_ceiling_a_cut_call_is_split_at_once_never_resent_unchanged() {
    let mock = MockServer::start().await;
    mock.push_all([cut_write("big"), Step::text("done")]);
    let mut c = config();
    c.max_output_tokens = 64_000;
    let out = run(&mock, &c, &TestTools::default()).await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert_eq!(mock.requests().len(), 2);
    assert_no_identical_requests(&mock);
}

#[tokio::test]
async fn a_cut_tool_call_on_openai_recovers_too() {
    let mock = MockServer::start().await;
    mock.push_all([cut_write("big"), cut_write("big again"), Step::text("done")]);
    let tools = TestTools::default();
    let out = query(
        &openai(&mock.url()),
        &tools,
        &config(),
        vec![Message::user("go")],
        &Collect::default(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    assert_eq!(mock.requests().len(), 3);
    assert!(tools.calls.lock().unwrap().is_empty());
    assert_no_identical_requests(&mock);
}

#[tokio::test]
async fn a_text_answer_still_cut_ends_as_max_output_tokens() {
    let mock = MockServer::start().await;
    let cut = |t: &str| Step::Reply(Turn::text(t).with_stop_reason("max_tokens"));
    mock.push_all([cut("a "), cut("b "), cut("c "), cut("d")]);
    let out = run(&mock, &config(), &TestTools::default()).await;
    assert_eq!(out.terminal, Terminal::MaxOutputTokens { continuations: 3 });
    assert_eq!(out.terminal.name(), "max_output_tokens");
    assert!(out.terminal.is_limit(), "a partial result, not a completed one");
    assert_eq!(out.final_text, "a b c d");
    assert_eq!(mock.remaining(), 0);
}

#[tokio::test]
async fn model_settings_set_the_cap_thinking_and_window() {
    let mock = MockServer::start().await;
    mock.push(Step::text("ok"));
    let mut c = config();
    c.apply_settings(&ModelSettings {
        max_output_tokens: Some(12_000),
        context_window: Some(50_000),
        thinking: Some(Thinking { budget_tokens: 4_000 }),
        idle_timeout: Some(Duration::from_secs(7)),
        ..ModelSettings::default()
    });
    assert_eq!(c.context.window, 50_000);
    assert_eq!(c.timeouts.idle, Duration::from_secs(7));
    let out = run(&mock, &c, &TestTools::default()).await;
    assert_eq!(out.terminal, Terminal::Completed);
    let body = &mock.requests()[0].json;
    assert_eq!(body["max_tokens"], 12_000);
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 4_000}));
}

#[test]
fn known_models_get_their_limits_and_unknown_ones_conservative_defaults() {
    let sonnet = QueryConfig::new("a", "claude-sonnet-4-5-20250929");
    assert_eq!((sonnet.max_output_tokens, sonnet.max_output_ceiling), (32_000, 64_000));
    assert_eq!(sonnet.context.window, 200_000);
    let gpt = QueryConfig::new("a", "gpt-4o");
    assert_eq!((gpt.max_output_tokens, gpt.context.window), (16_384, 128_000));
    let unknown = QueryConfig::new("a", "some-local-model");
    assert_eq!((unknown.max_output_tokens, unknown.max_output_ceiling), (8_192, 8_192));
}

#[tokio::test]
async fn the_token_budget_reserves_the_next_calls_worst_case() {
    let mock = MockServer::start().await;
    // Every answer reports 1,000 prompt tokens and 500 of output.
    let usage = MockUsage { input_tokens: 1_000, output_tokens: 500, ..Default::default() };
    mock.set_default(Some(Step::Reply(Turn::tool("Echo", json!({"text": "x"})).with_usage(usage))));
    let mut c = config();
    c.limits.max_tokens = Some(5_000);
    let out = run(&mock, &c, &TestTools::default()).await;
    assert!(
        matches!(out.terminal, Terminal::BudgetExceeded { budget: Budget::Tokens, limit, used } if limit == 5_000.0 && used <= 5_000.0),
        "{:?}",
        out.terminal
    );
    assert!(out.usage.total() <= 5_000, "{}", out.usage.total());
    assert_eq!(out.overshoot, None);
    // Each call's cap was at most what the budget had left before it.
    let mut used = 0u64;
    for cap in caps(&mock) {
        assert!(cap + used <= 5_000, "cap {cap} after {used} used");
        used += 1_500;
    }
}

#[tokio::test]
async fn a_model_that_answers_past_its_cap_overshoots_by_at_most_one_call_and_says_so() {
    let mock = MockServer::start().await;
    // The server reports more output than the cap allowed: the reserve cannot prevent
    // it, so the outcome records by how much the budget was passed.
    let usage = MockUsage { input_tokens: 100, output_tokens: 3_000, ..Default::default() };
    mock.set_default(Some(Step::Reply(Turn::tool("Echo", json!({"text": "x"})).with_usage(usage))));
    let mut c = config();
    c.limits.max_tokens = Some(5_000);
    let out = run(&mock, &c, &TestTools::default()).await;
    assert!(matches!(out.terminal, Terminal::BudgetExceeded { budget: Budget::Tokens, .. }), "{:?}", out.terminal);
    let overshoot = out.overshoot.expect("an overshoot");
    assert_eq!(overshoot.budget, Budget::Tokens);
    assert_eq!(overshoot.by, out.usage.total() as f64 - 5_000.0);
    assert!(overshoot.by <= 3_100.0, "{overshoot:?}");
}
