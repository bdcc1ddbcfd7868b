//! `orch exec PROMPT`: one ad-hoc agent through the shared loop, like `claude -p`. The
//! final answer goes to stdout; progress goes to stderr.

use std::io::Write;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Context as _;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::pipeline::ToolPool;
use orch_agents::subagent::{AGENT_TOOL, AgentTool, SubagentLimits, SubagentRun};
use orch_agents::{Event, EventSink, Limits, Message, QueryConfig, Terminal, query};
use tokio_util::sync::CancellationToken;

use crate::exit::{Code, UsageError};
use crate::host::{AgentSandbox, HostExecutor};
use crate::options::ExecOptions;
use crate::{host, provider, signals};

pub async fn run(args: ExecOptions) -> crate::error::Result<Code> {
    let mut model_args = args.model.clone();
    let provider = crate::record::provider(&mut model_args, args.record.as_deref(), args.replay.as_deref())?;
    let mut config = QueryConfig::new(&args.agent_id, &args.model.model);
    config.fallback_model = args.model.fallback_model.clone();
    config.prices = provider::prices(&args.model)?;
    config.limits = Limits {
        max_turns: Some(args.max_turns),
        max_tokens: args.max_tokens,
        max_cost_usd: args.max_cost_usd,
        timeout: args.timeout.map(Into::into),
    };
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map_err(|e| UsageError(format!("the working directory {} is not usable: {e}", cwd.display())))?;
    let rules = RuleSet {
        mode: args.permissions.mode,
        allow: args.permissions.allow.clone(),
        deny: args.permissions.deny.clone(),
        ask: args.permissions.ask.clone(),
        ..RuleSet::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let permissions =
        Permissions::new(&rules, &cwd, home.as_deref(), vec![cwd.clone()]).map_err(|e| UsageError(e.to_string()))?;
    // `Agent` (sub-agents, default limits) runs here; the tool host gets the others.
    let host_tools: Vec<String> = args.tools.iter().filter(|t| t.as_str() != AGENT_TOOL).cloned().collect();
    let tools = host::select_tools(&host_tools)?;
    let results_dir = std::env::temp_dir().join(format!("orch-exec-{}", std::process::id()));
    let run = format!("exec-{}", std::process::id());
    let sandbox_name = host::sandbox_name(&format!("{run}-{}", args.agent_id));
    // Only an agent that can write gets the working directory writable (as root, that
    // hands it to the sandbox uid for the run).
    let writes = orch_types::tools::any_writes(&args.tools);
    // Results too large to send inline land here; the agent may Read them.
    let big_results = results_dir.join("tool-results");
    std::fs::create_dir_all(&big_results).context("cannot create the directory for large tool results")?;
    let sandbox = AgentSandbox::prepare(
        &args.sandbox,
        &cwd,
        writes,
        vec![big_results.clone()],
        &sandbox_name,
        results_dir.join("sandbox"),
    )?;
    // On an early return, dropping `sandbox` tears it down.
    let started = host::spawn(&run, &args.agent_id, &cwd, &host_tools, &sandbox.policy).await?;
    let container = started.container;
    let executor = Arc::new(HostExecutor::new(started.client));
    let pool = ToolPool::new(&args.agent_id, tools, executor.clone(), permissions)
        .map_err(|e| UsageError(e.to_string()))?
        .with_results_dir(big_results);

    let cancel = CancellationToken::new();
    let interrupts = signals::watch(cancel.clone())?;
    // After the tool host started: it reads the instruction files.
    config.system =
        crate::agent_prompt::build(&cwd, &config.model, !args.no_instructions, executor.as_ref(), &cancel).await;
    let out: Box<dyn EventSink> = if args.json { Box::new(JsonLines) } else { Box::new(StderrLog) };
    let transcript = match &args.transcript {
        Some(path) => Some(
            crate::run::Transcript::create(path)
                .with_context(|| format!("cannot create the transcript {}", path.display()))?,
        ),
        None => None,
    };
    let sink: Arc<dyn EventSink> = Arc::new(Tee { agent: args.agent_id.clone(), out, transcript });
    let pool = if args.tools.iter().any(|t| t == AGENT_TOOL) {
        let run = Arc::new(SubagentRun::new(SubagentLimits::default(), Vec::new()));
        let records = Arc::new(std::sync::Mutex::new(Vec::new()));
        AgentTool::new(run, provider.clone(), config.clone(), sink.clone(), records)
            .install(pool)
            .map_err(|e| UsageError(e.to_string()))?
    } else {
        pool
    };
    let outcome =
        query(provider.as_ref(), &pool, &config, vec![Message::user(&args.prompt)], sink.as_ref(), &cancel).await;
    drop(pool);
    if let Ok(executor) = Arc::try_unwrap(executor) {
        executor.shutdown(Duration::from_secs(2)).await;
    }
    if let Some(container) = container
        && let Err(e) = container.stop().await
    {
        tracing::warn!("could not remove the agent's container: {e}");
    }
    sandbox.teardown();
    // Left only if a result was saved there for the agent to read.
    let _ = std::fs::remove_dir(results_dir.join("tool-results"));
    let _ = std::fs::remove_dir(&results_dir);

    if !args.json && !outcome.final_text.trim().is_empty() {
        let mut out = std::io::stdout().lock();
        write!(out, "{}", crate::fence::untrusted(outcome.final_text.trim_end()))?;
        out.flush()?;
    }
    if outcome.terminal != Terminal::Completed {
        eprintln!("orch: agent {}", outcome.terminal);
    }
    Ok(interrupts.code().unwrap_or_else(|| Code::for_terminal(&outcome.terminal)))
}

/// The output sink, and the transcript file (`--transcript`) when there is one.
struct Tee {
    agent: String,
    out: Box<dyn EventSink>,
    transcript: Option<crate::run::Transcript>,
}

impl EventSink for Tee {
    fn emit(&self, event: Event) {
        if let Some(t) = &self.transcript
            && !matches!(event, Event::TextDelta { .. })
        {
            t.record(&serde_json::json!({ "agent": self.agent, "event": event }));
        }
        self.out.emit(event);
    }
}

/// `--json`: every event as one JSON line on stdout, flushed per line.
struct JsonLines;

impl EventSink for JsonLines {
    fn emit(&self, event: Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        if let Ok(line) = serde_json::to_string(&event) {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// One plain line on stderr per event worth seeing.
struct StderrLog;

impl EventSink for StderrLog {
    fn emit(&self, event: Event) {
        let line = match event {
            Event::ToolUseStarted { name, .. } => format!("tool {name} started"),
            Event::ToolUseFinished { name, is_error: true, output, .. } => {
                format!("tool {name} failed: {}", output.lines().next().unwrap_or_default())
            }
            Event::Retry { attempt, delay_ms, error } => {
                format!("model call failed (attempt {attempt}), retrying in {delay_ms} ms: {error}")
            }
            Event::Fallback { from, to, .. } => format!("model {from} overloaded; switching to {to}"),
            Event::Subagent { agent, event } => match *event {
                Event::Terminal { reason, turns } => format!("sub-agent {agent} {reason} ({turns} turns)"),
                Event::ToolUseStarted { name, .. } => format!("{agent}: tool {name} started"),
                Event::ToolUseFinished { name, is_error: true, output, .. } => {
                    format!("{agent}: tool {name} failed: {}", output.lines().next().unwrap_or_default())
                }
                _ => return,
            },
            _ => return,
        };
        eprintln!("orch: {line}");
    }
}
