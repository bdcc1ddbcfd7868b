//! Tests of the git layout against real repositories made with the `git` CLI, which also
//! checks what an agent's git sees.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use super::worktree::FileChange;
use super::*;

const TOKEN: &str = "ghs_SECRETtoken123";
const BASIC: &str = "eC1hY2Nlc3MtdG9rZW46Z2hzX1NFQ1JFVA=="; // an extraheader's basic credential

/// Runs git with no system or global config, as a fixed author; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_cmd(dir, args).output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}{}",
        dir.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn git_cmd(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_AUTHOR_NAME", "User")
        .env("GIT_AUTHOR_EMAIL", "user@example.com")
        .env("GIT_COMMITTER_NAME", "User")
        .env("GIT_COMMITTER_EMAIL", "user@example.com");
    cmd
}

fn write(path: &Path, text: impl AsRef<[u8]>) {
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, text).unwrap();
}

struct Fixture {
    tmp: TempDir,
    user: PathBuf,
    run_dir: PathBuf,
}

impl Fixture {
    /// A user repository with two commits on `main`, an annotated tag `v1` on the first.
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let user = tmp.path().join("user");
        git(tmp.path(), &["init", "-q", "-b", "main", "user"]);
        write(&user.join("README.md"), "# demo\n");
        write(&user.join("a.txt"), "one\ntwo\nthree\n");
        write(&user.join("b.txt"), "bee\n");
        write(&user.join("gone.txt"), "to be deleted\n");
        write(&user.join("src/lib.rs"), "pub fn f() {}\n");
        write(&user.join(".gitignore"), "*.log\n");
        write(&user.join("bin.dat"), [0u8, 1, 2, 255, 0, 7]);
        git(&user, &["add", "-A"]);
        git(&user, &["commit", "-q", "-m", "init"]);
        git(&user, &["tag", "-a", "-m", "v1", "v1"]);
        write(&user.join("b.txt"), "bee\nbuzz\n");
        git(&user, &["commit", "-q", "-am", "second"]);
        let run_dir = tmp.path().join("run");
        Self { tmp, user, run_dir }
    }

    fn head(&self) -> String {
        git(&self.user, &["rev-parse", "HEAD"]).trim().to_owned()
    }

    fn clone(&self, run_id: &str) -> RunClone {
        RunClone::create_blocking(&self.user, &self.run_dir, "HEAD", run_id).unwrap()
    }

    /// What checkout actions and careless users leave in `.git`: credentials, includes,
    /// hooks, a hooks path and an fsmonitor command.
    fn plant_secrets(&self) {
        let marker = self.tmp.path().join("hook-ran");
        let config = [
            ("http.https://github.com/.extraheader", format!("AUTHORIZATION: basic {BASIC}")),
            ("remote.origin.url", format!("https://x-access-token:{TOKEN}@github.com/o/r.git")),
            ("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*".into()),
            ("credential.helper", format!("store --file={}", self.tmp.path().join("creds").display())),
            ("include.path", self.tmp.path().join("included").display().to_string()),
            ("includeIf.gitdir:/.path", self.tmp.path().join("included").display().to_string()),
            ("core.hooksPath", self.tmp.path().join("hooks").display().to_string()),
            ("core.fsmonitor", format!("touch {}", marker.display())),
        ];
        for (key, value) in config {
            git(&self.user, &["config", key, &value]);
        }
        write(&self.tmp.path().join("included"), format!("[secret]\n\ttoken = {TOKEN}\n"));
        for hook in ["post-checkout", "pre-commit", "reference-transaction", "post-index-change"] {
            for dir in [self.user.join(".git/hooks"), self.tmp.path().join("hooks")] {
                let path = dir.join(hook);
                write(&path, format!("#!/bin/sh\ntouch {}\n", marker.display()));
                set_mode(&path, 0o755);
            }
        }
    }

    fn hook_ran(&self) -> bool {
        self.tmp.path().join("hook-ran").exists()
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// Every file under `dir` (not following links, skipping `.git`), with its bytes.
fn tree_bytes(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            let rel = path.strip_prefix(root).unwrap().to_owned();
            if rel == Path::new(".git") {
                continue;
            }
            if kind.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(rel, fs::read(&path).unwrap_or_default());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every file under `dir`, relative, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    tree_bytes(dir).into_keys().collect()
}

fn refs(repo: &Path) -> Vec<String> {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]).lines().map(str::to_owned).collect()
}

fn author() -> Author {
    Author { name: "Agent".into(), email: "agent@example.com".into() }
}

#[test]
fn run_clone_borrows_objects_and_has_a_clean_config_and_no_hooks() {
    let fx = Fixture::new();
    fx.plant_secrets();
    let user_config = fs::read(fx.user.join(".git/config")).unwrap();
    let clone = fx.clone("r1");
    let wt = clone.add_worktree_blocking("agent").unwrap();

    // Objects: borrowed through alternates, none copied.
    let git_dir = clone.git_dir();
    let alternates = fs::read_to_string(git_dir.join("objects/info/alternates")).unwrap();
    assert_eq!(alternates.trim_end(), fs::canonicalize(fx.user.join(".git/objects")).unwrap().to_str().unwrap());
    assert_eq!(files_under(&git_dir.join("objects")), vec![PathBuf::from("info/alternates")]);
    assert_eq!(clone.base().to_string(), fx.head());

    // Config: exactly ours; nothing of the user's.
    let config = fs::read_to_string(git_dir.join("config")).unwrap();
    for needle in [TOKEN, BASIC, "extraheader", "remote", "url", "credential", "include", "hooksPath", "fsmonitor"] {
        assert!(!config.contains(needle), "`{needle}` in the run clone's config:\n{config}");
    }
    // No hooks directory, no other stray files.
    assert!(!git_dir.join("hooks").exists());
    let mut top: Vec<String> =
        fs::read_dir(git_dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    top.sort();
    assert_eq!(top, ["HEAD", "config", "objects", "refs", "worktrees"]);

    // What the agent's git sees: no token anywhere in its config, a clean status.
    let home = fx.tmp.path().join("agent-home");
    fs::create_dir_all(&home).unwrap();
    let listing = Command::new("git")
        .current_dir(wt.path())
        .args(["config", "--list", "--show-origin"])
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", &home)
        .envs(wt.git_paths().env)
        .output()
        .unwrap();
    assert!(listing.status.success());
    let listing = String::from_utf8(listing.stdout).unwrap();
    assert!(listing.contains("core.bare=true"), "{listing}");
    for needle in [TOKEN, BASIC, "extraheader", "remote.", "credential", "hookspath", "fsmonitor", "secret"] {
        assert!(
            !listing.to_lowercase().contains(&needle.to_lowercase()),
            "`{needle}` visible to the agent:\n{listing}"
        );
    }
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    assert!(!fx.hook_ran(), "a hook of the user's repository ran");
    assert_eq!(fs::read(fx.user.join(".git/config")).unwrap(), user_config);

    // The sandbox lists: the user's `.git` (its config) is not readable, only its objects.
    let paths = wt.git_paths();
    let user_git = fs::canonicalize(fx.user.join(".git")).unwrap();
    assert!(paths.read_only.iter().all(|p| p == &user_git.join("objects") || !p.starts_with(&user_git)));
    assert!(paths.read_only.contains(&user_git.join("objects")));
    assert!(paths.read_only.contains(&wt.repo_dir().to_owned()) && wt.admin_dir().starts_with(wt.repo_dir()));
    // Not the run clone: every agent's branch ends up there.
    assert!(paths.read_only.iter().all(|p| !p.starts_with(git_dir) && !git_dir.starts_with(p)), "{paths:?}");
    assert_eq!(paths.writable, vec![wt.path().to_owned()]);
    // The agent's repository is as clean as the run clone.
    let config = fs::read_to_string(wt.repo_dir().join("config")).unwrap();
    assert_eq!(config, fs::read_to_string(git_dir.join("config")).unwrap());
    assert!(!wt.repo_dir().join("hooks").exists());
}

#[test]
fn base_ref_forms_resolve_to_commits() {
    let fx = Fixture::new();
    let first = git(&fx.user, &["rev-parse", "v1^{commit}"]).trim().to_owned();
    for (i, (base, want)) in
        [("main", fx.head()), ("HEAD", fx.head()), ("v1", first.clone()), (first.as_str(), first.clone())]
            .into_iter()
            .enumerate()
    {
        let run_dir = fx.tmp.path().join(format!("run{i}"));
        let clone = RunClone::create_blocking(&fx.user, &run_dir, base, "r").unwrap();
        assert_eq!(clone.base().to_string(), want, "{base}");
        let wt = clone.add_worktree_blocking("a").unwrap();
        assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), want);
    }
    let err = RunClone::create_blocking(&fx.user, &fx.tmp.path().join("bad"), "no-such-branch", "r").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("no-such-branch") && text.contains("give a branch"), "{text}");
    assert!(RunClone::create_blocking(&fx.user, &fx.tmp.path().join("bad2"), "HEAD", "a/b").is_err());
    // From a subdirectory of the checkout too.
    let clone = RunClone::create_blocking(&fx.user.join("src"), &fx.tmp.path().join("sub"), "HEAD", "r").unwrap();
    assert_eq!(clone.base().to_string(), fx.head());
    // A second run clone in the same run directory is refused.
    let err = RunClone::create_blocking(&fx.user, &fx.tmp.path().join("sub"), "HEAD", "r").unwrap_err();
    assert!(matches!(err, GitError::Exists(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dirty_user_checkout_is_left_exactly_as_it_was() {
    let fx = Fixture::new();
    // Dirty: a modified tracked file, a staged change, an untracked file, an ignored one.
    write(&fx.user.join("a.txt"), "one\nTWO (unstaged)\nthree\n");
    write(&fx.user.join("src/lib.rs"), "pub fn f() {} // staged\n");
    git(&fx.user, &["add", "src/lib.rs"]);
    write(&fx.user.join("untracked.txt"), "mine\n");
    write(&fx.user.join("debug.log"), "ignored\n");
    let snapshot = |fx: &Fixture| {
        (
            git(&fx.user, &["status", "--porcelain=v2", "--branch", "--untracked-files=all", "--ignored"]),
            tree_bytes(&fx.user),
            fs::read(fx.user.join(".git/index")).unwrap(),
            fs::read(fx.user.join(".git/HEAD")).unwrap(),
            fs::read(fx.user.join(".git/config")).unwrap(),
            git(&fx.user, &["stash", "list"]),
            git(&fx.user, &["worktree", "list", "--porcelain"]),
        )
    };
    let before = snapshot(&fx);
    let refs_before = refs(&fx.user);

    // The whole flow: clone, two agents, commits, fetches, a merge, cleanup.
    let clone = RunClone::create(&fx.user, &fx.run_dir, "HEAD", "r2").await.unwrap();
    let a = clone.add_worktree("a").await.unwrap();
    let b = clone.add_worktree("b").await.unwrap();
    // Agents start from the commit, not from the dirty tree.
    assert_eq!(fs::read_to_string(a.path().join("a.txt")).unwrap(), "one\ntwo\nthree\n");
    assert!(!a.path().join("untracked.txt").exists());
    write(&a.path().join("a.txt"), "one\ntwo\nthree\nfour\n");
    write(&b.path().join("new.txt"), "new\n");
    a.commit_all("a", &author()).await.unwrap().unwrap();
    b.commit_all("b", &author()).await.unwrap().unwrap();
    let branches = vec![a.branch().to_owned(), b.branch().to_owned()];
    clone.fetch_into_user(&branches).await.unwrap();
    let integration = clone.integration_branch();
    let outcomes = clone.merge_branches(&branches, &integration, &author()).await.unwrap();
    assert!(outcomes.iter().all(|o| o.merged), "{outcomes:?}");
    clone.fetch_into_user(std::slice::from_ref(&integration)).await.unwrap();
    a.remove().await.unwrap();
    b.remove().await.unwrap();
    assert_eq!(clone.remove().await.unwrap(), Removal::Removed);

    assert_eq!(snapshot(&fx), before);
    let refs_after = refs(&fx.user);
    let added: Vec<&String> = refs_after.iter().filter(|r| !refs_before.contains(r)).collect();
    assert!(refs_before.iter().all(|r| refs_after.contains(r)), "a user ref changed");
    let mut names: Vec<&str> = added.iter().map(|r| r.split(' ').next().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["refs/heads/orch/r2/a", "refs/heads/orch/r2/b", "refs/heads/orch/r2/integration"]);
    assert!(!fx.user.join(".git/FETCH_HEAD").exists());
    git(&fx.user, &["fsck", "--no-dangling", "--no-progress"]);
    assert_eq!(git(&fx.user, &["show", "orch/r2/integration:new.txt"]), "new\n");
    assert_eq!(git(&fx.user, &["show", "orch/r2/integration:a.txt"]), "one\ntwo\nthree\nfour\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_worktrees_in_parallel() {
    let fx = Fixture::new();
    let clone = RunClone::create(&fx.user, &fx.run_dir, "main", "r3").await.unwrap();
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let clone = clone.clone();
            tokio::spawn(async move { clone.add_worktree(&format!("agent-{i}")).await })
        })
        .collect();
    let mut worktrees = Vec::new();
    for task in tasks {
        worktrees.push(task.await.unwrap().unwrap());
    }
    let head = fx.head();
    for (i, wt) in worktrees.iter().enumerate() {
        assert_eq!(wt.branch(), format!("orch/r3/agent-{i}"));
        assert_eq!(git(wt.path(), &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), wt.branch());
        assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), head);
        assert_eq!(git(wt.path(), &["status", "--porcelain", "--untracked-files=all"]), "", "{}", wt.name());
        assert_eq!(fs::read_to_string(wt.path().join("b.txt")).unwrap(), "bee\nbuzz\n");
    }
    for wt in &worktrees {
        let listing = git(wt.repo_dir(), &["worktree", "list", "--porcelain"]);
        assert_eq!(listing.matches("\nbranch refs/heads/orch/r3/").count(), 1, "{listing}");
    }
    assert_eq!(clone.worktrees().unwrap().len(), 32);
    // An id used twice is refused, and the first worktree is intact.
    assert!(clone.add_worktree("agent-0").await.is_err());
    assert_eq!(git(worktrees[0].path(), &["status", "--porcelain"]), "");
}

/// A fresh worktree's snapshot, made without the status walk, is the one the walk reads.
#[tokio::test]
async fn a_fresh_worktrees_snapshot_is_the_one_its_status_walk_reads() {
    let fx = Fixture::new();
    let clone = RunClone::create(&fx.user, &fx.run_dir, "main", "r9").await.unwrap();
    let plain = clone.add_worktree("plain").await.unwrap();
    let needs = vec![("plain".to_string(), git2::Oid::from_str(&fx.head()).unwrap())];
    let merged = clone.add_worktree_on_needs("merged", &needs, &author()).await.unwrap().unwrap();
    for wt in [&plain, &merged] {
        let walked = super::snapshot(wt.path()).unwrap();
        assert_eq!(wt.fresh_snapshot().await.unwrap(), walked, "{}", wt.name());
        assert_eq!(walked.branch, wt.branch());
        assert!(walked.status.is_empty() && walked.commits.len() == 2, "{walked:?}");
    }
    // Once the checkout changes, only the walk sees it.
    write(&plain.path().join("new.txt"), "new\n");
    assert_eq!(super::snapshot(plain.path()).unwrap().status, ["?? new.txt"]);
}

#[test]
fn commit_patch_changed_files_and_fetch() {
    let fx = Fixture::new();
    let clone = fx.clone("r4");
    let wt = clone.add_worktree_blocking("fix/crate one").unwrap();
    assert!(wt.branch().starts_with("orch/r4/fix-crate-one-"), "{}", wt.branch());
    assert_eq!(wt.commit_all_blocking("nothing", &author()).unwrap(), None);

    write(&wt.path().join("a.txt"), "one\n2\nthree\n");
    write(&wt.path().join("dir/new.txt"), "brand new\n");
    write(&wt.path().join("bin.dat"), [9u8, 0, 8, 0]);
    fs::remove_file(wt.path().join("gone.txt")).unwrap();
    write(&wt.path().join("build.log"), "ignored\n");
    let info = wt.commit_all_blocking("agent: edit", &author()).unwrap().unwrap();
    assert_eq!(info.branch, wt.branch());
    let kinds: Vec<(String, ChangeKind)> = info.files.iter().map(|f| (f.path.display().to_string(), f.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("a.txt".into(), ChangeKind::Modified),
            ("bin.dat".into(), ChangeKind::Modified),
            ("dir/new.txt".into(), ChangeKind::Added),
            ("gone.txt".into(), ChangeKind::Deleted),
        ]
    );
    assert_eq!(wt.changed_files_blocking().unwrap(), info.files);
    // The kept worktree looks committed to the agent's own git.
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    assert_eq!(git(wt.path(), &["log", "-1", "--format=%an <%ae> %s"]).trim(), "Agent <agent@example.com> agent: edit");

    let patch = wt.patch_blocking().unwrap();
    let text = String::from_utf8_lossy(&patch);
    assert!(text.contains("diff --git a/a.txt b/a.txt") && text.contains("-two\n+2\n"), "{text}");
    assert!(text.contains("deleted file mode") && text.contains("GIT binary patch"), "{text}");
    assert!(!text.contains("build.log"));
    // The patch applies to the base.
    let other = clone.add_worktree_blocking("other").unwrap();
    let patch_file = fx.tmp.path().join("agent.patch");
    fs::write(&patch_file, &patch).unwrap();
    git(other.path(), &["apply", &patch_file.display().to_string()]);
    assert_eq!(fs::read_to_string(other.path().join("a.txt")).unwrap(), "one\n2\nthree\n");
    assert_eq!(fs::read(other.path().join("bin.dat")).unwrap(), [9u8, 0, 8, 0]);

    // The commit's objects live in the run clone until fetched.
    let user_objects_before = files_under(&fx.user.join(".git/objects"));
    assert!(git_cmd(&fx.user, &["cat-file", "-e", &info.commit]).output().unwrap().status.code() != Some(0));
    let fetched = clone.fetch_into_user_blocking(&[wt.branch().to_owned()]).unwrap();
    assert_eq!(fetched[0].commit, info.commit);
    assert!(fetched[0].objects >= 4, "{fetched:?}"); // commit, 2 trees, 3 blobs
    assert_eq!(git(&fx.user, &["rev-parse", wt.branch()]).trim(), info.commit);
    assert_eq!(git(&fx.user, &["show", &format!("{}:dir/new.txt", wt.branch())]), "brand new\n");
    git(&fx.user, &["fsck", "--no-dangling", "--no-progress"]);
    let added: Vec<PathBuf> =
        files_under(&fx.user.join(".git/objects")).into_iter().filter(|p| !user_objects_before.contains(p)).collect();
    assert!(added.iter().all(|p| p.starts_with("pack")), "{added:?}");

    // A second round moves the branch forward; fetching again is a fast-forward.
    write(&wt.path().join("b.txt"), "b2\n");
    let second = wt.commit_all_blocking("agent: more", &author()).unwrap().unwrap();
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD^"]).trim(), info.commit);
    assert_eq!(second.files.len(), 5);
    clone.fetch_into_user_blocking(&[wt.branch().to_owned()]).unwrap();
    assert_eq!(git(&fx.user, &["rev-parse", wt.branch()]).trim(), second.commit);
    // Fetching what is already there is a no-op.
    assert_eq!(clone.fetch_into_user_blocking(&[wt.branch().to_owned()]).unwrap()[0].objects, 0);

    // A user branch of the same name that is not ours is never moved, even forward.
    let clash = other.branch().to_owned();
    git(&fx.user, &["branch", &clash, "v1"]);
    other.commit_all_blocking("other", &author()).unwrap().unwrap();
    let err = clone.fetch_into_user_blocking(std::slice::from_ref(&clash)).unwrap_err();
    assert!(matches!(err, GitError::BranchExists { .. }), "{err}");
    assert_eq!(git(&fx.user, &["rev-parse", &clash]).trim(), git(&fx.user, &["rev-parse", "v1^{commit}"]).trim());
    // Only orch branches are ever written.
    assert!(clone.fetch_into_user_blocking(&["main".to_owned()]).is_err());
}

#[test]
fn a_tampered_dot_git_is_restored_before_committing() {
    let fx = Fixture::new();
    fx.plant_secrets();
    let clone = fx.clone("r5");
    let wt = clone.add_worktree_blocking("a").unwrap();
    let dotgit = wt.path().join(".git");
    // The agent swaps its gitlink for a repository of its own with a hooks path.
    fs::remove_file(&dotgit).unwrap();
    git(wt.path(), &["init", "-q"]);
    git(wt.path(), &["config", "core.hooksPath", "/tmp/evil"]);
    write(&wt.path().join("a.txt"), "changed\n");
    // And a nested repository, as `cargo new` makes.
    git(wt.path(), &["init", "-q", "nested"]);
    write(&wt.path().join("nested/file.txt"), "nested\n");
    let info = wt.commit_all_blocking("agent", &author()).unwrap().unwrap();
    assert!(dotgit.is_file());
    assert_eq!(git(wt.path(), &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), wt.branch());
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), info.commit);
    assert!(info.files.iter().any(|f| f.path == Path::new("a.txt")), "{:?}", info.files);
    assert_eq!(info.skipped, [PathBuf::from("nested")]);
    assert!(info.files.iter().all(|f| !f.path.starts_with("nested")), "{:?}", info.files);
    assert!(!fx.hook_ran());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_reports_conflicts_and_merges_the_rest() {
    let fx = Fixture::new();
    let clone = RunClone::create(&fx.user, &fx.run_dir, "HEAD", "r6").await.unwrap();
    let mut changed = Vec::new();
    let mut branches = Vec::new();
    for (id, file, text) in [
        ("first", "a.txt", "one\nFIRST\nthree\n"),
        ("second", "a.txt", "one\nSECOND\nthree\n"),
        ("third", "c.txt", "see\n"),
        ("fourth", "README.md", "# demo\n\nmore\n"),
    ] {
        let wt = clone.add_worktree(id).await.unwrap();
        write(&wt.path().join(file), text);
        let info = wt.commit_all(id, &author()).await.unwrap().unwrap();
        changed.push((id.to_owned(), info.files.iter().map(|f| f.path.clone()).collect::<Vec<_>>()));
        branches.push(wt.branch().to_owned());
        wt.remove().await.unwrap();
    }
    let into = clone.integration_branch();
    let outcomes = clone.merge_branches(&branches, &into, &author()).await.unwrap();
    let summary: Vec<(bool, Vec<PathBuf>)> = outcomes.iter().map(|o| (o.merged, o.conflicts.clone())).collect();
    assert_eq!(
        summary,
        [(true, vec![]), (false, vec![PathBuf::from("a.txt")]), (true, vec![]), (true, vec![])],
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1].branch, branches[1]);
    clone.fetch_into_user(std::slice::from_ref(&into)).await.unwrap();
    assert_eq!(git(&fx.user, &["show", &format!("{into}:a.txt")]), "one\nFIRST\nthree\n");
    assert_eq!(git(&fx.user, &["show", &format!("{into}:c.txt")]), "see\n");
    assert_eq!(git(&fx.user, &["show", &format!("{into}:README.md")]), "# demo\n\nmore\n");
    let merges = git(&fx.user, &["log", "--merges", "--format=%s", &into]);
    assert_eq!(
        merges.lines().collect::<Vec<_>>(),
        ["Merge orch/r6/fourth into orch/r6/integration", "Merge orch/r6/third into orch/r6/integration"]
    );
    // Merging again changes nothing.
    let again = clone.merge_branches(&branches[..1], &into, &author()).await.unwrap();
    assert!(again[0].merged);

    assert_eq!(
        overlaps(&changed, |_, _| false),
        [(PathBuf::from("a.txt"), vec!["first".to_owned(), "second".to_owned()])]
    );
}

#[test]
fn cleanup_leaves_nothing_unless_kept() {
    let fx = Fixture::new();
    let refs_before = refs(&fx.user);
    let clone = fx.clone("r7");
    let a = clone.add_worktree_blocking("a").unwrap();
    let b = clone.add_worktree_blocking("b").unwrap();
    let kept = clone.add_worktree_blocking("kept").unwrap();
    write(&a.path().join("x"), "x\n");
    a.commit_all_blocking("x", &author()).unwrap();
    let (a_path, a_admin) = (a.path().to_owned(), a.admin_dir().to_owned());
    a.remove_blocking().unwrap();
    b.remove_blocking().unwrap();
    assert!(!a_path.exists() && !a_admin.exists());

    // A kept worktree keeps the run clone, and still works.
    let removal = clone.clone().remove_blocking().unwrap();
    assert_eq!(removal, Removal::Kept { worktrees: vec![kept.path().to_owned()] });
    assert_eq!(git(kept.path(), &["status", "--porcelain"]), "");
    let listing = git(kept.repo_dir(), &["worktree", "list", "--porcelain"]);
    assert_eq!(listing.matches("worktree ").count(), 2, "{listing}"); // the bare repository and `kept`

    kept.remove_blocking().unwrap();
    assert_eq!(clone.remove_blocking().unwrap(), Removal::Removed);
    assert_eq!(fs::read_dir(&fx.run_dir).unwrap().count(), 0);
    // Nothing was fetched, so the user's repository has no new branch or worktree.
    assert_eq!(refs(&fx.user), refs_before);
    assert_eq!(git(&fx.user, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
}

/// Filters are skipped only when no `.gitattributes` could ask for one; with one, the
/// checkout converts as git would and the agent's git sees a clean tree.
#[test]
fn gitattributes_filters_apply() {
    let fx = Fixture::new();
    write(&fx.user.join(".gitattributes"), "*.txt text eol=crlf\n");
    git(&fx.user, &["add", ".gitattributes"]);
    git(&fx.user, &["commit", "-q", "-m", "attributes"]);
    let clone = fx.clone("r10");
    let wt = clone.add_worktree_blocking("a").unwrap();
    assert_eq!(fs::read_to_string(wt.path().join("a.txt")).unwrap(), "one\r\ntwo\r\nthree\r\n");
    assert_eq!(fs::read(wt.path().join("bin.dat")).unwrap(), [0u8, 1, 2, 255, 0, 7]);
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    // Committing converts back: only the real edit shows in the patch.
    write(&wt.path().join("a.txt"), "one\r\n2\r\nthree\r\n");
    wt.commit_all_blocking("edit", &author()).unwrap().unwrap();
    let patch = String::from_utf8(wt.patch_blocking().unwrap()).unwrap();
    assert!(patch.contains("-two\n+2\n") && !patch.contains('\r'), "{patch}");
}

/// A submodule stays as it was (its directory is empty in the checkout, as git leaves
/// an uninitialized one), and committing the agent's other changes still works.
#[test]
fn submodules_are_left_alone() {
    let fx = Fixture::new();
    let lib = fx.tmp.path().join("lib");
    git(fx.tmp.path(), &["init", "-q", "-b", "main", "lib"]);
    write(&lib.join("lib.txt"), "lib\n");
    git(&lib, &["add", "-A"]);
    git(&lib, &["commit", "-q", "-m", "lib"]);
    git(&fx.user, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", lib.to_str().unwrap(), "sub"]);
    git(&fx.user, &["commit", "-q", "-m", "submodule"]);
    let gitlink = git(&fx.user, &["rev-parse", "HEAD:sub"]);
    let clone = fx.clone("r11");
    let wt = clone.add_worktree_blocking("a").unwrap();
    assert!(wt.path().join("sub").is_dir() && wt.path().join(".gitmodules").is_file());
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    write(&wt.path().join("a.txt"), "edited\n");
    let info = wt.commit_all_blocking("edit", &author()).unwrap().unwrap();
    assert_eq!(info.files, [FileChange { path: "a.txt".into(), kind: ChangeKind::Modified }]);
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD:sub"]), gitlink);
}

#[test]
fn shallow_user_clone() {
    let fx = Fixture::new();
    let shallow = fx.tmp.path().join("shallow");
    let url = format!("file://{}", fx.user.display());
    git(fx.tmp.path(), &["clone", "-q", "--depth", "1", &url, shallow.to_str().unwrap()]);
    assert!(shallow.join(".git/shallow").exists());
    let clone = RunClone::create_blocking(&shallow, &fx.run_dir, "HEAD", "r8").unwrap();
    let wt = clone.add_worktree_blocking("a").unwrap();
    assert_eq!(git(wt.path(), &["log", "--format=%s"]).trim(), "second");
    write(&wt.path().join("a.txt"), "shallow edit\n");
    let info = wt.commit_all_blocking("edit", &author()).unwrap().unwrap();
    assert_eq!(git(wt.path(), &["log", "--format=%s"]).lines().collect::<Vec<_>>(), ["edit", "second"]);
    clone.fetch_into_user_blocking(&[wt.branch().to_owned()]).unwrap();
    assert_eq!(git(&shallow, &["rev-parse", wt.branch()]).trim(), info.commit);
    assert_eq!(git(&shallow, &["log", "--format=%s", wt.branch()]).lines().collect::<Vec<_>>(), ["edit", "second"]);
    git(&shallow, &["fsck", "--no-dangling", "--no-progress"]);
}

/// The sandbox makes the run clone's git dir and the user's objects read-only and the
/// checkout writable, for a tool host that may run under another uid. Emulated here with
/// file modes and `setpriv` (root only): git can read but not write the metadata.
#[test]
fn agent_git_is_read_only_where_the_sandbox_says() {
    let is_root = Command::new("id").arg("-u").output().map(|o| o.stdout == b"0\n").unwrap_or(false);
    let has_setpriv = Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success());
    if !is_root || !has_setpriv {
        eprintln!("skipped: needs root and setpriv to run git as another uid");
        return;
    }
    let fx = Fixture::new();
    fx.plant_secrets();
    let clone = fx.clone("r9");
    let wt = clone.add_worktree_blocking("a").unwrap();
    let other = clone.add_worktree_blocking("b").unwrap();
    let paths = wt.git_paths();
    set_mode(fx.tmp.path(), 0o755);
    // Read-only for the agent: everything not in `writable` stays root's, mode 755/644;
    // the checkout is the agent's.
    let chown = |path: &Path, owner: &str| {
        let status = Command::new("chown").args(["-R", owner]).arg(path).status().unwrap();
        assert!(status.success());
    };
    for path in &paths.writable {
        chown(path, "65534:65534");
    }
    let home = fx.tmp.path().join("nobody-home");
    fs::create_dir_all(&home).unwrap();
    chown(&home, "65534:65534");
    let as_agent = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "git"])
            .args(args)
            .current_dir(wt.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .envs(paths.env.clone())
            .output()
            .unwrap()
    };
    write(&wt.path().join("a.txt"), "agent edit\n");
    write(&wt.path().join("new.txt"), "new\n");
    chown(wt.path(), "65534:65534");

    let status = as_agent(&["status", "--porcelain"]);
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    assert_eq!(String::from_utf8_lossy(&status.stdout), " M a.txt\n?? new.txt\n");
    let diff = as_agent(&["diff"]);
    assert!(diff.status.success() && String::from_utf8_lossy(&diff.stdout).contains("+agent edit"));
    let log = as_agent(&["log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "second\ninit\n");
    let config = as_agent(&["config", "--list"]);
    let config = String::from_utf8_lossy(&config.stdout);
    assert!(!config.contains(TOKEN) && !config.contains(BASIC) && !config.contains("extraheader"), "{config}");

    let other_branch = other.branch().to_owned();
    for args in [
        vec!["add", "new.txt"],
        vec!["commit", "-qam", "x"],
        vec!["branch", "mine"],
        vec!["update-ref", &format!("refs/heads/{other_branch}"), "HEAD"],
        vec!["update-ref", "refs/heads/main", "HEAD"],
        vec!["config", "core.hooksPath", "/tmp"],
        vec!["hash-object", "-w", "new.txt"],
        vec!["worktree", "add", "../evil"],
    ] {
        let out = as_agent(&args);
        assert!(!out.status.success(), "git {args:?} succeeded for the agent");
    }
    let hooks = clone.git_dir().join("hooks");
    let mkdir = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "mkdir"])
        .arg(&hooks)
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!mkdir.success() && !hooks.exists());
    assert_eq!(git(other.path(), &["rev-parse", "HEAD"]).trim(), fx.head());

    // The coordinator (root) commits a checkout owned by the agent's uid.
    let info = wt.commit_all_blocking("agent", &author()).unwrap().unwrap();
    assert_eq!(info.files.len(), 2);
    assert!(!fx.hook_ran());
}

/// A 0600 file outside the worktree, as an attacker's symlink would target.
fn victim(fx: &Fixture) -> (PathBuf, &'static str) {
    let path = fx.tmp.path().join("victim-secret");
    let text = "VICTIM-CONTENT-7f3a\n";
    write(&path, text);
    set_mode(&path, 0o600);
    (path, text)
}

#[test]
fn a_file_swapped_for_a_symlink_is_committed_as_the_link_never_its_target() {
    let fx = Fixture::new();
    let (victim, text) = victim(&fx);
    let clone = fx.clone("r20");
    let wt = clone.add_worktree_blocking("a").unwrap();
    // A tracked file, an untracked one and a directory, each replaced by a link outside.
    fs::remove_file(wt.path().join("a.txt")).unwrap();
    std::os::unix::fs::symlink(&victim, wt.path().join("a.txt")).unwrap();
    std::os::unix::fs::symlink(&victim, wt.path().join("new-link")).unwrap();
    fs::remove_dir_all(wt.path().join("src")).unwrap();
    std::os::unix::fs::symlink(fx.tmp.path(), wt.path().join("src")).unwrap();
    let info = wt.commit_all_blocking("agent", &author()).unwrap().unwrap();

    // The commit holds the links as links (mode 120000, the target path as content).
    let ls = git(&fx.run_dir.join("repo.git"), &["ls-tree", "-r", &info.commit]);
    assert!(ls.lines().any(|l| l.starts_with("120000 ") && l.ends_with("\ta.txt")), "{ls}");
    assert!(ls.lines().any(|l| l.starts_with("120000 ") && l.ends_with("\tnew-link")), "{ls}");
    assert!(ls.lines().any(|l| l.starts_with("120000 ") && l.ends_with("\tsrc")), "{ls}");
    // The victim's content is nowhere: not in the patch, not in the user's repository.
    let patch = wt.patch_blocking().unwrap();
    assert!(!String::from_utf8_lossy(&patch).contains(text.trim()), "{}", String::from_utf8_lossy(&patch));
    clone.fetch_into_user_blocking(&[wt.branch().to_owned()]).unwrap();
    for path in ["a.txt", "new-link"] {
        let shown = git(&fx.user, &["show", &format!("{}:{path}", wt.branch())]);
        assert_eq!(shown, victim.display().to_string());
    }
    let id = git(&fx.user, &["hash-object", &victim.display().to_string()]);
    assert!(git_cmd(&fx.user, &["cat-file", "-e", id.trim()]).output().unwrap().status.code() != Some(0));
    assert_eq!(fs::read_to_string(&victim).unwrap(), text);
}

#[test]
fn a_dot_git_symlink_is_replaced_and_its_target_left_unchanged() {
    let fx = Fixture::new();
    let (victim, text) = victim(&fx);
    let clone = fx.clone("r21");
    let wt = clone.add_worktree_blocking("a").unwrap();
    let dotgit = wt.path().join(".git");
    fs::remove_file(&dotgit).unwrap();
    std::os::unix::fs::symlink(&victim, &dotgit).unwrap();
    write(&wt.path().join("a.txt"), "changed\n");
    let info = wt.commit_all_blocking("agent", &author()).unwrap().unwrap();
    assert_eq!(fs::read_to_string(&victim).unwrap(), text);
    assert!(fs::symlink_metadata(&dotgit).unwrap().is_file());
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), info.commit);
}

#[test]
fn files_over_the_size_limit_are_left_out_and_listed() {
    let fx = Fixture::new();
    let clone = fx.clone("r22");
    let wt = clone.add_worktree_blocking("a").unwrap();
    write(&wt.path().join("big.bin"), vec![7u8; 3000]);
    write(&wt.path().join("a.txt"), vec![b'x'; 2000]); // tracked, grown over the limit
    write(&wt.path().join("small.txt"), "small\n");
    let info = wt.commit_limited_blocking("agent", &author(), 1024).unwrap().unwrap();
    let mut too_large = info.too_large.clone();
    too_large.sort();
    assert_eq!(too_large, [(PathBuf::from("a.txt"), 2000), (PathBuf::from("big.bin"), 3000)]);
    assert_eq!(info.files, [FileChange { path: "small.txt".into(), kind: ChangeKind::Added }]);
    let ls = git(&fx.run_dir.join("repo.git"), &["ls-tree", "-r", "--name-only", &info.commit]);
    assert!(!ls.lines().any(|l| l == "big.bin"), "{ls}");
    // The tracked file keeps its base content in the commit.
    assert_eq!(git(&fx.run_dir.join("repo.git"), &["show", &format!("{}:a.txt", info.commit)]), "one\ntwo\nthree\n");
}

#[test]
fn large_files_are_streamed_into_blobs() {
    let fx = Fixture::new();
    let clone = fx.clone("r23");
    let wt = clone.add_worktree_blocking("a").unwrap();
    // Over the whole-read size: takes the streaming path; content must round-trip.
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    write(&wt.path().join("large.bin"), &bytes);
    let info = wt.commit_all_blocking("agent", &author()).unwrap().unwrap();
    let id = git(&fx.run_dir.join("repo.git"), &["rev-parse", &format!("{}:large.bin", info.commit)]);
    let out = git_cmd(&fx.run_dir.join("repo.git"), &["cat-file", "blob", id.trim()]).output().unwrap();
    assert!(out.stdout == bytes, "the streamed blob differs from the file");
    // A kept worktree shows a clean status: the stat cache was written.
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
}

/// Issue 12, item 9: once agent `b`'s work is committed, agent `a`'s git (confined, as
/// the sandbox confines it, to `a`'s `git_paths`) cannot reach it by any name: not its
/// branch, not its commit, not its objects. The run clone has it, for integration.
#[test]
fn an_agent_cannot_read_another_agents_branch_or_objects() {
    let fx = Fixture::new();
    let clone = fx.clone("iso");
    let a = clone.add_worktree_blocking("a").unwrap();
    let b = clone.add_worktree_blocking("b").unwrap();
    const SECRET: &str = "b-secret-7f3a9c";
    write(&b.path().join("secret"), format!("{SECRET}\n"));
    let info = b.commit_all_blocking("b's work", &author()).unwrap().unwrap();
    let blob = git(&fx.run_dir.join("repo.git"), &["rev-parse", &format!("{}:secret", info.commit)]).trim().to_owned();
    assert_eq!(git(&fx.run_dir.join("repo.git"), &["cat-file", "blob", &blob]), format!("{SECRET}\n"));

    // What `a` may read does not include the run clone, `b`'s repository or checkout.
    let paths = a.git_paths();
    for other in [clone.git_dir(), b.repo_dir(), b.path()] {
        assert!(paths.read_only.iter().chain(&paths.writable).all(|p| !other.starts_with(p)), "{other:?} in {paths:?}");
    }
    // `a`'s git, as the agent runs it, in its checkout.
    let run = |args: &[&str]| {
        let out = git_cmd(a.path(), args).envs(a.git_paths().env).output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
        )
    };
    for args in [
        vec!["show", "orch/iso/b:secret"],
        vec!["show", &format!("{}:secret", info.commit)],
        vec!["cat-file", "-p", &blob],
    ] {
        let (ok, out) = run(&args);
        assert!(!ok && !out.contains(SECRET), "git {args:?} in a's worktree: {out}");
    }
    let (ok, out) = run(&["log", "--all", "--format=%H %s"]);
    assert!(ok && !out.contains(&info.commit) && !out.contains("b's work"), "{out}");
    let (ok, out) = run(&["cat-file", "--batch-all-objects", "--batch-check"]);
    assert!(ok && !out.contains(&blob) && !out.contains(&info.commit), "{out}");
    let (ok, out) = run(&["for-each-ref"]);
    assert!(ok && !out.contains("orch/iso/b"), "{out}");

    // `a`'s own commit still works and reaches the run clone next to b's.
    write(&a.path().join("mine"), "a\n");
    let mine = a.commit_all_blocking("a's work", &author()).unwrap().unwrap();
    assert_eq!(git(&fx.run_dir.join("repo.git"), &["show", "orch/iso/a:mine"]), "a\n");
    assert_eq!(git(&fx.run_dir.join("repo.git"), &["rev-parse", "orch/iso/a"]).trim(), mine.commit);
    let (ok, out) = run(&["cat-file", "--batch-all-objects", "--batch-check"]);
    assert!(ok && !out.contains(&blob), "{out}");
}

#[test]
fn an_agents_repository_is_lean_and_an_unchanged_index_is_left_as_it_is() {
    use std::os::unix::fs::MetadataExt;
    let fx = Fixture::new();
    let clone = fx.clone("r9");
    let wt = clone.add_worktree_blocking("lean").unwrap();
    // What the agent's repository holds: the files git needs, its branch in packed-refs.
    let mut entries: Vec<String> = walkdir(wt.repo_dir());
    entries.retain(|e| !e.starts_with("worktrees/"));
    assert_eq!(
        entries,
        ["HEAD", "config", "objects", "objects/info", "objects/info/alternates", "packed-refs", "refs", "worktrees"]
    );
    let packed = fs::read_to_string(wt.repo_dir().join("packed-refs")).unwrap();
    assert!(packed.ends_with(&format!("{} refs/heads/{}\n", fx.head(), wt.branch())), "{packed}");
    // The agent's git reads the branch from there.
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), fx.head());
    assert_eq!(git(wt.path(), &["symbolic-ref", "HEAD"]).trim(), format!("refs/heads/{}", wt.branch()));
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");

    // Nothing changed: no commit, and the index is the same file as before.
    let index = wt.admin_dir().join("index");
    let before = fs::metadata(&index).unwrap();
    assert_eq!(wt.commit_all_blocking("nothing", &author()).unwrap(), None);
    let after = fs::metadata(&index).unwrap();
    assert_eq!((after.ino(), after.mtime(), after.mtime_nsec()), (before.ino(), before.mtime(), before.mtime_nsec()));

    // A change is committed: the loose ref moves past the packed one and the index is
    // written again, so that the kept worktree shows a clean status.
    write(&wt.path().join("a.txt"), "changed\n");
    let info = wt.commit_all_blocking("agent: edit", &author()).unwrap().unwrap();
    assert_ne!(fs::metadata(&index).unwrap().ino(), before.ino());
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), info.commit);
    assert_eq!(git(wt.path(), &["status", "--porcelain"]), "");
    assert_eq!(git(clone.git_dir(), &["rev-parse", wt.branch()]).trim(), info.commit);
    // A second, empty commit attempt leaves the branch where it is.
    assert_eq!(wt.commit_all_blocking("nothing more", &author()).unwrap(), None);
    assert_eq!(git(wt.path(), &["rev-parse", "HEAD"]).trim(), info.commit);
}

/// Every path under `dir`, relative and sorted.
fn walkdir(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_stage_that_builds_on_another_does_not_overlap_it() {
    let changed: Vec<(String, Vec<PathBuf>)> = [("fix", &["f", "g"][..]), ("test", &["f"]), ("docs", &["f", "g"])]
        .iter()
        .map(|(id, paths)| (id.to_string(), paths.iter().map(PathBuf::from).collect()))
        .collect();
    // A pipeline: test builds on fix, docs on test (and so on fix).
    let chain = |a: &str, b: &str| matches!((a, b), ("test", "fix") | ("docs", "test") | ("docs", "fix"));
    assert!(overlaps(&changed, chain).is_empty());
    // docs on its own: it conflicts with both.
    let alone = |a: &str, b: &str| (a, b) == ("test", "fix");
    assert_eq!(
        overlaps(&changed, alone),
        [
            (PathBuf::from("f"), vec!["fix".to_owned(), "test".to_owned(), "docs".to_owned()]),
            (PathBuf::from("g"), vec!["fix".to_owned(), "docs".to_owned()])
        ]
    );
}

#[test]
fn lineage_follows_the_history_from_a_start_to_a_needed_commit() {
    let fx = Fixture::new();
    let repo = git2::Repository::open(&fx.user).unwrap();
    let base = repo.head().unwrap().peel_to_commit().unwrap();
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    let tree = base.tree().unwrap();
    let first = repo.commit(None, &sig, &sig, "first", &tree, &[&base]).unwrap();
    let second = repo.commit(None, &sig, &sig, "second", &tree, &[&repo.find_commit(first).unwrap()]).unwrap();
    let (first, second) = (first.to_string(), second.to_string());
    let agents = [
        ("a", None, Some(first.as_str())),
        ("b", Some(first.as_str()), Some(second.as_str())),
        ("c", Some(second.as_str()), None),
        ("d", None, Some(second.as_str())),
    ];
    let lineage = Lineage::new(Some(repo.path()), agents);
    assert!(lineage.builds_on("b", "a"), "a start that is the needed commit");
    assert!(lineage.builds_on("c", "a"), "through the history");
    assert!(!lineage.builds_on("a", "b") && !lineage.builds_on("d", "a") && !lineage.builds_on("a", "d"));
    // Without the repository only a start that is the commit itself counts.
    let bare = Lineage::new(None, agents);
    assert!(bare.builds_on("b", "a") && !bare.builds_on("c", "a"));
}
