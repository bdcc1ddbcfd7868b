//! orch-sandbox: sandbox policies and the landlock backend, and the tool host process
//! and its protocol. The tool host is the child process that runs all of one agent's
//! tools; the coordinator starts it with [`host::HostClient`] and talks to it over its
//! stdin and stdout, and the host side answers through [`host::serve`].
//!
//! Confinement (landlock backend): the tool host calls [`confine`] first thing, while it
//! has a single thread. As root it moves into a per-agent cgroup and drops to a
//! per-agent uid (after the coordinator handed it the writable roots with
//! [`prepare_writable`]); always it becomes a child subreaper, lowers rlimits, and
//! applies Landlock (with no_new_privs) and then seccomp. Commands it forks inherit all
//! of it. `orch sandbox run` does the same in a forked child with [`confine_on_exec`].
//! A kernel without Landlock fails closed with [`SandboxError::LandlockUnavailable`].
//!
//! Container backend: [`container::ContainerHost`] runs the tool host as the long-lived
//! process of one Docker container per agent and drives it over the attach stream with
//! [`host::HostClient::from_streams`].
//!
//! Invariant: this crate knows nothing of models, prompts or workflows. The tool host
//! protocol is generic over the work it carries.
//!
//! Modules: [`policy`] (the data), [`confine`](mod@confine) (the order of steps),
//! [`landlock`](mod@landlock), [`seccomp`], [`rlimits`], [`identity`] (uid choice,
//! handover, drop), [`cgroup`], [`traverse`] (keeping roots reachable after the uid
//! drop), [`mask`] (hiding denied paths from commands), [`memwatch`] (an agent's total memory where
//! no cgroup bounds it), [`egress`] (the sandbox's one way out under a network allowlist: a listener in its own network namespace, served by the coordinator's proxy), [`reaper`] (killing escaped processes, reaping adopted ones), [`scope`] (each command in
//! a nested Landlock domain, so it cannot signal its tool host), [`spawn`]
//! (confine-on-exec), [`fds`] (no inherited descriptor crosses into a sandbox), [`instance`] (names no other run can
//! share), [`host`].

pub mod cgroup;
pub mod confine;
pub mod container;
pub mod egress;
pub mod error;
mod fdpass;
pub mod fds;
pub mod host;
pub mod identity;
pub mod instance;
pub mod landlock;
pub mod mask;
pub mod memwatch;
pub mod policy;
pub mod procfs;
pub mod reaper;
pub mod rlimits;
pub mod scope;
pub mod seccomp;
pub mod spawn;
pub mod traverse;

pub use confine::{Confinement, confine};
pub use error::{SandboxError, container_unavailable};
pub use identity::{Handover, UID_RANGE, prepare_writable, sandbox_uid};
pub use spawn::{CONFINE_FAILED_ERRNO, confine_on_exec};
