//! A tool host for the orch-sandbox integration tests (`tests/host.rs`), and for nothing
//! else: it serves test ops over stdin/stdout with [`orch_sandbox::host::serve_stdio`].
//!
//! Ops (the call payload is an object with one of these keys):
//! - `{"echo": v}` answers `v`;
//! - `{"sleep_ms": n}` sleeps n ms, or answers the error "cancelled" when cancelled;
//! - `{"crash": code}` exits the process with `code` in the middle of the call;
//! - `{"big": n}` answers a string of n bytes;
//! - `{"stats": true}` answers `{"calls": c, "cancels": k}` (cancels seen so far);
//! - `{"stderr": text}` writes `text` to stderr and answers `null`;
//! - `{"print": text}` writes `text` to stdout, breaking the protocol.
//! - `{"run": [argv...]}` runs a command (stdin null, output captured) and answers
//!   `{"code": c, "stdout": s, "stderr": e}` (`code` is null when killed by a signal);
//!   the container tests use it to look around inside a container. With
//!   `"scoped": true` the command first enters its own Landlock domain
//!   ([`orch_sandbox::scope::enter_command_domain`]), as orch's Bash commands do; with
//!   `"group": true` it leads its own process group, as they do too.
//!
//! Flags: `--exit-before-ready CODE`, `--garbage-before-ready`, `--never-ready`,
//! `--max-frame BYTES`, `--linger-ms MS` (stay alive that long after serving ends),
//! `--subreaper` (become a child subreaper first, and kill every descendant when
//! serving ends, as orch's tool host does), `--not-dumpable` (as orch's tool host is).
//!
//! `--zygote` as the first argument makes it a fork server instead
//! ([`orch_sandbox::host::zygote::serve`] on fd 3): each request's payload is a forked
//! host's flags, one per line.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use orch_sandbox::host::{Handler, ServeOptions, serve_stdio};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct TestOps {
    calls: AtomicU64,
    cancels: AtomicU64,
}

#[async_trait]
impl Handler for TestOps {
    async fn handle(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if let Some(value) = payload.get("echo") {
            return Ok(value.clone());
        }
        if let Some(ms) = payload.get("sleep_ms").and_then(Value::as_u64) {
            return tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(ms)) => Ok(json!({"slept_ms": ms})),
                () = cancel.cancelled() => {
                    self.cancels.fetch_add(1, Ordering::SeqCst);
                    Err("cancelled".to_string())
                }
            };
        }
        if let Some(code) = payload.get("crash").and_then(Value::as_i64) {
            eprintln!("test host: crashing with exit code {code} as asked");
            std::process::exit(i32::try_from(code).unwrap_or(1));
        }
        if let Some(n) = payload.get("big").and_then(Value::as_u64) {
            return Ok(Value::String("x".repeat(usize::try_from(n).unwrap_or(0))));
        }
        if payload.get("stats").is_some() {
            let calls = self.calls.load(Ordering::SeqCst);
            return Ok(json!({"calls": calls, "cancels": self.cancels.load(Ordering::SeqCst)}));
        }
        if let Some(text) = payload.get("stderr").and_then(Value::as_str) {
            eprintln!("{text}");
            return Ok(Value::Null);
        }
        if let Some(argv) = payload.get("run").and_then(Value::as_array) {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            let (program, args) = argv.split_first().ok_or("run needs a program")?;
            let mut command = tokio::process::Command::new(program);
            command.args(args).stdin(std::process::Stdio::null()).kill_on_drop(true);
            if payload.get("group").and_then(Value::as_bool) == Some(true) {
                command.process_group(0);
            }
            if payload.get("scoped").and_then(Value::as_bool) == Some(true) {
                #[allow(unsafe_code)]
                // SAFETY: the hook only makes raw system calls (async-signal-safe).
                unsafe {
                    command.pre_exec(orch_sandbox::scope::enter_command_domain);
                }
            }
            let output = command.output().await.map_err(|e| format!("cannot run {program}: {e}"))?;
            return Ok(json!({
                "code": output.status.code(),
                "stdout": String::from_utf8_lossy(&output.stdout),
                "stderr": String::from_utf8_lossy(&output.stderr),
            }));
        }
        if let Some(text) = payload.get("print").and_then(Value::as_str) {
            println!("{text}");
            return Ok(Value::Null);
        }
        Err(format!("unknown test op: {payload}"))
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--zygote") {
        // A fork server: each request's payload is the host's flags, one per line.
        let code = orch_sandbox::host::zygote::serve(orch_sandbox::host::zygote::ZYGOTE_FD, |payload| {
            host(payload.lines().map(str::to_owned).collect())
        });
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    ExitCode::from(u8::try_from(host(args)).unwrap_or(1))
}

fn host(args: Vec<String>) -> i32 {
    let flag = |name: &str| args.iter().any(|a| a == name);
    let number = |name: &str| {
        let at = args.iter().position(|a| a == name)?;
        args.get(at + 1)?.parse::<u64>().ok()
    };

    if let Some(code) = number("--exit-before-ready") {
        eprintln!("test host: exiting with {code} before ready as asked");
        std::process::exit(i32::try_from(code).unwrap_or(1));
    }
    if flag("--never-ready") {
        std::thread::sleep(Duration::from_secs(60));
        return 0;
    }
    if flag("--garbage-before-ready") {
        println!("hello, I am not a tool host");
    }
    let mut options = ServeOptions::default();
    if let Some(bytes) = number("--max-frame") {
        options.max_frame_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
    }

    let subreaper = flag("--subreaper");
    if subreaper && let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("test host: cannot become a child subreaper: {e}");
        return 1;
    }
    if flag("--not-dumpable")
        && let Err(e) = nix::sys::prctl::set_dumpable(false)
    {
        eprintln!("test host: cannot make itself non-dumpable: {e}");
        return 1;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("test host: could not start a runtime: {e}");
            return 1;
        }
    };
    let served = runtime.block_on(serve_stdio(options, Arc::new(TestOps::default())));
    if let Err(e) = &served {
        eprintln!("test host: serving failed: {e}");
    }
    if subreaper {
        orch_sandbox::reaper::kill_descendants();
    }
    if let Some(ms) = number("--linger-ms") {
        std::thread::sleep(Duration::from_millis(ms));
    }
    // Exit without waiting for the runtime's blocking threads (tokio's stdout writer).
    std::process::exit(if served.is_ok() { 0 } else { 1 });
}
