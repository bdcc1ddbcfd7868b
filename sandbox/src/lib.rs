//! orch-sandbox: sandbox policies and backends (landlock+seccomp, container, none), the
//! tool host process and its protocol, and confined command spawning.
//!
//! Invariant: this crate knows nothing of models, prompts or workflows. The tool host
//! protocol is generic over the work it carries.
//!
//! Status: the crate is laid out in the workspace; its backends arrive with the sandbox
//! issue. Nothing in orch depends on it yet.
