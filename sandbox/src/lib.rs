//! orch-sandbox: the tool host process and its protocol. The tool host is the child
//! process that runs all of one agent's tools; the coordinator starts it with
//! [`host::HostClient`] and talks to it over its stdin and stdout, and the host side
//! answers through [`host::serve`]. Calls run concurrently, can be cancelled one by one,
//! and fail cleanly with [`host::HostError::Crashed`] if the host dies.
//!
//! Invariant: this crate knows nothing of models, prompts or workflows. The tool host
//! protocol is generic over the work it carries.
//!
//! Status: the tool host runs unconfined. Sandbox policies and backends (landlock and
//! seccomp, container, none) and confined command spawning arrive with the sandbox
//! issue; they plug in through the `tokio::process::Command` that starts the host.

pub mod host;
pub mod policy;
