//! A fork server for tool hosts. One process, started once with a fresh `exec`, forks
//! each tool host on request, instead of the coordinator starting the orch binary again
//! for every agent.
//!
//! Why: each `exec` of a large position-independent binary pays the dynamic loader's
//! relocations (for orch, about 1 MiB of `.data.rel.ro` written, so private to every
//! process) and the page faults of starting up. A host forked from the zygote shares
//! those pages with it, copy-on-write, and starts without them.
//!
//! How:
//! - [`Zygote::start`] runs `program args` with one end of a Unix socket pair as fd 3,
//!   no environment, `/` as its directory and stdin and stdout on `/dev/null`. The
//!   zygote ([`serve`]) stays single-threaded and unconfined; it ends at the end of its
//!   socket, which is when the coordinator exits.
//! - [`Zygote::spawn`] sends a request (environment, directory, an opaque payload) with
//!   the read end of the new host's stdin pipe and the write ends of its stdout and
//!   stderr pipes (`SCM_RIGHTS`).
//! - The zygote `clone3`s with `CLONE_PARENT | CLONE_PIDFD`: the host is the
//!   coordinator's child, not the zygote's, as if the coordinator had spawned it (its
//!   reaper, its signals and the process table see no difference), and the zygote sends
//!   back its pid and a pidfd. It then zeroes the request's bytes: a later host does
//!   not inherit an earlier agent's environment in its memory.
//! - The child puts the pipes on fds 0, 1 and 2, replaces its environment and
//!   directory, runs the payload through the zygote's function and exits with its code.
//! - The coordinator waits for the host on the pidfd (`waitid(P_PIDFD)`) and kills it
//!   with `pidfd_send_signal` ([`Spawned::into_streams`]): no reused pid can be hit.
//!
//! What forking changes: the hosts of one zygote share its address-space layout (ASLR
//! is chosen at `exec`); the zygote was exec'd on its own, so they share nothing with
//! the coordinator. Whatever fails here ([`Zygote::spawn`] returns the error, for
//! example `clone3` refused by a container's seccomp profile), the caller can start the
//! host with `exec` instead.

#![allow(unsafe_code)] // clone3, dup2, pidfd_send_signal; see the SAFETY notes.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use serde::{Deserialize, Serialize};

use super::HostStreams;
use crate::fdpass;

/// The fd on which the zygote finds its socket.
pub const ZYGOTE_FD: RawFd = 3;

/// The largest request the zygote reads.
const MAX_REQUEST: u64 = 16 << 20;

/// What the zygote's child needs besides its pipes.
#[derive(Serialize, Deserialize)]
struct Request {
    /// The host's whole environment.
    env: Vec<(String, String)>,
    cwd: PathBuf,
    /// Given as it is to the zygote's function.
    payload: String,
}

/// The coordinator's handle on a running zygote.
#[derive(Debug)]
pub struct Zygote {
    socket: Mutex<UnixStream>,
    process: Mutex<Child>,
}

/// A host the zygote forked: a child of the caller, with its pidfd and the caller's
/// ends of its pipes.
#[derive(Debug)]
pub struct Spawned {
    pub pid: u32,
    pub pidfd: OwnedFd,
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

impl Zygote {
    /// Starts `program args` as a zygote (it must call [`serve`] on [`ZYGOTE_FD`]).
    pub fn start(program: &Path, args: &[&str]) -> io::Result<Zygote> {
        let (ours, theirs) = UnixStream::pair()?;
        let fd = theirs.as_raw_fd();
        let mut command = Command::new(program);
        // Its own process group: a terminal's Ctrl-C is the coordinator's to handle.
        command.args(args).env_clear().current_dir("/").stdin(Stdio::null()).stdout(Stdio::null()).process_group(0);
        // SAFETY: between fork and exec the closure only makes async-signal-safe calls
        // (dup2, fcntl) on a descriptor this frame keeps open.
        unsafe {
            command.pre_exec(move || {
                let result =
                    if fd == ZYGOTE_FD { libc::fcntl(fd, libc::F_SETFD, 0) } else { libc::dup2(fd, ZYGOTE_FD) };
                if result < 0 {
                    return Err(io::Error::last_os_error());
                }
                // Only 0-2 and its socket reach the zygote.
                crate::fds::cloexec_all_but(&[ZYGOTE_FD])
            });
        }
        let process = command.spawn()?;
        drop(theirs);
        Ok(Zygote { socket: Mutex::new(ours), process: Mutex::new(process) })
    }

    /// The zygote's pid.
    pub fn pid(&self) -> u32 {
        self.process.lock().unwrap_or_else(PoisonError::into_inner).id()
    }

    /// Asks the zygote for a host with environment `env`, in `cwd`, running `payload`.
    /// Blocking: call it off the async workers. An error means the zygote cannot serve
    /// (it died, or cannot fork); nothing was started then.
    pub fn spawn<'a>(
        &self,
        env: impl IntoIterator<Item = (&'a String, &'a String)>,
        cwd: &Path,
        payload: String,
    ) -> io::Result<Spawned> {
        let request = Request {
            env: env.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            cwd: cwd.to_path_buf(),
            payload,
        };
        let body = serde_json::to_vec(&request).map_err(io::Error::other)?;
        let (stdin_read, stdin_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (stdout_read, stdout_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (stderr_read, stderr_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let mut socket = self.socket.lock().unwrap_or_else(PoisonError::into_inner);
        let header = (body.len() as u64).to_le_bytes();
        let fds = [stdin_read.as_raw_fd(), stdout_write.as_raw_fd(), stderr_write.as_raw_fd()];
        fdpass::send(&*socket, &header, &fds)?;
        socket.write_all(&body)?;
        drop((stdin_read, stdout_write, stderr_write));

        let mut answer = [0u8; 4];
        let (got, fds) = fdpass::receive(&*socket, &mut answer)?;
        let pidfd = fds.into_iter().next();
        if got == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the tool host zygote exited"));
        }
        socket.read_exact(&mut answer[got..])?;
        let pid = i32::from_le_bytes(answer);
        if pid <= 0 {
            let mut len = [0u8; 4];
            socket.read_exact(&mut len)?;
            let mut message = vec![0; u32::from_le_bytes(len).min(4096) as usize];
            socket.read_exact(&mut message)?;
            return Err(io::Error::other(format!(
                "the tool host zygote cannot start a host: {}",
                String::from_utf8_lossy(&message)
            )));
        }
        let pidfd = pidfd.ok_or_else(|| io::Error::other("the tool host zygote sent no pidfd"))?;
        Ok(Spawned { pid: pid.unsigned_abs(), pidfd, stdin: stdin_write, stdout: stdout_read, stderr: stderr_read })
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        let process = self.process.get_mut().unwrap_or_else(PoisonError::into_inner);
        let _ = process.kill();
        let _ = process.wait();
    }
}

impl Spawned {
    /// The streams of a [`super::HostClient`] for this host (named `name`): its pipes,
    /// and the pidfd to wait on and to kill with. Needs a tokio runtime.
    pub fn into_streams(self, name: String) -> io::Result<HostStreams> {
        let Spawned { pid, pidfd, stdin, stdout, stderr } = self;
        let input = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)?;
        let output = tokio::net::unix::pipe::Receiver::from_owned_fd(stdout)?;
        let stderr = tokio::net::unix::pipe::Receiver::from_owned_fd(stderr)?;
        let pidfd = Arc::new(pidfd);
        // SAFETY: the `Arc` keeps the pidfd open, and the same, for as long as the
        // `AsyncFd` holds it.
        let watch = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(Arc::clone(&pidfd), tokio::io::Interest::READABLE)
        }
        .map_err(|e| e.into_parts().1)?;
        let exited = Box::pin(async move {
            loop {
                let mut ready = watch.readable().await.ok()?;
                match waitid(Id::PIDFd(watch.get_ref().as_fd()), WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
                    Ok(WaitStatus::Exited(_, code)) => return Some(ExitStatus::from_raw((code & 0xff) << 8)),
                    Ok(WaitStatus::Signaled(_, signal, core)) => {
                        return Some(ExitStatus::from_raw(signal as i32 | if core { 0x80 } else { 0 }));
                    }
                    Ok(_) => ready.clear_ready(),
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(e) => {
                        tracing::warn!(target: "orch_sandbox::host", pid, "waiting for the tool host failed: {e}");
                        return None;
                    }
                }
            }
        });
        let kill = Box::new(move || {
            // SAFETY: a plain system call on a pidfd this closure owns a reference to.
            unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, std::ptr::null::<u8>(), 0)
            };
        });
        Ok(HostStreams {
            name,
            pid: Some(pid),
            input: Box::new(input),
            output: Box::new(output),
            stderr: Some(Box::new(stderr)),
            exited,
            kill,
        })
    }
}

/// The zygote's loop, on the socket at `fd`: forks a host for each request and runs
/// `host` in it with the request's payload; `host`'s value is the host's exit code.
/// Returns the zygote's own exit code once the socket ends (0) or breaks (1). Call it
/// while the process has one thread.
pub fn serve(fd: RawFd, host: impl Fn(String) -> i32) -> i32 {
    // SAFETY: the coordinator put our end of the socket on `fd`; nothing else owns it.
    let mut socket = UnixStream::from(unsafe { OwnedFd::from_raw_fd(fd) });
    loop {
        let (len, fds) = match receive_header(&socket) {
            Ok(Some(header)) => header,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("error: the tool host zygote lost its socket: {e}");
                return 1;
            }
        };
        if len > MAX_REQUEST || fds.len() != 3 {
            eprintln!("error: the tool host zygote got a malformed request ({len} bytes, {} fds)", fds.len());
            return 1;
        }
        let mut body = vec![0u8; len as usize];
        if let Err(e) = socket.read_exact(&mut body) {
            eprintln!("error: the tool host zygote lost its socket: {e}");
            return 1;
        }
        let answer = fork_host(&fds, &body, &host);
        body.fill(0);
        std::hint::black_box(&body);
        drop(fds);
        let sent = match answer {
            Ok((pidfd, pid)) => fdpass::send(&socket, &pid.to_le_bytes(), &[pidfd.as_raw_fd()]).map(|_| ()),
            Err(e) => {
                let message = e.to_string();
                let mut reply = (-1i32).to_le_bytes().to_vec();
                reply.extend_from_slice(&(message.len() as u32).to_le_bytes());
                reply.extend_from_slice(message.as_bytes());
                socket.write_all(&reply)
            }
        };
        if let Err(e) = sent {
            eprintln!("error: the tool host zygote cannot answer: {e}");
            return 1;
        }
    }
}

/// The 8-byte length of the next request and the descriptors that came with it;
/// `None` at the end of the socket.
fn receive_header(socket: &UnixStream) -> io::Result<Option<(u64, Vec<OwnedFd>)>> {
    let mut header = [0u8; 8];
    let (got, fds) = fdpass::receive(socket, &mut header)?;
    if got == 0 {
        return Ok(None);
    }
    let mut rest = &mut header[got..];
    let mut reader = socket;
    while !rest.is_empty() {
        let n = reader.read(rest)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "a request cut short"));
        }
        rest = &mut rest[n..];
    }
    Ok(Some((u64::from_le_bytes(header), fds)))
}

/// `struct clone_args` of `clone3(2)`, up to `cgroup`.
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Forks the host of one request; in the parent, returns its pidfd and pid. The child
/// never returns.
fn fork_host(fds: &[OwnedFd], body: &[u8], host: &impl Fn(String) -> i32) -> io::Result<(OwnedFd, i32)> {
    let mut pidfd: RawFd = -1;
    let mut args = CloneArgs {
        flags: (libc::CLONE_PARENT | libc::CLONE_PIDFD) as u64,
        pidfd: &raw mut pidfd as u64,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: 0,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: 0,
    };
    // SAFETY: a fork-like clone3 (no CLONE_VM, no new stack) of a single-threaded process:
    // the child gets a copy of this address space and continues below with no lock held.
    let pid = unsafe { libc::syscall(libc::SYS_clone3, &raw mut args, std::mem::size_of::<CloneArgs>()) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        let code = child(fds, body, host);
        std::process::exit(code);
    }
    // SAFETY: clone3 wrote a new descriptor of this process into `pidfd`.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok((pidfd, pid as i32))
}

/// In the forked child: the pipes on 0, 1 and 2, the request's environment and
/// directory, then `host`.
fn child(fds: &[OwnedFd], body: &[u8], host: &impl Fn(String) -> i32) -> i32 {
    // SAFETY: putting the pipes it was sent on the standard descriptors; the child has
    // one thread.
    unsafe {
        for (target, fd) in fds.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), target as RawFd) < 0 {
                return 126;
            }
        }
    }
    // The host keeps 0-2 only: the request's pipes (now duplicated), the zygote's
    // socket and anything else the zygote held are closed (see `crate::fds`).
    if crate::fds::close_all_but(&[]).is_err() {
        return 126;
    }
    let request: Request = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: the tool host zygote got a malformed request: {e}");
            return 126;
        }
    };
    for (key, _) in std::env::vars_os() {
        // SAFETY: the child has one thread; nothing reads the environment concurrently.
        unsafe { std::env::remove_var(key) };
    }
    for (key, value) in request.env {
        // SAFETY: as above.
        unsafe { std::env::set_var(key, value) };
    }
    if let Err(e) = std::env::set_current_dir(&request.cwd) {
        eprintln!("error: the tool host cannot enter {}: {e}", request.cwd.display());
        return 126;
    }
    host(request.payload)
}
