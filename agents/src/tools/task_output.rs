//! The `TaskOutput` tool, as Claude Code's: reads the result of a background sub-agent
//! (an `Agent` call with `run_in_background: true`) by its id, waiting for it to finish
//! when `block` is true (the default), for at most `timeout` milliseconds.
//!
//! The loop hands every background report to the model by itself (see
//! [`crate::subagent`]); this tool is for a model that wants one earlier, or wants to
//! wait for one in the middle of its work. A report read here is not delivered again.
//! Background shells keep their own tool, `BashOutput`: an id `bash_<n>` is sent there.
//!
//! It runs in the coordinator beside the `Agent` tool, which installs it: the two share
//! the caller's list of background sub-agents.

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
pub const TASK_OUTPUT_TOOL: &str = "TaskOutput";

/// How long a blocking read waits by default, and at most (Claude Code's bounds).
pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// The input of `TaskOutput`, in Claude Code's shape.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TaskOutputInput {
    /// The id of the background task: the sub-agent id the Agent call returned
    /// (for example "lead/sub-2").
    pub task_id: String,
    /// Whether to wait for the task to finish; true by default.
    #[serde(default)]
    pub block: Option<bool>,
    /// How long to wait, in milliseconds (30000 by default, 600000 at most).
    #[serde(default)]
    pub timeout: Option<u64>,
}

const DESCRIPTION: &str = "Reads the result of a background sub-agent (an Agent call made \
with run_in_background: true) by the id that call returned. With block: true (the default) \
it waits until the sub-agent finishes, for at most `timeout` milliseconds; with block: false \
it answers at once whether the sub-agent still runs. You do not need it to get a report: \
every report is added to the conversation when its sub-agent finishes. For a background \
shell, use BashOutput.";

/// The metadata face of `TaskOutput` for the pipeline; [`TaskOutputTool`] runs it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TaskOutputSpec;

#[async_trait]
impl Tool for TaskOutputSpec {
    type Input = TaskOutputInput;
    const NAME: &'static str = TASK_OUTPUT_TOOL;

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    fn is_read_only(&self, _input: &TaskOutputInput) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &TaskOutputInput) -> bool {
        true
    }

    fn is_destructive(&self, _input: &TaskOutputInput) -> bool {
        false
    }

    fn validate(&self, input: &TaskOutputInput) -> Result<(), String> {
        Background::validate_task_id(&input.task_id)
    }

    async fn call(&self, _input: TaskOutputInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new("the TaskOutput tool runs in the coordinator, not in a tool host"))
    }
}

/// The coordinator side of `TaskOutput` for one agent: its background sub-agents.
#[derive(Debug)]
pub struct TaskOutputTool {
    background: Arc<Background>,
}

impl TaskOutputTool {
    pub(crate) fn new(background: Arc<Background>) -> Self {
        Self { background }
    }

    async fn read(&self, input: TaskOutputInput, cancel: &CancellationToken) -> ToolOutput {
        let id = input.task_id.trim();
        if id.starts_with("bash_") {
            return ToolOutput::error(format!("`{id}` is a background shell; read its output with BashOutput"));
        }
        if let Err(message) = self.background.check_id(id) {
            return ToolOutput::error(message);
        }
        if input.block != Some(false) {
            let ms = input.timeout.unwrap_or(DEFAULT_TIMEOUT_MS).min(MAX_TIMEOUT_MS);
            tokio::select! {
                _ = cancel.cancelled() => return ToolOutput::error("the call was cancelled while it waited"),
                _ = tokio::time::sleep(Duration::from_millis(ms)) => {}
                () = self.background.wait_for(id) => {}
            }
        }
        match self.background.result(id) {
            Some(report) => ToolOutput::ok(report),
            None => ToolOutput::ok(format!(
                "The background sub-agent {id} is still running. Its report is added to the conversation \
                 when it finishes; read it earlier with TaskOutput and block: true."
            )),
        }
    }
}

#[async_trait]
impl LocalTool for TaskOutputTool {
    async fn call(
        &self,
        _pool: &ToolPool,
        _ordinal: u64,
        _call: &ToolCall,
        input: Value,
        cancel: CancellationToken,
    ) -> ToolOutput {
        match serde_json::from_value::<TaskOutputInput>(input) {
            Ok(input) => self.read(input, &cancel).await,
            Err(e) => ToolOutput::error(format!("invalid input for TaskOutput: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::DynTool;

    #[test]
    fn the_schema_is_claude_codes() {
        let schema = DynTool::input_schema(&TaskOutputSpec);
        assert_eq!(schema["required"], serde_json::json!(["task_id"]));
        assert!(schema["properties"]["block"].is_object() && schema["properties"]["timeout"].is_object(), "{schema}");
        assert!(DynTool::validate(&TaskOutputSpec, &serde_json::json!({"task_id": " "})).is_err());
        assert!(DynTool::is_read_only(&TaskOutputSpec, &serde_json::json!({"task_id": "a/sub-1"})));
    }

    #[tokio::test]
    async fn reads_a_report_once_and_waits_for_a_running_one() {
        let background = Arc::new(Background::default());
        let tool = TaskOutputTool::new(background.clone());
        let cancel = CancellationToken::new();
        let read = |id: &str, block: bool, timeout: u64| TaskOutputInput {
            task_id: id.into(),
            block: Some(block),
            timeout: Some(timeout),
        };
        let out = tool.read(read("a/sub-1", false, 0), &cancel).await;
        assert!(out.is_error && out.content.contains("none was started"), "{}", out.content);
        let out = tool.read(read("bash_1", false, 0), &cancel).await;
        assert!(out.is_error && out.content.contains("BashOutput"), "{}", out.content);

        background.started("a/sub-1", CancellationToken::new());
        let out = tool.read(read("a/sub-1", false, 0), &cancel).await;
        assert!(!out.is_error && out.content.contains("still running"), "{}", out.content);
        let out = tool.read(read("a/sub-1", true, 50), &cancel).await;
        assert!(out.content.contains("still running"), "{}", out.content);
        let finisher = background.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            finisher.finish("a/sub-1", "REPORT".into());
        });
        let out = tool.read(read("a/sub-1", true, 10_000), &cancel).await;
        assert!(!out.is_error && out.content == "REPORT", "{}", out.content);
        // Read here, it is not delivered to the loop again; it can still be read.
        assert!(background.take().is_empty());
        assert_eq!(tool.read(read("a/sub-1", false, 0), &cancel).await.content, "REPORT");
    }
}
