//! The disk bound of one agent (`limits.max_disk`), enforced by the coordinator.
//!
//! A [`DiskWatch`] measures what an agent's writable directories (its worktree, its
//! private tmp and home) take on disk when the agent starts, then measures them again
//! about once a second while it runs. When they have grown by more than the limit, it
//! cancels the agent's token: the loop stops, the session is torn down, and the agent
//! ends `partial` with a reason naming the limit. [`DiskWatch::finish`] measures one last
//! time after the agent's processes are dead, before its work is committed, so a burst
//! between two measurements is not missed.
//!
//! The measurement is a walk that never follows a symbolic link and never leaves the
//! file system of the directory it starts in; it counts the blocks each file really
//! uses (as `du` does; a hard-linked file once), so sparse files count for what they
//! hold. No single file can grow past the limit anyway: the sandbox's `RLIMIT_FSIZE` is
//! set to it. A walk takes time on a big tree, so the next one waits at least twenty
//! times as long as the last one took: the watcher costs at most about 5% of a core,
//! and nothing per command.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use orch_types::Size;
use tokio_util::sync::CancellationToken;

/// The shortest wait between two measurements.
pub const INTERVAL: Duration = Duration::from_secs(1);

/// A walk may use at most 1/this of the time between two walks.
const DUTY: u32 = 20;

/// Watches the growth of an agent's directories. Stop it with [`DiskWatch::finish`].
pub struct DiskWatch {
    roots: Arc<Vec<PathBuf>>,
    limit: Size,
    baseline: u64,
    exceeded: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl DiskWatch {
    /// Measures `roots` (of agent `agent`) now, the baseline, and starts watching them:
    /// once they have grown by more than `limit`, `cancel` is cancelled.
    pub async fn start(agent: &str, roots: Vec<PathBuf>, limit: Size, cancel: CancellationToken) -> DiskWatch {
        let roots = Arc::new(roots);
        let (baseline, _) = measure(roots.clone()).await;
        let exceeded = Arc::new(Mutex::new(None));
        let stop = CancellationToken::new();
        let watched = Watched { agent: agent.to_string(), roots: roots.clone(), limit, baseline };
        let task = tokio::spawn(watch(watched, exceeded.clone(), stop.clone(), cancel));
        DiskWatch { roots, limit, baseline, exceeded, stop, task: Some(task) }
    }

    /// Stops watching and measures once more (call it once the agent's processes are
    /// dead). The reason the agent must end `partial`, when it went over its limit at
    /// any point.
    pub async fn finish(mut self) -> Option<String> {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let seen = self.exceeded.lock().unwrap_or_else(|p| p.into_inner()).take();
        if seen.is_some() {
            return seen;
        }
        let (now, _) = measure(self.roots.clone()).await;
        over(self.baseline, now, self.limit)
    }
}

impl Drop for DiskWatch {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What the watching task measures and against what.
struct Watched {
    agent: String,
    roots: Arc<Vec<PathBuf>>,
    limit: Size,
    baseline: u64,
}

async fn watch(
    watched: Watched,
    exceeded: Arc<Mutex<Option<String>>>,
    stop: CancellationToken,
    cancel: CancellationToken,
) {
    let Watched { agent, roots, limit, baseline } = watched;
    let mut wait = INTERVAL;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        let (now, took) = measure(roots.clone()).await;
        if let Some(why) = over(baseline, now, limit) {
            tracing::warn!(agent = %agent, "{why}");
            *exceeded.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
            cancel.cancel();
            return;
        }
        wait = INTERVAL.max(took.saturating_mul(DUTY));
    }
}

/// The reason an agent is stopped, when `now` is more than `limit` above `baseline`.
fn over(baseline: u64, now: u64, limit: Size) -> Option<String> {
    let grown = now.saturating_sub(baseline);
    (grown > limit.bytes()).then(|| {
        format!(
            "stopped at limits.max_disk ({limit}): its worktree and private tmp and home grew by {} (raise \
             limits.max_disk if the task needs more disk)",
            approx(grown)
        )
    })
}

/// `bytes` in the largest binary unit below it, with one decimal.
fn approx(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {name}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

/// The bytes `roots` take on disk, and how long measuring took, on a blocking thread.
async fn measure(roots: Arc<Vec<PathBuf>>) -> (u64, Duration) {
    let at = Instant::now();
    let used = tokio::task::spawn_blocking(move || usage(&roots)).await.unwrap_or(0);
    (used, at.elapsed())
}

/// The bytes `roots` take on disk: the blocks of every file, directory and link under
/// them (each hard-linked file once), without following a link or crossing into
/// another file system. What cannot be read (gone meanwhile, no permission) is skipped.
pub fn usage(roots: &[PathBuf]) -> u64 {
    let Some((first, rest)) = roots.split_first() else { return 0 };
    let mut walk = ignore::WalkBuilder::new(first);
    for root in rest {
        walk.add(root);
    }
    walk.standard_filters(false).hidden(false).follow_links(false).same_file_system(true);
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut total = 0u64;
    for entry in walk.build().flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.nlink() > 1 && !meta.is_dir() && !linked.insert((meta.dev(), meta.ino())) {
            continue;
        }
        total = total.saturating_add(meta.blocks().saturating_mul(512));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &std::path::Path, bytes: usize) {
        std::fs::write(path, vec![7u8; bytes]).unwrap();
    }

    #[test]
    fn usage_counts_blocks_once_and_never_follows_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        write(&outside.path().join("big"), 4 << 20);
        let root = dir.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let empty = usage(std::slice::from_ref(&root));
        write(&root.join("a"), 1 << 20);
        std::fs::hard_link(root.join("a"), root.join("b")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("big"), root.join("file-link")).unwrap();
        let used = usage(std::slice::from_ref(&root)) - empty;
        assert!((1 << 20..2 << 20).contains(&used), "one MiB counted once, the links' targets not at all: {used}");
        // A sparse file counts for what it holds.
        let sparse = std::fs::File::create(root.join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let with_sparse = usage(std::slice::from_ref(&root)) - empty;
        assert!(with_sparse < 2 << 20, "{with_sparse}");
        assert_eq!(usage(&[]), 0);
        assert_eq!(usage(&[dir.path().join("missing")]), 0);
    }

    #[test]
    fn the_reason_names_the_limit_and_the_growth() {
        let limit = Size::from_mib(50);
        assert_eq!(over(100, 100 + (50 << 20), limit), None, "at the limit is not over it");
        let why = over(100, 100 + (3 << 29), limit).unwrap();
        assert!(why.starts_with("stopped at limits.max_disk (50MiB): "), "{why}");
        assert!(why.contains("grew by 1.5 GiB"), "{why}");
        assert_eq!(over(5 << 30, 1, limit), None, "shrinking is not growth");
    }

    #[tokio::test]
    async fn the_watcher_cancels_the_agent_once_it_grows_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        write(&dir.path().join("before"), 3 << 20);
        let cancel = CancellationToken::new();
        let watch = DiskWatch::start("a", vec![dir.path().to_path_buf()], Size::from_mib(2), cancel.clone()).await;
        write(&dir.path().join("small"), 1 << 20);
        tokio::time::sleep(INTERVAL * 2).await;
        assert!(!cancel.is_cancelled(), "what was there before and 1 MiB of growth are within 2 MiB");
        write(&dir.path().join("big"), 2 << 20);
        tokio::time::timeout(INTERVAL * 30, cancel.cancelled()).await.unwrap();
        let why = watch.finish().await.unwrap();
        assert!(why.contains("limits.max_disk (2MiB)"), "{why}");
    }

    #[tokio::test]
    async fn the_last_measurement_catches_growth_between_two_walks() {
        let dir = tempfile::tempdir().unwrap();
        let cancel = CancellationToken::new();
        let watch = DiskWatch::start("a", vec![dir.path().to_path_buf()], Size::from_mib(1), cancel.clone()).await;
        write(&dir.path().join("burst"), 2 << 20);
        let why = watch.finish().await;
        assert!(why.as_deref().is_some_and(|w| w.contains("grew by 2.")), "{why:?}");
        assert!(!cancel.is_cancelled(), "the agent had already ended");
    }
}
