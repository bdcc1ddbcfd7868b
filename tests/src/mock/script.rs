//! The script of the mock model server: [`Step`]s (what to do with the next request) and
//! the [`Turn`]s they reply with, plus their serde form used by the `mock-model-server`
//! binary's script files.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What the server does with one request. Steps are taken from a FIFO queue shared by
/// both wire formats.
///
/// Serde form (externally tagged, snake_case): `reply: {..turn..}`,
/// `status: {code, retry_after?, body?}`, `cut_after: {turn, events}`,
/// `malformed: {turn?}`, `stream_error: {error_type?, message?}`, `prompt_too_long`,
/// `delay: {ms, step}`, `stall`, `stall_after: {turn, events}`, `no_reply`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Step {
    /// Answer with this turn (streamed or whole, as the request asks).
    Reply(Turn),
    /// Answer with an HTTP error status. `retry_after` sets the `retry-after` header
    /// verbatim; `body` defaults to an error JSON in the request's wire format.
    Status {
        code: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        body: Option<String>,
    },
    /// Stream the turn but drop the connection after `events` SSE events (never the
    /// final one). A non-streaming request gets half of the JSON body, then the cut.
    CutAfter { turn: Turn, events: usize },
    /// Send a few valid events, then a malformed one (`data: {not json`), then close.
    Malformed {
        #[serde(default)]
        turn: Turn,
    },
    /// An error event in the middle of a stream (Anthropic `event: error`, OpenAI a
    /// chunk `{"error":{..}}`). A non-streaming request gets the matching HTTP status.
    StreamError {
        #[serde(default = "default_stream_error_type")]
        error_type: String,
        #[serde(default = "default_stream_error_message")]
        message: String,
    },
    /// HTTP 400 saying the prompt is too long, in the request's wire format.
    PromptTooLong,
    /// Wait this long, then do the inner step. Serde form: `delay: {ms, step}`.
    #[serde(with = "delay_form")]
    Delay(Duration, Box<Step>),
    /// Send the headers and the opening event, then nothing more, keeping the connection
    /// open until the client goes away (or the server is dropped).
    Stall,
    /// Stream the turn's first `events` SSE events, then nothing more, keeping the
    /// connection open (a stall mid-stream). A non-streaming request stalls at once.
    StallAfter { turn: Turn, events: usize },
    /// Accept the request and never answer: no status line, no headers.
    NoReply,
}

impl Step {
    /// A reply with only text.
    pub fn text(text: impl Into<String>) -> Step {
        Step::Reply(Turn::text(text))
    }

    /// A reply with a single tool call.
    pub fn tool(name: impl Into<String>, input: Value) -> Step {
        Step::Reply(Turn::tool(name, input))
    }

    /// An HTTP error status with the default body and no `retry-after`.
    pub fn status(code: u16) -> Step {
        Step::Status { code, retry_after: None, body: None }
    }

    /// An HTTP error status with a `retry-after` header (sent verbatim).
    pub fn retry_after(code: u16, retry_after: impl Into<String>) -> Step {
        Step::Status { code, retry_after: Some(retry_after.into()), body: None }
    }

    /// An Anthropic-style `overloaded_error` in the middle of the stream.
    pub fn overloaded_mid_stream() -> Step {
        Step::StreamError { error_type: default_stream_error_type(), message: default_stream_error_message() }
    }

    /// Wait `delay`, then do `step`.
    pub fn delay(delay: Duration, step: Step) -> Step {
        Step::Delay(delay, Box::new(step))
    }
}

impl From<Turn> for Step {
    fn from(turn: Turn) -> Step {
        Step::Reply(turn)
    }
}

/// One assistant message of the script.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Turn {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `(thinking, signature)`. Serde form: `thinking: {text, signature}`.
    #[serde(with = "thinking_form", skip_serializing_if = "Option::is_none")]
    pub thinking: Option<(String, String)>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Anthropic stop reason; defaults to `tool_use` when there are tool calls, else
    /// `end_turn`. OpenAI maps it to `tool_calls` / `stop` / `length`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Defaults to [`MockUsage::default`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<MockUsage>,
    /// Content blocks sent as they are, after the text and before the tool calls
    /// (Anthropic wire only), e.g. a `server_tool_use` block orch does not know.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub raw_blocks: Vec<Value>,
}

impl Turn {
    /// A turn with only text.
    pub fn text(text: impl Into<String>) -> Turn {
        Turn { text: Some(text.into()), ..Turn::default() }
    }

    /// A turn with a single tool call (its id is assigned by the server).
    pub fn tool(name: impl Into<String>, input: Value) -> Turn {
        Turn::tools(vec![ToolCall::new(name, input)])
    }

    /// A turn with several tool calls, in this order.
    pub fn tools(tool_calls: Vec<ToolCall>) -> Turn {
        Turn { tool_calls, ..Turn::default() }
    }

    /// Sets the text (shown before the tool calls).
    pub fn with_text(mut self, text: impl Into<String>) -> Turn {
        self.text = Some(text.into());
        self
    }

    /// Adds a thinking block (sent first) with its signature.
    pub fn with_thinking(mut self, thinking: impl Into<String>, signature: impl Into<String>) -> Turn {
        self.thinking = Some((thinking.into(), signature.into()));
        self
    }

    /// Appends a tool call.
    pub fn with_tool(mut self, name: impl Into<String>, input: Value) -> Turn {
        self.tool_calls.push(ToolCall::new(name, input));
        self
    }

    /// Appends a content block sent as it is (Anthropic wire only).
    pub fn with_raw_block(mut self, block: Value) -> Turn {
        self.raw_blocks.push(block);
        self
    }

    /// Sets the stop reason (Anthropic vocabulary, e.g. `max_tokens`).
    pub fn with_stop_reason(mut self, stop_reason: impl Into<String>) -> Turn {
        self.stop_reason = Some(stop_reason.into());
        self
    }

    /// Sets the reported usage.
    pub fn with_usage(mut self, usage: MockUsage) -> Turn {
        self.usage = Some(usage);
        self
    }

    /// The stop reason sent (Anthropic vocabulary).
    pub fn stop_reason(&self) -> String {
        match &self.stop_reason {
            Some(reason) => reason.clone(),
            None if self.tool_calls.is_empty() => "end_turn".to_owned(),
            None => "tool_use".to_owned(),
        }
    }

    /// The usage sent.
    pub fn usage(&self) -> MockUsage {
        self.usage.clone().unwrap_or_default()
    }
}

/// One tool call of a [`Turn`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Defaults to `toolu_mock_<n>` (Anthropic) or `call_mock_<n>` (OpenAI), unique per
    /// server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

impl ToolCall {
    /// A call whose id the server assigns.
    pub fn new(name: impl Into<String>, input: Value) -> ToolCall {
        ToolCall { id: None, name: name.into(), input }
    }

    /// Sets a fixed id.
    pub fn with_id(mut self, id: impl Into<String>) -> ToolCall {
        self.id = Some(id.into());
        self
    }
}

/// Token usage reported for a [`Turn`] (Anthropic vocabulary; OpenAI gets
/// `prompt_tokens = input + cache_read + cache_creation`, `cached_tokens = cache_read`).
/// In a script, missing fields are 0.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUsage {
    #[serde(default)]
    pub input_tokens: u64,
    #[serde(default)]
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_creation_input_tokens: u64,
    #[serde(default)]
    pub cache_read_input_tokens: u64,
}

impl Default for MockUsage {
    /// Small and nonzero: 12 input, 7 output, no cache.
    fn default() -> MockUsage {
        MockUsage { input_tokens: 12, output_tokens: 7, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
    }
}

/// Parses a script: a YAML (or JSON) list of steps in their serde form, e.g.
/// `- reply: {text: hi}`. Enums use the plain map form (`reply: ...`), not YAML tags.
pub fn parse_steps(text: &str) -> Result<Vec<Step>, String> {
    // Through JSON values, so that externally tagged enums take the map form.
    let items: Vec<Value> = orch_workflows::yaml::load_as("script", text.as_bytes())
        .map_err(|e| format!("not a list of steps: {e} ({})", e.hint))?;
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| serde_json::from_value(item).map_err(|e| format!("step {}: {e}", i + 1)))
        .collect()
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

fn default_stream_error_type() -> String {
    "overloaded_error".to_owned()
}

fn default_stream_error_message() -> String {
    "Overloaded".to_owned()
}

/// `delay: {ms, step}` for [`Step::Delay`].
mod delay_form {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Step;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Delay<S> {
        ms: u64,
        step: S,
    }

    pub(super) fn serialize<S: Serializer>(delay: &Duration, step: &Step, serializer: S) -> Result<S::Ok, S::Error> {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        Delay { ms, step }.serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<(Duration, Box<Step>), D::Error> {
        let Delay { ms, step } = Delay::<Step>::deserialize(deserializer)?;
        Ok((Duration::from_millis(ms), Box::new(step)))
    }
}

/// `thinking: {text, signature}` for [`Turn::thinking`].
mod thinking_form {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Thinking<T> {
        text: T,
        #[serde(default)]
        signature: T,
    }

    pub(super) fn serialize<S: Serializer>(
        thinking: &Option<(String, String)>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        thinking.as_ref().map(|(text, signature)| Thinking { text, signature }).serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<(String, String)>, D::Error> {
        let thinking = Option::<Thinking<String>>::deserialize(deserializer)?;
        Ok(thinking.map(|t| (t.text, t.signature)))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_documented_yaml_form_parses() {
        let yaml = r#"
- reply:
    text: "Let me read it."
    thinking: {text: "the user wants a.rs", signature: "sig"}
    tool_calls:
      - {name: Read, input: {file_path: a.rs}}
      - {id: toolu_fixed, name: LS}
    usage: {input_tokens: 100, cache_read_input_tokens: 50}
- status: {code: 529, retry_after: "0"}
- cut_after: {turn: {text: "partial"}, events: 3}
- malformed: {}
- stream_error: {error_type: overloaded_error, message: Overloaded}
- prompt_too_long
- delay: {ms: 50, step: {reply: {text: "slow"}}}
- stall
"#;
        let steps = parse_steps(yaml).unwrap();
        let expected = vec![
            Step::Reply(
                Turn::text("Let me read it.")
                    .with_thinking("the user wants a.rs", "sig")
                    .with_tool("Read", json!({"file_path": "a.rs"}))
                    .with_tool("LS", json!({}))
                    .with_usage(MockUsage {
                        input_tokens: 100,
                        output_tokens: 0,
                        cache_creation_input_tokens: 0,
                        cache_read_input_tokens: 50,
                    }),
            ),
            Step::retry_after(529, "0"),
            Step::CutAfter { turn: Turn::text("partial"), events: 3 },
            Step::Malformed { turn: Turn::default() },
            Step::overloaded_mid_stream(),
            Step::PromptTooLong,
            Step::delay(Duration::from_millis(50), Step::text("slow")),
            Step::Stall,
        ];
        let mut expected = expected;
        if let Step::Reply(turn) = &mut expected[0] {
            turn.tool_calls[1].id = Some("toolu_fixed".to_owned());
        }
        assert_eq!(steps, expected);
    }

    #[test]
    fn json_form_round_trips() {
        let steps =
            vec![Step::Reply(full_turn()), Step::delay(Duration::from_millis(5), Step::status(500)), Step::Stall];
        let text = serde_json::to_string(&steps).unwrap();
        let back: Vec<Step> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, steps);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = parse_steps("- stall\n- reply: {txt: hi}").unwrap_err();
        assert!(err.starts_with("step 2:") && err.contains("txt"), "{err}");
    }

    #[test]
    fn stop_reason_and_usage_defaults() {
        assert_eq!(Turn::text("x").stop_reason(), "end_turn");
        assert_eq!(Turn::tool("Read", json!({})).stop_reason(), "tool_use");
        let usage = Turn::default().usage();
        assert!(usage.input_tokens > 0 && usage.output_tokens > 0);
    }

    fn full_turn() -> Turn {
        Turn::text("t")
            .with_thinking("th", "sig")
            .with_tool("Read", json!({"a": 1}))
            .with_stop_reason("max_tokens")
            .with_usage(MockUsage::default())
    }
}
