//! The hook interface: the tool pipeline calls it before and after each tool call, and
//! the query loop at the start of a session, before a compaction and when the model
//! wants to stop.
//!
//! Running hook commands from settings files is a separate layer
//! ([`crate::command_hooks`]); the pipeline and the loop only know this trait, so tests
//! can hook in-process.

use async_trait::async_trait;
use serde_json::Value;

use crate::tool::{ToolCall, ToolOutput};

/// A hook's say on whether a call may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    /// Run it without asking. Deny rules and hard denials still apply.
    Allow,
    /// Do not run it; the reason goes to the model.
    Deny(String),
    /// Treat it as an `ask` rule would.
    Ask(String),
}

/// What PreToolUse hooks said about a call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PreToolUse {
    pub decision: Option<HookDecision>,
    /// A replacement input; it is checked against the schema again.
    pub updated_input: Option<Value>,
    /// Text added to the result the model sees.
    pub context: Option<String>,
}

/// What PostToolUse hooks said about a finished call.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PostToolUse {
    /// Text added to the result the model sees.
    pub context: Option<String>,
    /// Turn the result into an error with this message appended (a hook that blocks).
    pub block: Option<String>,
}

/// How many times in a row a Stop hook may keep an agent going before the loop ends
/// it with [`crate::Terminal::HookStopped`].
pub const DEFAULT_STOP_BLOCK_LIMIT: u32 = 3;

/// Hooks around tool calls and the life of a session. The defaults do nothing.
#[async_trait]
pub trait Hooks: Send + Sync {
    async fn pre_tool_use(&self, _call: &ToolCall) -> PreToolUse {
        PreToolUse::default()
    }

    async fn post_tool_use(&self, _call: &ToolCall, _output: &ToolOutput) -> PostToolUse {
        PostToolUse::default()
    }

    /// Before the first model call of a session: text added to the first prompt.
    async fn session_start(&self) -> Option<String> {
        None
    }

    /// The model answered without tool calls. `Some(reason)` keeps it going, with the
    /// reason as its next message. `active` is true when a Stop hook already did so.
    async fn stop(&self, _active: bool) -> Option<String> {
        None
    }

    /// Before the history is compacted; `trigger` is `auto` or `manual`.
    async fn pre_compact(&self, _trigger: &str) {}

    /// Set once a hook asked the agent to stop altogether (`continue: false`); the loop
    /// ends with [`crate::Terminal::HookStopped`] at its next step.
    fn halted(&self) -> Option<String> {
        None
    }

    /// How many Stop-hook blocks in a row the loop honours.
    fn stop_block_limit(&self) -> u32 {
        DEFAULT_STOP_BLOCK_LIMIT
    }

    /// The hooks of a nested agent `agent_id` started by this one: its stop runs the
    /// SubagentStop hooks, and it has no SessionStart. `None`: the same hooks.
    fn for_subagent(&self, _agent_id: &str) -> Option<std::sync::Arc<dyn Hooks>> {
        None
    }
}

/// No hooks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {}
