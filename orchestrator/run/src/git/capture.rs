//! Reading an agent's checkout into the index without ever following a link the agent
//! made: every file is opened one path component at a time, beneath a directory file
//! descriptor, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)` (plain `openat` with
//! `O_NOFOLLOW` on kernels without `openat2`; a single component then means the same).
//! Symlinks are recorded as symlinks (their target text, read with `readlinkat`), never
//! opened. Blobs are written from the opened descriptor, large ones streamed through the
//! object database's writer so that memory stays flat; files over the size limit are
//! left out and listed. The checkout's `.git` file is restored the same way.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use git2::{Index, IndexEntry, IndexTime, Oid, Repository};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags, Stat};

use super::{Context as _, GitError, Result};

/// Files larger than this are not committed unless the workflow says otherwise.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 20 << 20;

/// Files up to this size are read whole into a blob; larger ones are streamed.
const READ_WHOLE: u64 = 1 << 20;

/// The most of a `.gitignore` that is read; the rest is ignored.
const MAX_IGNORE_FILE: u64 = 1 << 20;

const MODE_FILE: u32 = 0o100_644;
const MODE_EXEC: u32 = 0o100_755;
const MODE_LINK: u32 = 0o120_000;
const MODE_GITLINK: u32 = 0o160_000;

/// What [`capture`] left out of the index.
#[derive(Debug, Default)]
pub(super) struct LeftOut {
    /// Nested repositories (directories with their own `.git`), relative to the checkout.
    pub nested: Vec<PathBuf>,
    /// Files over the size limit, with their size in bytes.
    pub too_large: Vec<(PathBuf, u64)>,
}

/// Opens `name`, a single path component, beneath `dir` without following any symlink.
pub(super) fn open_beneath(dir: BorrowedFd<'_>, name: &OsStr, flags: OFlags) -> io::Result<OwnedFd> {
    if name.as_bytes().contains(&b'/') || name == ".." || name.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a single path component"));
    }
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    // openat2 refuses a mode without O_CREAT.
    let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o644) } else { Mode::empty() };
    match rustix::fs::openat2(dir, name, flags, mode, resolve) {
        Err(rustix::io::Errno::NOSYS) => Ok(rustix::fs::openat(dir, name, flags, mode)?),
        other => Ok(other?),
    }
}

/// Opens a directory the coordinator made itself (the checkout), refusing a symlink.
pub(super) fn open_root(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| GitError::Io { action: "open", path: path.to_owned(), source: e.into() })
}

/// Replaces the index with what the checkout holds now: every file (tracked ones, and
/// untracked ones no `.gitignore` matches), read without following links.
///
/// Must only run once every process of the agent is dead (see `run/agent.rs`): then
/// nothing changes under it. The descriptor-based walk keeps it safe even if that
/// invariant broke: a swapped path is never followed, only skipped or recorded as a link.
///
/// With `filters` (the base has a `.gitattributes`), regular files go through libgit2's
/// clean filters (eol conversion, `ident`) by path, once this walk has checked that the
/// path is a regular file with no link on the way: libgit2 would follow a link there,
/// which is safe only because the agent's processes are all dead by then.
pub(super) fn capture(
    repo: &Repository,
    index: &mut Index,
    checkout: &Path,
    max_file_size: u64,
    filters: bool,
) -> Result<LeftOut> {
    let root = open_root(checkout)?;
    let mut tracked: HashMap<Vec<u8>, IndexEntry> = HashMap::new();
    let mut tracked_dirs: HashSet<Vec<u8>> = HashSet::new();
    for entry in index.iter() {
        let mut path = entry.path.as_slice();
        while let Some(cut) = path.iter().rposition(|&b| b == b'/') {
            path = &path[..cut];
            if !tracked_dirs.insert(path.to_vec()) {
                break;
            }
        }
        tracked.insert(entry.path.clone(), entry);
    }
    let mut walk = Walk {
        repo,
        checkout,
        max_file_size,
        filters,
        tracked,
        tracked_dirs,
        out: Vec::new(),
        filtered: Vec::new(),
        left: LeftOut::default(),
    };
    let mut ignores = Vec::new();
    walk.dir(root.as_fd(), b"", false, &mut ignores)?;
    let Walk { out, filtered, left, .. } = walk;
    index.clear().git(|| "reset the index".to_owned())?;
    for entry in &out {
        index.add(entry).git(|| format!("stage {}", String::from_utf8_lossy(&entry.path)))?;
    }
    for rel in &filtered {
        let path = Path::new(OsStr::from_bytes(rel));
        index.add_path(path).git(|| format!("stage {}", path.display()))?;
    }
    Ok(left)
}

struct Walk<'a> {
    repo: &'a Repository,
    checkout: &'a Path,
    max_file_size: u64,
    filters: bool,
    tracked: HashMap<Vec<u8>, IndexEntry>,
    tracked_dirs: HashSet<Vec<u8>>,
    out: Vec<IndexEntry>,
    /// Regular files to stage by path, through the clean filters.
    filtered: Vec<Vec<u8>>,
    left: LeftOut,
}

impl Walk<'_> {
    fn io(&self, action: &'static str, rel: &[u8]) -> impl FnOnce(io::Error) -> GitError + use<> {
        let path = self.checkout.join(OsStr::from_bytes(rel));
        move |source| GitError::Io { action, path, source }
    }

    /// Walks the directory `dir` (at `prefix`, empty or ending in `/`).
    fn dir(&mut self, dir: BorrowedFd<'_>, prefix: &[u8], ignored: bool, ignores: &mut Vec<Gitignore>) -> Result<()> {
        let pushed = match read_gitignore(dir, prefix) {
            Some(g) => {
                ignores.push(g);
                true
            }
            None => false,
        };
        let mut names: Vec<Vec<u8>> = Vec::new();
        let entries = rustix::fs::Dir::read_from(dir).map_err(|e| self.io("list", prefix)(e.into()))?;
        for entry in entries {
            let entry = entry.map_err(|e| self.io("list", prefix)(e.into()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." || (prefix.is_empty() && name == b".git") {
                continue;
            }
            names.push(name.to_vec());
        }
        names.sort();
        for name in names {
            let mut rel = prefix.to_vec();
            rel.extend_from_slice(&name);
            self.entry(dir, OsStr::from_bytes(&name), rel, ignored, ignores)?;
        }
        if pushed {
            ignores.pop();
        }
        Ok(())
    }

    fn entry(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        rel: Vec<u8>,
        parent_ignored: bool,
        ignores: &mut Vec<Gitignore>,
    ) -> Result<()> {
        let stat = match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            // Gone since the listing: nothing to stage.
            Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(e) => return Err(self.io("inspect", &rel)(e.into())),
        };
        let kind = FileType::from_raw_mode(stat.st_mode);
        let is_dir = kind == FileType::Directory;
        let ignored = parent_ignored || is_ignored(ignores, &rel, is_dir);
        match kind {
            FileType::Directory => {
                // A submodule the base had (checked out or not): keep its gitlink.
                if self.tracked.get(&rel).is_some_and(|e| e.mode == MODE_GITLINK) {
                    // Each path is visited once: take the entry rather than copy it.
                    if let Some(e) = self.tracked.remove(&rel) {
                        self.out.push(e);
                    }
                    return Ok(());
                }
                let mut prefix = rel.clone();
                prefix.push(b'/');
                if ignored && !self.tracked_dirs.contains(&rel) {
                    return Ok(());
                }
                let fd = match open_beneath(dir, name, OFlags::RDONLY | OFlags::DIRECTORY) {
                    Ok(fd) => fd,
                    Err(e) if is_swapped(&e) => return Ok(()),
                    Err(e) => return Err(self.io("open", &rel)(e)),
                };
                if rustix::fs::statat(fd.as_fd(), ".git", AtFlags::SYMLINK_NOFOLLOW).is_ok() {
                    // A nested repository: leave it out (git would record a commit nobody
                    // has).
                    self.left.nested.push(PathBuf::from(OsStr::from_bytes(&rel)));
                    return Ok(());
                }
                self.dir(fd.as_fd(), &prefix, ignored, ignores)
            }
            FileType::Symlink => {
                if ignored && !self.tracked.contains_key(&rel) {
                    return Ok(());
                }
                let target = match rustix::fs::readlinkat(dir, name, Vec::new()) {
                    Ok(t) => t,
                    Err(rustix::io::Errno::NOENT | rustix::io::Errno::INVAL) => return Ok(()),
                    Err(e) => return Err(self.io("read the link", &rel)(e.into())),
                };
                let id = self.repo.blob(target.as_bytes()).git(|| "write a link's blob".to_owned())?;
                self.out.push(entry_for(&stat, rel, MODE_LINK, id, target.as_bytes().len() as u64));
                Ok(())
            }
            FileType::RegularFile => self.file(dir, name, rel, ignored),
            // Fifos, sockets, devices: git has no such thing.
            _ => Ok(()),
        }
    }

    fn file(&mut self, dir: BorrowedFd<'_>, name: &OsStr, rel: Vec<u8>, ignored: bool) -> Result<()> {
        let old = self.tracked.remove(&rel);
        if ignored && old.is_none() {
            return Ok(());
        }
        let fd = match open_beneath(dir, name, OFlags::RDONLY | OFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(e) if is_swapped(&e) => return Ok(()),
            Err(e) => return Err(self.io("open", &rel)(e)),
        };
        // The descriptor is what counts: whatever the name points to now.
        let stat = rustix::fs::fstat(&fd).map_err(|e| self.io("inspect", &rel)(e.into()))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
            return Ok(());
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        let mode = if stat.st_mode & 0o100 != 0 { MODE_EXEC } else { MODE_FILE };
        if size > self.max_file_size {
            self.left.too_large.push((PathBuf::from(OsStr::from_bytes(&rel)), size));
            // Keep what the base had there, so the branch does not show it deleted.
            if let Some(old) = old {
                self.out.push(old);
            }
            return Ok(());
        }
        if let Some(old) = &old
            && old.mode == mode
            && same_stat(old, &stat)
        {
            self.out.push(entry_for(&stat, rel, mode, old.id, size));
            return Ok(());
        }
        if self.filters {
            self.filtered.push(rel);
            return Ok(());
        }
        let file = File::from(fd);
        let id = self.blob(file, size).map_err(|e| {
            // On a full disk, libgit2 says "no error" or "Write error": say what it is.
            let action = format!("store {}", String::from_utf8_lossy(&rel));
            match (crate::run::reserve::full_note(self.repo.path()), e) {
                (Some(note), _) => GitError::Full { action, note },
                (None, Blob::Io(e)) => self.io("read", &rel)(e),
                (None, Blob::Git(e)) => GitError::Git { action, source: e },
            }
        })?;
        self.out.push(entry_for(&stat, rel, mode, id, size));
        Ok(())
    }

    /// Writes the file's content as a blob, at most `size` bytes of it: whole for small
    /// files, streamed for large ones.
    fn blob(&self, file: File, size: u64) -> std::result::Result<Oid, Blob> {
        let mut limited = file.take(size);
        if size <= READ_WHOLE {
            let mut bytes = Vec::with_capacity(size as usize);
            limited.read_to_end(&mut bytes).map_err(Blob::Io)?;
            return self.repo.blob(&bytes).map_err(Blob::Git);
        }
        let mut writer = self.repo.blob_writer(None).map_err(Blob::Git)?;
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = limited.read(&mut buf).map_err(Blob::Io)?;
            if n == 0 {
                break;
            }
            writer.write_all(&buf[..n]).map_err(Blob::Io)?;
        }
        writer.commit().map_err(Blob::Git)
    }
}

enum Blob {
    Io(io::Error),
    Git(git2::Error),
}

/// The name became a symlink or something else since it was inspected: skip it.
fn is_swapped(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOENT | libc::ENOTDIR | libc::EXDEV | libc::EAGAIN))
}

fn same_stat(old: &IndexEntry, stat: &Stat) -> bool {
    let now = entry_for(stat, Vec::new(), old.mode, old.id, u64::try_from(stat.st_size).unwrap_or(0));
    old.mtime == now.mtime && old.ctime == now.ctime && old.ino == now.ino && old.file_size == now.file_size
}

fn entry_for(stat: &Stat, path: Vec<u8>, mode: u32, id: Oid, size: u64) -> IndexEntry {
    IndexEntry {
        ctime: IndexTime::new(stat.st_ctime as i32, stat.st_ctime_nsec as u32),
        mtime: IndexTime::new(stat.st_mtime as i32, stat.st_mtime_nsec as u32),
        dev: stat.st_dev as u32,
        ino: stat.st_ino as u32,
        mode,
        uid: stat.st_uid,
        gid: stat.st_gid,
        file_size: size as u32,
        id,
        flags: 0,
        flags_extended: 0,
        path,
    }
}

/// The `.gitignore` of `dir`, read through a descriptor; `None` without one.
fn read_gitignore(dir: BorrowedFd<'_>, prefix: &[u8]) -> Option<Gitignore> {
    let fd = open_beneath(dir, OsStr::new(".gitignore"), OFlags::RDONLY | OFlags::NONBLOCK).ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return None;
    }
    let mut text = Vec::new();
    File::from(fd).take(MAX_IGNORE_FILE).read_to_end(&mut text).ok()?;
    let mut builder = GitignoreBuilder::new(virtual_path(prefix));
    for line in String::from_utf8_lossy(&text).lines() {
        // A bad pattern is skipped, as git does.
        let _ = builder.add_line(None, line);
    }
    builder.build().ok()
}

/// Paths are matched under a made-up root, so nothing here touches the real checkout.
fn virtual_path(rel: &[u8]) -> PathBuf {
    Path::new("/checkout").join(OsStr::from_bytes(rel))
}

/// Whether the innermost `.gitignore` with an opinion ignores `rel`.
fn is_ignored(ignores: &[Gitignore], rel: &[u8], is_dir: bool) -> bool {
    let path = virtual_path(rel);
    for g in ignores.iter().rev() {
        match g.matched(&path, is_dir) {
            Match::Ignore(_) => return true,
            Match::Whitelist(_) => return false,
            Match::None => {}
        }
    }
    false
}

/// Puts `gitdir: <admin>` back into the checkout's `.git` if the agent changed it,
/// without following a link there: a symlink is removed (never written through), a
/// directory deleted, and the file created anew with `O_EXCL`. `true` when it changed.
pub(super) fn restore_gitlink(checkout: &Path, admin: &Path) -> Result<bool> {
    let root = open_root(checkout)?;
    let dotgit = checkout.join(".git");
    let want = format!("gitdir: {}\n", admin.display());
    let name = OsStr::new(".git");
    let io = |action| {
        let path = dotgit.clone();
        move |e: io::Error| GitError::Io { action, path, source: e }
    };
    match rustix::fs::statat(&root, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {
                if let Ok(fd) = open_beneath(root.as_fd(), name, OFlags::RDONLY | OFlags::NONBLOCK) {
                    let mut text = Vec::new();
                    let read = File::from(fd).take(4096).read_to_end(&mut text);
                    let found = String::from_utf8_lossy(&text);
                    let target = found.trim_end().strip_prefix("gitdir: ").map(|t| t.trim_end_matches('/'));
                    if read.is_ok() && target == Some(admin.display().to_string().as_str()) {
                        return Ok(false);
                    }
                }
                rustix::fs::unlinkat(&root, name, AtFlags::empty()).map_err(|e| io("remove")(e.into()))?;
            }
            // `remove_dir_all` does not follow links inside what it deletes.
            FileType::Directory => std::fs::remove_dir_all(&dotgit).map_err(io("remove"))?,
            _ => rustix::fs::unlinkat(&root, name, AtFlags::empty()).map_err(|e| io("remove")(e.into()))?,
        },
        Err(rustix::io::Errno::NOENT) => {}
        Err(e) => return Err(io("inspect")(e.into())),
    }
    let fd = open_beneath(root.as_fd(), name, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL).map_err(io("create"))?;
    File::from(fd).write_all(want.as_bytes()).map_err(io("write"))?;
    Ok(true)
}
