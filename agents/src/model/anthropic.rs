//! The Anthropic Messages API provider: streaming over SSE, tool use, thinking blocks,
//! prompt-cache breakpoints and usage with cache tokens.

use std::collections::BTreeMap;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::retry::{Attempt, AttemptError, Limiter, RetryPolicy, with_retries};
use super::settings::MIN_THINKING_BUDGET;
use super::sse::{self, cut_short, protocol};
use super::{ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamEvent, StreamSink, Timeouts};
use crate::message::ContentBlock;
use crate::usage::Usage;

const API_VERSION: &str = "2023-06-01";
const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// Settings of the Anthropic provider.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    /// Sent as `authorization: Bearer`, for gateways that want a token instead.
    pub auth_token: Option<String>,
    pub retry: RetryPolicy,
    pub max_concurrent_requests: usize,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            auth_token: None,
            retry: RetryPolicy::default(),
            max_concurrent_requests: 64,
        }
    }
}

impl AnthropicConfig {
    /// Reads `ANTHROPIC_BASE_URL`, `ANTHROPIC_API_KEY` and `ANTHROPIC_AUTH_TOKEN`.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        Self {
            base_url: var("ANTHROPIC_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()),
            api_key: var("ANTHROPIC_API_KEY"),
            auth_token: var("ANTHROPIC_AUTH_TOKEN"),
            ..Self::default()
        }
    }
}

/// Talks to `POST {base_url}/v1/messages`.
#[derive(Debug)]
pub struct AnthropicProvider {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    retry: RetryPolicy,
    limiter: std::sync::Arc<Limiter>,
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        if config.api_key.is_none() && config.auth_token.is_none() {
            return Err(ModelError::Config {
                message: "no api key: set ANTHROPIC_API_KEY (or ANTHROPIC_AUTH_TOKEN), or use the scripted provider to run offline"
                    .to_string(),
            });
        }
        let base = config.base_url.trim_end_matches('/');
        let url = if base.ends_with("/v1") { format!("{base}/messages") } else { format!("{base}/v1/messages") };
        let mut headers = HeaderMap::new();
        headers.insert(HeaderName::from_static("anthropic-version"), HeaderValue::from_static(API_VERSION));
        headers.insert(HeaderName::from_static("accept"), HeaderValue::from_static("text/event-stream"));
        if let Some(key) = &config.api_key {
            headers.insert(HeaderName::from_static("x-api-key"), secret_header(key)?);
        }
        if let Some(token) = &config.auth_token {
            headers.insert(HeaderName::from_static("authorization"), secret_header(&format!("Bearer {token}"))?);
        }
        Ok(Self {
            client: sse::client(&url)?,
            limiter: Limiter::shared(&url, config.max_concurrent_requests),
            url,
            headers,
            retry: config.retry,
        })
    }
}

/// One request of [`AnthropicProvider::send`], tried as often as the policy allows.
struct Call<'a> {
    provider: &'a AnthropicProvider,
    body: bytes::Bytes,
    model: &'a str,
    timeouts: Timeouts,
    /// The request offered server tools: their result blocks are kept (as text).
    server_tools: bool,
}

#[async_trait]
impl Attempt for Call<'_> {
    async fn attempt(&self, sink: StreamSink<'_>) -> Result<ModelResponse, AttemptError> {
        let p = self.provider;
        let started = tokio::time::Instant::now();
        let response =
            sse::post_json(&p.client, &p.url, p.headers.clone(), self.body.clone(), self.timeouts.first_byte).await?;
        let first = self.timeouts.first_byte.saturating_sub(started.elapsed());
        let mut events = std::pin::pin!(sse::events(response, first, self.timeouts.idle));
        let mut acc = Accumulator::new(self.model);
        acc.keep_search_results = self.server_tools;
        while let Some(event) = events.next().await {
            let event = event?;
            if acc.push(&event.event, &event.data, sink)? {
                return acc.finish();
            }
        }
        Err(cut_short())
    }
}

fn secret_header(value: &str) -> Result<HeaderValue, ModelError> {
    let mut v = HeaderValue::from_str(value.trim()).map_err(|_| ModelError::Config {
        message: "the api key holds characters that cannot go in an http header; check the variable".to_string(),
    })?;
    v.set_sensitive(true);
    Ok(v)
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        "anthropic"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        let call = Call {
            provider: self,
            body: request_bytes(request)?,
            model: request.model,
            timeouts: request.timeouts,
            server_tools: !request.server_tools.is_empty(),
        };
        let budget = request.timeouts.retry_budget;
        with_retries(&self.retry, &self.limiter, request.give_up_on_overload_after, budget, sink, &call).await
    }
}

/// The results of a `web_search_tool_result` block as text: one line per result
/// (title, URL, age), or the error the search ended with.
pub fn web_search_results(block: &Value) -> String {
    let content = block.get("content");
    if let Some(code) = content.and_then(|c| c.get("error_code")).and_then(Value::as_str) {
        return format!("[the web search failed: {code}]");
    }
    let mut out = String::from("Search results:");
    let results = content.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    for r in results {
        let title = r.get("title").and_then(Value::as_str).unwrap_or("(untitled)");
        let url = r.get("url").and_then(Value::as_str).unwrap_or("");
        out.push_str(&format!("\n- {title}: {url}"));
        if let Some(age) = r.get("page_age").and_then(Value::as_str) {
            out.push_str(&format!(" ({age})"));
        }
    }
    if results.is_empty() {
        out.push_str(" none");
    }
    out
}

/// The JSON body of a streaming Messages request, with cache breakpoints on the tool
/// list, on each system part marked `cache`, and on the history: the newest message and
/// the newest of the previous turn (at most four in all, as the API allows). As a JSON
/// tree, for tests and tools; the provider sends [`request_bytes`].
pub fn request_body(request: &ModelRequest<'_>) -> Value {
    serde_json::to_value(Body(request)).unwrap_or(Value::Null)
}

/// [`request_body`] as the bytes sent, serialized straight from the request: no JSON
/// tree of the history is built, and nothing of it is copied.
pub fn request_bytes(request: &ModelRequest<'_>) -> Result<bytes::Bytes, ModelError> {
    serde_json::to_vec(&Body(request))
        .map(bytes::Bytes::from)
        .map_err(|e| ModelError::Config { message: format!("cannot serialize the request: {e}") })
}

/// The request body's shape. Keys in the order the body has always had (the model,
/// the history, then the stable prefix), so the bytes are unchanged.
struct Body<'r, 'a>(&'r ModelRequest<'a>);

const EPHEMERAL: Ephemeral = Ephemeral { kind: "ephemeral" };

#[derive(serde::Serialize)]
struct Ephemeral {
    #[serde(rename = "type")]
    kind: &'static str,
}

impl serde::Serialize for Body<'_, '_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let r = self.0;
        // The API wants 1024 <= budget < max_tokens.
        let thinking = r.thinking.map(|t| t.budget_tokens.max(MIN_THINKING_BUDGET));
        let max_tokens = match thinking {
            Some(budget) => r.max_tokens.max(budget.saturating_add(1)),
            None => r.max_tokens,
        };
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("model", r.model)?;
        map.serialize_entry("max_tokens", &max_tokens)?;
        map.serialize_entry("stream", &true)?;
        map.serialize_entry("messages", &Messages(r.messages))?;
        if !r.system.is_empty() {
            map.serialize_entry("system", &System(r.system))?;
        }
        if !r.tools.is_empty() || !r.server_tools.is_empty() {
            map.serialize_entry("tools", &Tools(r.tools, r.server_tools))?;
        }
        if let Some(budget) = thinking {
            map.serialize_entry("thinking", &Enabled { kind: "enabled", budget_tokens: budget })?;
        }
        map.end()
    }
}

#[derive(serde::Serialize)]
struct Enabled {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

struct System<'a>(&'a [crate::model::SystemPart]);

impl serde::Serialize for System<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Part<'a> {
            #[serde(rename = "type")]
            kind: &'static str,
            text: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<Ephemeral>,
        }
        serializer.collect_seq(self.0.iter().map(|p| Part {
            kind: "text",
            text: &p.text,
            cache_control: p.cache.then_some(EPHEMERAL),
        }))
    }
}

struct Tools<'a>(&'a [crate::message::ToolSpec], &'a [Value]);

impl serde::Serialize for Tools<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        #[derive(serde::Serialize)]
        struct Tool<'a> {
            name: &'a str,
            description: &'a str,
            input_schema: &'a Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            cache_control: Option<Ephemeral>,
        }
        let (tools, server) = (self.0, self.1);
        let total = tools.len() + server.len();
        let mut seq = serializer.serialize_seq(Some(total))?;
        for (i, t) in tools.iter().enumerate() {
            let last = i + 1 == total;
            seq.serialize_element(&Tool {
                name: &t.name,
                description: &t.description,
                input_schema: &t.input_schema,
                cache_control: last.then_some(EPHEMERAL),
            })?;
        }
        for (i, t) in server.iter().enumerate() {
            if tools.len() + i + 1 == total {
                let mut marked = t.clone();
                marked["cache_control"] = serde_json::json!({"type": "ephemeral"});
                seq.serialize_element(&marked)?;
            } else {
                seq.serialize_element(t)?;
            }
        }
        seq.end()
    }
}

/// The history, with a breakpoint on the newest message and on the one that was newest
/// a turn ago (an answer and its results came since), so the next request reads what
/// this one writes: on each, the last block that can carry one.
struct Messages<'a>(&'a [crate::message::Message]);

impl serde::Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            role: crate::message::Role,
            content: Content<'a>,
        }
        let len = self.0.len();
        serializer.collect_seq(self.0.iter().enumerate().map(|(i, m)| {
            let marked = Some(i) == len.checked_sub(1) || Some(i) == len.checked_sub(3);
            let mark = if marked { m.content.iter().rposition(cacheable) } else { None };
            Out { role: m.role, content: Content(&m.content, mark) }
        }))
    }
}

struct Content<'a>(&'a [ContentBlock], Option<usize>);

impl serde::Serialize for Content<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        #[derive(serde::Serialize)]
        struct Marked<'a> {
            #[serde(flatten)]
            block: &'a ContentBlock,
            cache_control: Ephemeral,
        }
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for (i, block) in self.0.iter().enumerate() {
            if Some(i) == self.1 {
                seq.serialize_element(&Marked { block, cache_control: EPHEMERAL })?;
            } else {
                seq.serialize_element(block)?;
            }
        }
        seq.end()
    }
}

/// Thinking blocks cannot carry a cache breakpoint.
fn cacheable(block: &ContentBlock) -> bool {
    !matches!(block, ContentBlock::Thinking { .. } | ContentBlock::RedactedThinking { .. })
}

/// A content block while it streams in.
#[derive(Debug)]
enum Partial {
    Text(String),
    Thinking {
        thinking: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
    },
    /// A block type this version of orch does not know (e.g. `server_tool_use`): its
    /// events are read and the block is dropped, with a warning.
    Unknown,
}

/// Builds a response from stream events. Plain data in, plain data out, so it is tested
/// without HTTP.
#[derive(Debug)]
pub(crate) struct Accumulator {
    model: String,
    open: BTreeMap<usize, Partial>,
    done: BTreeMap<usize, ContentBlock>,
    usage: Usage,
    stop_reason: Option<StopReason>,
    /// Tool calls whose input is not valid json: fine when the output limit cut the
    /// answer, an error otherwise. Decided at the end, when the stop reason is known.
    broken_inputs: Vec<(String, String)>,
    /// Keep `web_search_tool_result` blocks, as text: only for a request that offered
    /// the search (the WebSearch tool's own); anywhere else they are dropped.
    pub(crate) keep_search_results: bool,
}

impl Accumulator {
    pub(crate) fn new(model: &str) -> Self {
        Self {
            model: model.to_string(),
            open: BTreeMap::new(),
            done: BTreeMap::new(),
            usage: Usage::default(),
            stop_reason: None,
            broken_inputs: Vec::new(),
            keep_search_results: false,
        }
    }

    /// Takes one SSE event; true once the message is complete.
    pub(crate) fn push(&mut self, name: &str, data: &str, sink: StreamSink<'_>) -> Result<bool, AttemptError> {
        if name == "ping" || data.trim().is_empty() {
            return Ok(false);
        }
        let v: Value =
            serde_json::from_str(data).map_err(|e| protocol(format!("bad json in a `{name}` event: {e}")))?;
        let kind = v.get("type").and_then(Value::as_str).unwrap_or(name);
        match kind {
            "message_start" => {
                if let Some(m) = v.pointer("/message/model").and_then(Value::as_str) {
                    self.model = m.to_string();
                }
                if let Some(u) = v.pointer("/message/usage") {
                    self.merge_usage(u);
                }
            }
            "content_block_start" => {
                let index = index_of(&v)?;
                let block = v.get("content_block").ok_or_else(|| schema("content_block_start without a block"))?;
                let partial = match block.get("type").and_then(Value::as_str) {
                    Some("text") => Partial::Text(str_at(block, "text")),
                    Some("thinking") => {
                        Partial::Thinking { thinking: str_at(block, "thinking"), signature: str_at(block, "signature") }
                    }
                    Some("redacted_thinking") => Partial::Redacted(str_at(block, "data")),
                    Some("tool_use") => {
                        Partial::ToolUse { id: str_at(block, "id"), name: str_at(block, "name"), json: String::new() }
                    }
                    // The results of the `web_search` server tool (offered only by the
                    // WebSearch tool's own request) arrive whole: kept as text.
                    Some("web_search_tool_result") if self.keep_search_results => {
                        Partial::Text(web_search_results(block))
                    }
                    other => {
                        let kind = other.unwrap_or("(none)");
                        tracing::warn!(block = %kind, index, "dropping a content block of a type orch does not know");
                        Partial::Unknown
                    }
                };
                self.open.insert(index, partial);
            }
            "content_block_delta" => {
                let index = index_of(&v)?;
                let delta = v.get("delta").ok_or_else(|| schema("content_block_delta without a delta"))?;
                let partial = self
                    .open
                    .get_mut(&index)
                    .ok_or_else(|| schema(format!("delta for block {index}, which never started")))?;
                match (delta.get("type").and_then(Value::as_str), partial) {
                    (Some("text_delta"), Partial::Text(t)) => {
                        let piece = str_at(delta, "text");
                        t.push_str(&piece);
                        sink(StreamEvent::TextDelta(piece));
                    }
                    (Some("input_json_delta"), Partial::ToolUse { json, .. }) => {
                        json.push_str(&str_at(delta, "partial_json"))
                    }
                    (Some("thinking_delta"), Partial::Thinking { thinking, .. }) => {
                        let piece = str_at(delta, "thinking");
                        thinking.push_str(&piece);
                        sink(StreamEvent::ThinkingDelta(piece));
                    }
                    (Some("signature_delta"), Partial::Thinking { signature, .. }) => {
                        signature.push_str(&str_at(delta, "signature"))
                    }
                    (Some("citations_delta"), _) | (_, Partial::Unknown) => {}
                    (Some(t @ ("text_delta" | "input_json_delta" | "thinking_delta" | "signature_delta")), _) => {
                        return Err(schema(format!("delta {t:?} does not fit block {index}")));
                    }
                    (t, _) => tracing::debug!(delta = ?t, index, "ignoring a delta type orch does not know"),
                }
            }
            "content_block_stop" => {
                let index = index_of(&v)?;
                let partial = self
                    .open
                    .remove(&index)
                    .ok_or_else(|| schema(format!("stop for block {index}, which never started")))?;
                let broken = self.broken_inputs.len();
                let Some(block) = self.finish_block(partial) else {
                    return Ok(false);
                };
                // A call with a broken input must not start early.
                if self.broken_inputs.len() == broken {
                    sink(StreamEvent::BlockComplete { index, block: block.clone() });
                }
                self.done.insert(index, block);
            }
            "message_delta" => {
                if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(StopReason::parse(r));
                }
                if let Some(u) = v.get("usage") {
                    self.merge_usage(u);
                }
            }
            "message_stop" => return Ok(true),
            "error" => return Err(stream_error(&v)),
            _ => {}
        }
        Ok(false)
    }

    /// Usage fields are cumulative: a later event replaces what an earlier one said.
    fn merge_usage(&mut self, u: &Value) {
        let get = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(n) = get("input_tokens") {
            self.usage.input_tokens = n;
        }
        if let Some(n) = get("output_tokens") {
            self.usage.output_tokens = n;
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            self.usage.cache_creation_input_tokens = n;
        }
        if let Some(n) = get("cache_read_input_tokens") {
            self.usage.cache_read_input_tokens = n;
        }
    }

    pub(crate) fn finish(self) -> Result<ModelResponse, AttemptError> {
        if !self.open.is_empty() {
            return Err(cut_short());
        }
        if let Some((name, error)) = self.broken_inputs.first()
            && self.stop_reason != Some(StopReason::MaxTokens)
        {
            return Err(protocol(format!("the input of tool call `{name}` is not valid json: {error}")));
        }
        let content: Vec<ContentBlock> = self.done.into_values().collect();
        let has_tools = content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = self.stop_reason.unwrap_or(if has_tools { StopReason::ToolUse } else { StopReason::EndTurn });
        Ok(ModelResponse { content, stop_reason, usage: self.usage, model: self.model })
    }
}

impl Accumulator {
    /// The finished block; `None` for a dropped one. A tool input that is not valid json
    /// becomes `{}` and is judged in [`Accumulator::finish`].
    fn finish_block(&mut self, partial: Partial) -> Option<ContentBlock> {
        Some(match partial {
            Partial::Text(text) => ContentBlock::Text { text },
            Partial::Thinking { thinking, signature } => ContentBlock::Thinking { thinking, signature },
            Partial::Redacted(data) => ContentBlock::RedactedThinking { data },
            Partial::ToolUse { id, name, json } => {
                let input = if json.trim().is_empty() {
                    Value::Object(Default::default())
                } else {
                    match serde_json::from_str(&json) {
                        Ok(input) => input,
                        Err(e) => {
                            self.broken_inputs.push((name.clone(), e.to_string()));
                            Value::Object(Default::default())
                        }
                    }
                };
                ContentBlock::ToolUse { id, name, input }
            }
            Partial::Unknown => return None,
        })
    }
}

/// A response that breaks the event schema: the same request would break it again, so
/// it is not retried.
fn schema(message: impl Into<String>) -> AttemptError {
    AttemptError::fatal(ModelError::Protocol { message: message.into() })
}

/// An `error` event inside a stream. Overload and server errors are worth a retry.
fn stream_error(v: &Value) -> AttemptError {
    let kind = v.pointer("/error/type").and_then(Value::as_str).unwrap_or("error").to_string();
    let message = super::short(v.pointer("/error/message").and_then(Value::as_str).unwrap_or("no message"));
    match kind.as_str() {
        "overloaded_error" => AttemptError {
            error: ModelError::Overloaded { status: 529, attempts: 1, message },
            retryable: true,
            overloaded: true,
            retry_after: None,
            refused: false,
        },
        "rate_limit_error" => AttemptError::retryable(ModelError::RateLimited { status: 429, attempts: 1, message }),
        "api_error" | "timeout_error" => AttemptError::retryable(ModelError::Server {
            status: 500,
            attempts: 1,
            message: format!("{kind}: {message}"),
        }),
        _ if super::looks_like_prompt_too_long(&message) => AttemptError::fatal(ModelError::PromptTooLong { message }),
        _ => AttemptError::fatal(ModelError::InvalidRequest { status: 400, message: format!("{kind}: {message}") }),
    }
}

fn index_of(v: &Value) -> Result<usize, AttemptError> {
    v.get("index").and_then(Value::as_u64).map(|i| i as usize).ok_or_else(|| schema("event without an index"))
}

fn str_at(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{Message, ToolSpec};
    use crate::model::SystemPart;
    use serde_json::json;

    fn feed(events: &[(&str, Value)]) -> (Result<ModelResponse, AttemptError>, Vec<StreamEvent>) {
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let mut acc = Accumulator::new("m");
        for (name, data) in events {
            match acc.push(name, &data.to_string(), &mut sink) {
                Ok(true) => return (acc.finish(), seen),
                Ok(false) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        (Err(cut_short()), seen)
    }

    #[test]
    fn builds_text_thinking_and_tool_use() {
        let (resp, seen) = feed(&[
            (
                "message_start",
                json!({"type":"message_start","message":{"model":"claude-x","usage":{"input_tokens":10,"cache_read_input_tokens":90,"cache_creation_input_tokens":5,"output_tokens":1}}}),
            ),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}),
            ),
            ("content_block_stop", json!({"type":"content_block_stop","index":0})),
            ("ping", json!({"type":"ping"})),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hel"}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lo"}}),
            ),
            ("content_block_stop", json!({"type":"content_block_stop","index":1})),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"Echo","input":{}}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\""}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":": 1}"}}),
            ),
            ("content_block_stop", json!({"type":"content_block_stop","index":2})),
            (
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}),
            ),
            ("message_stop", json!({"type":"message_stop"})),
        ]);
        let resp = resp.unwrap();
        assert_eq!(resp.model, "claude-x");
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage { input_tokens: 10, output_tokens: 42, cache_creation_input_tokens: 5, cache_read_input_tokens: 90 }
        );
        assert_eq!(
            resp.content,
            vec![
                ContentBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() },
                ContentBlock::text("Hello"),
                ContentBlock::ToolUse { id: "t1".into(), name: "Echo".into(), input: json!({"a": 1}) },
            ]
        );
        assert!(seen.contains(&StreamEvent::TextDelta("Hel".into())));
        let completes = seen.iter().filter(|e| matches!(e, StreamEvent::BlockComplete { .. })).count();
        assert_eq!(completes, 3);
    }

    #[test]
    fn overloaded_event_is_retryable_and_others_are_not() {
        let (r, _) = feed(&[("error", json!({"type":"error","error":{"type":"overloaded_error","message":"busy"}}))]);
        let e = r.unwrap_err();
        assert!(e.retryable && e.overloaded);
        let (r, _) =
            feed(&[("error", json!({"type":"error","error":{"type":"invalid_request_error","message":"bad"}}))]);
        assert!(!r.unwrap_err().retryable);
    }

    #[test]
    fn malformed_streams_are_named_at_once_and_cut_streams_are_retried() {
        let mut sink = |_e: StreamEvent| {};
        let mut acc = Accumulator::new("m");
        let err = acc.push("content_block_delta", "{not json", &mut sink).unwrap_err();
        assert!(!err.retryable && matches!(err.error, ModelError::Protocol { .. }), "{err:?}");
        let (r, _) = feed(&[
            ("message_start", json!({"type":"message_start","message":{}})),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
        ]);
        assert!(r.unwrap_err().retryable);
    }

    #[test]
    fn unknown_blocks_are_dropped_and_schema_errors_are_not_retried() {
        let (resp, _) = feed(&[
            ("message_start", json!({"type":"message_start","message":{}})),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"s","name":"web_search","input":{}}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{}"}}),
            ),
            ("content_block_stop", json!({"type":"content_block_stop","index":0})),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":"hi"}}),
            ),
            ("content_block_stop", json!({"type":"content_block_stop","index":1})),
            ("message_stop", json!({"type":"message_stop"})),
        ]);
        assert_eq!(resp.unwrap().content, vec![ContentBlock::text("hi")]);
        let (r, _) = feed(&[(
            "content_block_delta",
            json!({"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"x"}}),
        )]);
        let e = r.unwrap_err();
        assert!(!e.retryable && matches!(e.error, ModelError::Protocol { .. }), "{e:?}");
    }

    #[test]
    fn a_tool_input_cut_at_max_tokens_is_kept_empty_and_elsewhere_is_an_error() {
        let events = |stop: &str| {
            vec![
                (
                    "content_block_start",
                    json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"Write","input":{}}}),
                ),
                (
                    "content_block_delta",
                    json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"content\": \"abc"}}),
                ),
                ("content_block_stop", json!({"type":"content_block_stop","index":0})),
                ("message_delta", json!({"type":"message_delta","delta":{"stop_reason":stop}})),
                ("message_stop", json!({"type":"message_stop"})),
            ]
        };
        let (resp, _) = feed(&events("max_tokens"));
        let resp = resp.unwrap();
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(
            resp.content,
            vec![ContentBlock::ToolUse { id: "t".into(), name: "Write".into(), input: json!({}) }]
        );
        let (r, _) = feed(&events("tool_use"));
        assert!(matches!(r.unwrap_err().error, ModelError::Protocol { .. }));
    }

    #[test]
    fn thinking_is_sent_with_a_cap_above_its_budget() {
        let messages = [Message::user("hi")];
        let req = ModelRequest {
            agent_id: "a",
            model: "m",
            system: &[],
            messages: &messages,
            tools: &[],
            max_tokens: 2_000,
            give_up_on_overload_after: None,
            timeouts: Default::default(),
            thinking: Some(crate::model::Thinking { budget_tokens: 3_000 }),
            server_tools: &[],
        };
        let body = request_body(&req);
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 3_000}));
        assert_eq!(body["max_tokens"], json!(3_001));
    }

    #[test]
    fn body_has_cache_breakpoints_on_stable_prefix_and_newest_message() {
        let system =
            [SystemPart { text: "static".into(), cache: true }, SystemPart { text: "dynamic".into(), cache: false }];
        let tools = [
            ToolSpec { name: "A".into(), description: "a".into(), input_schema: json!({"type":"object"}) },
            ToolSpec { name: "B".into(), description: "b".into(), input_schema: json!({"type":"object"}) },
        ];
        let messages = [Message::user("hi")];
        let req = ModelRequest {
            agent_id: "a",
            model: "m",
            system: &system,
            messages: &messages,
            tools: &tools,
            max_tokens: 100,
            give_up_on_overload_after: None,
            timeouts: Default::default(),
            thinking: None,
            server_tools: &[],
        };
        let body = request_body(&req);
        assert_eq!(body["stream"], json!(true));
        assert!(body["system"][0].get("cache_control").is_some());
        assert!(body["system"][1].get("cache_control").is_none());
        assert!(body["tools"][0].get("cache_control").is_none());
        assert!(body["tools"][1].get("cache_control").is_some());
        assert!(body["messages"][0]["content"][0].get("cache_control").is_some());
    }

    // The body as it was built before issue 29 (a JSON tree of the whole history per
    // request): the oracle the streamed serialization must match.
    /// The JSON body of a streaming Messages request, with cache breakpoints on the tool
    /// list, on each system part marked `cache`, and on the history: the newest message and
    /// the newest of the previous turn (at most four in all, as the API allows).
    fn legacy_request_body(request: &ModelRequest<'_>) -> Value {
        let ephemeral = json!({"type": "ephemeral"});
        let system: Vec<Value> = request
            .system
            .iter()
            .map(|part| {
                let mut v = json!({"type": "text", "text": part.text});
                if part.cache {
                    v["cache_control"] = ephemeral.clone();
                }
                v
            })
            .collect();
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        tools.extend(request.server_tools.iter().cloned());
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral.clone();
        }
        let mut messages = serde_json::to_value(request.messages).unwrap_or(Value::Array(Vec::new()));
        // The newest message, and the one that was newest a turn ago (an answer and its
        // results came since), so the next request reads what this one writes.
        if let Some(list) = messages.as_array_mut() {
            let len = list.len();
            for at in [len.checked_sub(1), len.checked_sub(3)].into_iter().flatten() {
                if let Some(block) = list
                    .get_mut(at)
                    .and_then(|m| m.get_mut("content"))
                    .and_then(Value::as_array_mut)
                    .and_then(|c| c.iter_mut().rev().find(|b| legacy_cacheable(b)))
                {
                    block["cache_control"] = ephemeral.clone();
                }
            }
        }
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens,
            "stream": true,
            "messages": messages,
        });
        if !system.is_empty() {
            body["system"] = Value::Array(system);
        }
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools);
        }
        if let Some(thinking) = request.thinking {
            // The API wants 1024 <= budget < max_tokens.
            let budget = thinking.budget_tokens.max(MIN_THINKING_BUDGET);
            let max_tokens = request.max_tokens.max(budget.saturating_add(1));
            body["max_tokens"] = json!(max_tokens);
            body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        }
        body
    }

    fn legacy_cacheable(block: &Value) -> bool {
        !matches!(block.get("type").and_then(Value::as_str), Some("thinking" | "redacted_thinking"))
    }

    #[test]
    fn the_serialized_body_is_the_tree_it_replaced() {
        use crate::message::MediaSource;
        let system =
            [SystemPart { text: "static".into(), cache: true }, SystemPart { text: "dynamic".into(), cache: false }];
        let tools = [
            ToolSpec {
                name: "A".into(),
                description: "a".into(),
                input_schema: json!({"type":"object","properties":{"x":{"type":"string"}}}),
            },
            ToolSpec {
                name: "B".into(),
                description: "b \"q\" \u{1F600}".into(),
                input_schema: json!({"type":"object"}),
            },
        ];
        let server = [json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 3})];
        let result = |id: &str, attachments: Vec<ContentBlock>| ContentBlock::ToolResult {
            tool_use_id: id.into(),
            content: "line 1\nline 2 \u{e9}".into(),
            is_error: id == "t2",
            attachments,
        };
        let image = ContentBlock::Image { source: MediaSource::base64("image/png", "aGk=") };
        let history = [
            Message::user("hi"),
            Message {
                role: crate::message::Role::Assistant,
                content: vec![
                    ContentBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() },
                    ContentBlock::text("calling"),
                    ContentBlock::ToolUse { id: "t1".into(), name: "A".into(), input: json!({"x": "y"}) },
                    ContentBlock::ToolUse { id: "t2".into(), name: "B".into(), input: json!({}) },
                ],
            },
            Message {
                role: crate::message::Role::User,
                content: vec![result("t1", vec![image.clone()]), result("t2", vec![])],
            },
            Message {
                role: crate::message::Role::Assistant,
                content: vec![ContentBlock::RedactedThinking { data: "xx".into() }],
            },
            Message {
                role: crate::message::Role::User,
                content: vec![
                    ContentBlock::Document { source: MediaSource::base64("application/pdf", "JVBE") },
                    ContentBlock::text("and"),
                ],
            },
        ];
        for len in 0..=history.len() {
            let none_t: &[ToolSpec] = &[];
            let none_s: &[Value] = &[];
            for (tools, server) in
                [(&tools[..], &server[..]), (&tools[..], none_s), (none_t, &server[..]), (none_t, none_s)]
            {
                for thinking in [None, Some(crate::model::Thinking { budget_tokens: 500 })] {
                    for system in [&system[..], &[][..]] {
                        let req = ModelRequest {
                            agent_id: "a",
                            model: "m",
                            system,
                            messages: &history[..len],
                            tools,
                            max_tokens: 100,
                            give_up_on_overload_after: None,
                            timeouts: Default::default(),
                            thinking,
                            server_tools: server,
                        };
                        // The same JSON; the key order of the old tree followed serde_json's
                        // `preserve_order` (on in the binary, where the bytes are equal too).
                        let old = legacy_request_body(&req);
                        let new: Value = serde_json::from_slice(&request_bytes(&req).unwrap()).unwrap();
                        assert_eq!(new, old, "{len} messages");
                    }
                }
            }
        }
    }
}
