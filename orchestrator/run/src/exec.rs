//! `orch exec PROMPT`: one ad-hoc agent through the shared loop, like `claude -p`. The
//! final answer (or one JSON result, or every event) goes to stdout; progress goes to
//! the terminal's reporter on stderr. Write tools need a git repository around the
//! working directory (or `--allow-outside-repo`); large tool results live in a private
//! directory that is removed at the end. With the `Skill` tool, the repository's skills
//! (`.orch/skills/`, `.claude/skills/`) are found as `orch run` finds them, copied into
//! that directory (readable by the agent, not writable) and listed in the prompt.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Context as _;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::subagent::{AGENT_TOOL, AgentTool, SubagentLimits, SubagentRun};
use orch_agents::tools::skill::{SKILL_TOOL, SkillTool};
use orch_agents::tools::web_search::{WEB_SEARCH_TOOL, WebSearchTool};
use orch_agents::{Event, EventSink, Limits, QueryConfig, Terminal};
use tokio_util::sync::CancellationToken;

use crate::exit::{Code, UsageError};
use crate::hooks_config::Extensions;
use crate::options::{ExecOptions, ExecOutput};
use crate::repo_config::{RepoConfig, Trust};
use crate::run::Reporter;
use crate::run::agent_defs::RunSkills;
use crate::run::output::{Answer, OutputSchema, ask};
use crate::run::report::{AgentReport, AgentStatus};
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
    let models: Vec<(String, String)> = std::iter::once((args.model.model.clone(), "--model".to_string()))
        .chain(args.model.fallback_model.iter().map(|m| (m.clone(), "--fallback-model".to_string())))
        .collect();
    let limit = args.max_cost_usd.map(|_| "--max-cost-usd");
    for warning in provider::check_prices(&config.prices, &models, limit)? {
        eprintln!("orch: warning: {warning}");
    }
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
    // Only an agent that can write gets the working directory writable (as root, that
    // hands it to the sandbox uid for the run).
    let writes = orch_types::tools::any_writes(&args.tools);
    if writes && !args.allow_outside_repo {
        outside_repo_guard(&cwd, home.as_deref())?;
    }
    let schema = match &args.output_schema {
        Some(schema) => Some(OutputSchema::new(schema).map_err(|e| UsageError(format!("--output-schema: {e}")))?),
        None => None,
    };
    let permissions =
        Permissions::new(&rules, &cwd, home.as_deref(), vec![cwd.clone()]).map_err(|e| UsageError(e.to_string()))?;
    let extensions = extensions(&cwd, &args.tools)?;
    // Private to this user (0700, a fresh random name), removed at the end.
    let results_dir = tempfile::Builder::new()
        .prefix("orch-exec-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .context("cannot create the private directory for large tool results")?;
    let run = format!("exec-{}", std::process::id());
    // Results too large to send inline land here; the agent may Read them.
    let big_results = results_dir.path().join("tool-results");
    std::fs::create_dir(&big_results).context("cannot create the directory for large tool results")?;
    let skills = if args.tools.iter().any(|t| t == SKILL_TOOL) {
        skills(&cwd, &results_dir.path().join("skills"))?
    } else {
        RunSkills::default()
    };
    let entries = skills.entries(None);
    let mut read = vec![big_results.clone()];
    if !entries.is_empty() {
        read.extend(skills.root.iter().cloned());
    }
    let transcript = match &args.transcript {
        Some(path) => Some(
            crate::run::Transcript::create(path)
                .with_context(|| format!("cannot create the transcript {}", path.display()))?,
        ),
        None => None,
    };
    let stream = args.output_format == ExecOutput::StreamJson;
    let sink: Arc<dyn EventSink> =
        Arc::new(Tee { agent: args.agent_id.clone(), stream, reporter: args.reporter.clone(), transcript });
    let cancel = CancellationToken::new();
    let interrupts = signals::watch(cancel.clone())?;
    let spec = SessionSpec {
        run: run.clone(),
        agent: args.agent_id.clone(),
        cwd: cwd.clone(),
        sandbox: args.sandbox.clone(),
        writes,
        read,
        private: results_dir.path().join("sandbox"),
        env: Vec::new(),
        tools: args.tools.clone(),
        permissions,
        results_dir: Some(big_results.clone()),
        hooks: extensions.hooks,
        mcp_servers: extensions.mcp_servers,
        session_id: format!("{run}/{}", args.agent_id),
        file_size_limit: None,
        egress: None,
    };
    args.reporter.agent_started(&args.agent_id);
    let started = std::time::Instant::now();
    let mut session = match AgentSession::start(spec, sink.clone(), &cancel).await {
        Ok(session) => session,
        Err(e) => {
            args.reporter.finish();
            return Err(e);
        }
    };
    // As root the agent's commands run as a sandbox uid: it alone (besides root) may
    // read the large results.
    if let Some(uid) = session.sandbox_uid() {
        share_results(results_dir.path(), &big_results, uid)?;
    }
    // After the tool host started: it reads the instruction files.
    config.system = session.instructions(&config.model, !args.no_instructions, &cancel).await;
    if args.attended {
        orch_agents::prompt::set_setting(&mut config.system, orch_agents::prompt::Setting::Terminal);
    }
    orch_agents::prompt::add_skills(&mut config.system, &entries);
    if args.tools.iter().any(|t| t == WEB_SEARCH_TOOL) {
        let tool = WebSearchTool::new(
            provider.clone(),
            &config.agent_id,
            &config.model,
            config.timeouts,
            config.prices.clone(),
        );
        if let Err(e) = session.offer_web_search(tool, provider.name()) {
            session.stop().await;
            args.reporter.finish();
            return Err(UsageError(e.to_string()).into());
        }
    }
    if args.tools.iter().any(|t| t == SKILL_TOOL) {
        let tool = SkillTool::new(entries.clone());
        if let Err(e) = session.map_pool(|pool| tool.install(pool)) {
            session.stop().await;
            args.reporter.finish();
            return Err(UsageError(e.to_string()).into());
        }
    }
    if args.tools.iter().any(|t| t == AGENT_TOOL) {
        let run = Arc::new(SubagentRun::new(SubagentLimits::default(), Vec::new()));
        let records = Arc::new(std::sync::Mutex::new(Vec::new()));
        let tool = AgentTool::new(run, provider.clone(), config.clone(), sink.clone(), records);
        if let Err(e) = session.map_pool(|pool| tool.install(pool)) {
            session.stop().await;
            args.reporter.finish();
            return Err(UsageError(e.to_string()).into());
        }
    }
    let mut prompt = args.prompt.clone();
    if let Some(schema) = &schema {
        prompt.push_str(&schema.instructions());
    }
    let answer = match session.pool() {
        Some(pool) => ask(provider.as_ref(), pool, config, prompt, schema.as_ref(), sink.as_ref(), &cancel).await,
        None => {
            session.stop().await;
            args.reporter.finish();
            return Err(crate::error::Error::Message("the tool pool is missing".into()));
        }
    };
    let end = session.stop().await;
    drop(results_dir);

    let mut report = AgentReport::empty(&args.agent_id, &args.agent_id, None, AgentStatus::Succeeded, String::new());
    report.reason = answer.schema_failure();
    report.status =
        if report.reason.is_some() { AgentStatus::Failed } else { answer.terminal.disposition().status.into() };
    if report.reason.is_none() && answer.terminal != Terminal::Completed {
        report.reason = Some(answer.terminal.to_string());
    }
    report.turns = answer.turns;
    report.usage = answer.usage;
    report.cost_usd = answer.cost_usd;
    report.model = Some(answer.model.clone());
    report.text = answer.text.clone();
    report.output = answer.output.clone();
    report.output_error = answer.output_error.clone();
    report.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if let Some(died) = &end.died {
        // Its tool host died under it: the answer cannot be trusted to cover the work.
        crate::reap::host_died(&mut report, died.clone());
    }
    args.reporter.agent_finished(&report);
    args.reporter.finish();

    match args.output_format {
        ExecOutput::Text if !report.text.trim().is_empty() => {
            crate::run::print_answer(report.text.trim_end()).context("cannot write the answer to stdout")?;
        }
        ExecOutput::Json => print_result(&report, &answer, &run, interrupts.code()),
        ExecOutput::Text | ExecOutput::StreamJson => {}
    }
    if let Some(reason) = &report.reason {
        eprintln!("orch: agent {reason}");
    }
    let code = match (&report.status, interrupts.code()) {
        (_, Some(code)) => code,
        (AgentStatus::Failed, _) if answer.terminal == Terminal::Completed => Code::Failed,
        _ if end.died.is_some() => Code::Failed,
        _ => Code::for_terminal(&answer.terminal),
    };
    Ok(code)
}

/// Refuses write tools where an agent could damage what no commit protects: outside a
/// git repository, or in the home or root directory.
fn outside_repo_guard(cwd: &Path, home: Option<&Path>) -> crate::error::Result<()> {
    let why = if cwd == Path::new("/") {
        Some("the root directory".to_string())
    } else if home.is_some_and(|h| std::fs::canonicalize(h).is_ok_and(|h| h == cwd)) {
        Some("your home directory".to_string())
    } else if git2::Repository::discover(cwd).is_err() {
        Some("not inside a git repository".to_string())
    } else {
        None
    };
    match why {
        Some(why) => Err(UsageError(format!(
            "refusing to give the agent write tools in {} ({why}): nothing would let you review or undo its \
             changes; run it inside a git repository, give it read-only tools (--tools Read,Grep,Glob,LS), or pass \
             --allow-outside-repo",
            cwd.display()
        ))
        .into()),
        None => Ok(()),
    }
}

/// Lets the sandbox uid `uid` (and root) into the large-results directory: the parent
/// may be passed through but not listed, the directory itself is the uid's alone.
fn share_results(parent: &Path, results: &Path, uid: u32) -> crate::error::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o711))
        .context("cannot open the large-results directory to the sandbox uid")?;
    std::os::unix::fs::chown(results, Some(uid), None)
        .and_then(|()| std::fs::set_permissions(results, std::fs::Permissions::from_mode(0o700)))
        .context("cannot hand the large-results directory to the sandbox uid")?;
    Ok(())
}

/// `--output-format json`: one object on stdout, in the manner of `claude -p
/// --output-format json`. One JSON line, as `--json` writes its events: a line that
/// starts with `{` cannot act as a workflow command, so it needs no fence.
fn print_result(report: &AgentReport, answer: &Answer, run: &str, interrupted: Option<Code>) {
    let mut result = serde_json::json!({
        "type": "result",
        "status": report.status.as_str(),
        "is_error": report.status != AgentStatus::Succeeded,
        "terminal": answer.terminal,
        "result": report.text,
        "num_turns": report.turns,
        "duration_ms": report.duration_ms,
        "usage": report.usage,
        "total_cost_usd": report.cost_usd,
        "model": report.model,
        "session_id": format!("{run}/{}", report.id),
    });
    if let Some(reason) = &report.reason {
        result["reason"] = reason.clone().into();
    }
    if let Some(output) = &report.output {
        result["structured_output"] = output.clone();
    }
    if let Some(code) = interrupted {
        result["interrupted"] = true.into();
        result["exit_code"] = (code as u8).into();
    }
    crate::run::print_json_line(&result);
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

/// The skills of the repository around `cwd` (from the base ref in a pull-request run,
/// as `orch run` reads them), copied into `dest`; none outside a repository.
fn skills(cwd: &Path, dest: &Path) -> crate::error::Result<RunSkills> {
    let trust = Trust::from_env(false, None);
    let config = match RepoConfig::resolve(cwd, &trust) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("orch: no repository skills: {e}");
            return Ok(RunSkills::default());
        }
    };
    let files = crate::run::agent_defs::load(&config)?;
    RunSkills::copy(&config, files.skills, dest)
}

/// Where the agent's events go: the reporter (progress on stderr), every event as a JSON
/// line on stdout with `--json`, and the transcript file (`--transcript`).
struct Tee {
    agent: String,
    stream: bool,
    reporter: Arc<dyn Reporter>,
    transcript: Option<crate::run::Transcript>,
}

impl EventSink for Tee {
    fn emit(&self, event: Event) {
        self.reporter.event(&self.agent, &event);
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        if self.transcript.is_none() && !self.stream {
            return;
        }
        let line = RunEvent::of(&self.agent, event).to_value();
        if let Some(t) = &self.transcript {
            t.record(&line);
        }
        if self.stream {
            crate::run::print_json_line(&line);
        }
    }
}
