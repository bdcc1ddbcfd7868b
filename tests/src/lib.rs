//! orch's test kit: an in-process mock model server speaking the Anthropic and OpenAI
//! wire formats (scripted turns, fault injection, request capture) and helpers that
//! check what a client sent, and a fake GitHub REST server for publishing. Everything here is test-only code.

// Test-only code: failing loudly is what a test helper should do.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

pub mod github;
pub mod mock;

pub use mock::{MockServer, RecordedRequest, Step, ToolCall, Turn};
