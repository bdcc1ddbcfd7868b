#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // benchmark code

//! `bench-subagents`: the nested sub-agent benchmark (issue 8). The numbers live in
//! `BENCHMARKS.md`, section "Nested sub-agents"; `tests/bench/subagents.sh` runs it.
//!
//! One root agent answers its first turn with `--fanout` (50) `Agent` calls in one
//! response; each sub-agent makes `--tool-turns` (5) turns that each call the real `LS`
//! tool (in process, through the sub-agent's `ToolPool` derived from the root's), then
//! answers; the root then answers. The model is the in-process mock server with
//! `--latency-ms` (20) before every response, answering each conversation by its turn
//! number (`set_by_turn`). So that the root's turns and the sub-agents' turns differ,
//! the root starts from a history of earlier exchanges: its first call is turn
//! `tool_turns + 1` of the script, past the sub-agents' turns.
//!
//! The run uses the default sub-agent limits (10 at once, depth 3 here lowered to 1
//! so sub-agents get no `Agent` tool; 200 in all), and the loop's own limit of 10
//! parallel calls per response. The ideal wall time is the root's two turns plus
//! `ceil(fanout / 10)` waves of `tool_turns + 1` turns, all at `latency`; it leaves out
//! everything but the model's latency. Reported per run, as the median of `--runs`:
//! wall time against the ideal, model requests, the most sub-agents that ran at once,
//! and the process's peak RSS (VmHWM: the coordinator side and the mock server together).
//! It exits non-zero when a sub-agent did not complete.
//!
//! ```text
//! cargo run --release -p orch-testkit --bin bench-subagents [-- --fanout 50 --tool-turns 5 --latency-ms 20 --runs 5]
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use orch_agents::model::ModelProvider;
use orch_agents::model::RetryPolicy;
use orch_agents::model::anthropic::{AnthropicConfig, AnthropicProvider};
use orch_agents::permissions::Permissions;
use orch_agents::pipeline::ToolPool;
use orch_agents::subagent::{AgentTool, SubagentLimits, SubagentRun};
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{EventSink, Message, NullSink, QueryConfig, Terminal, query};
use orch_testkit::mock::{MockServer, Step, ToolCall, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Args {
    fanout: usize,
    tool_turns: usize,
    latency_ms: u64,
    runs: usize,
}

fn args() -> Args {
    let mut a = Args { fanout: 50, tool_turns: 5, latency_ms: 20, runs: 5 };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let value = argv.get(i + 1).unwrap_or_else(|| panic!("{} needs a value", argv[i]));
        match argv[i].as_str() {
            "--fanout" => a.fanout = value.parse().unwrap(),
            "--tool-turns" => a.tool_turns = value.parse().unwrap(),
            "--latency-ms" => a.latency_ms = value.parse().unwrap(),
            "--runs" => a.runs = value.parse().unwrap(),
            other => panic!("unknown flag {other}; the flags are --fanout --tool-turns --latency-ms --runs"),
        }
        i += 2;
    }
    a
}

fn peak_rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

struct Sample {
    wall: Duration,
    requests: usize,
    peak: u32,
}

async fn one_run(a: &Args, dir: &std::path::Path) -> Sample {
    let mock = MockServer::start().await;
    mock.set_latency(Duration::from_millis(a.latency_ms));
    let mut steps: Vec<Step> = (0..a.tool_turns).map(|_| Step::tool("LS", json!({ "path": "." }))).collect();
    steps.push(Step::text("listed the directory five times; nothing to change"));
    let calls = (0..a.fanout)
        .map(|k| {
            ToolCall::new("Agent", json!({ "prompt": format!("survey part {k}"), "description": format!("part {k}") }))
        })
        .collect();
    steps.push(Step::Reply(Turn::tools(calls)));
    steps.push(Step::text("all parts surveyed"));
    mock.set_by_turn(steps);

    let provider: Arc<dyn ModelProvider> = Arc::new(
        AnthropicProvider::new(AnthropicConfig {
            base_url: mock.url(),
            api_key: Some("bench".into()),
            auth_token: None,
            retry: RetryPolicy::default(),
            max_concurrent_requests: 64,
        })
        .unwrap(),
    );
    let host = HostTools::new(core_tools(), Arc::new(Session::new(dir)));
    let pool = ToolPool::new("root", core_tools(), Arc::new(InProcess(host)), Permissions::allow_all(dir)).unwrap();
    let limits = SubagentLimits { max_depth: 1, ..SubagentLimits::default() };
    let run = Arc::new(SubagentRun::new(limits, Vec::new()));
    let records = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink: Arc<dyn EventSink> = Arc::new(NullSink);
    let config = QueryConfig::new("root", "claude-sonnet-4-5");
    let pool = AgentTool::new(run.clone(), provider.clone(), config.clone(), sink.clone(), records.clone())
        .install(pool)
        .unwrap();
    // Earlier exchanges, so the root's first call is past the sub-agents' turns.
    let mut history = Vec::new();
    for k in 0..=a.tool_turns {
        history.push(Message::user(format!("earlier request {k}")));
        history.push(Message::assistant(format!("earlier answer {k}")));
    }
    history.push(Message::user("Survey every part with a sub-agent each."));

    let started = Instant::now();
    let outcome = query(provider.as_ref(), &pool, &config, history, &sink, &CancellationToken::new()).await;
    let wall = started.elapsed();
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let records = records.lock().unwrap();
    assert_eq!(records.len(), a.fanout);
    for r in records.iter() {
        assert!(r.status == "completed" && r.turns as usize == a.tool_turns + 1, "{r:?}");
    }
    Sample { wall, requests: mock.requests().len(), peak: run.peak_concurrent() }
}

#[tokio::main]
async fn main() {
    let a = args();
    let dir = std::env::temp_dir().join(format!("bench-subagents-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..40 {
        std::fs::write(dir.join(format!("m{i}.rs")), format!("pub fn f{i}() {{}}\n")).unwrap();
    }
    let cwd = dir.canonicalize().unwrap();
    let mut samples = Vec::new();
    for _ in 0..a.runs {
        samples.push(one_run(&a, &cwd).await);
    }
    samples.sort_by_key(|s| s.wall);
    let median = &samples[samples.len() / 2];
    let latency = a.latency_ms as f64;
    let waves = a.fanout.div_ceil(10) as f64;
    let ideal = 2.0 * latency + waves * (a.tool_turns as f64 + 1.0) * latency;
    let wall = median.wall.as_secs_f64() * 1000.0;
    println!(
        "| sub-agents | tool turns each | latency | model requests | most at once | wall (median of {}) | ideal | overhead | peak RSS |",
        a.runs
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} ms | {} | {} | {:.0} ms | {:.0} ms | {} | {:.1} MiB |",
        a.fanout,
        a.tool_turns,
        a.latency_ms,
        median.requests,
        median.peak,
        wall,
        ideal,
        if ideal > 0.0 { format!("{:+.1}%", (wall / ideal - 1.0) * 100.0) } else { "n/a".to_string() },
        peak_rss_kb() as f64 / 1024.0
    );
    let walls: Vec<String> = samples.iter().map(|s| format!("{:.0}", s.wall.as_secs_f64() * 1000.0)).collect();
    eprintln!("bench-subagents: wall times (ms, sorted): {}", walls.join(", "));
    let _ = std::fs::remove_dir_all(&dir);
}
