//! [`SandboxError`]: everything that can go wrong while a sandbox is prepared or
//! entered. Each message says what failed and what to do about it.

use std::path::PathBuf;

/// Why a sandbox could not be prepared or entered. Any of these means the command did
/// not run: confinement fails closed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "landlock is not available on this kernel (it needs Linux 5.13 or later with landlock in the `lsm=` boot \
         list); use --backend container, or --backend none to run unconfined on purpose"
    )]
    LandlockUnavailable,
    #[error("landlock failed: {0}")]
    Landlock(String),
    #[error("the seccomp filter could not be {action}: {message}")]
    Seccomp { action: &'static str, message: String },
    #[error(
        "orch runs as root but the sandbox policy names no uid to drop to; the coordinator must pick one with \
         orch_sandbox::sandbox_uid"
    )]
    NoSandboxUid,
    #[error("could not drop to the sandbox uid {uid}: {message}")]
    Privileges { uid: u32, message: String },
    #[error("could not set the resource limit {resource}: {message}")]
    Rlimit { resource: &'static str, message: String },
    #[error("confinement must happen before any thread starts, but this process runs {0} threads")]
    Threads(usize),
    #[error("refusing to hand {} to the sandbox uid: {reason}; pass a project or scratch directory instead", .path.display())]
    UnsafeWriteRoot { path: PathBuf, reason: &'static str },
    #[error("the sandbox policy is invalid: {0}")]
    InvalidPolicy(String),
    #[error("{backend} backend: {reason}")]
    BackendUnavailable { backend: &'static str, reason: String },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl SandboxError {
    /// An I/O failure, with what was being done.
    pub fn io(what: impl Into<String>, source: impl Into<std::io::Error>) -> Self {
        SandboxError::Io { what: what.into(), source: source.into() }
    }
}

/// The error for `--backend container` until that backend exists in this build.
pub fn container_unavailable() -> SandboxError {
    SandboxError::BackendUnavailable {
        backend: "container",
        reason: "not available in this build of orch yet; use --backend landlock".into(),
    }
}
