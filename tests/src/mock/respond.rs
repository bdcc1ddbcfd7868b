//! The request handlers: record the request, take the next step and turn it into an
//! HTTP response (whole JSON, an SSE stream, or one of the scripted faults).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use serde_json::{Value, json};

use super::recorded::RecordedRequest;
use super::script::{Step, Turn};
use super::wire::{Ctx, SseEvent, Wire};
use super::{NO_STEP_LEFT, Shared};

/// How long a cut stream waits before dropping the connection, so what was sent before
/// reaches the client first.
const CUT_GRACE: Duration = Duration::from_millis(20);

pub(crate) async fn anthropic(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(Wire::Anthropic, shared, &uri, &headers, body).await
}

pub(crate) async fn openai(State(shared): State<Arc<Shared>>, uri: Uri, headers: HeaderMap, body: Bytes) -> Response {
    handle(Wire::OpenAi, shared, &uri, &headers, body).await
}

/// Any other route: recorded, then 404.
pub(crate) async fn not_found(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    shared.record(RecordedRequest::new(&path, &headers, body));
    let message = format!("mock model server: no route for {path}");
    json_response(StatusCode::NOT_FOUND, &json!({"error": {"message": message}}))
}

async fn handle(wire: Wire, shared: Arc<Shared>, uri: &Uri, headers: &HeaderMap, body: Bytes) -> Response {
    let request = RecordedRequest::new(uri.path(), headers, body);
    let reply = Reply {
        wire,
        stream: request.is_stream(),
        ctx: Ctx {
            id: wire.response_id(shared.next_response_number()),
            model: request.model().unwrap_or("mock-model").to_owned(),
            include_usage: request.json.pointer("/stream_options/include_usage") == Some(&Value::Bool(true)),
        },
        shared: Arc::clone(&shared),
    };
    let (step, latency) = shared.take_step(request);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    match step {
        Some(step) => reply.respond(step).await,
        None => json_response(StatusCode::BAD_REQUEST, &wire.error_for_status(400, NO_STEP_LEFT)),
    }
}

/// How a streamed body ends.
enum Ending {
    /// Normally.
    Close,
    /// By dropping the connection.
    Cut,
    /// It does not: it stays open until the server is dropped.
    Hang,
}

struct Reply {
    wire: Wire,
    stream: bool,
    ctx: Ctx,
    shared: Arc<Shared>,
}

impl Reply {
    async fn respond(self, step: Step) -> Response {
        match step {
            Step::Reply(turn) => {
                let turn = self.assign_ids(turn);
                if self.stream {
                    self.sse(self.wire.events(&turn, &self.ctx), Ending::Close)
                } else {
                    json_response(StatusCode::OK, &self.wire.message(&turn, &self.ctx))
                }
            }
            Step::Status { code, retry_after, body } => self.status(code, retry_after.as_deref(), body),
            Step::CutAfter { turn, events } => {
                let turn = self.assign_ids(turn);
                if self.stream {
                    let mut all = self.wire.events(&turn, &self.ctx);
                    all.truncate(events.min(all.len().saturating_sub(1)));
                    self.sse(all, Ending::Cut)
                } else {
                    let whole = Bytes::from(self.wire.message(&turn, &self.ctx).to_string());
                    let half = whole.slice(..whole.len() / 2);
                    self.streamed(StatusCode::OK, "application/json", vec![half], Ending::Cut)
                }
            }
            Step::Malformed { turn } => {
                let turn = self.assign_ids(turn);
                if self.stream {
                    self.sse(self.wire.malformed_events(&turn, &self.ctx), Ending::Close)
                } else {
                    let body = vec![Bytes::from_static(b"{not json")];
                    self.streamed(StatusCode::OK, "application/json", body, Ending::Close)
                }
            }
            Step::StreamError { error_type, message } => {
                if self.stream {
                    let events = self.wire.stream_error_events(&self.ctx, &error_type, &message);
                    self.sse(events, Ending::Close)
                } else {
                    let (status, body) = self.wire.error_for_type(&error_type, &message);
                    json_response(status_code(status), &body)
                }
            }
            Step::PromptTooLong => json_response(StatusCode::BAD_REQUEST, &self.wire.prompt_too_long()),
            Step::Delay(delay, inner) => {
                tokio::time::sleep(delay).await;
                Box::pin(self.respond(*inner)).await
            }
            Step::StallAfter { turn, events } => {
                let turn = self.assign_ids(turn);
                if self.stream {
                    let mut all = self.wire.events(&turn, &self.ctx);
                    all.truncate(events.min(all.len().saturating_sub(1)));
                    self.sse(all, Ending::Hang)
                } else {
                    self.streamed(StatusCode::OK, "application/json", Vec::new(), Ending::Hang)
                }
            }
            Step::NoReply => {
                self.shared.shutdown().cancelled().await;
                json_response(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &serde_json::json!({"error": "mock model server stopped"}),
                )
            }
            Step::Stall => {
                if self.stream {
                    let mut opening = self.wire.events(&Turn::default(), &self.ctx);
                    opening.truncate(1);
                    self.sse(opening, Ending::Hang)
                } else {
                    self.streamed(StatusCode::OK, "application/json", Vec::new(), Ending::Hang)
                }
            }
        }
    }

    /// Gives every tool call without an id a fresh one.
    fn assign_ids(&self, mut turn: Turn) -> Turn {
        for call in &mut turn.tool_calls {
            if call.id.is_none() {
                let n = self.shared.next_tool_number();
                call.id = Some(format!("{}{n}", self.wire.tool_id_prefix()));
            }
        }
        turn
    }

    fn status(&self, code: u16, retry_after: Option<&str>, body: Option<String>) -> Response {
        let body = body.unwrap_or_else(|| {
            let message = format!("mock model server: scripted HTTP {code}");
            self.wire.error_for_status(code, &message).to_string()
        });
        let mut response =
            (status_code(code), [(CONTENT_TYPE, HeaderValue::from_static("application/json"))], body).into_response();
        if let Some(value) = retry_after.and_then(|v| HeaderValue::from_str(v).ok()) {
            response.headers_mut().insert(RETRY_AFTER, value);
        }
        response
    }

    fn sse(&self, events: Vec<SseEvent>, ending: Ending) -> Response {
        let chunks = events.iter().map(SseEvent::to_bytes).collect();
        let mut response = self.streamed(StatusCode::OK, "text/event-stream", chunks, ending);
        response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        response
    }

    /// A response whose body is sent chunk by chunk, then ends as `ending` says.
    fn streamed(&self, status: StatusCode, content_type: &'static str, chunks: Vec<Bytes>, ending: Ending) -> Response {
        let head = stream::iter(chunks.into_iter().map(Ok::<Bytes, io::Error>));
        let tail: BoxStream<'static, io::Result<Bytes>> = match ending {
            Ending::Close => stream::empty().boxed(),
            Ending::Cut => stream::once(async {
                tokio::time::sleep(CUT_GRACE).await;
                Err(io::Error::other("mock model server: connection cut"))
            })
            .boxed(),
            Ending::Hang => {
                let shutdown = self.shared.shutdown().clone();
                stream::once(async move {
                    shutdown.cancelled().await;
                    Err(io::Error::other("mock model server: stopped"))
                })
                .boxed()
            }
        };
        let body = Body::from_stream(head.chain(tail));
        (status, [(CONTENT_TYPE, HeaderValue::from_static(content_type))], body).into_response()
    }
}

fn status_code(code: u16) -> StatusCode {
    StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (status, [(CONTENT_TYPE, HeaderValue::from_static("application/json"))], body.to_string()).into_response()
}
