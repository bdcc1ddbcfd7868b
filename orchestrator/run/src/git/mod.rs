//! Git layout of a run: the private run clone, one linked worktree per agent, commits,
//! patches, fetching results into the user's repository, integration merges and the
//! overlap report.
//!
//! Layout under the run directory:
//!
//! ```text
//! <run_dir>/repo.git/              the run clone: a bare repository written by hand
//!     HEAD                         detached at the base commit
//!     config                       clean: core settings only, no remote, no include
//!     objects/info/alternates      -> the user's object store (shared, never copied)
//!     refs/heads/orch/<run>/...    one branch per agent, plus `integration`
//! <run_dir>/repos/<name>.git/      one agent's own repository, laid out the same way
//!     packed-refs                  its branch only (`orch/<run>/<name>`; loose once it commits)
//!     worktrees/<name>/            the admin dir of its worktree (HEAD, index)
//! <run_dir>/worktrees/<name>/      the agent's checkout (the only writable git-related path)
//! ```
//!
//! The run clone is bare because nothing ever works in a checkout of it. Each agent (and
//! `setup:`) gets a linked worktree of a repository of its own, which holds the base
//! (through the user's store) and its own commits, nothing else. The coordinator commits
//! there and copies each commit into the run clone ([`transfer`]), where merges, patches
//! and the fetch into the user's repository read it.
//!
//! Invariants:
//! - The user's repository is only ever read, except for writing the objects and refs
//!   of the `orch/...` branches fetched into it at the end ([`RunClone::fetch_into_user`]).
//!   Its HEAD, index, working tree, config and other refs are never touched.
//! - Nothing of the user's configuration reaches the run clone or an agent's
//!   repository: no remote, credential, `http.*.extraheader`, `include`/`includeIf`,
//!   `core.hooksPath`, `core.fsmonitor`, and no hooks directory at all.
//! - The coordinator never trusts a file the agent could write: it finds a worktree's
//!   git metadata from its own records, never through the checkout's `.git` file, and
//!   restores that file before it commits.
//! - Every git2 [`git2::Repository`] handle is opened on the thread that uses it
//!   (handles are not `Sync`); async callers go through `spawn_blocking`. Parallel
//!   worktree creation touches only per-agent paths (see `Worktree::link_and_checkout`).
//! - libgit2's process-wide strict hash verification is turned off on first use (git
//!   does not re-hash objects on read either; see BENCHMARKS.md, "Worktree creation").
//!
//! Where the sandbox comes in: [`Worktree::git_paths`] lists what an agent's sandbox
//! must expose read-only (the agent's own repository and the user's object store) and
//! writable (the checkout only), and the environment its git needs. Enforcing that is
//! the sandbox's job; the tests emulate it with file modes and a uid. What that exposure
//! allows: reading, never writing, the base history (all of the user's store) and the
//! agent's own branch. Never the run clone, where the other agents' branches are, nor
//! another agent's repository or checkout. The user's store receives this run's
//! branches only at the end, after every agent has stopped.

mod capture;
mod clone;
mod dirty;
mod merge;
mod names;
mod patches;
mod reopen;
mod snapshot;
mod transfer;
mod worktree;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use capture::DEFAULT_MAX_FILE_SIZE;
pub use clone::{CHECKOUTS_DIR, CLONE_DIR, REPOS_DIR, Removal, RunClone, remove_partial_clone};
pub use dirty::{WORKTREE_BASE, snapshot_worktree, tree_changes, uncommitted, worktree_tree};
pub use merge::{Integrand, IntegrationMode, MergeOutcome, NeedsConflict};
pub use names::{safe_name, validate_run_id};
pub use patches::{PatchItem, integrate_patches};
pub use snapshot::snapshot;
pub use worktree::{ChangeKind, CommitInfo, FileChange, Worktree};

/// What failed in a git operation of the coordinator, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// The user's repository cannot be opened.
    #[error("cannot open the git repository at {path}: {source}; run orch inside a git checkout or pass its path")]
    OpenUser { path: PathBuf, source: git2::Error },
    /// The base ref does not name a commit of the user's repository.
    #[error(
        "cannot resolve the base ref `{base}` in {repo}: {source}; give a branch, tag, sha or HEAD that exists there"
    )]
    BaseRef { base: String, repo: PathBuf, source: git2::Error },
    /// A run id is not usable in a branch name.
    #[error("invalid run id `{0}`: use 1 to 64 letters, digits, `.`, `_` or `-`, not starting with `.` or `-`")]
    RunId(String),
    /// An agent id is empty.
    #[error("invalid agent id `{0}`: an agent id must not be empty")]
    AgentId(String),
    /// A path the run clone wants to create is already there.
    #[error("{0} already exists; use a fresh run directory or remove it")]
    Exists(PathBuf),
    /// The user's repository already has an `orch/...` branch that is not ours.
    #[error(
        "the branch {branch} already exists in the user's repository at another commit; \
         use another run id or delete that branch"
    )]
    BranchExists { branch: String },
    /// A filesystem operation failed.
    #[error("cannot {action} {path}: {source}")]
    Io { action: &'static str, path: PathBuf, source: std::io::Error },
    /// A libgit2 operation failed.
    #[error("git: cannot {action}: {source}")]
    Git { action: String, source: git2::Error },
    /// A libgit2 write failed on a full disk (libgit2 itself may say only "no error").
    #[error("git: cannot {action}: {note}")]
    Full { action: String, note: String },
    /// The blocking task running a git operation did not finish.
    #[error("a git task did not finish ({0}); this is a bug in orch, please report it")]
    Task(String),
}

/// The result type of this module.
pub type Result<T, E = GitError> = std::result::Result<T, E>;

/// Attaches what was being done to a libgit2 error.
pub(crate) trait Context<T> {
    fn git(self, action: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, git2::Error> {
    fn git(self, action: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|source| GitError::Git { action: action(), source })
    }
}

/// Attaches the path and what was being done to an I/O error.
pub(crate) fn io_err(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> GitError {
    let path = path.into();
    move |source| GitError::Io { action, path, source }
}

/// Author and committer of the commits orch makes (agent results and merges).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Author {
    pub name: String,
    pub email: String,
}

impl Author {
    /// The author used when the workflow does not configure one.
    pub fn orch() -> Self {
        Self { name: "orch".into(), email: "orch@localhost".into() }
    }

    fn signature(&self) -> Result<git2::Signature<'static>> {
        git2::Signature::now(&self.name, &self.email)
            .git(|| format!("use `{} <{}>` as the commit author", self.name, self.email))
    }
}

/// Files changed by more than one agent that do not build on each other: each path
/// once, sorted, with the agents that changed it in the order they were given.
/// `changed` is `(agent id, paths)`; `builds_on(a, b)` says whether `a` started from
/// work that holds `b`'s (see [`Lineage`]): a later stage of a pipeline changes what
/// the earlier one left, which is no conflict. A path is listed when two of its agents
/// are independent, with every agent that is independent of another.
pub fn overlaps(
    changed: &[(String, Vec<PathBuf>)],
    mut builds_on: impl FnMut(&str, &str) -> bool,
) -> Vec<(PathBuf, Vec<String>)> {
    let mut by_path: std::collections::BTreeMap<&PathBuf, Vec<&String>> = std::collections::BTreeMap::new();
    for (agent, paths) in changed {
        for path in paths {
            let agents = by_path.entry(path).or_default();
            if !agents.contains(&agent) {
                agents.push(agent);
            }
        }
    }
    let mut independent = |a: &str, b: &str| !builds_on(a, b) && !builds_on(b, a);
    by_path
        .into_iter()
        .filter(|(_, agents)| agents.len() > 1)
        .filter_map(|(path, agents)| {
            let listed: Vec<String> = agents
                .iter()
                .filter(|a| agents.iter().any(|b| a != &b && independent(a, b)))
                .map(|a| (*a).clone())
                .collect();
            (!listed.is_empty()).then(|| (path.clone(), listed))
        })
        .collect()
}

/// Which agents build on which, for [`overlaps`]: `a` builds on `b` when the commit `a`
/// started from (`base: needs`) is `b`'s commit or holds it, directly or through other
/// stages of a pipeline. Read from a repository that has the commits (the run clone, or
/// the user's repository the branches were fetched into); where it lacks them, only a
/// start that is `b`'s commit itself counts.
pub struct Lineage {
    repo: Option<git2::Repository>,
    /// Agent id -> (the commit it started from, its own commit).
    commits: std::collections::HashMap<String, (Option<git2::Oid>, Option<git2::Oid>)>,
}

impl Lineage {
    /// `agents` is `(id, start, commit)`, the commits as hex.
    pub fn new<'a>(
        git_dir: Option<&std::path::Path>,
        agents: impl IntoIterator<Item = (&'a str, Option<&'a str>, Option<&'a str>)>,
    ) -> Lineage {
        let oid = |s: Option<&str>| s.and_then(|s| git2::Oid::from_str(s).ok());
        Lineage {
            repo: git_dir.and_then(|d| git2::Repository::open(d).ok()),
            commits: agents.into_iter().map(|(id, start, commit)| (id.to_owned(), (oid(start), oid(commit)))).collect(),
        }
    }

    /// Whether `a` started from work that holds `b`'s commit.
    pub fn builds_on(&self, a: &str, b: &str) -> bool {
        let start = self.commits.get(a).and_then(|(start, _)| *start);
        let commit = self.commits.get(b).and_then(|(_, commit)| *commit);
        let (Some(start), Some(commit)) = (start, commit) else { return false };
        start == commit || self.repo.as_ref().is_some_and(|r| r.graph_descendant_of(start, commit).unwrap_or(false))
    }
}

/// Runs a blocking git operation on tokio's blocking pool.
async fn blocking<T, F>(what: &'static str, f: F) -> Result<T>
where
    F: FnOnce() -> Result<T> + Send + 'static,
    T: Send + 'static,
{
    tokio::task::spawn_blocking(f).await.map_err(|e| GitError::Task(format!("{what}: {e}")))?
}
