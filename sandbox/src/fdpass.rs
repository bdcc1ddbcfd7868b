//! Passing file descriptors over a Unix socket (`SCM_RIGHTS`): the egress listener a
//! sandbox hands to the coordinator ([`crate::egress`]), and the pipes and pidfds the
//! coordinator and the tool host zygote exchange ([`crate::host::zygote`]).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// Most descriptors one message carries.
const MAX_FDS: usize = 3;

/// Sends `bytes` with `fds` attached (at most [`MAX_FDS`]); returns the bytes sent.
pub(crate) fn send(socket: &impl AsRawFd, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    Ok(sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(bytes)],
        &[ControlMessage::ScmRights(fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// Receives into `buf` and takes the descriptors that came with it (close-on-exec);
/// returns the bytes read (0 at the end of the stream) and the descriptors.
pub(crate) fn receive(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(socket.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(received) = cmsg {
            // SAFETY: the kernel just installed these descriptors in this process for
            // us; nothing else owns them.
            #[allow(unsafe_code)]
            fds.extend(received.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
        }
    }
    Ok((msg.bytes, fds))
}
