//! Shared pieces of the loop suites: small in-process tools, an event collector and
//! providers pointed at the mock server.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use orch_agents::model::RetryPolicy;
use orch_agents::model::anthropic::{AnthropicConfig, AnthropicProvider};
use orch_agents::model::openai::{OpenAiConfig, OpenAiProvider};
use orch_agents::{Event, EventSink, ToolCall, ToolOutput, ToolRunner, ToolSpec};
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// Fast retries, so fault tests take milliseconds.
pub fn quick_retries() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
        max_retry_after: Duration::from_secs(2),
    }
}

pub fn anthropic(url: &str) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: url.to_string(),
        api_key: Some("test-key".into()),
        auth_token: None,
        retry: quick_retries(),
        max_concurrent_requests: 64,
    })
    .unwrap()
}

pub fn openai(url: &str) -> OpenAiProvider {
    OpenAiProvider::new(OpenAiConfig {
        base_url: format!("{url}/v1"),
        api_key: Some("test-key".into()),
        retry: quick_retries(),
        max_concurrent_requests: 64,
    })
    .unwrap()
}

/// Collects every event.
#[derive(Default, Clone)]
pub struct Collect(pub Arc<Mutex<Vec<Event>>>);

impl EventSink for Collect {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Collect {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    /// The `type` tags of the events, in order, with text deltas left out.
    pub fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .filter(|e| !matches!(e, Event::TextDelta { .. }))
            .map(|e| serde_json::to_value(e).unwrap()["type"].as_str().unwrap().to_string())
            .collect()
    }
}

/// Test tools: `Echo` (concurrency-safe; returns its `text`), `Sleep` (sleeps `ms`,
/// ignoring cancellation, as a stubborn tool would) and `Fail` (always an error).
#[derive(Default)]
pub struct TestTools {
    pub calls: Mutex<Vec<String>>,
}

#[async_trait]
impl ToolRunner for TestTools {
    fn specs(&self) -> Vec<ToolSpec> {
        let spec = |name: &str, description: &str, prop: &str, ty: &str| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object", "properties": {prop: {"type": ty}}}),
        };
        vec![
            spec("Echo", "Returns its text.", "text", "string"),
            spec("Fail", "Always fails.", "why", "string"),
            spec("Sleep", "Sleeps for ms milliseconds.", "ms", "integer"),
        ]
    }

    fn is_concurrency_safe(&self, call: &ToolCall) -> bool {
        call.name == "Echo"
    }

    async fn run(&self, call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
        self.calls.lock().unwrap().push(call.name.clone());
        match call.name.as_str() {
            "Echo" => ToolOutput::ok(call.input["text"].as_str().unwrap_or_default()),
            "Fail" => ToolOutput::error(format!("failed: {}", call.input["why"].as_str().unwrap_or_default())),
            "Sleep" => {
                tokio::time::sleep(Duration::from_millis(call.input["ms"].as_u64().unwrap_or(0))).await;
                ToolOutput::ok("slept")
            }
            other => ToolOutput::error(format!("no tool named `{other}`")),
        }
    }
}
