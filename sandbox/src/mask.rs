//! Masked paths ([`crate::policy::Policy::masked`]): files and directories that
//! sandboxed commands must not read, even though they lie inside a readable root.
//!
//! How each backend hides them:
//! - landlock as root: inside the tool host's private mount namespace (see
//!   [`crate::traverse`]), [`mount_masks`] covers each masked directory with an empty,
//!   read-only tmpfs and each masked file with a read-only bind of `/dev/null`, before the
//!   uid drop. Nothing changes on the host's file system: the coordinator still commits
//!   the real files.
//! - container: the same empty mounts, as Docker mounts (`crate::container`).
//! - landlock as a normal user: no mounts are possible, so [`command_rules`] lists
//!   the Landlock rules of a command domain that grants each root holding a masked path
//!   entry by entry around it (see `crate::scope::set_command_ruleset`).
//!
//! Paths are opened without following any symlink (`openat2` with
//! `RESOLVE_NO_SYMLINKS`), so a link planted in a worktree cannot move a mask elsewhere.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{AT_FDCWD, OFlag, OpenHow, ResolveFlag, openat2};
use nix::mount::{MsFlags, mount};
use nix::sys::stat::fstat;

use crate::error::SandboxError;

/// At most this many entries are granted one by one around masked paths; beyond it the
/// masks cannot be enforced by Landlock alone (see [`command_rules`]).
pub const MAX_GRANTED_ENTRIES: usize = 10_000;

/// What a masked path is, as found without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
}

/// Opens `path` (absolute) as an `O_PATH` descriptor without following a symlink in any
/// component, and says whether it is a directory or a regular file. `Ok(None)` when the
/// path no longer exists; an error for anything else (a symlink on the way included).
pub fn open_nofollow(path: &Path) -> Result<Option<(OwnedFd, Kind)>, SandboxError> {
    let Some(fd) = open_path(path)? else { return Ok(None) };
    let st = fstat(&fd).map_err(|e| SandboxError::io(format!("cannot mask {}", path.display()), e))?;
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFREG => Kind::File,
        _ => {
            return Err(SandboxError::InvalidPolicy(format!(
                "cannot mask {}: it is neither a regular file nor a directory",
                path.display()
            )));
        }
    };
    Ok(Some((fd, kind)))
}

/// `openat2(O_PATH | O_NOFOLLOW, RESOLVE_NO_SYMLINKS)`: `Ok(None)` when `path` does not
/// exist.
fn open_path(path: &Path) -> Result<Option<OwnedFd>, SandboxError> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    match openat2(AT_FDCWD, path, how) {
        Ok(fd) => Ok(Some(fd)),
        Err(nix::Error::ENOENT) => Ok(None),
        Err(e) => Err(SandboxError::io(
            format!("cannot mask {} (a symlink on the way, or unreadable)", path.display()),
            std::io::Error::from(e),
        )),
    }
}

/// Root only, inside a private mount namespace: covers every path of `masked` with an
/// empty read-only mount (a tmpfs for a directory, `/dev/null` for a file). Returns how
/// many were covered; paths that no longer exist are skipped. Fails closed on anything
/// else.
pub fn mount_masks(masked: &[PathBuf]) -> Result<usize, SandboxError> {
    let fail = |what: String, e: nix::Error| SandboxError::io(what, std::io::Error::from(e));
    let mut covered = 0;
    for path in masked {
        let Some((fd, kind)) = open_nofollow(path)? else { continue };
        let target = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let ro = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        match kind {
            Kind::Dir => {
                mount(Some("tmpfs"), target.as_str(), Some("tmpfs"), ro, Some("size=4k,nr_inodes=2,mode=0555"))
                    .map_err(|e| fail(format!("cannot mask the directory {}", path.display()), e))?
            }
            Kind::File => {
                mount(Some("/dev/null"), target.as_str(), None::<&str>, MsFlags::MS_BIND, None::<&str>)
                    .map_err(|e| fail(format!("cannot mask the file {}", path.display()), e))?;
                // The bind is now on top of what `fd` points at: remount it through the
                // path (still without following links) to make it read-only.
                let Some(top) = open_path(path)? else { continue };
                let top_path = format!("/proc/self/fd/{}", top.as_raw_fd());
                // Not `nodev`: reading the mask must give an empty file, not an error.
                let flags = MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | MsFlags::MS_NOSUID;
                mount(None::<&str>, top_path.as_str(), None::<&str>, flags | MsFlags::MS_NOEXEC, None::<&str>)
                    .map_err(|e| fail(format!("cannot make the mask of {} read-only", path.display()), e))?;
            }
        }
        covered += 1;
    }
    Ok(covered)
}

/// The rights one root grants, split for [`command_rules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    /// A read root: read and execute.
    Read,
    /// A write root: everything.
    Write,
}

/// One rule of the command domain: a path, what it grants, and whether it is a directory
/// on the way to a masked path (which gets every right of its grant but reading and
/// executing files, since those would reach the masked path beneath it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRule {
    pub path: PathBuf,
    pub grant: Grant,
    pub on_the_way: bool,
}

/// Why a command domain cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmaskable {
    #[error("the directories around the denied paths hold more than {MAX_GRANTED_ENTRIES} entries")]
    TooManyEntries,
    #[error("{} cannot be read to grant its entries one by one: {message}", .path.display())]
    Unreadable { path: PathBuf, message: String },
}

/// The rules of a Landlock domain for commands that leaves `masked` out: every root of
/// `read` and `write` that holds no masked path is granted whole; a root that does is
/// granted entry by entry: each directory on the way from the root to a masked path
/// gets a rule of its own without file reading, and each other entry of those
/// directories (not symlinks: they lead to paths with rules of their own) is granted
/// whole. `Ok(None)` when nothing is masked under any root. Walks only the directories on
/// the way, never following a symlink, and gives up past [`MAX_GRANTED_ENTRIES`].
pub fn command_rules(
    read: &[PathBuf],
    write: &[PathBuf],
    masked: &[PathBuf],
) -> Result<Option<Vec<CommandRule>>, Unmaskable> {
    let holds = |root: &Path| masked.iter().any(|m| m != root && m.starts_with(root));
    if !read.iter().chain(write).any(|r| holds(r)) {
        return Ok(None);
    }
    let mut rules = Vec::new();
    let mut granted = 0usize;
    let roots = read.iter().map(|r| (r, Grant::Read)).chain(write.iter().map(|w| (w, Grant::Write)));
    for (root, grant) in roots {
        if masked.iter().any(|m| root.starts_with(m)) {
            // The root itself is masked (or lies inside a masked directory).
            continue;
        }
        if !holds(root) {
            rules.push(CommandRule { path: root.clone(), grant, on_the_way: false });
            continue;
        }
        // Directories between the root and each masked path, the root included.
        let mut on_the_way: std::collections::BTreeSet<PathBuf> = std::collections::BTreeSet::new();
        for m in masked.iter().filter(|m| m.starts_with(root) && *m != root) {
            let mut dir = m.parent();
            while let Some(d) = dir {
                if !d.starts_with(root) {
                    break;
                }
                on_the_way.insert(d.to_path_buf());
                dir = d.parent();
            }
        }
        for dir in &on_the_way {
            rules.push(CommandRule { path: dir.clone(), grant, on_the_way: true });
            let entries = std::fs::read_dir(dir)
                .map_err(|e| Unmaskable::Unreadable { path: dir.clone(), message: e.to_string() })?;
            for entry in entries {
                let entry = entry.map_err(|e| Unmaskable::Unreadable { path: dir.clone(), message: e.to_string() })?;
                granted += 1;
                if granted > MAX_GRANTED_ENTRIES {
                    return Err(Unmaskable::TooManyEntries);
                }
                let path = entry.path();
                let is_link = entry.file_type().map(|t| t.is_symlink() || t.is_socket()).unwrap_or(true);
                if is_link || on_the_way.contains(&path) || masked.contains(&path) {
                    continue;
                }
                rules.push(CommandRule { path, grant, on_the_way: false });
            }
        }
    }
    Ok(Some(rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_around_masked_paths_are_granted_entry_by_entry() {
        let dir = tempfile::tempdir().unwrap();
        let wt = dir.path().join("wt");
        std::fs::create_dir_all(wt.join("secrets")).unwrap();
        std::fs::create_dir_all(wt.join("src/deep")).unwrap();
        std::fs::write(wt.join(".env"), "TOKEN=1").unwrap();
        std::fs::write(wt.join("src/deep/.env"), "TOKEN=2").unwrap();
        std::fs::write(wt.join("src/deep/main.rs"), "").unwrap();
        std::fs::write(wt.join("README"), "").unwrap();
        std::os::unix::fs::symlink(wt.join(".env"), wt.join("link")).unwrap();
        let masked = vec![wt.join(".env"), wt.join("secrets"), wt.join("src/deep/.env")];
        let rules = command_rules(&["/usr".into()], std::slice::from_ref(&wt), &masked).unwrap().unwrap();
        let find = |p: &Path| rules.iter().find(|r| r.path == p).cloned();
        assert_eq!(find(Path::new("/usr")).unwrap().grant, Grant::Read);
        for way in [wt.clone(), wt.join("src"), wt.join("src/deep")] {
            assert!(find(&way).unwrap().on_the_way, "{}", way.display());
        }
        assert!(!find(&wt.join("README")).unwrap().on_the_way);
        assert!(!find(&wt.join("src/deep/main.rs")).unwrap().on_the_way);
        for hidden in masked.iter().chain([&wt.join("link")]) {
            assert!(find(hidden).is_none(), "{} must get no rule", hidden.display());
        }
        // Nothing masked: no command domain.
        assert_eq!(command_rules(&[], std::slice::from_ref(&wt), &[]).unwrap(), None);
    }

    #[test]
    fn too_many_entries_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..=MAX_GRANTED_ENTRIES {
            std::fs::write(dir.path().join(format!("f{i}")), "").unwrap();
        }
        let masked = vec![dir.path().join("f0")];
        let err = command_rules(&[], &[dir.path().to_path_buf()], &masked).unwrap_err();
        assert_eq!(err, Unmaskable::TooManyEntries);
    }

    #[test]
    fn opening_refuses_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("d"), dir.path().join("l")).unwrap();
        assert_eq!(open_nofollow(&dir.path().join("f")).unwrap().unwrap().1, Kind::File);
        assert_eq!(open_nofollow(&dir.path().join("d")).unwrap().unwrap().1, Kind::Dir);
        assert!(open_nofollow(&dir.path().join("gone")).unwrap().is_none());
        assert!(open_nofollow(&dir.path().join("l")).is_err());
        assert!(open_nofollow(&dir.path().join("l/x")).is_err());
    }
}
