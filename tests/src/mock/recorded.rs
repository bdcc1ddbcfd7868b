//! [`RecordedRequest`]: one request as the mock model server received it, with handy
//! accessors for the parts tests look at.

use std::collections::BTreeMap;
use std::time::Instant;

use axum::http::HeaderMap;
use bytes::Bytes;
use serde_json::Value;

/// One request as received, recorded before it is answered.
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    pub path: String,
    /// Lowercase names; repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The exact bytes received.
    pub body: Bytes,
    /// The body parsed as JSON (`Value::Null` when it is not JSON).
    pub json: Value,
    pub received_at: Instant,
    /// The same moment on the wall clock, to compare with other processes' clocks.
    pub received_wall: std::time::SystemTime,
}

impl RecordedRequest {
    pub(crate) fn new(path: &str, headers: &HeaderMap, body: Bytes) -> RecordedRequest {
        let mut map = BTreeMap::<String, String>::new();
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            map.entry(name.as_str().to_ascii_lowercase())
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
        RecordedRequest {
            path: path.to_owned(),
            headers: map,
            json: serde_json::from_slice(&body).unwrap_or(Value::Null),
            body,
            received_at: Instant::now(),
            received_wall: std::time::SystemTime::now(),
        }
    }

    /// A header by name (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// True for the OpenAI chat completions routes.
    pub fn is_openai(&self) -> bool {
        self.path.ends_with("/chat/completions")
    }

    /// True when the body asks for a streamed answer.
    pub fn is_stream(&self) -> bool {
        self.json.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The `model` field of the body.
    pub fn model(&self) -> Option<&str> {
        self.json.get("model").and_then(Value::as_str)
    }

    /// The `messages` array of the body (empty when missing), in either wire format.
    pub fn messages(&self) -> &[Value] {
        array(&self.json, "messages")
    }

    /// The `tools` array of the body (empty when missing).
    pub fn tools(&self) -> &[Value] {
        array(&self.json, "tools")
    }

    /// The names of the tools offered, in request order (either wire format).
    pub fn tool_names(&self) -> Vec<&str> {
        self.tools()
            .iter()
            .filter_map(|tool| tool.get("name").or_else(|| tool.pointer("/function/name")).and_then(Value::as_str))
            .collect()
    }

    /// The Anthropic top-level `system` field (a string or an array of blocks).
    pub fn system(&self) -> Option<&Value> {
        self.json.get("system")
    }
}

/// The Anthropic `messages` array of a request.
pub fn anthropic_messages(req: &RecordedRequest) -> &[Value] {
    req.messages()
}

/// The OpenAI `messages` array of a request.
pub fn openai_messages(req: &RecordedRequest) -> &[Value] {
    req.messages()
}

fn array<'a>(json: &'a Value, key: &str) -> &'a [Value] {
    json.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}
