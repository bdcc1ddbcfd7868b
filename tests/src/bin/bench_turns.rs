//! `bench-turns`: the "harness overhead per turn" benchmark (issue 2). The numbers live in
//! `BENCHMARKS.md`, section "Harness overhead per turn"; `tests/bench/turns.sh` runs the
//! whole comparison with Claude Code.
//!
//! The session: one agent, 21 turns that each make exactly one tool call, then a final
//! text answer; so 22 model requests to the mock model server, with no added latency. A
//! *turn* is the time from one model request to the next, as the mock server sees them
//! arrive: the streamed answer, the tool call, the loop's bookkeeping, and building and
//! sending the next request. A session has 21 of them.
//!
//! ```text
//! bench-turns run [--turns N] [--server URL] [--runtime multi-thread|current-thread]
//!     Runs the session through `orch_agents::query` in this process, with the Anthropic
//!     provider and an in-process `Echo` tool (no tool host), on a multi-thread tokio
//!     runtime as the `orch` binary does (or, to compare, a current-thread one). Without
//!     --server it starts its own mock server as a child process (`bench-turns serve`),
//!     so the mock never counts towards this process's memory. Prints one JSON line: the
//!     turn times between `TurnStarted` events, the session time, this process's peak
//!     RSS (VmHWM), and with its own server the server's view and where a turn's time
//!     goes.
//! bench-turns steps [--turns N] [--tool NAME] [--input JSON]
//!     Prints the session's step file (JSON, as `mock-model-server` reads it): N replies
//!     calling the tool once each (default `Echo` with `{"text": "turn K"}`), then a
//!     final text answer.
//! bench-turns serve --steps FILE --log FILE [--port N] [--stdin]
//!     The mock model server (`orch_testkit::mock::MockServer`, as `mock-model-server`
//!     serves it) as a process that also logs when each request arrived. Prints
//!     `listening on http://127.0.0.1:PORT`, then answers requests with the steps in
//!     order. Stops on SIGTERM or SIGINT (or when stdin closes, with --stdin) and then
//!     writes the log: one JSON line per request, in arrival order.
//! bench-turns stats --log FILE --harness NAME --expect N [--client FILE] [--rss-kb N] [--wall-ns N]
//!     One JSON result line from a server log: the turn times between main-loop requests
//!     (Messages requests that offer tools), with the measurements the caller took of
//!     the process (peak RSS from GNU time, wall time) and `run`'s JSON line. Fails
//!     unless the log holds exactly N requests, all of them main-loop requests.
//! bench-turns table FILE
//!     The Markdown table of a file of `stats` lines: per harness, the median over runs.
//! ```

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use orch_agents::model::anthropic::{AnthropicConfig, AnthropicProvider};
use orch_agents::{
    Event, EventSink, Message, QueryConfig, Terminal, ToolCall, ToolOutput, ToolRunner, ToolSpec, query,
};
use orch_testkit::mock::{MockServer, RecordedRequest, Step, parse_steps, simulated_request_tokens, simulated_tokens};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const USAGE: &str = "usage: bench-turns run [--turns N] [--server URL] [--runtime multi-thread|current-thread]
       bench-turns steps [--turns N] [--tool NAME] [--input JSON]
       bench-turns serve --steps FILE --log FILE [--port N] [--stdin]
       bench-turns stats --log FILE --harness NAME --expect N [--client FILE] [--rss-kb N] [--wall-ns N]
       bench-turns table FILE";

/// Tool-call turns in a session; one more request gets the final answer.
const DEFAULT_TURNS: usize = 21;
/// The model named in the requests; the mock server echoes it back.
const MODEL: &str = "claude-sonnet-4-5";
const PROMPT: &str = "Call the tool each time you are asked to, then answer briefly.";
const FINAL_TEXT: &str = "All done.";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let command = args.next().unwrap_or_default();
    let args: Vec<String> = args.collect();
    let result = match command.as_str() {
        "run" => Flags::parse(&args, &["--turns", "--server", "--runtime"], &[]).and_then(|f| run(&f)),
        "steps" => Flags::parse(&args, &["--turns", "--tool", "--input"], &[]).and_then(|f| steps(&f)),
        "serve" => Flags::parse(&args, &["--steps", "--log", "--port"], &["--stdin"]).and_then(|f| serve(&f)),
        "stats" => Flags::parse(&args, &["--log", "--harness", "--expect", "--client", "--rss-kb", "--wall-ns"], &[])
            .and_then(|f| stats(&f)),
        "table" => match args.as_slice() {
            [file] => table(Path::new(file)),
            _ => Err(USAGE.to_owned()),
        },
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bench-turns {command}: {message}");
            ExitCode::from(2)
        }
    }
}

/// `--name value` pairs and bare switches.
struct Flags(BTreeMap<String, Option<String>>);

impl Flags {
    fn parse(args: &[String], valued: &[&str], switches: &[&str]) -> Result<Flags, String> {
        let mut map = BTreeMap::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            if valued.contains(&arg.as_str()) {
                let value = args.next().ok_or(format!("{arg} needs a value"))?;
                map.insert(arg.clone(), Some(value.clone()));
            } else if switches.contains(&arg.as_str()) {
                map.insert(arg.clone(), None);
            } else {
                return Err(format!("unknown argument {arg:?}\n{USAGE}"));
            }
        }
        Ok(Flags(map))
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(|v| v.as_deref())
    }

    fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    fn required(&self, name: &str) -> Result<&str, String> {
        self.get(name).ok_or(format!("{name} is required\n{USAGE}"))
    }

    fn number<T: std::str::FromStr>(&self, name: &str) -> Result<Option<T>, String>
    where
        T::Err: std::fmt::Display,
    {
        self.get(name).map(|v| v.parse().map_err(|e| format!("{name} {v:?}: {e}"))).transpose()
    }
}

// ---------------------------------------------------------------------------------------
// steps

/// The session's script: `turns` replies calling `tool` once each, then the final text.
fn session_steps(turns: usize, tool: &str, input: Option<&Value>) -> Vec<Step> {
    (1..=turns)
        .map(|n| Step::tool(tool, input.cloned().unwrap_or_else(|| json!({"text": format!("turn {n}")}))))
        .chain([Step::text(FINAL_TEXT)])
        .collect()
}

fn steps_json(steps: &[Step]) -> Result<String, String> {
    serde_json::to_string_pretty(steps).map_err(|e| e.to_string())
}

fn steps(flags: &Flags) -> Result<(), String> {
    let turns = flags.number("--turns")?.unwrap_or(DEFAULT_TURNS);
    let input = flags
        .get("--input")
        .map(|text| serde_json::from_str::<Value>(text).map_err(|e| format!("--input: {e}")))
        .transpose()?;
    let steps = session_steps(turns, flags.get("--tool").unwrap_or("Echo"), input.as_ref());
    println!("{}", steps_json(&steps)?);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// serve

fn serve(flags: &Flags) -> Result<(), String> {
    let path = flags.required("--steps")?;
    let log = PathBuf::from(flags.required("--log")?);
    let port = flags.number("--port")?.unwrap_or(0);
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let steps = parse_steps(&text).map_err(|e| format!("{path}: {e}"))?;
    let runtime = runtime()?;
    let result = runtime.block_on(async {
        let server = MockServer::start_on(port).await.map_err(|e| format!("cannot bind 127.0.0.1:{port}: {e}"))?;
        let clock = Clock::now();
        server.push_all(steps);
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on {}", server.url()).map_err(|e| e.to_string())?;
        stdout.flush().map_err(|e| e.to_string())?;
        stop_signal(flags.has("--stdin")).await?;
        write_log(&log, &clock, &server.requests())
    });
    // Do not wait for the thread blocked on stdin.
    runtime.shutdown_background();
    result
}

/// Waits for SIGTERM, SIGINT or (with `stdin`) the end of stdin.
async fn stop_signal(stdin: bool) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let eof = async {
        if stdin {
            // Returns when the parent closes the pipe or goes away.
            let _ = tokio::task::spawn_blocking(|| std::io::copy(&mut std::io::stdin(), &mut std::io::sink())).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
        () = eof => {}
    }
    Ok(())
}

fn write_log(path: &Path, clock: &Clock, requests: &[RecordedRequest]) -> Result<(), String> {
    let mut out = String::new();
    for request in requests {
        let tool_result = last_tool_result(&request.json);
        let line = json!({
            "at_ms": millis(request.received_at.saturating_duration_since(clock.instant)),
            "at_unix_ms": clock.unix_ms(request.received_at),
            "path": request.path,
            "model": request.model(),
            "stream": request.is_stream(),
            "messages": request.messages().len(),
            "tools": request.tool_names().len(),
            "bytes": request.body.len(),
            "tokens": simulated_request_tokens(&request.json),
            "tool_result_bytes": tool_result.as_ref().map(String::len),
            "tool_result_tokens": tool_result.as_deref().map(simulated_tokens),
        });
        out.push_str(&line.to_string());
        out.push('\n');
    }
    std::fs::write(path, out).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// The last tool result of a request, as the JSON the model reads: the `content` of
/// the last `tool_result` block of its last message (what a tool's answer costs).
fn last_tool_result(body: &Value) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    let block = last["content"].as_array()?.iter().rev().find(|b| b["type"] == "tool_result")?;
    Some(block["content"].to_string())
}

// ---------------------------------------------------------------------------------------
// run

/// `Echo`: answers with its `text` input, in process.
struct Echo;

#[async_trait]
impl ToolRunner for Echo {
    fn specs(&self) -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "Echo".into(),
            description: "Returns its input text.".into(),
            input_schema: json!({
                "type": "object",
                "properties": {"text": {"type": "string"}},
                "required": ["text"],
            }),
        }]
    }

    async fn run(&self, call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
        match call.input.get("text").and_then(Value::as_str) {
            Some(text) if call.name == "Echo" => ToolOutput::ok(text),
            _ => ToolOutput::error(format!("no tool `{}` taking {}", call.name, call.input)),
        }
    }
}

/// Notes when each model request starts (`TurnStarted`) and when its answer is complete
/// (`Usage`, emitted once the stream has ended).
#[derive(Default)]
struct TurnClock {
    requests: Mutex<Vec<Instant>>,
    responses: Mutex<Vec<Instant>>,
}

impl EventSink for TurnClock {
    fn emit(&self, event: Event) {
        let list = match event {
            Event::TurnStarted { .. } => &self.requests,
            Event::Usage { .. } => &self.responses,
            _ => return,
        };
        list.lock().unwrap_or_else(PoisonError::into_inner).push(Instant::now());
    }
}

/// A reading of the monotonic and the wall clock, to turn instants into Unix times that
/// two processes can compare.
struct Clock {
    instant: Instant,
    unix_ms: f64,
}

impl Clock {
    fn now() -> Clock {
        let unix = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        Clock { instant: Instant::now(), unix_ms: millis(unix) }
    }

    fn unix_ms(&self, at: Instant) -> f64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.unix_ms + millis(after),
            None => self.unix_ms - millis(self.instant.duration_since(at)),
        }
    }
}

/// A mock server that `run` started as a child process.
struct ChildServer {
    child: Child,
    url: String,
    log: PathBuf,
    steps: PathBuf,
}

impl ChildServer {
    fn start(turns: usize) -> Result<ChildServer, String> {
        let stem = std::env::temp_dir().join(format!("bench-turns-{}", std::process::id()));
        let steps = stem.with_extension("steps.json");
        let log = stem.with_extension("requests.jsonl");
        std::fs::write(&steps, steps_json(&session_steps(turns, "Echo", None))?)
            .map_err(|e| format!("cannot write {}: {e}", steps.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
        let mut child = Command::new(exe)
            .arg("serve")
            .arg("--steps")
            .arg(&steps)
            .arg("--log")
            .arg(&log)
            .arg("--stdin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start the mock server: {e}"))?;
        let mut line = String::new();
        if let Some(stdout) = child.stdout.take() {
            BufReader::new(stdout).read_line(&mut line).map_err(|e| e.to_string())?;
        }
        match line.trim().strip_prefix("listening on ") {
            Some(url) => Ok(ChildServer { url: url.to_owned(), child, log, steps }),
            None => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!("the mock server said {line:?} instead of its address"))
            }
        }
    }

    /// Stops the server (by closing its stdin) and reads its request log.
    fn stop(mut self) -> Result<Vec<Value>, String> {
        drop(self.child.stdin.take());
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let log = read_log(&self.log);
        let _ = std::fs::remove_file(&self.log);
        let _ = std::fs::remove_file(&self.steps);
        if !status.success() {
            return Err(format!("the mock server exited with {status}"));
        }
        log
    }
}

fn run(flags: &Flags) -> Result<(), String> {
    let turns = flags.number("--turns")?.unwrap_or(DEFAULT_TURNS);
    let flavor = flags.get("--runtime").unwrap_or("multi-thread");
    let runtime = match flavor {
        "multi-thread" => runtime()?,
        "current-thread" => {
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?
        }
        other => return Err(format!("--runtime {other:?}: multi-thread or current-thread")),
    };
    let child = match flags.get("--server") {
        Some(_) => None,
        None => Some(ChildServer::start(turns)?),
    };
    let url = flags.get("--server").or(child.as_ref().map(|c| c.url.as_str())).unwrap_or_default().to_owned();
    let session = runtime.block_on(session(&url, turns));
    let server_log = child.map(ChildServer::stop).transpose()?;
    let session = session?;

    let clock = Clock::now();
    let turn_ms = intervals_ms(&session.requests);
    let mut line = json!({
        "harness": "orch",
        "runtime": flavor,
        "turns": turn_ms.len(),
        "requests": session.requests.len(),
        "median_ms": median(&turn_ms),
        "p90_ms": percentile(&turn_ms, 0.9),
        "max_ms": turn_ms.iter().copied().reduce(f64::max),
        "session_ms": millis(session.elapsed),
        "vmhwm_kb": peak_rss_kb()?,
        "turn_ms": turn_ms,
        "request_unix_ms": session.requests.iter().map(|&i| clock.unix_ms(i)).collect::<Vec<_>>(),
        "response_unix_ms": session.responses.iter().map(|&i| clock.unix_ms(i)).collect::<Vec<_>>(),
    });
    if let Some(log) = server_log {
        line["server"] = server_stats(&log);
        line["phases"] = phases(&line, &log);
    }
    println!("{line}");
    Ok(())
}

struct Session {
    /// When each model request started.
    requests: Vec<Instant>,
    /// When each answer was complete.
    responses: Vec<Instant>,
    elapsed: Duration,
}

async fn session(url: &str, turns: usize) -> Result<Session, String> {
    let provider = AnthropicProvider::new(AnthropicConfig {
        base_url: url.to_owned(),
        api_key: Some("bench".to_owned()),
        ..AnthropicConfig::default()
    })
    .map_err(|e| e.to_string())?;
    let mut config = QueryConfig::new("bench", MODEL);
    config.limits.max_turns = Some(u32::try_from(turns + 2).map_err(|e| e.to_string())?);
    let clock = TurnClock::default();
    let started = Instant::now();
    let outcome =
        query(&provider, &Echo, &config, vec![Message::user(PROMPT)], &clock, &CancellationToken::new()).await;
    let elapsed = started.elapsed();
    if outcome.terminal != Terminal::Completed || outcome.final_text != FINAL_TEXT {
        return Err(format!("the session ended with {} after {} turns", outcome.terminal, outcome.turns));
    }
    let requests = clock.requests.into_inner().unwrap_or_else(PoisonError::into_inner);
    let responses = clock.responses.into_inner().unwrap_or_else(PoisonError::into_inner);
    if requests.len() != turns + 1 || responses.len() != turns + 1 {
        return Err(format!("expected {} model requests, saw {}", turns + 1, requests.len()));
    }
    Ok(Session { requests, responses, elapsed })
}

/// The peak resident set size of this process, in KiB.
fn peak_rss_kb() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| format!("/proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or("no VmHWM in /proc/self/status".to_owned())
}

// ---------------------------------------------------------------------------------------
// stats and table

fn read_log(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).map_err(|e| format!("{}: {e}", path.display())))
        .collect()
}

/// The main-loop requests of a server log: Messages requests that offer tools.
fn main_loop(log: &[Value]) -> impl Iterator<Item = &Value> {
    log.iter().filter(|r| r["path"] == "/v1/messages" && r["tools"].as_u64().unwrap_or(0) > 0)
}

/// A numeric field of every main-loop request of a server log that has it.
fn field(log: &[Value], key: &str) -> Vec<f64> {
    main_loop(log).filter_map(|r| r[key].as_f64()).collect()
}

/// The turn times of a server log: the gaps between main-loop requests.
fn server_stats(log: &[Value]) -> Value {
    let main: Vec<f64> = main_loop(log).filter_map(|r| r["at_ms"].as_f64()).collect();
    let turn_ms: Vec<f64> = main.windows(2).map(|w| w[1] - w[0]).collect();
    json!({
        "requests": log.len(),
        "main_requests": main.len(),
        "turns": turn_ms.len(),
        "median_ms": median(&turn_ms),
        "p90_ms": percentile(&turn_ms, 0.9),
        "span_ms": main.last().zip(main.first()).map(|(last, first)| last - first),
        "median_request_bytes": median(&field(log, "bytes")),
        "total_request_bytes": field(log, "bytes").iter().sum::<f64>(),
        "first_request_bytes": field(log, "bytes").first(),
        "median_request_tokens": median(&field(log, "tokens")),
        "tool_result_bytes": median(&field(log, "tool_result_bytes")),
        "tool_result_tokens": median(&field(log, "tool_result_tokens")),
        "turn_ms": turn_ms,
    })
}

/// Where orch's turns go, from its own clock and the server's arrival times (medians,
/// in ms): `send` from the start of a model request to its arrival at the server,
/// `answer` from there to the answer fully parsed, `tools_and_loop` from there to the
/// start of the next request (the tool call and the loop's bookkeeping).
fn phases(client: &Value, log: &[Value]) -> Value {
    let column = |v: &Value| -> Vec<f64> {
        v.as_array().map(|a| a.iter().filter_map(Value::as_f64).collect()).unwrap_or_default()
    };
    let requests = column(&client["request_unix_ms"]);
    let responses = column(&client["response_unix_ms"]);
    let arrivals: Vec<f64> = main_loop(log).filter_map(|r| r["at_unix_ms"].as_f64()).collect();
    if requests.len() != arrivals.len() || responses.len() != arrivals.len() {
        return Value::Null;
    }
    let turns = requests.len().saturating_sub(1);
    let gaps =
        |from: &[f64], to: &[f64], shift: usize| -> Vec<f64> { (0..turns).map(|k| to[k + shift] - from[k]).collect() };
    json!({
        "send_ms": median(&gaps(&requests, &arrivals, 0)),
        "answer_ms": median(&gaps(&arrivals, &responses, 0)),
        "tools_and_loop_ms": median(&gaps(&responses, &requests, 1)),
    })
}

fn stats(flags: &Flags) -> Result<(), String> {
    let path = flags.required("--log")?;
    let log = read_log(Path::new(path))?;
    let expect: usize = flags.number("--expect")?.ok_or(format!("--expect is required\n{USAGE}"))?;
    let server = server_stats(&log);
    if server["requests"] != expect || server["main_requests"] != expect {
        return Err(format!(
            "{path}: expected {expect} model requests, all of the main loop; saw {} requests, {} of them offering tools",
            server["requests"], server["main_requests"]
        ));
    }
    let mut line = json!({
        "harness": flags.required("--harness")?,
        "server": server,
        "rss_kb": flags.number::<u64>("--rss-kb")?,
        "wall_ms": flags.number::<u64>("--wall-ns")?.map(|ns| ns as f64 / 1e6),
    });
    if let Some(path) = flags.get("--client") {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let client: Value = serde_json::from_str(text.trim()).map_err(|e| format!("{path}: {e}"))?;
        line["phases"] = phases(&client, &log);
        line["client"] = client;
    }
    println!("{line}");
    Ok(())
}

fn table(path: &Path) -> Result<(), String> {
    let results = read_log(path)?;
    let mut harnesses: Vec<&str> = Vec::new();
    for result in &results {
        if let Some(h) = result["harness"].as_str().filter(|h| !harnesses.contains(h)) {
            harnesses.push(h);
        }
    }
    let mut out = String::from(
        "| harness | runs | median per turn | (range over runs) | p90 per turn | first → last request | process wall | \
         peak RSS | request size |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let mut context = String::from(
        "\n| harness | all requests of a session | first request | median request (est. tokens) | a tool result (est. tokens) |\n\
         |---|---:|---:|---:|---:|\n",
    );
    let mut notes = String::new();
    for harness in harnesses {
        let runs: Vec<&Value> = results.iter().filter(|r| r["harness"] == harness).collect();
        let med = |pointer: &str| median(&runs.iter().filter_map(|r| r.pointer(pointer)?.as_f64()).collect::<Vec<_>>());
        out.push_str(&format!(
            "| {harness} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            runs.len(),
            ms(med("/server/median_ms")),
            range(&runs, "/server/median_ms"),
            ms(med("/server/p90_ms")),
            ms(med("/server/span_ms")),
            ms(med("/wall_ms")),
            mib(med("/rss_kb")),
            kb(med("/server/median_request_bytes")),
        ));
        let count = |v: Option<f64>| v.map_or("–".to_owned(), |t| format!("{t:.0}"));
        context.push_str(&format!(
            "| {harness} | {} | {} | {} ({}) | {} B ({}) |\n",
            kb(med("/server/total_request_bytes")),
            kb(med("/server/first_request_bytes")),
            kb(med("/server/median_request_bytes")),
            count(med("/server/median_request_tokens")),
            count(med("/server/tool_result_bytes")),
            count(med("/server/tool_result_tokens")),
        ));
        if runs.iter().any(|r| r["client"].is_object()) {
            notes.push_str(&format!(
                "\n{harness}, by its own clock: median per turn {}, p90 {} (between `TurnStarted` events), \
                 session {}, VmHWM {}. A turn splits into: request start → arrival at the mock {}; \
                 arrival → answer parsed {}; answer → next request (tool call and loop) {}.\n",
                ms(med("/client/median_ms")),
                ms(med("/client/p90_ms")),
                ms(med("/client/session_ms")),
                mib(med("/client/vmhwm_kb")),
                ms(med("/phases/send_ms")),
                ms(med("/phases/answer_ms")),
                ms(med("/phases/tools_and_loop_ms")),
            ));
        }
    }
    print!("{out}{context}{notes}");
    Ok(())
}

/// `min–max` of a number over runs.
fn range(runs: &[&Value], pointer: &str) -> String {
    let values: Vec<f64> = runs.iter().filter_map(|r| r.pointer(pointer)?.as_f64()).collect();
    let min = values.iter().copied().reduce(f64::min);
    let max = values.iter().copied().reduce(f64::max);
    format!("{}–{}", ms(min).trim_end_matches(" ms"), ms(max))
}

fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v < 10.0 => format!("{v:.3} ms"),
        Some(v) => format!("{v:.1} ms"),
        None => "–".to_owned(),
    }
}

fn kb(bytes: Option<f64>) -> String {
    bytes.map_or("–".to_owned(), |b| format!("{:.1} KB", b / 1e3))
}

fn mib(kib: Option<f64>) -> String {
    kib.map_or("–".to_owned(), |kib| format!("{:.1} MiB", kib / 1024.0))
}

// ---------------------------------------------------------------------------------------
// helpers

/// The runtime the `orch` binary runs on.
fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn intervals_ms(instants: &[Instant]) -> Vec<f64> {
    instants.windows(2).map(|w| millis(w[1].duration_since(w[0]))).collect()
}

fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Nearest-rank percentile, `q` in 0..=1.
fn percentile(values: &[f64], q: f64) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.saturating_sub(1)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_percentile() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let values: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.9), Some(18.0));
        assert_eq!(percentile(&[5.0], 0.9), Some(5.0));
    }

    #[test]
    fn the_session_script_parses_back() {
        let steps = session_steps(3, "Read", Some(&json!({"file_path": "/tmp/x"})));
        let parsed = parse_steps(&steps_json(&steps).unwrap()).unwrap();
        assert_eq!(parsed, steps);
        assert_eq!(parsed.len(), 4);
        assert_eq!(parsed[3], Step::text(FINAL_TEXT));
    }

    #[test]
    fn phases_split_each_turn() {
        let client = json!({"request_unix_ms": [0.0, 10.0, 20.0], "response_unix_ms": [6.0, 16.0, 26.0]});
        let log: Vec<Value> = [1.0, 11.0, 21.0]
            .iter()
            .map(|at| json!({"path": "/v1/messages", "tools": 1, "at_ms": at, "at_unix_ms": at}))
            .collect();
        assert_eq!(phases(&client, &log), json!({"send_ms": 1.0, "answer_ms": 5.0, "tools_and_loop_ms": 4.0}));
        assert_eq!(server_stats(&log)["median_ms"], json!(10.0));
    }
}
