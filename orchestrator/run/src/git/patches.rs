//! `orch merge`'s integration branch across shards: the shards ran on other machines,
//! so their run clones are gone, but each agent's patch is in its run directory. The
//! patches are applied in agent order onto the shards' base commit in the user's
//! repository, one commit per agent (whatever the mode: patches carry no history), and
//! the result becomes `orch/<merge run>/integration` there. Only objects and that one
//! `orch/...` ref are written into the user's repository.

use std::path::{Path, PathBuf};

use git2::{Diff, Oid, Repository};

use super::merge::MergeOutcome;
use super::{Author, Context as _, GitError, Result, blocking};

/// One agent's patch for [`integrate_patches`].
#[derive(Debug, Clone)]
pub struct PatchItem {
    /// The agent id (reported as the outcome's `branch`).
    pub agent: String,
    /// The patch bytes (`git diff --binary` style, as `orch run` writes them).
    pub patch: Vec<u8>,
    /// Whether the patch is relative to the base (not to a `base: needs` start).
    pub from_base: bool,
    pub message: String,
}

/// Applies `items` in order onto `base` in the repository at `repo` and points
/// `branch` (a new `orch/...` branch) at the result. A patch that does not apply is
/// skipped and reported with the files in conflict. Returns the outcomes and the tip.
pub async fn integrate_patches(
    repo: &Path,
    base: &str,
    items: Vec<PatchItem>,
    branch: &str,
    author: &Author,
) -> Result<(Vec<MergeOutcome>, Oid)> {
    let (repo, base, branch, author) = (repo.to_owned(), base.to_owned(), branch.to_owned(), author.clone());
    blocking("integrate patches", move || integrate_blocking(&repo, &base, &items, &branch, &author)).await
}

fn integrate_blocking(
    path: &Path,
    base: &str,
    items: &[PatchItem],
    branch: &str,
    author: &Author,
) -> Result<(Vec<MergeOutcome>, Oid)> {
    let refname = format!("refs/heads/{branch}");
    if !branch.starts_with("orch/") || !git2::Reference::is_valid_name(&refname) {
        return Err(GitError::Git {
            action: format!("create `{branch}`"),
            source: git2::Error::from_str("only valid `orch/...` branches are written"),
        });
    }
    let repo = Repository::open(path).map_err(|source| GitError::OpenUser { path: path.to_owned(), source })?;
    let base = Oid::from_str(base).and_then(|id| repo.find_commit(id)).git(|| {
        format!(
            "find the shards' base commit {base} in {} (fetch it, or run orch merge in that repository)",
            path.display()
        )
    })?;
    let base_tree = base.tree().git(|| "read the base tree".into())?;
    let signature = author.signature()?;
    let mut tip = base.clone();
    let mut outcomes = Vec::with_capacity(items.len());
    for item in items {
        let what = || format!("apply the patch of `{}`", item.agent);
        let diff = Diff::from_buffer(&item.patch).git(what)?;
        let tip_tree = tip.tree().git(what)?;
        let applied = repo.apply_to_tree(&tip_tree, &diff, None);
        let mut index = match applied {
            Ok(index) => index,
            Err(_) => {
                let conflicts = conflicts(&repo, &diff, &base_tree, &tip_tree, item.from_base)?;
                outcomes.push(MergeOutcome { branch: item.agent.clone(), merged: false, conflicts });
                continue;
            }
        };
        let tree = index.write_tree_to(&repo).git(what)?;
        if tree != tip_tree.id() {
            let tree = repo.find_tree(tree).git(what)?;
            let commit = repo.commit(None, &signature, &signature, &item.message, &tree, &[&tip]).git(what)?;
            tip = repo.find_commit(commit).git(what)?;
        }
        outcomes.push(MergeOutcome { branch: item.agent.clone(), merged: true, conflicts: Vec::new() });
    }
    repo.reference(&refname, tip.id(), false, "orch merge: the shards' integration branch").map_err(|e| {
        match e.code() {
            git2::ErrorCode::Exists => GitError::BranchExists { branch: branch.to_owned() },
            _ => GitError::Git { action: format!("create the branch {branch}"), source: e },
        }
    })?;
    Ok((outcomes, tip.id()))
}

/// The files a patch that does not apply conflicts in: with a patch from the base, a
/// three-way merge of its result against the branch so far names them; otherwise every
/// file it touches.
fn conflicts(
    repo: &Repository,
    diff: &Diff<'_>,
    base: &git2::Tree<'_>,
    tip: &git2::Tree<'_>,
    from_base: bool,
) -> Result<Vec<PathBuf>> {
    let touched = || -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> =
            diff.deltas().filter_map(|d| d.new_file().path().or(d.old_file().path()).map(Path::to_owned)).collect();
        paths.sort();
        paths.dedup();
        paths
    };
    if !from_base {
        return Ok(touched());
    }
    let Ok(mut theirs) = repo.apply_to_tree(base, diff, None) else { return Ok(touched()) };
    let what = || "find the conflicts of a patch".to_owned();
    let theirs = repo.find_tree(theirs.write_tree_to(repo).git(what)?).git(what)?;
    let index = repo.merge_trees(base, tip, &theirs, None).git(what)?;
    let mut paths = Vec::new();
    for conflict in index.conflicts().git(what)? {
        let conflict = conflict.git(what)?;
        if let Some(entry) = conflict.our.or(conflict.their).or(conflict.ancestor) {
            paths.push(PathBuf::from(String::from_utf8_lossy(&entry.path).into_owned()));
        }
    }
    paths.sort();
    paths.dedup();
    Ok(if paths.is_empty() { touched() } else { paths })
}
