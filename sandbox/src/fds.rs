//! No stray descriptors across a sandbox boundary. Whatever started orch may have left
//! descriptors open above 2 without close-on-exec (a file, a directory, a pipe, a
//! socket); Landlock and the uid drop check paths only when a file is opened, so a
//! descriptor that reaches a sandbox opens its file to it whatever the policy says.
//!
//! - [`cloexec_all_but`] marks every descriptor from 3 up, except a kept set,
//!   close-on-exec: `main` calls it first thing (none kept), and each child that is
//!   about to `exec` into a sandbox calls it between `fork` and `exec` (the zygote with
//!   its socket kept, `orch sandbox run`'s command, each `Bash` command), so only 0-2
//!   and the kept set survive the `exec`.
//! - [`close_all_but`] closes them: the tool host at its start ([`crate::confine`]) and
//!   each host the zygote forks (it never execs).
//!
//! Both are one `close_range(2)` per gap of the kept set (Linux 5.11 for
//! `CLOSE_RANGE_CLOEXEC`); only an older kernel gets the descriptor-by-descriptor loop
//! up to `RLIMIT_NOFILE`. Both make only system calls (no allocation, no locks), so they
//! are safe between `clone` and `exec`.
#![allow(unsafe_code)] // raw close_range, fcntl, close and getrlimit; see the SAFETY notes.

use std::io;
use std::os::fd::RawFd;

/// `CLOSE_RANGE_CLOEXEC` of the kernel's UAPI (`linux/close_range.h`).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// The highest descriptor the fallback loop visits when `RLIMIT_NOFILE` is unlimited.
const FALLBACK_CAP: u64 = 1 << 20;

/// Marks every descriptor from 3 up close-on-exec, except those in `keep` (ascending;
/// values below 3 are ignored). Async-signal-safe.
pub fn cloexec_all_but(keep: &[RawFd]) -> io::Result<()> {
    sweep(keep, CLOSE_RANGE_CLOEXEC)
}

/// Closes every descriptor from 3 up, except those in `keep` (ascending; values below 3
/// are ignored). Async-signal-safe. Nothing of this process may own a descriptor it
/// closes: call it where nothing but 0-2 and `keep` is in use.
pub fn close_all_but(keep: &[RawFd]) -> io::Result<()> {
    sweep(keep, 0)
}

fn sweep(keep: &[RawFd], flags: libc::c_uint) -> io::Result<()> {
    let mut low: libc::c_uint = 3;
    for &fd in keep {
        let Ok(fd) = libc::c_uint::try_from(fd) else { continue };
        if fd < low {
            continue;
        }
        if fd > low {
            range(low, fd - 1, flags)?;
        }
        low = fd + 1;
    }
    range(low, libc::c_uint::MAX, flags)
}

/// One `close_range(low, high, flags)`, or the loop when the kernel lacks it.
fn range(low: libc::c_uint, high: libc::c_uint, flags: libc::c_uint) -> io::Result<()> {
    // SAFETY: close_range takes integers only; it acts on this process's table.
    let done = unsafe { libc::syscall(libc::SYS_close_range, low, high, flags) };
    if done == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // No close_range (before 5.9), or no CLOSE_RANGE_CLOEXEC (before 5.11).
        Some(libc::ENOSYS | libc::EINVAL) => {}
        _ => return Err(err),
    }
    let limit = open_limit().min(u64::from(high) + 1);
    let mut fd = u64::from(low);
    while fd < limit {
        let raw = fd as RawFd;
        // SAFETY: fcntl and close on a descriptor number; EBADF for one not open is
        // ignored.
        unsafe {
            if flags & CLOSE_RANGE_CLOEXEC != 0 {
                libc::fcntl(raw, libc::F_SETFD, libc::FD_CLOEXEC);
            } else {
                libc::close(raw);
            }
        }
        fd += 1;
    }
    Ok(())
}

/// One above the highest descriptor this process can have open.
fn open_limit() -> u64 {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return FALLBACK_CAP;
    }
    limit.rlim_cur.min(FALLBACK_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    fn cloexec(fd: RawFd) -> bool {
        // SAFETY: F_GETFD on a descriptor number.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert!(flags >= 0, "fd {fd} is not open");
        flags & libc::FD_CLOEXEC != 0
    }

    fn open_without_cloexec() -> RawFd {
        let fd = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        // SAFETY: clears the flag of a descriptor this test owns.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFD, 0) }, 0);
        fd
    }

    #[test]
    fn marks_all_but_the_kept_ones_and_closes_in_a_child() {
        let (a, b, c) = (open_without_cloexec(), open_without_cloexec(), open_without_cloexec());
        cloexec_all_but(&[b]).unwrap();
        assert!(cloexec(a) && !cloexec(b) && cloexec(c));
        // Closing happens in a child, so the test harness keeps its own descriptors.
        // SAFETY: the child only makes system calls and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = close_all_but(&[c]).is_ok()
                // SAFETY: F_GETFD on descriptor numbers.
                && unsafe { libc::fcntl(a, libc::F_GETFD) } < 0
                && unsafe { libc::fcntl(b, libc::F_GETFD) } < 0
                && unsafe { libc::fcntl(c, libc::F_GETFD) } >= 0
                && unsafe { libc::fcntl(2, libc::F_GETFD) } >= 0;
            // SAFETY: ends the forked child without running the harness's destructors.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "status {status}");
        for fd in [a, b, c] {
            // SAFETY: closes descriptors this test opened.
            unsafe { libc::close(fd) };
        }
    }
}
