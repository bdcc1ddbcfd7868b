//! The hook interface: the tool pipeline calls it before and after each tool call and
//! when a call needed an approval nobody can give; the query loop calls it at the start
//! of a session (and of a nested agent), on the agent's prompt, around a compaction,
//! when the model wants to stop, when the model fails, and when the session ends.
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
    /// A hook's feedback for the model (exit 2 or `decision: "block"`): added to the
    /// result, which is kept as the tool gave it, as Claude Code does.
    pub block: Option<String>,
    /// Text that replaces the tool's result (`updatedToolOutput`).
    pub updated_output: Option<String>,
}

/// What PermissionRequest hooks said of a call that needs an approval.
#[derive(Debug, Clone, PartialEq)]
pub enum PermissionAnswer {
    /// Approved, as a person would; `updated_input` replaces the call's input (checked
    /// again). Deny rules, plan mode and hard denials still hold.
    Allow { updated_input: Option<Value> },
    /// Refused; the message goes to the model.
    Deny(String),
}

/// What UserPromptSubmit hooks said about the agent's prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PromptSubmit {
    /// The prompt is refused (exit 2 or `decision: "block"`): the agent does not run.
    pub blocked: Option<String>,
    /// Text added to the prompt the model sees.
    pub context: Option<String>,
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

    /// Instruction files went into the agent's context (InstructionsLoaded): at its
    /// start, or with a tool's result. It cannot stop anything.
    async fn instructions_loaded(&self, _files: &[crate::instructions::Loaded]) {}

    /// Every call of one answer has its result (PostToolBatch), before the next model
    /// request: text for the model, added after the results (a hook's context, or the
    /// reason of a block, which keeps the results as they are).
    async fn post_tool_batch(&self, _batch: &[(&ToolCall, &ToolOutput)]) -> Option<String> {
        None
    }

    /// A call needs an approval that nobody is there to give (PermissionRequest, where
    /// Claude Code would show its permission dialog). `None`: no hook answered, and the
    /// call stays denied.
    async fn permission_request(&self, _call: &ToolCall) -> Option<PermissionAnswer> {
        None
    }

    /// Before the first model call of a session (SessionStart; SubagentStart for a
    /// nested agent): text added to the first prompt.
    async fn session_start(&self) -> Option<String> {
        None
    }

    /// On the agent's prompt, before the first model call (UserPromptSubmit).
    async fn user_prompt_submit(&self, _prompt: &str) -> PromptSubmit {
        PromptSubmit::default()
    }

    /// The model answered without tool calls; `last_message` is its text. `Some(reason)`
    /// keeps it going, with the reason as its next message. `active` is true when a
    /// Stop hook already did so.
    async fn stop(&self, _active: bool, _last_message: &str) -> Option<String> {
        None
    }

    /// Before the history is compacted; `trigger` is `auto` or `manual`. `Some(reason)`:
    /// a hook blocks this compaction.
    async fn pre_compact(&self, _trigger: &str) -> Option<String> {
        None
    }

    /// After a compaction, with its summary (PostCompact, then SessionStart with the
    /// source `compact`): text added to the compacted history.
    async fn post_compact(&self, _trigger: &str, _summary: &str) -> Option<String> {
        None
    }

    /// A call needed an approval that nobody can give, so it was denied (Notification
    /// `permission_prompt`): text added to what the model reads of the denial.
    async fn notification(&self, _message: &str, _kind: &str) -> Option<String> {
        None
    }

    /// The loop ends because the model failed (StopFailure); `error` is Claude Code's
    /// name for the kind of failure.
    async fn stop_failure(&self, _error: &str, _details: &str, _last_message: &str) {}

    /// The session ends (SessionEnd), whatever the reason; it cannot be stopped.
    async fn session_end(&self, _reason: &str) {}

    /// Set once a hook asked the agent to stop altogether (`continue: false`); the loop
    /// ends with [`crate::Terminal::HookStopped`] at its next step.
    fn halted(&self) -> Option<String> {
        None
    }

    /// How many Stop-hook blocks in a row the loop honours.
    fn stop_block_limit(&self) -> u32 {
        DEFAULT_STOP_BLOCK_LIMIT
    }

    /// The hooks of a nested agent `agent_id` of type `agent_type`, in the permission
    /// mode `permission_mode`, started by this one: its start runs the SubagentStart
    /// hooks and its stop the SubagentStop hooks; it has no SessionStart,
    /// UserPromptSubmit or SessionEnd. `None`: the same hooks.
    fn for_subagent(
        &self,
        _agent_id: &str,
        _agent_type: &str,
        _permission_mode: &str,
    ) -> Option<std::sync::Arc<dyn Hooks>> {
        None
    }
}

/// No hooks.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoHooks;

impl Hooks for NoHooks {}
