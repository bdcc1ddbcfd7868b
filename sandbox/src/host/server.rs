//! The tool host side of the protocol: [`serve`] reads calls, runs each through a
//! [`Handler`] in its own task, and writes one answer per call.
//!
//! Guarantees:
//! - `ready` is the first frame written;
//! - every call runs concurrently with its own `CancellationToken`, fired by a `cancel`
//!   frame for its id or by shutdown;
//! - every call that finishes is answered exactly once, with `result` or `error` (a
//!   panicking handler and a result over the frame limit become `error`s);
//! - answers go through one writer task, so frames never interleave;
//! - a malformed frame is logged (tracing) and, when it carries a numeric `id`, answered
//!   with an `error`; it never stops the server;
//! - on `shutdown` or end of input, every running call is cancelled and given
//!   [`ServeOptions::shutdown_grace`] to finish; calls still running then are abandoned
//!   unanswered, the output is flushed and `serve` returns.

use std::collections::HashMap;
use std::io;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::frame::{self, FrameError, FrameReader, FromHost, MAX_FRAME_BYTES, ToHost};

/// The work a tool host does. Payloads are opaque to this crate.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one call. `cancel` fires when the coordinator cancels the call or the host
    /// shuts down; return promptly then (an `Err` saying so is the usual answer).
    async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String>;
}

/// Tunables of [`serve_with`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The largest frame read or written, in bytes.
    pub max_frame_bytes: usize,
    /// How long running calls get to finish after shutdown or end of input.
    pub shutdown_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self { max_frame_bytes: MAX_FRAME_BYTES, shutdown_grace: Duration::from_secs(2) }
    }
}

/// Serves `handler` over `input`/`output` with the default [`ServeOptions`].
pub async fn serve(
    handler: Arc<dyn Handler>,
    input: impl AsyncRead + Unpin + Send,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> io::Result<()> {
    serve_with(ServeOptions::default(), handler, input, output).await
}

/// Serves `handler` over this process's stdin and stdout: the entry point of a tool host.
///
/// When stdin is a pipe it is read without a blocking thread, so a tokio runtime can shut
/// down even if the coordinator keeps the pipe open; otherwise tokio's stdin is used and
/// the caller should end the process with `std::process::exit` once this returns. When
/// stdout is a pipe it is written the same way, from the runtime's own thread (tokio's
/// stdout hands every write to a blocking thread, a thread switch per answer);
/// otherwise tokio's stdout is used. Either way, commands the host starts must not
/// inherit its stdin or stdout (give them `Stdio::null()` or their own pipes): those
/// carry the protocol, and both are switched to non-blocking mode.
///
/// While it serves, it reaps the exited processes it adopted as a child subreaper
/// ([`crate::reaper::reap_adopted`]) on every `SIGCHLD`, so a fork-and-exit chain in a
/// command leaves no zombies behind.
pub async fn serve_stdio(options: ServeOptions, handler: Arc<dyn Handler>) -> io::Result<()> {
    let reaper = tokio::spawn(reap_on_sigchld());
    let served = serve_with(options, handler, stdin_reader(), stdout_writer()).await;
    reaper.abort();
    served
}

async fn reap_on_sigchld() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(stream) => stream,
        Err(e) => {
            tracing::warn!("tool host: cannot watch SIGCHLD ({e}); adopted zombies are reaped only between commands");
            return;
        }
    };
    while sigchld.recv().await.is_some() {
        crate::reaper::reap_adopted();
    }
}

fn stdout_writer() -> Box<dyn AsyncWrite + Unpin + Send> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let pipe = std::io::stdout()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(tokio::net::unix::pipe::Sender::from_file);
        if let Ok(pipe) = pipe {
            return Box::new(pipe);
        }
    }
    Box::new(tokio::io::stdout())
}

fn stdin_reader() -> Box<dyn AsyncRead + Unpin + Send> {
    #[cfg(unix)]
    {
        use std::os::fd::AsFd;
        let pipe = std::io::stdin()
            .as_fd()
            .try_clone_to_owned()
            .map(std::fs::File::from)
            .and_then(tokio::net::unix::pipe::Receiver::from_file);
        if let Ok(pipe) = pipe {
            return Box::new(pipe);
        }
    }
    Box::new(tokio::io::stdin())
}

/// Serves `handler` over `input`/`output` until `shutdown` or end of input.
///
/// Returns an error only when reading `input` or writing `output` fails.
pub async fn serve_with(
    options: ServeOptions,
    handler: Arc<dyn Handler>,
    input: impl AsyncRead + Unpin + Send,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> io::Result<()> {
    let limit = options.max_frame_bytes;
    let (tx, rx) = mpsc::unbounded_channel();
    let writer_failed = CancellationToken::new();
    let writer = tokio::spawn(write_frames(output, rx, writer_failed.clone()));
    send(&tx, FromHost::Ready { pid: std::process::id() }, limit);

    let mut state = State { handler, tx, limit, running: HashMap::new(), calls: JoinSet::new() };
    let mut reader = FrameReader::new(input, limit);
    let mut read_error = None;
    loop {
        tokio::select! {
            biased;
            () = writer_failed.cancelled() => break,
            Some(done) = state.calls.join_next() => {
                if let Ok(id) = done {
                    state.running.remove(&id);
                }
            }
            next = reader.next() => match next {
                Ok(Some(line)) => {
                    if state.on_frame(&line) == Flow::Stop {
                        tracing::debug!("tool host: shutdown requested");
                        break;
                    }
                }
                Ok(None) => {
                    tracing::debug!("tool host: input closed");
                    break;
                }
                Err(FrameError::Io(e)) => {
                    read_error = Some(e);
                    break;
                }
                Err(e @ FrameError::Truncated(_)) => {
                    tracing::warn!("tool host: {e}");
                    break;
                }
                Err(e) => tracing::warn!("tool host: ignoring a frame: {e}"),
            }
        }
    }

    state.stop(options.shutdown_grace).await;
    let write_result = match tokio::time::timeout(options.shutdown_grace, writer).await {
        Ok(Ok(result)) => result,
        Ok(Err(join)) => Err(io::Error::other(format!("the tool host's writer task failed: {join}"))),
        Err(_) => {
            tracing::warn!("tool host: answers still unwritten after the grace period; dropping them");
            Ok(())
        }
    };
    match read_error {
        Some(e) => Err(e),
        None => write_result,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

struct State {
    handler: Arc<dyn Handler>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
    limit: usize,
    running: HashMap<u64, CancellationToken>,
    calls: JoinSet<u64>,
}

impl State {
    fn on_frame(&mut self, line: &[u8]) -> Flow {
        let value: Value = match serde_json::from_slice(line) {
            Ok(value) => value,
            Err(e) => {
                tracing::warn!("tool host: ignoring a frame that is not JSON ({e}): {}", frame::excerpt(line));
                return Flow::Continue;
            }
        };
        let id = value.get("id").and_then(Value::as_u64);
        match serde_json::from_value::<ToHost>(value) {
            Ok(ToHost::Call { id, payload }) => self.start(id, payload),
            Ok(ToHost::Cancel { id }) => match self.running.get(&id) {
                Some(token) => token.cancel(),
                None => tracing::debug!("tool host: cancel for call {id}, which is not running"),
            },
            Ok(ToHost::Shutdown) => return Flow::Stop,
            Err(e) => {
                tracing::warn!("tool host: malformed frame ({e}): {}", frame::excerpt(line));
                if let Some(id) = id {
                    let message = format!("the tool host could not read this call: {e}");
                    send(&self.tx, FromHost::Error { id, message }, self.limit);
                }
            }
        }
        Flow::Continue
    }

    fn start(&mut self, id: u64, payload: Value) {
        if self.running.contains_key(&id) {
            let message = format!("call id {id} is already running; use a new id for every call");
            send(&self.tx, FromHost::Error { id, message }, self.limit);
            return;
        }
        let cancel = CancellationToken::new();
        self.running.insert(id, cancel.clone());
        let handler = Arc::clone(&self.handler);
        let tx = self.tx.clone();
        let limit = self.limit;
        self.calls.spawn(async move {
            let outcome = AssertUnwindSafe(handler.handle(payload, cancel)).catch_unwind().await;
            let answer = match outcome {
                Ok(Ok(payload)) => FromHost::Result { id, payload },
                Ok(Err(message)) => FromHost::Error { id, message },
                Err(panic) => {
                    let message = format!("the tool host's handler panicked: {}", panic_message(panic.as_ref()));
                    tracing::error!("tool host: call {id}: {message}");
                    FromHost::Error { id, message }
                }
            };
            send(&tx, answer, limit);
            id
        });
    }

    /// Cancels every running call and waits up to `grace` for them to answer.
    async fn stop(mut self, grace: Duration) {
        for token in self.running.values() {
            token.cancel();
        }
        let drained = tokio::time::timeout(grace, async { while self.calls.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            tracing::warn!(
                "tool host: {} call(s) still running {} ms after shutdown; abandoning them",
                self.calls.len(),
                grace.as_millis()
            );
            self.calls.abort_all();
        }
    }
}

/// Encodes `message` and queues it for the writer. An answer over the frame limit is
/// replaced by an error saying so; the receiver is gone only if the writer failed,
/// which `serve_with` already handles.
fn send(tx: &mpsc::UnboundedSender<Vec<u8>>, message: FromHost, limit: usize) {
    let bytes = match frame::encode(&message, limit) {
        Ok(bytes) => bytes,
        Err(e) => {
            let (FromHost::Result { id, .. } | FromHost::Error { id, .. }) = message else {
                tracing::error!("tool host: could not encode {message:?}: {e}");
                return;
            };
            let message = format!("the tool host could not send this answer: {e}; return less data per call");
            match frame::encode(&FromHost::Error { id, message }, limit) {
                Ok(bytes) => bytes,
                Err(e) => {
                    tracing::error!("tool host: could not encode an error for call {id}: {e}");
                    return;
                }
            }
        }
    };
    let _ = tx.send(bytes);
}

async fn write_frames(
    mut output: impl AsyncWrite + Unpin,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    failed: CancellationToken,
) -> io::Result<()> {
    while let Some(frame) = rx.recv().await {
        let written = async {
            output.write_all(&frame).await?;
            while let Ok(frame) = rx.try_recv() {
                output.write_all(&frame).await?;
            }
            output.flush().await
        }
        .await;
        if let Err(e) = written {
            tracing::warn!("tool host: writing to the coordinator failed: {e}");
            failed.cancel();
            return Err(e);
        }
    }
    output.flush().await
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(text) = panic.downcast_ref::<&str>() {
        text
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text
    } else {
        "(no message)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;
    use tokio::io::{AsyncBufReadExt, BufReader, DuplexStream, Lines};

    /// echo / sleep_ms (honours cancel) / stuck_ms (ignores cancel) / panic / big.
    #[derive(Default)]
    struct TestHandler {
        cancels: AtomicUsize,
    }

    #[async_trait]
    impl Handler for TestHandler {
        async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
            if let Some(v) = payload.get("echo") {
                return Ok(v.clone());
            }
            if let Some(ms) = payload.get("sleep_ms").and_then(Value::as_u64) {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => return Ok(json!("slept")),
                    () = cancel.cancelled() => {
                        self.cancels.fetch_add(1, Ordering::SeqCst);
                        return Err("cancelled".into());
                    }
                }
            }
            if let Some(ms) = payload.get("stuck_ms").and_then(Value::as_u64) {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                return Ok(json!("unstuck"));
            }
            if payload.get("panic").is_some() {
                panic!("boom");
            }
            if let Some(n) = payload.get("big").and_then(Value::as_u64) {
                return Ok(json!("x".repeat(n as usize)));
            }
            if payload.get("cancels").is_some() {
                return Ok(json!(self.cancels.load(Ordering::SeqCst)));
            }
            Err("unknown op".into())
        }
    }

    struct Peer {
        to_host: DuplexStream,
        from_host: Lines<BufReader<DuplexStream>>,
        server: tokio::task::JoinHandle<io::Result<()>>,
    }

    impl Peer {
        fn start(options: ServeOptions, handler: Arc<dyn Handler>) -> Self {
            let (to_host, host_in) = tokio::io::duplex(1 << 16);
            let (host_out, from_host) = tokio::io::duplex(1 << 16);
            let server = tokio::spawn(serve_with(options, handler, host_in, host_out));
            Self { to_host, from_host: BufReader::new(from_host).lines(), server }
        }

        async fn send(&mut self, line: &str) {
            self.to_host.write_all(line.as_bytes()).await.unwrap();
            self.to_host.write_all(b"\n").await.unwrap();
        }

        async fn recv(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(5), self.from_host.next_line())
                .await
                .expect("an answer within 5 s")
                .unwrap()
                .expect("a line, not end of output");
            serde_json::from_str(&line).unwrap()
        }
    }

    fn started() -> (Peer, Arc<TestHandler>) {
        let handler = Arc::new(TestHandler::default());
        (Peer::start(ServeOptions::default(), handler.clone()), handler)
    }

    #[tokio::test]
    async fn ready_comes_first_then_answers() {
        let (mut peer, _) = started();
        assert_eq!(peer.recv().await, json!({"op": "ready", "pid": std::process::id()}));
        peer.send(r#"{"op":"call","id":1,"payload":{"echo":{"a":[1,2]}}}"#).await;
        assert_eq!(peer.recv().await, json!({"op": "result", "id": 1, "payload": {"a": [1, 2]}}));
        peer.send(r#"{"op":"call","id":2,"payload":{"nope":1}}"#).await;
        assert_eq!(peer.recv().await, json!({"op": "error", "id": 2, "message": "unknown op"}));
        peer.send(r#"{"op":"shutdown"}"#).await;
        peer.server.await.unwrap().unwrap();
        assert!(peer.from_host.next_line().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn malformed_frames_do_not_stop_the_server() {
        let (mut peer, _) = started();
        peer.recv().await;
        peer.send("this is not json").await;
        peer.send("[1,2,3]").await;
        peer.send(r#"{"op":"call","id":"seven","payload":1}"#).await;
        peer.send(r#"{"op":"call","id":3}"#).await;
        let answer = peer.recv().await;
        assert_eq!(answer["op"], "error");
        assert_eq!(answer["id"], 3);
        assert!(answer["message"].as_str().unwrap().contains("payload"), "{answer}");
        peer.send(r#"{"op":"launch","id":4}"#).await;
        let answer = peer.recv().await;
        assert_eq!((answer["op"].as_str(), answer["id"].as_u64()), (Some("error"), Some(4)));
        peer.send("\u{0}\u{1}\u{ff}").await;
        peer.send(r#"{"op":"cancel","id":999}"#).await;
        peer.send(r#"{"op":"call","id":5,"payload":{"echo":"still here"}}"#).await;
        assert_eq!(peer.recv().await, json!({"op": "result", "id": 5, "payload": "still here"}));
        drop(peer.to_host);
        peer.server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn cancel_fires_the_calls_token() {
        let (mut peer, handler) = started();
        peer.recv().await;
        peer.send(r#"{"op":"call","id":1,"payload":{"sleep_ms":60000}}"#).await;
        peer.send(r#"{"op":"call","id":2,"payload":{"sleep_ms":60000}}"#).await;
        peer.send(r#"{"op":"cancel","id":1}"#).await;
        assert_eq!(peer.recv().await, json!({"op": "error", "id": 1, "message": "cancelled"}));
        assert_eq!(handler.cancels.load(Ordering::SeqCst), 1);
        // End of input cancels the rest and answers them before returning.
        peer.to_host.shutdown().await.unwrap();
        assert_eq!(peer.recv().await, json!({"op": "error", "id": 2, "message": "cancelled"}));
        peer.server.await.unwrap().unwrap();
        assert_eq!(handler.cancels.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn calls_run_concurrently() {
        let (mut peer, _) = started();
        peer.recv().await;
        peer.send(r#"{"op":"call","id":1,"payload":{"sleep_ms":300}}"#).await;
        peer.send(r#"{"op":"call","id":2,"payload":{"echo":2}}"#).await;
        assert_eq!(peer.recv().await["id"], 2);
        assert_eq!(peer.recv().await, json!({"op": "result", "id": 1, "payload": "slept"}));
    }

    #[tokio::test]
    async fn duplicate_running_id_is_refused() {
        let (mut peer, _) = started();
        peer.recv().await;
        peer.send(r#"{"op":"call","id":1,"payload":{"sleep_ms":300}}"#).await;
        peer.send(r#"{"op":"call","id":1,"payload":{"echo":1}}"#).await;
        let answer = peer.recv().await;
        assert_eq!(answer["op"], "error");
        assert!(answer["message"].as_str().unwrap().contains("already running"));
        assert_eq!(peer.recv().await["payload"], "slept");
    }

    #[tokio::test]
    async fn a_panicking_handler_becomes_an_error() {
        let (mut peer, _) = started();
        peer.recv().await;
        peer.send(r#"{"op":"call","id":1,"payload":{"panic":true}}"#).await;
        let answer = peer.recv().await;
        assert_eq!(answer["op"], "error");
        assert!(answer["message"].as_str().unwrap().contains("panicked: boom"), "{answer}");
        peer.send(r#"{"op":"call","id":2,"payload":{"echo":"ok"}}"#).await;
        assert_eq!(peer.recv().await["payload"], "ok");
    }

    #[tokio::test]
    async fn oversize_frames_are_errors_both_ways() {
        let options = ServeOptions { max_frame_bytes: 1000, ..ServeOptions::default() };
        let mut peer = Peer::start(options, Arc::new(TestHandler::default()));
        peer.recv().await;
        // An answer over the limit becomes an error for that call.
        peer.send(r#"{"op":"call","id":1,"payload":{"big":5000}}"#).await;
        let answer = peer.recv().await;
        assert_eq!((answer["op"].as_str(), answer["id"].as_u64()), (Some("error"), Some(1)));
        assert!(answer["message"].as_str().unwrap().contains("over the limit of 1000 bytes"), "{answer}");
        // A request over the limit is skipped without buffering it; the next one works.
        let huge = format!(r#"{{"op":"call","id":2,"payload":{{"echo":"{}"}}}}"#, "y".repeat(100_000));
        peer.send(&huge).await;
        peer.send(r#"{"op":"call","id":3,"payload":{"echo":"after"}}"#).await;
        assert_eq!(peer.recv().await, json!({"op": "result", "id": 3, "payload": "after"}));
    }

    #[tokio::test]
    async fn shutdown_waits_for_calls_only_up_to_the_grace_period() {
        let options = ServeOptions { shutdown_grace: Duration::from_millis(200), ..ServeOptions::default() };
        let mut peer = Peer::start(options, Arc::new(TestHandler::default()));
        peer.recv().await;
        peer.send(r#"{"op":"call","id":1,"payload":{"stuck_ms":60000}}"#).await;
        peer.send(r#"{"op":"call","id":2,"payload":{"stuck_ms":50}}"#).await;
        peer.send(r#"{"op":"shutdown"}"#).await;
        let started = Instant::now();
        (&mut peer.server).await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
        // The quick call was answered; the stuck one was abandoned.
        assert_eq!(peer.recv().await, json!({"op": "result", "id": 2, "payload": "unstuck"}));
        assert!(peer.from_host.next_line().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_truncated_last_frame_ends_the_server_cleanly() {
        let (mut peer, _) = started();
        peer.recv().await;
        peer.to_host.write_all(br#"{"op":"call","id":1,"payl"#).await.unwrap();
        drop(peer.to_host);
        peer.server.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_closed_output_stops_the_server() {
        let (to_host, host_in) = tokio::io::duplex(1 << 16);
        let (host_out, from_host) = tokio::io::duplex(64);
        drop(from_host);
        let result = serve(Arc::new(TestHandler::default()), host_in, host_out).await;
        assert!(result.is_err());
        drop(to_host);
    }
}
