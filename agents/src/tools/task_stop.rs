//! The `TaskStop` tool, as Claude Code's: stops a background sub-agent (an `Agent` call
//! with `run_in_background: true`) by its id, with its own sub-agents, and returns what
//! it had reported so far. Its result is then not delivered again by the loop.
//! Background shells keep their own tool, `KillShell`: an id `bash_<n>` is sent there.
//!
//! It runs in the coordinator beside the `Agent` tool, which installs it over the same
//! list of background sub-agents.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::pipeline::{LocalTool, ToolPool};
use crate::subagent::Background;
use crate::tool::{ToolCall, ToolOutput};
use crate::tools::{Tool, ToolContext, ToolError};

/// The tool's name, as Claude Code calls it.
pub const TASK_STOP_TOOL: &str = "TaskStop";

/// How long a stopped sub-agent may take to end before the call answers anyway.
const STOP_WAIT: Duration = Duration::from_secs(10);

/// The input of `TaskStop`, in Claude Code's shape.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskStopInput {
    /// The id of the background task to stop: the sub-agent id the Agent call returned.
    pub task_id: String,
}

const DESCRIPTION: &str = "Stops a background sub-agent (an Agent call made with \
run_in_background: true) by the id that call returned, together with the sub-agents it \
started, and returns what it had reported so far. Use it when its work is no longer \
needed. For a background shell, use KillShell.";

/// The metadata face of `TaskStop` for the pipeline; [`TaskStopTool`] runs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskStopSpec;

#[async_trait]
impl Tool for TaskStopSpec {
    type Input = TaskStopInput;
    const NAME: &'static str = TASK_STOP_TOOL;

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    /// It changes nothing but the agent's own background work, so it needs no
    /// approval, as in Claude Code; it is not concurrency-safe, so it never starts early.
    fn is_read_only(&self, _input: &TaskStopInput) -> bool {
        true
    }

    fn is_destructive(&self, _input: &TaskStopInput) -> bool {
        false
    }

    fn validate(&self, input: &TaskStopInput) -> Result<(), String> {
        Background::validate_task_id(&input.task_id)
    }

    async fn call(&self, _input: TaskStopInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new("the TaskStop tool runs in the coordinator, not in a tool host"))
    }
}

/// The coordinator side of `TaskStop` for one agent.
#[derive(Debug)]
pub struct TaskStopTool {
    background: Arc<Background>,
}

impl TaskStopTool {
    pub(crate) fn new(background: Arc<Background>) -> Self {
        Self { background }
    }

    async fn stop(&self, id: &str, cancel: &CancellationToken) -> ToolOutput {
        let id = id.trim();
        if id.starts_with("bash_") {
            return ToolOutput::error(format!("`{id}` is a background shell; stop it with KillShell"));
        }
        if let Err(message) = self.background.check_id(id) {
            return ToolOutput::error(message);
        }
        if !self.background.is_running(id) {
            return match self.background.result(id) {
                Some(report) => ToolOutput::ok(format!("{id} had already finished; its result:\n{report}")),
                None => ToolOutput::error(format!("{id} is not running")),
            };
        }
        // Running or still queued for a slot: its own token stops it either way.
        self.background.cancel_one(id);
        tokio::select! {
            _ = cancel.cancelled() => return ToolOutput::error("the call was cancelled while the sub-agent stopped"),
            _ = tokio::time::sleep(STOP_WAIT) => {}
            () = self.background.wait_for(id) => {}
        }
        match self.background.result(id) {
            Some(report) => ToolOutput::ok(format!("Stopped {id}. Its result:\n{report}")),
            None => ToolOutput::ok(format!(
                "Asked {id} to stop; it has not ended yet. Its result is added to the conversation when it does."
            )),
        }
    }
}

#[async_trait]
impl LocalTool for TaskStopTool {
    async fn call(
        &self,
        _pool: &ToolPool,
        _ordinal: u64,
        _call: &ToolCall,
        input: Value,
        cancel: CancellationToken,
    ) -> ToolOutput {
        match serde_json::from_value::<TaskStopInput>(input) {
            Ok(input) => self.stop(&input.task_id, &cancel).await,
            Err(e) => ToolOutput::error(format!("invalid input for TaskStop: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::DynTool;

    #[test]
    fn the_schema_is_claude_codes() {
        let schema = DynTool::input_schema(&TaskStopSpec);
        assert_eq!(schema["required"], serde_json::json!(["task_id"]));
        assert!(DynTool::validate(&TaskStopSpec, &serde_json::json!({"task_id": ""})).is_err());
        let input = serde_json::json!({"task_id": "a/sub-1"});
        assert!(DynTool::is_read_only(&TaskStopSpec, &input) && !DynTool::is_concurrency_safe(&TaskStopSpec, &input));
    }

    #[tokio::test]
    async fn refuses_unknown_ids_and_sends_shells_to_kill_shell() {
        let background = Arc::new(Background::default());
        let tool = TaskStopTool::new(background);
        let cancel = CancellationToken::new();
        let out = tool.stop("a/sub-9", &cancel).await;
        assert!(out.is_error && out.content.contains("none was started"), "{}", out.content);
        let out = tool.stop("bash_2", &cancel).await;
        assert!(out.is_error && out.content.contains("KillShell"), "{}", out.content);
    }
}
