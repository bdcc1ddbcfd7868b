//! Root only: makes every root of a policy reachable for the sandbox uid, inside a
//! private mount namespace of the tool host.
//!
//! After the uid drop, a root under a directory the sandbox uid cannot search (`/root`
//! is 0700; so is a `mktemp -d` directory, and often a runner's home) would be
//! unreachable, whatever Landlock allows. Rather than changing modes on the host, the
//! tool host (still root) unshares its mount namespace, makes it a slave of the host's
//! (nothing propagates back), and covers each such directory with a small tmpfs
//! (mode 0755) holding bind mounts of only the entries that lead to a root. Everything
//! else in that directory disappears from the sandbox's view, which is also fine.
//!
//! The same namespace carries the policy's private tmpfs when it has one
//! ([`crate::policy::Policy::private_tmpfs`]): a tmpfs mounted on a shared, root-owned
//! directory, owned by the sandbox uid (mode 0700) and sized like the sandbox's memory,
//! that nobody else sees and that disappears with the namespace.
//!
//! Needs CAP_SYS_ADMIN; seccomp denies mount calls to everything started afterwards.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{OFlag, open};
use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};
use nix::sys::stat::Mode;

use crate::error::SandboxError;

/// For each directory on the way to a root that `uid`/`gid` cannot search, the entries
/// inside it that lead to roots. Parents sort before their children.
pub fn blocked(roots: &[PathBuf], uid: u32, gid: u32) -> BTreeMap<PathBuf, BTreeSet<OsString>> {
    let mut blocked: BTreeMap<PathBuf, BTreeSet<OsString>> = BTreeMap::new();
    let mut known: std::collections::HashMap<PathBuf, bool> = std::collections::HashMap::new();
    for root in roots {
        // A root that is a symlink is checked where it points. (Symlinks higher up are
        // not resolved, to keep this cheap: an entry bound back follows its symlink
        // anyway; only a symlink into a closed directory elsewhere is missed.)
        let root = match std::fs::symlink_metadata(root) {
            Ok(meta) if meta.file_type().is_symlink() => match std::fs::canonicalize(root) {
                Ok(target) => target,
                Err(_) => continue,
            },
            Ok(_) if root.is_absolute() => root.clone(),
            _ => continue,
        };
        let mut dir = PathBuf::from("/");
        for component in root.components() {
            let Component::Normal(name) = component else { continue };
            let open = *known.entry(dir.clone()).or_insert_with(|| searchable(&dir, uid, gid));
            if dir != Path::new("/") && !open {
                blocked.entry(dir.clone()).or_default().insert(name.to_os_string());
            }
            dir.push(name);
        }
    }
    blocked
}

fn searchable(dir: &Path, uid: u32, gid: u32) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else { return true };
    let mode = meta.mode();
    if meta.uid() == uid {
        mode & 0o100 != 0
    } else if meta.gid() == gid {
        mode & 0o010 != 0
    } else {
        mode & 0o001 != 0
    }
}

/// A tmpfs to mount privately: where, for whom, how large.
#[derive(Debug, Clone, Copy)]
pub struct PrivateTmpfs<'a> {
    pub path: &'a Path,
    pub uid: u32,
    pub gid: u32,
    pub size_bytes: u64,
}

/// Makes `roots` reachable for `uid`/`gid` (see the module doc), covers the `masked`
/// paths with empty mounts ([`crate::mask::mount_masks`]), and mounts `tmpfs`, if given,
/// last. Returns how many directories were covered; when that is 0 and there is no
/// `tmpfs` and nothing masked, nothing was needed and no namespace was made.
pub fn expose(
    roots: &[PathBuf],
    uid: u32,
    gid: u32,
    tmpfs: Option<PrivateTmpfs<'_>>,
    masked: &[PathBuf],
) -> Result<usize, SandboxError> {
    let blocked = blocked(roots, uid, gid);
    if blocked.is_empty() && tmpfs.is_none() && masked.is_empty() {
        return Ok(0);
    }
    let fail = |what: String, e: nix::Error| SandboxError::io(what, std::io::Error::from(e));
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| fail("cannot make a private mount namespace".into(), e))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| fail("cannot make the mount namespace private".into(), e))?;
    for (dir, entries) in &blocked {
        // Hold on to the entries before the tmpfs covers them.
        let mut held = Vec::new();
        for name in entries {
            let path = dir.join(name);
            let fd = open(&path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
                .map_err(|e| fail(format!("cannot open {}", path.display()), e))?;
            let is_dir = std::fs::metadata(&path).map(|m| m.is_dir()).unwrap_or(false);
            held.push((path, fd, is_dir));
        }
        mount(
            Some("tmpfs"),
            dir,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some("mode=0755,size=64k,nr_inodes=1024"),
        )
        .map_err(|e| fail(format!("cannot cover {}", dir.display()), e))?;
        for (path, fd, is_dir) in held {
            let made = if is_dir { std::fs::create_dir(&path) } else { std::fs::write(&path, b"") };
            made.map_err(|e| SandboxError::io(format!("cannot make a mount point at {}", path.display()), e))?;
            let source = format!("/proc/self/fd/{}", fd.as_raw_fd());
            mount(Some(source.as_str()), &path, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
                .map_err(|e| fail(format!("cannot bind {} back", path.display()), e))?;
        }
        tracing::debug!(dir = %dir.display(), "sandbox: covered a directory the sandbox uid cannot search");
    }
    // After the covers, so a masked path under a covered directory is masked in the
    // entry bound back.
    crate::mask::mount_masks(masked)?;
    if let Some(t) = tmpfs {
        // After the covers, so a mount point under a covered directory is the one bound
        // back. (The caller checked that the mount point is a root-owned directory.)
        let options = format!("mode=0700,uid={},gid={},size={}", t.uid, t.gid, t.size_bytes.max(1 << 20));
        mount(Some("tmpfs"), t.path, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(options.as_str()))
            .map_err(|e| fail(format!("cannot mount the private tmpfs on {}", t.path.display()), e))?;
    }
    Ok(blocked.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn finds_the_directories_in_the_way() {
        let dir = tempfile::tempdir().unwrap();
        let closed = dir.path().join("closed");
        std::fs::create_dir_all(closed.join("a/b")).unwrap();
        std::fs::create_dir_all(closed.join("c")).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let me = nix::unistd::geteuid().as_raw();
        let other = 1_900_000_001;
        let roots = [closed.join("a/b"), closed.join("c"), "/usr".into()];
        let blocked = blocked(&roots, other, other);
        assert_eq!(blocked.len(), 1, "{blocked:?}");
        let names: Vec<_> = blocked[&closed].iter().cloned().collect();
        assert_eq!(names, vec![OsString::from("a"), OsString::from("c")]);
        // The owner can search it.
        assert!(super::blocked(&roots, me, me).is_empty());
    }
}
