#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // benchmark code

//! `bench-context`: the context management benchmark (issue 7). The numbers live in
//! `BENCHMARKS.md`, section "Context management".
//!
//! The session: one agent on a 200,000-token window (orch's default context settings)
//! makes 200 turns, each reading a different 20 KB file with the real `Read` tool (in
//! process, through a `ToolPool`), then answers. The model is the in-process mock
//! server with simulated usage: token counts from the request bytes (four per token),
//! a prompt cache keyed on the bytes before each breakpoint, and the 200k window
//! enforced (a larger request is refused as too long). Summary requests, if any, get a
//! fixed summary.
//!
//! It prints a Markdown table: whether the session completed, the peak context sent
//! against the autocompact threshold, the input tokens sent over the session against
//! what an uncompacted history would have sent (and the turn where that history
//! overflows the window), the share of input tokens that were cache reads, and the
//! compactions by kind. It exits non-zero when a target is missed.
//!
//! ```text
//! cargo run --release -p orch-testkit --bin bench-context [-- --turns N --file-kb K]
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::pipeline::ToolPool;
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::read::Read;
use orch_agents::tools::{DynTool, Session};
use orch_agents::{ContentBlock, Event, EventSink, Message, QueryConfig, Terminal, query};
use orch_testkit::mock::{MockServer, Step, simulated_request_tokens, simulated_tokens};
use serde_json::json;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Events(Mutex<Vec<Event>>);

impl EventSink for Events {
    fn emit(&self, event: Event) {
        if !matches!(event, Event::TextDelta { .. }) {
            self.0.lock().unwrap().push(event);
        }
    }
}

/// A deterministic text file of about `bytes` bytes, different for each `n`.
fn file_text(n: usize, bytes: usize) -> String {
    let mut out = String::with_capacity(bytes + 100);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ (n as u64).wrapping_mul(0x2545_f491_4f6c_dd1d);
    let mut line = 0;
    while out.len() < bytes {
        line += 1;
        out.push_str(&format!("// file {n} line {line}:"));
        for _ in 0..10 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.push_str(&format!(" w{:06x}", x & 0xff_ffff));
        }
        out.push('\n');
    }
    out
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let turns = arg(&args, "--turns", 200);
    let file_bytes = arg(&args, "--file-kb", 20) * 1024;

    let dir = std::env::temp_dir().join(format!("orch-bench-context-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let paths: Vec<PathBuf> = (0..turns).map(|n| dir.join(format!("src/file_{n:03}.rs"))).collect();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for (n, p) in paths.iter().enumerate() {
        std::fs::write(p, file_text(n, file_bytes)).unwrap();
    }

    let mock = MockServer::start().await;
    let config = QueryConfig::new("bench", "claude-sonnet-4-5");
    let window = config.context.window;
    let threshold = config.context.threshold();
    mock.simulate_usage(Some(window));
    let mut steps: Vec<Step> = paths.iter().map(|p| Step::tool("Read", json!({"file_path": p}))).collect();
    steps.push(Step::text("Read every file."));
    mock.push_all(steps);
    mock.set_toolless(Some(Step::text(
        "1. Request and intent: read every file under src/ in order.\n2-8. Files read so far are listed in the \
         history; nothing failed.\n9. Next step: read the next file.",
    )));

    let tools: Vec<Arc<dyn DynTool>> = vec![Arc::new(Read)];
    let host = HostTools::new(tools.clone(), Arc::new(Session::new(&dir)));
    let permissions = Permissions::new(&RuleSet::default(), &dir, None, vec![dir.clone()]).unwrap();
    let pool = ToolPool::new("bench", tools, Arc::new(InProcess(host)), permissions).unwrap();
    let provider =
        orch_agents::model::anthropic::AnthropicProvider::new(orch_agents::model::anthropic::AnthropicConfig {
            base_url: mock.url(),
            api_key: Some("bench".into()),
            ..Default::default()
        })
        .unwrap();
    let mut config = config;
    config.limits.max_turns = Some(turns as u32 + 10);
    config.system = vec![orch_agents::SystemPart { text: orch_agents::prompt::STATIC_PROMPT.into(), cache: true }];
    let events = Events::default();
    let started = std::time::Instant::now();
    let out = query(
        &provider,
        &pool,
        &config,
        vec![Message::user("Read every file under src/, one per turn, in order.")],
        &events,
        &CancellationToken::new(),
    )
    .await;
    let elapsed = started.elapsed();
    let _ = std::fs::remove_dir_all(&dir);

    let requests = mock.requests();
    let main: Vec<_> = requests.iter().filter(|r| !r.tools().is_empty()).collect();
    let peak = main.iter().map(|r| simulated_request_tokens(&r.json)).max().unwrap_or(0);
    let events = events.0.into_inner().unwrap();
    let (mut prompt, mut cache_read, mut cache_write) = (0u64, 0u64, 0u64);
    let mut compactions: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        match e {
            Event::Usage { usage, .. } => {
                prompt += usage.prompt_tokens();
                cache_read += usage.cache_read_input_tokens;
                cache_write += usage.cache_creation_input_tokens;
            }
            Event::Compaction { reason, .. } => *compactions.entry(reason.to_string()).or_default() += 1,
            _ => {}
        }
    }
    // The uncompacted history: the first request, then every answer and every full
    // tool result appended, request after request.
    let first = main.first().map(|r| simulated_request_tokens(&r.json)).unwrap_or(0);
    let mut history = first;
    let mut uncompacted = 0u64;
    let mut overflow_turn = None;
    let mut k = 0;
    for e in &events {
        match e {
            Event::AssistantMessage { message, .. } => {
                uncompacted += history;
                k += 1;
                if history > window && overflow_turn.is_none() {
                    overflow_turn = Some(k);
                }
                for b in &message.content {
                    history += simulated_tokens(&serde_json::to_string(b).unwrap());
                }
            }
            Event::ToolUseFinished { id, output, .. } if !id.starts_with("toolu_restore") => {
                let block = ContentBlock::tool_result(id, output.clone(), false);
                history += simulated_tokens(&serde_json::to_string(&block).unwrap());
            }
            _ => {}
        }
    }
    let saved = 1.0 - prompt as f64 / uncompacted as f64;
    let share = cache_read as f64 / prompt as f64;
    let completed = out.terminal == Terminal::Completed;
    let reads = events.iter().filter(|e| matches!(e, Event::ToolUseFinished { name, .. } if name == "Read")).count();
    println!("| measure | value |");
    println!("|---|---|");
    println!(
        "| session | {turns} turns, one `Read` of a different {} KB file each, then an answer |",
        file_bytes / 1024
    );
    println!(
        "| completed | {} ({}; {} model calls in the loop, {} requests in all, {reads} reads) |",
        if completed { "yes" } else { "no" },
        out.terminal,
        out.turns,
        requests.len()
    );
    println!("| peak context sent | {peak} tokens (threshold {threshold}, window {window}) |");
    println!("| input tokens sent | {prompt} |");
    println!(
        "| uncompacted history would send | {uncompacted} ({}) |",
        match overflow_turn {
            Some(t) => format!("over the window from turn {t}"),
            None => "never over the window".to_string(),
        }
    );
    println!("| fewer input tokens | {:.1}% |", saved * 100.0);
    println!(
        "| cache reads / input tokens | {:.1}% (cache writes {:.1}%) |",
        share * 100.0,
        cache_write as f64 / prompt as f64 * 100.0
    );
    println!(
        "| compactions | {} |",
        if compactions.is_empty() {
            "none".to_string()
        } else {
            compactions.iter().map(|(k, v)| format!("{k}: {v}")).collect::<Vec<_>>().join(", ")
        }
    );
    println!("| wall time | {:.2} s |", elapsed.as_secs_f64());
    let ok = completed && peak < threshold && saved >= 0.60;
    if ok { std::process::ExitCode::SUCCESS } else { std::process::ExitCode::FAILURE }
}
