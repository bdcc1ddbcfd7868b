//! `orch exec PROMPT`: one ad-hoc agent, like `claude -p`. It is a one-agent run that
//! works in place: its flags make the [`AgentSpec`](orch_workflows::AgentSpec) a workflow
//! agent would be, and the agent is made as every `orch run` agent is ([`crate::agent`]:
//! the same settings files, hooks, MCP servers, agent files, skills, slash commands,
//! permissions, limits and sandbox, under the same trust rule); only where it works (the
//! directory itself, not a worktree) and what is printed differ. The final answer (or one
//! JSON result, or every event) goes to stdout; progress goes to the terminal's reporter
//! on stderr, with the files it changed counted as a run counts them. Write tools need a
//! git repository around the working directory (or `--allow-outside-repo`); large tool
//! results and the repository's skills live in a private directory that is removed at
//! the end.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::Context as _;
use orch_agents::prompt::Setting;
use orch_agents::{Event, EventSink, Terminal};
use orch_workflows::extensions::HookSettings;
use tokio_util::sync::CancellationToken;

use crate::agent::{LoopOptions, Models, Place, Sources};
use crate::exit::{Code, UsageError};
use crate::options::{ExecOptions, ExecOutput, SettingSource};
use crate::repo_config::{RepoConfig, Trust};
use crate::run::Reporter;
use crate::run::output::{OutputSchema, ask};
use crate::run::report::{AgentReport, AgentStatus, ChangedFile};
use crate::run_event::RunEvent;
use crate::{provider, signals};

pub async fn run(args: ExecOptions) -> crate::error::Result<Code> {
    let mut model_args = args.model.clone();
    let provider = crate::record::provider(&mut model_args, args.record.as_deref(), args.replay.as_deref())?;
    let prices = provider::prices(&args.model)?;
    let used: Vec<(String, String)> = std::iter::once((args.model.model.clone(), "--model".to_string()))
        .chain(args.model.fallback_model.iter().map(|m| (m.clone(), "--fallback-model".to_string())))
        .collect();
    let limit = args.agent.limits.max_cost_usd.map(|_| "--max-cost-usd");
    for warning in provider::check_prices(&prices, &used, limit)? {
        tracing::warn!("{warning}");
    }
    let models = Models {
        provider: provider.clone(),
        default_model: args.model.model.clone(),
        fallback_model: args.model.fallback_model.clone(),
        prices,
    };
    let cwd = match &args.cwd {
        Some(dir) => dir.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    let cwd = std::fs::canonicalize(&cwd)
        .map_err(|e| UsageError(format!("the working directory {} is not usable: {e}", cwd.display())))?;
    let schema = match &args.output_schema {
        Some(schema) => Some(OutputSchema::new(schema).map_err(|e| UsageError(format!("--output-schema: {e}")))?),
        None => None,
    };
    // Private to this user (0700, a fresh random name), removed at the end.
    let results_dir = tempfile::Builder::new()
        .prefix("orch-exec-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .context("cannot create the private directory for large tool results")?;
    let trust = Trust::from_env(args.trust_repo_config, args.config_ref.clone());
    let mut sources = sources(&cwd, &results_dir.path().join("skills"), &trust)?;
    add_mcp_configs(&mut sources, &args.mcp_configs)?;
    let mut spec = args.agent.clone();
    // A prompt that starts with `/name` is the repository's slash command `name`.
    let prompt =
        crate::agent::prepare(&sources, &mut spec, args.prompt.clone()).map_err(|e| UsageError(e.to_string()))?;
    check_mcp_tools(&spec.tools, &sources)?;
    let home = std::env::var_os("HOME").map(PathBuf::from);
    // Only an agent that can write gets the working directory writable (as root, that
    // hands it to the sandbox uid for the run).
    if orch_types::tools::any_writes(&spec.tools) && !args.allow_outside_repo {
        outside_repo_guard(&cwd, home.as_deref())?;
    }
    let run = format!("exec-{}", std::process::id());
    // Results too large to send inline land here; the agent may Read them.
    let big_results = results_dir.path().join("tool-results");
    std::fs::create_dir(&big_results).context("cannot create the directory for large tool results")?;
    let transcript = match &args.transcript {
        Some(path) => Some(
            crate::run::Transcript::create(path)
                .with_context(|| format!("cannot create the transcript {}", path.display()))?,
        ),
        None => None,
    };
    let session_id = crate::exec_format::uuid();
    let claude = Arc::new(crate::exec_format::Stream::new(&session_id));
    let tee = Tee {
        agent: spec.id.clone(),
        output: args.output_format,
        claude: claude.clone(),
        reporter: args.reporter.clone(),
        transcript,
    };
    let sink: Arc<dyn EventSink> = Arc::new(tee);
    let cancel = CancellationToken::new();
    let interrupts = signals::watch(cancel.clone())?;
    // What the directory holds before, to count what the agent changed as a run does.
    let may_write = crate::agent::may_write(&spec.tools, !sources.extensions.hooks.is_empty());
    let before = if may_write { tree_of(&cwd) } else { None };
    let place = Place {
        run: run.clone(),
        cwd: cwd.clone(),
        read: Vec::new(),
        env: Vec::new(),
        results: big_results.clone(),
        private: results_dir.path().join("sandbox"),
        egress: None,
        source: SettingSource::Flags,
        // Hooks see the session id of the output lines, and the transcript if one is
        // written (else an empty `transcript_path`: exec keeps no other).
        session_id: Some(session_id.clone()),
        transcript: args.transcript.as_ref().map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone())),
        model: models.model_of(&spec),
        // The user's own directory: its status is read.
        git: None,
    };
    args.reporter.agent_started(&spec.id);
    let started = std::time::Instant::now();
    let mut session = match crate::agent::start(&sources, &spec, place, sink.clone(), &cancel).await {
        Ok(started) => started.session,
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
    let options = LoopOptions { limits: spec.limits, setting: args.attended.then_some(Setting::Terminal) };
    let equipped = crate::agent::equip(&sources, &spec, &models, options, &mut session, sink.clone(), &cancel).await;
    let equipped = match equipped {
        Ok(equipped) => equipped,
        Err(e) => {
            session.stop().await;
            args.reporter.finish();
            return Err(e);
        }
    };
    let mut equipped = equipped;
    if let Some(text) = &args.system_prompt
        && let Some(first) = equipped.config.system.first_mut()
    {
        first.text = text.clone();
    }
    if let Some(text) = &args.append_system_prompt
        && let Some(last) = equipped.config.system.last_mut()
    {
        last.text.push_str("\n\n");
        last.text.push_str(text);
    }
    if args.output_format == ExecOutput::StreamJson {
        let tools: Vec<String> =
            session.pool().map(|p| p.tool_names().into_iter().map(str::to_string).collect()).unwrap_or_default();
        let init = crate::exec_format::Init {
            cwd: &cwd,
            model: &equipped.config.model,
            tools,
            mcp_servers: sources.extensions.mcp_servers.keys().cloned().collect(),
            permission_mode: spec.permissions.mode.map_or("default", |m| m.as_str()).to_string(),
            slash_commands: sources.commands.commands.iter().map(|c| c.name.clone()).collect(),
            agents: sources.subagents.definitions().iter().map(|d| d.name.clone()).collect(),
            skills: sources.skills.skills.skills.iter().map(|s| s.name.clone()).collect(),
        };
        args.reporter.json_line(&crate::exec_format::init_line(&session_id, &init));
    }
    let mut prompt = prompt;
    if let Some(schema) = &schema {
        prompt.push_str(&schema.instructions());
    }
    let answer = match session.pool() {
        Some(pool) => {
            ask(provider.as_ref(), pool, equipped.config, prompt, schema.as_ref(), sink.as_ref(), &cancel).await
        }
        None => {
            session.stop().await;
            args.reporter.finish();
            return Err(crate::error::Error::Message("the tool pool is missing".into()));
        }
    };
    let end = session.stop().await;
    drop(results_dir);

    let mut report = AgentReport::empty(&spec.id, &spec.agent, None, AgentStatus::Succeeded, String::new());
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
    // After the session stopped: as root the directory is the user's again.
    if let Some(before) = before {
        report.changed_files = changed_files(&cwd, before);
    }
    if let Some(died) = &end.died {
        // Its tool host died under it: the answer cannot be trusted to cover the work.
        crate::reap::host_died(&mut report, died.clone());
    }
    args.reporter.agent_finished(&report);
    args.reporter.finish();

    match args.output_format {
        ExecOutput::Text if !report.text.trim().is_empty() => {
            args.reporter.answer(report.text.trim_end()).context("cannot write the answer to stdout")?;
        }
        ExecOutput::Json | ExecOutput::StreamJson => {
            let stop = claude.stop_reason();
            let denials = claude.denials();
            args.reporter.json_line(&crate::exec_format::result(
                &report,
                &answer,
                &session_id,
                stop,
                denials,
                interrupts.code(),
            ))
        }
        ExecOutput::Text | ExecOutput::Events => {}
    }
    if let Some(reason) = &report.reason {
        crate::notice::note(format_args!("agent {reason}"));
    }
    let code = match (&report.status, interrupts.code()) {
        (_, Some(code)) => code,
        (AgentStatus::Failed, _) if answer.terminal == Terminal::Completed => Code::Failed,
        _ if end.died.is_some() => Code::Failed,
        _ => Code::for_terminal(&answer.terminal),
    };
    Ok(code)
}

/// The tree of the working tree around `cwd` (tracked changes and untracked files that
/// are not ignored); `None` outside a git repository.
fn tree_of(cwd: &Path) -> Option<git2::Oid> {
    crate::git::worktree_tree(cwd).map_err(|e| tracing::debug!("not counting changed files: {e}")).ok()
}

/// The files that differ between `before` and the working tree around `cwd` now, as a
/// run's report lists them.
fn changed_files(cwd: &Path, before: git2::Oid) -> Vec<ChangedFile> {
    let changes = crate::git::worktree_tree(cwd).and_then(|after| crate::git::tree_changes(cwd, before, after));
    match changes {
        Ok(files) => files.iter().map(ChangedFile::of).collect(),
        Err(e) => {
            tracing::warn!("cannot count the files the agent changed: {e}");
            Vec::new()
        }
    }
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

/// What the repository around `cwd` configures for its agents, read as `orch run` reads
/// it (from the base ref in a pull-request run, see [`crate::repo_config`]), with the
/// skills copied into `skills_dir`; nothing when that cannot be resolved.
fn sources(cwd: &Path, skills_dir: &Path, trust: &Trust) -> crate::error::Result<Sources> {
    let config = match RepoConfig::resolve(cwd, trust) {
        Ok(config) => config,
        Err(e) => {
            crate::notice::note(format_args!(
                "no repository settings, hooks, MCP servers, agent files, skills or commands: {e}"
            ));
            return Ok(Sources::none());
        }
    };
    let extensions = crate::agent::extensions(&config, config.root(), &HookSettings::default(), &BTreeMap::new())?;
    let files = crate::run::agent_defs::load(&config)?;
    Sources::new(extensions, files, &config, &Default::default(), HashMap::new(), skills_dir)
}

/// Every `mcp__` tool in `tools` must name a declared server.
fn check_mcp_tools(tools: &[String], sources: &Sources) -> crate::error::Result<()> {
    let servers = &sources.extensions.mcp_servers;
    for tool in tools {
        if let Some((server, _)) = orch_agents::mcp::split_name(tool)
            && !servers.contains_key(server)
        {
            let known: Vec<&str> = servers.keys().map(String::as_str).collect();
            return Err(UsageError(format!(
                "--tools lists `{tool}`, but no MCP server `{server}` is declared (declared: {}); add it to `.mcp.json`",
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            ))
            .into());
        }
    }
    Ok(())
}

/// Where the agent's events go: the reporter (progress on stderr), stdout as the output
/// format says (orch's events with `--json`, Claude Code's lines with `stream-json`),
/// and the transcript file (`--transcript`).
struct Tee {
    agent: String,
    output: ExecOutput,
    claude: Arc<crate::exec_format::Stream>,
    reporter: Arc<dyn Reporter>,
    transcript: Option<crate::run::Transcript>,
}

impl EventSink for Tee {
    fn emit(&self, event: Event) {
        self.reporter.event(&self.agent, &event);
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        // Claude Code's lines only when they are printed; the JSON result needs just the
        // last stop reason.
        match self.output {
            ExecOutput::StreamJson => {
                for line in self.claude.lines(&event) {
                    self.reporter.json_line(&line);
                }
            }
            ExecOutput::Json => self.claude.observe(&event),
            ExecOutput::Text | ExecOutput::Events => {}
        }
        let events = self.output == ExecOutput::Events;
        if self.transcript.is_none() && !events {
            return;
        }
        let line = RunEvent::of(&self.agent, event).to_value();
        if let Some(t) = &self.transcript {
            t.record(&line);
        }
        if events {
            self.reporter.json_line(&line);
        }
    }
}

/// Adds the servers of each `--mcp-config` (a file, or JSON text as Claude Code also
/// takes) to those the repository declares; a name declared twice is an error.
fn add_mcp_configs(sources: &mut Sources, configs: &[String]) -> crate::error::Result<()> {
    if configs.is_empty() {
        return Ok(());
    }
    let mut extensions = (*sources.extensions).clone();
    for config in configs {
        let (text, label) = if config.trim_start().starts_with('{') {
            (config.clone(), "--mcp-config".to_string())
        } else {
            let text = std::fs::read_to_string(config)
                .map_err(|e| UsageError(format!("cannot read --mcp-config {config}: {e}")))?;
            (text, format!("--mcp-config {config}"))
        };
        let servers = crate::hooks_config::mcp_servers_of(&text, &label).map_err(|e| UsageError(e.to_string()))?;
        for (name, server) in servers {
            if extensions.mcp_servers.contains_key(&name) {
                return Err(UsageError(format!(
                    "{label}: the MCP server `{name}` is already declared (by .mcp.json or another --mcp-config); \
                     rename one of them"
                ))
                .into());
            }
            extensions.mcp_servers.insert(name, server);
        }
    }
    sources.extensions = Arc::new(extensions);
    Ok(())
}
