//! The run directories under orch's state directory (`orch runs list`, `orch runs
//! clean`): where they are, what state each is in, how much disk each takes, and
//! removing old ones.
//!
//! - The runs' directory is the one `orch run` puts a run in when no `--out` is given
//!   ([`default_dir`]: `$ORCH_RUNS_DIR`, `$XDG_STATE_HOME/orch/runs` or
//!   `~/.local/state/orch/runs`).
//! - A run is `running` while its coordinator holds the run directory's lock
//!   (`run.lock`, see [`crate::run::recover`]); otherwise its status is its
//!   `report.json`'s, and `incomplete` when there is no final report (killed, or cut
//!   short: `orch recover DIR` finishes it).
//! - [`clean`] removes a run only while it holds that lock itself, so a run that is
//!   going (or one `orch run --resume` just took up) is never removed.
//!
//! Nothing here prints: callers get typed data.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::run::recover::LOCK_FILE;
use crate::run::report::RunStatus;

/// Why the runs could not be listed or cleaned.
#[derive(Debug, thiserror::Error)]
pub enum RunsError {
    /// No variable names a state directory.
    #[error("cannot find orch's runs directory: set ORCH_RUNS_DIR, XDG_STATE_HOME or HOME")]
    NoStateDir,
    /// The runs directory exists but cannot be read.
    #[error("cannot read the runs directory {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
}

/// The directory `orch run` makes run directories in when it is given no `--out`:
/// `$ORCH_RUNS_DIR`, else `$XDG_STATE_HOME/orch/runs`, else `~/.local/state/orch/runs`
/// (empty variables count as unset).
pub fn default_dir() -> Option<PathBuf> {
    let env = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    env("ORCH_RUNS_DIR")
        .or_else(|| env("XDG_STATE_HOME").map(|d| d.join("orch/runs")))
        .or_else(|| env("HOME").map(|h| h.join(".local/state/orch/runs")))
}

/// What state a run directory is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Succeeded,
    Failed,
    Partial,
    Interrupted,
    /// Its coordinator holds its lock.
    Running,
    /// No final report and no coordinator: killed, crashed, or not a whole run.
    Incomplete,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Succeeded => "succeeded",
            RunState::Failed => "failed",
            RunState::Partial => "partial",
            RunState::Interrupted => "interrupted",
            RunState::Running => "running",
            RunState::Incomplete => "incomplete",
        }
    }
}

/// One run directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunEntry {
    /// The directory's name (the run id, for runs orch named).
    pub id: String,
    pub dir: PathBuf,
    /// When the run started (RFC 3339, UTC): from its report, else the directory's
    /// modification time.
    pub started_at: String,
    #[serde(skip)]
    pub started: SystemTime,
    pub status: RunState,
    /// Bytes on disk (allocated blocks), links not followed.
    pub size_bytes: u64,
}

/// What [`clean`] did, or would do under a dry run.
#[derive(Debug, Default)]
pub struct Cleaned {
    /// Removed (or, in a dry run, to be removed), oldest first.
    pub removed: Vec<RunEntry>,
    /// Old enough, but still going: left alone.
    pub running: Vec<RunEntry>,
    /// Old enough, but the removal failed, with why (it may be partly removed).
    pub failed: Vec<(RunEntry, String)>,
    /// The sum of the removed runs' sizes.
    pub freed_bytes: u64,
}

/// The head of a report: only what listing needs, so an older or newer report still lists.
#[derive(Deserialize)]
struct ReportHead {
    status: RunStatus,
    #[serde(default)]
    started_at: String,
    #[serde(default)]
    partial: bool,
}

/// Every run directory in `base`, oldest first. A missing `base` has none.
pub fn list(base: &Path) -> Result<Vec<RunEntry>, RunsError> {
    let entries = match std::fs::read_dir(base) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(RunsError::Read { path: base.to_path_buf(), source }),
    };
    let mut runs = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| RunsError::Read { path: base.to_path_buf(), source })?;
        // A link in the runs directory is not a run of ours: never followed.
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        runs.push(describe(&entry.path()));
    }
    runs.sort_by(|a, b| a.started.cmp(&b.started).then_with(|| a.id.cmp(&b.id)));
    Ok(runs)
}

/// One run directory's entry.
pub fn describe(dir: &Path) -> RunEntry {
    let head: Option<ReportHead> =
        std::fs::read(dir.join("report.json")).ok().and_then(|text| serde_json::from_slice(&text).ok());
    let running = lock_held(dir);
    let status = match (&head, running) {
        (_, true) => RunState::Running,
        (Some(h), false) if h.partial => RunState::Incomplete,
        (Some(h), false) => match h.status {
            RunStatus::Succeeded => RunState::Succeeded,
            RunStatus::Failed => RunState::Failed,
            RunStatus::Partial => RunState::Partial,
            RunStatus::Interrupted => RunState::Interrupted,
            RunStatus::Running => RunState::Incomplete,
        },
        (None, false) => RunState::Incomplete,
    };
    let started = head
        .as_ref()
        .and_then(|h| crate::clock::parse_rfc3339(&h.started_at))
        .or_else(|| std::fs::symlink_metadata(dir).and_then(|m| m.modified()).ok())
        .unwrap_or(SystemTime::UNIX_EPOCH);
    RunEntry {
        id: dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        dir: dir.to_path_buf(),
        started_at: crate::clock::rfc3339(started),
        started,
        status,
        size_bytes: disk_usage(dir),
    }
}

/// Removes the runs of `base` that started more than `older_than` before `now`, except
/// those still going; with `dry_run`, removes nothing and says what it would remove.
pub fn clean(base: &Path, older_than: Duration, now: SystemTime, dry_run: bool) -> Result<Cleaned, RunsError> {
    let mut cleaned = Cleaned::default();
    for run in list(base)? {
        let age = now.duration_since(run.started).unwrap_or(Duration::ZERO);
        if age <= older_than {
            continue;
        }
        if run.status == RunState::Running {
            cleaned.running.push(run);
            continue;
        }
        // Held while the directory goes: no run can start or resume in it meanwhile.
        let lock = match try_lock(&run.dir) {
            Ok(lock) => lock,
            Err(Busy) => {
                cleaned.running.push(RunEntry { status: RunState::Running, ..run });
                continue;
            }
        };
        if !dry_run && let Err(e) = std::fs::remove_dir_all(&run.dir) {
            drop(lock);
            let left = disk_usage(&run.dir);
            cleaned.freed_bytes += run.size_bytes.saturating_sub(left);
            cleaned.failed.push((run, e.to_string()));
            continue;
        }
        drop(lock);
        cleaned.freed_bytes += run.size_bytes;
        cleaned.removed.push(run);
    }
    Ok(cleaned)
}

/// Another process holds the run's lock.
struct Busy;

/// The run directory's lock, taken without waiting; `Ok(None)` when the directory has no
/// lock file (and so no coordinator).
fn try_lock(dir: &Path) -> Result<Option<Flock<File>>, Busy> {
    let Ok(file) = File::open(dir.join(LOCK_FILE)) else {
        return Ok(None);
    };
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Err(Busy),
        // A lock that cannot be taken for another reason (a file system without locks)
        // says nothing of a coordinator: the report decides.
        Err(_) => Ok(None),
    }
}

/// Whether a coordinator holds the lock of the run in `dir`.
fn lock_held(dir: &Path) -> bool {
    try_lock(dir).is_err()
}

/// The bytes allocated to `path` and everything under it, links not followed; what
/// cannot be read counts as nothing.
pub fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let mut total = meta.blocks() * 512;
    if meta.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for entry in entries.flatten() {
            total += disk_usage(&entry.path());
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(dir: &Path, status: &str, started_at: &str, partial: bool) {
        std::fs::create_dir_all(dir).unwrap();
        let json = serde_json::json!({ "status": status, "started_at": started_at, "partial": partial });
        std::fs::write(dir.join("report.json"), json.to_string()).unwrap();
        std::fs::write(dir.join("report.md"), vec![b'x'; 20_000]).unwrap();
    }

    #[test]
    fn states_come_from_the_lock_and_the_report() {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        report(&b.join("a-ok"), "succeeded", "2026-01-01T00:00:00.000Z", false);
        report(&b.join("b-killed"), "running", "2026-01-02T00:00:00.000Z", false);
        report(&b.join("c-partial"), "failed", "2026-01-03T00:00:00.000Z", true);
        report(&b.join("d-live"), "running", "2026-01-04T00:00:00.000Z", false);
        std::fs::create_dir(b.join("e-empty")).unwrap();
        std::os::unix::fs::symlink(b.join("a-ok"), b.join("link")).unwrap();
        let _held = crate::run::recover::hold_lock(&b.join("d-live")).unwrap();
        let runs = list(b).unwrap();
        let states: Vec<(&str, RunState)> = runs.iter().map(|r| (r.id.as_str(), r.status)).collect();
        assert_eq!(
            states,
            vec![
                ("a-ok", RunState::Succeeded),
                ("b-killed", RunState::Incomplete),
                ("c-partial", RunState::Incomplete),
                ("d-live", RunState::Running),
                ("e-empty", RunState::Incomplete),
            ]
        );
        assert_eq!(runs[0].started_at, "2026-01-01T00:00:00.000Z");
        assert!(runs[0].size_bytes >= 20_000, "{}", runs[0].size_bytes);
        assert!(list(&b.join("none")).unwrap().is_empty());
    }

    #[test]
    fn clean_spares_young_and_running_runs() {
        let base = tempfile::tempdir().unwrap();
        let b = base.path();
        report(&b.join("old"), "failed", "2026-01-01T00:00:00.000Z", false);
        report(&b.join("old-live"), "running", "2026-01-01T00:00:00.000Z", false);
        report(&b.join("young"), "succeeded", "2026-01-09T00:00:00.000Z", false);
        let held = crate::run::recover::hold_lock(&b.join("old-live")).unwrap();
        let now = crate::clock::parse_rfc3339("2026-01-10T00:00:00Z").unwrap();
        let week = Duration::from_secs(7 * 86_400);

        let dry = clean(b, week, now, true).unwrap();
        assert_eq!(dry.removed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["old"]);
        assert_eq!(dry.running.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["old-live"]);
        assert!(b.join("old").exists(), "a dry run removed a run");
        assert_eq!(dry.freed_bytes, dry.removed[0].size_bytes);

        let done = clean(b, week, now, false).unwrap();
        assert_eq!(done.removed.len(), 1);
        assert!(!b.join("old").exists());
        assert!(b.join("old-live").exists() && b.join("young").exists());
        drop(held);
        let after = clean(b, week, now, false).unwrap();
        assert_eq!(after.removed.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["old-live"]);
        assert!(b.join("young").exists());
    }
}
