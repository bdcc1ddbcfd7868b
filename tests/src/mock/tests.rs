//! Tests of the mock model server over real HTTP (reqwest on 127.0.0.1).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn post(server: &MockServer, path: &str, body: &Value) -> reqwest::Response {
    client().post(format!("{}{path}", server.url())).header("x-api-key", "test-key").json(body).send().await.unwrap()
}

fn anthropic_request(stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 100,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

fn openai_request(stream: bool) -> Value {
    json!({
        "model": "gpt-test",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "hi"}],
    })
}

/// `(event name, data)` of every SSE event in `text`.
fn parse_sse(text: &str) -> Vec<(Option<String>, String)> {
    text.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = value.to_owned();
                }
            }
            (name, data)
        })
        .collect()
}

/// Reads the body chunk by chunk: what arrived, and whether it ended in an error.
async fn read_until_end(mut resp: reqwest::Response) -> (String, bool) {
    let mut text = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => text.extend_from_slice(&chunk),
            Ok(None) => return (String::from_utf8(text).unwrap(), false),
            Err(_) => return (String::from_utf8(text).unwrap(), true),
        }
    }
}

fn full_turn() -> Turn {
    Turn::text("Let me read both files.")
        .with_thinking("The user wants two files.", "sig-123")
        .with_tool("Read", json!({"file_path": "a.rs"}))
        .with_tool("Grep", json!({"pattern": "fn main", "path": "."}))
}

#[tokio::test]
async fn anthropic_stream_has_the_real_event_sequence() {
    let server = MockServer::start().await;
    server.push(Step::Reply(full_turn()));
    let resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let (text, broken) = read_until_end(resp).await;
    assert!(!broken);
    let events = parse_sse(&text);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_deref().unwrap()).collect();

    // Collapse runs of deltas to check the block structure.
    let mut shape: Vec<&str> = names.clone();
    shape.dedup();
    assert_eq!(
        shape,
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );

    let data: Vec<Value> = events.iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    for (name, value) in names.iter().zip(&data) {
        assert_eq!(value["type"], *name);
    }
    let start = &data[0]["message"];
    assert_eq!(start["model"], "claude-test");
    assert_eq!(start["usage"]["input_tokens"], 12);
    assert!(start["usage"]["cache_read_input_tokens"].is_u64());

    // Reassemble the blocks from their deltas.
    let mut blocks: Vec<Value> = Vec::new();
    for value in &data {
        match value["type"].as_str().unwrap() {
            "content_block_start" => blocks.push(value["content_block"].clone()),
            "content_block_delta" => {
                let block = &mut blocks[value["index"].as_u64().unwrap() as usize];
                let delta = &value["delta"];
                let (field, piece) = match delta["type"].as_str().unwrap() {
                    "thinking_delta" => ("thinking", &delta["thinking"]),
                    "signature_delta" => ("signature", &delta["signature"]),
                    "text_delta" => ("text", &delta["text"]),
                    "input_json_delta" => ("partial", &delta["partial_json"]),
                    other => panic!("unexpected delta {other}"),
                };
                let joined = format!("{}{}", block[field].as_str().unwrap_or(""), piece.as_str().unwrap());
                block[field] = json!(joined);
            }
            _ => {}
        }
    }
    assert_eq!(blocks[0]["thinking"], "The user wants two files.");
    assert_eq!(blocks[0]["signature"], "sig-123");
    assert_eq!(blocks[1]["text"], "Let me read both files.");
    assert_eq!(blocks[2]["id"], "toolu_mock_1");
    assert_eq!(blocks[3]["id"], "toolu_mock_2");
    assert_eq!(blocks[3]["name"], "Grep");
    let input: Value = serde_json::from_str(blocks[3]["partial"].as_str().unwrap()).unwrap();
    assert_eq!(input, json!({"pattern": "fn main", "path": "."}));

    let text_deltas = data.iter().filter(|v| v["delta"]["type"] == "text_delta").count();
    assert!((2..=3).contains(&text_deltas));
    let delta = &data[data.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 7);
}

#[tokio::test]
async fn anthropic_whole_message() {
    let server = MockServer::start().await;
    server.push(Step::text("hello"));
    server.push(Step::Reply(Turn::tool("Bash", json!({"command": "ls"})).with_usage(MockUsage {
        input_tokens: 5,
        output_tokens: 3,
        cache_creation_input_tokens: 2,
        cache_read_input_tokens: 9,
    })));
    let first: Value = post(&server, "/v1/messages", &anthropic_request(false)).await.json().await.unwrap();
    assert_eq!(first["type"], "message");
    assert_eq!(first["content"], json!([{"type": "text", "text": "hello"}]));
    assert_eq!(first["stop_reason"], "end_turn");

    let second: Value = post(&server, "/v1/messages", &anthropic_request(false)).await.json().await.unwrap();
    assert_eq!(second["stop_reason"], "tool_use");
    assert_eq!(second["content"][0]["id"], "toolu_mock_1");
    assert_eq!(second["content"][0]["input"], json!({"command": "ls"}));
    assert_eq!(second["usage"]["cache_read_input_tokens"], 9);
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn openai_stream_ends_with_done() {
    let server = MockServer::start().await;
    server.push(Step::Reply(full_turn().with_usage(MockUsage {
        input_tokens: 10,
        output_tokens: 4,
        cache_creation_input_tokens: 3,
        cache_read_input_tokens: 20,
    })));
    let resp = post(&server, "/v1/chat/completions", &openai_request(true)).await;
    assert_eq!(resp.status(), 200);
    let (text, broken) = read_until_end(resp).await;
    assert!(!broken);
    let events = parse_sse(&text);
    assert!(events.iter().all(|(name, _)| name.is_none()));
    assert_eq!(events.last().unwrap().1, "[DONE]");

    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|(_, d)| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["model"], "gpt-test");
    let content: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(content, "Let me read both files.");

    let mut calls: Vec<(String, String, String)> = Vec::new();
    for chunk in &chunks {
        for call in chunk["choices"][0]["delta"]["tool_calls"].as_array().into_iter().flatten() {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                assert_eq!(calls.len(), index);
                let name = call["function"]["name"].as_str().unwrap().to_owned();
                calls.push((id.to_owned(), name, String::new()));
            }
            calls[index].2 += call["function"]["arguments"].as_str().unwrap();
        }
    }
    assert_eq!(calls[0].0, "call_mock_1");
    assert_eq!(calls[1].1, "Grep");
    let args: Value = serde_json::from_str(&calls[1].2).unwrap();
    assert_eq!(args, json!({"pattern": "fn main", "path": "."}));

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["prompt_tokens"], 33);
    assert_eq!(usage["usage"]["completion_tokens"], 4);
    assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 20);
}

#[tokio::test]
async fn openai_whole_completion_and_both_routes() {
    let server = MockServer::start().await;
    server.push(Step::Reply(Turn::text("cut").with_stop_reason("max_tokens")));
    server.push(Step::tool("Read", json!({"file_path": "x"})));
    let mut request = openai_request(false);
    request["stream_options"] = Value::Null;

    let first: Value = post(&server, "/chat/completions", &request).await.json().await.unwrap();
    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["choices"][0]["message"]["content"], "cut");
    assert_eq!(first["choices"][0]["finish_reason"], "length");

    let second: Value = post(&server, "/v1/chat/completions", &request).await.json().await.unwrap();
    let call = &second["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["function"]["arguments"], r#"{"file_path":"x"}"#);
    assert_eq!(second["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(second["usage"]["prompt_tokens"], 12);
}

#[tokio::test]
async fn openai_stream_without_include_usage_has_no_usage_chunk() {
    let server = MockServer::start().await;
    server.push(Step::text("hi there"));
    let mut request = openai_request(true);
    request["stream_options"] = Value::Null;
    let (text, _) = read_until_end(post(&server, "/v1/chat/completions", &request).await).await;
    assert!(!text.contains("\"usage\""));
    assert!(text.ends_with("data: [DONE]\n\n"));
}

#[tokio::test]
async fn status_step_sets_retry_after_and_wire_error_body() {
    let server = MockServer::start().await;
    server.push(Step::retry_after(529, "0"));
    server.push(Step::retry_after(429, "Wed, 21 Oct 2015 07:28:00 GMT"));
    server.push(Step::Status { code: 503, retry_after: None, body: Some("upstream down".to_owned()) });

    let resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 529);
    assert_eq!(resp.headers()["retry-after"], "0");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "overloaded_error");

    let resp = post(&server, "/v1/chat/completions", &openai_request(true)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "Wed, 21 Oct 2015 07:28:00 GMT");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    assert!(body["error"]["message"].is_string());

    let resp = post(&server, "/v1/messages", &anthropic_request(false)).await;
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().get("retry-after").is_none());
    assert_eq!(resp.text().await.unwrap(), "upstream down");
}

#[tokio::test]
async fn cut_after_drops_the_connection_mid_stream() {
    let server = MockServer::start().await;
    server.push(Step::CutAfter { turn: Turn::text("this will be cut"), events: 4 });
    server.push(Step::CutAfter { turn: Turn::text("short"), events: 1000 });

    let (text, broken) = read_until_end(post(&server, "/v1/messages", &anthropic_request(true)).await).await;
    assert!(broken, "the stream should end in an error, got {text:?}");
    let names: Vec<_> = parse_sse(&text).into_iter().map(|(n, _)| n.unwrap()).collect();
    assert_eq!(names, ["message_start", "ping", "content_block_start", "content_block_delta"]);

    // More events than the stream has: everything but the final one.
    let (text, broken) = read_until_end(post(&server, "/v1/chat/completions", &openai_request(true)).await).await;
    assert!(broken);
    assert!(!text.contains("[DONE]"));
    assert!(text.contains("\"usage\""));
}

#[tokio::test]
async fn cut_after_on_a_whole_message_sends_half_a_body() {
    let server = MockServer::start().await;
    server.push(Step::CutAfter { turn: Turn::text("whole"), events: 0 });
    let (text, broken) = read_until_end(post(&server, "/v1/messages", &anthropic_request(false)).await).await;
    assert!(broken);
    assert!(serde_json::from_str::<Value>(&text).is_err());
}

#[tokio::test]
async fn stall_keeps_the_stream_open_until_the_server_goes() {
    let server = MockServer::start().await;
    server.push(Step::Stall);
    let mut resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 200);
    let first = resp.chunk().await.unwrap().unwrap();
    let first = String::from_utf8(first.to_vec()).unwrap();
    assert!(first.starts_with("event: message_start\n"), "{first:?}");

    let waited = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await;
    assert!(waited.is_err(), "a stalled stream sent more: {waited:?}");

    drop(server);
    let after = tokio::time::timeout(Duration::from_secs(5), resp.chunk())
        .await
        .expect("dropping the server ends the stalled stream");
    assert!(!matches!(after, Ok(Some(_))));
}

#[tokio::test]
async fn no_reply_sends_no_headers_and_stall_after_stops_mid_stream() {
    let server = MockServer::start().await;
    server.push(Step::NoReply);
    let waited =
        tokio::time::timeout(Duration::from_millis(300), post(&server, "/v1/messages", &anthropic_request(true))).await;
    assert!(waited.is_err(), "no_reply answered");
    assert_eq!(server.requests().len(), 1, "the request was read and recorded");

    server.push(Step::StallAfter { turn: Turn::text("abcdefghijkl"), events: 3 });
    let mut resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 200);
    let mut seen = String::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert_eq!(seen.matches("event: ").count(), 3, "{seen}");
    assert!(!seen.contains("message_stop"));
}

#[tokio::test]
async fn malformed_event_after_valid_ones() {
    let server = MockServer::start().await;
    server.push(Step::Malformed { turn: Turn::text("hello world") });
    server.push(Step::Malformed { turn: Turn::text("hello world") });

    let (text, broken) = read_until_end(post(&server, "/v1/messages", &anthropic_request(true)).await).await;
    assert!(!broken);
    let events = parse_sse(&text);
    let (name, data) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("content_block_delta"));
    assert_eq!(data, "{not json");
    for (_, data) in &events[..events.len() - 1] {
        serde_json::from_str::<Value>(data).unwrap();
    }

    let (text, _) = read_until_end(post(&server, "/v1/chat/completions", &openai_request(true)).await).await;
    assert!(text.ends_with("data: {not json\n\n"));
    assert!(!text.contains("[DONE]"));
}

#[tokio::test]
async fn stream_error_mid_stream() {
    let server = MockServer::start().await;
    server.push(Step::overloaded_mid_stream());
    server.push(Step::overloaded_mid_stream());
    server.push(Step::overloaded_mid_stream());

    let (text, _) = read_until_end(post(&server, "/v1/messages", &anthropic_request(true)).await).await;
    let events = parse_sse(&text);
    assert_eq!(events[0].0.as_deref(), Some("message_start"));
    let (name, data) = events.last().unwrap();
    assert_eq!(name.as_deref(), Some("error"));
    let error: Value = serde_json::from_str(data).unwrap();
    assert_eq!(error["error"]["type"], "overloaded_error");
    assert!(!text.contains("message_stop"));

    let (text, _) = read_until_end(post(&server, "/v1/chat/completions", &openai_request(true)).await).await;
    let events = parse_sse(&text);
    let error: Value = serde_json::from_str(&events.last().unwrap().1).unwrap();
    assert_eq!(error["error"]["message"], "Overloaded");
    assert!(!text.contains("[DONE]"));

    let resp = post(&server, "/v1/messages", &anthropic_request(false)).await;
    assert_eq!(resp.status(), 529);
}

#[tokio::test]
async fn prompt_too_long_in_both_formats() {
    let server = MockServer::start().await;
    server.push_all([Step::PromptTooLong, Step::PromptTooLong]);

    let resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().starts_with("prompt is too long"));

    let resp = post(&server, "/v1/chat/completions", &openai_request(true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "context_length_exceeded");
}

#[tokio::test]
async fn every_request_is_recorded_with_exact_bytes() {
    let server = MockServer::start().await;
    server.push(Step::text("ok"));
    let body = r#"{"model":"m",  "messages":[],"stream":false}"#;
    let resp = client()
        .post(format!("{}/v1/messages", server.url()))
        .header("X-Api-Key", "secret")
        .header("anthropic-version", "2023-06-01")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = client().post(format!("{}/v2/unknown", server.url())).body("not json").send().await.unwrap();
    assert_eq!(resp.status(), 404);

    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0];
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(&first.body[..], body.as_bytes());
    assert_eq!(first.json["model"], "m");
    assert_eq!(first.header("x-api-key"), Some("secret"));
    assert_eq!(first.headers["anthropic-version"], "2023-06-01");
    assert!(first.received_at <= requests[1].received_at);
    assert_eq!(requests[1].path, "/v2/unknown");
    assert_eq!(requests[1].json, Value::Null);
    assert_eq!(server.last_request().unwrap().path, "/v2/unknown");
}

#[tokio::test]
async fn an_empty_queue_says_so_and_the_default_repeats() {
    let server = MockServer::start().await;
    let resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["message"], NO_STEP_LEFT);

    let resp = post(&server, "/chat/completions", &openai_request(true)).await;
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["message"], NO_STEP_LEFT);

    server.set_default(Some(Step::text("again")));
    server.push(Step::text("first"));
    assert_eq!(server.remaining(), 1);
    for expected in ["first", "again", "again"] {
        let body: Value = post(&server, "/v1/messages", &anthropic_request(false)).await.json().await.unwrap();
        assert_eq!(body["content"][0]["text"], expected);
    }
    assert_eq!(server.remaining(), 0);
}

#[tokio::test]
async fn latency_and_delay_hold_the_first_byte() {
    let server = MockServer::start().await;
    server.set_latency(Duration::from_millis(100));
    server.push(Step::delay(Duration::from_millis(100), Step::text("late")));
    let started = Instant::now();
    let resp = post(&server, "/v1/messages", &anthropic_request(true)).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn fixed_tool_ids_are_kept() {
    let server = MockServer::start().await;
    server.push(Step::Reply(Turn::tools(vec![
        ToolCall::new("Read", json!({})).with_id("toolu_fixed"),
        ToolCall::new("Read", json!({})),
    ])));
    let body: Value = post(&server, "/v1/messages", &anthropic_request(false)).await.json().await.unwrap();
    assert_eq!(body["content"][0]["id"], "toolu_fixed");
    assert_eq!(body["content"][1]["id"], "toolu_mock_1");
}

#[tokio::test]
async fn by_turn_answers_each_conversation_by_its_turn_number() {
    let server = MockServer::start().await;
    server.set_by_turn(vec![Step::tool("LS", json!({"path": "."})), Step::text("done")]);
    let tools = json!([{"name": "LS", "description": "list", "input_schema": {"type": "object"}}]);
    let first = json!({"model": "m", "max_tokens": 10, "tools": tools,
        "messages": [{"role": "user", "content": "hi"}]});
    let second = json!({"model": "m", "max_tokens": 10, "tools": tools, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "LS", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]}]});
    let no_tools = anthropic_request(false);
    // Two conversations at different turns, in any order, and a request without tools.
    for (body, want) in [(&second, "done"), (&first, "tool_use"), (&no_tools, "done"), (&first, "tool_use")] {
        let reply: Value = post(&server, "/v1/messages", body).await.json().await.unwrap();
        assert!(reply.to_string().contains(want), "{reply}");
    }
    assert_eq!(server.requests().len(), 4);
}
