//! The hook interface the tool pipeline calls before and after each tool call.
//!
//! Running hook commands from settings files is a separate layer; the pipeline only
//! knows this trait, so tests can hook in-process.

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

/// Hooks around tool calls. The defaults do nothing.
#[async_trait]
pub trait Hooks: Send + Sync {
    async fn pre_tool_use(&self, _call: &ToolCall) -> PreToolUse {
        PreToolUse::default()
    }

    async fn post_tool_use(&self, _call: &ToolCall, _output: &ToolOutput) -> PostToolUse {
        PostToolUse::default()
    }
}

/// No hooks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {}
