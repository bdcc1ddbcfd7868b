//! The tool-runner interface the loop calls tools through.
//!
//! The loop knows nothing of what a tool does or where it runs. The tool pool (with its
//! pipeline of schema checks, hooks and permissions) implements [`ToolRunner`]; tests
//! use small in-process runners.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::message::ToolSpec;
use crate::usage::Usage;

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub input: Value,
}

/// What a tool call gave back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    /// Image or document blocks that go with the text (`Read` of an image or a PDF).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::message::ContentBlock>,
    /// Instruction files of a subdirectory that came with this result (for the
    /// InstructionsLoaded hooks); their text is in `content` already.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<crate::instructions::Loaded>,
    /// The call did not run: a permission rule, the mode or a PreToolUse hook denied
    /// it (Claude Code's `permission_denials`). Set in the coordinator only.
    #[serde(skip)]
    pub denied: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            attachments: Vec::new(),
            instructions: Vec::new(),
            denied: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            attachments: Vec::new(),
            instructions: Vec::new(),
            denied: false,
        }
    }

    /// This output, marked as a call that permissions or a hook denied.
    pub fn denied(mut self) -> Self {
        self.denied = true;
        self
    }

    /// This output with `attachments` added.
    pub fn with_attachments(mut self, attachments: Vec<crate::message::ContentBlock>) -> Self {
        self.attachments = attachments;
        self
    }
}

/// Runs the tools of one agent.
#[async_trait]
pub trait ToolRunner: Send + Sync {
    /// The tools offered to the model, in the order they are sent.
    fn specs(&self) -> Vec<ToolSpec>;

    /// Whether `call` may run in parallel with its neighbours. Fails closed.
    fn is_concurrency_safe(&self, _call: &ToolCall) -> bool {
        false
    }

    /// Whether `call` may start while the response is still streaming, as soon as its
    /// block is complete: only read-only, concurrency-safe calls. Fails closed.
    fn can_start_early(&self, _call: &ToolCall) -> bool {
        false
    }

    /// Whether a failure of `call` cancels its siblings still running in the same
    /// parallel run (a failing `Bash` makes the others pointless).
    fn cancels_siblings_on_error(&self, _call: &ToolCall) -> bool {
        false
    }

    /// Tokens and cost spent for this agent by its tools since the last call, by nested
    /// sub-agents: the loop adds them to the agent's totals, so they count against its
    /// budgets. `None` when nothing was spent.
    fn take_nested_usage(&self) -> Option<(Usage, f64)> {
        None
    }

    /// The reports of background work (sub-agents started with `run_in_background`)
    /// that finished since the last call and were not read otherwise: the loop adds
    /// them to its next request.
    fn take_background_reports(&self) -> Vec<String> {
        Vec::new()
    }

    /// Background jobs of this agent still running.
    fn background_running(&self) -> usize {
        0
    }

    /// Returns once a background job has a report to take, or none is running.
    async fn wait_background(&self) {}

    /// Cancels every background job of this agent and returns once they have ended.
    async fn stop_background(&self) {}

    /// Runs one call. The runner must return soon after `cancel` fires; the loop does
    /// not wait for it past that point anyway.
    async fn run(&self, call: &ToolCall, cancel: CancellationToken) -> ToolOutput;

    /// The hooks of the session (SessionStart, Stop, PreCompact), if any.
    fn hooks(&self) -> Option<&dyn crate::hooks::Hooks> {
        None
    }
}

/// A runner with no tools.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoTools;

#[async_trait]
impl ToolRunner for NoTools {
    fn specs(&self) -> Vec<ToolSpec> {
        Vec::new()
    }

    async fn run(&self, call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
        ToolOutput::error(format!("no tool named `{}` is available to this agent", call.name))
    }
}
