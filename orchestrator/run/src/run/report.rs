//! The run report: `report.json` (a versioned, documented shape) and `report.md`, both
//! written into the run directory. The shape is described in README.md ("Run
//! reports"); `REPORT_VERSION` changes whenever a field is removed or changes meaning
//! (adding a field does not change it).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use orch_agents::{Terminal, Usage};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::render::{self, Column};

/// The version of the `report.json` shape.
pub const REPORT_VERSION: u32 = 1;

/// Everything a run did.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunReport {
    pub schema_version: u32,
    pub run_id: String,
    pub workflow: WorkflowInfo,
    /// `succeeded`, `failed`, `partial` or `interrupted`.
    pub status: RunStatus,
    /// The process's exit code.
    pub exit_code: u8,
    /// Why the run stopped early (a run limit, fail-fast, a signal), if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stopped: Option<String>,
    /// Written before the run ended (while it runs, or on an interrupt before
    /// teardown): the final report replaces it. Still there after the process is gone,
    /// it means the run was killed; `orch recover DIR` finishes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
    pub started_at: String,
    pub finished_at: String,
    pub duration_ms: u64,
    pub run_dir: PathBuf,
    /// The user's repository.
    pub repo: PathBuf,
    /// The commit the agents started from.
    pub base: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup: Option<SetupReport>,
    /// In the order they were planned (file order; fan-out instances in item order).
    pub agents: Vec<AgentReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub synthesis: Option<SynthesisReport>,
    /// Files changed by more than one agent where neither built on the other's work (a
    /// `base: needs` stage changing what the stage before it left is none): likely
    /// conflicts.
    pub overlaps: Vec<Overlap>,
    pub integration: IntegrationReport,
    pub totals: Totals,
    /// Where the time went.
    pub timings: RunTimings,
    /// What `publish:` posted to GitHub, or would post (dry run): see `crate::publish`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub publish: Option<Value>,
    /// The run directory this run resumed (`--resume DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_of: Option<PathBuf>,
}

/// Wall-clock phases of the run, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RunTimings {
    /// Making the run clone.
    pub clone_ms: u64,
    pub setup_ms: u64,
    /// From the first agent's start to the last agent's end.
    pub agents_ms: u64,
    pub synthesis_ms: u64,
    /// Overlaps, merges and fetches into the repository.
    pub integrate_ms: u64,
}

/// Wall-clock phases of one agent, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentTimings {
    /// From the start of the agents' phase until it started (behind the concurrency
    /// limit, or waiting for its needs).
    #[serde(default)]
    pub waiting_ms: u64,
    /// Creating its worktree.
    pub worktree_ms: u64,
    /// Preparing its sandbox and starting its tool host.
    pub host_ms: u64,
    /// Its query loop (all attempts).
    pub loop_ms: u64,
    /// Stopping the tool host, tearing the sandbox down, committing, the patch and
    /// removing the worktree.
    pub finish_ms: u64,
}

/// Which workflow ran.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowInfo {
    pub name: String,
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// How the run as a whole ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Succeeded,
    Failed,
    Partial,
    Interrupted,
    /// The run is going, or its process was killed (SIGKILL, a crash) before it
    /// finished: `orch recover DIR` completes such a report.
    Running,
}

/// How one agent ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Completed, and its output (if it has a schema) is valid.
    Succeeded,
    /// Stopped at a limit (its own or the run's); its work so far is committed.
    Partial,
    /// Failed: a model error, an invalid output, or the sandbox or git failed.
    Failed,
    /// Stopped by an interrupt or by fail-fast; its work so far is committed.
    Cancelled,
    /// Never started: a need failed, or the run stopped first.
    Skipped,
    /// Running (only in the report written while the run goes).
    Running,
    /// Not started yet (only in the report written while the run goes or on an
    /// interrupt, before teardown).
    Pending,
}

impl From<orch_agents::event::Status> for AgentStatus {
    fn from(status: orch_agents::event::Status) -> Self {
        use orch_agents::event::Status;
        match status {
            Status::Succeeded => Self::Succeeded,
            Status::Partial => Self::Partial,
            Status::Failed => Self::Failed,
            Status::Cancelled => Self::Cancelled,
        }
    }
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Partial => "partial",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Skipped => "skipped",
            Self::Running => "running",
            Self::Pending => "pending",
        }
    }
}

/// One agent's result.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentReport {
    /// Unique in the run: the key, or `<key>/<slug>` for a fan-out instance.
    pub id: String,
    /// The key under `agents:`.
    pub agent: String,
    /// The fan-out item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<Value>,
    pub status: AgentStatus,
    /// Why it is not `succeeded`, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How its query loop ended (absent when it never ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Terminal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    pub duration_ms: u64,
    /// The final answer.
    pub text: String,
    /// The structured output, when the agent has `output.schema` and it was valid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Why the last answer did not match `output.schema`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
    /// The branch with its committed work (in the run clone, and in the user's
    /// repository when `integrate` fetched it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The commit of its work; absent when it changed nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    pub changed_files: Vec<ChangedFile>,
    /// Files left out of its commit for being larger than `limits.max_file_size`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub too_large_files: Vec<TooLargeFile>,
    /// The patch against the base, relative to the run directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<PathBuf>,
    /// Its events, relative to the run directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<PathBuf>,
    /// Its worktree, when kept (`--keep-worktrees`, or it failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<PathBuf>,
    /// Whether the failure came from the infrastructure (sandbox, git, model auth).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub infrastructure: bool,
    /// Whether its failure is tolerated (`continue_on_failure`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub continue_on_failure: bool,
    pub timings: AgentTimings,
    /// The agent definition it ran (`uses:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uses: Option<String>,
    /// Its nested sub-agents (the whole tree, in the order they finished). Their usage
    /// and cost are already part of this agent's `usage` and `cost_usd`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<orch_agents::subagent::SubagentRecord>,
    /// `--resume`: it had succeeded in the earlier run and was not run again; its
    /// branch is the earlier run's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub carried_over: bool,
    /// `--resume`: it ran again, starting from this commit of the earlier run (its
    /// work or checkpoint then) instead of the base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// Its effective permission rules and where each came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<crate::settings_permissions::PermissionListing>,
    /// How many processes its tool host left behind (it died) that the coordinator had
    /// to kill before it touched the worktree.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub killed_processes: usize,
    /// `base: needs`: the commit it started from (the merge of what it needed); its
    /// changed files and patch are measured against it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<String>,
    /// The MCP servers it named but could not use: why, the tools it lost, and the
    /// last 4 KiB of each one's stderr.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_failures: Vec<crate::mcp::McpFailure>,
    /// Hosts its sandbox contacted through the egress proxy (with bytes) and hosts it
    /// was denied; only for a network allowlist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::proxy::run::NetworkReport>,
}

/// A file an agent wrote that was too large to commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TooLargeFile {
    /// Relative to the repository root.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
}

impl AgentReport {
    /// A report for an agent that did not run (or failed before its loop).
    pub fn empty(id: &str, agent: &str, item: Option<Value>, status: AgentStatus, reason: String) -> Self {
        Self {
            id: id.to_string(),
            agent: agent.to_string(),
            item,
            status,
            reason: Some(reason),
            terminal: None,
            model: None,
            turns: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            duration_ms: 0,
            text: String::new(),
            output: None,
            output_error: None,
            branch: None,
            commit: None,
            changed_files: Vec::new(),
            too_large_files: Vec::new(),
            patch: None,
            transcript: None,
            worktree: None,
            infrastructure: false,
            continue_on_failure: false,
            timings: AgentTimings::default(),
            uses: None,
            subagents: Vec::new(),
            carried_over: false,
            resumed_from: None,
            permissions: None,
            killed_processes: 0,
            start: None,
            mcp_failures: Vec::new(),
            network: None,
        }
    }

    /// Whether this agent's result lets agents that need it run.
    pub fn satisfies_needs(&self) -> bool {
        self.status == AgentStatus::Succeeded || self.continue_on_failure
    }
}

/// A file an agent changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChangedFile {
    pub path: PathBuf,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub kind: String,
}

impl ChangedFile {
    /// A file that differs between two trees, as the report lists it.
    pub fn of(change: &crate::git::FileChange) -> ChangedFile {
        let kind = match change.kind {
            crate::git::ChangeKind::Added => "added",
            crate::git::ChangeKind::Modified => "modified",
            crate::git::ChangeKind::Deleted => "deleted",
            crate::git::ChangeKind::TypeChanged => "type_changed",
        };
        ChangedFile { path: change.path.clone(), kind: kind.into() }
    }
}

/// Per agent (and setup) under a network allowlist: the hosts it contacted, with bytes,
/// and the hosts it was denied. Host names come from the sandbox: code spans.
fn network_lines(md: &mut impl std::fmt::Write, r: &RunReport) {
    let setup = r.setup.as_ref().and_then(|s| s.network.as_ref()).map(|n| ("setup", n));
    let agents = r.agents.iter().filter_map(|a| a.network.as_ref().map(|n| (a.id.as_str(), n)));
    for (id, net) in setup.into_iter().chain(agents).filter(|(_, n)| !n.is_empty()) {
        let contacted: Vec<String> = net
            .contacted
            .iter()
            .map(|h| {
                format!(
                    "{} ({} B up, {} B down)",
                    render::code(&format!("{}:{}", h.host, h.port)),
                    h.bytes_up,
                    h.bytes_down
                )
            })
            .collect();
        let denied: Vec<String> = net.denied.iter().map(|h| render::code(&format!("{}:{}", h.host, h.port))).collect();
        let mut parts = Vec::new();
        if !contacted.is_empty() {
            parts.push(format!("contacted {}", contacted.join(", ")));
        }
        if !denied.is_empty() {
            parts.push(format!("denied {}", denied.join(", ")));
        }
        let _ = writeln!(md, "\n`{id}` network: {}", parts.join("; "));
    }
}

/// The `setup:` commands.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SetupReport {
    pub commands: Vec<SetupCommand>,
    /// Their combined output, relative to the run directory.
    pub log: PathBuf,
    /// The cache directory they could fill, readable by every agent.
    pub cache: PathBuf,
    /// What they contacted and were denied, under a network allowlist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<crate::proxy::run::NetworkReport>,
}

/// One `setup:` command.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SetupCommand {
    pub command: String,
    /// Its exit status (absent when it could not start or was killed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
}

/// The synthesis step.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SynthesisReport {
    /// `succeeded`, `partial`, `failed` or `skipped`.
    pub status: AgentStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Terminal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    /// The unified answer.
    pub text: String,
    /// The prompt it was given, relative to the run directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transcript: Option<PathBuf>,
    /// Tokens one request may hold (half the model's context window), by the loop's
    /// estimate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_tokens: Option<u64>,
    /// The estimated tokens of the final request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// The levels of group syntheses before the final request, when the reports did
    /// not fit one. `turns`, `usage` and `cost_usd` above include every group's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<SynthesisTree>,
}

/// The levels of a tree synthesis, lowest first.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct SynthesisTree {
    /// Most items per group (`None`: as many as fit the budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_size: Option<usize>,
    pub levels: Vec<SynthesisLevel>,
}

/// One level of a tree synthesis: its groups, in agent order.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SynthesisLevel {
    /// 1 for the groups of agents' reports, 2 for groups of level-1 answers, ...
    pub level: u32,
    pub groups: Vec<SynthesisGroup>,
}

/// One group request of a tree synthesis.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SynthesisGroup {
    /// `L<level>-G<n>`.
    pub id: String,
    /// What it combined: agent ids at level 1, group ids above.
    pub members: Vec<String>,
    /// How many agents it stands for.
    pub agents: usize,
    pub status: AgentStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The estimated tokens of its request.
    pub prompt_tokens: u64,
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transcript: Option<PathBuf>,
}

impl SynthesisReport {
    /// Synthesis that did not run, and why.
    pub fn skipped(reason: &str) -> Self {
        SynthesisReport {
            status: AgentStatus::Skipped,
            reason: Some(reason.to_owned()),
            terminal: None,
            model: None,
            turns: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            text: String::new(),
            prompt: None,
            transcript: None,
            budget_tokens: None,
            prompt_tokens: None,
            tree: None,
        }
    }
}

/// A file changed by more than one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Overlap {
    pub path: PathBuf,
    /// The agents that changed it, in agent order.
    pub agents: Vec<String>,
}

/// What `integrate` did with the agents' branches.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct IntegrationReport {
    /// `none`, `branches` or `merge`.
    pub mode: String,
    /// Branches fetched into the user's repository.
    pub fetched: Vec<FetchedBranch>,
    /// `integrate: merge`: the integration branch and each agent's merge.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeReport>,
    /// Why integration did not (fully) happen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `--prune-branches`/`integrate.prune`: agents' branches deleted because the
    /// integration branch holds their work (never fetched into the repository); and
    /// after `--resume`, earlier runs' branches deleted from the repository because a
    /// branch of this run holds them (see `supersede.rs`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pruned: Vec<String>,
}

/// A branch now in the user's repository.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FetchedBranch {
    pub branch: String,
    pub commit: String,
}

/// The merges into the integration branch.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MergeReport {
    pub branch: String,
    pub merges: Vec<MergeEntry>,
}

/// One agent branch merged (or not) into the integration branch.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MergeEntry {
    pub agent: String,
    pub branch: String,
    pub merged: bool,
    /// Paths in conflict; then the branch was skipped.
    pub conflicts: Vec<PathBuf>,
}

/// Sums over the agents and synthesis.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    /// Agents by status.
    pub succeeded: usize,
    pub partial: usize,
    pub failed: usize,
    pub cancelled: usize,
    pub skipped: usize,
    /// Running or not started yet (only while the run goes or on an interrupt).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pending: usize,
}

/// For `skip_serializing_if` on counts.
pub(crate) fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl Totals {
    pub fn of(agents: &[AgentReport], synthesis: Option<&SynthesisReport>) -> Totals {
        let mut t = Totals::default();
        for a in agents {
            t.turns += a.turns;
            t.usage += a.usage;
            t.cost_usd += a.cost_usd;
            match a.status {
                AgentStatus::Succeeded => t.succeeded += 1,
                AgentStatus::Partial => t.partial += 1,
                AgentStatus::Failed => t.failed += 1,
                AgentStatus::Cancelled => t.cancelled += 1,
                AgentStatus::Skipped => t.skipped += 1,
                AgentStatus::Running | AgentStatus::Pending => t.pending += 1,
            }
        }
        if let Some(s) = synthesis {
            t.turns += s.turns;
            t.usage += s.usage;
            t.cost_usd += s.cost_usd;
        }
        t
    }
}

/// Reads the `report.json` of the run directory `dir`; a missing, unreadable or
/// other-version report is the caller's mistake.
pub fn read(dir: &Path) -> Result<RunReport, crate::exit::UsageError> {
    use crate::exit::UsageError;
    let path = dir.join("report.json");
    let text = std::fs::read(&path)
        .map_err(|e| UsageError(format!("cannot read {}: {e}; give the directory of an orch run", path.display())))?;
    let report: RunReport = serde_json::from_slice(&text)
        .map_err(|e| UsageError(format!("{} is not an orch report: {e}", path.display())))?;
    if report.schema_version != REPORT_VERSION {
        return Err(UsageError(format!(
            "{} has report schema version {}, this orch reads version {REPORT_VERSION}",
            path.display(),
            report.schema_version
        )));
    }
    let mut report = report;
    if report.status == RunStatus::Running || report.partial {
        overlay_journal(dir, &mut report);
    }
    Ok(report)
}

/// The run directory's journal: one line of JSON per agent that ended (its final
/// report), appended as it ends, while `report.json` is rewritten at most once a second.
/// The final report replaces it.
pub const JOURNAL: &str = "agents.jsonl";

/// `agent`'s final report as a journal line (JSON and a newline), for
/// [`append_journal`].
pub fn journal_line(agent: &AgentReport) -> std::io::Result<Vec<u8>> {
    let mut line = serde_json::to_vec(agent).map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

/// Appends `lines` (whole journal lines) to the journal of the run in `dir` in one
/// write, flushed to disk before it returns.
pub fn append_journal(dir: &Path, lines: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(dir.join(JOURNAL))?;
    file.write_all(lines)?;
    file.sync_data()
}

/// Removes the journal once the final report holds everything in it.
pub fn remove_journal(dir: &Path) {
    match std::fs::remove_file(dir.join(JOURNAL)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", dir.join(JOURNAL).display()),
    }
}

/// Lays the journal's agents over a report in progress: an agent that ended replaces
/// its `running`, `pending` or interrupted entry. A line cut short by a crash is
/// skipped.
pub(crate) fn overlay_journal(dir: &Path, report: &mut RunReport) {
    let Ok(text) = std::fs::read(dir.join(JOURNAL)) else { return };
    let mut at: std::collections::HashMap<String, usize> =
        report.agents.iter().enumerate().map(|(i, a)| (a.id.clone(), i)).collect();
    let mut changed = false;
    for line in text.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(agent) = serde_json::from_slice::<AgentReport>(line) else { continue };
        changed = true;
        match at.get(&agent.id) {
            Some(&i) => report.agents[i] = agent,
            None => {
                at.insert(agent.id.clone(), report.agents.len());
                report.agents.push(agent);
            }
        }
    }
    if changed {
        report.totals = Totals::of(&report.agents, report.synthesis.as_ref());
    }
}

/// Writes `report.json` and `report.md` into `dir` (each through a temporary file and
/// a rename, so a reader never sees half a report). Both are streamed to their files:
/// the report of a thousand agents is megabytes, rewritten while they run.
pub fn write(dir: &Path, report: &RunReport) -> std::io::Result<()> {
    write_atomic_with(&dir.join("report.json"), |out| {
        serde_json::to_writer_pretty(out, report).map_err(std::io::Error::other)
    })?;
    write_atomic_with(&dir.join("report.md"), |out| {
        let mut md = FmtToIo { out, error: None };
        markdown_to(&mut md, report);
        md.error.map_or(Ok(()), Err)
    })
}

/// `std::fmt::Write` over an `std::io::Write`, keeping the first I/O error.
struct FmtToIo<'a, W: std::io::Write> {
    out: &'a mut W,
    error: Option<std::io::Error>,
}

impl<W: std::io::Write> std::fmt::Write for FmtToIo<'_, W> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.error.is_some() {
            return Err(std::fmt::Error);
        }
        self.out.write_all(s.as_bytes()).map_err(|e| {
            self.error = Some(e);
            std::fmt::Error
        })
    }
}

/// Writes `bytes` to `path` through `<path>.tmp`: written, flushed to disk (`fsync`),
/// renamed over `path`, and the directory flushed, so after a crash or a power cut
/// `path` holds the old bytes or the new ones, never part of either. A write that fails
/// (a full disk) leaves `path` as it was and removes the temporary file.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// [`write_atomic`] of what `fill` writes, through a buffer.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = path.with_file_name(name);
    let written = std::fs::File::create(&tmp).and_then(|f| {
        let mut out = std::io::BufWriter::with_capacity(64 << 10, f);
        fill(&mut out)?;
        out.into_inner().map_err(std::io::IntoInnerError::into_error)?.sync_all()
    });
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(std::io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display())));
    }
    if let Some(dir) = path.parent()
        && let Ok(dir) = std::fs::File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The columns of `report.md`'s agent table.
const REPORT_COLUMNS: &[Column] =
    &[Column::Agent, Column::Status, Column::Turns, Column::Cost, Column::FileCount, Column::Branch];

/// `report.md`: the summary a person reads first.
pub fn markdown(r: &RunReport) -> String {
    let mut md = String::new();
    markdown_to(&mut md, r);
    md
}

/// [`markdown`], written into `md` as it is made (a run of many agents has a long
/// report: [`write`] streams it to the file instead of holding it whole).
fn markdown_to(md: &mut impl std::fmt::Write, r: &RunReport) {
    let _ = writeln!(md, "# orch run {}: {}\n", render::code(&r.run_id), render::cell(&r.workflow.name));
    let _ = writeln!(
        md,
        "**{}** in {} · {} agents: {} succeeded, {} partial, {} failed, {} cancelled, {} skipped · {} turns · {}\n",
        status_word(r.status),
        render::seconds(r.duration_ms),
        r.agents.len(),
        r.totals.succeeded,
        r.totals.partial,
        r.totals.failed,
        r.totals.cancelled,
        r.totals.skipped,
        r.totals.turns,
        render::cost(r.totals.cost_usd),
    );
    if let Some(why) = &r.stopped {
        let _ = writeln!(md, "Stopped early: {}\n", render::cell(why));
    }
    let _ = md.write_str(&render::agent_table(r, REPORT_COLUMNS, None, usize::MAX));
    for a in r.agents.iter().filter(|a| !a.too_large_files.is_empty()) {
        let files: Vec<String> =
            a.too_large_files.iter().map(|f| format!("`{}` ({} bytes)", f.path.display(), f.size)).collect();
        let _ = writeln!(md, "\n`{}`: not committed, over the file size limit: {}", a.id, files.join(", "));
    }
    network_lines(md, r);
    if let Some(s) = &r.synthesis {
        let _ = md.write_str(&render::synthesis_head(s, "##"));
        if !s.text.trim().is_empty() {
            let _ = writeln!(md, "{}\n", s.text.trim());
        }
        let _ = md.write_str(&synthesis_tree(s));
    }
    let _ = md.write_str(&render::overlaps(r, "##"));
    if let Some(merge) = &r.integration.merge {
        let _ = writeln!(md, "\n## Integration branch `{}`\n", merge.branch);
        for m in &merge.merges {
            if m.merged {
                let _ = writeln!(md, "- `{}`: merged", m.agent);
            } else {
                let paths: Vec<String> = m.conflicts.iter().map(|p| format!("`{}`", p.display())).collect();
                let _ = writeln!(md, "- `{}`: **not merged**, conflicts in {}", m.agent, paths.join(", "));
            }
        }
    }
    if let Some(error) = &r.integration.error {
        let _ = writeln!(md, "\nIntegration failed: {error}");
    }
    let _ = writeln!(md, "\n## Agents");
    let fold = r.agents.len() > render::FOLD_AFTER;
    let mut folded: Option<AgentStatus> = None;
    for a in render::by_status(&r.agents) {
        // Past FOLD_AFTER agents, each status but failed and partial is one block.
        let fold_as = (fold && !matches!(a.status, AgentStatus::Failed | AgentStatus::Partial)).then_some(a.status);
        if fold_as != folded {
            if folded.is_some() {
                let _ = md.write_str("\n</details>\n");
            }
            if let Some(status) = fold_as {
                let n = r.agents.iter().filter(|b| b.status == status).count();
                let _ = writeln!(md, "\n<details><summary>{n} {} agents</summary>", status.as_str());
            }
            folded = fold_as;
        }
        let _ = writeln!(md, "\n### {} ({})\n", render::code(&a.id), a.status.as_str());
        if let Some(reason) = &a.reason {
            let _ = writeln!(md, "{reason}\n");
        }
        if a.killed_processes > 0 {
            let _ = writeln!(md, "{} processes it left running were killed at its end.\n", a.killed_processes);
        }
        for f in &a.mcp_failures {
            let tools: Vec<String> = f.tools.iter().map(|t| render::code(t)).collect();
            let _ = writeln!(
                md,
                "The MCP server {} failed ({} unavailable): {}\n",
                render::code(&f.server),
                tools.join(", "),
                render::cell(&f.reason)
            );
            if !f.stderr.trim().is_empty() {
                let _ = writeln!(md, "Its stderr (last 4 KiB):\n\n{}\n", render::code_block(f.stderr.trim_end()));
            }
        }
        if let Some(w) = &a.worktree {
            let _ = writeln!(md, "Worktree kept at `{}`\n", w.display());
        }
        if a.carried_over {
            let _ = writeln!(md, "Carried over from the resumed run: not run again.\n");
        }
        if let Some(commit) = &a.resumed_from {
            let _ = writeln!(md, "Run again from the resumed run's work (commit `{commit}`).\n");
        }
        for f in &a.changed_files {
            let _ = writeln!(md, "- {} `{}`", f.kind, f.path.display());
        }
        if !a.changed_files.is_empty() {
            let _ = md.write_char('\n');
        }
        if !a.text.trim().is_empty() {
            let _ = writeln!(md, "{}", a.text.trim());
        }
    }
    if folded.is_some() {
        let _ = md.write_str("\n</details>\n");
    }
    if let Some(published) = &r.publish {
        let _ = md.write_str(&crate::publish::markdown(published));
    }
}

/// The levels and groups of a tree synthesis, folded (empty for one request).
fn synthesis_tree(s: &SynthesisReport) -> String {
    let Some(tree) = &s.tree else { return String::new() };
    let mut md = String::from("<details><summary>Synthesis tree</summary>\n\n");
    for level in &tree.levels {
        let _ = writeln!(md, "Level {}:\n", level.level);
        for g in &level.groups {
            let members: Vec<String> = g.members.iter().map(|m| render::code(m)).collect();
            let _ = write!(md, "- {} ({}, {} tokens", render::code(&g.id), g.status.as_str(), g.prompt_tokens);
            if let Some(reason) = &g.reason {
                let _ = write!(md, ": {}", render::one_line(reason));
            }
            let _ = writeln!(md, "): {}", members.join(", "));
        }
        md.push('\n');
    }
    md.push_str("Then the final request over the last level's answers.\n\n</details>\n");
    md
}

fn status_word(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Succeeded => "Succeeded",
        RunStatus::Failed => "Failed",
        RunStatus::Partial => "Partial",
        RunStatus::Interrupted => "Interrupted",
        RunStatus::Running => "Running (or killed before it finished)",
    }
}
