//! What the two wire formats share: the [`Wire`] switch the server dispatches on, the
//! per-reply context, SSE event framing and chunk splitting.

use bytes::Bytes;
use serde_json::Value;

use super::script::Turn;
use super::{anthropic, openai};

/// The wire format of a route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    Anthropic,
    OpenAi,
}

/// What a reply needs besides its turn.
pub(crate) struct Ctx {
    /// The response id (`msg_mock_<n>` / `chatcmpl-mock-<n>`).
    pub id: String,
    /// Echoed from the request.
    pub model: String,
    /// OpenAI `stream_options.include_usage`.
    pub include_usage: bool,
}

/// One SSE event: `event: NAME\ndata: DATA\n\n` (or without the `event:` line).
#[derive(Clone, Debug)]
pub(crate) struct SseEvent {
    name: Option<&'static str>,
    data: String,
}

impl SseEvent {
    pub fn named(name: &'static str, data: &Value) -> SseEvent {
        SseEvent { name: Some(name), data: data.to_string() }
    }

    pub fn data(data: &Value) -> SseEvent {
        SseEvent { name: None, data: data.to_string() }
    }

    /// An event whose data is sent verbatim (`[DONE]`, malformed JSON).
    pub fn raw(name: Option<&'static str>, data: &str) -> SseEvent {
        SseEvent { name, data: data.to_owned() }
    }

    pub fn to_bytes(&self) -> Bytes {
        let text = match self.name {
            Some(name) => format!("event: {name}\ndata: {}\n\n", self.data),
            None => format!("data: {}\n\n", self.data),
        };
        Bytes::from(text)
    }
}

impl Wire {
    /// The prefix of the tool ids the server assigns.
    pub fn tool_id_prefix(self) -> &'static str {
        match self {
            Wire::Anthropic => "toolu_mock_",
            Wire::OpenAi => "call_mock_",
        }
    }

    pub fn response_id(self, n: u64) -> String {
        match self {
            Wire::Anthropic => format!("msg_mock_{n}"),
            Wire::OpenAi => format!("chatcmpl-mock-{n}"),
        }
    }

    /// The whole (non-streaming) response body.
    pub fn message(self, turn: &Turn, ctx: &Ctx) -> Value {
        match self {
            Wire::Anthropic => anthropic::message(turn, ctx),
            Wire::OpenAi => openai::message(turn, ctx),
        }
    }

    /// Every event of the streamed turn, the final one last.
    pub fn events(self, turn: &Turn, ctx: &Ctx) -> Vec<SseEvent> {
        match self {
            Wire::Anthropic => anthropic::events(turn, ctx),
            Wire::OpenAi => openai::events(turn, ctx),
        }
    }

    /// A few valid events of `turn`, then one whose data is not JSON.
    pub fn malformed_events(self, turn: &Turn, ctx: &Ctx) -> Vec<SseEvent> {
        let (valid, name) = match self {
            // message_start, ping, content_block_start
            Wire::Anthropic => (3, Some("content_block_delta")),
            // role chunk, first content or tool chunk
            Wire::OpenAi => (2, None),
        };
        let mut events = self.events(turn, ctx);
        events.truncate(valid.min(events.len().saturating_sub(1)));
        events.push(SseEvent::raw(name, "{not json"));
        events
    }

    /// The opening of a stream and part of a text, then an error event.
    pub fn stream_error_events(self, ctx: &Ctx, error_type: &str, message: &str) -> Vec<SseEvent> {
        let turn = Turn::text("Let me look into that.");
        let mut events = self.events(&turn, ctx);
        match self {
            Wire::Anthropic => {
                // message_start, ping, content_block_start, the first text_delta
                events.truncate(4);
                events.push(SseEvent::named("error", &anthropic::error_body(error_type, message)));
            }
            Wire::OpenAi => {
                // role chunk, the first content chunk
                events.truncate(2);
                let status = anthropic::status_for_error_type(error_type);
                events.push(SseEvent::data(&openai::error_body(openai::error_type_for_status(status), message, None)));
            }
        }
        events
    }

    /// The error body for an HTTP status, in this wire format.
    pub fn error_for_status(self, status: u16, message: &str) -> Value {
        match self {
            Wire::Anthropic => anthropic::error_body(anthropic::error_type_for_status(status), message),
            Wire::OpenAi => openai::error_body(
                openai::error_type_for_status(status),
                message,
                openai::error_code_for_status(status),
            ),
        }
    }

    /// The HTTP status and body of an error named by its Anthropic `error_type`
    /// (used when a stream error hits a non-streaming request).
    pub fn error_for_type(self, error_type: &str, message: &str) -> (u16, Value) {
        let status = anthropic::status_for_error_type(error_type);
        let body = match self {
            Wire::Anthropic => anthropic::error_body(error_type, message),
            Wire::OpenAi => self.error_for_status(status, message),
        };
        (status, body)
    }

    /// The HTTP 400 body saying the prompt is too long.
    pub fn prompt_too_long(self) -> Value {
        match self {
            Wire::Anthropic => {
                anthropic::error_body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum")
            }
            Wire::OpenAi => openai::error_body(
                "invalid_request_error",
                "This model's maximum context length is 128000 tokens. However, your \
                 messages resulted in 210000 tokens. Please reduce the length of the \
                 messages.",
                Some("context_length_exceeded"),
            ),
        }
    }
}

/// Splits `text` into at most `parts` non-empty pieces at char boundaries (none for an
/// empty text).
pub(crate) fn split_chunks(text: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() || parts == 0 {
        return Vec::new();
    }
    let size = chars.len().div_ceil(parts);
    chars.chunks(size).map(|chunk| chunk.iter().collect()).collect()
}
