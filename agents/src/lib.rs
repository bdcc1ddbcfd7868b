//! orch-agents: the one query loop that every agent runs through, the model providers
//! under it, and the interfaces it calls tools and reporters through.
//!
//! Invariants:
//! - the loop ends only with an explicit [`Terminal`] reason;
//! - every `tool_use` in the history gets exactly one `tool_result`, also on abort,
//!   timeout and tool error;
//! - this crate knows nothing of YAML workflows, git worktrees, terminals or GitHub.

pub mod command_hooks;
pub mod context;
pub mod event;
pub mod hooks;
pub mod instructions;
pub mod mcp;
pub mod message;
pub mod model;
pub mod permissions;
pub mod pipeline;
pub mod prompt;
pub mod protocol;
pub mod query;
pub mod subagent;
pub mod tool;
pub mod tools;
pub mod usage;

#[cfg(test)]
mod tidy;

pub use context::ContextConfig;
pub use event::{Budget, CompactionReason, Event, EventSink, NullSink, Phase, Terminal};
pub use message::{ContentBlock, Message, Role, ToolSpec};
pub use model::{ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamEvent, SystemPart};
pub use query::{Limits, QueryConfig, QueryOutcome, query};
pub use tool::{NoTools, ToolCall, ToolOutput, ToolRunner};
pub use usage::{Price, PriceTable, Usage};
