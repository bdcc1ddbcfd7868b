//! The model-provider interface: one request in, a stream of events and a whole
//! response out. Providers own their wire format, retries and rate limiting; the loop
//! knows none of that.

pub mod anthropic;
pub mod limits;
pub mod openai;
pub mod retry;
pub mod scripted;
pub mod settings;
mod sse;

use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ContentBlock, Message, ToolSpec};
use crate::usage::Usage;

pub use limits::{ModelLimits, limits_for};
pub use retry::{Limiter, RetryPolicy};
pub use settings::{ModelSettings, Thinking, Timeouts};

/// Everything a provider needs for one model call. It borrows the loop's state, so a
/// long history is never copied per turn.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The agent making the call; the scripted provider selects its turns by it.
    pub agent_id: &'a str,
    pub model: &'a str,
    /// The system prompt, as parts. Parts marked `cache` end a cacheable prefix.
    pub system: &'a [SystemPart],
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    pub max_tokens: u32,
    /// Stop retrying after this many overloaded answers in a row (set when a fallback
    /// model is waiting); `None` retries as the policy allows.
    pub give_up_on_overload_after: Option<u32>,
    /// How long the provider waits for the first byte, between stream events, and in
    /// all for retries of this request.
    pub timeouts: Timeouts,
    /// Extended thinking, when on. A provider without it ignores it.
    pub thinking: Option<Thinking>,
    /// Server tools the API runs itself (Anthropic's `web_search`), sent as given after
    /// `tools`. A provider without them ignores them.
    pub server_tools: &'a [serde_json::Value],
}

/// One part of the system prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemPart {
    pub text: String,
    /// Place a cache breakpoint after this part.
    pub cache: bool,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    EndTurn,
    ToolUse,
    MaxTokens,
    StopSequence,
    Refusal,
    PauseTurn,
    /// A reason this version of orch does not know.
    #[serde(untagged)]
    Other(String),
}

impl StopReason {
    pub fn parse(s: &str) -> Self {
        match s {
            "end_turn" | "stop" => Self::EndTurn,
            "tool_use" | "tool_calls" | "function_call" => Self::ToolUse,
            "max_tokens" | "length" => Self::MaxTokens,
            "stop_sequence" => Self::StopSequence,
            "refusal" | "content_filter" => Self::Refusal,
            "pause_turn" => Self::PauseTurn,
            other => Self::Other(other.to_string()),
        }
    }
}

/// A complete model response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    pub content: Vec<ContentBlock>,
    pub stop_reason: StopReason,
    pub usage: Usage,
    /// The model that answered (after any fallback).
    pub model: String,
}

/// What a provider reports while a response streams in.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// A fresh attempt starts: drop whatever the previous attempt streamed.
    AttemptStarted {
        attempt: u32,
    },
    TextDelta(String),
    ThinkingDelta(String),
    /// Content block `index` of the response is complete.
    BlockComplete {
        index: usize,
        block: ContentBlock,
    },
    /// The provider waits before trying again.
    Retrying {
        attempt: u32,
        delay: Duration,
        error: String,
    },
}

/// Receives stream events as they arrive.
pub type StreamSink<'a> = &'a mut (dyn FnMut(StreamEvent) + Send);

/// Why a model call failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum ModelError {
    #[error("model api rejected the credentials (http {status}): {message}; check the api key")]
    Auth { status: u16, message: String },
    #[error("prompt is too long for the model: {message}")]
    PromptTooLong { message: String },
    #[error("model api rejected the request (http {status}): {message}")]
    InvalidRequest { status: u16, message: String },
    #[error("model api kept rate-limiting the requests (http {status}) after {attempts} attempts: {message}")]
    RateLimited { status: u16, attempts: u32, message: String },
    #[error("model api is overloaded (http {status}) after {attempts} attempts: {message}")]
    Overloaded { status: u16, attempts: u32, message: String },
    #[error("model api failed (http {status}) after {attempts} attempts: {message}")]
    Server { status: u16, attempts: u32, message: String },
    #[error("could not reach the model api after {attempts} attempts: {message}")]
    Network { attempts: u32, message: String },
    #[error("model api sent a response orch cannot read: {message}")]
    Protocol { message: String },
    #[error("scripted model: {message}")]
    Script { message: String },
    #[error("model provider is misconfigured: {message}")]
    Config { message: String },
}

/// The kind of a [`ModelError`], as reports and exit codes name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelErrorKind {
    Auth,
    PromptTooLong,
    InvalidRequest,
    RateLimit,
    Overloaded,
    Server,
    Network,
    Protocol,
    Script,
    Config,
}

impl ModelErrorKind {
    /// The stable name used in reports and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auth => "auth",
            Self::PromptTooLong => "prompt_too_long",
            Self::InvalidRequest => "invalid_request",
            Self::RateLimit => "rate_limit",
            Self::Overloaded => "overloaded",
            Self::Server => "server",
            Self::Network => "network",
            Self::Protocol => "protocol",
            Self::Script => "script",
            Self::Config => "config",
        }
    }

    /// Errors of the environment (credentials, reachability, setup) rather than of the
    /// agent's work.
    pub fn is_infrastructure(self) -> bool {
        matches!(self, Self::Auth | Self::Network | Self::Config)
    }
}

impl std::fmt::Display for ModelErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ModelError {
    /// The kind of the error.
    pub fn kind(&self) -> ModelErrorKind {
        match self {
            Self::Auth { .. } => ModelErrorKind::Auth,
            Self::PromptTooLong { .. } => ModelErrorKind::PromptTooLong,
            Self::InvalidRequest { .. } => ModelErrorKind::InvalidRequest,
            Self::RateLimited { .. } => ModelErrorKind::RateLimit,
            Self::Overloaded { .. } => ModelErrorKind::Overloaded,
            Self::Server { .. } => ModelErrorKind::Server,
            Self::Network { .. } => ModelErrorKind::Network,
            Self::Protocol { .. } => ModelErrorKind::Protocol,
            Self::Script { .. } => ModelErrorKind::Script,
            Self::Config { .. } => ModelErrorKind::Config,
        }
    }
}

/// A model API.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// Short name for logs and reports (`anthropic`, `openai`, `scripted`).
    fn name(&self) -> &str;

    /// Sends `request` and streams the answer into `sink`. Retries are the provider's
    /// business; the returned error is final for this request. Dropping the future
    /// abandons the call.
    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError>;
}

/// Truncates a server message so an error line stays readable.
pub(crate) fn short(text: &str) -> String {
    const MAX: usize = 600;
    let text = text.trim();
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Pulls a human-readable message out of an API error body, whatever its shape.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(v) = serde_json::from_str::<Value>(body) {
        let msg =
            v.pointer("/error/message").or_else(|| v.get("message")).or_else(|| v.get("error")).and_then(Value::as_str);
        if let Some(m) = msg {
            return short(m);
        }
    }
    if body.trim().is_empty() { "no message in the response body".to_string() } else { short(body) }
}

/// Whether an error message is the API's way of saying the prompt does not fit.
pub(crate) fn looks_like_prompt_too_long(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("prompt is too long")
        || m.contains("context_length_exceeded")
        || m.contains("maximum context length")
        || m.contains("context window")
        || m.contains("too many tokens")
}
