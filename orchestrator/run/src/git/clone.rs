//! The run clone: a bare repository under the run directory that borrows the user's
//! objects through `objects/info/alternates`, has a clean config and no hooks, and
//! receives every agent's branch once the coordinator has committed it. Each agent works
//! in a repository of its own (same layout, holding only the base and its own commits),
//! so no agent can read another's branch. Results leave the run clone only through
//! [`RunClone::fetch_into_user`], which copies the new objects into the user's store and
//! creates `orch/...` branches there without touching anything else.

use std::ffi::OsStr;
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use git2::{Oid, Repository, RepositoryOpenFlags};

use super::names::{safe_name, validate_run_id};
use super::worktree::Worktree;
use super::{Context as _, GitError, Result, blocking, io_err};

/// The config of every run clone. Nothing comes from the user's config: checkout
/// actions store tokens there (`http.<url>.extraheader`, credentials in remote URLs),
/// and `include`, `core.hooksPath` or `core.fsmonitor` would run or read things we do
/// not control. `autocrlf`/`symlinks` are pinned so that the coordinator's global
/// config cannot make libgit2 check files out differently from what the agent's `git`
/// (which does not see that global config) expects. `gc.auto = 0`: a repository that
/// borrows objects must never prune or repack on its own.
const CONFIG: &str = "\
[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = true
\tsymlinks = true
\tautocrlf = false
\tlogallrefupdates = false
[gc]
\tauto = 0
";

/// Name of the run clone's git directory under the run directory.
pub const CLONE_DIR: &str = "repo.git";
/// Name of the directory holding the agents' checkouts under the run directory.
pub const CHECKOUTS_DIR: &str = "worktrees";
/// Name of the directory holding the agents' own repositories (`<name>.git`) under the
/// run directory.
pub const REPOS_DIR: &str = "repos";
/// Deepest chain of alternates followed (git's own limit).
const MAX_ALTERNATE_DEPTH: usize = 5;

/// A run's private clone of the user's repository. Cheap to clone and `Send + Sync`: it
/// holds paths, never a libgit2 handle; each operation opens its own.
#[derive(Debug, Clone)]
pub struct RunClone {
    pub(super) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(super) struct Inner {
    pub(super) run_id: String,
    pub(super) run_dir: PathBuf,
    /// `<run_dir>/repo.git`, canonical.
    pub(super) git_dir: PathBuf,
    /// `<run_dir>/worktrees`, canonical.
    pub(super) checkouts: PathBuf,
    /// `<run_dir>/repos`, canonical: one repository per agent.
    pub(super) repos: PathBuf,
    /// The user's git directory (`.git`, or the repository itself when bare).
    pub(super) user_git_dir: PathBuf,
    /// The user's object store, canonical.
    pub(super) user_objects: PathBuf,
    /// Stores the user's store borrows from (its alternates, recursively), canonical.
    pub(super) borrowed: Vec<PathBuf>,
    pub(super) base: Oid,
    /// Serializes writes into the user's repository.
    pub(super) fetch_lock: Mutex<()>,
    /// Whether the base tree has a `.gitattributes` anywhere (computed once).
    pub(super) has_attributes: OnceLock<bool>,
}

/// A branch fetched into the user's repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// Branch name without `refs/heads/`, e.g. `orch/<run>/<agent>`.
    pub branch: String,
    /// Commit the branch points to (hex).
    pub commit: String,
    /// Objects copied into the user's store (0 when it had them all).
    pub objects: usize,
}

/// What [`RunClone::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The run clone and the checkouts directory are gone.
    Removed,
    /// Kept because these worktrees (kept on purpose) still need it.
    Kept { worktrees: Vec<PathBuf> },
}

impl RunClone {
    /// Makes the run clone `<run_dir>/repo.git` of the repository containing `user_repo`,
    /// at the commit `base_ref` names (branch, tag, `HEAD`, sha or any revision). The
    /// user's working tree, dirty or not, plays no part: agents start from the commit.
    pub async fn create(user_repo: &Path, run_dir: &Path, base_ref: &str, run_id: &str) -> Result<RunClone> {
        let (user_repo, run_dir) = (user_repo.to_owned(), run_dir.to_owned());
        let (base_ref, run_id) = (base_ref.to_owned(), run_id.to_owned());
        blocking("create the run clone", move || Self::create_blocking(&user_repo, &run_dir, &base_ref, &run_id)).await
    }

    /// [`RunClone::create`], on the calling thread.
    pub fn create_blocking(user_repo: &Path, run_dir: &Path, base_ref: &str, run_id: &str) -> Result<RunClone> {
        validate_run_id(run_id)?;
        tune_libgit2();
        let user = Repository::open_ext(user_repo, RepositoryOpenFlags::empty(), std::iter::empty::<&OsStr>())
            .map_err(|source| GitError::OpenUser { path: user_repo.to_owned(), source })?;
        let base = user
            .revparse_single(base_ref)
            .and_then(|object| object.peel_to_commit())
            .map_err(|source| GitError::BaseRef { base: base_ref.to_owned(), repo: user_repo.to_owned(), source })?
            .id();
        let user_common = canonical(user.commondir())?;
        let user_objects = canonical(&user_common.join("objects"))?;
        let borrowed = alternates(&user_objects);
        let shallow = user.is_shallow().then(|| user_common.join("shallow"));
        let user_git_dir = canonical(user.path())?;

        fs::create_dir_all(run_dir).map_err(io_err("create the run directory", run_dir))?;
        let run_dir = canonical(run_dir)?;
        warn_if_inside_checkout(&user, &run_dir);
        drop(user);
        let git_dir = run_dir.join(CLONE_DIR);
        let checkouts = run_dir.join(CHECKOUTS_DIR);
        let repos = run_dir.join(REPOS_DIR);
        for path in [&git_dir, &checkouts, &repos] {
            if path.symlink_metadata().is_ok() {
                return Err(GitError::Exists(path.clone()));
            }
        }
        let inner = Inner {
            run_id: run_id.to_owned(),
            run_dir,
            git_dir,
            checkouts,
            repos,
            user_git_dir,
            user_objects,
            borrowed,
            base,
            fetch_lock: Mutex::new(()),
            has_attributes: OnceLock::new(),
        };
        crate::fail_point::hit("creating-clone");
        match inner.write_layout(shallow.as_deref()) {
            Ok(()) => Ok(RunClone { inner: Arc::new(inner) }),
            Err(e) => {
                let _ = fs::remove_dir_all(&inner.git_dir);
                let _ = fs::remove_dir_all(&inner.checkouts);
                let _ = fs::remove_dir_all(&inner.repos);
                Err(e)
            }
        }
    }

    /// The run id, as in `orch/<run-id>/<agent>`.
    pub fn run_id(&self) -> &str {
        &self.inner.run_id
    }

    /// The run clone's git directory, `<run_dir>/repo.git`.
    pub fn git_dir(&self) -> &Path {
        &self.inner.git_dir
    }

    /// The user's git directory (where the `orch/...` branches end up).
    pub fn user_git_dir(&self) -> &Path {
        &self.inner.user_git_dir
    }

    /// The base commit every agent starts from.
    pub fn base(&self) -> Oid {
        self.inner.base
    }

    /// The branch (without `refs/heads/`) an agent's worktree is on: `orch/<run>/<name>`,
    /// `name` being [`safe_name`] of the agent id.
    pub fn branch_for(&self, agent_id: &str) -> Result<String> {
        Ok(format!("orch/{}/{}", self.inner.run_id, safe_name(agent_id)?))
    }

    /// The branch `integrate: merge` merges into: `orch/<run>/integration`.
    pub fn integration_branch(&self) -> String {
        format!("orch/{}/integration", self.inner.run_id)
    }

    /// Adds the worktree `<run_dir>/worktrees/<name>` of an agent, on the new branch
    /// `orch/<run>/<name>` at the base commit. The worktree is a linked worktree of the
    /// agent's own repository `<run_dir>/repos/<name>.git` (which borrows the user's
    /// store and holds nothing of other agents); the run clone gets the branch too, and
    /// each commit of the agent's work is copied there ([`Worktree::commit_all`]). Safe
    /// to call many times at once: each call touches only its own branch, repository and
    /// checkout (see [`Worktree::link_and_checkout`] for why this is not
    /// `git_worktree_add`).
    pub async fn add_worktree(&self, agent_id: &str) -> Result<Worktree> {
        let (this, agent_id) = (self.clone(), agent_id.to_owned());
        blocking("add a worktree", move || this.add_worktree_blocking(&agent_id)).await
    }

    /// [`RunClone::add_worktree`], on the calling thread.
    pub fn add_worktree_blocking(&self, agent_id: &str) -> Result<Worktree> {
        self.add_worktree_at_blocking(agent_id, None)
    }

    /// [`RunClone::add_worktree`], with the branch at `start` (an earlier run's work on
    /// this agent, fetched into the user's repository, so readable through the
    /// alternates) instead of the base.
    pub async fn add_worktree_at(&self, agent_id: &str, start: Oid) -> Result<Worktree> {
        let (this, agent_id) = (self.clone(), agent_id.to_owned());
        blocking("add a worktree", move || this.add_worktree_at_blocking(&agent_id, Some(start))).await
    }

    fn add_worktree_at_blocking(&self, agent_id: &str, start: Option<Oid>) -> Result<Worktree> {
        self.add_worktree_from_blocking(agent_id, start, false)
    }

    /// Adds an agent's worktree with its branch at `start` (the run's base when `None`).
    /// `own_start`: its changes are measured against `start` (`base: needs`), not the
    /// run's base (`--resume`, where the earlier work belongs to its patch).
    pub(super) fn add_worktree_from_blocking(
        &self,
        agent_id: &str,
        start: Option<Oid>,
        own_start: bool,
    ) -> Result<Worktree> {
        let name = safe_name(agent_id)?;
        let branch = format!("orch/{}/{name}", self.inner.run_id);
        let checkout = self.inner.checkouts.join(&name);
        let repo_dir = self.inner.repos.join(format!("{name}.git"));
        for path in [&checkout, &repo_dir] {
            if path.symlink_metadata().is_ok() {
                return Err(GitError::Exists(path.clone()));
            }
        }
        let run = self.inner.open()?;
        let start = start.unwrap_or(self.inner.base);
        let start_commit = run.find_commit(start).git(|| "find the start commit in the run clone".into())?;
        // The run clone's branch claims the name first: two ids that map to one name fail
        // here, before either touches the other's repository.
        let branch_ref = run.branch(&branch, &start_commit, false).git(|| {
            format!("create the branch {branch} for agent `{agent_id}` (agent ids must map to distinct names)")
        })?;
        let mut worktree = Worktree::new(self.clone(), agent_id.to_owned(), name, branch, checkout, repo_dir);
        if own_start {
            worktree = worktree.starting_at(start);
        }
        if let Err(e) = worktree.create(start) {
            let _ = fs::remove_dir_all(worktree.path());
            let _ = fs::remove_dir_all(worktree.repo_dir());
            let _ = branch_ref.into_reference().delete();
            return Err(e);
        }
        Ok(worktree)
    }

    /// Copies each branch (name without `refs/heads/`) into the user's repository as the
    /// branch of the same name: first the objects the user's store lacks (as one pack),
    /// then the ref. Touches nothing else there: not HEAD, the index, the working tree,
    /// `FETCH_HEAD`, tags or any other ref. A branch that already exists there is only
    /// moved forward from a commit of this run (between the base and the new tip, as
    /// after an earlier fetch of it); otherwise this fails and leaves it as it is.
    pub async fn fetch_into_user(&self, branches: &[String]) -> Result<Vec<Fetched>> {
        let (this, branches) = (self.clone(), branches.to_vec());
        blocking("fetch into the user's repository", move || this.fetch_into_user_blocking(&branches)).await
    }

    /// [`RunClone::fetch_into_user`], on the calling thread.
    pub fn fetch_into_user_blocking(&self, branches: &[String]) -> Result<Vec<Fetched>> {
        let _serial = self.inner.fetch_lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let run = self.inner.open()?;
        let user =
            Repository::open_ext(&self.inner.user_git_dir, RepositoryOpenFlags::NO_SEARCH, [&self.inner.run_dir])
                .map_err(|source| GitError::OpenUser { path: self.inner.user_git_dir.clone(), source })?;
        branches.iter().map(|branch| self.fetch_one(&run, &user, branch)).collect()
    }

    fn fetch_one(&self, run: &Repository, user: &Repository, branch: &str) -> Result<Fetched> {
        let refname = format!("refs/heads/{branch}");
        if !branch.starts_with("orch/") || !git2::Reference::is_valid_name(&refname) {
            return Err(GitError::Git {
                action: format!(
                    "fetch `{branch}`: only valid `orch/...` branches are fetched into the user's repository"
                ),
                source: git2::Error::from_str("refusing to write this ref"),
            });
        }
        let tip = run.refname_to_id(&refname).git(|| format!("find the branch {branch} in the run clone"))?;
        let existing = user.refname_to_id(&refname).ok();
        if existing == Some(tip) {
            return Ok(Fetched { branch: branch.to_owned(), commit: tip.to_string(), objects: 0 });
        }

        // The new objects live in the run clone's own store; everything reachable from
        // the base (or the branch's current tip in the user's repository) is already in
        // the user's store, which the run clone borrows.
        let mut hide = vec![self.inner.base];
        hide.extend(existing);
        let objects = super::transfer::copy_objects(run, user, tip, &hide, branch)?;
        user.find_commit(tip).git(|| format!("find the commit of {branch} in the user's repository after copying"))?;

        let message = format!("orch: fetch {branch} from the run clone");
        match existing {
            None => {
                user.reference(&refname, tip, false, &message).map_err(|e| match e.code() {
                    git2::ErrorCode::Exists => GitError::BranchExists { branch: branch.to_owned() },
                    _ => GitError::Git {
                        action: format!("create the branch {branch} in the user's repository"),
                        source: e,
                    },
                })?;
            }
            Some(old) => {
                // Only a branch we fetched before is moved: its commit lies between the
                // base and the new tip. Anything else is someone else's branch.
                let base = self.inner.base;
                let ours = (old == base || user.graph_descendant_of(old, base).unwrap_or(false))
                    && user.graph_descendant_of(tip, old).unwrap_or(false);
                if !ours {
                    return Err(GitError::BranchExists { branch: branch.to_owned() });
                }
                user.reference_matching(&refname, tip, true, old, &message)
                    .git(|| format!("move the branch {branch} forward in the user's repository"))?;
            }
        }
        Ok(Fetched { branch: branch.to_owned(), commit: tip.to_string(), objects })
    }

    /// Deletes the run clone and the checkouts directory, unless worktrees that were kept
    /// (not [`Worktree::remove`]d) still hang off it: then nothing is deleted and their
    /// checkouts are returned, since a linked worktree is useless without its repository.
    pub async fn remove(self) -> Result<Removal> {
        blocking("remove the run clone", move || self.remove_blocking()).await
    }

    /// [`RunClone::remove`], on the calling thread.
    pub fn remove_blocking(self) -> Result<Removal> {
        let kept = self.inner.worktrees()?;
        if !kept.is_empty() {
            return Ok(Removal::Kept { worktrees: kept });
        }
        remove_all(&self.inner.git_dir)?;
        crate::fail_point::hit("removing-clone");
        remove_all(&self.inner.repos)?;
        remove_all(&self.inner.checkouts)?;
        Ok(Removal::Removed)
    }

    /// Whether any directory of the base tree has a `.gitattributes` file.
    pub(super) fn base_has_attributes(&self, repo: &Repository) -> Result<bool> {
        if let Some(has) = self.inner.has_attributes.get() {
            return Ok(*has);
        }
        let tree = repo.find_commit(self.inner.base).and_then(|c| c.tree()).git(|| "read the base tree".into())?;
        let mut has = false;
        tree.walk(git2::TreeWalkMode::PreOrder, |_, entry| {
            if entry.name_bytes() == b".gitattributes" {
                has = true;
                git2::TreeWalkResult::Abort
            } else {
                git2::TreeWalkResult::Ok
            }
        })
        .or_else(|e| if has { Ok(()) } else { Err(e) })
        .git(|| "look for .gitattributes in the base tree".into())?;
        Ok(*self.inner.has_attributes.get_or_init(|| has))
    }

    /// Checkouts of the worktrees that currently hang off the run clone.
    pub fn worktrees(&self) -> Result<Vec<PathBuf>> {
        self.inner.worktrees()
    }
}

impl Inner {
    /// Opens a fresh handle on the run clone (one per thread: handles are not `Sync`).
    pub(super) fn open(&self) -> Result<Repository> {
        Repository::open_ext(&self.git_dir, RepositoryOpenFlags::NO_SEARCH | RepositoryOpenFlags::BARE, [&self.run_dir])
            .git(|| format!("open the run clone {}", self.git_dir.display()))
    }

    fn write_layout(&self, shallow: Option<&Path>) -> Result<()> {
        for dir in [&self.checkouts, &self.repos] {
            fs::create_dir_all(dir).map_err(io_err("create", dir))?;
        }
        let shallow = match shallow {
            // A shallow user clone (the default of checkout actions) has commits whose
            // parents are absent: without this list, `git log` fails at the boundary.
            Some(path) => Some(fs::read(path).map_err(io_err("read", path))?),
            None => None,
        };
        self.write_repo(&self.git_dir, shallow.as_deref(), None)?;
        let repo = self.open()?;
        repo.find_commit(self.base).git(|| "read the base commit through the run clone's alternates".into())?;
        Ok(())
    }

    /// Writes a bare repository at `git_dir` (which must not exist) with the layout of
    /// the run clone: our config, `HEAD` detached at the base, the user's store as its
    /// only alternate, the shallow list if any, and no refs yet. The run clone and every
    /// agent's repository are made this way.
    ///
    /// An agent's repository (`branch` given: its one branch and where it starts) is
    /// kept to the files and directories git needs, since every inode made here is made
    /// again for each agent: its branch goes into `packed-refs` (a commit writes the
    /// loose ref and its directories later), and there is no `objects/pack` or
    /// `refs/tags` (nothing is ever packed or tagged there). On a file system whose
    /// inode allocator is slow to find a free inode (ext4 without a journal skips those
    /// freed in the last minute), each one counts; see BENCHMARKS.md, "Parallel scaling".
    pub(super) fn write_repo(&self, git_dir: &Path, shallow: Option<&[u8]>, branch: Option<(&str, Oid)>) -> Result<()> {
        fs::create_dir(git_dir).map_err(io_err("create", git_dir))?;
        // `worktrees/` and the branch directory exist before any worktree is added, so
        // parallel adds never race to create them (libgit2 creates `worktrees/` with
        // O_EXCL and fails the loser). An agent's repository gets one worktree only.
        let mut dirs = vec![git_dir.join("objects/info"), git_dir.join("refs"), git_dir.join("worktrees")];
        if branch.is_none() {
            dirs.extend([
                git_dir.join("objects/pack"),
                git_dir.join("refs/tags"),
                git_dir.join("refs/heads/orch").join(&self.run_id),
            ]);
        }
        for dir in dirs {
            fs::create_dir_all(&dir).map_err(io_err("create", dir))?;
        }
        write_new(&git_dir.join("config"), CONFIG.as_bytes())?;
        write_new(&git_dir.join("HEAD"), format!("{}\n", self.base).as_bytes())?;
        let objects = &self.user_objects;
        let line =
            objects.to_str().filter(|s| !s.contains('\n') && !s.starts_with('"')).ok_or_else(|| GitError::Io {
                action: "use as an alternate object store (the path must be UTF-8 without a newline)",
                path: objects.clone(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            })?;
        write_new(&git_dir.join("objects/info/alternates"), format!("{line}\n").as_bytes())?;
        if let Some(text) = shallow {
            write_new(&git_dir.join("shallow"), text)?;
        }
        if let Some((branch, start)) = branch {
            // The format `git pack-refs` writes; a branch needs no peeled line.
            let packed = format!("# pack-refs with: peeled fully-peeled sorted \n{start} refs/heads/{branch}\n");
            write_new(&git_dir.join("packed-refs"), packed.as_bytes())?;
        }
        Ok(())
    }

    /// Checkouts of the worktrees that hang off the agents' repositories (the admin dirs
    /// `<run_dir>/repos/<name>.git/worktrees/<name>`).
    fn worktrees(&self) -> Result<Vec<PathBuf>> {
        let mut kept = Vec::new();
        for repo in list_dir(&self.repos)? {
            for admin in list_dir(&repo.join("worktrees"))? {
                let checkout = fs::read_to_string(admin.join("gitdir"))
                    .ok()
                    .and_then(|text| Path::new(text.trim_end()).parent().map(Path::to_owned))
                    .unwrap_or(admin);
                kept.push(checkout);
            }
        }
        kept.sort();
        Ok(kept)
    }
}

/// The entries of `dir` (none when it does not exist).
pub(super) fn list_dir(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err("list", dir)(e)),
    };
    entries.map(|entry| entry.map(|e| e.path()).map_err(io_err("list", dir))).collect()
}

/// A run directory inside the user's checkout shows up in its `git status` (the run
/// clone, the agents' checkouts) unless ignored. Nothing breaks, but the checkout no
/// longer looks as it did: say so.
fn warn_if_inside_checkout(user: &Repository, run_dir: &Path) {
    let Some(workdir) = user.workdir().and_then(|w| fs::canonicalize(w).ok()) else { return };
    let Ok(relative) = run_dir.strip_prefix(&workdir) else { return };
    if !user.is_path_ignored(relative).unwrap_or(false) {
        tracing::warn!(
            run_dir = %run_dir.display(),
            "the run directory is inside the repository's checkout and not ignored, so `git status` there \
             will list it; put it outside the checkout or add it to .gitignore"
        );
    }
}

/// Process-wide libgit2 settings, applied once. libgit2 re-hashes every object it reads
/// to verify it (`git` does not; only `fsck` does): SHA-1 with collision detection was
/// most of our user CPU in a checkout, for a check git itself skips on the same objects.
fn tune_libgit2() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| git2::opts::strict_hash_verification(false));
}

/// The stores `objects` borrows from through `info/alternates`, recursively (as git
/// follows them), canonical, without `objects` itself.
pub(super) fn alternates(objects: &Path) -> Vec<PathBuf> {
    let mut stores = vec![objects.to_owned()];
    let mut next = 0;
    while let Some(store) = stores.get(next).cloned() {
        next += 1;
        if next > MAX_ALTERNATE_DEPTH {
            break;
        }
        let Ok(text) = fs::read_to_string(store.join("info/alternates")) else { continue };
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if let Ok(path) = fs::canonicalize(store.join(line))
                && !stores.contains(&path)
            {
                stores.push(path);
            }
        }
    }
    stores.split_off(1)
}

fn canonical(path: &Path) -> Result<PathBuf> {
    fs::canonicalize(path).map_err(io_err("resolve", path))
}

pub(super) fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(io_err("create", path))?;
    file.write_all(bytes).map_err(io_err("write", path))
}

/// Removes what a run clone that was never finished (or half removed) left in
/// `run_dir`: the clone, the agents' repositories and the checkouts.
pub fn remove_partial_clone(run_dir: &Path) -> Result<()> {
    for name in [CLONE_DIR, REPOS_DIR, CHECKOUTS_DIR] {
        remove_all(&run_dir.join(name))?;
    }
    Ok(())
}

/// Removes a directory tree; a missing one is fine. (`remove_dir_all` does not follow
/// symlinks, so a link an agent planted in its checkout cannot redirect the deletion.)
pub(super) fn remove_all(path: &Path) -> Result<()> {
    match fs::remove_dir_all(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("remove", path)(e)),
    }
}
