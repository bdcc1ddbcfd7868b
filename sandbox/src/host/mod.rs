//! The tool host: the child process that runs an agent's tools, and the protocol the
//! coordinator speaks with it over the child's stdin and stdout.
//!
//! - [`frame`]: the wire format (newline-delimited JSON) and its size limit;
//! - [`server`]: the host side, [`serve`] over a [`Handler`];
//! - [`client`]: the coordinator side, [`HostClient`];
//! - [`zygote`]: a fork server that starts hosts without an `exec` each.
//!
//! Payloads are opaque `serde_json::Value`s: the protocol carries work, it does not know
//! what the work is. How the process is confined is decided by the command that starts
//! it, not here.

pub mod client;
pub mod frame;
pub mod server;
pub mod zygote;

pub use client::{HostClient, HostError, HostExit, HostOptions, HostStreams};
pub use frame::{FromHost, MAX_FRAME_BYTES, ToHost};
pub use server::{Handler, ServeOptions, serve, serve_stdio, serve_with};
