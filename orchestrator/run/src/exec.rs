//! `orch exec PROMPT`: one ad-hoc agent through the shared loop, like `claude -p`. The
//! final answer goes to stdout; progress goes to stderr.

use std::io::Write;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::Context as _;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::subagent::{AGENT_TOOL, AgentTool, SubagentLimits, SubagentRun};
use orch_agents::{Event, EventSink, Limits, Message, QueryConfig, Terminal, query};
use tokio_util::sync::CancellationToken;

use crate::exit::{Code, UsageError};
use crate::hooks_config::Extensions;
use crate::options::ExecOptions;
use crate::repo_config::{RepoConfig, Trust};
use crate::run_event::RunEvent;
use crate::session::{AgentSession, SessionSpec};
use crate::{provider, signals};
use orch_workflows::extensions::HookSettings;

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
        ..Limits::default()
    };
    config.apply_settings(&args.model_settings);
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
    let extensions = extensions(&cwd, &args.tools)?;
    let results_dir = std::env::temp_dir().join(format!("orch-exec-{}", std::process::id()));
    let run = format!("exec-{}", std::process::id());
    // Only an agent that can write gets the working directory writable (as root, that
    // hands it to the sandbox uid for the run).
    let writes = orch_types::tools::any_writes(&args.tools);
    // Results too large to send inline land here; the agent may Read them.
    let big_results = results_dir.join("tool-results");
    std::fs::create_dir_all(&big_results).context("cannot create the directory for large tool results")?;
    let transcript = match &args.transcript {
        Some(path) => Some(
            crate::run::Transcript::create(path)
                .with_context(|| format!("cannot create the transcript {}", path.display()))?,
        ),
        None => None,
    };
    let out: Box<dyn EventSink> =
        if args.json { Box::new(JsonLines { agent: args.agent_id.clone() }) } else { Box::new(StderrLog) };
    let sink: Arc<dyn EventSink> = Arc::new(Tee { agent: args.agent_id.clone(), out, transcript });
    let cancel = CancellationToken::new();
    let interrupts = signals::watch(cancel.clone())?;
    let spec = SessionSpec {
        run: run.clone(),
        agent: args.agent_id.clone(),
        cwd: cwd.clone(),
        sandbox: args.sandbox.clone(),
        writes,
        read: vec![big_results.clone()],
        private: results_dir.join("sandbox"),
        env: Vec::new(),
        tools: args.tools.clone(),
        permissions,
        results_dir: Some(big_results),
        hooks: extensions.hooks,
        mcp_servers: extensions.mcp_servers,
        session_id: format!("{run}/{}", args.agent_id),
        file_size_limit: None,
    };
    let mut session = AgentSession::start(spec, sink.clone(), &cancel).await?;
    // After the tool host started: it reads the instruction files.
    config.system = session.instructions(&config.model, !args.no_instructions, &cancel).await;
    if args.tools.iter().any(|t| t == AGENT_TOOL) {
        let run = Arc::new(SubagentRun::new(SubagentLimits::default(), Vec::new()));
        let records = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tool = AgentTool::new(run, provider.clone(), config.clone(), sink.clone(), records);
        if let Err(e) = session.map_pool(|pool| tool.install(pool)) {
            session.stop().await;
            return Err(UsageError(e.to_string()).into());
        }
    }
    let outcome = match session.pool() {
        Some(pool) => {
            query(provider.as_ref(), pool, &config, vec![Message::user(&args.prompt)], sink.as_ref(), &cancel).await
        }
        None => {
            session.stop().await;
            return Err(crate::error::Error::Message("the tool pool is missing".into()));
        }
    };
    session.stop().await;
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

/// The hooks and MCP servers of the repository around `cwd` (from the base ref in a
/// pull-request run, see [`crate::repo_config`]); none when that cannot be resolved.
/// Every `mcp__` tool in `tools` must name a declared server.
fn extensions(cwd: &std::path::Path, tools: &[String]) -> crate::error::Result<Extensions> {
    let trust = Trust::from_env(false, None);
    let extensions = match RepoConfig::resolve(cwd, &trust) {
        Ok(config) => crate::hooks_config::load(&config, &HookSettings::default(), &BTreeMap::new())
            .map_err(|e| UsageError(format!("{e:#}")))?,
        Err(e) => {
            eprintln!("orch: no repository hooks or MCP servers: {e}");
            Extensions::default()
        }
    };
    for tool in tools {
        if let Some((server, _)) = orch_agents::mcp::split_name(tool)
            && !extensions.mcp_servers.contains_key(server)
        {
            let known: Vec<&str> = extensions.mcp_servers.keys().map(String::as_str).collect();
            return Err(UsageError(format!(
                "--tools lists `{tool}`, but no MCP server `{server}` is declared (declared: {}); add it to `.mcp.json`",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ))
            .into());
        }
    }
    Ok(extensions)
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
            t.record(&RunEvent::of(&self.agent, event.clone()).to_value());
        }
        self.out.emit(event);
    }
}

/// `--json`: every event as one [`RunEvent`] line on stdout, flushed per line.
struct JsonLines {
    agent: String,
}

impl EventSink for JsonLines {
    fn emit(&self, event: Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        if let Ok(line) = serde_json::to_string(&RunEvent::of(&self.agent, event)) {
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
