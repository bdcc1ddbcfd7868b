//! `mock-model-server`: the test kit's mock model server as a process, serving scripted
//! steps from a file for out-of-process use (benchmarks, CLI tests).
//!
//! ```text
//! mock-model-server --script FILE [--port N] [--latency-ms N] [--repeat-default | --by-turn] [--log FILE]
//!                   [--bodies FILE]
//! ```
//!
//! Prints `listening on http://127.0.0.1:PORT` as its first stdout line, then serves
//! until killed. `--repeat-default` keeps serving the script's last step once the queue
//! is empty (otherwise an empty queue answers HTTP 400 "no scripted step left").
//! `--by-turn` serves every conversation the same steps: its n-th model call gets the
//! n-th step (the last one past the end), so many agents can run against one script.
//! `--log FILE`: on SIGINT, before it exits, the server writes one JSON line per request
//! it received, in order: `{"n": 1, "tools": 3, "bytes": 5120, "tokens": 1280}` (the
//! number of tools offered, the body's size, and the loop's estimate of its tokens:
//! a quarter of its bytes), plus `at_ns`, when it arrived (Unix time in nanoseconds).
//! Benchmarks read request sizes and times from it.
//! `--bodies FILE`: on SIGINT, the server also writes every request body it received,
//! one JSON line each, in order (what reference captures of other clients compare).
//!
//! The script is a YAML (or JSON) list of steps, each the serde form of
//! `orch_testkit::mock::Step` (see `orch_testkit::mock::parse_steps`):
//!
//! ```yaml
//! - reply:
//!     text: "Let me read it."
//!     thinking: {text: "the user wants a.rs", signature: "sig"}   # optional
//!     tool_calls:
//!       - {name: Read, input: {file_path: a.rs}}                  # id optional
//!     stop_reason: tool_use                                        # optional
//!     usage: {input_tokens: 100, output_tokens: 20,                # optional, missing
//!             cache_creation_input_tokens: 0, cache_read_input_tokens: 50}  # fields are 0
//! - status: {code: 529, retry_after: "0"}                          # body: optional
//! - cut_after: {turn: {text: "partial"}, events: 3}
//! - malformed: {turn: {text: "oops"}}                              # turn optional
//! - stream_error: {error_type: overloaded_error, message: Overloaded}
//! - prompt_too_long
//! - delay: {ms: 50, step: {reply: {text: "slow"}}}
//! - stall
//! - reply: {text: "done"}
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use orch_testkit::mock::{MockServer, Step, parse_steps};

const USAGE: &str = "usage: mock-model-server --script FILE [--port N] [--latency-ms N] [--repeat-default | --by-turn] \
                     [--log FILE] [--bodies FILE]";

#[derive(Debug)]
struct Args {
    script: PathBuf,
    port: u16,
    latency_ms: u64,
    repeat_default: bool,
    by_turn: bool,
    log: Option<PathBuf>,
    bodies: Option<PathBuf>,
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut script = None;
    let mut port = 0;
    let mut latency_ms = 0;
    let mut repeat_default = false;
    let mut by_turn = false;
    let mut log = None;
    let mut bodies = None;
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--script" => script = Some(PathBuf::from(value("--script")?)),
            "--port" => {
                port = value("--port")?.parse().map_err(|e| format!("--port: {e}"))?;
            }
            "--latency-ms" => {
                latency_ms = value("--latency-ms")?.parse().map_err(|e| format!("--latency-ms: {e}"))?;
            }
            "--repeat-default" => repeat_default = true,
            "--by-turn" => by_turn = true,
            "--log" => log = Some(PathBuf::from(value("--log")?)),
            "--bodies" => bodies = Some(PathBuf::from(value("--bodies")?)),
            "-h" | "--help" => return Err(USAGE.to_owned()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    let script = script.ok_or(format!("--script is required\n{USAGE}"))?;
    Ok(Args { script, port, latency_ms, repeat_default, by_turn, log, bodies })
}

fn load_script(path: &Path) -> Result<Vec<Step>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse_steps(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Starts the server with the script queued, as the arguments say.
async fn start(args: &Args) -> Result<MockServer, String> {
    let steps = load_script(&args.script)?;
    let server =
        MockServer::start_on(args.port).await.map_err(|e| format!("cannot bind 127.0.0.1:{}: {e}", args.port))?;
    if args.repeat_default {
        server.set_default(steps.last().cloned());
    }
    if args.by_turn {
        server.set_by_turn(steps);
    } else {
        server.push_all(steps);
    }
    server.set_latency(Duration::from_millis(args.latency_ms));
    Ok(server)
}

async fn run(args: Args) -> Result<(), String> {
    let server = start(&args).await?;
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", server.url()).map_err(|e| e.to_string())?;
    stdout.flush().map_err(|e| e.to_string())?;
    tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
    if let Some(path) = &args.log {
        write_log(path, &server).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if let Some(path) = &args.bodies {
        write_bodies(path, &server).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// One line per request received: its number, tools offered, size and token estimate.
fn write_log(path: &Path, server: &MockServer) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for (i, r) in server.requests().iter().enumerate() {
        let line = serde_json::json!({
            "n": i + 1,
            "tools": r.tools().len(),
            "bytes": r.body.len(),
            "tokens": (r.body.len() as u64).div_ceil(4),
            "at_ns": r.received_wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
        });
        writeln!(out, "{line}")?;
    }
    out.flush()
}

/// Every request body received, one line each (a body that is not JSON as a string).
fn write_bodies(path: &Path, server: &MockServer) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    for r in server.requests() {
        let body: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&r.body).into_owned()));
        writeln!(out, "{body}")?;
    }
    out.flush()
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match parse_args(std::env::args().skip(1)) {
        Ok(args) => run(args).await,
        Err(message) => Err(message),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mock-model-server: {message}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests fail loudly
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Args, String> {
        parse_args(list.iter().map(|s| s.to_string()))
    }

    #[test]
    fn arguments_parse() {
        let parsed = args(&["--script", "s.yaml", "--port", "4000", "--latency-ms", "25", "--repeat-default"]).unwrap();
        assert_eq!(parsed.script, PathBuf::from("s.yaml"));
        assert_eq!((parsed.port, parsed.latency_ms, parsed.repeat_default), (4000, 25, true));
        assert!(args(&["--script", "s.yaml", "--by-turn"]).unwrap().by_turn);
        assert_eq!(args(&["--script", "s.yaml", "--log", "r.jsonl"]).unwrap().log, Some(PathBuf::from("r.jsonl")));
        assert_eq!(
            args(&["--script", "s.yaml", "--bodies", "b.jsonl"]).unwrap().bodies,
            Some(PathBuf::from("b.jsonl"))
        );

        let defaults = args(&["--script", "s.json"]).unwrap();
        assert_eq!((defaults.port, defaults.latency_ms, defaults.repeat_default), (0, 0, false));

        assert!(args(&[]).unwrap_err().contains("--script is required"));
        assert!(args(&["--script"]).unwrap_err().contains("needs a value"));
        assert!(args(&["--script", "s", "--port", "x"]).unwrap_err().starts_with("--port"));
        assert!(args(&["--bogus"]).unwrap_err().contains("unknown argument"));
    }

    /// The example of the module doc, served: the queue holds it, and with
    /// `--repeat-default` the last step keeps answering.
    #[tokio::test]
    async fn serves_the_documented_script() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("script.yaml");
        let doc: String = include_str!("mock_model_server.rs")
            .lines()
            .skip_while(|line| *line != "//! ```yaml")
            .skip(1)
            .take_while(|line| *line != "//! ```")
            .map(|line| format!("{}\n", line.trim_start_matches("//!").strip_prefix(' ').unwrap_or("")))
            .collect();
        std::fs::write(&script, doc).unwrap();

        let parsed = args(&["--script", script.to_str().unwrap(), "--repeat-default"]).unwrap();
        let server = start(&parsed).await.unwrap();
        assert_eq!(server.remaining(), 9);
        assert!(server.url().starts_with("http://127.0.0.1:"));
    }

    #[tokio::test]
    async fn a_bad_script_is_reported_with_its_step() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("bad.json");
        std::fs::write(&script, r#"[{"reply": {"text": "ok"}}, {"status": {"cod": 500}}]"#).unwrap();
        let parsed = args(&["--script", script.to_str().unwrap()]).unwrap();
        let err = start(&parsed).await.err().unwrap();
        assert!(err.contains("bad.json: step 2:"), "{err}");
    }
}
