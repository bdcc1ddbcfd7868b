//! One agent of a run, start to end: its worktree, its sandbox and tool host, its tool
//! pool, its query loop (asked again when its structured output is invalid), then its
//! work committed on its branch and its patch kept, whatever way it ended.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use orch_agents::pipeline::ToolPool;
use orch_agents::{QueryConfig, Terminal};
use orch_workflows::AgentSpec;
use tokio_util::sync::CancellationToken;

use super::checkpoint::Checkpoints;
use super::events::{AgentSink, Transcript};
use super::output::OutputSchema;
use super::report::{AgentReport, AgentStatus, ChangedFile, TooLargeFile};
use super::{Shared, StopReason};
use crate::agent::{LoopOptions, Models, Place, max_disk};
use crate::git::{CommitInfo, Worktree, safe_name};
use crate::options::SettingSource;
use crate::run_event::{RunEvent, RunStep};

/// A finished agent: its report and the spec it ran.
pub struct Finished {
    pub report: AgentReport,
    pub spec: AgentSpec,
}

/// The executor of a real run: each agent in its worktree, sandbox and session.
pub struct Runner(pub Arc<Shared>);

impl super::schedule::Executor for Runner {
    fn execute(&self, spec: AgentSpec, prompt: String) -> impl Future<Output = Finished> + Send + 'static {
        run(self.0.clone(), spec, prompt)
    }
}

/// Runs `spec` with the rendered `prompt`. Never fails: every failure is in the report.
pub async fn run(shared: Arc<Shared>, mut spec: AgentSpec, prompt: String) -> Finished {
    let started = Instant::now();
    let uses = shared.sources.uses.get(&spec.agent).map(|u| u.name.clone());
    // Its `uses:` definition, and the repository's slash command `name` when the prompt
    // starts with `/name`.
    let prepared = crate::agent::prepare(&shared.sources, &mut spec, prompt);
    let item = spec.fan_out.as_ref().map(|f| f.item.clone());
    let mut report = AgentReport::empty(&spec.id, &spec.agent, item, AgentStatus::Failed, String::new());
    report.reason = None;
    let mut prompt = match prepared {
        Ok(prompt) => prompt,
        Err(e) => {
            report.reason = Some(e.to_string());
            report.duration_ms = started.elapsed().as_millis() as u64;
            return Finished { report, spec };
        }
    };
    report.continue_on_failure = spec.continue_on_failure;
    report.uses = uses;
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
    let start = shared.resume_from.get(&spec.id).copied();
    let added = match start {
        Some(commit) => shared.clone.add_worktree_at(&spec.id, commit).await,
        None if spec.base == orch_workflows::Base::Needs => match on_needs(&shared, &spec).await {
            Ok(added) => added,
            Err(conflict) => {
                // Nothing ran: no model request, no worktree.
                report.reason = Some(conflict);
                report.duration_ms = started.elapsed().as_millis() as u64;
                finished_line(&shared, transcript.as_deref(), &report);
                return Finished { report, spec };
            }
        },
        None => shared.clone.add_worktree(&spec.id).await,
    };
    let worktree = match added {
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
    if worktree.start() != shared.clone.base() && start.is_none() {
        report.start = Some(worktree.start().to_string());
    }
    if let Some(commit) = start {
        report.resumed_from = Some(commit.to_string());
        prompt.push_str(RESUMED_NOTE);
    }
    let every = spec.limits.checkpoint_every.unwrap_or(super::checkpoint::DEFAULT_EVERY);
    let message =
        format!("orch: {} (checkpoint)\n\nRun {} of workflow `{}`.\n", spec.id, shared.run_id, shared.workflow_name);
    let checkpoints = Checkpoints::new(worktree.clone(), shared.author.clone(), every, message, max_file_size(&spec));
    let cancel = shared.run_cancel.child_token();
    let disk = if can_grow(&shared, &spec) {
        let disk_roots = vec![worktree.path().to_path_buf(), private_dir(&shared, &spec)];
        Some(super::disk::DiskWatch::start(&spec.id, disk_roots, max_disk(&spec), cancel.clone()).await)
    } else {
        None
    };
    let driven =
        drive(&shared, &spec, prompt, &worktree, transcript.clone(), checkpoints.clone(), &cancel, &mut report).await;
    if let Err(e) = driven {
        report.status = AgentStatus::Failed;
        report.infrastructure = true;
        report.reason = Some(format!("{e:#}"));
    }
    // Measured once more now that its processes are dead; its work is still committed.
    if let Some(disk) = disk
        && let Some(why) = disk.finish().await
    {
        disk_limit(&mut report, why);
    }
    let at = Instant::now();
    if let Some(c) = &checkpoints {
        c.settle().await;
    }
    // Invariant: the worktree is read (commit, patch) and written (`.git` restore) only
    // here, after `drive` has returned, i.e. after the tool host was shut down and its
    // commands killed (and the container stopped): no process of the agent can swap a
    // path under the coordinator. The commit also reads through descriptors that never
    // follow a link (git/capture.rs), so a survivor could not redirect it anyway.
    commit(&shared, &spec, &worktree, &mut report).await;
    crate::reap::partial_if_work(&mut report);
    expect_changes(&spec, &mut report);
    let keep = shared.keep_worktrees || report.status == AgentStatus::Failed;
    if keep {
        report.worktree = Some(worktree.path().to_path_buf());
    } else if let Err(e) = worktree.remove().await {
        tracing::warn!(agent = %spec.id, "cannot remove the worktree: {e}");
    }
    report.timings.finish_ms += ms(at);
    report.duration_ms = ms(started);
    finished_line(&shared, transcript.as_deref(), &report);
    Finished { report, spec }
}

/// `base: needs`: the worktree on the merge of the needed agents' commits. The outer
/// `Err` is a conflict (the reason to report, naming the files); the inner one a git
/// failure.
async fn on_needs(shared: &Shared, spec: &AgentSpec) -> Result<crate::git::Result<Worktree>, String> {
    let mut needed = Vec::with_capacity(spec.start_from.len());
    for (id, commit) in &spec.start_from {
        match git2::Oid::from_str(commit) {
            Ok(oid) => needed.push((id.clone(), oid)),
            Err(e) => return Err(format!("the commit `{commit}` of `{id}` it needs is not a commit id: {e}")),
        }
    }
    match shared.clone.add_worktree_on_needs(&spec.id, &needed, &shared.author).await {
        Ok(Ok(worktree)) => Ok(Ok(worktree)),
        Ok(Err(conflict)) => Err(conflict.to_string()),
        Err(e) => Ok(Err(e)),
    }
}

/// `expect: { changes: true }`: an agent that would pass with no changed file fails,
/// with the reason "no changes".
fn expect_changes(spec: &AgentSpec, report: &mut AgentReport) {
    let passed = matches!(report.status, AgentStatus::Succeeded | AgentStatus::Partial);
    if spec.expect.changes == Some(true) && passed && report.changed_files.is_empty() {
        report.status = AgentStatus::Failed;
        let before = report.reason.take().map(|r| format!("; {r}")).unwrap_or_default();
        report.reason = Some(format!("{NO_CHANGES}{before}"));
    }
}

/// The reason of an agent that was expected to change files and changed none.
pub const NO_CHANGES: &str = "no changes";

/// The `agent_finished` line, in the transcript and on `--json`.
fn finished_line(shared: &Shared, transcript: Option<&Transcript>, report: &AgentReport) {
    let step = RunStep::AgentFinished {
        status: report.status.as_str().to_string(),
        reason: report.reason.clone(),
        turns: report.turns,
        cost_usd: report.cost_usd,
        duration_ms: report.duration_ms,
    };
    let line = RunEvent::step(&report.id, step).to_value();
    if let Some(t) = transcript {
        t.record(&line);
    }
    if shared.json {
        shared.reporter.json_line(&line);
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// The agent's `limits.max_file_size` in bytes (the plan fills in the default).
fn max_file_size(spec: &AgentSpec) -> u64 {
    spec.limits.max_file_size.map_or(crate::git::DEFAULT_MAX_FILE_SIZE, |s| s.bytes())
}

/// Whether anything of the agent can write to its directories, so that `limits.max_disk`
/// needs watching: a tool that writes (`Bash` among them), a stdio MCP server (started
/// in its tool host), or a hook command. Without any of these its session only reads:
/// the worktree is read-only in its sandbox, and no process of its own exists that
/// could write to its private tmp and home; the watcher's walks (one before the agent
/// starts, one after, and one a second while it runs) are skipped.
fn can_grow(shared: &Shared, spec: &AgentSpec) -> bool {
    crate::agent::may_write(&spec.tools, !shared.sources.extensions.hooks.is_empty())
}

/// Where the agent's private tmp and home are made.
fn private_dir(shared: &Shared, spec: &AgentSpec) -> PathBuf {
    shared.run_dir.join("sandbox").join(safe_name(&spec.id).unwrap_or_else(|_| "agent".into()))
}

/// An agent that went over `limits.max_disk` ends `partial` with `why` (a failure
/// stays a failure, with `why` added to its reason).
fn disk_limit(report: &mut AgentReport, why: String) {
    if report.status == AgentStatus::Failed {
        let before = report.reason.take().map(|r| format!("{r}; ")).unwrap_or_default();
        report.reason = Some(format!("{before}{why}"));
    } else {
        report.status = AgentStatus::Partial;
        report.reason = Some(why);
    }
}

/// Told to an agent that starts from its work in an earlier, interrupted run.
const RESUMED_NOTE: &str = "\n\nNote: this task was begun in an earlier run that stopped before it finished. What \
    was done then is already in your working directory (committed on your branch): check it and continue from \
    there rather than starting over.";

/// Sandbox, tool host, loop. An `Err` is an infrastructure failure.
#[allow(clippy::too_many_arguments)]
async fn drive(
    shared: &Shared,
    spec: &AgentSpec,
    prompt: String,
    worktree: &Worktree,
    transcript: Option<Arc<Transcript>>,
    checkpoints: Option<Arc<Checkpoints>>,
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
    let git = worktree.git_paths();
    let mut read = git.read_only.clone();
    read.extend(shared.cache_dir.iter().cloned());
    // Its own directory of large results, readable by its sandbox: not the others'.
    let results = shared.run_dir.join("tool-results").join(safe_name(&spec.id).unwrap_or_else(|_| "agent".into()));
    if let Err(e) = std::fs::create_dir_all(&results) {
        tracing::warn!(agent = %spec.id, "cannot create {}: {e}", results.display());
    }
    let sink = Arc::new(AgentSink {
        agent: spec.id.clone(),
        transcript: transcript.clone(),
        meter: shared.meter.clone(),
        stop: shared.stop.clone(),
        run_cancel: shared.run_cancel.clone(),
        json: shared.json,
        reporter: shared.reporter.clone(),
        checkpoints,
    });
    let models = Models {
        provider: shared.provider.clone(),
        default_model: shared.default_model.clone(),
        fallback_model: shared.fallback_model.clone(),
        prices: shared.prices.clone(),
    };
    let place = Place {
        run: shared.run_id.clone(),
        cwd: worktree.path().to_path_buf(),
        read,
        env: git.env.iter().chain(shared.cache_env.iter()).cloned().collect(),
        results,
        private: private_dir(shared, spec),
        egress: egress_grant(shared, &spec.id, &spec.sandbox.network, transcript.clone())?,
        source: SettingSource::Workflow,
        session_id: None,
        transcript: report.transcript.as_ref().map(|rel| shared.run_dir.join(rel)),
        model: models.model_of(spec),
        // Made for this agent just before (in `run`), nothing has run in it yet.
        git: worktree.fresh_snapshot().await.ok(),
    };
    let started = crate::agent::start(&shared.sources, spec, place, sink.clone(), cancel).await?;
    report.permissions = Some(started.permissions);
    let mut session = started.session;
    // What the sandbox hides stays as the base has it, for the agent's git and in
    // every commit (see `Worktree::keep_masked`).
    worktree.keep_masked(session.masked()).await?;
    report.mcp_failures = session.mcp_failures().to_vec();
    report.timings.host_ms = ms(at);

    let outcome = async {
        // Its own limits, capped by what the run has left.
        let options = LoopOptions { limits: shared.meter.cap(spec.limits), setting: None };
        let equipped =
            crate::agent::equip(&shared.sources, spec, &models, options, &mut session, sink.clone(), cancel).await?;
        let Some(pool) = session.pool() else {
            return Err(crate::error::Error::Message(format!("the tool pool of `{}` is missing", spec.id)));
        };
        let at = Instant::now();
        converse(shared, pool, equipped.config, prompt, schema.as_ref(), &sink, cancel, report).await;
        report.timings.loop_ms = ms(at);
        report.subagents = std::mem::take(&mut *equipped.subagents.lock().unwrap_or_else(|p| p.into_inner()));
        Ok::<(), crate::error::Error>(())
    }
    .await;
    let at = Instant::now();
    report.network = session.network();
    let stopped = session.stop().await;
    // Whatever a dead host left (re-parented to us) was killed before the worktree is
    // touched; a death that was not a requested stop fails the agent.
    report.killed_processes += stopped.killed;
    if let Some(died) = stopped.died {
        crate::reap::host_died(report, died);
    }
    report.timings.finish_ms = ms(at);
    outcome
}

/// The agent's access to the run's egress proxy when its network is an allowlist: each
/// decision goes to its transcript (and `--json`) as a `network` line.
fn egress_grant(
    shared: &Shared,
    id: &str,
    network: &orch_types::NetworkSetting,
    transcript: Option<Arc<Transcript>>,
) -> crate::error::Result<Option<crate::proxy::run::Grant>> {
    let Some(list) = network.allowlist() else { return Ok(None) };
    let Some(proxy) = &shared.proxy else {
        return Err(crate::error::Error::Message(format!("`{id}` has a network allowlist but the run has no proxy")));
    };
    let json = shared.json;
    let reporter = shared.reporter.clone();
    let sink: crate::proxy::EventSink = Arc::new(move |event: crate::proxy::ProxyEvent| {
        let step = RunStep::Network {
            host: event.host,
            port: event.port,
            allowed: event.denied.is_none(),
            reason: event.denied,
            bytes_up: event.bytes_up,
            bytes_down: event.bytes_down,
            credentials: event.credentials,
        };
        let line = RunEvent::step(&event.agent, step).to_value();
        if let Some(t) = &transcript {
            t.record(&line);
        }
        if json {
            reporter.json_line(&line);
        }
    });
    proxy
        .grant(id, list, sink)
        .map(Some)
        .map_err(|e| crate::error::Error::Message(format!("the network allowlist of `{id}` is invalid: {e}")))
}

/// The loop, asked again (at most [`MAX_RETRIES`] times) while its structured output is
/// invalid; then the agent's status from how it ended.
#[allow(clippy::too_many_arguments)]
async fn converse(
    shared: &Shared,
    pool: &ToolPool,
    config: QueryConfig,
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
    let line = RunEvent::step(&sink.agent, RunStep::Prompt { text: text.clone() }).to_value();
    if let Some(t) = &sink.transcript {
        t.record(&line);
    }
    if sink.json {
        sink.reporter.json_line(&line);
    }
    let answer = super::output::ask(shared.provider.as_ref(), pool, config, text, schema, sink, cancel).await;
    report.turns += answer.turns;
    report.usage += answer.usage;
    report.cost_usd += answer.cost_usd;
    report.model = Some(answer.model.clone());
    report.text = answer.text.clone();
    report.output = answer.output.clone();
    report.output_error = answer.output_error.clone();
    let schema_failure = answer.schema_failure();
    let terminal = answer.terminal;
    let (status, reason) = match &terminal {
        Terminal::Completed => match schema_failure {
            Some(why) => (AgentStatus::Failed, Some(why)),
            None => (AgentStatus::Succeeded, None),
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
    let max_file_size = max_file_size(spec);
    let committed = match worktree.commit_all_limited(&message, &shared.author, max_file_size).await {
        // Nothing new since its last checkpoint (or since the earlier run's work it
        // started from, with `--resume`): its branch holds that work.
        Ok(None) => match super::checkpoint::branch_tip(shared.clone.git_dir(), worktree.branch()) {
            Some(tip) if tip != worktree.start().to_string() => worktree.changed_files().await.map(|files| {
                Some(CommitInfo {
                    commit: tip,
                    branch: worktree.branch().to_owned(),
                    files,
                    skipped: Vec::new(),
                    too_large: Vec::new(),
                })
            }),
            _ => Ok(None),
        },
        other => other,
    };
    match committed {
        Ok(Some(info)) => {
            report.too_large_files =
                info.too_large.iter().map(|(path, size)| TooLargeFile { path: path.clone(), size: *size }).collect();
            report.commit = Some(info.commit);
            report.changed_files = info.files.iter().map(ChangedFile::of).collect();
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
