//! The user's uncommitted work: how much of it there is (so `orch run` can say that
//! agents will not see it), and a commit of the working tree as it is (`--base
//! WORKTREE`), made as `git stash create` makes one: objects only, no ref, and the
//! index file and working tree untouched.

use std::path::Path;

use git2::{IndexAddOption, Oid, Repository, Signature, Status, StatusOptions};

use super::worktree::{FileChange, file_changes};
use super::{GitError, Result};

/// `--base` value that asks for the working tree as it is.
pub const WORKTREE_BASE: &str = "WORKTREE";

/// The paths of the checkout around `repo` that differ from HEAD: modified, added,
/// deleted, renamed, and untracked files that are not ignored.
pub fn uncommitted(repo: &Path) -> Result<Vec<String>> {
    let repo = open(repo)?;
    if repo.is_bare() {
        return Ok(Vec::new());
    }
    let mut options = StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(true).include_ignored(false).exclude_submodules(true);
    let statuses = repo.statuses(Some(&mut options)).map_err(git("read the status of the checkout"))?;
    Ok(statuses
        .iter()
        .filter(|e| !e.status().is_empty() && !e.status().contains(Status::IGNORED))
        .filter_map(|e| e.path().ok().map(str::to_owned))
        .collect())
}

/// A commit whose tree is the working tree of `repo` (tracked changes and untracked files
/// that are not ignored), with HEAD as its parent; HEAD itself when nothing differs.
pub fn snapshot_worktree(repo: &Path) -> Result<Oid> {
    let repo = open(repo)?;
    let head = repo.head().and_then(|h| h.peel_to_commit()).map_err(git("read HEAD of the checkout"))?;
    let tree_id = tree_of(&repo)?;
    if tree_id == head.tree_id() {
        return Ok(head.id());
    }
    let tree = repo.find_tree(tree_id).map_err(git("read the working tree's tree"))?;
    let who = Signature::now("orch", "orch@localhost").map_err(git("make a signature"))?;
    repo.commit(None, &who, &who, "orch: the working tree as it was (--base WORKTREE)", &tree, &[&head])
        .map_err(git("commit the working tree's snapshot"))
}

/// The tree of the working tree around `repo`, as [`snapshot_worktree`] takes it: its
/// objects are written, but no commit, ref or index file.
pub fn worktree_tree(repo: &Path) -> Result<Oid> {
    tree_of(&open(repo)?)
}

/// The files that differ between the trees `from` and `to` of the repository around
/// `repo` (`orch exec` counts what its agent changed with two [`worktree_tree`]s).
pub fn tree_changes(repo: &Path, from: Oid, to: Oid) -> Result<Vec<FileChange>> {
    let repo = open(repo)?;
    let from = repo.find_tree(from).map_err(git("read the tree before"))?;
    let to = repo.find_tree(to).map_err(git("read the tree after"))?;
    let diff = repo.diff_tree_to_tree(Some(&from), Some(&to), None).map_err(git("diff two trees"))?;
    Ok(file_changes(&diff))
}

fn tree_of(repo: &Repository) -> Result<Oid> {
    // The repository's index, read into memory and changed there only: `write_tree`
    // writes objects, and the index file is never written back.
    let mut index = repo.index().map_err(git("read the index"))?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None).map_err(git("add the working tree's files"))?;
    index.update_all(["*"], None).map_err(git("take the working tree's deletions"))?;
    index.write_tree().map_err(git("write the working tree's tree"))
}

fn open(repo: &Path) -> Result<Repository> {
    Repository::discover(repo).map_err(|source| GitError::OpenUser { path: repo.to_owned(), source })
}

fn git(action: &'static str) -> impl Fn(git2::Error) -> GitError {
    move |source| GitError::Git { action: action.to_string(), source }
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    fn git_in(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .current_dir(dir)
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    #[test]
    fn the_snapshot_holds_the_working_tree_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        git_in(repo, &["init", "-q", "-b", "main"]);
        std::fs::write(repo.join("kept.txt"), "kept\n").unwrap();
        std::fs::write(repo.join("gone.txt"), "gone\n").unwrap();
        std::fs::write(repo.join(".gitignore"), "ignored.txt\n").unwrap();
        git_in(repo, &["add", "-A"]);
        git_in(repo, &["commit", "-qm", "base"]);
        let head = git_in(repo, &["rev-parse", "HEAD"]).trim().to_owned();
        assert!(uncommitted(repo).unwrap().is_empty());
        assert_eq!(snapshot_worktree(repo).unwrap().to_string(), head, "a clean checkout is HEAD");

        std::fs::write(repo.join("kept.txt"), "edited\n").unwrap();
        std::fs::remove_file(repo.join("gone.txt")).unwrap();
        std::fs::write(repo.join("new.txt"), "new\n").unwrap();
        std::fs::write(repo.join("ignored.txt"), "secret\n").unwrap();
        std::fs::write(repo.join("staged.txt"), "staged\n").unwrap();
        git_in(repo, &["add", "staged.txt"]);
        let status = git_in(repo, &["status", "--porcelain=v1"]);
        let index = std::fs::read(repo.join(".git/index")).unwrap();
        let mut paths = uncommitted(repo).unwrap();
        paths.sort();
        assert_eq!(paths, ["gone.txt", "kept.txt", "new.txt", "staged.txt"]);

        let snap = snapshot_worktree(repo).unwrap().to_string();
        assert_ne!(snap, head);
        assert_eq!(git_in(repo, &["show", &format!("{snap}:kept.txt")]), "edited\n");
        assert_eq!(git_in(repo, &["show", &format!("{snap}:new.txt")]), "new\n");
        assert_eq!(git_in(repo, &["show", &format!("{snap}:staged.txt")]), "staged\n");
        let files = git_in(repo, &["ls-tree", "--name-only", &snap]);
        assert!(!files.contains("gone.txt") && !files.contains("ignored.txt"), "{files}");
        assert_eq!(git_in(repo, &["rev-parse", &format!("{snap}^")]).trim(), head);
        // Nothing of the user's changed: status, index file, HEAD, refs.
        assert_eq!(git_in(repo, &["status", "--porcelain=v1"]), status);
        assert_eq!(std::fs::read(repo.join(".git/index")).unwrap(), index);
        assert_eq!(git_in(repo, &["rev-parse", "HEAD"]).trim(), head);
        assert_eq!(git_in(repo, &["for-each-ref", "--format=%(refname)"]).trim(), "refs/heads/main");
    }
}
