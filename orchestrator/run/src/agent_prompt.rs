//! An agent's system prompt as the coordinator assembles it: the environment, the git
//! snapshot of its working tree (read with git2 by [`crate::git::snapshot`] before the
//! sandbox is prepared, since as root the worktree then belongs to the sandbox uid), and the project's instruction
//! files, which are read by the agent's own tool host (so its sandbox decides what is
//! reachable), unless they are turned off.

use std::path::Path;

use orch_agents::SystemPart;
use orch_agents::instructions;
use orch_agents::prompt::{Environment, GitSnapshot, system_prompt};
use orch_agents::protocol::ToolExecutor;
use tokio_util::sync::CancellationToken;

/// The system prompt of an agent working in `cwd` (whose git snapshot is `git`) on
/// `model`, whose tool host is `executor`, and the instruction files it holds (for the
/// InstructionsLoaded hooks).
pub async fn build(
    cwd: &Path,
    git: Option<&GitSnapshot>,
    model: &str,
    with_instructions: bool,
    executor: &dyn ToolExecutor,
    cancel: &CancellationToken,
) -> (Vec<SystemPart>, Vec<instructions::Loaded>) {
    let found = if with_instructions {
        match instructions::load(executor, cancel.child_token()).await {
            Ok(found) => Some(found),
            Err(e) => {
                tracing::warn!(cwd = %cwd.display(), "could not load the project instructions: {e}");
                None
            }
        }
    } else {
        None
    };
    let loaded = found.as_ref().map_or_else(Vec::new, |found| found.loaded(cwd, "session_start", None));
    let system = system_prompt(&Environment {
        cwd,
        is_git_repo: git.is_some(),
        model,
        date: &crate::clock::today(),
        git,
        instructions: found.as_ref(),
    });
    (system, loaded)
}
