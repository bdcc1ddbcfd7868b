//! `orch recover DIR`, also the first step of `orch run --resume DIR` when the run in
//! DIR did not finish: what a run killed with SIGKILL (or a crash) left is finished
//! here.
//!
//! - The run holds `<run_dir>/run.lock` (an advisory lock the kernel drops when the
//!   process dies), so a run that is still going is never recovered under its feet.
//! - Every worktree still hanging off the run clone is committed on its branch, as the
//!   agent's work: through libgit2 on the run clone with the checkout as working tree
//!   (the coordinator's own records, as in a live run), so a checkout still owned by
//!   the sandbox uid needs no `safe.directory` and its `.git` file is not trusted.
//!   Before that, what the agent may have left running is killed (its cgroup).
//! - Every branch of the run with work on it is fetched into the user's repository
//!   (unless the workflow said `integrate: none`), and its patch written.
//! - Leftovers are cleaned: the agents' cgroups, orphaned containers of orch (by
//!   label), the private tmp and home directories, the committed worktrees, and the run
//!   clone when nothing needs it any more.
//! - The report is completed: agents that were running are `cancelled` with their work,
//!   those that never started `skipped`, the run `interrupted` with exit code 137.

use std::collections::HashMap;
use std::fs::File;

use nix::fcntl::{Flock, FlockArg};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::Context as _;
use crate::exit::UsageError;
use crate::git::{Author, ChangeKind, RunClone, Worktree, safe_name};

use super::report::{self, AgentReport, AgentStatus, ChangedFile, RunReport, RunStatus, Totals};

/// The lock file a running coordinator holds in its run directory.
pub const LOCK_FILE: &str = "run.lock";

/// The exit code a run killed by SIGKILL gave its caller (128 + 9).
pub const KILLED: u8 = 137;

/// Takes the run directory's lock (`flock`) for as long as the returned value lives.
/// Fails when another process holds it.
pub fn hold_lock(run_dir: &Path) -> crate::error::Result<Flock<File>> {
    let path = run_dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open the lock file {}", path.display()))?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(UsageError(format!(
            "the run in {} is still going (another orch holds {}); wait for it or stop it first",
            run_dir.display(),
            path.display()
        ))
        .into()),
        Err((_, e)) => Err(e).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Whether the run in `dir` ended without its final report: no report at all next to
/// a run clone, a report still `running`, or the partial report of an interrupt.
pub fn needs_recovery(dir: &Path) -> bool {
    match report::read(dir) {
        Ok(r) => r.status == RunStatus::Running || r.partial,
        Err(_) => dir.join(crate::git::CLONE_DIR).is_dir(),
    }
}

/// Finishes the run in `dir` (see the module documentation) and returns its completed
/// report, also written into `dir`.
pub async fn recover(dir: &Path, author: &Author) -> crate::error::Result<RunReport> {
    let dir = std::fs::canonicalize(dir).with_context(|| format!("cannot find the run directory {}", dir.display()))?;
    let _lock = hold_lock(&dir)?;
    let prior = report::read(&dir).ok();
    if let Some(r) = &prior
        && r.status != RunStatus::Running
        && !r.partial
    {
        return Err(UsageError(format!(
            "the run in {} finished (its report says `{}`); there is nothing to recover",
            dir.display(),
            r.exit_code
        ))
        .into());
    }
    let run_id = match &prior {
        Some(r) => r.run_id.clone(),
        None => run_id_of(&dir)?,
    };
    let clone = RunClone::reopen(&dir, &run_id).await.map_err(|e| {
        UsageError(format!("cannot recover {}: {e}; is it the directory of an orch run?", dir.display()))
    })?;
    let mut report = prior.unwrap_or_else(|| blank_report(&dir, &run_id, &clone));
    let ids: HashMap<String, String> =
        report.agents.iter().filter_map(|a| safe_name(&a.id).ok().map(|n| (n, a.id.clone()))).collect();
    let mut problems: Vec<String> = Vec::new();

    let worktrees = clone.leftover_worktrees()?;
    for worktree in worktrees {
        let id = ids.get(worktree.name()).cloned().unwrap_or_else(|| worktree.name().to_owned());
        kill_leftovers(&run_id, &id);
        let at = report.agents.iter().position(|a| a.id == id);
        let status = at.map(|i| report.agents[i].status);
        // A kept worktree of an agent that finished (failed, `--keep-worktrees`) is
        // already committed; committing again changes nothing.
        let message = format!(
            "orch: {id} (recovered)\n\nRun {run_id} of workflow `{}` ended before it committed this work; \
             `orch recover` committed it.\n",
            report.workflow.name
        );
        match worktree.commit_all(&message, author).await {
            Ok(_) => {}
            Err(e) => {
                problems.push(format!("cannot commit the work of `{id}` in {}: {e}", worktree.path().display()));
                continue;
            }
        }
        let entry = match at {
            Some(i) => &mut report.agents[i],
            None => {
                report.agents.push(AgentReport::empty(&id, &id, None, AgentStatus::Cancelled, String::new()));
                report.agents.last_mut().ok_or_else(|| crate::error::Error::Message("no agent".into()))?
            }
        };
        if matches!(status, None | Some(AgentStatus::Running | AgentStatus::Pending | AgentStatus::Cancelled)) {
            entry.status = AgentStatus::Cancelled;
            entry.reason = Some(
                "the run ended (killed, or crashed) while this agent ran; `orch recover` committed what it left".into(),
            );
        }
        record_branch(&clone, &worktree, &dir, entry).await;
        let keep = entry.worktree.is_some() && entry.status == AgentStatus::Failed;
        if !keep && let Err(e) = worktree.remove().await {
            problems.push(format!("cannot remove the worktree of `{id}`: {e}"));
        }
    }
    let _ = std::fs::remove_dir_all(dir.join("sandbox"));
    reap_containers().await;

    for agent in &mut report.agents {
        match agent.status {
            AgentStatus::Pending => {
                agent.status = AgentStatus::Skipped;
                agent.reason = Some("the run ended (killed, or crashed) before it started".into());
            }
            AgentStatus::Running => {
                agent.status = AgentStatus::Cancelled;
                agent.reason = Some("the run ended (killed, or crashed) while it ran; it left no worktree".into());
            }
            _ => {}
        }
    }
    if report.integration.mode != "none" {
        let branches: Vec<String> = report
            .agents
            .iter()
            .filter(|a| a.commit.is_some())
            .filter_map(|a| a.branch.clone())
            .filter(|b| b.starts_with(&format!("orch/{run_id}/")))
            .filter(|b| !report.integration.fetched.iter().any(|f| f.branch == *b))
            .collect();
        for branch in branches {
            match clone.fetch_into_user(std::slice::from_ref(&branch)).await {
                Ok(fetched) => report
                    .integration
                    .fetched
                    .extend(fetched.into_iter().map(|f| report::FetchedBranch { branch: f.branch, commit: f.commit })),
                Err(e) => problems.push(format!("cannot fetch {branch} into the repository: {e}")),
            }
        }
    }
    if problems.is_empty() && report.integration.mode != "none" {
        match clone.remove().await {
            Ok(_) => {}
            Err(e) => problems.push(format!("cannot remove the run clone: {e}")),
        }
    }

    report.partial = false;
    report.status = RunStatus::Interrupted;
    report.exit_code = match report.exit_code {
        130 | 143 => report.exit_code,
        _ => KILLED,
    };
    let how = match report.exit_code {
        130 => "after SIGINT",
        143 => "after SIGTERM",
        _ => "killed (SIGKILL, or a crash)",
    };
    let before = report.stopped.take().map(|s| format!("{}; ", s.split(" (this report").next().unwrap_or(&s)));
    let mut stopped = format!(
        "{}the run ended {how} before its final report; `orch recover` committed and fetched what the agents left",
        before.unwrap_or_default()
    );
    if !problems.is_empty() {
        stopped.push_str(&format!("; problems: {}", problems.join("; ")));
        report.integration.error = Some(problems.join("; "));
    }
    report.stopped = Some(stopped);
    report.totals = Totals::of(&report.agents, report.synthesis.as_ref());
    report.finished_at = crate::clock::rfc3339(SystemTime::now());
    super::write_final(&dir, &report)?;
    Ok(report)
}

/// Fills in `entry`'s branch, commit, changed files and patch from its branch in the
/// run clone (checkpoints included).
async fn record_branch(clone: &RunClone, worktree: &Worktree, dir: &Path, entry: &mut AgentReport) {
    let Some(tip) = super::checkpoint::branch_tip(clone.git_dir(), worktree.branch()) else { return };
    if tip == clone.base().to_string() {
        entry.branch = None;
        entry.commit = None;
        return;
    }
    entry.branch = Some(worktree.branch().to_owned());
    entry.commit = Some(tip);
    if let Ok(files) = worktree.changed_files().await {
        entry.changed_files = files
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
    }
    if let Ok(patch) = worktree.patch().await {
        let rel = PathBuf::from("patches").join(format!("{}.patch", worktree.name()));
        let written = std::fs::create_dir_all(dir.join("patches")).and_then(|()| std::fs::write(dir.join(&rel), patch));
        if written.is_ok() {
            entry.patch = Some(rel);
        }
    }
}

/// Kills what an agent may have left running: its cgroup (as root, where the sandbox
/// made one). A normal user's tool host stops by itself when its pipe to the dead
/// coordinator closes, and kills its commands.
fn kill_leftovers(run_id: &str, agent_id: &str) {
    crate::host::kill_dead_sandboxes(&format!("{run_id}-{agent_id}"));
}

/// Removes orch's containers whose coordinator is gone, when a Docker daemon answers
/// within a few seconds.
async fn reap_containers() {
    let reap = async {
        let docker = orch_sandbox::container::connect().await.ok()?;
        orch_sandbox::container::reap_leftovers(&docker).await.ok()
    };
    if let Ok(Some(n)) = tokio::time::timeout(Duration::from_secs(5), reap).await
        && n > 0
    {
        tracing::info!("removed {n} leftover containers");
    }
}

/// The run id of a run directory without a report: the one directory under the run
/// clone's `refs/heads/orch/`.
fn run_id_of(dir: &Path) -> crate::error::Result<String> {
    let refs = dir.join(crate::git::CLONE_DIR).join("refs/heads/orch");
    let mut ids = std::fs::read_dir(&refs)
        .map_err(|e| {
            UsageError(format!(
                "{} has neither a report nor a run clone ({}: {e}); give the directory of an orch run",
                dir.display(),
                refs.display()
            ))
        })?
        .filter_map(|e| e.ok().and_then(|e| e.file_name().to_str().map(str::to_owned)));
    match (ids.next(), ids.next()) {
        (Some(id), None) => Ok(id),
        _ => {
            Err(UsageError(format!("cannot tell the run id of {}: pass the run directory itself", dir.display()))
                .into())
        }
    }
}

/// The report of a run that died before it wrote one.
fn blank_report(dir: &Path, run_id: &str, clone: &RunClone) -> RunReport {
    let user = clone.user_git_dir();
    let repo = match user.file_name() {
        Some(name) if name == ".git" => user.parent().map(Path::to_path_buf).unwrap_or_else(|| user.to_path_buf()),
        _ => user.to_path_buf(),
    };
    RunReport {
        schema_version: report::REPORT_VERSION,
        run_id: run_id.to_owned(),
        workflow: report::WorkflowInfo { name: String::new(), file: String::new(), description: None },
        status: RunStatus::Interrupted,
        exit_code: KILLED,
        stopped: None,
        partial: false,
        started_at: String::new(),
        finished_at: String::new(),
        duration_ms: 0,
        run_dir: dir.to_path_buf(),
        repo,
        base: clone.base().to_string(),
        setup: None,
        agents: Vec::new(),
        synthesis: None,
        publish: None,
        overlaps: Vec::new(),
        integration: report::IntegrationReport { mode: "branches".into(), ..Default::default() },
        totals: Totals::default(),
        timings: Default::default(),
    }
}

/// `orch recover DIR`: recovers, says what it did on stderr, and exits 0 when every
/// agent's work is committed and fetched, 3 when something could not be.
pub async fn command(dir: &Path, author: Option<(String, String)>) -> crate::error::Result<crate::exit::Code> {
    let author = author.map(|(name, email)| Author { name, email }).unwrap_or_else(Author::orch);
    let report = recover(dir, &author).await?;
    let committed = report.agents.iter().filter(|a| a.commit.is_some()).count();
    crate::notice::note(format_args!(
        "recovered run {}: {committed} agents' work committed, {} branches in the repository; report: {}",
        report.run_id,
        report.integration.fetched.len(),
        report.run_dir.join("report.md").display()
    ));
    Ok(match &report.integration.error {
        Some(problems) => {
            crate::notice::note(format_args!("{problems}"));
            crate::exit::Code::Infrastructure
        }
        None => crate::exit::Code::Success,
    })
}
