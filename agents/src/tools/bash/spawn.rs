//! Starting a `Bash` command: [`spawn`] creates the shell with `clone(CLONE_VM |
//! CLONE_VFORK)`, as `posix_spawn` does, instead of `fork`, and still runs the tool
//! host's spawn hook (a raw-syscall function, see `set_spawn_hook`) in the child before
//! `exec`. `std`'s `pre_exec` would force a real `fork`: the parent's page tables are
//! copied and every page it writes afterwards takes a copy-on-write fault, which cost a
//! running tool host a sixth of each `Bash true` call. Here the child borrows the
//! parent's memory until `exec` (the calling thread waits), and only reads what the
//! parent prepared.
//!
//! [`Child`] is what the shell is to the rest of `Bash`: its pid, its stdout and stderr
//! pipes (tokio), an async `wait` on a pidfd, and a SIGKILL when dropped unreaped.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;

use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

/// A function run in the child between `clone` and `exec`. It shares the parent's
/// memory there: it may only make system calls (no allocation, no locks) and must
/// report failure as an OS error.
pub type Hook = fn() -> io::Result<()>;

/// The child's stack until `exec`: it runs the signal reset, a few `dup2`s and the hook,
/// all with small, fixed frames.
const CHILD_STACK: usize = 64 * 1024;
/// Signals 1..NSIG (glibc's `_NSIG`, x86_64 and aarch64).
const NSIG: libc::c_int = 65;

/// Starts `program` with `args` in `cwd`, in a new process group, stdin on /dev/null
/// and stdout and stderr on pipes, with this process's environment and `env` over it, running `hook` in
/// the child before `exec`. `program` without a `/` is looked up in `PATH`; a program
/// that is not found gives an error of kind [`io::ErrorKind::NotFound`]. An error of
/// the hook (or of `chdir`, `exec`) is returned as that OS error, and no child is left.
pub fn spawn(program: &str, args: &[&str], cwd: &Path, env: &[(&str, &str)], hook: Option<Hook>) -> io::Result<Child> {
    let path = resolve(program)?;
    let cstr = |bytes: &[u8]| CString::new(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let path = cstr(path.as_os_str().as_bytes())?;
    let cwd = cstr(cwd.as_os_str().as_bytes())?;
    let mut argv_owned = vec![cstr(program.as_bytes())?];
    for arg in args {
        argv_owned.push(cstr(arg.as_bytes())?);
    }
    let envp_owned = std::env::vars_os()
        .filter(|(k, _)| !env.iter().any(|(name, _)| k.as_bytes() == name.as_bytes()))
        .chain(env.iter().map(|(k, v)| (OsString::from(k), OsString::from(v))))
        .map(|(k, v)| {
            let mut kv: OsString = k;
            kv.push("=");
            kv.push(v);
            // A variable with a NUL cannot be passed on; std leaves it out as well.
            CString::new(kv.into_vec()).ok()
        })
        .collect::<Vec<_>>();
    let argv = null_terminated(argv_owned.iter());
    let envp = null_terminated(envp_owned.iter().flatten());

    let stdin = above_stdio(OwnedFd::from(std::fs::File::open("/dev/null")?))?;
    let (out_read, out_write) = pipe_pair()?;
    let (err_read, err_write) = pipe_pair()?;

    let mut args = ChildArgs {
        path: path.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: cwd.as_ptr(),
        fds: [stdin.as_raw_fd(), out_write.as_raw_fd(), err_write.as_raw_fd()],
        hook,
        errno: 0,
    };
    let mut stack: Vec<u8> = Vec::with_capacity(CHILD_STACK);
    // The stack grows down from its 16-byte aligned top.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK) & !15;
    let mut pidfd: libc::c_int = -1;

    let (pid, clone_error) = with_signals_blocked(|| {
        // SAFETY: `child_main` only reads `args` (alive on this frame until clone
        // returns: CLONE_VFORK suspends this thread until the child has exec'd or
        // exited) and writes `args.errno`; it runs on `stack`, which is not touched
        // otherwise and outlives the call. All signals are blocked, so no handler of
        // this process runs in the child before it resets them. `pidfd` receives the
        // child's pidfd (CLONE_PIDFD).
        #[allow(unsafe_code)]
        let pid = unsafe {
            libc::clone(
                child_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_PIDFD | libc::SIGCHLD,
                (&raw mut args).cast::<libc::c_void>(),
                &raw mut pidfd,
            )
        };
        (pid, io::Error::last_os_error())
    })?;
    drop(stack);
    drop((stdin, out_write, err_write));
    if pid < 0 {
        return Err(clone_error);
    }
    // SAFETY: with CLONE_PIDFD the kernel stored a new descriptor there that nothing
    // else owns.
    #[allow(unsafe_code)]
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: the child is done with `args` (it exec'd or exited); the volatile read
    // sees what it wrote into this shared memory.
    #[allow(unsafe_code)]
    let errno = unsafe { std::ptr::read_volatile(&raw const args.errno) };
    if errno != 0 {
        // The child exited (status 127) without exec: reap it, then report why.
        let _ = reap(pid, true);
        return Err(io::Error::from_raw_os_error(errno));
    }
    let registered = if tokio::runtime::Handle::try_current().is_ok() {
        // SAFETY: `pidfd` is an open descriptor the `AsyncFd` owns from now on, and an
        // `OwnedFd` always returns that same descriptor.
        #[allow(unsafe_code)]
        unsafe {
            AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE).map_err(|e| e.into_parts().1)
        }
    } else {
        Err(io::Error::other("Bash commands must be started inside a tokio runtime"))
    };
    let pidfd = match registered {
        Ok(pidfd) => pidfd,
        Err(e) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            let _ = reap(pid, true);
            return Err(e);
        }
    };
    // From here on, dropping `child` kills and reaps the shell.
    let mut child = Child { pid, pidfd: Some(pidfd), status: None, stdout: None, stderr: None };
    child.stdout = Some(receiver(out_read)?);
    child.stderr = Some(receiver(err_read)?);
    Ok(child)
}

/// A started shell. Dropped before it was reaped, it is killed (SIGKILL) and reaped in
/// the background.
#[derive(Debug)]
pub struct Child {
    pid: libc::pid_t,
    /// Readable once the child has exited; `None` once it was reaped.
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
    pub stdout: Option<pipe::Receiver>,
    pub stderr: Option<pipe::Receiver>,
}

impl Child {
    /// The child's pid (also its process group), until it has been reaped.
    pub fn id(&self) -> Option<u32> {
        self.status.is_none().then(|| u32::try_from(self.pid).ok()).flatten()
    }

    /// Waits for the child to exit and reaps it; cancel-safe, and callable again after.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            let Some(pidfd) = &self.pidfd else {
                return Err(io::Error::other("the child was neither running nor reaped"));
            };
            let mut ready = pidfd.readable().await?;
            match reap(self.pid, false)? {
                Some(status) => {
                    self.status = Some(status);
                    self.pidfd = None;
                }
                None => ready.clear_ready(),
            }
        }
    }

    /// Sends SIGKILL to the child unless it has been reaped.
    pub fn start_kill(&mut self) -> io::Result<()> {
        if self.status.is_some() {
            return Ok(());
        }
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL)
            .map_err(io::Error::from)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let _ = self.start_kill();
        if let Ok(Some(_)) = reap(self.pid, false) {
            return;
        }
        // Killed but not gone yet: reap it when it is, as tokio's `kill_on_drop` does.
        let Some(pidfd) = self.pidfd.take() else { return };
        let pid = self.pid;
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                loop {
                    let Ok(mut ready) = pidfd.readable().await else { return };
                    match reap(pid, false) {
                        Ok(None) => ready.clear_ready(),
                        _ => return,
                    }
                }
            });
        }
    }
}

/// The pointers the child reads, prepared by the parent (no allocation in the child).
struct ChildArgs {
    path: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// What becomes the child's fds 0, 1 and 2 (each above 2, see [`above_stdio`]).
    fds: [RawFd; 3],
    hook: Option<Hook>,
    /// Set by the child when it fails before `exec`.
    errno: libc::c_int,
}

/// The child, between `clone` and `exec`. Only system calls and reads of `ChildArgs`.
#[allow(unsafe_code)]
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `ChildArgs` the parent passed, alive while it waits (vfork).
    let args = unsafe { &mut *arg.cast::<ChildArgs>() };
    let fail = |args: &mut ChildArgs, errno: libc::c_int| -> ! {
        // SAFETY: a plain store into the parent's (suspended) frame, then `_exit`,
        // which runs no atexit handler or destructor of the shared memory.
        unsafe {
            std::ptr::write_volatile(&raw mut args.errno, if errno == 0 { libc::EIO } else { errno });
            libc::_exit(127)
        }
    };
    let last_errno = || io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    // SAFETY (whole block): system calls on this process's own state with valid,
    // stack-local or parent-prepared arguments.
    unsafe {
        // No handler of the parent may run here (it would run on shared memory), so
        // every caught signal goes back to its default before signals are unblocked;
        // ignored ones stay ignored across exec, except SIGPIPE, which Rust ignores for
        // itself and commands expect at its default (std resets it the same way).
        for sig in 1..NSIG {
            if sig == libc::SIGKILL || sig == libc::SIGSTOP {
                continue;
            }
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, std::ptr::null(), &mut old) != 0 {
                continue; // glibc's internal signals
            }
            if sig == libc::SIGPIPE || (old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN) {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(sig, &default, std::ptr::null_mut());
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) != 0 {
            fail(args, last_errno());
        }
        for (target, fd) in (0..).zip(args.fds) {
            if libc::dup2(fd, target) < 0 {
                fail(args, last_errno());
            }
        }
        if libc::chdir(args.cwd) != 0 {
            fail(args, last_errno());
        }
        if libc::setpgid(0, 0) != 0 {
            fail(args, last_errno());
        }
    }
    if let Some(hook) = args.hook
        && let Err(e) = hook()
    {
        let errno = e.raw_os_error().unwrap_or(libc::EPERM);
        // Dropping a custom error would free memory of the parent's heap.
        std::mem::forget(e);
        fail(args, errno);
    }
    // SAFETY: NUL-terminated strings and NULL-terminated arrays prepared by the parent.
    unsafe { libc::execve(args.path, args.argv, args.envp) };
    fail(args, last_errno())
}

/// Runs `f` with every signal blocked on this thread, then restores the mask.
fn with_signals_blocked<T>(f: impl FnOnce() -> T) -> io::Result<T> {
    use nix::sys::signal::{SigSet, SigmaskHow, pthread_sigmask};
    let mut old = SigSet::empty();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), Some(&mut old)).map_err(io::Error::from)?;
    let out = f();
    pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None).map_err(io::Error::from)?;
    Ok(out)
}

/// `program` itself when it holds a `/`, else the first executable file of that name
/// in a `PATH` directory (as `execvp` searches).
fn resolve(program: &str) -> io::Result<PathBuf> {
    if program.contains('/') {
        return Ok(PathBuf::from(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    for dir in std::env::split_paths(&path) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = dir.join(program);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(io::Error::new(io::ErrorKind::NotFound, format!("{program} is not in PATH")))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A NULL-terminated array of the strings' pointers (they must outlive it).
fn null_terminated<'a>(strings: impl Iterator<Item = &'a CString>) -> Vec<*const libc::c_char> {
    strings.map(|s| s.as_ptr()).chain(std::iter::once(std::ptr::null())).collect()
}

/// `fd` moved above 0, 1 and 2, so the child's `dup2` into 0..=2 cannot overwrite a
/// descriptor it has yet to duplicate (only when this process had one of them closed).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_DUPFD_CLOEXEC(3)).map_err(io::Error::from).map(|raw| {
        // SAFETY: F_DUPFD_CLOEXEC returned a new descriptor that nothing else owns.
        #[allow(unsafe_code)]
        unsafe {
            OwnedFd::from_raw_fd(raw)
        }
    })
}

/// A pipe, both ends close-on-exec (the child gets the write end through `dup2`).
fn pipe_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    Ok((above_stdio(read)?, above_stdio(write)?))
}

/// The read end of a pipe as a tokio receiver (non-blocking from now on).
fn receiver(read: OwnedFd) -> io::Result<pipe::Receiver> {
    let flags = nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_GETFL).map_err(io::Error::from)?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(io::Error::from)?;
    pipe::Receiver::from_owned_fd_unchecked(read)
}

/// Reaps `pid` if it has exited (or waits for it, with `block`): its status, or `None`
/// while it runs.
fn reap(pid: libc::pid_t, block: bool) -> io::Result<Option<ExitStatus>> {
    let flags = if block { 0 } else { libc::WNOHANG };
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: waitpid with a valid out-pointer.
        #[allow(unsafe_code)]
        let got = unsafe { libc::waitpid(pid, &mut status, flags) };
        if got == pid {
            return Ok(Some(ExitStatus::from_raw(status)));
        }
        if got == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn output(child: &mut Child) -> (String, ExitStatus) {
        let mut out = String::new();
        if let Some(mut pipe) = child.stdout.take() {
            pipe.read_to_string(&mut out).await.unwrap();
        }
        (out, child.wait().await.unwrap())
    }

    fn status_field(status: &str, key: &str) -> String {
        status.lines().find_map(|l| l.strip_prefix(key)).unwrap_or_default().trim().to_owned()
    }

    fn no_new_privs() -> io::Result<()> {
        // SAFETY: prctl with integer arguments.
        #[allow(unsafe_code)]
        let done = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
        if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }

    fn refuse() -> io::Result<()> {
        Err(io::Error::from_raw_os_error(libc::EACCES))
    }

    #[tokio::test]
    async fn runs_the_hook_in_the_child_only_with_clean_signals_and_its_own_group() {
        let dir = tempfile::tempdir().unwrap();
        let script = "cat /proc/self/status; echo cwd=$(pwd -P); echo pgid=$(cut -d' ' -f5 /proc/$$/stat)";
        let mut child = spawn("sh", &["-c", script], dir.path(), &[], Some(no_new_privs)).unwrap();
        let pid = child.id().unwrap();
        let (out, status) = output(&mut child).await;
        assert!(status.success(), "{out}");
        assert_eq!(status_field(&out, "NoNewPrivs:"), "1", "the hook ran in the child: {out}");
        let mine = std::fs::read_to_string("/proc/self/status").unwrap();
        assert_eq!(status_field(&mine, "NoNewPrivs:"), "0", "and not in this process");
        assert_eq!(status_field(&out, "SigBlk:"), "0000000000000000", "no signal stays blocked: {out}");
        let ignored = u64::from_str_radix(&status_field(&out, "SigIgn:"), 16).unwrap();
        assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE is back at its default: {out}");
        assert!(out.contains(&format!("cwd={}", dir.path().canonicalize().unwrap().display())), "{out}");
        assert!(out.lines().any(|l| l == format!("pgid={pid}")), "its own process group: {out}");
        assert_eq!(child.id(), None, "reaped");
    }

    #[tokio::test]
    async fn a_failing_hook_or_directory_stops_the_command_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("ran");
        let touch = format!("touch {}", marker.display());
        let err = spawn("sh", &["-c", &touch], dir.path(), &[], Some(refuse)).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
        let err = spawn("sh", &["-c", &touch], &dir.path().join("missing"), &[], None).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
        let err = spawn("orch-no-such-shell", &["-c", &touch], dir.path(), &[], None).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!marker.exists(), "the command must not have run");
    }

    #[tokio::test]
    async fn reports_exit_codes_and_signals() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = spawn("sh", &["-c", "echo out; echo err >&2; exit 3"], dir.path(), &[], None).unwrap();
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).await.unwrap();
        let (out, status) = output(&mut child).await;
        assert_eq!((out.as_str(), err.as_str(), status.code()), ("out\n", "err\n", Some(3)));
        assert_eq!(child.wait().await.unwrap().code(), Some(3), "wait again gives the same status");
        let mut child = spawn("sh", &["-c", "sleep 30"], dir.path(), &[], None).unwrap();
        child.start_kill().unwrap();
        assert_eq!(child.wait().await.unwrap().signal(), Some(libc::SIGKILL));
    }

    #[tokio::test]
    async fn a_dropped_child_is_killed_and_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let child = spawn("sleep", &["30"], dir.path(), &[], None).unwrap();
        let pid = child.id().unwrap();
        drop(child);
        let mut gone = false;
        for _ in 0..100 {
            // Neither running nor a zombie: no /proc entry left.
            if !Path::new(&format!("/proc/{pid}")).exists() {
                gone = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(gone, "process {pid} outlived its dropped handle");
    }
}
