//! Checkpoints of a running agent: every `checkpoint_every` turns (under `limits:`,
//! default [`DEFAULT_EVERY`]; 0 turns them off), the agent's worktree is committed on
//! its branch, so a run killed with SIGKILL loses at most that many turns of work.
//!
//! A checkpoint is taken when turn `k * every + 1` starts: the previous turn's tools
//! have all returned by then, and the model is being asked, so nothing the agent runs
//! in the foreground writes meanwhile. Commits are serialized: one checkpoint at a
//! time (a turn that comes while one is being written skips its own), and the final
//! commit waits for the last one ([`Checkpoints::settle`]).

use std::sync::Arc;

use orch_agents::Event;
use tokio::sync::Mutex;

use crate::git::{Author, Worktree};

/// Turns between checkpoints when the workflow does not say.
pub const DEFAULT_EVERY: u32 = 10;

/// One agent's checkpoints.
#[derive(Debug)]
pub struct Checkpoints {
    worktree: Worktree,
    author: Author,
    every: u32,
    message: String,
    /// The agent's `limits.max_file_size`: larger files are left out, as at the end.
    max_file_size: u64,
    busy: Arc<Mutex<()>>,
}

impl Checkpoints {
    /// Checkpoints of `worktree` every `every` turns, committed with `message`, without
    /// the files over `max_file_size` bytes; `None` when `every` is 0.
    pub fn new(
        worktree: Worktree,
        author: Author,
        every: u32,
        message: String,
        max_file_size: u64,
    ) -> Option<Arc<Checkpoints>> {
        (every > 0).then(|| {
            Arc::new(Checkpoints { worktree, author, every, message, max_file_size, busy: Arc::new(Mutex::new(())) })
        })
    }

    /// Looks at one of the agent's own events (not a sub-agent's) and starts a
    /// checkpoint when it is due.
    pub fn observe(&self, event: &Event) {
        let Event::TurnStarted { turn, .. } = event else { return };
        if !due(*turn, self.every) {
            return;
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else { return };
        // One at a time: a checkpoint still being written makes this one redundant.
        let Ok(guard) = self.busy.clone().try_lock_owned() else { return };
        let (worktree, author, max_file_size) = (self.worktree.clone(), self.author.clone(), self.max_file_size);
        let message = format!("{} (checkpoint before turn {turn})", self.message);
        handle.spawn(async move {
            let _guard = guard;
            match worktree.commit_all_limited(&message, &author, max_file_size).await {
                Ok(Some(info)) => {
                    tracing::debug!(agent = %worktree.agent_id(), commit = %info.commit, "checkpoint committed");
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(agent = %worktree.agent_id(), "cannot commit a checkpoint: {e}"),
            }
        });
    }

    /// Waits until no checkpoint is being written (before the final commit).
    pub async fn settle(&self) {
        drop(self.busy.lock().await);
    }
}

/// The commit (hex) `branch` (without `refs/heads/`) points to in the repository at
/// `git_dir`, if it can be read.
pub fn branch_tip(git_dir: &std::path::Path, branch: &str) -> Option<String> {
    let repo = git2::Repository::open_bare(git_dir).ok()?;
    repo.refname_to_id(&format!("refs/heads/{branch}")).ok().map(|oid| oid.to_string())
}

/// Whether a checkpoint is due when `turn` (1-based) starts.
fn due(turn: u32, every: u32) -> bool {
    every > 0 && turn > 1 && (turn - 1).is_multiple_of(every)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_fall_after_every_n_turns() {
        let starts: Vec<u32> = (1..=25).filter(|t| due(*t, 10)).collect();
        assert_eq!(starts, vec![11, 21]);
        let every_turn: Vec<u32> = (1..=4).filter(|t| due(*t, 1)).collect();
        assert_eq!(every_turn, vec![2, 3, 4]);
        assert!((1..100).all(|t| !due(t, 0)));
    }
}
