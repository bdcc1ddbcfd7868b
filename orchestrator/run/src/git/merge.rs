//! Merges in the run clone, in memory (no checkout):
//! - `integrate:` the agents' work put, in order, on one integration branch: merged
//!   with merge commits (`merge`) or squashed into one commit per agent (`squash`),
//!   each commit carrying the agent's message. A branch that conflicts is skipped and
//!   reported with its conflicting paths; the others are still integrated.
//! - `base: needs`: the branches an agent needs, merged in order into the commit it
//!   starts from. A conflict there names the files and the agent is not started.
//! - pruning: which agents' branches the integration branch holds, so they can go.

use std::path::PathBuf;

use git2::{MergeOptions, Oid, Repository};

use super::clone::RunClone;
use super::worktree::Worktree;
use super::{Author, Context as _, GitError, Result, blocking};

/// What happened to one branch in [`RunClone::merge_branches`] or
/// [`RunClone::integrate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The branch, without `refs/heads/`.
    pub branch: String,
    /// Whether the integration branch now contains it.
    pub merged: bool,
    /// Paths in conflict (then `merged` is false and the branch was skipped).
    pub conflicts: Vec<PathBuf>,
}

/// How [`RunClone::integrate`] puts each agent's work on the integration branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntegrationMode {
    /// A merge commit per agent (never a fast-forward), with the agent's message.
    Merge,
    /// One commit per agent holding its changes since its start, with its message.
    Squash,
}

/// One agent's work for [`RunClone::integrate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Integrand {
    /// Its branch, without `refs/heads/`.
    pub branch: String,
    /// The commit its work starts from (the run's base, or with `base: needs` the merge
    /// of what it needed): a squash commit holds the changes since then.
    pub start: Oid,
    /// The commit message.
    pub message: String,
}

/// The start of a `base: needs` agent could not be made: merging `with` into the
/// branches before it conflicts in `paths`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NeedsConflict {
    /// The needed agent whose branch conflicted.
    pub with: String,
    pub paths: Vec<PathBuf>,
}

impl std::fmt::Display for NeedsConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let paths: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        write!(
            f,
            "cannot start from the agents it needs: the work of `{}` conflicts with the work before it in {}; \
             make these agents change different files, or chain them with `needs`",
            self.with,
            paths.join(", ")
        )
    }
}

impl RunClone {
    /// Merges `branches` (names without `refs/heads/`), in order, into `into` (usually
    /// [`RunClone::integration_branch`]), which starts at the base commit if it does not
    /// exist. A branch already contained is a no-op, one ahead is fast-forwarded, others
    /// get a merge commit by `author`. Conflicts never fail the call: that branch is
    /// reported and skipped. Errors are for a missing branch or a broken repository.
    /// Fetch `into` with [`RunClone::fetch_into_user`] afterwards.
    pub async fn merge_branches(&self, branches: &[String], into: &str, author: &Author) -> Result<Vec<MergeOutcome>> {
        let (this, branches, into, author) = (self.clone(), branches.to_vec(), into.to_owned(), author.clone());
        blocking("merge branches", move || this.merge_branches_blocking(&branches, &into, &author)).await
    }

    /// [`RunClone::merge_branches`], on the calling thread.
    pub fn merge_branches_blocking(
        &self,
        branches: &[String],
        into: &str,
        author: &Author,
    ) -> Result<Vec<MergeOutcome>> {
        let repo = self.inner.open()?;
        let (into_ref, mut tip) = self.integration_tip(&repo, into)?;
        let mut options = MergeOptions::new();
        options.find_renames(true);
        let mut outcomes = Vec::with_capacity(branches.len());
        for branch in branches {
            let theirs = branch_tip(&repo, branch)?;
            let message = format!("Merge {branch} into {into}");
            let step = Step { ours: tip, theirs, what: &format!("merge {branch} into {into}"), message: &message };
            let (next, conflicts) = merge_one(&repo, &step, &options, author, true)?;
            tip = self.advance(&repo, &into_ref, tip, next, branch)?;
            outcomes.push(MergeOutcome {
                branch: branch.clone(),
                merged: conflicts.is_none(),
                conflicts: conflicts.unwrap_or_default(),
            });
        }
        Ok(outcomes)
    }

    /// Puts each agent's work, in order, on `into` (created at the base if missing), as
    /// `mode` says, with its own message. Work the branch already holds makes no
    /// commit; a conflict skips that agent and names its paths.
    pub async fn integrate(
        &self,
        items: &[Integrand],
        into: &str,
        mode: IntegrationMode,
        author: &Author,
    ) -> Result<Vec<MergeOutcome>> {
        let (this, items, into, author) = (self.clone(), items.to_vec(), into.to_owned(), author.clone());
        blocking("integrate branches", move || this.integrate_blocking(&items, &into, mode, &author)).await
    }

    /// [`RunClone::integrate`], on the calling thread.
    pub fn integrate_blocking(
        &self,
        items: &[Integrand],
        into: &str,
        mode: IntegrationMode,
        author: &Author,
    ) -> Result<Vec<MergeOutcome>> {
        let repo = self.inner.open()?;
        let (into_ref, mut tip) = self.integration_tip(&repo, into)?;
        let mut options = MergeOptions::new();
        options.find_renames(true);
        let mut outcomes = Vec::with_capacity(items.len());
        for item in items {
            let theirs = branch_tip(&repo, &item.branch)?;
            let what = format!("integrate {} into {into}", item.branch);
            let step = Step { ours: tip, theirs, what: &what, message: &item.message };
            let (next, conflicts) = match mode {
                IntegrationMode::Merge => merge_one(&repo, &step, &options, author, false)?,
                IntegrationMode::Squash => squash_one(&repo, &step, item.start, &options, author)?,
            };
            tip = self.advance(&repo, &into_ref, tip, next, &item.branch)?;
            outcomes.push(MergeOutcome {
                branch: item.branch.clone(),
                merged: conflicts.is_none(),
                conflicts: conflicts.unwrap_or_default(),
            });
        }
        Ok(outcomes)
    }

    /// The agents of `items` whose work `into` holds: its branch is an ancestor of
    /// `into`, or applying its changes since its start to `into` changes nothing. Only
    /// these may be pruned.
    pub fn contained_blocking(&self, items: &[Integrand], into: &str) -> Result<Vec<String>> {
        let repo = self.inner.open()?;
        let into_tip = branch_tip(&repo, into)?;
        let mut options = MergeOptions::new();
        options.find_renames(true);
        let mut held = Vec::new();
        for item in items {
            let tip = branch_tip(&repo, &item.branch)?;
            let what = || format!("check whether {into} holds {}", item.branch);
            let ancestor = tip == into_tip || repo.graph_descendant_of(into_tip, tip).git(what)?;
            let applied = ancestor || {
                let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).git(what);
                let (start, ours, theirs) = (tree(item.start)?, tree(into_tip)?, tree(tip)?);
                let mut index = repo.merge_trees(&start, &ours, &theirs, Some(&options)).git(what)?;
                !index.has_conflicts() && index.write_tree_to(&repo).git(what)? == ours.id()
            };
            if applied {
                held.push(item.branch.clone());
            }
        }
        Ok(held)
    }

    /// Deletes the branches of `items` that `into` holds ([`RunClone::contained_blocking`])
    /// and returns them; the others stay.
    pub async fn prune_contained(&self, items: &[Integrand], into: &str) -> Result<Vec<String>> {
        let (this, items, into) = (self.clone(), items.to_vec(), into.to_owned());
        blocking("prune branches", move || {
            let held = this.contained_blocking(&items, &into)?;
            this.delete_branches_blocking(&held)?;
            Ok(held)
        })
        .await
    }

    /// Deletes the run clone's branches `branches` (after they were found contained).
    pub fn delete_branches_blocking(&self, branches: &[String]) -> Result<()> {
        let repo = self.inner.open()?;
        for branch in branches {
            let mut reference = repo
                .find_reference(&format!("refs/heads/{branch}"))
                .git(|| format!("find the branch {branch} to prune"))?;
            reference.delete().git(|| format!("delete the branch {branch}"))?;
        }
        Ok(())
    }

    /// `base: needs`: merges the needed agents' commits (`(agent id, commit)`, in
    /// order) into the commit `agent_id` starts from, then adds its worktree there. Its
    /// changes are measured against that commit. `Ok(Err(_))`: the merge conflicted and
    /// nothing was created.
    pub async fn add_worktree_on_needs(
        &self,
        agent_id: &str,
        needed: &[(String, Oid)],
        author: &Author,
    ) -> Result<Result<Worktree, NeedsConflict>> {
        let (this, agent_id, needed, author) = (self.clone(), agent_id.to_owned(), needed.to_vec(), author.clone());
        blocking("add a worktree on what it needs", move || {
            let start = match this.merge_needs_blocking(&agent_id, &needed, &author)? {
                Ok(start) => start,
                Err(conflict) => return Ok(Err(conflict)),
            };
            this.add_worktree_from_blocking(&agent_id, Some(start), true).map(Ok)
        })
        .await
    }

    /// The commit a `base: needs` agent starts from: the base, with each needed commit
    /// merged in, in order (fast-forward where possible).
    pub fn merge_needs_blocking(
        &self,
        agent_id: &str,
        needed: &[(String, Oid)],
        author: &Author,
    ) -> Result<Result<Oid, NeedsConflict>> {
        let repo = self.inner.open()?;
        let mut options = MergeOptions::new();
        options.find_renames(true);
        let mut tip = self.base();
        let mut merged: Vec<&str> = Vec::new();
        for (id, commit) in needed {
            merged.push(id);
            let message = format!("orch: start of {agent_id}: the work of {}", merged.join(", "));
            let what = format!("merge the work of `{id}` into the start of `{agent_id}`");
            let step = Step { ours: tip, theirs: *commit, what: &what, message: &message };
            match merge_one(&repo, &step, &options, author, true)? {
                (next, None) => tip = next,
                (_, Some(paths)) => return Ok(Err(NeedsConflict { with: id.clone(), paths })),
            }
        }
        Ok(Ok(tip))
    }

    /// The integration branch's ref and tip, created at the base when missing.
    fn integration_tip(&self, repo: &Repository, into: &str) -> Result<(String, Oid)> {
        let into_ref = format!("refs/heads/{into}");
        if !git2::Reference::is_valid_name(&into_ref) {
            return Err(GitError::Git {
                action: format!("merge into `{into}`"),
                source: git2::Error::from_str("not a valid branch name"),
            });
        }
        let tip = match repo.refname_to_id(&into_ref) {
            Ok(id) => id,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                repo.reference(&into_ref, self.base(), false, "orch: integration branch at the base")
                    .git(|| format!("create {into}"))?;
                self.base()
            }
            Err(e) => return Err(GitError::Git { action: format!("read {into}"), source: e }),
        };
        Ok((into_ref, tip))
    }

    /// Moves `into_ref` from `tip` to `next` (if they differ); the new tip.
    fn advance(&self, repo: &Repository, into_ref: &str, tip: Oid, next: Oid, branch: &str) -> Result<Oid> {
        if next != tip {
            repo.reference_matching(into_ref, next, true, tip, &format!("orch: integrate {branch}"))
                .git(|| format!("move {into_ref} to the integration of {branch}"))?;
        }
        Ok(next)
    }
}

/// The commit a branch of the run clone points to.
fn branch_tip(repo: &Repository, branch: &str) -> Result<Oid> {
    repo.refname_to_id(&format!("refs/heads/{branch}")).git(|| format!("find the branch {branch} to merge"))
}

/// One merge: `theirs` into `ours`, what it is for errors, the commit message.
struct Step<'a> {
    ours: Oid,
    theirs: Oid,
    what: &'a str,
    message: &'a str,
}

/// Merges `theirs` into `ours`: the new tip, or `ours` and the conflicting paths.
/// `fast_forward`: a `theirs` ahead of `ours` becomes the tip without a merge commit.
fn merge_one(
    repo: &Repository,
    step: &Step<'_>,
    options: &MergeOptions,
    author: &Author,
    fast_forward: bool,
) -> Result<(Oid, Option<Vec<PathBuf>>)> {
    let (ours, theirs) = (step.ours, step.theirs);
    let what = || step.what.to_owned();
    if ours == theirs || repo.graph_descendant_of(ours, theirs).git(what)? {
        return Ok((ours, None));
    }
    if fast_forward && repo.graph_descendant_of(theirs, ours).git(what)? {
        return Ok((theirs, None));
    }
    let our_commit = repo.find_commit(ours).git(what)?;
    let their_commit = repo.find_commit(theirs).git(what)?;
    let mut index = repo.merge_commits(&our_commit, &their_commit, Some(options)).git(what)?;
    if index.has_conflicts() {
        return Ok((ours, Some(conflict_paths(&index, step.what)?)));
    }
    let tree = index.write_tree_to(repo).git(what)?;
    let tree = repo.find_tree(tree).git(what)?;
    let signature = author.signature()?;
    let commit =
        repo.commit(None, &signature, &signature, step.message, &tree, &[&our_commit, &their_commit]).git(what)?;
    Ok((commit, None))
}

/// Applies the changes from `start` to `theirs` onto `ours` as one commit (a
/// three-way merge of the trees, as a cherry-pick of the range does). No commit when
/// they change nothing there.
fn squash_one(
    repo: &Repository,
    step: &Step<'_>,
    start: Oid,
    options: &MergeOptions,
    author: &Author,
) -> Result<(Oid, Option<Vec<PathBuf>>)> {
    let what = || step.what.to_owned();
    let our_commit = repo.find_commit(step.ours).git(what)?;
    let tree = |id: Oid| repo.find_commit(id).and_then(|c| c.tree()).git(what);
    let (ancestor, ours, theirs) = (tree(start)?, our_commit.tree().git(what)?, tree(step.theirs)?);
    let mut index = repo.merge_trees(&ancestor, &ours, &theirs, Some(options)).git(what)?;
    if index.has_conflicts() {
        return Ok((step.ours, Some(conflict_paths(&index, step.what)?)));
    }
    let tree = index.write_tree_to(repo).git(what)?;
    if tree == ours.id() {
        return Ok((step.ours, None));
    }
    let tree = repo.find_tree(tree).git(what)?;
    let signature = author.signature()?;
    let commit = repo.commit(None, &signature, &signature, step.message, &tree, &[&our_commit]).git(what)?;
    Ok((commit, None))
}

/// The paths in conflict in a merged index, each once, sorted.
fn conflict_paths(index: &git2::Index, what: &str) -> Result<Vec<PathBuf>> {
    let mut paths = Vec::new();
    for conflict in index.conflicts().git(|| what.to_owned())? {
        let conflict = conflict.git(|| what.to_owned())?;
        let entry = conflict.our.or(conflict.their).or(conflict.ancestor);
        if let Some(entry) = entry {
            let path = PathBuf::from(String::from_utf8_lossy(&entry.path).into_owned());
            if !paths.contains(&path) {
                paths.push(path);
            }
        }
    }
    paths.sort();
    Ok(paths)
}
