//! The Anthropic Messages API wire format: whole `message` objects, the streamed event
//! sequence and error bodies.

use serde_json::{Value, json};

use super::script::{MockUsage, Turn};
use super::wire::{Ctx, SseEvent, split_chunks};

/// Error types by HTTP status, as the API uses them.
const ERROR_TYPES: &[(u16, &str)] = &[
    (400, "invalid_request_error"),
    (401, "authentication_error"),
    (403, "permission_error"),
    (404, "not_found_error"),
    (413, "request_too_large"),
    (429, "rate_limit_error"),
    (500, "api_error"),
    (529, "overloaded_error"),
];

pub(crate) fn error_type_for_status(status: u16) -> &'static str {
    ERROR_TYPES.iter().find(|(code, _)| *code == status).map(|(_, name)| *name).unwrap_or(if status < 500 {
        "invalid_request_error"
    } else {
        "api_error"
    })
}

pub(crate) fn status_for_error_type(error_type: &str) -> u16 {
    ERROR_TYPES.iter().find(|(_, name)| *name == error_type).map(|(code, _)| *code).unwrap_or(500)
}

pub(crate) fn error_body(error_type: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type, "message": message}})
}

pub(crate) fn message(turn: &Turn, ctx: &Ctx) -> Value {
    let mut content = Vec::new();
    if let Some((thinking, signature)) = &turn.thinking {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature}));
    }
    if let Some(text) = &turn.text {
        content.push(json!({"type": "text", "text": text}));
    }
    content.extend(turn.raw_blocks.iter().cloned());
    for call in &turn.tool_calls {
        content.push(json!({
            "type": "tool_use",
            "id": call.id.as_deref().unwrap_or_default(),
            "name": call.name,
            "input": call.input,
        }));
    }
    json!({
        "id": ctx.id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": content,
        "stop_reason": turn.stop_reason(),
        "stop_sequence": null,
        "usage": usage_json(&turn.usage()),
    })
}

pub(crate) fn events(turn: &Turn, ctx: &Ctx) -> Vec<SseEvent> {
    let usage = turn.usage();
    let mut start_usage = usage_json(&usage);
    start_usage["output_tokens"] = json!(1);
    let mut out = vec![
        SseEvent::named(
            "message_start",
            &json!({
                "type": "message_start",
                "message": {
                    "id": ctx.id,
                    "type": "message",
                    "role": "assistant",
                    "model": ctx.model,
                    "content": [],
                    "stop_reason": null,
                    "stop_sequence": null,
                    "usage": start_usage,
                },
            }),
        ),
        SseEvent::named("ping", &json!({"type": "ping"})),
    ];

    let mut blocks = Blocks { out: &mut out, index: 0 };
    if let Some((thinking, signature)) = &turn.thinking {
        let mut deltas: Vec<Value> = split_chunks(thinking, 3)
            .into_iter()
            .map(|chunk| json!({"type": "thinking_delta", "thinking": chunk}))
            .collect();
        deltas.push(json!({"type": "signature_delta", "signature": signature}));
        blocks.push(json!({"type": "thinking", "thinking": "", "signature": ""}), deltas);
    }
    if let Some(text) = &turn.text {
        let deltas =
            split_chunks(text, 3).into_iter().map(|chunk| json!({"type": "text_delta", "text": chunk})).collect();
        blocks.push(json!({"type": "text", "text": ""}), deltas);
    }
    for block in &turn.raw_blocks {
        blocks.push(block.clone(), Vec::new());
    }
    for call in &turn.tool_calls {
        let start = json!({
            "type": "tool_use",
            "id": call.id.as_deref().unwrap_or_default(),
            "name": call.name,
            "input": {},
        });
        let deltas = split_chunks(&call.input.to_string(), 3)
            .into_iter()
            .map(|chunk| json!({"type": "input_json_delta", "partial_json": chunk}))
            .collect();
        blocks.push(start, deltas);
    }

    out.push(SseEvent::named(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": turn.stop_reason(), "stop_sequence": null},
            "usage": {"output_tokens": usage.output_tokens},
        }),
    ));
    out.push(SseEvent::named("message_stop", &json!({"type": "message_stop"})));
    out
}

/// Appends content blocks (start, deltas, stop) with increasing indexes.
struct Blocks<'a> {
    out: &'a mut Vec<SseEvent>,
    index: usize,
}

impl Blocks<'_> {
    fn push(&mut self, block: Value, deltas: Vec<Value>) {
        let index = self.index;
        self.index += 1;
        self.out.push(SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        ));
        for delta in deltas {
            self.out.push(SseEvent::named(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        self.out.push(SseEvent::named("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
    }
}

fn usage_json(usage: &MockUsage) -> Value {
    json!({
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
    })
}
