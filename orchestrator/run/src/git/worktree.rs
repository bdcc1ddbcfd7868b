//! An agent's worktree and its own repository: what its sandbox may read and write,
//! committing its changes on its branch (then copying the branch into the run clone),
//! the changed files and the patch, and removal.
//!
//! Each agent's checkout is a linked worktree of a repository made for that agent alone
//! (`<run_dir>/repos/<name>.git`): it borrows the user's store, like the run clone, but
//! holds only the agent's own branch and commits. The sandbox exposes that repository
//! and never the run clone, where every agent's branch ends up, so an agent cannot read
//! another's work, however it asks git.
//!
//! The coordinator never opens the worktree through its checkout: the `.git` file there
//! is writable by the agent and could point anywhere (or be replaced by a directory with
//! its own config). It opens the agent's repository, sets the checkout as the working
//! directory and uses the index in the worktree's admin dir, all from its own records.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{Delta, DiffFormat, DiffOptions, Index, IndexEntry, Oid, Repository, RepositoryOpenFlags};

use super::capture::{self, DEFAULT_MAX_FILE_SIZE};
use super::clone::{RunClone, remove_all, write_new};
use super::{Author, Context as _, Result, blocking, io_err};

/// One agent's worktree: a linked worktree of the agent's own repository. Holds paths
/// only; `Send + Sync`.
#[derive(Debug, Clone)]
pub struct Worktree {
    clone: RunClone,
    agent_id: String,
    name: String,
    branch: String,
    checkout: PathBuf,
    /// The agent's repository, `<run_dir>/repos/<name>.git`.
    repo: PathBuf,
    /// Its admin dir, `<repo>/worktrees/<name>`.
    admin: PathBuf,
    /// What its changes are measured against: the run's base, or with `base: needs`
    /// the merge of what it needs (then its patch holds only its own work).
    start: Oid,
}

/// The file of an agent's admin dir that lists its masked paths (NUL-separated,
/// relative to the checkout); see [`Worktree::keep_masked`].
const MASKED_FILE: &str = "orch-masked";

/// `GIT_INDEX_ENTRY_SKIP_WORKTREE`, in an index entry's extended flags.
const SKIP_WORKTREE: u16 = 1 << 14;

/// The mode of a gitlink (a submodule's commit) in a tree or an index.
const MODE_GITLINK: i32 = 0o160000;

/// `path` with the characters libgit2's pathspec treats as a pattern escaped.
fn escape_glob(path: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len());
    for &b in path {
        if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
            out.push(b'\\');
        }
        out.push(b);
    }
    out
}

/// The ref of an agent's repository that records its start when it is not the run's
/// base (`base: needs`), so a reopened worktree measures its changes the same way.
const START_REF: &str = "refs/orch/start";

/// What an agent's sandbox must expose for git to work read-only in its worktree.
///
/// Verified with git 2.47 under a uid without write access to `read_only`: `git status`,
/// `git diff` and `git log` work; `git add`, `git commit`, `git branch`, `git config`
/// fail (index.lock, refs, config: permission denied). `git status` tolerates the
/// read-only index (it skips refreshing it); `GIT_OPTIONAL_LOCKS=0` makes it not even
/// try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPaths {
    /// Readable, never writable: the agent's own repository (config, its branch, its
    /// objects, the worktree's admin dir `worktrees/<name>` with its HEAD and index) and
    /// the user's object store with every store it borrows from. Not the run clone (it
    /// holds the other agents' branches), not another agent's repository, and not the
    /// user's `.git` directory itself: its config holds the credentials.
    pub read_only: Vec<PathBuf>,
    /// Writable: the checkout only.
    pub writable: Vec<PathBuf>,
    /// Environment for every git the agent runs:
    /// - `GIT_OPTIONAL_LOCKS=0`: `git status` does not try to refresh the index;
    /// - `GIT_CONFIG_NOSYSTEM=1`: no `/etc/gitconfig`;
    /// - `GIT_CEILING_DIRECTORIES`: discovery never leaves the checkout (if the agent
    ///   deletes its `.git` file, git must not find a repository above it);
    /// - `safe.directory=<checkout>` (as `GIT_CONFIG_COUNT/KEY_0/VALUE_0`, the
    ///   command-line scope git honours for it): when the tool host runs under another
    ///   uid than the one owning the git directories, git would otherwise refuse the
    ///   repository as of dubious ownership.
    pub env: Vec<(String, String)>,
}

/// A commit made by [`Worktree::commit_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// The commit (hex).
    pub commit: String,
    /// The branch it is on, without `refs/heads/`.
    pub branch: String,
    /// Files that differ between the base and this commit.
    pub files: Vec<FileChange>,
    /// Nested repositories (directories with their own `.git`, e.g. from `git init`)
    /// that were left out of the commit, relative to the checkout.
    pub skipped: Vec<PathBuf>,
    /// Files over the size limit that were left out of the commit, relative to the
    /// checkout, with their size in bytes.
    pub too_large: Vec<(PathBuf, u64)>,
}

/// A file that differs between the base and an agent's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Path relative to the repository root.
    pub path: PathBuf,
    pub kind: ChangeKind,
}

/// How a file changed (renames show as a deletion and an addition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    /// File to symlink, or the reverse.
    TypeChanged,
}

impl Worktree {
    pub(super) fn new(
        clone: RunClone,
        agent_id: String,
        name: String,
        branch: String,
        checkout: PathBuf,
        repo: PathBuf,
    ) -> Self {
        let admin = repo.join("worktrees").join(&name);
        let start = clone.inner.base;
        Self { clone, agent_id, name, branch, checkout, repo, admin, start }
    }

    /// This worktree, its changes measured against `start` instead of the run's base.
    pub(super) fn starting_at(mut self, start: Oid) -> Self {
        self.start = start;
        self
    }

    /// A reopened worktree with the start its repository recorded (the run's base when
    /// none was).
    pub(super) fn with_recorded_start(self) -> Self {
        let recorded = self.open_repo().ok().and_then(|r| r.refname_to_id(START_REF).ok());
        match recorded {
            Some(start) => self.starting_at(start),
            None => self,
        }
    }

    /// The commit its changes, patch and file list are measured against: the run's
    /// base, or (`base: needs`) the merge of the branches it needs.
    pub fn start(&self) -> Oid {
        self.start
    }

    /// The agent id this worktree was made for.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    /// The worktree's name: the agent id made safe ([`super::safe_name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The branch, without `refs/heads/`: `orch/<run>/<name>`.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The checkout, `<run_dir>/worktrees/<name>`: the agent's working directory.
    pub fn path(&self) -> &Path {
        &self.checkout
    }

    /// The worktree's admin dir, `<run_dir>/repos/<name>.git/worktrees/<name>`.
    pub fn admin_dir(&self) -> &Path {
        &self.admin
    }

    /// The agent's own repository, `<run_dir>/repos/<name>.git`.
    pub fn repo_dir(&self) -> &Path {
        &self.repo
    }

    /// The git snapshot of this worktree as it was made: on its branch, clean, at the
    /// branch's tip ([`super::snapshot::clean_snapshot`], no status walk). Call it right
    /// after [`RunClone::add_worktree`] or its kin, before anything ran in the checkout;
    /// a reopened worktree may hold changes, and [`super::snapshot`] reads those.
    pub async fn fresh_snapshot(&self) -> Result<orch_agents::prompt::GitSnapshot> {
        let this = self.clone();
        blocking("read a new worktree's commits", move || {
            let repo = this.open_repo()?;
            let tip = repo.refname_to_id(&this.refname()).git(|| format!("find the branch {}", this.branch))?;
            Ok(super::snapshot::clean_snapshot(&repo, &this.branch, tip))
        })
        .await
    }

    /// The paths and environment the agent's sandbox needs for read-only git.
    pub fn git_paths(&self) -> GitPaths {
        let inner = &self.clone.inner;
        let mut read_only = vec![self.repo.clone(), inner.user_objects.clone()];
        read_only.extend(inner.borrowed.iter().cloned());
        let env = [
            ("GIT_OPTIONAL_LOCKS", "0".to_owned()),
            ("GIT_CONFIG_NOSYSTEM", "1".to_owned()),
            ("GIT_CEILING_DIRECTORIES", inner.checkouts.display().to_string()),
            ("GIT_CONFIG_COUNT", "1".to_owned()),
            ("GIT_CONFIG_KEY_0", "safe.directory".to_owned()),
            ("GIT_CONFIG_VALUE_0", self.checkout.display().to_string()),
        ];
        GitPaths {
            read_only,
            writable: vec![self.checkout.clone()],
            env: env.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
        }
    }

    /// Stages every change in the checkout (additions, modifications, deletions; files
    /// matched by `.gitignore` stay out unless already tracked) and commits it on the
    /// agent's branch. `None` when nothing changed.
    pub async fn commit_all(&self, message: &str, author: &Author) -> Result<Option<CommitInfo>> {
        let (this, message, author) = (self.clone(), message.to_owned(), author.clone());
        blocking("commit an agent's changes", move || this.commit_all_blocking(&message, &author)).await
    }

    /// [`Worktree::commit_all`] with the limit on file size of the workflow.
    pub async fn commit_all_limited(
        &self,
        message: &str,
        author: &Author,
        max_file_size: u64,
    ) -> Result<Option<CommitInfo>> {
        let (this, message, author) = (self.clone(), message.to_owned(), author.clone());
        blocking("commit an agent's changes", move || this.commit_limited_blocking(&message, &author, max_file_size))
            .await
    }

    /// [`Worktree::commit_all`], on the calling thread.
    pub fn commit_all_blocking(&self, message: &str, author: &Author) -> Result<Option<CommitInfo>> {
        self.commit_limited_blocking(message, author, DEFAULT_MAX_FILE_SIZE)
    }

    /// [`Worktree::commit_all_limited`], on the calling thread.
    ///
    /// Reads the checkout only through descriptors, never following a link the agent made
    /// (see [`super::capture`]): a file swapped for a symlink to a file outside is
    /// committed as that symlink, never as the file's content.
    pub fn commit_limited_blocking(
        &self,
        message: &str,
        author: &Author,
        max_file_size: u64,
    ) -> Result<Option<CommitInfo>> {
        self.restore_gitlink()?;
        let (repo, mut index) = self.open()?;
        let filters = self.clone.base_has_attributes(&repo)?;
        let before: Vec<IndexEntry> = index.iter().collect();
        let left = capture::capture(&repo, &mut index, &self.checkout, max_file_size, filters)?;
        // Whatever the checkout shows there (a mask's empty mount, a change), the masked
        // paths are committed as the start has them.
        let masked = self.masked()?;
        if !masked.is_empty() {
            self.masked_from_start(&repo, &mut index, &masked)?;
        }
        let skipped = left.nested;
        if !skipped.is_empty() {
            tracing::warn!(worktree = %self.checkout.display(), ?skipped, "left nested repositories out of the commit");
        }
        let too_large = left.too_large;
        let tree = index.write_tree().git(|| format!("write the tree of {}", self.checkout.display()))?;
        // Keep the refreshed stat cache: a kept worktree then shows a clean status. An
        // index that did not change is not written again (a new file each time).
        if !same_entries(&before, &index) {
            index.write().git(|| format!("write the index of {}", self.checkout.display()))?;
        }
        let refname = self.refname();
        let parent = repo
            .find_reference(&refname)
            .and_then(|r| r.peel_to_commit())
            .git(|| format!("find the branch {}", self.branch))?;
        if parent.tree_id() == tree {
            // An earlier commit may not have reached the run clone (a run killed in
            // between): `orch recover` comes here and copies it.
            self.publish(&repo)?;
            if !too_large.is_empty() {
                tracing::warn!(worktree = %self.checkout.display(), ?too_large, "left files over the size limit out");
            }
            return Ok(None);
        }
        let tree = repo.find_tree(tree).git(|| "read the new tree".into())?;
        let signature = author.signature()?;
        let commit = repo
            .commit(Some(&refname), &signature, &signature, message, &tree, &[&parent])
            .git(|| format!("commit on {}", self.branch))?;
        self.publish(&repo)?;
        let files = self.changes(&self.clone.inner.open()?)?;
        Ok(Some(CommitInfo { commit: commit.to_string(), branch: self.branch.clone(), files, skipped, too_large }))
    }

    /// Keeps `masked` (paths in the checkout that the agent's sandbox hides, see
    /// `crate::masks`) as the start has them: recorded in the admin dir, where every
    /// later commit reads them (recovery's too), and marked skip-worktree in the
    /// worktree's index, so the agent's git shows them unchanged, not deleted, and
    /// `git add -A` leaves them alone. The agent cannot write either file.
    pub async fn keep_masked(&self, masked: &[PathBuf]) -> Result<()> {
        let rel: Vec<Vec<u8>> = masked
            .iter()
            .filter_map(|p| p.strip_prefix(&self.checkout).ok())
            .map(|p| p.as_os_str().as_bytes().to_vec())
            .filter(|p| !p.is_empty())
            .collect();
        if rel.is_empty() {
            return Ok(());
        }
        let this = self.clone();
        blocking("mark the masked paths", move || {
            let list = this.admin.join(MASKED_FILE);
            fs::write(&list, rel.join(&0u8)).map_err(io_err("write", &list))?;
            let (repo, mut index) = this.open()?;
            this.masked_from_start(&repo, &mut index, &rel)?;
            index.write().git(|| format!("write the index of {}", this.checkout.display()))
        })
        .await
    }

    /// The masked paths recorded by [`Worktree::keep_masked`] (none if there are none).
    fn masked(&self) -> Result<Vec<Vec<u8>>> {
        let list = self.admin.join(MASKED_FILE);
        match fs::read(&list) {
            Ok(bytes) => Ok(bytes.split(|b| *b == 0).filter(|p| !p.is_empty()).map(<[u8]>::to_vec).collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(io_err("read", list)(e)),
        }
    }

    /// Replaces whatever `index` holds at or under each of `masked` with the start's
    /// entries there, marked skip-worktree.
    fn masked_from_start(&self, repo: &Repository, index: &mut Index, masked: &[Vec<u8>]) -> Result<()> {
        let under = |path: &[u8], root: &[u8]| {
            path == root || (path.len() > root.len() && path.starts_with(root) && path[root.len()] == b'/')
        };
        let stale: Vec<Vec<u8>> = index.iter().map(|e| e.path).filter(|p| masked.iter().any(|m| under(p, m))).collect();
        for path in stale {
            index
                .remove_path(Path::new(std::ffi::OsStr::from_bytes(&path)))
                .git(|| "drop a masked path from the index".into())?;
        }
        let start = repo.find_commit(self.start).and_then(|c| c.tree()).git(|| "read the start tree".into())?;
        let mut entries = Vec::new();
        for root in masked {
            let Ok(found) = start.get_path(Path::new(std::ffi::OsStr::from_bytes(root))) else { continue };
            if found.kind() == Some(git2::ObjectType::Tree) {
                let subtree = repo.find_tree(found.id()).git(|| "read a masked directory".into())?;
                subtree
                    .walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
                        if entry.kind() != Some(git2::ObjectType::Tree) {
                            let mut path = root.clone();
                            path.push(b'/');
                            path.extend_from_slice(dir.as_bytes());
                            path.extend_from_slice(entry.name_bytes());
                            entries.push((path, entry.filemode(), entry.id()));
                        }
                        git2::TreeWalkResult::Ok
                    })
                    .git(|| "list a masked directory".into())?;
            } else {
                entries.push((root.clone(), found.filemode(), found.id()));
            }
        }
        for (path, mode, id) in entries {
            let entry = IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: mode as u32,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: 0,
                flags_extended: SKIP_WORKTREE,
                path,
            };
            index.add(&entry).git(|| "keep a masked path as the start has it".into())?;
        }
        Ok(())
    }

    /// Files that differ between the base and the branch (what was committed).
    pub async fn changed_files(&self) -> Result<Vec<FileChange>> {
        let this = self.clone();
        blocking("list changed files", move || this.changed_files_blocking()).await
    }

    /// [`Worktree::changed_files`], on the calling thread.
    pub fn changed_files_blocking(&self) -> Result<Vec<FileChange>> {
        self.changes(&self.clone.inner.open()?)
    }

    /// The unified diff (`git diff --binary` style, appliable with `git apply`) of the
    /// branch against the base. Bytes, since files need not be UTF-8.
    pub async fn patch(&self) -> Result<Vec<u8>> {
        let this = self.clone();
        blocking("make a patch", move || this.patch_blocking()).await
    }

    /// [`Worktree::patch`], on the calling thread.
    pub fn patch_blocking(&self) -> Result<Vec<u8>> {
        let repo = self.clone.inner.open()?;
        let diff = self.diff(&repo)?;
        let mut out = Vec::new();
        diff.print(DiffFormat::Patch, |_, _, line| {
            if matches!(line.origin(), '+' | '-' | ' ') {
                out.push(line.origin() as u8);
            }
            out.extend_from_slice(line.content());
            true
        })
        .git(|| format!("print the patch of {}", self.branch))?;
        Ok(out)
    }

    /// Deletes the checkout and the agent's repository. Not calling this keeps the
    /// worktree (`--keep-worktrees`, or a failed agent) and then the run clone too. The
    /// branch stays in the run clone until it is removed (merges and fetches need it).
    pub async fn remove(self) -> Result<()> {
        blocking("remove a worktree", move || self.remove_blocking()).await
    }

    /// [`Worktree::remove`], on the calling thread.
    pub fn remove_blocking(self) -> Result<()> {
        remove_all(&self.checkout)?;
        remove_all(&self.repo)
    }

    /// Makes the agent's repository, its branch there at `start` (a commit the run
    /// clone can read: the base, or an earlier run's work fetched into the user's
    /// repository), and the checkout of it.
    pub(super) fn create(&self, start: Oid) -> Result<()> {
        let inner = &self.clone.inner;
        let shallow = match fs::read(inner.git_dir.join("shallow")) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io_err("read", inner.git_dir.join("shallow"))(e)),
        };
        inner.write_repo(&self.repo, shallow.as_deref(), Some((&self.branch, start)))?;
        let mut repo = self.open_repo()?;
        if repo.find_commit(start).is_err() {
            // `base: needs`: the merge of the needed branches lives in the run clone only.
            // A lean repository has no `objects/pack`; libgit2 looks for packs only in a
            // directory that existed when the repository was opened, so make it first.
            let packs = self.repo.join("objects").join("pack");
            fs::create_dir_all(&packs).map_err(io_err("create", packs))?;
            repo = self.open_repo()?;
            let run = inner.open()?;
            super::transfer::copy_objects(&run, &repo, start, &[inner.base], "the branches it needs")?;
        }
        if self.start != inner.base {
            repo.reference(START_REF, self.start, true, "orch: where this agent's work starts")
                .git(|| format!("record the start of {}", self.branch))?;
        }
        let start = repo.find_commit(start).git(|| "find the start commit through the user's store".into())?;
        self.link_and_checkout(&repo, &start)
    }

    /// Copies the agent's branch into the run clone: the objects the run clone lacks,
    /// then the ref. The run clone is where merges, patches and fetches read it; the
    /// agent's repository goes with its worktree.
    fn publish(&self, repo: &Repository) -> Result<()> {
        let refname = self.refname();
        let tip = repo
            .refname_to_id(&refname)
            .git(|| format!("find the branch {} in {}", self.branch, self.repo.display()))?;
        let run = self.clone.inner.open()?;
        let old = run.refname_to_id(&refname).ok();
        if old == Some(tip) {
            return Ok(());
        }
        let mut hide = vec![self.clone.inner.base, self.start];
        hide.extend(old);
        super::transfer::copy_objects(repo, &run, tip, &hide, &self.branch)?;
        run.reference(&refname, tip, true, "orch: the agent's work, committed by the coordinator")
            .git(|| format!("move the branch {} of the run clone", self.branch))?;
        Ok(())
    }

    /// Makes this worktree exist: the admin dir, the checkout's `.git` file, then a
    /// checkout of `base` into the empty checkout, writing the admin dir's index.
    ///
    /// This is what `git worktree add` and libgit2's `git_worktree_add` write (same files,
    /// same format, so `git worktree list`, `status` and `prune` work), done by hand
    /// because `git_worktree_add` is not safe to run in parallel: it checks that the
    /// branch is not checked out elsewhere by opening every sibling worktree, and libgit2
    /// 1.9 turns any failure to open one (a sibling being created at that moment) into
    /// "already checked out" (an operator precedence slip in
    /// `git_repository_foreach_worktree`): 6 of 15 runs of the 32-worktree test failed.
    /// Our branches are fresh, so the check is moot; each call only touches its own
    /// paths, and `HEAD` is written last, so a half-made admin dir is never listed.
    pub(super) fn link_and_checkout(&self, repo: &Repository, base: &git2::Commit<'_>) -> Result<()> {
        fs::create_dir(&self.admin).map_err(io_err("create", &self.admin))?;
        fs::create_dir(&self.checkout).map_err(io_err("create", &self.checkout))?;
        let dotgit = self.checkout.join(".git");
        write_new(&dotgit, format!("gitdir: {}\n", self.admin.display()).as_bytes())?;
        write_new(&self.admin.join("commondir"), b"../..\n")?;
        write_new(&self.admin.join("gitdir"), format!("{}\n", dotgit.display()).as_bytes())?;
        write_new(&self.admin.join("HEAD"), format!("ref: {}\n", self.refname()).as_bytes())?;

        repo.set_workdir(&self.checkout, false).git(|| format!("use {} as a working tree", self.checkout.display()))?;
        let path = self.admin.join("index");
        let mut index = Index::open(&path).git(|| format!("create the index {}", path.display()))?;
        repo.set_index(&mut index).git(|| format!("use the index {}", path.display()))?;
        let tree = base.tree().git(|| "read the base tree".into())?;
        let mut checkout = CheckoutBuilder::new();
        // The checkout is empty: `force` writes every file without comparing against a
        // baseline (the run clone's HEAD is the base, so `safe` would think the missing
        // files were deleted on purpose).
        checkout.force();
        // Filters (eol conversion, `ident`) come only from `.gitattributes` here:
        // `core.autocrlf` is pinned off and the run clone has no `info/attributes`. Without
        // such a file, skip them: looking up the attributes of each file costs two
        // `realpath`s of its whole path, a third of the checkout (see BENCHMARKS.md).
        let filters = self.clone.base_has_attributes(repo)?;
        checkout.disable_filters(!filters);
        match repo.checkout_tree(tree.as_object(), Some(&mut checkout)) {
            // A `.gitmodules` libgit2 refuses (an `update = !command`, which it never
            // runs, or any other value it cannot parse) fails the checkout of every
            // submodule: check out the rest, and record the submodules as git does
            // for one not initialised (its commit in the index, an empty directory).
            // Data in the repository never stops an agent from starting.
            Err(e) if e.class() == git2::ErrorClass::Submodule => {
                tracing::debug!(checkout = %self.checkout.display(), "checking out around the submodules: {e}");
                self.checkout_around_submodules(repo, &tree, &mut index, filters)
            }
            other => other.git(|| format!("check out the base into {}", self.checkout.display())),
        }
    }

    /// The checkout of `tree` without looking its submodules up: every other path
    /// through libgit2, then each gitlink as an empty directory and an index entry.
    fn checkout_around_submodules(
        &self,
        repo: &Repository,
        tree: &git2::Tree<'_>,
        index: &mut Index,
        filters: bool,
    ) -> Result<()> {
        let mut gitlinks = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.filemode() == MODE_GITLINK {
                gitlinks.push((format!("{dir}{}", entry.name().unwrap_or_default()).into_bytes(), entry.id()));
            }
            git2::TreeWalkResult::Ok
        })
        .git(|| "list the submodules of the base".into())?;
        let mut checkout = CheckoutBuilder::new();
        checkout.force().disable_filters(!filters);
        // Negative patterns first: libgit2 takes the first pattern that matches.
        for (path, _) in &gitlinks {
            let mut spec = b"!".to_vec();
            spec.extend(escape_glob(path));
            checkout.path(spec);
        }
        checkout.path("*");
        repo.checkout_tree(tree.as_object(), Some(&mut checkout))
            .git(|| format!("check out the base into {}", self.checkout.display()))?;
        index.read(true).git(|| "read the index back".into())?;
        for (path, id) in gitlinks {
            let dir = self.checkout.join(std::ffi::OsStr::from_bytes(&path));
            fs::create_dir_all(&dir).map_err(io_err("create", &dir))?;
            let entry = IndexEntry {
                ctime: git2::IndexTime::new(0, 0),
                mtime: git2::IndexTime::new(0, 0),
                dev: 0,
                ino: 0,
                mode: MODE_GITLINK as u32,
                uid: 0,
                gid: 0,
                file_size: 0,
                id,
                flags: 0,
                flags_extended: 0,
                path,
            };
            index.add(&entry).git(|| "record a submodule in the index".into())?;
        }
        index.write().git(|| format!("write the index of {}", self.checkout.display()))
    }

    fn refname(&self) -> String {
        format!("refs/heads/{}", self.branch)
    }

    /// The agent's repository, found from our own records.
    fn open_repo(&self) -> Result<Repository> {
        Repository::open_ext(
            &self.repo,
            RepositoryOpenFlags::NO_SEARCH | RepositoryOpenFlags::BARE,
            [&self.clone.inner.run_dir],
        )
        .git(|| format!("open the agent's repository {}", self.repo.display()))
    }

    /// The agent's repository with this checkout as its working directory and this
    /// worktree's index, found from our own records, not from the checkout's `.git` file.
    fn open(&self) -> Result<(Repository, Index)> {
        let repo = self.open_repo()?;
        repo.set_workdir(&self.checkout, false).git(|| format!("use {} as a working tree", self.checkout.display()))?;
        let path = self.admin.join("index");
        let mut index = Index::open(&path).git(|| format!("open the index {}", path.display()))?;
        repo.set_index(&mut index).git(|| format!("use the index {}", path.display()))?;
        Ok((repo, index))
    }

    /// Puts back the checkout's `.git` file if the agent changed it, so that whoever runs
    /// git in a kept worktree gets our repository and not a planted config or hooks.
    fn restore_gitlink(&self) -> Result<()> {
        if capture::restore_gitlink(&self.checkout, &self.admin)? {
            tracing::warn!(worktree = %self.checkout.display(), "the agent changed its .git; restored it");
        }
        Ok(())
    }

    fn diff<'r>(&self, repo: &'r Repository) -> Result<git2::Diff<'r>> {
        let base = repo.find_commit(self.start).and_then(|c| c.tree()).git(|| "read the base tree".to_owned())?;
        let tip = repo
            .find_reference(&self.refname())
            .and_then(|r| r.peel_to_tree())
            .git(|| format!("read the tree of {}", self.branch))?;
        let mut options = DiffOptions::new();
        options.show_binary(true);
        repo.diff_tree_to_tree(Some(&base), Some(&tip), Some(&mut options))
            .git(|| format!("diff {} against the base", self.branch))
    }

    fn changes(&self, repo: &Repository) -> Result<Vec<FileChange>> {
        Ok(file_changes(&self.diff(repo)?))
    }
}

/// The files a diff of two trees changes.
pub(super) fn file_changes(diff: &git2::Diff<'_>) -> Vec<FileChange> {
    let mut files = Vec::new();
    for delta in diff.deltas() {
        let (file, kind) = match delta.status() {
            Delta::Added => (delta.new_file(), ChangeKind::Added),
            Delta::Deleted => (delta.old_file(), ChangeKind::Deleted),
            Delta::Typechange => (delta.new_file(), ChangeKind::TypeChanged),
            _ => (delta.new_file(), ChangeKind::Modified),
        };
        if let Some(path) = file.path() {
            files.push(FileChange { path: path.to_owned(), kind });
        }
    }
    files
}

/// Whether `index` holds the entries of `before`, with the same content, mode and stat
/// data, in the same order. Not the device: libgit2's checkout records 0 there and
/// [`capture`] the real one, and neither git nor libgit2 compares it.
fn same_entries(before: &[IndexEntry], index: &Index) -> bool {
    before.len() == index.len()
        && before.iter().zip(index.iter()).all(|(a, b)| {
            (&a.path, a.id, a.mode, a.file_size, a.mtime, a.ctime, a.ino, a.uid, a.gid)
                == (&b.path, b.id, b.mode, b.file_size, b.mtime, b.ctime, b.ino, b.uid, b.gid)
        })
}
