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
//! directory that is both `HOME` and `TMPDIR`: as root under landlock, a fresh tmpfs the
//! command's mount namespace has on `$TMPDIR/orch-sandbox` (see [`PrivateDirs::tmpfs`]);
//! otherwise `$TMPDIR/orch-sandbox-<pid>s<start>` (see `orch_sandbox::instance`), removed afterwards.
//!
//! Exit codes: the command's status; 128+N when a signal N killed it; 124 on timeout;
//! 125 when the sandbox failed; 126 when the command cannot be executed; 127 when it
//! is not found.
//!
//! `--backend container --image I`: the same policy, enforced by one container
//! (`orch_sandbox::container::ContainerHost::run_once`), whose process is this orch
//! binary, mounted read-only, in its one-command mode: `orch sandbox run --backend none`
//! with [`IN_CONTAINER_ENV`] set, inside the container (which is the confinement, so it
//! does not warn; the command still gets orch's seccomp filters and rlimits, as a container
//! tool host's commands do, and this inner orch is non-dumpable). That inner orch is a child subreaper like the outer one here: it runs
//! the command with stdin from `/dev/null`, enforces `--timeout` (124), kills what the
//! command left behind, and exits with the command's status, which Docker hands back;
//! it also stops everything when its stdin (the attach connection, never written)
//! closes, i.e. when this outer orch died. The outer orch streams the container's stdout
//! and stderr to its own, cuts them after `limits.output_bytes` (1 MiB; then it stops
//! the container and exits 141, as if the output pipe had closed), kills the container
//! 5 s after `--timeout` if the inner orch did not end it, forwards SIGINT, SIGTERM and
//! SIGHUP as removal (exit 128+N), and removes the container on every path. A missing
//! engine or image exits 125 with what to do.

use std::io::ErrorKind;
use std::path::Path;
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, sigprocmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use orch_run::options::SettingSource;
use orch_run::sandbox::{PolicyInput, PrivateDirs, TMPFS_MOUNT_POINT, build_policy, warn_unconfined};
use orch_sandbox::policy::{Backend, Limits, Network, Policy};
use orch_sandbox::{SandboxError, identity, reaper};

use crate::cli::SandboxRunArgs;

/// Set (to `1`) by the outer orch in the environment of a container it runs
/// `orch sandbox run --backend none` in: the inner orch is then the container's
/// one-command process (no warning, no private directories, the environment as given
/// minus this variable, the command's stdin from `/dev/null`).
pub const IN_CONTAINER_ENV: &str = "ORCH_SANDBOX_IN_CONTAINER";
/// How long after `--timeout` the outer orch kills a container whose inner orch did
/// not end the command itself.
const CONTAINER_TIMEOUT_GRACE: Duration = Duration::from_secs(5);
/// `orch sandbox run --backend container` exit code when the output limit was passed.
pub const EXIT_OUTPUT_CUT: u8 = 128 + libc::SIGPIPE as u8;

/// `orch sandbox run` exit codes, as `env` and `timeout` use them.
pub const EXIT_TIMEOUT: u8 = 124;
pub const EXIT_SANDBOX: u8 = 125;
pub const EXIT_CANNOT_EXECUTE: u8 = 126;
pub const EXIT_NOT_FOUND: u8 = 127;

/// Runs `orch sandbox run`.
pub fn run(args: SandboxRunArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            say!("orch: sandbox: {e}");
            ExitCode::from(EXIT_SANDBOX)
        }
    }
}

fn run_inner(args: SandboxRunArgs) -> Result<u8, SandboxError> {
    match args.sandbox.backend {
        Backend::Container if args.sandbox.image.as_deref().is_none_or(|i| i.trim().is_empty()) => {
            return Err(SandboxError::InvalidPolicy(
                "--backend container needs an image: pass --image NAME (`.ci/docker.sh` builds orch-test:busybox)"
                    .into(),
            ));
        }
        Backend::None if in_container() => return in_container_run(&args),
        Backend::None => warn_unconfined(SettingSource::Flags),
        Backend::Landlock | Backend::Container => {}
    }
    let cwd = std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| SandboxError::io("cannot read the current directory", e))?;
    let tmpfs = (args.sandbox.backend == Backend::Landlock && identity::is_root())
        .then(|| PrivateDirs::tmpfs(std::env::temp_dir().join(TMPFS_MOUNT_POINT)))
        .flatten();
    let dirs = match tmpfs {
        Some(dirs) => dirs,
        None => {
            PrivateDirs::single(std::env::temp_dir().join(format!("orch-sandbox-{}", orch_sandbox::instance::tag())))
                .map_err(|e| SandboxError::io("cannot create the sandbox's private tmp and home", e))?
        }
    };
    let result = supervise(&args, &cwd, &dirs);
    dirs.remove();
    result
}

fn supervise(args: &SandboxRunArgs, cwd: &Path, dirs: &PrivateDirs) -> Result<u8, SandboxError> {
    let root = identity::is_root();
    let default_write = if args.sandbox.write.is_empty() && !root { vec![cwd.to_path_buf()] } else { vec![] };
    let name = format!("sandbox-{}", orch_sandbox::instance::tag());
    let policy = build_policy(
        &args.sandbox.spec(),
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
    if policy.backend == Backend::Container {
        // The container backend hands the writable roots over (and back) itself.
        return run_in_container(args, &policy, &name);
    }
    if root && policy.backend == Backend::Landlock {
        // Once, here: the child that makes the cgroup inherits the lookup.
        orch_sandbox::cgroup::locate();
    }
    let handover = orch_sandbox::prepare_writable(&policy)?;
    let outcome = spawn_and_wait(args, &policy, false);
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

/// Whether this is the one-command process of a container (see [`IN_CONTAINER_ENV`]).
fn in_container() -> bool {
    std::env::var_os(IN_CONTAINER_ENV).is_some_and(|v| v == "1") && Path::new("/.dockerenv").exists()
}

/// The inner orch of `--backend container`: runs the command as [`spawn_and_wait`]
/// does, in the container's working directory and environment, confined as a
/// container tool host's commands are (`orch_sandbox::confine` for the `container`
/// backend: rlimits and orch's seccomp filters, so the command can `ptrace` nothing,
/// this orch included). This orch makes itself non-dumpable first, so the command
/// cannot reach it through `/proc/<pid>/mem` either.
fn in_container_run(args: &SandboxRunArgs) -> Result<u8, SandboxError> {
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| SandboxError::io("cannot make orch non-dumpable", std::io::Error::from(e)))?;
    let cwd = std::env::current_dir().map_err(|e| SandboxError::io("cannot read the current directory", e))?;
    let env = std::env::vars().filter(|(k, _)| k != IN_CONTAINER_ENV).collect();
    let policy = Policy {
        backend: Backend::Container,
        read: vec![],
        write: vec![],
        network: args.sandbox.network,
        limits: Limits::with_wall_time(args.timeout),
        env,
        cwd,
        image: None,
        uid: None,
        name: None,
        private_tmpfs: None,
        egress: None,
        masked: Vec::new(),
    };
    spawn_and_wait(args, &policy, true)
}

/// `--backend container`: the command runs in a fresh container (see the module doc).
fn run_in_container(args: &SandboxRunArgs, policy: &Policy, name: &str) -> Result<u8, SandboxError> {
    use orch_sandbox::container::{ContainerHost, ContainerOptions, OneShot, OneShotEnd};

    let unavailable = |reason: String| SandboxError::BackendUnavailable { backend: "container", reason };
    let exe = std::env::current_exe().map_err(|e| SandboxError::io("cannot find the orch binary to mount", e))?;
    let mut inner: Vec<String> = ["sandbox", "run", "--backend", "none"].map(String::from).into();
    if args.sandbox.network == Network::Full {
        inner.extend(["--network".into(), "full".into()]);
    }
    if let Some(t) = args.timeout {
        inner.extend(["--timeout".into(), format!("{}ms", t.as_millis().max(1))]);
    }
    inner.push("--".into());
    for arg in &args.command {
        let arg = arg.to_str().ok_or_else(|| {
            SandboxError::InvalidPolicy(format!("{arg:?} is not UTF-8; the container backend passes text arguments"))
        })?;
        inner.push(arg.to_string());
    }
    let mut policy = policy.clone();
    policy.env.insert(IN_CONTAINER_ENV.into(), "1".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| SandboxError::io("cannot start the async runtime", e))?;
    runtime.block_on(async {
        let docker = orch_sandbox::container::connect().await.map_err(|e| unavailable(e.to_string()))?;
        let cancel = tokio_util::sync::CancellationToken::new();
        let signal = forward_signals(cancel.clone())?;
        let run = OneShot {
            deadline: args.timeout.map(|t| t + CONTAINER_TIMEOUT_GRACE),
            output_limit: policy.limits.output_bytes,
            cancel,
        };
        let options = ContainerOptions { run: "sandbox".into(), agent: name.into(), ..ContainerOptions::default() };
        let (mut stdout, mut stderr) = (tokio::io::stdout(), tokio::io::stderr());
        let end = ContainerHost::run_once(&docker, &policy, &exe, &inner, &options, run, &mut stdout, &mut stderr)
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        let shown = args.command.first().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(match end {
            OneShotEnd::Exited(code) => u8::try_from(code).unwrap_or(EXIT_SANDBOX),
            OneShotEnd::TimedOut => {
                let secs = args.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
                say!("orch: {shown} timed out after {secs}s; its container was removed");
                EXIT_TIMEOUT
            }
            OneShotEnd::OutputCut => {
                let limit = policy.limits.output_bytes.unwrap_or_default();
                say!("\norch: {shown} wrote more than {limit} bytes of output; the rest was cut and it was stopped");
                EXIT_OUTPUT_CUT
            }
            OneShotEnd::Cancelled => 128 + signal.load(std::sync::atomic::Ordering::SeqCst),
        })
    })
}

/// Cancels `cancel` on SIGINT, SIGTERM or SIGHUP; the returned cell says which.
fn forward_signals(
    cancel: tokio_util::sync::CancellationToken,
) -> Result<std::sync::Arc<std::sync::atomic::AtomicU8>, SandboxError> {
    use tokio::signal::unix::{SignalKind, signal};
    let which = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(0));
    let mut streams = Vec::new();
    for (kind, number) in [
        (SignalKind::interrupt(), libc::SIGINT),
        (SignalKind::terminate(), libc::SIGTERM),
        (SignalKind::hangup(), libc::SIGHUP),
    ] {
        let stream = signal(kind).map_err(|e| SandboxError::io("cannot watch for signals", e))?;
        streams.push((stream, number as u8));
    }
    for (mut stream, number) in streams {
        let (cancel, which) = (cancel.clone(), which.clone());
        tokio::spawn(async move {
            if stream.recv().await.is_some() {
                let _ = which.compare_exchange(
                    0,
                    number,
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                );
                cancel.cancel();
            }
        });
    }
    Ok(which)
}

/// Forks the command confined by `policy` (after `confine_on_exec`), waits for it with
/// the timeout while forwarding signals, and kills whatever it left behind. With
/// `watch_stdin` (the inner orch of a container), the command gets `/dev/null` as
/// stdin and everything stops when this process's stdin closes.
fn spawn_and_wait(args: &SandboxRunArgs, policy: &Policy, watch_stdin: bool) -> Result<u8, SandboxError> {
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
    if watch_stdin {
        command.stdin(std::process::Stdio::null());
    }
    // Backend none: the child only becomes a subreaper (and unblocks signals).
    orch_sandbox::confine_on_exec(&mut command, policy.clone())?;
    let shown = program.to_string_lossy();
    let child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return match e.raw_os_error() {
                Some(orch_sandbox::CONFINE_FAILED_ERRNO) => Ok(EXIT_SANDBOX),
                _ if e.kind() == ErrorKind::NotFound => {
                    say!("orch: {shown}: command not found");
                    Ok(EXIT_NOT_FOUND)
                }
                _ => {
                    say!("orch: {shown}: cannot execute: {e}");
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
        let stdin = std::io::stdin();
        let mut fds = vec![PollFd::new(std::os::fd::AsFd::as_fd(&signals), PollFlags::POLLIN)];
        if watch_stdin {
            fds.push(PollFd::new(std::os::fd::AsFd::as_fd(&stdin), PollFlags::POLLIN));
        }
        let polled = poll(&mut fds, timeout);
        if watch_stdin && fds.get(1).and_then(PollFd::revents).is_some_and(|r| !r.is_empty()) && stdin_closed() {
            reaper::kill_tree(std::process::id() as i32, &[]);
            say!("orch: the orch that started this container went away; {shown} and everything it started were killed");
            break EXIT_SANDBOX;
        }
        match polled {
            Ok(0) if deadline.is_some_and(|at| Instant::now() >= at) => {
                reaper::kill_tree(std::process::id() as i32, &[]);
                let secs = args.timeout.map(|t| t.as_secs_f64()).unwrap_or_default();
                say!("orch: {shown} timed out after {secs}s; it and everything it started were killed");
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

/// Reads what is waiting on stdin (nobody should write it); true at end of file.
fn stdin_closed() -> bool {
    let mut buf = [0u8; 4096];
    matches!(nix::unistd::read(std::io::stdin(), &mut buf), Ok(0) | Err(nix::Error::EBADF))
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
