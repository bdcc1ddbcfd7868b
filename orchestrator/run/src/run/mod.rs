//! `orch run WORKFLOW`: the coordinator. It loads and plans the workflow, makes the run
//! clone, runs `setup:`, dispatches agents (see [`schedule`]), synthesizes their
//! reports, integrates their branches, and writes the run directory:
//!
//! ```text
//! <run_dir>/report.json            versioned (see report.rs and README "Run reports")
//! <run_dir>/report.md
//! <run_dir>/transcripts/<agent>.jsonl   written as the agents go
//! <run_dir>/patches/<agent>.patch
//! <run_dir>/tool-results/<agent>/       results too large to send inline
//! <run_dir>/synthesis-prompt.md
//! <run_dir>/setup.log, cache/           when the workflow has `setup:`
//! <run_dir>/repo.git, repos/, worktrees/ the run clone, agents' repositories, checkouts; removed unless kept
//! ```
//!
//! The run's limits are enforced by a shared meter (cost, tokens, turns: see
//! [`events::Meter`]) and a timer; crossing one stops the run, and the agents still
//! running keep their partial work. Interrupts cancel the run token: agents return
//! promptly, a partial report is written at once, then everything is torn down and the
//! final report replaces it.

mod agent;
pub(crate) mod agent_defs;
mod checkpoint;
mod disk;
mod events;
mod github;
pub(crate) use github::mask_value;
mod html;
mod junit;
mod live_report;
mod merge;
pub(crate) mod output;
pub mod recover;
mod render;
#[cfg(test)]
mod render_snapshots;
pub mod report;
mod reporter;
pub(crate) mod reserve;
mod schedule;
mod select;
mod setup;
mod supersede;
mod synthesis;

pub(crate) use events::Transcript;
pub use merge::run as merge;
pub use reporter::{Reporter, Tally};
pub use select::{Shard, assign_shards};

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use crate::error::Context as _;
use orch_agents::{ModelProvider, PriceTable};
use orch_workflows::{IntegrateMode, Plan, PlanNode};
use tokio_util::sync::CancellationToken;

use crate::exit::{Code, UsageError};
use crate::git::{Author, GitError, RunClone};
use crate::options::RunOptions;
use crate::{clock, provider, signals, workflow};
use report::{AgentReport, AgentStatus, IntegrationReport, RunReport, RunStatus, Totals, WorkflowInfo};

/// The model used when neither the command line, the workflow nor the agent names one.
pub const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// Concurrency when neither the command line nor the workflow sets it.
pub const DEFAULT_CONCURRENCY: u32 = 4;

/// Why a run stopped before all its agents ran.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// A run limit (cost, tokens, turns, time) was reached.
    RunLimit(String),
    /// `fail_fast` and this agent failed.
    FailFast(String),
    /// SIGINT, SIGTERM or SIGHUP.
    Interrupted(&'static str),
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::RunLimit(why) => f.write_str(why),
            Self::FailFast(agent) => write!(f, "the run stopped because `{agent}` failed (fail_fast)"),
            Self::Interrupted(signal) => write!(f, "interrupted by {signal}"),
        }
    }
}

/// The first reason the run stopped, set once.
#[derive(Debug, Default)]
pub struct Stop(Mutex<Option<StopReason>>);

impl Stop {
    /// Records `reason` unless another came first.
    pub fn set(&self, reason: StopReason) {
        let mut slot = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_none() {
            *slot = Some(reason);
        }
    }

    pub fn get(&self) -> Option<StopReason> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// What every agent task of a run shares.
pub struct Shared {
    pub run_id: String,
    pub run_dir: PathBuf,
    pub workflow_name: String,
    pub clone: RunClone,
    pub provider: Arc<dyn ModelProvider>,
    pub prices: Arc<PriceTable>,
    pub default_model: String,
    pub fallback_model: Option<String>,
    pub author: Author,
    pub meter: Arc<events::Meter>,
    pub stop: Arc<Stop>,
    pub run_cancel: CancellationToken,
    pub json: bool,
    pub keep_worktrees: bool,
    /// `<run_dir>/cache` when setup ran: readable by every agent.
    pub cache_dir: Option<PathBuf>,
    pub cache_env: Vec<(String, String)>,
    pub reporter: Arc<dyn Reporter>,
    /// What the trusted repository configuration and the workflow give every agent:
    /// hooks, MCP servers, settings permissions, agent definitions, `uses:`, skills and
    /// slash commands.
    pub sources: crate::agent::Sources,
    /// `--resume`: agents that run again from their work in the earlier run (by id).
    pub resume_from: std::collections::HashMap<String, git2::Oid>,
    /// The run's egress proxy, when some agent or `setup:` has a network allowlist;
    /// stopped when the last reference goes with the run.
    pub proxy: Option<Arc<crate::proxy::run::RunProxy>>,
}

/// Starts the egress proxy when the plan (setup, agents, fan-out templates) names an
/// allowlist.
async fn start_proxy(
    plan: &orch_workflows::Plan,
    repo: &std::path::Path,
) -> crate::error::Result<Option<Arc<crate::proxy::run::RunProxy>>> {
    let agents = plan.nodes().any(|n| {
        let spec = match n {
            orch_workflows::PlanNode::Agent(spec) => spec,
            orch_workflows::PlanNode::DynamicFanOut(d) => &d.template,
        };
        spec.sandbox.network.allowlist().is_some()
    });
    let setup = !plan.setup.is_empty() && plan.setup_network.allowlist().is_some();
    if agents || setup { crate::proxy::run::RunProxy::start(repo.to_path_buf()).await.map(Some) } else { Ok(None) }
}

/// Every model the run may call, with what uses it: each agent's, the synthesis's, the
/// default and the fallback.
fn models_used(plan: &Plan, models: &crate::options::ModelSpec) -> Vec<(String, String)> {
    let mut out = vec![(models.model.clone(), "the run's model".to_string())];
    out.extend(models.fallback_model.iter().map(|m| (m.clone(), "--fallback-model".to_string())));
    for n in plan.nodes() {
        let spec = match n {
            PlanNode::Agent(spec) => spec,
            PlanNode::DynamicFanOut(d) => &d.template,
        };
        out.extend(spec.model.iter().map(|m| (m.clone(), format!("agent `{}`", spec.agent))));
    }
    out.extend(plan.synthesis.model.iter().map(|m| (m.clone(), "the synthesis".to_string())));
    out
}

/// How a cost limit of the run was set, when one was: the run's, or the first agent's.
fn cost_limit(plan: &Plan) -> Option<String> {
    if plan.limits.max_cost_usd.is_some() {
        return Some("the run's `limits.max_cost_usd`".into());
    }
    plan.nodes().find_map(|n| {
        let spec = match n {
            PlanNode::Agent(spec) => spec,
            PlanNode::DynamicFanOut(d) => &d.template,
        };
        spec.limits.max_cost_usd.map(|_| format!("`limits.max_cost_usd` of agent `{}`", spec.agent))
    })
}

/// `orch run`.
pub async fn run(args: RunOptions) -> crate::error::Result<Code> {
    // Many agents, many tool hosts: fork them from one zygote (see `crate::zygote`).
    crate::zygote::prefer();
    let started_at = SystemTime::now();
    let clock_start = Instant::now();
    let github = github::Actions::detect();
    if let Some(g) = &github {
        g.mask_secrets();
    }
    // The trust rule covers the workflow: from the trusted ref unless it is checked out.
    let trust = crate::repo_config::Trust::from_env(args.trust_repo_config, args.config_ref.clone());
    let (mut workflow, untrusted) = match crate::workflow_trust::load(&args.workflow, args.repo.as_deref(), &trust)? {
        Ok(loaded) => (loaded.workflow, loaded.untrusted),
        Err(code) => return Ok(code),
    };
    args.sandbox.apply(&mut workflow);
    let changes = crate::changes::ChangesRequest {
        repo: args.repo.clone(),
        diff_base: args.diff_base.clone(),
        head: Some(args.base.clone()).filter(|b| b != crate::git::WORKTREE_BASE),
    };
    let plan = match workflow::plan_with(&workflow, &args.inputs, &changes) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    crate::workflow_trust::check_plan(&workflow, &plan, untrusted)?;
    let author = args.author.clone().map(|(name, email)| Author { name, email }).unwrap_or_else(Author::orch);
    if let Some(dir) = args.resume.as_deref()
        && recover::needs_recovery(dir)
    {
        crate::notice::note(format_args!(
            "the run in {} did not finish; recovering it first (as `orch recover` does)",
            dir.display()
        ));
        recover::recover(dir, &author).await?;
    }
    let mut selection =
        select::Selection::new(&plan, &args.only, args.shard, args.from.as_deref(), args.resume.as_deref())?;
    let mut model_args = args.models.with_default(|| plan.model.clone().unwrap_or_else(|| DEFAULT_MODEL.into()));
    let provider = crate::record::provider(&mut model_args, args.record.as_deref(), args.replay.as_deref())?;
    let prices = provider::prices(&model_args)?;
    for warning in provider::check_prices(&prices, &models_used(&plan, &model_args), cost_limit(&plan).as_deref())? {
        args.reporter.note(&format!("warning: {warning}"));
    }
    let run_id = args.run_id.clone().unwrap_or_else(clock::run_id);
    crate::git::validate_run_id(&run_id).map_err(|e| UsageError(e.to_string()))?;
    // One run per run id, as one run per run directory (`run.lock` below).
    let run_id_lock = recover::hold_run_id(&run_id)?;
    let repo = match &args.repo {
        Some(r) => r.clone(),
        None => std::env::current_dir().context("cannot read the current directory")?,
    };
    // Absolute in the report; a missing path is reported by the run clone below.
    let repo = std::fs::canonicalize(&repo).unwrap_or(repo);
    let (extensions, repo_config) = load_extensions(&args, &workflow, &plan, &repo)?;
    let mut fresh = run_dir(args.out.as_deref(), &run_id)?;
    let run_dir = fresh.path().to_path_buf();
    let run_lock = recover::hold_lock(&run_dir)?;
    let reserve = reserve::Reserve::take(&run_dir);
    // The run id, for `orch recover` when the run is killed before it has a report.
    if let Err(e) = std::io::Write::write_all(&mut &*run_lock, run_id.as_bytes()) {
        tracing::warn!("cannot write the run id into {}: {e}", run_dir.join(recover::LOCK_FILE).display());
    }
    let at = Instant::now();
    let base = resolve_base(&repo, &args.base)?;
    let clone = RunClone::create(&repo, &run_dir, &base, &run_id).await.map_err(|e| match e {
        GitError::OpenUser { .. } | GitError::BaseRef { .. } | GitError::Exists(_) => {
            crate::error::Error::from(UsageError(e.to_string()))
        }
        other => crate::error::Error::Failed { what: "cannot create the run clone".into(), cause: Box::new(other) },
    })?;
    let clone_ms = ms(at);
    crate::fail_point::hit("clone-created");
    let resume_from = selection.carry_into(&clone);
    // The trust rule: the trusted ref's definitions, skills and commands when the
    // checkout is another commit; otherwise the run's base commit.
    let config_commit = match repo_config.commit() {
        Some((user_repo, commit)) => crate::repo_config::RepoConfig::at_commit(user_repo, commit),
        None => crate::repo_config::RepoConfig::at_commit(clone.git_dir(), clone.base()),
    };
    let repo_files = agent_defs::load(&config_commit)?;
    let named = repo_files.check(&workflow);
    if !named.is_empty() {
        crate::notice::text(orch_workflows::render_diagnostics(&named));
        crate::notice::note(format_args!(
            "the workflow names agent definitions, skills or commands the repository does not have (read from {})",
            config_commit.describe()
        ));
        return Ok(Code::Usage);
    }
    let uses = resolve_uses(&workflow, &repo_files.agents)?;
    let run_dir = clone.git_dir().parent().map(Path::to_path_buf).unwrap_or(run_dir);
    let sources = crate::agent::Sources::new(
        extensions,
        repo_files,
        &config_commit,
        &workflow.subagents,
        uses,
        &run_dir.join("skills"),
    )?;
    crate::notice::note(format_args!("run {run_id} of `{}`: {}", plan.name, run_dir.display()));

    let run_cancel = CancellationToken::new();
    let interrupts = signals::watch(run_cancel.clone())?;
    let stop = Arc::new(Stop::default());
    if let Some(limit) = plan.limits.timeout {
        let (stop, cancel) = (stop.clone(), run_cancel.clone());
        tokio::spawn(async move {
            tokio::time::sleep(limit.as_std()).await;
            stop.set(StopReason::RunLimit(format!("the run's time limit of {limit} was reached")));
            cancel.cancel();
        });
    }
    let mut shared = Shared {
        run_id: run_id.clone(),
        run_dir: run_dir.clone(),
        workflow_name: plan.name.clone(),
        clone: clone.clone(),
        provider,
        prices,
        default_model: model_args.model.clone(),
        fallback_model: model_args.fallback_model.clone(),
        author: author.clone(),
        meter: Arc::new(events::Meter::new(plan.limits)),
        stop: stop.clone(),
        run_cancel: run_cancel.clone(),
        json: args.json,
        keep_worktrees: args.keep_worktrees,
        cache_dir: None,
        cache_env: Vec::new(),
        reporter: args.reporter.clone(),
        sources,
        resume_from,
        proxy: start_proxy(&plan, &repo).await?,
    };
    let mut report = RunReport {
        schema_version: report::REPORT_VERSION,
        run_id: run_id.clone(),
        workflow: WorkflowInfo {
            name: plan.name.clone(),
            file: args.workflow.display().to_string(),
            description: plan.description.clone(),
        },
        status: RunStatus::Failed,
        exit_code: Code::Failed as u8,
        stopped: None,
        partial: false,
        started_at: clock::rfc3339(started_at),
        finished_at: String::new(),
        duration_ms: 0,
        run_dir: run_dir.clone(),
        repo: repo.clone(),
        base: clone.base().to_string(),
        setup: None,
        agents: Vec::new(),
        synthesis: None,
        overlaps: Vec::new(),
        integration: IntegrationReport { mode: integrate_name(plan.integrate.mode).into(), ..Default::default() },
        totals: Totals::default(),
        timings: report::RunTimings { clone_ms, ..Default::default() },
        publish: None,
        resume_of: args.resume.as_deref().map(|d| std::fs::canonicalize(d).unwrap_or_else(|_| d.to_path_buf())),
    };

    // What `orch recover` starts from if the run is killed before dispatch.
    let mut first = report.clone();
    (first.status, first.exit_code, first.partial) = (RunStatus::Running, recover::KILLED, true);
    // Written by its own thread from here to the end of dispatch (see `live_report`).
    let writer = live_report::DiskWriter::start(&run_dir);
    writer.report(first, "write the first report");
    fresh.keep();

    let mut setup_failed = None;
    let at = Instant::now();
    if !plan.setup.is_empty() {
        let backend = plan.agents().next().map(|a| a.sandbox.backend).unwrap_or_default();
        let (setup, failed) = setup::run(
            &clone,
            &run_dir,
            &run_id,
            &plan.setup,
            setup::SetupSandbox { backend, network: &plan.setup_network, proxy: shared.proxy.as_ref() },
            &run_cancel,
        )
        .await?;
        shared.cache_dir = Some(setup.cache.clone());
        shared.cache_env = setup::cache_env(&setup.cache);
        report.setup = Some(setup);
        setup_failed = failed;
    }
    report.timings.setup_ms = ms(at);
    let shared = Arc::new(shared);
    if let Some(why) = &setup_failed {
        // Its first report on disk before anything later is written.
        drop(writer);
        crate::notice::note(format_args!("{why}"));
        let why = if interrupts.code().is_some() { "interrupted during setup" } else { "setup failed" };
        report.stopped = Some(why.into());
        report.agents =
            plan.nodes().map(|n| AgentReport::empty(n.id(), n.id(), None, AgentStatus::Skipped, why.into())).collect();
    } else {
        let live = live_report::LiveReport::new(report.clone(), github.clone(), interrupts.clone(), writer);
        let concurrency = args.concurrency.or(plan.concurrency).unwrap_or(DEFAULT_CONCURRENCY).max(1);
        let at = Instant::now();
        let dispatch = schedule::Dispatch {
            concurrency: concurrency as usize,
            max_fail: args.max_fail.map(|n| n as usize),
            selection,
        };
        let env = schedule::DispatchEnv {
            reporter: shared.reporter.clone(),
            meter: shared.meter.clone(),
            stop: shared.stop.clone(),
            run_cancel: shared.run_cancel.clone(),
            progress: Box::new(schedule::OnDisk { live }),
        };
        report.agents = schedule::run(&agent::Runner(shared.clone()), env, &plan, dispatch).await;
        report.timings.agents_ms = ms(at);
        if let Some(reason) = interrupts.reason() {
            stop.set(reason);
        }
        // A share of the workflow (`--shard`, `--only`) leaves synthesis to `orch merge`.
        let whole = args.shard.is_none() && args.only.is_empty();
        if stop.get().is_none() && whole {
            let at = Instant::now();
            report.synthesis = synthesize(&shared, &plan, &report.agents, concurrency as usize).await;
            report.timings.synthesis_ms = ms(at);
        }
    }
    let at = Instant::now();
    integrate(&shared, &plan, &mut report, args.prune_branches).await;
    report.timings.integrate_ms = ms(at);
    crate::fail_point::hit("integrated");
    if let Some(resumed) = report.resume_of.clone() {
        let pruned = supersede::prune(clone.user_git_dir().to_path_buf(), resumed, &report).await;
        report.integration.pruned.extend(pruned);
    }
    // Room for the teardown record and the final report, even on a full disk.
    reserve.release();
    // Killed from here on, the run is finished by `orch recover` from this record;
    // without it, the run clone stays for recovery to start from.
    match recover::begin_teardown(&run_dir, &report) {
        Ok(()) => match clone.remove().await {
            Ok(crate::git::Removal::Removed) => {}
            Ok(crate::git::Removal::Kept { worktrees }) => {
                tracing::info!(kept = worktrees.len(), "the run clone stays for the kept worktrees");
            }
            Err(e) => tracing::warn!("cannot remove the run clone: {e}"),
        },
        Err(e) => tracing::warn!(
            "cannot write {} ({e}); the run clone stays in {} so that `orch recover` can finish the run",
            recover::TEARDOWN,
            run_dir.display()
        ),
    }

    // Emptied as each sandbox was torn down.
    let _ = std::fs::remove_dir(run_dir.join("sandbox"));
    crate::fail_point::hit("removed-clone");
    shared.reporter.finish();
    let code = Code::for_run(&report, setup_failed.is_some(), interrupts.code());
    report.stopped = report.stopped.take().or_else(|| stop.get().map(|s| s.to_string()));
    conclude(&mut report, code, clock_start);
    // A share of the workflow leaves publishing to `orch merge`, as it leaves synthesis.
    let code = if args.shard.is_none() && args.only.is_empty() {
        publish_to_github(&workflow, args.publish, args.diff_base.as_deref(), &mut report, code, clock_start).await
    } else {
        crate::publish::left_to_merge(&workflow, args.publish);
        code
    };
    publish(&report, args.junit.as_deref(), github.as_ref())?;
    // The final report is written: nothing is left to recover.
    drop(run_lock);
    let _ = std::fs::remove_file(run_dir.join(recover::LOCK_FILE));
    drop(run_id_lock);
    finish_output(&args, &report)?;
    Ok(code)
}

/// `publish:`, after integration: a failed output fails the run (exit 1); the agents'
/// work stays as it is. `diff_base` is `--diff-base` (a review's lines in a dry run).
async fn publish_to_github(
    workflow: &orch_workflows::Workflow,
    mode: Option<crate::publish::PublishMode>,
    diff_base: Option<&str>,
    report: &mut RunReport,
    code: Code,
    started: Instant,
) -> Code {
    let Ok(json) = serde_json::to_value(&*report) else { return code };
    let Some(published) = crate::publish::publish_run(workflow, &json, mode, diff_base).await else { return code };
    report.publish = serde_json::to_value(&published).ok();
    if published.failed() && matches!(code, Code::Success | Code::Partial) {
        conclude(report, Code::Failed, started);
        return Code::Failed;
    }
    code
}

/// Fills in how the run ended: exit code, status, totals, end time.
pub(crate) fn conclude(report: &mut RunReport, code: Code, started: Instant) {
    report.exit_code = code as u8;
    report.status = match code {
        Code::Success => RunStatus::Succeeded,
        Code::Partial => RunStatus::Partial,
        Code::Interrupted | Code::Terminated => RunStatus::Interrupted,
        _ => RunStatus::Failed,
    };
    report.totals = Totals::of(&report.agents, report.synthesis.as_ref());
    report.finished_at = clock::rfc3339(SystemTime::now());
    report.duration_ms = ms(started);
}

/// Writes a run's final report into `dir`: `report.json` and `report.md` (which replace
/// the journal), then `report.html` (a warning if it cannot be written).
pub(crate) fn write_final(dir: &Path, report: &RunReport) -> crate::error::Result<()> {
    report::write(dir, report).map_err(|e| {
        let full = reserve::full_note(dir).map(|n| format!("; {n}")).unwrap_or_default();
        crate::error::Error::Message(format!(
            "cannot write the final report into {}: {e}{full}; report.json still holds the report written \
             before (`running` or `partial`); once the problem is fixed, `orch recover {}` completes it",
            dir.display(),
            dir.display()
        ))
    })?;
    report::remove_journal(dir);
    recover::end_teardown(dir);
    if let Err(e) = html::write(dir, report) {
        tracing::warn!("cannot write report.html into {}: {e}", dir.display());
    }
    Ok(())
}

/// Writes the report into its run directory, the JUnit file, and the GitHub step
/// summary, outputs and annotations.
pub(crate) fn publish(
    report: &RunReport,
    junit: Option<&Path>,
    github: Option<&github::Actions>,
) -> crate::error::Result<()> {
    write_final(&report.run_dir, report)?;
    if let Some(path) = junit {
        std::fs::write(path, junit::render(report))
            .with_context(|| format!("cannot write the JUnit report {}", path.display()))?;
    }
    if let Some(g) = github {
        if let Err(e) = g.write_summary(report).and_then(|()| g.write_outputs(report)) {
            tracing::warn!("cannot write the GitHub step summary or outputs: {e}");
        }
        g.annotate(report);
    }
    Ok(())
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}

/// The `uses:` of every workflow agent, resolved against the repository's agent
/// definitions; naming one that does not exist is a usage error.
fn resolve_uses(
    workflow: &orch_workflows::Workflow,
    files: &orch_workflows::subagents::AgentFiles,
) -> crate::error::Result<std::collections::HashMap<String, orch_workflows::subagents::Uses>> {
    let mut out = std::collections::HashMap::new();
    for agent in &workflow.agents {
        let Some(name) = &agent.uses else { continue };
        let Some(file) = files.get(name) else {
            let known: Vec<&str> = files.agents.iter().map(|a| a.name.as_str()).collect();
            let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            return Err(UsageError(format!(
                "agent `{}` says `uses: {name}`, but no agent definition has that name at the base commit \
                 (read from {}; found: {known}); add the file, commit it, or fix the name",
                agent.id,
                orch_workflows::subagents::AGENT_DIRS.join(" and ")
            ))
            .into());
        };
        out.insert(agent.id.clone(), orch_workflows::subagents::Uses::resolve(agent, file));
    }
    Ok(out)
}

/// Reads the hooks and MCP servers (repository files from the trusted ref unless it is
/// checked out, see [`crate::repo_config`]). That every `mcp__` tool names a
/// configured server was checked when the workflow was loaded
/// ([`crate::workflow::load_checked`]).
fn load_extensions(
    args: &RunOptions,
    workflow: &orch_workflows::Workflow,
    plan: &Plan,
    repo: &Path,
) -> crate::error::Result<(crate::hooks_config::Extensions, crate::repo_config::RepoConfig)> {
    let trust = crate::repo_config::Trust::from_env(args.trust_repo_config, args.config_ref.clone());
    let config = crate::repo_config::RepoConfig::resolve(repo, &trust).map_err(|e| UsageError(e.to_string()))?;
    if config.is_trusted_ref() {
        crate::notice::note(format_args!(
            "the checked-out commit is not the trusted ref: settings, hooks, MCP servers, agent files, skills \
             and commands come from {}",
            config.describe()
        ));
    }
    let extensions = crate::agent::extensions(&config, repo, &workflow.hooks, &workflow.mcp_servers)?;
    let bash_agents: Vec<&orch_workflows::AgentSpec> = plan
        .nodes()
        .map(|n| match n {
            PlanNode::Agent(spec) => spec,
            PlanNode::DynamicFanOut(d) => &d.template,
        })
        .filter(|spec| spec.tools.iter().any(|t| t == "Bash"))
        .collect();
    let repo_denies =
        extensions.permissions.rules.iter().filter(|r| r.verdict == orch_agents::permissions::Verdict::Deny);
    let denies = repo_denies
        .map(|r| r.rule.as_str())
        .chain(bash_agents.iter().flat_map(|spec| spec.permissions.deny.iter().map(String::as_str)));
    if !bash_agents.is_empty()
        && let Some(note) = crate::settings_permissions::bash_gap_note(denies)
    {
        crate::notice::note(format_args!("{note}"));
    }
    Ok((extensions, config))
}

/// The run directory: `--out`, else under `$ORCH_RUNS_DIR`, `$XDG_STATE_HOME/orch/runs`
/// or `~/.local/state/orch/runs`. It must not exist yet, or be empty. A start that
/// fails before the run's first report removes it again (see [`FreshRunDir`]).
pub(crate) fn run_dir(out: Option<&Path>, run_id: &str) -> crate::error::Result<FreshRunDir> {
    let dir = match out {
        Some(dir) => dir.to_path_buf(),
        None => {
            let base = crate::runs::default_dir()
                .ok_or_else(|| UsageError("cannot choose a run directory: pass --out DIR".into()))?;
            base.join(run_id)
        }
    };
    if let Ok(mut entries) = std::fs::read_dir(&dir)
        && entries.next().is_some()
    {
        return Err(UsageError(format!(
            "the run directory {} is not empty; pass another --out or remove it",
            dir.display()
        ))
        .into());
    }
    let created = !dir.exists();
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create the run directory {}", dir.display()))?;
    Ok(FreshRunDir { dir, created, keep: false })
}

/// A run directory that holds no report yet. Dropped before [`FreshRunDir::keep`],
/// it takes away what orch put in it (locks, the reserve, a partial run clone), and
/// itself if orch made it: a start that fails (not a git repository, a bad base, a
/// workflow naming missing skills) leaves nothing behind. It was empty or new, so
/// everything in it is orch's.
pub(crate) struct FreshRunDir {
    dir: PathBuf,
    created: bool,
    keep: bool,
}

impl FreshRunDir {
    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// The run has started (its first report is written): the directory stays.
    pub(crate) fn keep(&mut self) {
        self.keep = true;
    }
}

impl Drop for FreshRunDir {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if self.created {
            let _ = std::fs::remove_dir_all(&self.dir);
            return;
        }
        for entry in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let _ = match entry.file_type() {
                Ok(t) if t.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
        }
    }
}

/// `--base`: `WORKTREE` commits the checkout's working tree (objects only, as `git stash
/// create` does) and starts there; any other value is a ref. With the default `HEAD`,
/// says once when the checkout has changes the agents will not see.
fn resolve_base(repo: &Path, base: &str) -> crate::error::Result<String> {
    if base == crate::git::WORKTREE_BASE {
        let commit = crate::git::snapshot_worktree(repo)
            .map_err(|e| UsageError(format!("--base WORKTREE: cannot snapshot the working tree: {e}")))?;
        crate::notice::note(format_args!(
            "agents start from the working tree as it is (commit {commit}, not on any branch)"
        ));
        return Ok(commit.to_string());
    }
    if base == "HEAD"
        && let Ok(paths) = crate::git::uncommitted(repo)
        && !paths.is_empty()
    {
        let shown: Vec<&str> = paths.iter().take(3).map(String::as_str).collect();
        let more = if paths.len() > 3 { format!(" and {} more", paths.len() - 3) } else { String::new() };
        tracing::warn!(
            "the checkout has {} uncommitted change{} ({}{more}); agents start from HEAD and will not see \
             them; pass --base WORKTREE to start from the working tree as it is",
            paths.len(),
            if paths.len() == 1 { "" } else { "s" },
            shown.join(", ")
        );
    }
    Ok(base.to_string())
}

/// Runs synthesis when there is something to combine: two or more agents that ran, or
/// a custom `synthesis.prompt`. With a single agent, its answer is the run's answer.
async fn synthesize(
    shared: &Shared,
    plan: &Plan,
    agents: &[AgentReport],
    concurrency: usize,
) -> Option<report::SynthesisReport> {
    let ran = agents.iter().filter(|a| a.status != AgentStatus::Skipped).count();
    if ran == 0 || (agents.len() < 2 && plan.synthesis.prompt.is_none()) {
        return None;
    }
    if !agents.iter().any(|a| matches!(a.status, AgentStatus::Succeeded | AgentStatus::Partial)) {
        return Some(report::SynthesisReport::skipped(
            "every agent failed, so there was nothing to combine; synthesis did not run (see the agents' reasons)",
        ));
    }
    let task = plan.description.clone().unwrap_or_else(|| format!("The workflow `{}`.", plan.name));
    let model = plan.synthesis.model.clone().unwrap_or_else(|| shared.default_model.clone());
    let settings = synthesis::Settings::of(&plan.synthesis, model, concurrency);
    Some(synthesis::run(&synthesis::SynthesisEnv::of(shared), &task, agents, &settings).await)
}

/// The likely conflicts: files changed by agents that do not build on each other
/// (`changed` is `(agent id, paths)`), their lineage read from `git_dir`.
pub(crate) async fn overlaps_of(
    git_dir: Option<PathBuf>,
    agents: &[AgentReport],
    changed: Vec<(String, Vec<PathBuf>)>,
) -> Vec<report::Overlap> {
    let commits: Vec<(String, Option<String>, Option<String>)> =
        agents.iter().map(|a| (a.id.clone(), a.start.clone(), a.commit.clone())).collect();
    let found = tokio::task::spawn_blocking(move || {
        let lineage = crate::git::Lineage::new(
            git_dir.as_deref(),
            commits.iter().map(|(id, start, commit)| (id.as_str(), start.as_deref(), commit.as_deref())),
        );
        crate::git::overlaps(&changed, |a, b| lineage.builds_on(a, b))
    })
    .await
    .unwrap_or_else(|e| {
        tracing::warn!("cannot list the likely conflicts: {e}");
        Vec::new()
    });
    found.into_iter().map(|(path, agents)| report::Overlap { path, agents }).collect()
}

/// Overlaps, then `integrate:`: put the agents' work on the integration branch
/// (`merge`, `squash`), prune the branches it holds (`--prune-branches`,
/// `integrate.prune`), and fetch the rest into the user's repository.
async fn integrate(shared: &Shared, plan: &Plan, report: &mut RunReport, prune: bool) {
    let changed: Vec<(String, Vec<PathBuf>)> = report
        .agents
        .iter()
        .filter(|a| a.commit.is_some())
        .map(|a| (a.id.clone(), a.changed_files.iter().map(|f| f.path.clone()).collect()))
        .collect();
    report.overlaps = overlaps_of(Some(shared.clone.git_dir().to_path_buf()), &report.agents, changed).await;
    let committed: Vec<&AgentReport> = report.agents.iter().filter(|a| a.commit.is_some()).collect();
    let mut branches: Vec<String> = committed.iter().filter_map(|a| a.branch.clone()).collect();
    let integrate = &plan.integrate;
    if integrate.mode == IntegrateMode::None || committed.is_empty() {
        return;
    }
    let mode = match integrate.mode {
        IntegrateMode::Merge => Some(crate::git::IntegrationMode::Merge),
        IntegrateMode::Squash => Some(crate::git::IntegrationMode::Squash),
        IntegrateMode::None | IntegrateMode::Branches => None,
    };
    if let Some(mode) = mode {
        // Failed and cancelled agents' work is fetched, but not integrated.
        let (ids, items): (Vec<String>, Vec<crate::git::Integrand>) = committed
            .iter()
            .filter(|a| matches!(a.status, AgentStatus::Succeeded | AgentStatus::Partial))
            .filter_map(|a| {
                let branch = a.branch.clone()?;
                let start = a.start.as_deref().and_then(|s| git2::Oid::from_str(s).ok()).unwrap_or(shared.clone.base());
                let message = integration_message(integrate.message.as_deref(), a);
                Some((a.id.clone(), crate::git::Integrand { branch, start, message }))
            })
            .unzip();
        let into = shared.clone.integration_branch();
        match shared.clone.integrate(&items, &into, mode, &shared.author).await {
            Ok(outcomes) => {
                let merges = ids
                    .into_iter()
                    .zip(outcomes)
                    .map(|(agent, o)| report::MergeEntry {
                        agent,
                        branch: o.branch,
                        merged: o.merged,
                        conflicts: o.conflicts,
                    })
                    .collect();
                report.integration.merge = Some(report::MergeReport { branch: into.clone(), merges });
                if prune || integrate.prune {
                    match shared.clone.prune_contained(&items, &into).await {
                        Ok(pruned) => {
                            branches.retain(|b| !pruned.contains(b));
                            report.integration.pruned = pruned;
                        }
                        Err(e) => tracing::warn!("cannot prune the agents' branches: {e}"),
                    }
                }
                branches.push(into);
            }
            Err(e) => report.integration.error = Some(format!("cannot integrate the agents' branches: {e}")),
        }
    }
    match shared.clone.fetch_into_user(&branches).await {
        Ok(fetched) => {
            report.integration.fetched =
                fetched.into_iter().map(|f| report::FetchedBranch { branch: f.branch, commit: f.commit }).collect();
        }
        Err(e) => {
            let before = report.integration.error.take().map(|e| format!("{e}; ")).unwrap_or_default();
            report.integration.error = Some(format!("{before}cannot fetch the branches into the repository: {e}"));
        }
    }
}

/// The commit message of an agent's work on the integration branch: `integrate.message`
/// rendered for it, or `<id>: <first line of its summary>`, a blank line, and the
/// summary. A template that fails to render falls back to the default (with a warning).
pub(crate) fn integration_message(template: Option<&str>, agent: &AgentReport) -> String {
    if let Some(template) = template {
        let values = serde_json::json!({
            "id": agent.id,
            "text": agent.text,
            "output": agent.output,
            "item": agent.item,
        });
        match orch_workflows::render_integrate_message(template, &values) {
            Ok(text) if !text.trim().is_empty() => return format!("{}\n", text.trim_end()),
            Ok(_) => tracing::warn!(agent = %agent.id, "integrate.message rendered empty; using the default message"),
            Err(e) => tracing::warn!(agent = %agent.id, "cannot render integrate.message ({e}); using the default"),
        }
    }
    let summary = agent.text.trim();
    match summary.lines().map(str::trim).find(|l| !l.is_empty()) {
        Some(first) => format!("{}: {first}\n\n{summary}\n", agent.id),
        None => format!("{}: {} with no summary\n", agent.id, agent.status.as_str()),
    }
}

fn integrate_name(i: IntegrateMode) -> &'static str {
    match i {
        IntegrateMode::None => "none",
        IntegrateMode::Branches => "branches",
        IntegrateMode::Merge => "merge",
        IntegrateMode::Squash => "squash",
    }
}

/// The run's status in a few words.
pub(crate) fn status_word(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Partial => "finished with partial agents",
        RunStatus::Failed => "failed",
        RunStatus::Interrupted => "was interrupted",
        RunStatus::Running => "is running (or was killed)",
    }
}

/// stdout: the run's answer (synthesis, or the only agent's), or with `--json` a last
/// line with the report. A summary line goes to stderr.
fn finish_output(args: &RunOptions, report: &RunReport) -> crate::error::Result<()> {
    let t = &report.totals;
    crate::notice::note(format_args!(
        "run {} {}: {} succeeded, {} partial, {} failed, {} cancelled, {} skipped; {} turns, ${:.4}; \
         report: {}",
        report.run_id,
        status_word(report.status),
        t.succeeded,
        t.partial,
        t.failed,
        t.cancelled,
        t.skipped,
        t.turns,
        t.cost_usd,
        report.run_dir.join("report.md").display()
    ));
    if args.json {
        args.reporter.json_line(&crate::run_event::RunEvent::run_finished(&report).to_value());
        return Ok(());
    }
    let answer = match (&report.synthesis, report.agents.as_slice()) {
        (Some(s), _) => s.text.clone(),
        (None, [only]) => only.text.clone(),
        _ => String::new(),
    };
    if !answer.trim().is_empty() {
        // Model text: fenced in GitHub mode, so it cannot act as a workflow command.
        args.reporter.answer(answer.trim_end()).context("cannot write the answer to stdout")?;
    }
    Ok(())
}
