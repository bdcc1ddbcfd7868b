//! Keeping a tool host out of its commands' reach: [`enter_command_domain`] puts a
//! freshly forked command into a Landlock domain of its own, nested under the host's,
//! that scopes signals and abstract Unix sockets (Landlock ABI 6+), and, when the host
//! prepared one ([`set_command_ruleset`]), into the file ruleset that keeps masked
//! paths out of commands' reach.
//!
//! A tool host and the commands it forks share a Landlock domain (and, as a normal
//! user or in a container, a uid), so without this a command could `kill -9 $PPID`,
//! signal the host's process group or use a pidfd on it. In a nested domain with
//! `LANDLOCK_SCOPE_SIGNAL`, the command can signal only processes of its own domain and
//! the ones nested below it (its own children): the host, the coordinator, other
//! agents and other commands of the same host are all outside. Landlock also denies
//! `ptrace` and the ptrace-guarded `/proc/<pid>` files (`fd`, `mem`, `environ`) from a
//! domain to any process outside it, on top of the host being non-dumpable
//! ([`crate::confine`]). The host can still signal and reap its commands: they are
//! nested below it.
//!
//! The function runs between `clone` and `exec` in a child that shares the host's memory
//! (orch's `Bash` starts commands with `CLONE_VM | CLONE_VFORK`, see
//! `orch_agents::tools::bash`), so it only makes raw system calls (no allocation, no
//! locks) and fails with OS errors only. On a kernel whose
//! Landlock lacks scoping (ABI < 6) it does nothing: there, only the per-agent uid
//! (root) or the container keeps a command from signalling its host.

use std::io;
use std::os::fd::{IntoRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The prepared Landlock ruleset commands enter besides their scoping domain (the
/// masked paths of a normal user's sandbox, see [`crate::mask`]), or -1.
static COMMAND_RULESET: AtomicI32 = AtomicI32::new(-1);

/// Makes every command forked afterwards enter `ruleset` too (in
/// [`enter_command_domain`]). The descriptor is kept for the life of the process.
pub fn set_command_ruleset(ruleset: OwnedFd) {
    let old = COMMAND_RULESET.swap(ruleset.into_raw_fd(), Ordering::SeqCst);
    if old >= 0 {
        // SAFETY: `old` came from `into_raw_fd` above and nothing else owns it.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(old)
        };
    }
}

const SCOPE_ABSTRACT_UNIX_SOCKET: u64 = 1 << 0;
const SCOPE_SIGNAL: u64 = 1 << 1;
const CREATE_RULESET_VERSION: libc::c_uint = 1 << 0;
/// The first Landlock ABI with scoping.
const SCOPE_ABI: libc::c_long = 6;

/// `struct landlock_ruleset_attr` of the kernel's UAPI (ABI 6 layout).
#[repr(C)]
struct RulesetAttr {
    handled_access_fs: u64,
    handled_access_net: u64,
    scoped: u64,
}

/// Enters a new Landlock domain that handles no file or network access and scopes
/// signals and abstract Unix sockets, and sets no_new_privs (which Landlock needs).
/// Meant for `pre_exec`: async-signal-safe. Fails (so the command does not start) only
/// when the kernel has scoping and still refuses it; does nothing when Landlock has no
/// scoping.
#[allow(unsafe_code)] // raw Landlock system calls; see the SAFETY notes.
pub fn enter_command_domain() -> io::Result<()> {
    let attr =
        RulesetAttr { handled_access_fs: 0, handled_access_net: 0, scoped: SCOPE_SIGNAL | SCOPE_ABSTRACT_UNIX_SOCKET };
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let prepared = COMMAND_RULESET.load(Ordering::SeqCst);
    if prepared >= 0 {
        // SAFETY: `prepared` is a Landlock ruleset descriptor this process holds for
        // its whole life (see `set_command_ruleset`); restricting takes no pointer.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, prepared, 0 as libc::c_uint) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    // SAFETY: `attr` is a valid, initialised `landlock_ruleset_attr` that outlives the
    // call, and its size is passed alongside it.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttr,
            std::mem::size_of::<RulesetAttr>(),
            0 as libc::c_uint,
        )
    };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return if scoping_available() { Err(err) } else { Ok(()) };
    }
    // SAFETY: `fd` is the ruleset descriptor just created; it is closed right after.
    let restricted = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0 as libc::c_uint) };
    let err = io::Error::last_os_error();
    // SAFETY: closes the descriptor created above, owned by nothing else.
    unsafe { libc::close(fd as libc::c_int) };
    if restricted != 0 {
        return Err(err);
    }
    Ok(())
}

/// The tool host's spawn hook for every command: only 0-2 survive its `exec`
/// ([`crate::fds::cloexec_all_but`]), and it enters its own domain
/// ([`enter_command_domain`]). Async-signal-safe, like both.
pub fn enter_command() -> io::Result<()> {
    crate::fds::cloexec_all_but(&[])?;
    enter_command_domain()
}

/// Whether the running kernel's Landlock can scope signals (ABI 6 or later).
#[allow(unsafe_code)] // one raw system call with a null attribute, as the UAPI documents.
pub fn scoping_available() -> bool {
    // SAFETY: asking for the ABI version takes a null attribute and size 0.
    let abi = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<RulesetAttr>(),
            0usize,
            CREATE_RULESET_VERSION,
        )
    };
    abi >= SCOPE_ABI
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_scopes_signals() {
        // The CI machine has ABI 7: a kernel without scoping would make the host's
        // signal protection a no-op, so say so here rather than pass vacuously.
        assert!(scoping_available(), "landlock on this machine cannot scope signals (ABI < 6)");
    }
}
