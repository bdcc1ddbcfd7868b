//! The per-agent uid used when orch runs as root: choosing it, handing the writable
//! roots to it (in the coordinator), and dropping to it (in the tool host).
//!
//! Landlock confines paths, but root still bypasses rlimits (`RLIMIT_NPROC` exempts
//! uid 0), reads root-only files inside read roots (`/etc/shadow`) and signals other
//! root processes where Landlock cannot scope signals. So, as root, the tool host drops
//! to an unprivileged uid of its own, with the same number as gid, no supplementary
//! groups and no capabilities.
//!
//! Sandbox uids come from [`UID_RANGE`] (1 900 000 000 to 1 999 999 999), far above any
//! distribution's user and subuid ranges; [`sandbox_uid`] hashes a seed (the run and
//! agent) into it, so agents of one run, and runs side by side, get different uids.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, geteuid, setgroups, setresgid, setresuid};

use crate::error::SandboxError;
use crate::policy::{Backend, Policy};

/// The uids (and gids) sandboxes run as when orch is root.
pub const UID_RANGE: std::ops::Range<u32> = 1_900_000_000..2_000_000_000;

/// A sandbox uid for `seed` (such as `"<run id>/<agent>"`), from [`UID_RANGE`]. Stable
/// for a seed (FNV-1a), so the coordinator can recompute it.
pub fn sandbox_uid(seed: &str) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in seed.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let span = u64::from(UID_RANGE.end - UID_RANGE.start);
    UID_RANGE.start + (hash % span) as u32
}

/// Whether this process runs as root (euid 0).
pub fn is_root() -> bool {
    geteuid().is_root()
}

/// Drops every uid and gid to `uid` (same number as gid), clears supplementary groups,
/// and checks that no capability is left. Sets the process dumpable again (a uid change
/// clears it) so the check can read `/proc/self/status`; [`crate::confine`] makes the
/// host non-dumpable right after.
pub fn drop_to(uid: u32) -> Result<(), SandboxError> {
    let fail = |step: &str, e: nix::Error| SandboxError::Privileges { uid, message: format!("{step}: {}", e.desc()) };
    let (u, g) = (Uid::from_raw(uid), Gid::from_raw(uid));
    setgroups(&[]).map_err(|e| fail("setgroups", e))?;
    setresgid(g, g, g).map_err(|e| fail("setresgid", e))?;
    setresuid(u, u, u).map_err(|e| fail("setresuid", e))?;
    nix::sys::prctl::set_dumpable(true).map_err(|e| fail("PR_SET_DUMPABLE", e))?;
    verify_dropped(uid)
}

/// Reads `/proc/self/status` and checks every uid and gid is `uid` and the permitted,
/// effective and ambient capability sets are empty.
pub fn verify_dropped(uid: u32) -> Result<(), SandboxError> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| SandboxError::io("cannot read /proc/self/status to check the uid drop", e))?;
    let problem = |message: String| SandboxError::Privileges { uid, message };
    for line in status.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        match key {
            "Uid" | "Gid" if value.split_whitespace().any(|id| id != uid.to_string()) => {
                return Err(problem(format!("{key} is still `{value}`")));
            }
            "Groups" if !value.is_empty() => return Err(problem(format!("supplementary groups `{value}` remain"))),
            "CapPrm" | "CapEff" | "CapAmb" if u64::from_str_radix(value, 16) != Ok(0) => {
                return Err(problem(format!("capabilities remain ({key} {value})")));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Who owned each writable root before [`prepare_writable`] handed it to the sandbox
/// uid. [`Handover::restore`] hands everything under those roots back.
#[derive(Debug, Default)]
pub struct Handover {
    roots: Vec<(PathBuf, u32, u32)>,
}

impl Handover {
    /// Whether anything was handed over (only as root, landlock backend, with a uid).
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// Gives every file under the roots (those the sandbox created too) back to the
    /// owner each root had before. Failures are logged, not returned: this runs during
    /// teardown.
    pub fn restore(self) {
        for (root, uid, gid) in self.roots {
            if let Err(e) = chown_tree(&root, uid, gid) {
                tracing::warn!(root = %root.display(), "could not hand the directory back to uid {uid}: {e}");
            }
        }
    }
}

/// Coordinator side, before the tool host starts: when orch runs as root, hands every
/// writable root of a landlock `policy` to its sandbox uid (`chown -R`, not following
/// symlinks or crossing into other file systems). A no-op for a normal user, where the
/// sandbox keeps the user's uid. Refuses roots that would hand over the system: `/`,
/// system directories, a home directory itself, or an ancestor of a read root.
pub fn prepare_writable(policy: &Policy) -> Result<Handover, SandboxError> {
    if policy.backend != Backend::Landlock || !is_root() {
        return Ok(Handover::default());
    }
    let uid = policy.uid.ok_or(SandboxError::NoSandboxUid)?;
    if !UID_RANGE.contains(&uid) {
        return Err(SandboxError::InvalidPolicy(format!(
            "the sandbox uid {uid} is outside {}..{}; pick it with orch_sandbox::sandbox_uid",
            UID_RANGE.start, UID_RANGE.end
        )));
    }
    let mut handover = Handover::default();
    // The private tmpfs's mount point stays root's: the sandbox gets a tmpfs of its own
    // mounted on it (see `crate::traverse`).
    for root in policy.write.iter().filter(|r| policy.private_tmpfs.as_ref() != Some(*r)) {
        check_write_root(root, &policy.read)?;
        let meta = std::fs::symlink_metadata(root)
            .map_err(|e| SandboxError::io(format!("cannot use the writable root {}", root.display()), e))?;
        handover.roots.push((root.clone(), meta.uid(), meta.gid()));
        chown_tree(root, uid, uid)
            .map_err(|e| SandboxError::io(format!("cannot hand {} to the sandbox uid {uid}", root.display()), e))?;
    }
    Ok(handover)
}

/// Directories no sandbox may own.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/opt", "/proc", "/root", "/run",
    "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/tmp",
];

fn check_write_root(root: &Path, read: &[PathBuf]) -> Result<(), SandboxError> {
    let unsafe_root = |reason| Err(SandboxError::UnsafeWriteRoot { path: root.to_path_buf(), reason });
    if !root.is_absolute() {
        return unsafe_root("it is not an absolute path");
    }
    if SYSTEM_DIRS.iter().any(|d| root == Path::new(d)) {
        return unsafe_root("it is a system directory");
    }
    if std::env::var_os("HOME").is_some_and(|h| Path::new(&h) == root) {
        return unsafe_root("it is the home directory");
    }
    if read.iter().any(|r| r != root && r.starts_with(root)) {
        return unsafe_root("it holds a read-only root");
    }
    Ok(())
}

/// `chown -R uid:gid root`, without following symlinks or leaving root's file system.
pub(crate) fn chown_tree(root: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    let dev = std::fs::symlink_metadata(root)?.dev();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let meta = std::fs::symlink_metadata(&path)?;
        if meta.dev() != dev {
            continue;
        }
        if meta.uid() != uid || meta.gid() != gid {
            std::os::unix::fs::lchown(&path, Some(uid), Some(gid))?;
        }
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path)? {
                stack.push(entry?.path());
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_uids_are_stable_in_range_and_spread() {
        let a = sandbox_uid("run-1/fix-3");
        assert_eq!(a, sandbox_uid("run-1/fix-3"));
        assert!(UID_RANGE.contains(&a));
        let many: std::collections::BTreeSet<u32> = (0..1000).map(|i| sandbox_uid(&format!("run/{i}"))).collect();
        assert_eq!(many.len(), 1000, "collisions among 1000 agents");
        assert!(many.iter().all(|u| UID_RANGE.contains(u)));
    }

    #[test]
    fn refuses_to_hand_over_the_system() {
        let read = vec![PathBuf::from("/usr"), PathBuf::from("/work/tree/vendor")];
        for bad in ["/", "/usr", "/etc", "/tmp", "relative/dir", "/work"] {
            let err = check_write_root(Path::new(bad), &read);
            assert!(matches!(err, Err(SandboxError::UnsafeWriteRoot { .. })), "{bad} was accepted");
        }
        // `/work` holds the read root `/work/tree/vendor`; the tree itself is fine.
        assert!(check_write_root(Path::new("/work/tree/vendor/x"), &read).is_ok());
        assert!(check_write_root(Path::new("/tmp/orch-1/agent"), &read).is_ok());
    }
}
