//! Reopening what a killed run left: its run clone and the agents' worktrees (with their
//! own repositories) that are still there, found from the run directory alone, so `orch recover` (and `--resume`) can commit
//! the agents' work and fetch it into the user's repository.
//!
//! Everything is read from records the coordinator wrote and the agents could not
//! write: the run clone's `HEAD` (the base), its `objects/info/alternates` (the user's
//! store), and the `HEAD` of each agent repository's admin dir (the branch). Checkouts
//! are found by name under `<run_dir>/worktrees`, never through their `.git` files.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use git2::Oid;

use super::clone::{CHECKOUTS_DIR, CLONE_DIR, Inner, REPOS_DIR, RunClone, alternates, list_dir};
use super::names::validate_run_id;
use super::worktree::Worktree;
use super::{GitError, Result, blocking, io_err};

impl RunClone {
    /// The run clone `<run_dir>/repo.git` of the run `run_id`, as an earlier process
    /// left it. Writes nothing.
    pub async fn reopen(run_dir: &Path, run_id: &str) -> Result<RunClone> {
        let (run_dir, run_id) = (run_dir.to_owned(), run_id.to_owned());
        blocking("reopen the run clone", move || Self::reopen_blocking(&run_dir, &run_id)).await
    }

    /// [`RunClone::reopen`], on the calling thread.
    pub fn reopen_blocking(run_dir: &Path, run_id: &str) -> Result<RunClone> {
        validate_run_id(run_id)?;
        let run_dir = fs::canonicalize(run_dir).map_err(io_err("resolve", run_dir))?;
        let git_dir = run_dir.join(CLONE_DIR);
        let head_path = git_dir.join("HEAD");
        let head = fs::read_to_string(&head_path).map_err(io_err("read", &head_path))?;
        let base = Oid::from_str(head.trim()).map_err(|source| GitError::Git {
            action: format!("read the base commit from {} (it should hold a commit id)", head_path.display()),
            source,
        })?;
        let alternates_path = git_dir.join("objects/info/alternates");
        let text = fs::read_to_string(&alternates_path).map_err(io_err("read", &alternates_path))?;
        let first = text.lines().map(str::trim).find(|l| !l.is_empty() && !l.starts_with('#')).unwrap_or_default();
        let user_objects = fs::canonicalize(first).map_err(io_err("resolve the user's object store", first))?;
        let user_git_dir = user_objects.parent().map(Path::to_path_buf).unwrap_or_else(|| user_objects.clone());
        let borrowed = alternates(&user_objects);
        let inner = Inner {
            run_id: run_id.to_owned(),
            checkouts: run_dir.join(CHECKOUTS_DIR),
            repos: run_dir.join(REPOS_DIR),
            run_dir,
            git_dir,
            user_git_dir,
            user_objects,
            borrowed,
            base,
            fetch_lock: Mutex::new(()),
            has_attributes: OnceLock::new(),
        };
        let clone = RunClone { inner: Arc::new(inner) };
        let repo = clone.inner.open()?;
        repo.find_commit(base).map_err(|source| GitError::Git {
            action: format!("find the base commit {base} of the run clone (is the user's repository still there?)"),
            source,
        })?;
        Ok(clone)
    }

    /// The agents' worktrees that are still there (`<run_dir>/repos/<name>.git` with the
    /// admin dir `worktrees/<name>` and the checkout `<run_dir>/worktrees/<name>`), each
    /// with its branch from its admin dir (only `orch/<run>/...` branches). `agent_id`
    /// of each is its name: the caller knows the ids (from the report) and can match
    /// them with `safe_name`.
    pub fn leftover_worktrees(&self) -> Result<Vec<Worktree>> {
        let prefix = format!("ref: refs/heads/orch/{}/", self.inner.run_id);
        let mut found = Vec::new();
        for repo in list_dir(&self.inner.repos)? {
            let Some(name) = repo.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".git")) else {
                continue;
            };
            let name = name.to_owned();
            let admin = repo.join("worktrees").join(&name);
            let Ok(head) = fs::read_to_string(admin.join("HEAD")) else { continue };
            let Some(rest) = head.trim_end().strip_prefix(&prefix) else { continue };
            let branch = format!("orch/{}/{rest}", self.inner.run_id);
            let checkout: PathBuf = self.inner.checkouts.join(&name);
            if !checkout.is_dir() || fs::symlink_metadata(&checkout).is_ok_and(|m| m.file_type().is_symlink()) {
                continue;
            }
            found.push(Worktree::new(self.clone(), name.clone(), name, branch, checkout, repo).with_recorded_start());
        }
        found.sort_by(|a, b| a.name().cmp(b.name()));
        Ok(found)
    }

    /// Points `branch` (`orch/...`, without `refs/heads/`) of the run clone at `commit`,
    /// which must be readable through its alternates (a branch an earlier run fetched
    /// into the user's repository). Leaves an existing branch at the same commit alone.
    pub fn adopt_branch(&self, branch: &str, commit: Oid) -> Result<()> {
        let refname = format!("refs/heads/{branch}");
        if !branch.starts_with("orch/") || !git2::Reference::is_valid_name(&refname) {
            return Err(GitError::Git {
                action: format!("adopt `{branch}`: only valid `orch/...` branches are carried into a run clone"),
                source: git2::Error::from_str("refusing to write this ref"),
            });
        }
        let repo = self.inner.open()?;
        repo.find_commit(commit).map_err(|source| GitError::Git {
            action: format!("find the commit {commit} of {branch} through the user's repository"),
            source,
        })?;
        if repo.refname_to_id(&refname).ok() == Some(commit) {
            return Ok(());
        }
        repo.reference(&refname, commit, false, "orch: carried over from an earlier run")
            .map(|_| ())
            .map_err(|source| GitError::Git { action: format!("create the branch {branch} in the run clone"), source })
    }

    /// Whether `commit` can be read through the run clone (its own objects or the
    /// user's store).
    pub fn has_commit(&self, commit: Oid) -> Result<()> {
        let repo = self.inner.open()?;
        repo.find_commit(commit).map(|_| ()).map_err(|source| GitError::Git {
            action: format!("find the commit {commit} through the user's repository"),
            source,
        })
    }
}
