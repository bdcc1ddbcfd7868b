//! Root only: a tool host's own view of `/proc`, in which the processes of other uids
//! do not exist.
//!
//! `/proc/<pid>/cmdline` can be read by anyone, whatever the uid, and Landlock does not
//! govern it; neither does ptrace scoping. As root, every agent's tool host runs under its
//! own uid, so a fresh instance of procfs mounted with `hidepid=invisible` on `/proc`, in
//! a private mount namespace (made a slave of the host's, so nothing propagates back),
//! shows an agent its own processes only: not another agent's, nor the coordinator's.
//!
//! Needs CAP_SYS_ADMIN and Linux 5.8 (one procfs instance per mount, each with its own
//! options); seccomp denies mount calls to everything started afterwards. As a normal
//! user this is impossible without a user and pid namespace of its own, which the tool
//! host does not make: there, agents of one run see each other's command lines (the
//! README's threat model says so).

use nix::mount::{MsFlags, mount};
use nix::sched::{CloneFlags, unshare};

use crate::error::SandboxError;

/// Mounts a procfs that hides other uids' processes on `/proc`, in a new private mount
/// namespace of the calling process (which must still be root). The caller drops to
/// its sandbox uid afterwards.
pub fn hide_other_uids() -> Result<(), SandboxError> {
    let fail = |what: &str, e: nix::Error| SandboxError::io(what.to_owned(), std::io::Error::from(e));
    unshare(CloneFlags::CLONE_NEWNS).map_err(|e| fail("cannot make a private mount namespace for /proc", e))?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_SLAVE, None::<&str>)
        .map_err(|e| fail("cannot make the mount namespace private", e))?;
    mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some("hidepid=invisible"),
    )
    .map_err(|e| fail("cannot mount /proc with hidepid=invisible", e))
}
