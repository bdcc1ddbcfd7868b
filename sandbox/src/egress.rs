//! Egress through the coordinator's proxy ([`Network::Proxy`](crate::policy::Network)):
//! the sandbox's one way out is a TCP listener on `127.0.0.1:<port>` inside its own
//! network namespace, served by the coordinator. This crate knows no host names: it only
//! builds the namespace, binds the listener and hands it over.
//!
//! How, per backend (the tool host does it first thing in [`crate::confine`], while it
//! is single-threaded and before seccomp denies namespaces and Unix sockets):
//! - landlock as root: `unshare(CLONE_NEWNET)`; as a normal user:
//!   `unshare(CLONE_NEWUSER | CLONE_NEWNET)` with the user's own uid and gid mapped (an
//!   unprivileged user namespace; a kernel that refuses one makes the allowlist fail
//!   closed). Either way it brings `lo` up; the namespace has no other interface, so
//!   no address outside it is reachable and no resolver answers;
//! - container: Docker's `network_mode: none` is already such a namespace;
//! - then it binds `127.0.0.1:<port>`, connects to the coordinator's [`Handoff`] socket
//!   (a Unix socket at [`Egress::handoff`], bind-mounted into a container), sends the
//!   listener's descriptor (`SCM_RIGHTS`) and closes both. A socket stays in the
//!   namespace it was made in, so the coordinator accepts, on that descriptor,
//!   connections that only processes inside the sandbox can make.
//!
//! There is no forwarder and no bridge process: commands reach the coordinator's proxy
//! and nothing else. The listener is bound without `SO_REUSEPORT`, so no command can
//! bind the same port to intercept connections; under Landlock ABI 4+ the sandbox may
//! also connect to no other TCP port and bind none.

use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::SandboxError;
use crate::policy::Backend;

/// Where a container sees the handoff socket (bind-mounted from [`Egress::handoff`]).
pub const CONTAINER_HANDOFF: &str = "/orch/egress.sock";

/// Where a sandbox under `Network::Proxy` puts its listener and where it hands it over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Egress {
    /// The port of `127.0.0.1` inside the sandbox where the proxy answers.
    pub port: u16,
    /// The coordinator's Unix socket that receives the listener.
    pub handoff: PathBuf,
}

/// Tool host side: builds the namespace (per `backend`, `root` whether orch runs as
/// root), binds the listener and hands it to the coordinator.
pub fn enter(egress: &Egress, backend: Backend, root: bool) -> Result<(), SandboxError> {
    match backend {
        Backend::Landlock if root => unshare_net(false)?,
        Backend::Landlock => unshare_net(true)?,
        Backend::Container => {}
        Backend::None => {
            return Err(SandboxError::InvalidPolicy(
                "a network allowlist needs a sandbox (landlock or container); backend none cannot enforce it".into(),
            ));
        }
    }
    let handoff = match backend {
        Backend::Container => Path::new(CONTAINER_HANDOFF),
        _ => egress.handoff.as_path(),
    };
    hand_over(egress.port, handoff)
}

/// Binds `127.0.0.1:port` in the current namespace and sends the listener to `handoff`.
fn hand_over(port: u16, handoff: &Path) -> Result<(), SandboxError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| SandboxError::io(format!("cannot listen on 127.0.0.1:{port} for the egress proxy"), e))?;
    let stream = UnixStream::connect(handoff).map_err(|e| {
        SandboxError::io(format!("cannot reach the coordinator's egress socket {}", handoff.display()), e)
    })?;
    crate::fdpass::send(&stream, b"L", &[listener.as_raw_fd()])
        .map_err(|e| SandboxError::io("cannot hand the egress listener to the coordinator", e))?;
    Ok(())
}

fn unshare_net(user: bool) -> Result<(), SandboxError> {
    use nix::sched::{CloneFlags, unshare};
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    let flags = if user { CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET } else { CloneFlags::CLONE_NEWNET };
    unshare(flags).map_err(|e| {
        let what = if user {
            "a network allowlist as a normal user needs an unprivileged user namespace, which this kernel refuses \
             (kernel.unprivileged_userns_clone, user.max_user_namespaces or an AppArmor restriction); run as root, \
             use backend container, or use network none or full"
        } else {
            "cannot create the sandbox's network namespace"
        };
        SandboxError::io(what, std::io::Error::from(e))
    })?;
    if user {
        let write = |file: &str, text: String| {
            std::fs::write(file, text).map_err(|e| SandboxError::io(format!("cannot write {file}"), e))
        };
        write("/proc/self/setgroups", "deny".into())?;
        write("/proc/self/uid_map", format!("{uid} {uid} 1"))?;
        write("/proc/self/gid_map", format!("{gid} {gid} 1"))?;
    }
    loopback_up()
}

/// Brings `lo` of the current network namespace up (`SIOCSIFFLAGS` with `IFF_UP`).
#[allow(unsafe_code)] // two ioctls on a socket we own; see the SAFETY notes.
fn loopback_up() -> Result<(), SandboxError> {
    use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
    let err = |e: std::io::Error| SandboxError::io("cannot bring up the loopback interface of the sandbox", e);
    let sock = socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)
        .map_err(|e| err(std::io::Error::from(e)))?;
    // SAFETY: `ifreq` is a plain C struct for which all zeroes is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (slot, byte) in req.ifr_name.iter_mut().zip(b"lo\0") {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: the descriptor is open, and `req` is a valid, named `ifreq` that lives
    // across the call, as SIOCGIFFLAGS expects.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    // SAFETY: SIOCGIFFLAGS filled the `ifru_flags` member of the union.
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    // SAFETY: as above; SIOCSIFFLAGS reads the name and the flags.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(err(std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Coordinator side: a Unix socket in a private directory that receives one sandbox's
/// listener. Removed on drop.
#[derive(Debug)]
pub struct Handoff {
    listener: UnixListener,
    dir: PathBuf,
    path: PathBuf,
}

impl Handoff {
    /// Creates the socket in a fresh directory (mode 0700) under `parent`. `owner`: the
    /// uid the sandbox connects as, when it is not this process's (a container's uid
    /// when orch runs as root); the socket is handed to it.
    pub fn create(parent: &Path, owner: Option<u32>) -> Result<Handoff, SandboxError> {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos());
        let dir = parent.join(format!("orch-egress-{}-{n}-{}", std::process::id(), nanos.unwrap_or(0)));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| SandboxError::io(format!("cannot create {}", dir.display()), e))?;
        let path = dir.join("s");
        let listener = UnixListener::bind(&path)
            .map_err(|e| SandboxError::io(format!("cannot listen on {}", path.display()), e))?;
        let handoff = Handoff { listener, dir, path };
        if let Some(uid) = owner {
            std::fs::set_permissions(&handoff.dir, std::fs::Permissions::from_mode(0o711))
                .map_err(|e| SandboxError::io("cannot open the egress directory to the sandbox", e))?;
            std::os::unix::fs::lchown(&handoff.path, Some(uid), Some(uid))
                .map_err(|e| SandboxError::io("cannot hand the egress socket to the sandbox uid", e))?;
        }
        handoff
            .listener
            .set_nonblocking(true)
            .map_err(|e| SandboxError::io("cannot make the egress socket non-blocking", e))?;
        Ok(handoff)
    }

    /// The socket's path (for [`Egress::handoff`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits up to `timeout` for the sandbox's listener. The sandbox sends it before
    /// it says it is ready, so after that this returns at once.
    pub fn receive(&self, timeout: Duration) -> Result<TcpListener, SandboxError> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match self.listener.accept() {
                Ok((stream, _)) => break stream,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(SandboxError::io("the sandbox sent no egress listener", e)),
            }
        };
        stream.set_nonblocking(false).map_err(|e| SandboxError::io("cannot read the egress socket", e))?;
        stream
            .set_read_timeout(Some(deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(100))))
            .map_err(|e| SandboxError::io("cannot read the egress socket", e))?;
        let mut byte = [0u8; 1];
        let (_, received) = crate::fdpass::receive(&stream, &mut byte)
            .map_err(|e| SandboxError::io("cannot receive the egress listener", e))?;
        let mut received = received.into_iter();
        let (Some(fd), None) = (received.next(), received.next()) else {
            return Err(SandboxError::InvalidPolicy("the sandbox's egress message held no single listener".into()));
        };
        let listener = TcpListener::from(fd);
        // Only a listening TCP socket on the expected loopback is accepted.
        let local = listener
            .local_addr()
            .map_err(|e| SandboxError::io("the sandbox's egress descriptor is not a TCP socket", e))?;
        if !local.ip().is_loopback() {
            return Err(SandboxError::InvalidPolicy(format!(
                "the sandbox's egress listener is on {local}, not loopback"
            )));
        }
        Ok(listener)
    }
}

impl Drop for Handoff {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_crosses_the_handoff_socket() {
        let dir = tempfile::tempdir().unwrap();
        let handoff = Handoff::create(dir.path(), None).unwrap();
        hand_over(0, handoff.path()).unwrap();
        let listener = handoff.receive(Duration::from_secs(5)).unwrap();
        let addr = listener.local_addr().unwrap();
        assert!(addr.ip().is_loopback());
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (_conn, _) = listener.accept().unwrap();
        drop(handoff);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "the handoff directory is removed");
    }
}
