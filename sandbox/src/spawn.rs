//! Confining a command that is about to be executed: [`confine_on_exec`] makes a
//! `std::process::Command` run [`crate::confine`] in the forked child, before `exec`.
//! That is how `orch sandbox run` starts its one command without a tool host runtime.
#![allow(unsafe_code)] // `CommandExt::pre_exec` is an unsafe API; see the SAFETY note.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::confine::{confine_with, thread_count};
use crate::error::SandboxError;
use crate::policy::Policy;

/// The errno `spawn` reports when confinement (not `exec`) failed in the child. The
/// child has already written the reason to its stderr.
pub const CONFINE_FAILED_ERRNO: i32 = libc::ENOTRECOVERABLE;

/// Arranges for the child of `command` to confine itself under `policy` after `fork`
/// and before `exec`, and to be killed if this process dies (`PR_SET_PDEATHSIG`).
///
/// The calling process must have a single thread: the child runs ordinary Rust code
/// (allocation, file I/O) between `fork` and `exec`, which is only sound when no other
/// thread could have held a lock at the fork. Fails with [`SandboxError::Threads`]
/// otherwise. If confinement fails in the child, `spawn` returns an error whose
/// `raw_os_error()` is [`CONFINE_FAILED_ERRNO`].
pub fn confine_on_exec(command: &mut Command, policy: Policy) -> Result<(), SandboxError> {
    let threads = thread_count();
    if threads != 1 {
        return Err(SandboxError::Threads(threads));
    }
    let parent = std::process::id();
    let hook = move || {
        // The parent may block signals it waits for (a signalfd); the command must not
        // start with them blocked.
        nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&nix::sys::signal::SigSet::empty()),
            None,
        )?;
        // Only 0-2 reach the command; std's own error pipe is close-on-exec already.
        crate::fds::cloexec_all_but(&[])?;
        confine_child(&policy, parent)
    };
    // SAFETY: the hook runs in the child between fork and exec. The parent has one
    // thread (checked above; the caller must not start threads before spawning), so
    // the child's copy of the heap and of std's locks is consistent and the hook may
    // allocate and do I/O. It touches nothing shared with the parent.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(())
}

fn confine_child(policy: &Policy, parent: u32) -> std::io::Result<()> {
    // In a container, the command gets its own signal-scoped Landlock domain (before
    // the seccomp filter, which may forbid creating one), so it cannot signal, ptrace
    // or read /proc of the orch that runs it. The landlock backend's own domain does
    // this already.
    if policy.backend == crate::policy::Backend::Container {
        crate::scope::enter_command_domain()?;
    }
    // The parent had one thread (checked), so this fork child has exactly one.
    match confine_with(policy, false) {
        Ok(_) => {
            // Die with the parent; checked after arming, in case it already died.
            let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
            if nix::unistd::getppid().as_raw() as u32 != parent {
                return Err(std::io::Error::from_raw_os_error(CONFINE_FAILED_ERRNO));
            }
            Ok(())
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "orch: sandbox: {e}");
            Err(std::io::Error::from_raw_os_error(CONFINE_FAILED_ERRNO))
        }
    }
}
