//! The in-process mock model server: an axum server on 127.0.0.1 that answers the
//! Anthropic Messages API (`POST /v1/messages`) and OpenAI chat completions
//! (`POST /v1/chat/completions`, `POST /chat/completions`) from a FIFO queue of scripted
//! [`Step`]s, with fault injection and capture of every request.
//!
//! ```no_run
//! # async fn demo() {
//! use orch_testkit::mock::{MockServer, Step, Turn};
//! let server = MockServer::start().await;
//! server.push(Step::Reply(Turn::tool("Read", serde_json::json!({"file_path": "a.rs"}))));
//! server.push(Step::retry_after(529, "0"));
//! server.push(Step::text("done"));
//! // point the client at server.url(), run it, then:
//! for req in server.requests() {
//!     orch_testkit::mock::assert_tool_pairing(&req);
//! }
//! # }
//! ```

mod anthropic;
mod openai;
mod pairing;
mod recorded;
mod respond;
mod script;
mod usage;
mod wire;

#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use tokio_util::sync::CancellationToken;

pub use pairing::{assert_tool_pairing, tool_pairing_problems};
pub use recorded::{RecordedRequest, anthropic_messages, openai_messages};
pub use script::{MockUsage, Step, ToolCall, Turn, parse_steps};
pub use usage::{request_tokens as simulated_request_tokens, tokens as simulated_tokens};

/// The message of the HTTP 400 sent when the queue is empty and there is no default.
pub const NO_STEP_LEFT: &str = "mock model server: no scripted step left";

/// A running mock model server. It stops when dropped (stalled streams are cut).
pub struct MockServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
}

/// State shared between the handle and the request handlers.
pub(crate) struct Shared {
    script: Mutex<Script>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Simulated usage, when on.
    usage: Mutex<Option<usage::UsageSim>>,
    /// Numbers response ids.
    responses: AtomicU64,
    /// Numbers the tool ids the server assigns.
    tool_ids: AtomicU64,
    shutdown: CancellationToken,
}

struct Script {
    queue: VecDeque<Step>,
    default: Option<Step>,
    latency: Duration,
    /// When not empty: the answer to a request is the step at the index of the number
    /// of assistant messages it holds (the last step once past the end), whatever the
    /// queue says. Serves many concurrent conversations the same turns.
    by_turn: Vec<Step>,
    /// When set: the answer to every request that offers no tools (a summary
    /// request), taken neither from the queue nor from `by_turn`.
    toolless: Option<Step>,
}

impl MockServer {
    /// Binds 127.0.0.1 on a free port and serves in a tokio task.
    ///
    /// # Panics
    /// When the port cannot be bound (test-only code).
    pub async fn start() -> MockServer {
        match MockServer::start_on(0).await {
            Ok(server) => server,
            Err(err) => panic!("mock model server: cannot bind 127.0.0.1: {err}"),
        }
    }

    /// Binds 127.0.0.1 on `port` (0 for a free one) and serves in a tokio task.
    pub async fn start_on(port: u16) -> std::io::Result<MockServer> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            script: Mutex::new(Script {
                queue: VecDeque::new(),
                default: None,
                latency: Duration::ZERO,
                by_turn: Vec::new(),
                toolless: None,
            }),
            requests: Mutex::new(Vec::new()),
            usage: Mutex::new(None),
            responses: AtomicU64::new(0),
            tool_ids: AtomicU64::new(0),
            shutdown: CancellationToken::new(),
        });
        let app = Router::new()
            .route("/v1/messages", post(respond::anthropic))
            .route("/v1/chat/completions", post(respond::openai))
            .route("/chat/completions", post(respond::openai))
            .fallback(respond::not_found)
            .layer(DefaultBodyLimit::disable())
            .with_state(Arc::clone(&shared));
        let stop = shared.shutdown.clone().cancelled_owned();
        tokio::spawn(async move {
            // Errors only end the test server; the client sees a refused connection.
            let _ = axum::serve(listener, app).with_graceful_shutdown(stop).await;
        });
        Ok(MockServer { addr, shared })
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues a step (one queue for both wire formats).
    pub fn push(&self, step: Step) {
        self.shared.script().queue.push_back(step);
    }

    /// Queues several steps, in order.
    pub fn push_all(&self, steps: impl IntoIterator<Item = Step>) {
        self.shared.script().queue.extend(steps);
    }

    /// The step served (cloned) whenever the queue is empty; `None` answers HTTP 400
    /// [`NO_STEP_LEFT`].
    pub fn set_default(&self, step: Option<Step>) {
        self.shared.script().default = step;
    }

    /// Answers every conversation with `steps` by turn: its n-th model call (n assistant
    /// messages in the request) gets `steps[n]`, or the last step past the end or when
    /// the request offers no tools. An empty list goes back to the queue.
    pub fn set_by_turn(&self, steps: Vec<Step>) {
        self.shared.script().by_turn = steps;
    }

    /// Simulates usage for Anthropic requests: replies that script no usage report
    /// the tokens of the request (about four bytes of JSON per token), split into
    /// cache reads, cache writes and fresh input by a simulated prompt cache keyed on
    /// the exact bytes before each `cache_control` breakpoint. With a `window`, a
    /// request larger than it is refused as too long (in place of its step).
    pub fn simulate_usage(&self, window: Option<u64>) {
        *self.shared.usage.lock().unwrap_or_else(PoisonError::into_inner) = Some(usage::UsageSim::new(window));
    }

    /// The step that answers every request offering no tools (such as a compaction's
    /// summary request), leaving the queue to the main conversation. `None` turns it off.
    pub fn set_toolless(&self, step: Option<Step>) {
        self.shared.script().toolless = step;
    }

    /// A delay added before every response's first byte.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.script().latency = latency;
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests().clone()
    }

    /// The last request received.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.shared.requests().last().cloned()
    }

    /// Steps still queued (the default is not counted).
    pub fn remaining(&self) -> usize {
        self.shared.script().queue.len()
    }

    /// [`assert_tool_pairing`] on every request received so far.
    #[track_caller]
    pub fn assert_tool_pairing(&self) {
        for req in self.requests() {
            assert_tool_pairing(&req);
        }
    }
}

impl Drop for MockServer {
    fn drop(&mut self) {
        self.shared.shutdown.cancel();
    }
}

impl Shared {
    fn script(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn requests(&self) -> MutexGuard<'_, Vec<RecordedRequest>> {
        self.requests.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn record(&self, request: RecordedRequest) {
        self.requests().push(request);
    }

    /// Records a request and takes the step that answers it, with the latency to add.
    pub(crate) fn take_step(&self, request: RecordedRequest) -> (Option<Step>, Duration) {
        let (step, latency) = self.take_scripted_step(&request);
        let mut sim = self.usage.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sim) = sim.as_mut().filter(|_| !request.is_openai()) else { return (step, latency) };
        let measured = sim.measure(&request.json);
        if sim.window.is_some_and(|w| measured.prompt_tokens > w) {
            return (Some(Step::PromptTooLong), latency);
        }
        let step = match step {
            Some(Step::Reply(mut turn)) => {
                sim.commit(&request.json);
                if turn.usage.is_none() {
                    turn.usage = Some(usage::usage_for(measured, &turn));
                }
                Some(Step::Reply(turn))
            }
            other => other,
        };
        (step, latency)
    }

    fn take_scripted_step(&self, request: &RecordedRequest) -> (Option<Step>, Duration) {
        let request = request.clone();
        // A request that offers no tools can only be answered in text: the last step.
        let turn = if request.tools().is_empty() {
            usize::MAX
        } else {
            request.messages().iter().filter(|m| m["role"] == "assistant").count()
        };
        self.record(request);
        let mut script = self.script();
        if turn == usize::MAX
            && let Some(step) = script.toolless.clone()
        {
            return (Some(step), script.latency);
        }
        if let Some(step) = script.by_turn.get(turn).or(script.by_turn.last()).cloned() {
            return (Some(step), script.latency);
        }
        let step = script.queue.pop_front().or_else(|| script.default.clone());
        (step, script.latency)
    }

    pub(crate) fn next_response_number(&self) -> u64 {
        self.responses.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn next_tool_number(&self) -> u64 {
        self.tool_ids.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}
