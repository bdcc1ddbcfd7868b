//! The tool-pairing check on a recorded request's history: every tool call has exactly
//! one result, in the place the wire format requires, and no result is orphaned.

use std::collections::BTreeSet;

use serde_json::Value;

use super::recorded::RecordedRequest;

/// Panics with a clear message unless every tool call in the request's history has
/// exactly one matching result and no result is orphaned.
///
/// Anthropic: each assistant `tool_use` block needs one `tool_result` with its id in the
/// immediately following user message. OpenAI: each assistant `tool_calls[].id` needs one
/// `role: tool` message with that `tool_call_id` after it, before the next assistant
/// message.
#[track_caller]
pub fn assert_tool_pairing(req: &RecordedRequest) {
    let problems = tool_pairing_problems(req);
    if !problems.is_empty() {
        panic!(
            "tool call/result pairing is broken in the request to {} ({} messages):\n  - {}",
            req.path,
            req.messages().len(),
            problems.join("\n  - ")
        );
    }
}

/// What [`assert_tool_pairing`] would complain about (empty when the history is fine).
pub fn tool_pairing_problems(req: &RecordedRequest) -> Vec<String> {
    if req.is_openai() { openai_problems(req.messages()) } else { anthropic_problems(req.messages()) }
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

/// The `field` of every content block of `type_`, in order.
fn block_ids<'a>(message: &'a Value, type_: &str, field: &str) -> Vec<&'a str> {
    let Some(blocks) = message.get("content").and_then(Value::as_array) else {
        return Vec::new();
    };
    blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some(type_))
        .map(|block| block.get(field).and_then(Value::as_str).unwrap_or(""))
        .collect()
}

fn anthropic_problems(messages: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, message) in messages.iter().enumerate() {
        if role(message) == "assistant" {
            let calls = block_ids(message, "tool_use", "id");
            let results = match messages.get(i + 1) {
                Some(next) if role(next) == "user" => block_ids(next, "tool_result", "tool_use_id"),
                _ => Vec::new(),
            };
            for id in calls {
                if !seen.insert(id) {
                    problems.push(format!("message {i}: tool_use id {id:?} is used twice"));
                }
                let count = results.iter().filter(|r| **r == id).count();
                if count != 1 {
                    problems.push(format!(
                        "message {i}: tool_use {id:?} has {count} tool_result(s) in the \
                         following user message (expected exactly 1)"
                    ));
                }
            }
        } else {
            let previous = match i.checked_sub(1).and_then(|p| messages.get(p)) {
                Some(prev) if role(prev) == "assistant" => block_ids(prev, "tool_use", "id"),
                _ => Vec::new(),
            };
            for id in block_ids(message, "tool_result", "tool_use_id") {
                if !previous.contains(&id) {
                    problems.push(format!(
                        "message {i}: tool_result for {id:?} has no tool_use in the \
                         immediately preceding assistant message"
                    ));
                }
            }
        }
    }
    problems
}

fn openai_problems(messages: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    // The latest assistant message: its index, its call ids and the results seen so far.
    let mut open: Option<(usize, Vec<&str>, Vec<&str>)> = None;
    for (i, message) in messages.iter().enumerate() {
        match role(message) {
            "assistant" => {
                close(open.take(), &mut problems);
                let calls: Vec<&str> = message
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[])
                    .iter()
                    .map(|call| call.get("id").and_then(Value::as_str).unwrap_or(""))
                    .collect();
                for id in &calls {
                    if !seen.insert(*id) {
                        problems.push(format!("message {i}: tool call id {id:?} is used twice"));
                    }
                }
                open = Some((i, calls, Vec::new()));
            }
            "tool" => {
                let id = message.get("tool_call_id").and_then(Value::as_str).unwrap_or("");
                match &mut open {
                    Some((_, calls, results)) if calls.contains(&id) => results.push(id),
                    _ => problems.push(format!(
                        "message {i}: tool result for {id:?} has no tool call in the latest \
                         assistant message"
                    )),
                }
            }
            _ => {}
        }
    }
    close(open, &mut problems);
    problems
}

fn close(open: Option<(usize, Vec<&str>, Vec<&str>)>, problems: &mut Vec<String>) {
    let Some((i, calls, results)) = open else {
        return;
    };
    for id in calls {
        let count = results.iter().filter(|r| **r == id).count();
        if count != 1 {
            problems.push(format!(
                "message {i}: tool call {id:?} has {count} role=tool result(s) before the \
                 next assistant message (expected exactly 1)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderMap;
    use serde_json::{Value, json};

    use super::*;

    fn request(path: &str, messages: Value) -> RecordedRequest {
        let body = json!({"model": "m", "messages": messages}).to_string();
        RecordedRequest::new(path, &HeaderMap::new(), body.into())
    }

    fn anthropic(messages: Value) -> RecordedRequest {
        request("/v1/messages", messages)
    }

    fn openai(messages: Value) -> RecordedRequest {
        request("/v1/chat/completions", messages)
    }

    fn tool_use(id: &str) -> Value {
        json!({"type": "tool_use", "id": id, "name": "Read", "input": {}})
    }

    fn tool_result(id: &str) -> Value {
        json!({"type": "tool_result", "tool_use_id": id, "content": "ok"})
    }

    #[test]
    fn anthropic_good_history_passes() {
        let req = anthropic(json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [{"type": "text", "text": "ok"}, tool_use("a"), tool_use("b")]},
            {"role": "user", "content": [tool_result("b"), tool_result("a"), {"type": "text", "text": "more"}]},
            {"role": "assistant", "content": "plain string content"},
            {"role": "user", "content": "thanks"},
        ]));
        assert_tool_pairing(&req);
    }

    #[test]
    fn anthropic_bad_histories_are_named() {
        let missing = anthropic(json!([
            {"role": "assistant", "content": [tool_use("a"), tool_use("b")]},
            {"role": "user", "content": [tool_result("a")]},
        ]));
        let problems = tool_pairing_problems(&missing);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"b\" has 0 tool_result"));

        let doubled = anthropic(json!([
            {"role": "assistant", "content": [tool_use("a")]},
            {"role": "user", "content": [tool_result("a"), tool_result("a")]},
        ]));
        assert!(tool_pairing_problems(&doubled)[0].contains("has 2"));

        let late = anthropic(json!([
            {"role": "assistant", "content": [tool_use("a")]},
            {"role": "user", "content": "interrupting"},
            {"role": "user", "content": [tool_result("a")]},
        ]));
        assert_eq!(tool_pairing_problems(&late).len(), 2);

        let orphan = anthropic(json!([
            {"role": "user", "content": [tool_result("ghost")]},
        ]));
        assert!(tool_pairing_problems(&orphan)[0].contains("no tool_use"));

        let dangling = anthropic(json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": [tool_use("a")]},
        ]));
        assert_eq!(tool_pairing_problems(&dangling).len(), 1);
    }

    #[test]
    #[should_panic(expected = "tool call/result pairing is broken")]
    fn assert_panics_on_a_bad_history() {
        assert_tool_pairing(&anthropic(json!([
            {"role": "assistant", "content": [tool_use("a")]},
            {"role": "user", "content": "no result"},
        ])));
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "Read", "arguments": "{}"}})
    }

    fn result(id: &str) -> Value {
        json!({"role": "tool", "tool_call_id": id, "content": "ok"})
    }

    #[test]
    fn openai_good_history_passes() {
        let req = openai(json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [call("c1"), call("c2")]},
            result("c2"),
            result("c1"),
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "thanks"},
        ]));
        assert_tool_pairing(&req);
    }

    #[test]
    fn openai_bad_histories_are_named() {
        let missing = openai(json!([
            {"role": "assistant", "tool_calls": [call("c1"), call("c2")]},
            result("c1"),
            {"role": "assistant", "content": "done"},
        ]));
        let problems = tool_pairing_problems(&missing);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"c2\" has 0"));

        let orphan = openai(json!([
            {"role": "user", "content": "go"},
            result("ghost"),
        ]));
        assert!(tool_pairing_problems(&orphan)[0].contains("no tool call"));

        let stale = openai(json!([
            {"role": "assistant", "tool_calls": [call("c1")]},
            result("c1"),
            {"role": "assistant", "content": "next"},
            result("c1"),
        ]));
        assert_eq!(tool_pairing_problems(&stale).len(), 1);

        let doubled = openai(json!([
            {"role": "assistant", "tool_calls": [call("c1")]},
            result("c1"),
            result("c1"),
        ]));
        assert!(tool_pairing_problems(&doubled)[0].contains("has 2"));
    }

    #[test]
    #[should_panic(expected = "/v1/chat/completions")]
    fn assert_panics_on_a_bad_openai_history() {
        assert_tool_pairing(&openai(json!([
            {"role": "assistant", "tool_calls": [call("c1")]},
        ])));
    }
}
