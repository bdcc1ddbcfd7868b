//! The vocabulary of orch: the types more than one crate names, defined once.
//!
//! The workflow file, the command line, the sandbox and the agent loop all speak of
//! sandbox backends, network access, permission modes, hook events, limits, durations,
//! sizes and tools. Each is defined here, with serde (feature `serde`, on by default),
//! `clap::ValueEnum` (feature `clap`) and `schemars::JsonSchema` (feature `schemars`)
//! where it has a written form, so no crate converts between copies of the same enum.

pub mod duration;
pub mod hook;
pub mod limits;
pub mod model;
pub mod permission;
pub mod sandbox;
pub mod size;
pub mod tools;

pub use duration::{Duration, DurationError};
pub use hook::HookEvent;
pub use limits::Limits;
pub use permission::PermissionMode;
pub use sandbox::{
    Allowlist, Backend, Credential, CredentialKind, NETWORK_PRESETS, Network, NetworkSetting, check_network_entry,
};
pub use size::{Size, SizeError};
pub use tools::ToolInfo;
