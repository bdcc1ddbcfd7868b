//! `integrate: merge`: the agents' branches merged, in order, into one integration
//! branch of the run clone, in memory (no checkout). A branch that conflicts is skipped
//! and reported with its conflicting paths; the others are still merged.

use std::path::PathBuf;

use git2::{MergeOptions, Oid, Repository};

use super::clone::RunClone;
use super::{Author, Context as _, GitError, Result, blocking};

/// What happened to one branch in [`RunClone::merge_branches`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MergeOutcome {
    /// The branch, without `refs/heads/`.
    pub branch: String,
    /// Whether the integration branch now contains it.
    pub merged: bool,
    /// Paths in conflict (then `merged` is false and the branch was skipped).
    pub conflicts: Vec<PathBuf>,
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
        let into_ref = format!("refs/heads/{into}");
        if !git2::Reference::is_valid_name(&into_ref) {
            return Err(GitError::Git {
                action: format!("merge into `{into}`"),
                source: git2::Error::from_str("not a valid branch name"),
            });
        }
        let mut tip = match repo.refname_to_id(&into_ref) {
            Ok(id) => id,
            Err(e) if e.code() == git2::ErrorCode::NotFound => {
                repo.reference(&into_ref, self.base(), false, "orch: integration branch at the base")
                    .git(|| format!("create {into}"))?;
                self.base()
            }
            Err(e) => return Err(GitError::Git { action: format!("read {into}"), source: e }),
        };
        let mut options = MergeOptions::new();
        options.find_renames(true);
        let mut outcomes = Vec::with_capacity(branches.len());
        for branch in branches {
            let theirs = repo
                .refname_to_id(&format!("refs/heads/{branch}"))
                .git(|| format!("find the branch {branch} to merge"))?;
            let (next, conflicts) = merge_one(&repo, tip, theirs, branch, into, &options, author)?;
            let merged = conflicts.is_none();
            let conflicts = conflicts.unwrap_or_default();
            if next != tip {
                repo.reference_matching(&into_ref, next, true, tip, &format!("orch: merge {branch}"))
                    .git(|| format!("move {into} to the merge of {branch}"))?;
                tip = next;
            }
            outcomes.push(MergeOutcome { branch: branch.clone(), merged, conflicts });
        }
        Ok(outcomes)
    }
}

/// Merges `theirs` into `ours`: the new tip, or `ours` and the conflicting paths.
fn merge_one(
    repo: &Repository,
    ours: Oid,
    theirs: Oid,
    branch: &str,
    into: &str,
    options: &MergeOptions,
    author: &Author,
) -> Result<(Oid, Option<Vec<PathBuf>>)> {
    let what = || format!("merge {branch} into {into}");
    if ours == theirs || repo.graph_descendant_of(ours, theirs).git(what)? {
        return Ok((ours, None));
    }
    if repo.graph_descendant_of(theirs, ours).git(what)? {
        return Ok((theirs, None));
    }
    let our_commit = repo.find_commit(ours).git(what)?;
    let their_commit = repo.find_commit(theirs).git(what)?;
    let mut index = repo.merge_commits(&our_commit, &their_commit, Some(options)).git(what)?;
    if index.has_conflicts() {
        let mut paths = Vec::new();
        for conflict in index.conflicts().git(what)? {
            let conflict = conflict.git(what)?;
            let entry = conflict.our.or(conflict.their).or(conflict.ancestor);
            if let Some(entry) = entry {
                let path = PathBuf::from(String::from_utf8_lossy(&entry.path).into_owned());
                if !paths.contains(&path) {
                    paths.push(path);
                }
            }
        }
        paths.sort();
        return Ok((ours, Some(paths)));
    }
    let tree = index.write_tree_to(repo).git(what)?;
    let tree = repo.find_tree(tree).git(what)?;
    let signature = author.signature()?;
    let message = format!("Merge {branch} into {into}");
    let commit = repo.commit(None, &signature, &signature, &message, &tree, &[&our_commit, &their_commit]).git(what)?;
    Ok((commit, None))
}
