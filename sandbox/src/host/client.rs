//! The coordinator side of the protocol: [`HostClient`] starts a tool host process, waits
//! for its `ready`, multiplexes concurrent calls over its stdin/stdout, and turns every
//! way the process can die into [`HostError::Crashed`] for pending and later calls.
//!
//! The process is whatever `tokio::process::Command` the caller builds (a
//! `std::process::Command` converts with `.into()`); confinement is the command's
//! business, not this module's. A host that is not our child (the container backend's,
//! reached through the Docker API) is driven the same way through
//! [`HostClient::from_streams`] and a [`HostStreams`]: its input, output and stderr as
//! streams, a future for its exit and a function that kills it. `spawn` overrides the
//! command's stdio:
//! - stdin and stdout are pipes carrying the protocol;
//! - stderr is a pipe read by a task that logs each line through `tracing` (INFO, target
//!   `orch_sandbox::host::stderr`, with the host's pid), and keeps the last few lines so
//!   start and crash errors can quote them.
//!
//! The child is killed (SIGKILL) when the client is dropped, when its output closes while
//! it keeps running, and when it breaks the protocol. Only the tool host process itself
//! is killed: the commands it forks are its own to reap.
//!
//! Tasks: one owns the child (or waits on the remote host's exit future) and publishes
//! its exit, one writes frames to stdin, one reads stdout and completes calls, one
//! forwards stderr.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::frame::{self, FrameError, FrameReader, FromHost, MAX_FRAME_BYTES, ToHost};

/// After the host exits, how long to keep reading answers it wrote before exiting.
const DRAIN: Duration = Duration::from_millis(500);
/// After the host closes its stdout, how long it gets to exit before it is killed.
const EXIT_AFTER_CLOSE: Duration = Duration::from_secs(1);
/// How long a SIGKILLed host may take to be reaped before we stop waiting.
const REAP: Duration = Duration::from_secs(5);
/// How long to wait for the last stderr lines before building an error message.
const STDERR_SETTLE: Duration = Duration::from_millis(300);
/// How many stderr lines errors quote, and how long each may be.
const TAIL_LINES: usize = 5;
const TAIL_LINE_CHARS: usize = 300;

/// Why a tool host could not start or could not run a call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HostError {
    #[error("could not start the tool host `{program}`: {message}; check that it exists and is executable")]
    Spawn { program: String, message: String },
    #[error("the tool host `{program}` did not become ready: {message}")]
    NotReady { program: String, status: Option<ExitStatus>, message: String },
    #[error("{message}; the tool host is gone, so this call and every later one failed")]
    Crashed { status: Option<ExitStatus>, message: String },
    #[error("the call was cancelled")]
    Cancelled,
    #[error("the call failed in the tool host: {0}")]
    Failed(String),
    #[error("the call is {size} bytes, over the frame limit of {limit} bytes; send less data per call")]
    TooLarge { size: usize, limit: usize },
    #[error("could not encode the call: {0}")]
    Encode(String),
}

/// Tunables of [`HostClient::spawn_with`].
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// How long the host has to send `ready` after it is started.
    pub ready_timeout: Duration,
    /// The largest frame sent or accepted, in bytes. The host must use the same limit.
    pub max_frame_bytes: usize,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self { ready_timeout: Duration::from_secs(10), max_frame_bytes: MAX_FRAME_BYTES }
    }
}

/// How a tool host ended, from [`HostClient::shutdown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostExit {
    /// The exit status; `None` if it could not be collected.
    pub status: Option<ExitStatus>,
    /// Whether the host had to be killed.
    pub killed: bool,
}

/// A tool host reached over streams instead of a child's pipes, for
/// [`HostClient::from_streams`].
pub struct HostStreams {
    /// What error messages and logs call the host, e.g. "container orch-3f2a".
    pub name: String,
    /// The host's pid, when it is a process of this machine's pid namespace.
    pub pid: Option<u32>,
    /// The host's input (the protocol, coordinator to host). Shut down and dropped when
    /// the client stops writing, which the host must see as end of input.
    pub input: Box<dyn AsyncWrite + Send + Unpin>,
    /// The host's output (the protocol, host to coordinator).
    pub output: Box<dyn AsyncRead + Send + Unpin>,
    /// The host's stderr, logged line by line and quoted in errors; `None` if the caller
    /// handles it.
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    /// Resolves once the host has exited, with its exit status if known.
    pub exited: BoxFuture<'static, Option<ExitStatus>>,
    /// Kills the host, at most once; `exited` must resolve soon after. Called from a
    /// task, so it may spawn the work it needs.
    pub kill: Box<dyn FnOnce() + Send>,
}

impl fmt::Debug for HostStreams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostStreams").field("name", &self.name).finish_non_exhaustive()
    }
}

/// How the host process is owned: our child, or something we can only wait on and kill.
enum Process {
    Child(Child),
    Remote { exited: BoxFuture<'static, Option<ExitStatus>>, kill: Box<dyn FnOnce() + Send> },
}

/// What [`HostClient::start`] needs, whatever kind of process the host is.
struct Parts {
    program: String,
    pid: Option<u32>,
    input: Box<dyn AsyncWrite + Send + Unpin>,
    output: Box<dyn AsyncRead + Send + Unpin>,
    stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    process: Process,
}

type Output = Box<dyn AsyncRead + Send + Unpin>;

/// A running tool host and the calls in flight to it.
pub struct HostClient {
    shared: Arc<Shared>,
    writer: mpsc::UnboundedSender<Vec<u8>>,
    exit: watch::Receiver<Option<HostExit>>,
    next_id: AtomicU64,
    max_frame_bytes: usize,
    stopper: Stopper,
}

impl fmt::Debug for HostClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostClient")
            .field("program", &self.shared.program)
            .field("pid", &self.shared.pid)
            .field("exit", &*self.exit.borrow())
            .finish_non_exhaustive()
    }
}

impl HostClient {
    /// Starts a tool host with the default [`HostOptions`] and waits for its `ready`.
    pub async fn spawn(command: Command) -> Result<HostClient, HostError> {
        Self::spawn_with(command, HostOptions::default()).await
    }

    /// Starts a tool host from `command` and waits for its `ready`.
    ///
    /// Fails with [`HostError::Spawn`] if the process cannot be started, and with
    /// [`HostError::NotReady`] if it exits, writes anything else, or stays silent for
    /// `options.ready_timeout` first; the child is killed then.
    pub async fn spawn_with(mut command: Command, options: HostOptions) -> Result<HostClient, HostError> {
        let program = command.as_std().get_program().to_string_lossy().into_owned();
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let spawn_error = |message: String| HostError::Spawn { program: program.clone(), message };
        let mut child = command.spawn().map_err(|e| spawn_error(e.to_string()))?;
        let pid = child.id();
        let (Some(stdin), Some(stdout), Some(stderr)) = (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(spawn_error("its stdio pipes were not created".into()));
        };
        let parts = Parts {
            program,
            pid,
            input: Box::new(stdin),
            output: Box::new(stdout),
            stderr: Some(Box::new(stderr)),
            process: Process::Child(child),
        };
        Self::start(parts, options).await
    }

    /// Drives a tool host that is not a child of this process (for example one running
    /// as a container's main process, reached through the Docker API) over `streams`,
    /// with the default [`HostOptions`], and waits for its `ready`.
    ///
    /// Everything else behaves as for [`HostClient::spawn`]: concurrent calls, cancels,
    /// [`HostError::Crashed`] once `streams.exited` resolves or the output ends, and
    /// `streams.kill` called when the client is dropped, breaks the protocol, or does not
    /// stop within the grace of [`HostClient::shutdown`].
    pub async fn from_streams(streams: HostStreams) -> Result<HostClient, HostError> {
        Self::from_streams_with(streams, HostOptions::default()).await
    }

    /// [`HostClient::from_streams`] with explicit [`HostOptions`].
    pub async fn from_streams_with(streams: HostStreams, options: HostOptions) -> Result<HostClient, HostError> {
        let HostStreams { name, pid, input, output, stderr, exited, kill } = streams;
        let parts = Parts { program: name, pid, input, output, stderr, process: Process::Remote { exited, kill } };
        Self::start(parts, options).await
    }

    async fn start(parts: Parts, options: HostOptions) -> Result<HostClient, HostError> {
        let Parts { program, pid, input, output, stderr, process } = parts;
        let tail = Arc::new(StderrTail::default());
        match stderr {
            Some(stderr) => {
                tokio::spawn(forward_stderr(stderr, Arc::clone(&tail), pid, program.clone()));
            }
            None => tail.done.cancel(),
        }
        let kill = CancellationToken::new();
        let (exit_tx, mut exit_rx) = watch::channel(None);
        tokio::spawn(own_process(process, kill.clone(), exit_tx));

        let mut reader = FrameReader::new(output, options.max_frame_bytes);
        if let Err((status, message)) = wait_ready(&mut exit_rx, &kill, &mut reader, options.ready_timeout).await {
            let message = format!("{message}{}", tail.quote().await);
            return Err(HostError::NotReady { program, status, message });
        }
        tracing::debug!(target: "orch_sandbox::host", pid, %program, "tool host ready");

        let shared = Arc::new(Shared {
            program,
            pid,
            stopping: AtomicBool::new(false),
            pending: Mutex::new(Pending::default()),
        });
        let (writer, writer_rx) = mpsc::unbounded_channel();
        tokio::spawn(write_frames(input, writer_rx, kill.clone()));
        tokio::spawn(read_frames(reader, Arc::clone(&shared), exit_rx.clone(), kill.clone(), tail));
        Ok(HostClient {
            stopper: Stopper { kill, shared: Arc::clone(&shared) },
            shared,
            writer,
            exit: exit_rx,
            next_id: AtomicU64::new(1),
            max_frame_bytes: options.max_frame_bytes,
        })
    }

    /// The tool host's process id, or `None` once it has exited.
    pub fn pid(&self) -> Option<u32> {
        if self.exit.borrow().is_some() { None } else { self.shared.pid }
    }

    /// Runs one call in the tool host and returns its answer.
    ///
    /// If `cancel` fires first, a `cancel` frame is sent and [`HostError::Cancelled`] is
    /// returned at once, without waiting for the host. Dropping the returned future
    /// cancels the call the same way. Calls on one client run concurrently.
    pub async fn call(&self, payload: Value, cancel: CancellationToken) -> Result<Value, HostError> {
        if cancel.is_cancelled() {
            return Err(HostError::Cancelled);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let frame = frame::encode(&ToHost::Call { id, payload }, self.max_frame_bytes).map_err(|e| match e {
            FrameError::TooLarge { size, limit } => HostError::TooLarge { size, limit },
            other => HostError::Encode(other.to_string()),
        })?;
        let (tx, rx) = oneshot::channel();
        self.shared.register(id, tx)?;
        let mut in_flight = InFlight { client: self, id, answered: false };
        // If the writer is gone the host is going down, and the reader fails this call.
        let _ = self.writer.send(frame);
        tokio::select! {
            biased;
            answer = rx => {
                in_flight.answered = true;
                answer.unwrap_or_else(|_| Err(self.shared.closed_error()))
            }
            () = cancel.cancelled() => Err(HostError::Cancelled),
        }
    }

    /// Asks the tool host to shut down (a `shutdown` frame, then end of input), waits up
    /// to `grace` for it to exit, and kills it otherwise.
    pub async fn shutdown(self, grace: Duration) -> HostExit {
        self.shared.stopping.store(true, Ordering::SeqCst);
        if let Ok(frame) = frame::encode(&ToHost::Shutdown, self.max_frame_bytes) {
            let _ = self.writer.send(frame);
        }
        let HostClient { writer, mut exit, stopper, .. } = self;
        drop(writer);
        if let Ok(Some(done)) = tokio::time::timeout(grace, ended(&mut exit)).await {
            return done;
        }
        tracing::warn!(
            target: "orch_sandbox::host",
            pid = stopper.shared.pid,
            "tool host still running {} ms after shutdown; killing it",
            grace.as_millis()
        );
        stopper.kill.cancel();
        tokio::time::timeout(REAP, ended(&mut exit))
            .await
            .ok()
            .flatten()
            .unwrap_or(HostExit { status: None, killed: true })
    }
}

/// Kills the child when the client is dropped.
struct Stopper {
    kill: CancellationToken,
    shared: Arc<Shared>,
}

impl Drop for Stopper {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        self.kill.cancel();
    }
}

/// A call waiting for its answer; if dropped unanswered (cancelled, or the future was
/// dropped), it forgets the call and tells the host to cancel it.
struct InFlight<'a> {
    client: &'a HostClient,
    id: u64,
    answered: bool,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.answered || !self.client.shared.forget(self.id) {
            return;
        }
        if let Ok(frame) = frame::encode(&ToHost::Cancel { id: self.id }, self.client.max_frame_bytes) {
            let _ = self.client.writer.send(frame);
        }
    }
}

type Answer = Result<Value, HostError>;

struct Shared {
    program: String,
    pid: Option<u32>,
    /// Set once the coordinator asked the host to stop, so its exit is not a crash.
    stopping: AtomicBool,
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    calls: HashMap<u64, oneshot::Sender<Answer>>,
    /// Set when the host is gone; every later call fails with it.
    closed: Option<HostError>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register(&self, id: u64, tx: oneshot::Sender<Answer>) -> Result<(), HostError> {
        let mut pending = self.lock();
        if let Some(error) = &pending.closed {
            return Err(error.clone());
        }
        pending.calls.insert(id, tx);
        Ok(())
    }

    /// Removes a call; true if it was still waiting.
    fn forget(&self, id: u64) -> bool {
        self.lock().calls.remove(&id).is_some()
    }

    fn complete(&self, id: u64, answer: Answer) {
        match self.lock().calls.remove(&id) {
            Some(tx) => {
                let _ = tx.send(answer);
            }
            None => tracing::debug!(target: "orch_sandbox::host", id, "answer for a call nobody waits for (cancelled)"),
        }
    }

    fn close(&self, error: HostError) {
        let calls = {
            let mut pending = self.lock();
            pending.closed = Some(error.clone());
            std::mem::take(&mut pending.calls)
        };
        for (_, tx) in calls {
            let _ = tx.send(Err(error.clone()));
        }
    }

    fn closed_error(&self) -> HostError {
        self.lock().closed.clone().unwrap_or_else(|| HostError::Crashed {
            status: None,
            message: format!("the tool host `{}` went away", self.program),
        })
    }

    fn who(&self) -> String {
        match self.pid {
            Some(pid) => format!("the tool host (pid {pid})"),
            None => format!("the tool host ({})", self.program),
        }
    }
}

/// Waits for the `ready` frame; on failure, kills the host (unless it exits by itself
/// promptly) and returns its status and what went wrong.
async fn wait_ready(
    exit: &mut watch::Receiver<Option<HostExit>>,
    kill: &CancellationToken,
    reader: &mut FrameReader<Output>,
    timeout: Duration,
) -> Result<(), (Option<ExitStatus>, String)> {
    enum First {
        Frame(Result<Option<Vec<u8>>, FrameError>),
        Exited(Option<HostExit>),
    }
    let first = tokio::time::timeout(timeout, async {
        tokio::select! {
            frame = reader.next() => First::Frame(frame),
            ended = ended(exit) => First::Exited(ended),
        }
    })
    .await;
    let problem = match first {
        Ok(First::Frame(Ok(Some(line)))) => match frame::decode::<FromHost>(&line) {
            Ok(FromHost::Ready { .. }) => return Ok(()),
            _ => format!(
                "it wrote `{}` instead of the ready frame; is the command really a tool host?",
                frame::excerpt(&line)
            ),
        },
        Ok(First::Frame(Ok(None))) => {
            // Usually the process is exiting; say how, if it does so promptly.
            if let Ok(Some(HostExit { status: Some(status), .. })) =
                tokio::time::timeout(EXIT_AFTER_CLOSE, ended(exit)).await
            {
                return Err((Some(status), format!("it {} before saying it was ready", describe(status))));
            }
            "it closed its output before saying it was ready".to_string()
        }
        Ok(First::Frame(Err(e))) => format!("reading its ready frame failed: {e}"),
        Ok(First::Exited(Some(HostExit { status: Some(status), .. }))) => {
            return Err((Some(status), format!("it {} before saying it was ready", describe(status))));
        }
        Ok(First::Exited(_)) => "it exited before saying it was ready (its exit status is unknown)".to_string(),
        Err(_) => format!("it did not say it was ready within {} ms", timeout.as_millis()),
    };
    let status = match tokio::time::timeout(EXIT_AFTER_CLOSE, ended(exit)).await {
        Ok(ended) => ended.and_then(|e| e.status),
        Err(_) => {
            kill.cancel();
            tokio::time::timeout(REAP, ended(exit)).await.ok().flatten().and_then(|e| e.status)
        }
    };
    Err((status, problem))
}

/// Owns the host process: waits for it to exit, or kills it when `kill` fires, and
/// publishes how it ended.
async fn own_process(process: Process, kill: CancellationToken, exit: watch::Sender<Option<HostExit>>) {
    match process {
        Process::Child(child) => own_child(child, kill, exit).await,
        Process::Remote { mut exited, kill: kill_host } => {
            let (status, killed) = tokio::select! {
                status = &mut exited => (status, false),
                () = kill.cancelled() => {
                    kill_host();
                    (tokio::time::timeout(REAP, exited).await.ok().flatten(), true)
                }
            };
            exit.send_replace(Some(HostExit { status, killed }));
        }
    }
}

/// Owns the child: waits for it to exit, or kills it when `kill` fires, and publishes
/// how it ended.
async fn own_child(mut child: Child, kill: CancellationToken, exit: watch::Sender<Option<HostExit>>) {
    let (status, killed) = tokio::select! {
        status = child.wait() => (status, false),
        () = kill.cancelled() => match child.try_wait() {
            Ok(Some(status)) => (Ok(status), false),
            _ => {
                let _ = child.start_kill();
                (child.wait().await, true)
            }
        },
    };
    let status = status
        .inspect_err(|e| tracing::warn!(target: "orch_sandbox::host", "waiting for the tool host failed: {e}"))
        .ok();
    exit.send_replace(Some(HostExit { status, killed }));
}

/// Waits until the child has ended and returns how; `None` if that can no longer be known.
async fn ended(exit: &mut watch::Receiver<Option<HostExit>>) -> Option<HostExit> {
    exit.wait_for(Option::is_some).await.ok().and_then(|ended| *ended)
}

/// Writes queued frames to the host's stdin; closing the queue closes stdin.
async fn write_frames(
    mut stdin: Box<dyn AsyncWrite + Send + Unpin>,
    mut frames: mpsc::UnboundedReceiver<Vec<u8>>,
    kill: CancellationToken,
) {
    while let Some(frame) = frames.recv().await {
        if let Err(e) = stdin.write_all(&frame).await {
            tracing::debug!(target: "orch_sandbox::host", "writing to the tool host failed: {e}; stopping it");
            kill.cancel();
            return;
        }
        // Streams that buffer (a container's attach connection) must see each frame now.
        if let Err(e) = stdin.flush().await {
            tracing::debug!(target: "orch_sandbox::host", "flushing to the tool host failed: {e}; stopping it");
            kill.cancel();
            return;
        }
    }
    // End of input: a pipe closes on drop, a connection needs its write half shut down.
    let _ = stdin.shutdown().await;
}

enum Cause {
    /// stdout closed.
    Closed,
    /// The process exited (its stdout may still be held open by a grandchild).
    Exited,
    /// The host wrote something that is not a valid frame.
    Protocol(String),
}

/// Reads answers and completes calls until the host goes away, then fails every pending
/// and later call with [`HostError::Crashed`].
async fn read_frames(
    mut reader: FrameReader<Output>,
    shared: Arc<Shared>,
    mut exit: watch::Receiver<Option<HostExit>>,
    kill: CancellationToken,
    tail: Arc<StderrTail>,
) {
    let cause = loop {
        tokio::select! {
            next = reader.next() => match next {
                Ok(Some(line)) => {
                    if let Err(why) = dispatch(&shared, &line) {
                        break Cause::Protocol(why);
                    }
                }
                Ok(None) => break Cause::Closed,
                Err(e) => break Cause::Protocol(e.to_string()),
            },
            _ = ended(&mut exit) => {
                let _ = tokio::time::timeout(DRAIN, async {
                    while let Ok(Some(line)) = reader.next().await {
                        if dispatch(&shared, &line).is_err() {
                            break;
                        }
                    }
                })
                .await;
                break Cause::Exited;
            }
        }
    };

    if let Cause::Protocol(_) = cause {
        kill.cancel();
    } else if tokio::time::timeout(EXIT_AFTER_CLOSE, ended(&mut exit)).await.is_err() {
        kill.cancel();
    }
    let ended = tokio::time::timeout(REAP, ended(&mut exit)).await.ok().flatten();
    let status = ended.and_then(|e| e.status);
    let who = shared.who();
    let mut message = match (&cause, ended) {
        (Cause::Protocol(why), _) => format!("{who} broke the protocol and was killed: {why}"),
        (_, Some(HostExit { killed: true, .. })) if !shared.stopping.load(Ordering::SeqCst) => {
            format!("{who} closed its stdin or stdout without exiting and was killed")
        }
        (_, Some(HostExit { status: Some(status), .. })) => format!("{who} {}", describe(status)),
        (_, _) => format!("{who} exited (its exit status is unknown)"),
    };
    message.push_str(&tail.quote().await);
    if shared.stopping.load(Ordering::SeqCst) {
        tracing::debug!(target: "orch_sandbox::host", "{message}");
    } else {
        tracing::warn!(target: "orch_sandbox::host", "{message}");
    }
    shared.close(HostError::Crashed { status, message });
}

/// Completes the call an answer is for; an error is a protocol violation.
fn dispatch(shared: &Shared, line: &[u8]) -> Result<(), String> {
    match frame::decode::<FromHost>(line) {
        Ok(FromHost::Result { id, payload }) => shared.complete(id, Ok(payload)),
        Ok(FromHost::Error { id, message }) => shared.complete(id, Err(HostError::Failed(message))),
        Ok(FromHost::Ready { .. }) => tracing::warn!(target: "orch_sandbox::host", "ignoring a second ready frame"),
        Err(e) => {
            return Err(format!(
                "it wrote `{}` to its stdout, which is not a protocol frame ({e}); tool code must not print to stdout",
                frame::excerpt(line)
            ));
        }
    }
    Ok(())
}

/// "exited with exit status 3" / "was killed by signal: 9 (SIGKILL)".
fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exited with exit status {code}"),
        None => format!("was killed by {status}"),
    }
}

/// The last lines the host wrote to stderr, for error messages.
#[derive(Default)]
struct StderrTail {
    lines: Mutex<VecDeque<String>>,
    done: CancellationToken,
}

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == TAIL_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// "; its last stderr lines: a | b", or "" if it wrote nothing. Waits briefly for
    /// stderr to reach its end first.
    async fn quote(&self) -> String {
        let _ = tokio::time::timeout(STDERR_SETTLE, self.done.cancelled()).await;
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return String::new();
        }
        let joined: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("; its last stderr lines: {}", joined.join(" | "))
    }
}

/// Logs the host's stderr line by line and keeps its tail. Lines are cut at 4 KiB.
async fn forward_stderr(
    mut stderr: Box<dyn AsyncRead + Send + Unpin>,
    tail: Arc<StderrTail>,
    pid: Option<u32>,
    program: String,
) {
    const MAX_LINE: usize = 4096;
    let emit = |line: &[u8]| {
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end();
        if text.is_empty() {
            return;
        }
        match pid {
            Some(pid) => tracing::info!(target: "orch_sandbox::host::stderr", pid, "{text}"),
            None => tracing::info!(target: "orch_sandbox::host::stderr", host = %program, "{text}"),
        }
        tail.push(text.chars().take(TAIL_LINE_CHARS).collect());
    };
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for part in buf[..n].split_inclusive(|&b| b == b'\n') {
            let room = MAX_LINE.saturating_sub(line.len());
            let ends = part.last() == Some(&b'\n');
            line.extend_from_slice(&part[..part.len().min(room)]);
            if ends {
                emit(&line);
                line.clear();
            }
        }
    }
    emit(&line);
    tail.done.cancel();
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::sync::atomic::AtomicUsize;

    use async_trait::async_trait;
    use serde_json::json;

    use super::*;
    use crate::host::server::{Handler, serve};

    struct Echo;

    #[async_trait]
    impl Handler for Echo {
        async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
            if let Some(ms) = payload.get("sleep_ms").and_then(Value::as_u64) {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                    () = cancel.cancelled() => return Err("cancelled".into()),
                }
            }
            Ok(payload)
        }
    }

    /// An in-process host served over duplex pipes; `exit` ends it "remotely" with a
    /// status, and `kill` counts its calls and exits with 137.
    struct Remote {
        streams: HostStreams,
        exit: oneshot::Sender<Option<ExitStatus>>,
        kills: Arc<AtomicUsize>,
    }

    fn remote() -> Remote {
        let (to_host, host_in) = tokio::io::duplex(1 << 16);
        let (host_out, from_host) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(serve(Arc::new(Echo), host_in, host_out));
        let (exit_tx, exit_rx) = oneshot::channel::<Option<ExitStatus>>();
        let (killed_tx, killed_rx) = oneshot::channel::<()>();
        let kills = Arc::new(AtomicUsize::new(0));
        let exited = Box::pin(async move {
            let status = tokio::select! {
                status = exit_rx => status.ok().flatten(),
                _ = killed_rx => Some(ExitStatus::from_raw(137 << 8)),
            };
            server.abort();
            status
        });
        let counter = Arc::clone(&kills);
        let kill = Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = killed_tx.send(());
        });
        let streams = HostStreams {
            name: "test remote".into(),
            pid: None,
            input: Box::new(to_host),
            output: Box::new(from_host),
            stderr: None,
            exited,
            kill,
        };
        Remote { streams, exit: exit_tx, kills }
    }

    #[tokio::test]
    async fn a_remote_host_answers_calls() {
        let remote = remote();
        let client = HostClient::from_streams(remote.streams).await.unwrap();
        assert_eq!(client.pid(), None);
        let answer = client.call(json!({"x": 1}), CancellationToken::new()).await.unwrap();
        assert_eq!(answer, json!({"x": 1}));
        drop(client);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(remote.kills.load(Ordering::SeqCst), 1, "dropping the client kills the remote host");
    }

    #[tokio::test]
    async fn a_remote_exit_fails_pending_calls_with_its_status() {
        let remote = remote();
        let client = HostClient::from_streams(remote.streams).await.unwrap();
        let pending = client.call(json!({"sleep_ms": 10_000}), CancellationToken::new());
        let exit = remote.exit;
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = exit.send(Some(ExitStatus::from_raw(3 << 8)));
        });
        match pending.await {
            Err(HostError::Crashed { status, message }) => {
                assert_eq!(status.and_then(|s| s.code()), Some(3), "{message}");
                assert!(message.contains("test remote"), "{message}");
            }
            other => panic!("expected Crashed, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_remote_host_that_never_gets_ready_is_killed() {
        let (to_host, _host_in) = tokio::io::duplex(64);
        let (_host_out, from_host) = tokio::io::duplex(64);
        let (killed_tx, killed_rx) = oneshot::channel::<()>();
        let streams = HostStreams {
            name: "silent".into(),
            pid: None,
            input: Box::new(to_host),
            output: Box::new(from_host),
            stderr: None,
            exited: Box::pin(async move { killed_rx.await.ok().map(|()| ExitStatus::from_raw(9)) }),
            kill: Box::new(move || {
                let _ = killed_tx.send(());
            }),
        };
        let options = HostOptions { ready_timeout: Duration::from_millis(100), ..HostOptions::default() };
        match HostClient::from_streams_with(streams, options).await {
            Err(HostError::NotReady { program, status, message }) => {
                assert_eq!(program, "silent");
                assert_eq!(status.and_then(|s| s.signal()), Some(9), "killed: {message}");
            }
            other => panic!("expected NotReady, got {other:?}"),
        }
    }
}
