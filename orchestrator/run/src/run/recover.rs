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
//!
//! A crash can come at any moment, so each stage of a run leaves what recovery needs:
//!
//! - Before the run clone is ready: `run.lock` holds the run id; recovery removes what
//!   the clone left and reports a run in which no agent started.
//! - Before dispatch: the first report (`running`, no agents yet) names the workflow.
//! - While agents run: the live report and `agents.jsonl`. A `report.json` that cannot
//!   be parsed (cut short) is rebuilt from `agents.jsonl`, the worktrees and the run
//!   clone's branches; when the run clone is gone too, recovery fails naming the file.
//! - Teardown: before the run clone is removed the run writes `teardown.json`, the
//!   report once integration ended. A run killed after that (the clone half removed, or
//!   removed but no final report) is finished from that record: the rest is removed
//!   and the report completed, nothing is committed or fetched again.

use std::collections::HashMap;
use std::fs::File;

use nix::fcntl::{Flock, FlockArg};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::error::Context as _;
use crate::exit::UsageError;
use crate::git::{Author, ChangeKind, RunClone, Worktree, safe_name};

use super::report::{self, AgentReport, AgentStatus, ChangedFile, RunReport, RunStatus, Totals};

/// The lock file a running coordinator holds in its run directory. It holds the run id.
pub const LOCK_FILE: &str = "run.lock";

/// The record of a run in teardown: its report once integration ended, written before
/// the run clone is removed, removed with the final report.
pub const TEARDOWN: &str = "teardown.json";

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

/// The lock of a run id, held for the life of the run that uses it (see
/// [`hold_run_id`]); removed when dropped.
pub struct RunIdLock {
    path: PathBuf,
    _lock: Flock<File>,
}

impl Drop for RunIdLock {
    fn drop(&mut self) {
        // Still locked here: a run that opens the file now finds it gone and retries.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Where run id locks live: `$XDG_STATE_HOME/orch/run-ids`, else
/// `~/.local/state/orch/run-ids`, else a directory of this user under the temporary
/// directory.
fn run_id_dir() -> PathBuf {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("XDG_STATE_HOME")
        .map(|d| d.join("orch"))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/orch")))
        .unwrap_or_else(|| std::env::temp_dir().join(format!("orch-{}", nix::unistd::getuid())))
        .join("run-ids")
}

/// Takes the lock of `run_id` (`flock` on `run-ids/<run_id>.lock` in orch's state
/// directory, released by the kernel if the process dies): one run per run id, so
/// branch, cgroup and container names of two runs cannot collide and one run's end
/// cannot clean up another's. Fails when another run holds it.
pub fn hold_run_id(run_id: &str) -> crate::error::Result<RunIdLock> {
    use std::io::Write as _;
    use std::os::unix::fs::MetadataExt as _;
    crate::git::validate_run_id(run_id).map_err(|e| UsageError(e.to_string()))?;
    let dir = run_id_dir();
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the directory of run id locks {}", dir.display()))?;
    let path = dir.join(format!("{run_id}.lock"));
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot open the lock file {}", path.display()))?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => {
                let holder = std::fs::read_to_string(&path).ok().filter(|p| !p.trim().is_empty());
                let holder = holder.map(|p| format!(" (process {})", p.trim())).unwrap_or_default();
                return Err(UsageError(format!(
                    "the run id `{run_id}` is in use by another orch run{holder}, which holds {}; pass another \
                     --run-id, or wait for that run to end",
                    path.display()
                ))
                .into());
            }
            Err((_, e)) => return Err(e).with_context(|| format!("cannot lock {}", path.display())),
        };
        // The run that held it may have removed the file between our open and our lock.
        let same = match (lock.metadata(), std::fs::metadata(&path)) {
            (Ok(held), Ok(now)) => held.ino() == now.ino() && held.dev() == now.dev(),
            _ => false,
        };
        if !same {
            continue;
        }
        let _ = lock.set_len(0);
        let _ = (&*lock).write_all(std::process::id().to_string().as_bytes());
        return Ok(RunIdLock { path, _lock: lock });
    }
}

/// Whether the run in `dir` ended without its final report: no report (or one cut
/// short) next to a run clone, a lock file or a teardown record, a report still
/// `running`, or the partial report of an interrupt.
pub fn needs_recovery(dir: &Path) -> bool {
    match report::read(dir) {
        Ok(r) => r.status == RunStatus::Running || r.partial,
        Err(_) => [crate::git::CLONE_DIR, LOCK_FILE, TEARDOWN].iter().any(|f| dir.join(f).exists()),
    }
}

/// What the run directory's `report.json` holds.
enum Prior {
    Missing,
    /// There, but not a whole report (cut short by a crash or a full disk): why.
    Torn(String),
    Read(Box<RunReport>),
}

fn read_prior(dir: &Path) -> crate::error::Result<Prior> {
    let path = dir.join("report.json");
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Prior::Missing),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    if let Err(e) = serde_json::from_slice::<RunReport>(&text) {
        return Ok(Prior::Torn(e.to_string()));
    }
    Ok(Prior::Read(Box::new(report::read(dir)?)))
}

/// The teardown record of the run in `dir`, if it got that far.
fn read_teardown(dir: &Path) -> Option<RunReport> {
    let text = std::fs::read(dir.join(TEARDOWN)).ok()?;
    match serde_json::from_slice(&text) {
        Ok(r) => Some(r),
        Err(e) => {
            // Written through a rename: a whole record or none. Not one of ours.
            tracing::warn!("ignoring {}: {e}", dir.join(TEARDOWN).display());
            None
        }
    }
}

/// Writes the teardown record (see [`TEARDOWN`]) before the run clone is removed.
pub(crate) fn begin_teardown(dir: &Path, report: &RunReport) -> std::io::Result<()> {
    let json = serde_json::to_vec(report).map_err(std::io::Error::other)?;
    report::write_atomic(&dir.join(TEARDOWN), &json)
}

/// Removes the teardown record once the final report is written.
pub(crate) fn end_teardown(dir: &Path) {
    match std::fs::remove_file(dir.join(TEARDOWN)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", dir.join(TEARDOWN).display()),
    }
}

/// The run id recorded in the lock file of `dir`.
fn run_id_in_lock(dir: &Path) -> Option<String> {
    let id = std::fs::read_to_string(dir.join(LOCK_FILE)).ok()?;
    let id = id.trim();
    crate::git::validate_run_id(id).ok().map(|()| id.to_owned())
}

/// Finishes the run in `dir` (see the module documentation) and returns its completed
/// report, also written into `dir`.
pub async fn recover(dir: &Path, author: &Author) -> crate::error::Result<RunReport> {
    let dir = std::fs::canonicalize(dir).with_context(|| format!("cannot find the run directory {}", dir.display()))?;
    let _lock = hold_lock(&dir)?;
    // The killed run's room for its last writes is ours now.
    super::reserve::release(&dir);
    let prior = read_prior(&dir)?;
    let teardown = read_teardown(&dir);
    if let Prior::Read(r) = &prior
        && r.status != RunStatus::Running
        && !r.partial
    {
        if teardown.is_some() {
            // Killed after the final report and before the record went: done.
            end_teardown(&dir);
        }
        return Err(UsageError(format!(
            "the run in {} finished (its report says `{}`); there is nothing to recover",
            dir.display(),
            r.exit_code
        ))
        .into());
    }
    if let Some(report) = teardown {
        return finish_teardown(&dir, report).await;
    }
    let report_path = dir.join("report.json");
    let run_id = match &prior {
        Prior::Read(r) => r.run_id.clone(),
        _ => match run_id_in_lock(&dir) {
            Some(id) => id,
            None => run_id_of(&dir)?,
        },
    };
    let clone = match RunClone::reopen(&dir, &run_id).await {
        Ok(clone) => clone,
        Err(e) => {
            if let Prior::Torn(why) = &prior {
                return Err(crate::error::Error::Message(format!(
                    "cannot recover {}: {} is cut short ({why}) and the run clone cannot be opened ({e}), so the \
                     report cannot be rebuilt; the agents' branches already in the repository are untouched",
                    dir.display(),
                    report_path.display()
                )));
            }
            if !dir.join(crate::git::REPOS_DIR).exists() && !dir.join(crate::git::CHECKOUTS_DIR).exists() {
                let prior = match prior {
                    Prior::Read(r) => Some(*r),
                    _ => None,
                };
                return never_started(&dir, &run_id, prior).await;
            }
            return Err(UsageError(format!(
                "cannot recover {}: {e}; is it the directory of an orch run?",
                dir.display()
            ))
            .into());
        }
    };
    let mut rebuilt = None;
    let mut report = match prior {
        Prior::Read(r) => *r,
        Prior::Missing => blank_report(&dir, &run_id, &clone),
        Prior::Torn(why) => {
            let mut r = blank_report(&dir, &run_id, &clone);
            report::overlay_journal(&dir, &mut r);
            rebuilt = Some(format!(
                "{} was cut short ({why}); it was rebuilt from {} and the run clone",
                report_path.display(),
                report::JOURNAL
            ));
            r
        }
    };
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
    if rebuilt.is_some() {
        add_unrecorded_branches(&clone, &mut report);
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
    if let Some(rebuilt) = rebuilt {
        stopped.push_str(&format!("; {rebuilt}"));
    }
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

/// Finishes a run killed in teardown (see [`TEARDOWN`]): its agents' work was already
/// integrated and fetched, so what is left is removed and the recorded report completed.
async fn finish_teardown(dir: &Path, mut report: RunReport) -> crate::error::Result<RunReport> {
    let run_id = report.run_id.clone();
    for agent in &report.agents {
        kill_leftovers(&run_id, &agent.id);
    }
    let _ = std::fs::remove_dir_all(dir.join("sandbox"));
    reap_containers().await;
    let mut problems = Vec::new();
    match RunClone::reopen(dir, &run_id).await {
        // Whole: it keeps itself for the worktrees that were kept on purpose.
        Ok(clone) => {
            if let Err(e) = clone.remove().await {
                problems.push(format!("cannot remove the run clone: {e}"));
            }
        }
        // Half removed: nothing can use the rest.
        Err(_) => {
            if let Err(e) = crate::git::remove_partial_clone(dir) {
                problems.push(format!("cannot remove what is left of the run clone: {e}"));
            }
        }
    }
    let _ = std::fs::remove_dir(dir.join("sandbox"));
    report.partial = false;
    report.status = RunStatus::Interrupted;
    report.exit_code = KILLED;
    let before = report.stopped.take().map(|s| format!("{s}; ")).unwrap_or_default();
    let mut stopped = format!(
        "{before}the run was killed in teardown, after its agents' work was integrated and fetched into the \
         repository; `orch recover` finished removing the run clone (anything after teardown, such as \
         `publish:`, did not run)"
    );
    if !problems.is_empty() {
        stopped.push_str(&format!("; problems: {}", problems.join("; ")));
        let before = report.integration.error.take().map(|e| format!("{e}; ")).unwrap_or_default();
        report.integration.error = Some(format!("{before}{}", problems.join("; ")));
    }
    report.stopped = Some(stopped);
    report.totals = Totals::of(&report.agents, report.synthesis.as_ref());
    report.finished_at = crate::clock::rfc3339(SystemTime::now());
    super::write_final(dir, &report)?;
    Ok(report)
}

/// Finishes a run killed before its run clone was ready: no agent started. What the
/// clone left is removed and the report says so.
async fn never_started(dir: &Path, run_id: &str, prior: Option<RunReport>) -> crate::error::Result<RunReport> {
    crate::git::remove_partial_clone(dir)?;
    let mut report = prior.unwrap_or_else(|| {
        let mut r = blank(dir, run_id, PathBuf::new(), String::new());
        r.integration.mode = "none".into();
        r
    });
    for agent in &mut report.agents {
        if matches!(agent.status, AgentStatus::Pending | AgentStatus::Running) {
            agent.status = AgentStatus::Skipped;
            agent.reason = Some("the run ended (killed, or crashed) before it started".into());
        }
    }
    report.partial = false;
    report.status = RunStatus::Interrupted;
    report.exit_code = KILLED;
    report.stopped = Some(
        "the run was killed (SIGKILL, or a crash) before its run clone was ready, so no agent started; `orch \
         recover` removed what it left"
            .into(),
    );
    report.totals = Totals::of(&report.agents, report.synthesis.as_ref());
    report.finished_at = crate::clock::rfc3339(SystemTime::now());
    super::write_final(dir, &report)?;
    Ok(report)
}

/// For a rebuilt report: every branch of the run in the run clone with work on it that
/// no agent of the report names becomes a `cancelled` agent with that work (its own
/// record was lost), so nothing is dropped and `--resume` reruns it from there.
fn add_unrecorded_branches(clone: &RunClone, report: &mut RunReport) {
    let prefix = format!("orch/{}/", report.run_id);
    let integration = clone.integration_branch();
    let Ok(repo) = git2::Repository::open_bare(clone.git_dir()) else { return };
    let Ok(refs) = repo.references_glob(&format!("refs/heads/{prefix}*")) else { return };
    let base = clone.base();
    for r in refs.flatten() {
        let (Some(name), Some(tip)) = (r.shorthand().ok().map(str::to_owned), r.target()) else { continue };
        if name == integration || tip == base || report.agents.iter().any(|a| a.branch.as_deref() == Some(&name)) {
            continue;
        }
        let id = name.strip_prefix(&prefix).unwrap_or(&name).to_owned();
        let mut entry = AgentReport::empty(
            &id,
            &id,
            None,
            AgentStatus::Cancelled,
            "rebuilt from its branch in the run clone: the report and agents.jsonl had no record of how it ended"
                .into(),
        );
        entry.branch = Some(name);
        entry.commit = Some(tip.to_string());
        report.agents.push(entry);
    }
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
    blank(dir, run_id, repo, clone.base().to_string())
}

fn blank(dir: &Path, run_id: &str, repo: PathBuf, base: String) -> RunReport {
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
        base,
        setup: None,
        agents: Vec::new(),
        synthesis: None,
        publish: None,
        resume_of: None,
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
