//! The OpenAI chat completions wire format: whole `chat.completion` objects, streamed
//! `chat.completion.chunk`s ending in `[DONE]`, and error bodies.
//!
//! A turn's thinking is sent as `reasoning_content`, as vLLM and similar servers do.

use serde_json::{Value, json};

use super::script::{MockUsage, Turn};
use super::wire::{Ctx, SseEvent, split_chunks};

pub(crate) fn error_type_for_status(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        s if s >= 500 => "server_error",
        _ => "invalid_request_error",
    }
}

pub(crate) fn error_code_for_status(status: u16) -> Option<&'static str> {
    match status {
        401 => Some("invalid_api_key"),
        404 => Some("model_not_found"),
        429 => Some("rate_limit_exceeded"),
        _ => None,
    }
}

pub(crate) fn error_body(error_type: &str, message: &str, code: Option<&str>) -> Value {
    json!({"error": {"message": message, "type": error_type, "param": null, "code": code}})
}

/// The Anthropic stop reason in OpenAI's vocabulary.
fn finish_reason(turn: &Turn) -> String {
    match turn.stop_reason().as_str() {
        "tool_use" => "tool_calls".to_owned(),
        "end_turn" | "stop_sequence" => "stop".to_owned(),
        "max_tokens" => "length".to_owned(),
        other => other.to_owned(),
    }
}

pub(crate) fn message(turn: &Turn, ctx: &Ctx) -> Value {
    let mut message = json!({"role": "assistant", "content": turn.text});
    if let Some((thinking, _)) = &turn.thinking {
        message["reasoning_content"] = json!(thinking);
    }
    if !turn.tool_calls.is_empty() {
        let calls: Vec<Value> = turn
            .tool_calls
            .iter()
            .map(|call| {
                json!({
                    "id": call.id.as_deref().unwrap_or_default(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.input.to_string()},
                })
            })
            .collect();
        message["tool_calls"] = json!(calls);
    }
    json!({
        "id": ctx.id,
        "object": "chat.completion",
        "created": 0,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(turn)}],
        "usage": usage_json(&turn.usage()),
    })
}

pub(crate) fn events(turn: &Turn, ctx: &Ctx) -> Vec<SseEvent> {
    let chunk = |delta: Value, finish: Option<String>| {
        SseEvent::data(&json!({
            "id": ctx.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }))
    };

    let mut out = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    if let Some((thinking, _)) = &turn.thinking {
        for piece in split_chunks(thinking, 3) {
            out.push(chunk(json!({"reasoning_content": piece}), None));
        }
    }
    if let Some(text) = &turn.text {
        for piece in split_chunks(text, 3) {
            out.push(chunk(json!({"content": piece}), None));
        }
    }
    for (index, call) in turn.tool_calls.iter().enumerate() {
        out.push(chunk(
            json!({"tool_calls": [{
                "index": index,
                "id": call.id.as_deref().unwrap_or_default(),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]}),
            None,
        ));
        for piece in split_chunks(&call.input.to_string(), 3) {
            out.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), None));
        }
    }
    out.push(chunk(json!({}), Some(finish_reason(turn))));
    if ctx.include_usage {
        out.push(SseEvent::data(&json!({
            "id": ctx.id,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": ctx.model,
            "choices": [],
            "usage": usage_json(&turn.usage()),
        })));
    }
    out.push(SseEvent::raw(None, "[DONE]"));
    out
}

fn usage_json(usage: &MockUsage) -> Value {
    let prompt = usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": usage.output_tokens,
        "total_tokens": prompt + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_input_tokens},
    })
}
