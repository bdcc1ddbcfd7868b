//! The git status snapshot that goes into an agent's system prompt: branch, short
//! status and the last commits of its working tree, read with git2 by the coordinator
//! before the agent starts (a run's worktree is the coordinator's own fresh checkout).

use std::path::Path;

use git2::{Repository, Status, StatusOptions};
use orch_agents::prompt::GitSnapshot;

/// Commits listed.
pub const SNAPSHOT_COMMITS: usize = 5;

/// The snapshot of the repository that holds `cwd`; `None` outside a repository or
/// when it cannot be read.
pub fn snapshot(cwd: &Path) -> Option<GitSnapshot> {
    let repo = Repository::discover(cwd).ok()?;
    let branch = match repo.head() {
        Ok(head) if head.is_branch() => head.shorthand().unwrap_or("HEAD").to_string(),
        Ok(head) => match head.target() {
            Some(id) => format!("(detached at {})", &id.to_string()[..7]),
            None => "(detached)".to_string(),
        },
        // An unborn branch: HEAD names it, but it has no commit yet.
        Err(_) => repo
            .find_reference("HEAD")
            .ok()
            .and_then(|r| r.symbolic_target().ok().flatten().map(|t| t.trim_start_matches("refs/heads/").to_string()))
            .unwrap_or_else(|| "HEAD".to_string()),
    };
    let mut options = StatusOptions::new();
    options.include_untracked(true).recurse_untracked_dirs(false).include_ignored(false);
    let status = match repo.statuses(Some(&mut options)) {
        Ok(statuses) => {
            statuses.iter().map(|e| format!("{} {}", short_code(e.status()), e.path().unwrap_or("?"))).collect()
        }
        Err(_) => Vec::new(),
    };
    let commits = repo.head().ok().and_then(|h| h.target()).map(|tip| commits(&repo, tip)).unwrap_or_default();
    Some(GitSnapshot { branch, status, commits })
}

/// The snapshot of a checkout known to match its branch `branch` at `tip` (a worktree
/// the coordinator has just checked out): what [`snapshot`] reads, without the status
/// walk. That walk is no small cost there: every index entry of a fresh checkout is
/// racily clean (written in the same second as its file), so it hashes every file.
pub fn clean_snapshot(repo: &Repository, branch: &str, tip: git2::Oid) -> GitSnapshot {
    GitSnapshot { branch: branch.to_string(), status: Vec::new(), commits: commits(repo, tip) }
}

/// The last [`SNAPSHOT_COMMITS`] commits from `tip`, newest first, as `<short id> <subject>`.
fn commits(repo: &Repository, tip: git2::Oid) -> Vec<String> {
    let mut commits = Vec::new();
    if let Ok(mut walk) = repo.revwalk()
        && walk.push(tip).is_ok()
    {
        for id in walk.flatten().take(SNAPSHOT_COMMITS) {
            if let Ok(commit) = repo.find_commit(id) {
                commits.push(format!("{} {}", &id.to_string()[..7], commit.summary().ok().flatten().unwrap_or("")));
            }
        }
    }
    commits
}

/// The two-letter code of `git status --short`.
fn short_code(s: Status) -> String {
    if s.contains(Status::WT_NEW) {
        return "??".to_string();
    }
    let index = if s.contains(Status::INDEX_NEW) {
        'A'
    } else if s.contains(Status::INDEX_MODIFIED) {
        'M'
    } else if s.contains(Status::INDEX_DELETED) {
        'D'
    } else if s.contains(Status::INDEX_RENAMED) {
        'R'
    } else if s.contains(Status::INDEX_TYPECHANGE) {
        'T'
    } else {
        ' '
    };
    let tree = if s.contains(Status::WT_MODIFIED) {
        'M'
    } else if s.contains(Status::WT_DELETED) {
        'D'
    } else if s.contains(Status::WT_RENAMED) {
        'R'
    } else if s.contains(Status::WT_TYPECHANGE) {
        'T'
    } else if s.contains(Status::CONFLICTED) {
        'U'
    } else {
        ' '
    };
    format!("{index}{tree}")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    #[test]
    fn branch_status_and_commits() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let mut parent: Option<git2::Oid> = None;
        for n in 0..7 {
            std::fs::write(dir.path().join("f.txt"), format!("{n}")).unwrap();
            let mut index = repo.index().unwrap();
            index.add_path(Path::new("f.txt")).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let parents: Vec<git2::Commit> = parent.iter().map(|p| repo.find_commit(*p).unwrap()).collect();
            let refs: Vec<&git2::Commit> = parents.iter().collect();
            parent = Some(repo.commit(Some("HEAD"), &sig, &sig, &format!("commit {n}"), &tree, &refs).unwrap());
        }
        std::fs::write(dir.path().join("f.txt"), "changed").unwrap();
        std::fs::write(dir.path().join("new.txt"), "new").unwrap();
        let snap = snapshot(dir.path()).unwrap();
        assert!(snap.branch == "master" || snap.branch == "main", "{}", snap.branch);
        assert_eq!(snap.status, vec![" M f.txt", "?? new.txt"]);
        assert_eq!(snap.commits.len(), SNAPSHOT_COMMITS);
        assert!(snap.commits[0].ends_with(" commit 6"));
        assert!(snapshot(tempfile::tempdir().unwrap().path()).is_none());
    }
}
