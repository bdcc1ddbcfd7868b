//! The OpenAI-compatible chat-completions provider, for OpenAI itself and for local
//! servers that speak the same protocol (vLLM, Ollama, llama.cpp server).
//!
//! This module owns the conversion of the Anthropic-shaped history into chat messages,
//! the request body, and the assembly of a [`ModelResponse`] from streamed
//! `chat.completion.chunk`s. Retries and rate limiting go through [`super::retry`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};

use super::retry::{Attempt, AttemptError, Limiter, RetryPolicy, with_retries};
use super::sse::{self, cut_short, protocol};
use super::{
    ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamEvent, StreamSink, SystemPart, Timeouts,
};
use crate::message::{ContentBlock, Message, Role};
use crate::usage::Usage;

const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Settings of the OpenAI-compatible provider.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// The API root, such as `https://api.openai.com/v1` or `http://localhost:11434/v1`.
    pub base_url: String,
    /// Sent as `authorization: Bearer` when set; local servers usually need none.
    pub api_key: Option<String>,
    pub retry: RetryPolicy,
    pub max_concurrent_requests: usize,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_string(),
            api_key: None,
            retry: RetryPolicy::default(),
            max_concurrent_requests: 64,
        }
    }
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .finish()
    }
}

impl OpenAiConfig {
    /// Reads `OPENAI_BASE_URL` and `OPENAI_API_KEY`; empty values count as unset.
    pub fn from_env() -> Self {
        let var = |k: &str| std::env::var(k).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        Self {
            base_url: var("OPENAI_BASE_URL").unwrap_or_else(|| DEFAULT_BASE_URL.to_string()),
            api_key: var("OPENAI_API_KEY"),
            ..Self::default()
        }
    }
}

/// Talks to `POST {base_url}/chat/completions`.
#[derive(Debug)]
pub struct OpenAiProvider {
    client: reqwest::Client,
    url: String,
    headers: HeaderMap,
    retry: RetryPolicy,
    limiter: Arc<Limiter>,
    /// The server refused `max_tokens` and asked for `max_completion_tokens` (newer
    /// OpenAI models do); every later request sends that instead.
    max_completion_tokens: AtomicBool,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let base = config.base_url.trim().trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ModelError::Config {
                message: format!(
                    "the openai base url `{base}` is not an http(s) url; set OPENAI_BASE_URL to the api root, such as https://api.openai.com/v1 or http://localhost:11434/v1"
                ),
            });
        }
        let api_key = config.api_key.as_deref().map(str::trim).filter(|k| !k.is_empty());
        if api_key.is_none() && host_of(base).eq_ignore_ascii_case("api.openai.com") {
            return Err(ModelError::Config {
                message: "no api key for api.openai.com: set OPENAI_API_KEY, or point OPENAI_BASE_URL at a server that needs none"
                    .to_string(),
            });
        }
        let url =
            if base.ends_with("/chat/completions") { base.to_string() } else { format!("{base}/chat/completions") };
        let mut headers = HeaderMap::new();
        headers.insert(reqwest::header::ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(key) = api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| ModelError::Config {
                message: "the openai api key holds characters that cannot go in an http header; check OPENAI_API_KEY"
                    .to_string(),
            })?;
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(Self {
            client: sse::client(&url)?,
            limiter: Limiter::shared(base, config.max_concurrent_requests),
            url,
            headers,
            retry: config.retry,
            max_completion_tokens: AtomicBool::new(false),
        })
    }

    /// Turns a refusal of `max_tokens` into an immediate retry with
    /// `max_completion_tokens`; other errors pass through.
    fn adapt(&self, failure: AttemptError) -> AttemptError {
        let refuses_max_tokens = matches!(
            &failure.error,
            ModelError::InvalidRequest { status: 400, message } if message.contains("max_completion_tokens")
        );
        if refuses_max_tokens && !self.max_completion_tokens.swap(true, Ordering::Relaxed) {
            tracing::info!(url = %self.url, "the server wants max_completion_tokens instead of max_tokens; switching");
            return AttemptError { retryable: true, overloaded: false, retry_after: Some(Duration::ZERO), ..failure };
        }
        failure
    }
}

/// The host of an `http(s)://host[:port]/...` url.
fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    authority.split(':').next().unwrap_or(authority)
}

/// One request of [`OpenAiProvider::send`], tried as often as the policy allows.
struct Call<'a> {
    provider: &'a OpenAiProvider,
    body: Value,
    model: &'a str,
    timeouts: Timeouts,
}

#[async_trait]
impl Attempt for Call<'_> {
    async fn attempt(&self, sink: StreamSink<'_>) -> Result<ModelResponse, AttemptError> {
        let p = self.provider;
        let renamed;
        let body = if p.max_completion_tokens.load(Ordering::Relaxed) {
            renamed = with_max_completion_tokens(&self.body);
            &renamed
        } else {
            &self.body
        };
        let started = tokio::time::Instant::now();
        let t = self.timeouts;
        let response = sse::post_json(
            &p.client,
            &p.url,
            p.headers.clone(),
            bytes::Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
            t.first_byte,
        )
        .await
        .map_err(|e| p.adapt(e))?;
        let first = t.first_byte.saturating_sub(started.elapsed());
        let mut acc = Accumulator::new(self.model);
        if is_json(response.headers()) {
            // A server that ignores `stream: true` answers with one whole completion.
            let text = sse::read_whole(response, first.max(t.idle)).await?;
            acc.push_whole(&text, sink)?;
            return acc.finish();
        }
        let mut events = std::pin::pin!(sse::events(response, first, t.idle));
        while let Some(event) = events.next().await {
            if acc.push_data(&event?.data, sink)? {
                break;
            }
        }
        acc.finish()
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("application/json"))
}

fn with_max_completion_tokens(body: &Value) -> Value {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut()
        && let Some(n) = obj.remove("max_tokens")
    {
        obj.insert("max_completion_tokens".to_string(), n);
    }
    body
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        "openai"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        let call =
            Call { provider: self, body: request_body(request), model: request.model, timeouts: request.timeouts };
        let budget = request.timeouts.retry_budget;
        with_retries(&self.retry, &self.limiter, request.give_up_on_overload_after, budget, sink, &call).await
    }
}

/// The JSON body of a streaming chat-completions request.
pub fn request_body(request: &ModelRequest<'_>) -> Value {
    let mut body = json!({
        "model": request.model,
        "messages": chat_messages(request.system, request.messages),
        "stream": true,
        "stream_options": {"include_usage": true},
        "max_tokens": request.max_tokens,
    });
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.input_schema},
                })
            })
            .collect();
        body["tools"] = Value::Array(tools);
    }
    body
}

/// Converts the system prompt and the Anthropic-shaped history into chat messages.
///
/// The system parts become one leading `system` message. A user message becomes one
/// `tool` message per `tool_result` (in order), then a `user` message with its text.
/// An assistant message becomes one `assistant` message with its text and its
/// `tool_calls`. Thinking blocks are not sent.
/// An image or document block as a Chat Completions content part (a data URL).
fn media_part(block: &ContentBlock) -> Option<Value> {
    match block {
        ContentBlock::Image { source } => Some(json!({
            "type": "image_url",
            "image_url": {"url": format!("data:{};base64,{}", source.media_type, source.data)},
        })),
        ContentBlock::Document { source } => Some(json!({
            "type": "file",
            "file": {"filename": "document.pdf", "file_data": format!("data:{};base64,{}", source.media_type, source.data)},
        })),
        _ => None,
    }
}

pub(crate) fn chat_messages(system: &[SystemPart], history: &[Message]) -> Vec<Value> {
    let mut out = Vec::with_capacity(history.len() + 1);
    let system_text =
        system.iter().map(|p| p.text.as_str()).filter(|t| !t.trim().is_empty()).collect::<Vec<_>>().join("\n\n");
    if !system_text.is_empty() {
        out.push(json!({"role": "system", "content": system_text}));
    }
    for message in history {
        let mut texts = Vec::new();
        match message.role {
            Role::User => {
                // Tool messages carry text only: images and documents of tool results
                // follow in one user message, as content parts.
                let mut media = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::Text { text } => texts.push(text.as_str()),
                        ContentBlock::ToolResult { tool_use_id, content, is_error, attachments } => {
                            let content = if *is_error { format!("Error: {content}") } else { content.clone() };
                            out.push(json!({"role": "tool", "tool_call_id": tool_use_id, "content": content}));
                            media.extend(attachments.iter().filter_map(media_part));
                        }
                        ContentBlock::Image { .. } | ContentBlock::Document { .. } => media.extend(media_part(block)),
                        ContentBlock::Thinking { .. }
                        | ContentBlock::RedactedThinking { .. }
                        | ContentBlock::ToolUse { .. } => {}
                    }
                }
                if !media.is_empty() {
                    let mut parts = vec![json!({"type": "text", "text": "The files the tool results above refer to:"})];
                    parts.extend(media);
                    out.push(json!({"role": "user", "content": parts}));
                }
                if !texts.is_empty() {
                    out.push(json!({"role": "user", "content": texts.join("\n\n")}));
                }
            }
            Role::Assistant => {
                let mut calls = Vec::new();
                for block in &message.content {
                    match block {
                        ContentBlock::Text { text } => texts.push(text.as_str()),
                        ContentBlock::ToolUse { id, name, input } => calls.push(json!({
                            "id": id,
                            "type": "function",
                            "function": {"name": name, "arguments": input.to_string()},
                        })),
                        ContentBlock::Thinking { .. }
                        | ContentBlock::RedactedThinking { .. }
                        | ContentBlock::ToolResult { .. }
                        | ContentBlock::Image { .. }
                        | ContentBlock::Document { .. } => {}
                    }
                }
                let mut m = json!({"role": "assistant"});
                m["content"] = match (texts.is_empty(), calls.is_empty()) {
                    // An assistant message with tool calls may have null content.
                    (true, false) => Value::Null,
                    _ => Value::String(texts.join("\n\n")),
                };
                if !calls.is_empty() {
                    m["tool_calls"] = Value::Array(calls);
                }
                out.push(m);
            }
        }
    }
    out
}

/// Ids handed to tool calls that the server sent without one. Process-wide, so a
/// history never holds the same generated id twice.
static NEXT_CALL_ID: AtomicU64 = AtomicU64::new(0);

/// A tool call while its fragments stream in.
#[derive(Debug, Default)]
struct PartialCall {
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Builds a response from `chat.completion.chunk`s. Plain data in, plain data out, so it
/// is tested without HTTP.
#[derive(Debug)]
pub(crate) struct Accumulator {
    model: String,
    model_seen: bool,
    text: String,
    /// The text block has been reported complete.
    text_reported: bool,
    calls: BTreeMap<u64, PartialCall>,
    finish_reason: Option<String>,
    usage: Usage,
    /// The finished content, once `finish_reason` or `[DONE]` arrived.
    blocks: Option<Vec<ContentBlock>>,
}

impl Accumulator {
    pub(crate) fn new(model: &str) -> Self {
        Self {
            model: model.to_string(),
            model_seen: false,
            text: String::new(),
            text_reported: false,
            calls: BTreeMap::new(),
            finish_reason: None,
            usage: Usage::default(),
            blocks: None,
        }
    }

    /// Takes the payload of one `data:` line; true once nothing more is expected.
    pub(crate) fn push_data(&mut self, data: &str, sink: StreamSink<'_>) -> Result<bool, AttemptError> {
        let data = data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        if data == "[DONE]" {
            self.complete(sink)?;
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|e| protocol(format!("a stream chunk is not valid json ({e}): {}", super::short(data))))?;
        self.push(&chunk, sink)
    }

    /// Takes one parsed chunk; true once the response is complete and its usage known
    /// (the usage chunk is the last one before `[DONE]`).
    pub(crate) fn push(&mut self, chunk: &Value, sink: StreamSink<'_>) -> Result<bool, AttemptError> {
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(error));
        }
        if chunk.get("object").and_then(Value::as_str) == Some("error") {
            return Err(stream_error(chunk));
        }
        if !self.model_seen
            && let Some(model) = chunk.get("model").and_then(Value::as_str).filter(|m| !m.is_empty())
        {
            self.model = model.to_string();
            self.model_seen = true;
        }
        let usage = chunk.get("usage").filter(|u| u.is_object());
        if let Some(u) = usage {
            self.usage = usage_of(u);
        }
        let choice = chunk.get("choices").and_then(Value::as_array).and_then(|c| c.first());
        if let Some(choice) = choice {
            if let Some(delta) = choice.get("delta") {
                self.push_delta(delta, sink);
            }
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                if self.finish_reason.is_none() {
                    self.finish_reason = Some(reason.to_string());
                }
                self.complete(sink)?;
            }
        }
        Ok(self.blocks.is_some() && usage.is_some() && choice.is_none())
    }

    fn push_delta(&mut self, delta: &Value, sink: StreamSink<'_>) {
        if self.blocks.is_some() {
            tracing::debug!("ignoring a delta that arrived after the finish reason");
            return;
        }
        let reasoning = ["reasoning_content", "reasoning"].iter().find_map(|k| delta.get(*k).and_then(Value::as_str));
        if let Some(thinking) = reasoning.filter(|t| !t.is_empty()) {
            sink(StreamEvent::ThinkingDelta(thinking.to_string()));
        }
        if let Some(text) = delta.get("content").and_then(Value::as_str).filter(|t| !t.is_empty()) {
            self.text.push_str(text);
            sink(StreamEvent::TextDelta(text.to_string()));
        }
        for fragment in delta.get("tool_calls").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            if self.calls.is_empty() {
                self.report_text(sink);
            }
            let slot = self.slot_for(fragment);
            let call = self.calls.entry(slot).or_default();
            if let Some(id) = fragment.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
                call.id.get_or_insert_with(|| id.to_string());
            }
            let function = fragment.get("function");
            if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str)
                && call.name.is_empty()
            {
                call.name = name.to_string();
            }
            match function.and_then(|f| f.get("arguments")) {
                None | Some(Value::Null) => {}
                Some(Value::String(piece)) => call.arguments.push_str(piece),
                // Some servers send the arguments as an object instead of a string.
                Some(other) => call.arguments = other.to_string(),
            }
        }
    }

    /// Which tool call a fragment belongs to: its `index`, or for servers that leave the
    /// index out, the call with its id, or a new call when it names a new function.
    fn slot_for(&self, fragment: &Value) -> u64 {
        if let Some(index) = fragment.get("index").and_then(Value::as_u64) {
            return index;
        }
        let next = self.calls.keys().next_back().map_or(0, |k| k + 1);
        let last = self.calls.iter().next_back();
        if let Some(id) = fragment.get("id").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            return match self.calls.iter().find(|(_, c)| c.id.as_deref() == Some(id)) {
                Some((slot, _)) => *slot,
                None => match last {
                    Some((slot, c)) if c.id.is_none() && c.name.is_empty() => *slot,
                    _ => next,
                },
            };
        }
        let names_function = fragment.pointer("/function/name").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        match last {
            Some((slot, c)) if !names_function || c.name.is_empty() => *slot,
            _ => next,
        }
    }

    fn has_text(&self) -> bool {
        !self.text.trim().is_empty()
    }

    /// Reports the text block complete, once; whitespace-only text is no block.
    fn report_text(&mut self, sink: StreamSink<'_>) {
        if !self.text_reported && self.has_text() {
            self.text_reported = true;
            sink(StreamEvent::BlockComplete { index: 0, block: ContentBlock::text(self.text.clone()) });
        }
    }

    /// Closes the response: reports the text block and every tool call, in order.
    fn complete(&mut self, sink: StreamSink<'_>) -> Result<(), AttemptError> {
        if self.blocks.is_some() {
            return Ok(());
        }
        self.report_text(sink);
        let cut_at_limit = self.finish_reason.as_deref() == Some("length");
        let first = usize::from(self.has_text());
        let mut tools = Vec::with_capacity(self.calls.len());
        for (n, call) in self.calls.values().enumerate() {
            if call.name.is_empty() {
                if cut_at_limit {
                    break;
                }
                return Err(protocol(format!("tool call {n} of the response has no function name")));
            }
            let mut whole = true;
            let input = match parse_arguments(&call.arguments) {
                Ok(input) => input,
                // The output limit cut this call short. It is kept with an empty input,
                // so the loop sees a cut call (it never runs one) and can recover.
                Err(_) if cut_at_limit => {
                    tracing::warn!(tool = %call.name, "a tool call was cut short by the output token limit");
                    whole = false;
                    Value::Object(Default::default())
                }
                Err(e) => {
                    return Err(protocol(format!(
                        "the arguments of tool call `{}` are not valid json: {e}",
                        call.name
                    )));
                }
            };
            let id = match &call.id {
                Some(id) => id.clone(),
                None => format!("call_{}", NEXT_CALL_ID.fetch_add(1, Ordering::Relaxed)),
            };
            let block = ContentBlock::ToolUse { id, name: call.name.clone(), input };
            // A call with a broken input must not start early.
            if whole {
                sink(StreamEvent::BlockComplete { index: first + tools.len(), block: block.clone() });
            }
            tools.push(block);
        }
        let mut blocks = Vec::with_capacity(first + tools.len());
        if self.has_text() {
            blocks.push(ContentBlock::text(std::mem::take(&mut self.text)));
        }
        blocks.extend(tools);
        self.blocks = Some(blocks);
        Ok(())
    }

    /// Takes a whole non-streamed `chat.completion` body, as a server that ignores
    /// `stream: true` sends it.
    pub(crate) fn push_whole(&mut self, body: &str, sink: StreamSink<'_>) -> Result<(), AttemptError> {
        let mut whole: Value = serde_json::from_str(body)
            .map_err(|e| protocol(format!("the completion body is not valid json ({e}): {}", super::short(body))))?;
        if let Some(choice) = whole.pointer_mut("/choices/0").and_then(Value::as_object_mut) {
            let mut message = choice.remove("message").unwrap_or(Value::Null);
            if let Some(calls) = message.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for (i, call) in calls.iter_mut().enumerate() {
                    if let Some(call) = call.as_object_mut() {
                        call.entry("index").or_insert(json!(i));
                    }
                }
            }
            choice.insert("delta".to_string(), message);
            if choice.get("finish_reason").is_none_or(Value::is_null) {
                choice.insert("finish_reason".to_string(), json!("stop"));
            }
        }
        self.push(&whole, sink)?;
        self.complete(sink)
    }

    pub(crate) fn finish(self) -> Result<ModelResponse, AttemptError> {
        let Some(content) = self.blocks else {
            return Err(cut_short());
        };
        let has_tools = content.iter().any(|b| matches!(b, ContentBlock::ToolUse { .. }));
        let stop_reason = match self.finish_reason.as_deref().map(StopReason::parse) {
            // Some local servers say "stop" after tool calls.
            Some(StopReason::EndTurn) | None if has_tools => StopReason::ToolUse,
            Some(StopReason::ToolUse) | None if !has_tools => StopReason::EndTurn,
            Some(reason) => reason,
            None => StopReason::EndTurn,
        };
        Ok(ModelResponse { content, stop_reason, usage: self.usage, model: self.model })
    }
}

/// Parses streamed tool arguments: empty means no arguments; a JSON string holding an
/// object (double-encoded by some models) is unwrapped.
fn parse_arguments(raw: &str) -> Result<Value, serde_json::Error> {
    if raw.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(raw)?;
    if let Value::String(inner) = &value
        && let Ok(object @ Value::Object(_)) = serde_json::from_str::<Value>(inner)
    {
        return Ok(object);
    }
    Ok(value)
}

/// Maps chat-completions usage; cached prompt tokens count as cache reads.
fn usage_of(u: &Value) -> Usage {
    let get = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let prompt = get("/prompt_tokens");
    let cached = get("/prompt_tokens_details/cached_tokens").min(prompt);
    Usage {
        input_tokens: prompt - cached,
        output_tokens: get("/completion_tokens"),
        cache_creation_input_tokens: 0,
        cache_read_input_tokens: cached,
    }
}

/// An error sent inside the stream (`{"error": {...}}`). Overload, server and rate-limit
/// errors are worth a retry; an over-long prompt and anything else are final.
fn stream_error(error: &Value) -> AttemptError {
    let text = |k: &str| match error.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let message = match error {
        Value::String(s) => s.clone(),
        _ => text("message"),
    };
    let (kind, code) = (text("type"), text("code"));
    let status = error
        .get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c));
    let described = match (kind.is_empty(), message.is_empty()) {
        (_, true) => super::short(&error.to_string()),
        (true, false) => super::short(&message),
        (false, false) => super::short(&format!("{kind}: {message}")),
    };
    let haystack = format!("{kind} {code} {message}").to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|w| haystack.contains(w));
    if super::looks_like_prompt_too_long(&message) || code == "context_length_exceeded" {
        return AttemptError::fatal(ModelError::PromptTooLong { message: described });
    }
    if status == Some(529) || says(&["overload"]) {
        return AttemptError {
            error: ModelError::Overloaded { status: 529, attempts: 1, message: described },
            retryable: true,
            overloaded: true,
            retry_after: None,
            refused: false,
        };
    }
    if status == Some(429) || says(&["rate limit", "rate_limit", "ratelimit", "too many requests"]) {
        return AttemptError::retryable(ModelError::Server { status: 429, attempts: 1, message: described });
    }
    let server_status = status.filter(|s| *s >= 500);
    if server_status.is_some()
        || says(&[
            "server error",
            "server_error",
            "internal error",
            "internal_error",
            "service unavailable",
            "timeout",
            "timed out",
        ])
    {
        return AttemptError::retryable(ModelError::Server {
            status: server_status.unwrap_or(500),
            attempts: 1,
            message: described,
        });
    }
    AttemptError::fatal(ModelError::InvalidRequest { status: status.unwrap_or(400), message: described })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::ToolSpec;

    fn chunk(delta: Value, finish: Option<&str>) -> Value {
        json!({"object": "chat.completion.chunk", "model": "served-model", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    }

    fn usage_chunk(prompt: u64, cached: u64, completion: u64) -> Value {
        json!({"object": "chat.completion.chunk", "choices": [], "usage": {
            "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        }})
    }

    /// Feeds chunks, then `[DONE]` unless a chunk ends the stream first.
    fn feed(chunks: &[Value], done: bool) -> (Result<ModelResponse, AttemptError>, Vec<StreamEvent>) {
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let mut acc = Accumulator::new("requested-model");
        for c in chunks {
            match acc.push(c, &mut sink) {
                Ok(true) => return (acc.finish(), seen),
                Ok(false) => {}
                Err(e) => return (Err(e), seen),
            }
        }
        if done && let Err(e) = acc.push_data("[DONE]", &mut sink) {
            return (Err(e), seen);
        }
        (acc.finish(), seen)
    }

    fn completes(seen: &[StreamEvent]) -> Vec<(usize, ContentBlock)> {
        seen.iter()
            .filter_map(|e| match e {
                StreamEvent::BlockComplete { index, block } => Some((*index, block.clone())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn history_pairs_tool_calls_with_results_and_leads_with_system() {
        let system = [
            SystemPart { text: "static".into(), cache: true },
            SystemPart { text: "".into(), cache: false },
            SystemPart { text: "dynamic".into(), cache: false },
        ];
        let history = [
            Message::user("list files"),
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Thinking { thinking: "hmm".into(), signature: "sig".into() },
                    ContentBlock::RedactedThinking { data: "xx".into() },
                    ContentBlock::text("Looking."),
                    ContentBlock::ToolUse { id: "t1".into(), name: "LS".into(), input: json!({"path": "."}) },
                    ContentBlock::ToolUse { id: "t2".into(), name: "Read".into(), input: json!({}) },
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::text("also check the tests"),
                    ContentBlock::tool_result("t1", "a.rs", false),
                    ContentBlock::tool_result("t2", "no such file", true),
                ],
            },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::ToolUse { id: "t3".into(), name: "LS".into(), input: json!({}) }],
            },
            Message { role: Role::User, content: vec![ContentBlock::tool_result("t3", "", false)] },
            Message {
                role: Role::Assistant,
                content: vec![ContentBlock::Thinking { thinking: "x".into(), signature: String::new() }],
            },
        ];
        let m = chat_messages(&system, &history);
        assert_eq!(
            m,
            vec![
                json!({"role": "system", "content": "static\n\ndynamic"}),
                json!({"role": "user", "content": "list files"}),
                json!({"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "LS", "arguments": "{\"path\":\".\"}"}},
                    {"id": "t2", "type": "function", "function": {"name": "Read", "arguments": "{}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "t1", "content": "a.rs"}),
                json!({"role": "tool", "tool_call_id": "t2", "content": "Error: no such file"}),
                json!({"role": "user", "content": "also check the tests"}),
                json!({"role": "assistant", "content": null, "tool_calls": [
                    {"id": "t3", "type": "function", "function": {"name": "LS", "arguments": "{}"}},
                ]}),
                json!({"role": "tool", "tool_call_id": "t3", "content": ""}),
                json!({"role": "assistant", "content": ""}),
            ]
        );
        assert!(!m.iter().any(|v| v.to_string().contains("hmm") || v.to_string().contains("sig")));
    }

    #[test]
    fn no_system_message_without_system_text() {
        let m = chat_messages(&[], &[Message::user("hi")]);
        assert_eq!(m, vec![json!({"role": "user", "content": "hi"})]);
    }

    #[test]
    fn body_streams_with_usage_and_declares_tools_only_when_present() {
        let tools =
            [ToolSpec { name: "Echo".into(), description: "echoes".into(), input_schema: json!({"type": "object"}) }];
        let messages = [Message::user("hi")];
        let mut req = ModelRequest {
            agent_id: "a",
            model: "gpt-x",
            system: &[],
            messages: &messages,
            tools: &tools,
            max_tokens: 123,
            give_up_on_overload_after: None,
            timeouts: Default::default(),
            thinking: None,
            server_tools: &[],
        };
        let body = request_body(&req);
        assert_eq!(body["model"], json!("gpt-x"));
        assert_eq!(body["stream"], json!(true));
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert_eq!(body["max_tokens"], json!(123));
        assert_eq!(
            body["tools"],
            json!([{"type": "function", "function": {"name": "Echo", "description": "echoes", "parameters": {"type": "object"}}}])
        );
        req.tools = &[];
        let body = request_body(&req);
        assert!(body.get("tools").is_none());
        let renamed = with_max_completion_tokens(&body);
        assert!(renamed.get("max_tokens").is_none());
        assert_eq!(renamed["max_completion_tokens"], json!(123));
    }

    #[test]
    fn builds_text_and_tool_calls_from_chunks() {
        let (resp, seen) = feed(
            &[
                chunk(json!({"role": "assistant", "content": ""}), None),
                chunk(json!({"reasoning_content": "think"}), None),
                chunk(json!({"reasoning": " more"}), None),
                chunk(json!({"content": "Hel"}), None),
                chunk(json!({"content": "lo"}), None),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "Echo", "arguments": ""}}]}),
                    None,
                ),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\""}}]}), None),
                chunk(
                    json!({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "Ls", "arguments": ""}}]}),
                    None,
                ),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}), None),
                chunk(json!({}), Some("tool_calls")),
                usage_chunk(100, 80, 7),
            ],
            true,
        );
        let resp = resp.unwrap();
        assert_eq!(resp.model, "served-model");
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(
            resp.usage,
            Usage { input_tokens: 20, output_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 80 }
        );
        let echo = ContentBlock::ToolUse { id: "c1".into(), name: "Echo".into(), input: json!({"a": 1}) };
        let ls = ContentBlock::ToolUse { id: "c2".into(), name: "Ls".into(), input: json!({}) };
        assert_eq!(resp.content, vec![ContentBlock::text("Hello"), echo.clone(), ls.clone()]);
        assert!(seen.contains(&StreamEvent::TextDelta("Hel".into())));
        assert!(seen.contains(&StreamEvent::ThinkingDelta("think".into())));
        assert!(seen.contains(&StreamEvent::ThinkingDelta(" more".into())));
        assert_eq!(completes(&seen), vec![(0, ContentBlock::text("Hello")), (1, echo), (2, ls)]);
        // The text block is complete as soon as the first tool call starts.
        let text_done = seen.iter().position(|e| matches!(e, StreamEvent::BlockComplete { index: 0, .. }));
        let last_text = seen.iter().rposition(|e| matches!(e, StreamEvent::TextDelta(_)));
        assert_eq!(text_done, last_text.map(|i| i + 1));
    }

    #[test]
    fn usage_chunk_after_finish_ends_the_stream() {
        let mut sink = |_e: StreamEvent| {};
        let mut acc = Accumulator::new("m");
        assert!(!acc.push(&chunk(json!({"content": "hi"}), None), &mut sink).unwrap());
        assert!(!acc.push(&chunk(json!({}), Some("stop")), &mut sink).unwrap());
        assert!(acc.push(&usage_chunk(5, 0, 2), &mut sink).unwrap());
        let resp = acc.finish().unwrap();
        assert_eq!(resp.stop_reason, StopReason::EndTurn);
        assert_eq!(resp.model, "served-model");
        assert_eq!(resp.usage.input_tokens, 5);
        assert_eq!(resp.content, vec![ContentBlock::text("hi")]);
    }

    #[test]
    fn stop_after_tool_calls_means_tool_use_and_missing_ids_are_generated() {
        let (resp, seen) = feed(
            &[
                chunk(json!({"content": "\n\n"}), None),
                chunk(json!({"tool_calls": [{"index": 0, "function": {"name": "A", "arguments": "{}"}}]}), None),
                chunk(
                    json!({"tool_calls": [{"index": 1, "function": {"name": "B", "arguments": "  "}}]}),
                    Some("stop"),
                ),
            ],
            true,
        );
        let resp = resp.unwrap();
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(resp.usage, Usage::default());
        assert_eq!(resp.model, "served-model");
        let ids: Vec<String> = resp
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { id, input, .. } => {
                    assert_eq!(input, &json!({}));
                    Some(id.clone())
                }
                _ => None,
            })
            .collect();
        // Whitespace-only text is no block: the two tool calls are all the content.
        assert_eq!(resp.content.len(), 2);
        assert_eq!(ids.len(), 2);
        assert!(ids.iter().all(|id| id.starts_with("call_")) && ids[0] != ids[1], "{ids:?}");
        assert_eq!(completes(&seen).iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1]);
    }

    #[test]
    fn fragments_without_index_are_grouped_by_id_and_name() {
        let (resp, _) = feed(
            &[
                chunk(
                    json!({"tool_calls": [
                        {"id": "x1", "function": {"name": "A", "arguments": {"k": 1}}},
                        {"id": "x2", "function": {"name": "B", "arguments": "{\"q\":"}},
                    ]}),
                    None,
                ),
                chunk(json!({"tool_calls": [{"id": "x2", "function": {"arguments": "2}"}}]}), None),
                chunk(
                    json!({"tool_calls": [{"function": {"name": "C", "arguments": "\"{\\\"z\\\":3}\""}}]}),
                    Some("tool_calls"),
                ),
            ],
            false,
        );
        let resp = resp.unwrap();
        let inputs: Vec<(String, Value)> = resp
            .content
            .iter()
            .filter_map(|b| match b {
                ContentBlock::ToolUse { name, input, .. } => Some((name.clone(), input.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            inputs,
            vec![("A".into(), json!({"k": 1})), ("B".into(), json!({"q": 2})), ("C".into(), json!({"z": 3}))]
        );
    }

    #[test]
    fn done_without_finish_reason_completes_but_a_cut_stream_is_retryable() {
        let (resp, seen) = feed(&[chunk(json!({"content": "partial"}), None)], true);
        let resp = resp.unwrap();
        assert_eq!(resp.stop_reason, StopReason::EndTurn);
        assert_eq!(resp.model, "served-model");
        assert_eq!(completes(&seen), vec![(0, ContentBlock::text("partial"))]);

        let (resp, _) = feed(&[chunk(json!({"content": "partial"}), None)], false);
        let e = resp.unwrap_err();
        assert!(e.retryable);
        assert!(matches!(e.error, ModelError::Network { .. }));

        let (resp, _) = feed(&[], false);
        assert!(resp.unwrap_err().retryable);
    }

    #[test]
    fn model_defaults_to_the_requested_one() {
        let (resp, _) = feed(&[json!({"choices": [{"delta": {"content": "x"}, "finish_reason": "length"}]})], false);
        let resp = resp.unwrap();
        assert_eq!(resp.model, "requested-model");
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
    }

    #[test]
    fn bad_tool_arguments_are_an_error_named_at_once_naming_the_tool() {
        let (resp, _) = feed(
            &[chunk(
                json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "Edit", "arguments": "{\"a\": "}}]}),
                Some("tool_calls"),
            )],
            true,
        );
        let e = resp.unwrap_err();
        assert!(!e.retryable);
        assert!(matches!(&e.error, ModelError::Protocol { message } if message.contains("`Edit`")), "{:?}", e.error);
    }

    #[test]
    fn a_tool_call_cut_by_the_token_limit_is_kept_without_its_input() {
        let (resp, _) = feed(
            &[
                chunk(json!({"content": "Writing."}), None),
                chunk(
                    json!({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "Write", "arguments": "{\"content\": \"abc"}}]}),
                    Some("length"),
                ),
            ],
            true,
        );
        let resp = resp.unwrap();
        assert_eq!(resp.stop_reason, StopReason::MaxTokens);
        assert_eq!(
            resp.content,
            vec![
                ContentBlock::text("Writing."),
                ContentBlock::ToolUse { id: "c".into(), name: "Write".into(), input: json!({}) }
            ]
        );
    }

    #[test]
    fn malformed_chunks_are_protocol_errors_named_at_once() {
        let mut sink = |_e: StreamEvent| {};
        let mut acc = Accumulator::new("m");
        assert!(!acc.push_data("", &mut sink).unwrap());
        let e = acc.push_data("{not json", &mut sink).unwrap_err();
        assert!(!e.retryable);
        assert!(matches!(e.error, ModelError::Protocol { .. }));
    }

    #[test]
    fn stream_errors_are_classified() {
        let push = |v: Value| {
            let mut sink = |_e: StreamEvent| {};
            Accumulator::new("m").push(&v, &mut sink).unwrap_err()
        };
        let e = push(json!({"error": {"message": "Overloaded", "type": "server_error", "code": null}}));
        assert!(e.retryable && e.overloaded);
        assert!(matches!(e.error, ModelError::Overloaded { .. }));
        let e = push(json!({"error": {"message": "boom", "type": "server_error"}}));
        assert!(e.retryable && !e.overloaded);
        assert!(matches!(e.error, ModelError::Server { status: 500, .. }));
        let e =
            push(json!({"error": {"message": "slow down", "type": "rate_limit_error", "code": "rate_limit_exceeded"}}));
        assert!(e.retryable);
        assert!(matches!(e.error, ModelError::Server { status: 429, .. }));
        let e = push(
            json!({"error": {"message": "This model's maximum context length is 8192 tokens.", "type": "invalid_request_error", "code": "context_length_exceeded"}}),
        );
        assert!(!e.retryable);
        assert!(matches!(e.error, ModelError::PromptTooLong { .. }));
        let e = push(json!({"error": {"message": "unknown model", "type": "invalid_request_error"}}));
        assert!(!e.retryable);
        assert!(
            matches!(&e.error, ModelError::InvalidRequest { status: 400, message } if message.contains("unknown model"))
        );
        let e = push(json!({"error": "model not loaded"}));
        assert!(!e.retryable);
        let e = push(json!({"object": "error", "message": "engine died", "type": "InternalServerError", "code": 500}));
        assert!(e.retryable);
        assert!(matches!(e.error, ModelError::Server { status: 500, .. }));
    }

    #[test]
    fn a_whole_completion_is_accepted() {
        let body = json!({
            "object": "chat.completion", "model": "local",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "ok", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "A", "arguments": "{}"}},
                {"id": "", "type": "function", "function": {"name": "B", "arguments": "{\"b\":1}"}},
            ]}}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4},
        });
        let mut seen = Vec::new();
        let mut sink = |e: StreamEvent| seen.push(e);
        let mut acc = Accumulator::new("m");
        acc.push_whole(&body.to_string(), &mut sink).unwrap();
        let resp = acc.finish().unwrap();
        assert_eq!(resp.model, "local");
        assert_eq!(resp.stop_reason, StopReason::ToolUse);
        assert_eq!(resp.usage.output_tokens, 4);
        assert_eq!(resp.content.len(), 3);
        assert!(
            matches!(&resp.content[2], ContentBlock::ToolUse { name, input, .. } if name == "B" && input == &json!({"b": 1}))
        );
        assert_eq!(completes(&seen).len(), 3);
    }

    #[test]
    fn config_checks_the_url_and_the_key() {
        let bad = OpenAiProvider::new(OpenAiConfig { base_url: "localhost:8080".into(), ..OpenAiConfig::default() });
        assert!(matches!(bad, Err(ModelError::Config { .. })));
        let keyless = OpenAiProvider::new(OpenAiConfig::default());
        assert!(matches!(keyless, Err(ModelError::Config { message }) if message.contains("OPENAI_API_KEY")));
        let local = OpenAiProvider::new(OpenAiConfig {
            base_url: "http://127.0.0.1:11434/v1/".into(),
            ..OpenAiConfig::default()
        })
        .unwrap();
        assert_eq!(local.url, "http://127.0.0.1:11434/v1/chat/completions");
        assert!(local.headers.get(AUTHORIZATION).is_none());
        assert_eq!(local.name(), "openai");
        let hosted =
            OpenAiProvider::new(OpenAiConfig { api_key: Some("sk-test".into()), ..OpenAiConfig::default() }).unwrap();
        assert_eq!(hosted.url, "https://api.openai.com/v1/chat/completions");
        assert_eq!(hosted.headers.get(AUTHORIZATION).unwrap(), "Bearer sk-test");
        assert!(
            !format!("{:?} {:?}", hosted, OpenAiConfig { api_key: Some("sk-test".into()), ..OpenAiConfig::default() })
                .contains("sk-test")
        );
        assert_eq!(host_of("https://user:pw@example.com:8443/v1"), "example.com");
    }

    #[test]
    fn max_tokens_refusal_switches_the_field_once() {
        let p =
            OpenAiProvider::new(OpenAiConfig { base_url: "http://127.0.0.1:9/v1".into(), ..OpenAiConfig::default() })
                .unwrap();
        let refusal = || {
            AttemptError::fatal(ModelError::InvalidRequest {
                status: 400,
                message: "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.".into(),
            })
        };
        let first = p.adapt(refusal());
        assert!(first.retryable && first.retry_after == Some(Duration::ZERO));
        assert!(p.max_completion_tokens.load(Ordering::Relaxed));
        assert!(!p.adapt(refusal()).retryable);
    }
}
