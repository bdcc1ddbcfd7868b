//! `orch sandbox run`, and the sandbox policy of an agent (shared with `orch exec`).
//!
//! `orch sandbox run` is built for speed: no async runtime, no tool host protocol. The
//! orch process stays outside the sandbox as a child subreaper, forks the command, and
//! the child confines itself (`orch_sandbox::confine_on_exec`) before `exec`. The parent
//! waits on a signalfd (SIGCHLD, and SIGINT/SIGTERM/SIGHUP/SIGQUIT to forward) with the
//! timeout, then kills everything the command left behind (its own descendants, since
//! orphans are re-parented to it; and the cgroup as root), hands writable roots back
//! and removes the private tmp and home.
//!
//! Defaults: readable roots are `default_read_roots` plus the current directory and
//! `--read`s; writable roots are the `--write`s, or the current directory when none is
//! given and orch is not root (as root, a writable root is handed to the sandbox uid for
//! the run, so orch does not take the current directory unasked), plus one private
//! directory, `$TMPDIR/orch-sandbox-<pid>`, that is both `HOME` and `TMPDIR`.
//!
//! Exit codes: the command's status; 128+N when a signal N killed it; 124 on timeout;
//! 125 when the sandbox failed; 126 when the command cannot be executed; 127 when it
//! is not found.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use orch_sandbox::policy::{Backend, Limits, Network, Policy, default_read_roots, filter_env};
use orch_sandbox::{SandboxError, identity, reaper};

use crate::cli::{BackendKind, NetworkKind, SandboxArgs, SandboxRunArgs};

/// `orch sandbox run` exit codes, as `env` and `timeout` use them.
pub const EXIT_TIMEOUT: u8 = 124;
pub const EXIT_SANDBOX: u8 = 125;
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;

/// An agent's private tmp and home, under `base`.
#[derive(Debug)]
pub struct PrivateDirs {
    pub base: PathBuf,
    pub tmp: PathBuf,
    pub home: PathBuf,
}

impl PrivateDirs {
    /// One fresh directory `base` serving as both tmp and home (one `mkdir`, where
    /// start-up time matters).
    pub fn single(base: PathBuf) -> std::io::Result<Self> {
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(&base)?;
                std::fs::create_dir(&base)?;
            }
            Err(e) => return Err(e),
        }
        Ok(Self { tmp: base.clone(), home: base.clone(), base })
    }

    /// Creates `base/tmp` and `base/home` (and `base`), fresh: a `base` left over from
    /// an earlier process is emptied first.
    pub fn create(base: PathBuf) -> std::io::Result<Self> {
        let dirs = Self { tmp: base.join("tmp"), home: base.join("home"), base };
        match std::fs::create_dir(&dirs.base) {
            Ok(()) => {}
            // Left over by a process that had the same pid and died.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(&dirs.base)?;
                std::fs::create_dir(&dirs.base)?;
            }
            Err(_) => std::fs::create_dir_all(&dirs.base)?,
        }
        std::fs::create_dir(&dirs.tmp)?;
        std::fs::create_dir(&dirs.home)?;
        Ok(dirs)
    }

    /// Removes `base` and everything in it; failures are logged.
    pub fn remove(&self) {
        if let Err(e) = std::fs::remove_dir_all(&self.base)
            && e.kind() != ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.base.display(), "could not remove the sandbox's private directories: {e}");
        }
    }
}

/// The backend a flag names.
pub fn backend(kind: BackendKind) -> Backend {
    match kind {
        BackendKind::Landlock => Backend::Landlock,
        BackendKind::Container => Backend::Container,
        BackendKind::None => Backend::None,
    }
}

/// The loud line every unconfined run prints.
pub fn warn_unconfined() {
    eprintln!(
        "orch: WARNING: --backend none: commands run UNCONFINED, with orch's own user and privileges \
         (no landlock, seccomp, uid drop or limits)"
    );
}

/// What goes into a policy besides the flags.
#[derive(Debug)]
pub struct PolicyInput<'a> {
    pub cwd: &'a Path,
    /// Writable roots besides `--write` and the private directories.
    pub write: Vec<PathBuf>,
    /// Readable roots besides the defaults and `--read`.
    pub read: Vec<PathBuf>,
    pub dirs: &'a PrivateDirs,
    /// Unique among live sandboxes on this machine; names the cgroup and seeds the uid.
    pub name: String,
    pub wall_time: Option<Duration>,
}

/// The policy for `args` and `input`: paths made absolute and canonical (a `--read` or
/// `--write` that does not exist is an error), the filtered environment, and, when orch
/// runs as root, a sandbox uid.
pub fn build_policy(args: &SandboxArgs, input: PolicyInput<'_>) -> Result<Policy, SandboxError> {
    let canonical = |flag: &str, p: &Path| {
        let abs = if p.is_absolute() { p.to_path_buf() } else { input.cwd.join(p) };
        std::fs::canonicalize(&abs).map_err(|e| {
            SandboxError::InvalidPolicy(format!("{flag} {} cannot be used: {e}; give an existing path", p.display()))
        })
    };
    let outer_home = std::env::var_os("HOME").map(PathBuf::from);
    let mut read = default_read_roots(outer_home.as_deref());
    read.extend(input.read);
    for p in &args.read {
        read.push(canonical("--read", p)?);
    }
    let mut write = input.write;
    for p in &args.write {
        write.push(canonical("--write", p)?);
    }
    write.push(input.dirs.tmp.clone());
    write.push(input.dirs.home.clone());
    dedup(&mut read);
    dedup(&mut write);
    let outer: Vec<(String, String)> = std::env::vars().collect();
    let env = filter_env(outer.iter().map(|(k, v)| (k.as_str(), v.as_str())), &input.dirs.home, &input.dirs.tmp);
    let uid = identity::is_root().then(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        orch_sandbox::sandbox_uid(&format!("{}/{nanos}", input.name))
    });
    Ok(Policy {
        backend: backend(args.backend),
        read,
        write,
        network: match args.network {
            NetworkKind::None => Network::None,
            NetworkKind::Full => Network::Full,
        },
        limits: Limits { wall_time: input.wall_time, ..Limits::default() },
        env,
        cwd: input.cwd.to_path_buf(),
        image: args.image.clone(),
        uid,
        name: Some(input.name),
    })
}

fn dedup(paths: &mut Vec<PathBuf>) {
    let mut seen = std::collections::BTreeSet::new();
    paths.retain(|p| seen.insert(p.clone()));
}

/// Runs `orch sandbox run`.
pub fn run(args: SandboxRunArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("orch: sandbox: {e}");
            ExitCode::from(EXIT_SANDBOX)
        }
    }
}

fn run_inner(args: SandboxRunArgs) -> Result<u8, SandboxError> {
    match args.sandbox.backend {
        BackendKind::Container => return Err(orch_sandbox::container_unavailable()),
        BackendKind::None => warn_unconfined(),
        BackendKind::Landlock => {}
    }
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| SandboxError::io("cannot read the current directory", e))?;
    let pid = std::process::id();
    let dirs = PrivateDirs::single(std::env::temp_dir().join(format!("orch-sandbox-{pid}")))
        .map_err(|e| SandboxError::io("cannot create the sandbox's private tmp and home", e))?;
    let result = supervise(&args, &cwd, &dirs, pid);
    dirs.remove();
    result
}

fn supervise(args: &SandboxRunArgs, cwd: &Path, dirs: &PrivateDirs, pid: u32) -> Result<u8, SandboxError> {
    let root = identity::is_root();
    let default_write = if args.sandbox.write.is_empty() && !root { vec![cwd.to_path_buf()] } else { vec![] };
    let name = format!("sandbox-{pid}");
    let policy = build_policy(
        &args.sandbox,
        PolicyInput {
            cwd,
            write: default_write,
            read: vec![cwd.to_path_buf()],
            dirs,
            name: name.clone(),
            wall_time: args.timeout,
        },
    )?;
    orch_sandbox::confine::validate(&policy)?;
    let handover = orch_sandbox::prepare_writable(&policy)?;
    let outcome = spawn_and_wait(args, &policy);
    if root && policy.backend == Backend::Landlock {
        orch_sandbox::cgroup::kill_and_remove(&name);
    }
    handover.restore();
    outcome
}

/// Signals the parent handles: SIGCHLD to notice the exit, the rest to forward.
fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGCHLD, Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT] {
        set.add(sig);
    }
    set
}

fn spawn_and_wait(args: &SandboxRunArgs, policy: &Policy) -> Result<u8, SandboxError> {
    let signal_err = |what: &str, e: nix::Error| SandboxError::io(what.to_string(), std::io::Error::from(e));
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| signal_err("cannot become a child subreaper", e))?;
    let set = handled_signals();
    // Blocked before the fork; the child unblocks them before `exec`.
    sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None).map_err(|e| signal_err("cannot block signals", e))?;
    let signals = SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .map_err(|e| signal_err("cannot open a signalfd", e))?;

    let Some((program, rest)) = args.command.split_first() else {
        return Err(SandboxError::InvalidPolicy("no command given after --".into()));
    };
    let mut command = Command::new(program);
    command.args(rest).env_clear().envs(&policy.env).current_dir(&policy.cwd);
    // Backend none: the child only becomes a subreaper (and unblocks signals).
    orch_sandbox::confine_on_exec(&mut command, policy.clone())?;
    let shown = program.to_string_lossy();
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return match e.raw_os_error() {
                Some(orch_sandbox::CONFINE_FAILED_ERRNO) => Ok(EXIT_SANDBOX),
                _ if e.kind() == ErrorKind::NotFound => {
                    eprintln!("orch: {shown}: command not found");
                    Ok(EXIT_NOT_FOUND)
                }
                _ => {
                    eprintln!("orch: {shown}: cannot execute: {e}");
                    Ok(EXIT_CANNOT_EXECUTE)
                }
            };
        }
    };
    let child = Pid::from_raw(child.id() as i32);
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let code = loop {
        let timeout = match deadline {
            None => PollTimeout::NONE,
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now());
                PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
            }
        };
        let mut fds = [PollFd::new(std::os::fd::AsFd::as_fd(&signals), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) if deadline.is_some_and(|at| Instant::now() >= at) => {
                reaper::kill_tree(std::process::id() as i32, &[]);
                let secs = args.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
                eprintln!("orch: {shown} timed out after {secs}s; it and everything it started were killed");
                break EXIT_TIMEOUT;
            }
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(e) => return Err(signal_err("cannot wait for the command", e)),
        }
        while let Ok(Some(info)) = signals.read_signal() {
            let signo = info.ssi_signo as i32;
            // Terminal-made signals (SI_KERNEL) reached the command's group already.
            if signo != libc::SIGCHLD
                && info.ssi_code != libc::SI_KERNEL
                && let Ok(sig) = Signal::try_from(signo)
            {
                let _ = kill(child, sig);
            }
        }
        if let Some(code) = reap(child) {
            break code;
        }
    };
    // Whatever the command left behind goes too.
    reaper::kill_tree(std::process::id() as i32, &[]);
    while reap_any() {}
    Ok(code)
}

/// Reaps exited processes (the command and orphans handed to this subreaper); returns
/// the exit code once the command itself has exited.
fn reap(child: Pid) -> Option<u8> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) if pid == child => return Some(code as u8),
            Ok(WaitStatus::Signaled(pid, sig, _)) if pid == child => return Some(128 + sig as u8),
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

fn reap_any() -> bool {
    matches!(waitpid(None, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)))
}
