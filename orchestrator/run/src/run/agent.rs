//! One agent of a run, start to end: its worktree, its sandbox and tool host, its tool
//! pool, its query loop (asked again when its structured output is invalid), then its
//! work committed on its branch and its patch kept, whatever way it ended.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orch_agents::command_hooks::CommandHooks;
use orch_agents::mcp;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::pipeline::ToolPool;
use orch_agents::subagent::{AGENT_TOOL, AgentTool};
use orch_agents::tools::host::ToolExecutor;
use orch_agents::{Limits, Message, QueryConfig, Terminal, query};
use orch_workflows::AgentSpec;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::events::{AgentSink, Transcript};
use super::output::{MAX_RETRIES, OutputSchema};
use super::report::{AgentReport, AgentStatus, ChangedFile};
use super::{Shared, StopReason};
use crate::git::{ChangeKind, Worktree, safe_name};
use crate::host::{self, AgentSandbox, HostExecutor};
use crate::options::{SandboxSpec, SettingSource};

/// A finished agent: its report and the spec it ran.
pub struct Finished {
    pub report: AgentReport,
    pub spec: AgentSpec,
}

/// Runs `spec` with the rendered `prompt`. Never fails: every failure is in the report.
pub async fn run(shared: Arc<Shared>, mut spec: AgentSpec, mut prompt: String) -> Finished {
    let started = Instant::now();
    let uses = shared.uses.get(&spec.agent).cloned();
    if let Some(uses) = &uses {
        uses.apply(&mut spec);
        if prompt.trim().is_empty() {
            prompt = uses.task.clone();
        }
    }
    let item = spec.fan_out.as_ref().map(|f| f.item.clone());
    let mut report = AgentReport::empty(&spec.id, &spec.agent, item, AgentStatus::Failed, String::new());
    report.reason = None;
    report.continue_on_failure = spec.continue_on_failure;
    report.uses = uses.as_ref().map(|u| u.name.clone());
    let file = safe_name(&spec.id).unwrap_or_else(|_| "agent".into());
    let transcript_rel = PathBuf::from("transcripts").join(format!("{file}.jsonl"));
    let transcript = match Transcript::create(&shared.run_dir.join(&transcript_rel)) {
        Ok(t) => {
            report.transcript = Some(transcript_rel);
            Some(Arc::new(t))
        }
        Err(e) => {
            tracing::warn!(agent = %spec.id, "cannot create the transcript: {e}");
            None
        }
    };
    let at = Instant::now();
    let worktree = match shared.clone.add_worktree(&spec.id).await {
        Ok(w) => w,
        Err(e) => {
            report.infrastructure = true;
            report.reason = Some(format!("cannot create its worktree: {e}"));
            report.duration_ms = started.elapsed().as_millis() as u64;
            return Finished { report, spec };
        }
    };
    report.timings.worktree_ms = ms(at);
    report.branch = Some(worktree.branch().to_string());
    let cancel = shared.run_cancel.child_token();
    if let Err(e) = drive(&shared, &spec, prompt, &worktree, transcript, &cancel, &mut report).await {
        report.status = AgentStatus::Failed;
        report.infrastructure = true;
        report.reason = Some(format!("{e:#}"));
    }
    let at = Instant::now();
    commit(&shared, &spec, &worktree, &mut report).await;
    crate::reap::partial_if_work(&mut report);
    let keep = shared.keep_worktrees || report.status == AgentStatus::Failed;
    if keep {
        report.worktree = Some(worktree.path().to_path_buf());
    } else if let Err(e) = worktree.remove().await {
        tracing::warn!(agent = %spec.id, "cannot remove the worktree: {e}");
    }
    report.timings.finish_ms += ms(at);
    report.duration_ms = ms(started);
    Finished { report, spec }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// Sandbox, tool host, loop. An `Err` is an infrastructure failure.
async fn drive(
    shared: &Shared,
    spec: &AgentSpec,
    prompt: String,
    worktree: &Worktree,
    transcript: Option<Arc<Transcript>>,
    cancel: &CancellationToken,
    report: &mut AgentReport,
) -> crate::error::Result<()> {
    let schema = match spec.output_schema.as_ref().map(OutputSchema::new).transpose() {
        Ok(s) => s,
        Err(e) => {
            report.reason = Some(e);
            return Ok(());
        }
    };
    let at = Instant::now();
    let cwd = worktree.path().to_path_buf();
    let git = worktree.git_paths();
    let mut read: Vec<PathBuf> = spec.sandbox.read.iter().map(PathBuf::from).collect();
    read.extend(git.read_only.iter().cloned());
    read.extend(shared.cache_dir.iter().cloned());
    let args = SandboxSpec {
        backend: crate::sandbox::backend_of(spec.sandbox.backend),
        network: crate::sandbox::network_of(spec.sandbox.network),
        read,
        write: spec.sandbox.write.iter().map(PathBuf::from).collect(),
        image: spec.sandbox.image.clone(),
        source: SettingSource::Workflow,
    };
    let writes = orch_types::tools::any_writes(&spec.tools);
    let results = shared.run_dir.join("tool-results");
    let name = host::sandbox_name(&format!("{}-{}", shared.run_id, spec.id));
    let private = shared.run_dir.join("sandbox").join(safe_name(&spec.id).unwrap_or_else(|_| "agent".into()));
    let mut sandbox = AgentSandbox::prepare(&args, &cwd, writes, vec![results.clone()], &name, private)?;
    sandbox.policy.env.extend(git.env.iter().cloned());
    sandbox.policy.env.extend(shared.cache_env.iter().cloned());
    // `Agent` runs in the coordinator; the tool host gets the others.
    // MCP tools are served by their servers: stdio ones in the tool host, HTTP ones here.
    let host_tools: Vec<String> =
        spec.tools.iter().filter(|t| t.as_str() != AGENT_TOOL && !t.starts_with(mcp::PREFIX)).cloned().collect();
    let (stdio_mcp, http_mcp) = crate::mcp::servers_for(&spec.tools, &shared.extensions.mcp_servers);
    let stdio_json = if stdio_mcp.is_empty() { None } else { Some(serde_json::to_string(&stdio_mcp)?) };
    let started =
        host::spawn_with_mcp(&shared.run_id, &spec.id, &cwd, &host_tools, &sandbox.policy, stdio_json.as_deref())
            .await?;
    let container = started.container;
    let host_pid = started.client.pid();
    let executor = Arc::new(HostExecutor::new(started.client).ending_on_crash(cancel.clone()));
    let mut listing = mcp::McpListing::default();
    if stdio_json.is_some() {
        listing = crate::mcp::host_listing(executor.as_ref(), cancel).await;
    }
    let http_hub = if http_mcp.is_empty() {
        None
    } else {
        let (hub, http_listing) = crate::mcp::McpHub::start(&http_mcp, &cwd).await;
        listing.tools.extend(http_listing.tools);
        listing.failed.extend(http_listing.failed);
        Some(Arc::new(hub))
    };
    let router: Arc<dyn ToolExecutor> =
        Arc::new(crate::mcp::McpRouter { host: executor.clone(), http: http_hub.clone() });
    report.timings.host_ms = ms(at);

    let rules = RuleSet {
        // The plan resolves an unnamed mode to `Default`: that is orch's default (`None`).
        mode: match spec.permissions.mode {
            orch_agents::permissions::Mode::Default => None,
            mode => Some(mode),
        },
        allow: spec.permissions.allow.clone(),
        deny: spec.permissions.deny.clone(),
        ask: spec.permissions.ask.clone(),
        ..RuleSet::default()
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let outcome = async {
        let permissions = Permissions::new(&rules, &cwd, home.as_deref(), vec![cwd.clone()]).map_err(|e| {
            crate::error::Error::Message(format!("the permission rules of `{}` are invalid: {e}", spec.id))
        })?;
        let mut tools = host::select_tools(&host_tools)?;
        tools.extend(crate::mcp::agent_tools(&spec.tools, &listing));
        let hook_tools = tools.clone();
        let pool = ToolPool::new(&spec.id, tools, router.clone(), permissions)?.with_results_dir(results);
        let model = spec.model.clone().unwrap_or_else(|| shared.default_model.clone());
        let mut config = QueryConfig::new(&spec.id, &model);
        config.fallback_model = shared.fallback_model.clone();
        config.prices = shared.prices.clone();
        config.system = crate::agent_prompt::build(&cwd, &model, spec.instructions, executor.as_ref(), cancel).await;
        if let Some(uses) = shared.uses.get(&spec.agent)
            && let Some(first) = config.system.first_mut()
        {
            first.text = uses.system_prompt.clone();
        }
        let capped = shared.meter.cap(spec.limits);
        config.limits = Limits {
            max_turns: capped.max_turns,
            max_tokens: capped.max_tokens,
            max_cost_usd: capped.max_cost_usd,
            timeout: capped.timeout,
        };
        let sink = Arc::new(AgentSink {
            agent: spec.id.clone(),
            transcript: transcript.clone(),
            meter: shared.meter.clone(),
            stop: shared.stop.clone(),
            run_cancel: shared.run_cancel.clone(),
            json: shared.json,
            reporter: shared.reporter.clone(),
        });
        let records = Arc::new(std::sync::Mutex::new(Vec::new()));
        let pool = if shared.extensions.hooks.is_empty() {
            pool
        } else {
            let hooks = CommandHooks::new(
                &spec.id,
                &cwd,
                shared.extensions.hooks.clone(),
                hook_tools,
                router.clone(),
                sink.clone(),
            )
            .map_err(|e| crate::error::Error::Message(format!("the hooks of `{}` are invalid: {e}", spec.id)))?
            .with_session_id(format!("{}/{}", shared.run_id, spec.id))
            .with_cancel(cancel.clone());
            pool.with_hooks(Arc::new(hooks))
        };
        let pool = if spec.tools.iter().any(|t| t == AGENT_TOOL) {
            let tool = AgentTool::new(
                shared.subagents.clone(),
                shared.provider.clone(),
                config.clone(),
                sink.clone(),
                records.clone(),
            );
            tool.install(pool)?
        } else {
            pool
        };
        let at = Instant::now();
        converse(shared, &pool, config, prompt, schema.as_ref(), &sink, cancel, report).await;
        report.timings.loop_ms = ms(at);
        report.subagents = std::mem::take(&mut *records.lock().unwrap_or_else(|p| p.into_inner()));
        Ok::<(), crate::error::Error>(())
    }
    .await;
    let at = Instant::now();
    drop(router);
    if let Some(hub) = http_hub.and_then(Arc::into_inner) {
        hub.shutdown().await;
    }
    // The pool holds the other reference to the executor; it is gone by now.
    let died = match Arc::try_unwrap(executor) {
        Ok(executor) => executor.shutdown(Duration::from_secs(2)).await,
        Err(_) => None,
    };
    // Whatever a dead host left (re-parented to us) dies before the worktree is touched.
    report.killed_processes += crate::reap::kill_orphans(host_pid).await;
    if let Some(died) = died {
        crate::reap::host_died(report, died);
    }
    if let Some(container) = container
        && let Err(e) = container.stop().await
    {
        tracing::warn!(agent = %spec.id, "could not remove the agent's container: {e}");
    }
    sandbox.teardown();
    report.timings.finish_ms = ms(at);
    outcome
}

/// The loop, asked again (at most [`MAX_RETRIES`] times) while its structured output is
/// invalid; then the agent's status from how it ended.
#[allow(clippy::too_many_arguments)]
async fn converse(
    shared: &Shared,
    pool: &ToolPool,
    mut config: QueryConfig,
    prompt: String,
    schema: Option<&OutputSchema>,
    sink: &AgentSink,
    cancel: &CancellationToken,
    report: &mut AgentReport,
) {
    let mut text = prompt;
    if let Some(schema) = schema {
        text.push_str(&schema.instructions());
    }
    let line = json!({ "agent": sink.agent, "event": { "type": "prompt", "text": text } });
    if let Some(t) = &sink.transcript {
        t.record(&line);
    }
    if sink.json {
        super::events::print_json_line(&line);
    }
    let mut messages = vec![Message::user(text)];
    let started = Instant::now();
    let mut retries = 0;
    let terminal = loop {
        let outcome = query(shared.provider.as_ref(), pool, &config, messages, sink, cancel).await;
        report.turns += outcome.turns;
        report.usage += outcome.usage;
        report.cost_usd += outcome.cost_usd;
        report.model = Some(outcome.model.clone());
        report.text = outcome.final_text.clone();
        let (Some(schema), Terminal::Completed) = (schema, &outcome.terminal) else { break outcome.terminal };
        match schema.check(&outcome.final_text) {
            Ok(value) => {
                report.output = Some(value);
                report.output_error = None;
                break Terminal::Completed;
            }
            Err(error) if retries == MAX_RETRIES => {
                report.output_error = Some(error);
                break Terminal::Completed;
            }
            Err(error) => {
                retries += 1;
                tracing::info!(agent = %sink.agent, "its answer does not match output.schema; asking again: {error}");
                report.output_error = Some(error.clone());
                messages = outcome.messages;
                messages.push(Message::user(schema.retry_message(&error)));
                let limits = &mut config.limits;
                limits.max_turns = limits.max_turns.map(|t| t.saturating_sub(outcome.turns));
                limits.max_tokens = limits.max_tokens.map(|t| t.saturating_sub(outcome.usage.total()));
                limits.max_cost_usd = limits.max_cost_usd.map(|c| (c - outcome.cost_usd).max(0.0));
                limits.timeout = limits.timeout.map(|t| t.saturating_sub(started.elapsed()));
            }
        }
    };
    let (status, reason) = match &terminal {
        Terminal::Completed => match &report.output_error {
            Some(error) if report.output.is_none() => (
                AgentStatus::Failed,
                Some(format!("its final answer does not match output.schema after {MAX_RETRIES} retries: {error}")),
            ),
            _ => (AgentStatus::Succeeded, None),
        },
        Terminal::Aborted { .. } => match shared.stop.get() {
            Some(StopReason::RunLimit(why)) => (AgentStatus::Partial, Some(why)),
            Some(other) => (AgentStatus::Cancelled, Some(other.to_string())),
            None => (AgentStatus::Cancelled, Some(terminal.to_string())),
        },
        // Its turns were capped by what the run had left: say so, not "the limit of 1".
        Terminal::MaxTurns { .. } if let Some(StopReason::RunLimit(why)) = shared.meter.exhausted() => {
            (AgentStatus::Partial, Some(why))
        }
        t => {
            let disposition = t.disposition();
            report.infrastructure |= disposition.infrastructure();
            (disposition.status.into(), Some(t.to_string()))
        }
    };
    report.status = status;
    report.reason = reason;
    report.terminal = Some(terminal);
}

/// Commits whatever the agent left in its worktree, and keeps its patch.
async fn commit(shared: &Shared, spec: &AgentSpec, worktree: &Worktree, report: &mut AgentReport) {
    let message = format!(
        "orch: {} ({})\n\nRun {} of workflow `{}`.\n",
        spec.id,
        report.status.as_str(),
        shared.run_id,
        shared.workflow_name
    );
    match worktree.commit_all(&message, &shared.author).await {
        Ok(Some(info)) => {
            report.commit = Some(info.commit);
            report.changed_files = info
                .files
                .iter()
                .map(|f| ChangedFile {
                    path: f.path.clone(),
                    kind: match f.kind {
                        ChangeKind::Added => "added",
                        ChangeKind::Modified => "modified",
                        ChangeKind::Deleted => "deleted",
                        ChangeKind::TypeChanged => "type_changed",
                    }
                    .into(),
                })
                .collect();
            for skipped in &info.skipped {
                tracing::warn!(agent = %spec.id, path = %skipped.display(), "left a nested repository out of the commit");
            }
            match worktree.patch().await {
                Ok(patch) => {
                    let rel = PathBuf::from("patches").join(format!("{}.patch", worktree.name()));
                    let path = shared.run_dir.join(&rel);
                    let written = std::fs::create_dir_all(shared.run_dir.join("patches"))
                        .and_then(|()| std::fs::write(&path, patch));
                    match written {
                        Ok(()) => report.patch = Some(rel),
                        Err(e) => tracing::warn!(agent = %spec.id, "cannot write the patch: {e}"),
                    }
                }
                Err(e) => tracing::warn!(agent = %spec.id, "cannot make the patch: {e}"),
            }
        }
        // Nothing to keep: the branch is still at the base.
        Ok(None) => report.branch = None,
        Err(e) => {
            // The work is still in the worktree, which is then kept.
            report.status = AgentStatus::Failed;
            report.infrastructure = true;
            let before = report.reason.take().map(|r| format!("{r}; ")).unwrap_or_default();
            report.reason = Some(format!("{before}cannot commit its work: {e}"));
        }
    }
}
