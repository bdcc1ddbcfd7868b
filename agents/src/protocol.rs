//! What the coordinator asks of an agent's tool host: one typed request for a tool call
//! and for each of the host's other services (a hook command, the hook check, the
//! project instructions, the stdio MCP servers), and [`ToolExecutor`], the interface
//! that carries a request to wherever the agent's tools run.
//!
//! A leaf: it names the shapes only. The host side that answers them is
//! [`crate::tools::host::HostTools`] (and the run crate's MCP servers).

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::permissions::paths::PathPattern;
use crate::tool::ToolOutput;

/// One request to the tool host. The reply is always a [`ToolOutput`]; a service's
/// answer is JSON in its content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case")]
pub enum HostRequest {
    /// A call of one of the agent's tools (a core tool or an MCP server's).
    Tool(ToolRequest),
    /// A hook command to run in the agent's sandbox; the answer is a `HookResult`.
    Hook(HookRun),
    /// What the hook commands lack to start in the sandbox (a list of
    /// `MissingInterpreter`).
    HookCheck { commands: Vec<String> },
    /// The project instructions of the working directory (`Instructions`).
    ProjectInstructions,
    /// The tools of the agent's stdio MCP servers, started on the first ask
    /// (`McpListing`).
    McpTools,
    /// What those servers wrote to stderr since the last ask, by server.
    McpStderr,
}

impl HostRequest {
    /// A call of `tool` by the host's own agent that hides nothing.
    pub fn tool(tool: impl Into<String>, input: Value) -> Self {
        HostRequest::Tool(ToolRequest { tool: tool.into(), input, scope: None, hidden: Vec::new() })
    }
}

/// A tool call as it travels to the tool host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolRequest {
    pub tool: String,
    pub input: Value,
    /// The sub-agent the call is made for (`None`: the agent the host was started for).
    /// Each scope has its own read stamps and todo list; see
    /// [`crate::tools::Session::scoped`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Paths the call must not show in its results (denied for reading).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hidden: Vec<PathPattern>,
}

/// A hook command the tool host is asked to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookRun {
    pub command: String,
    /// The event, as JSON, for the command's stdin.
    pub stdin: String,
    pub timeout_ms: u64,
    /// The most bytes of stdout and of stderr kept.
    pub cap: usize,
}

/// Runs requests where the agent's tools live. The product's executor talks to the
/// agent's confined tool host; the error is the host failing, not the tool.
#[async_trait]
pub trait ToolExecutor: Send + Sync {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use serde_json::json;

    use super::*;

    #[test]
    fn requests_keep_their_wire_form() {
        let call = HostRequest::tool("Read", json!({"file_path": "a"}));
        assert_eq!(
            serde_json::to_value(&call).unwrap(),
            json!({"request": "tool", "tool": "Read", "input": {"file_path": "a"}})
        );
        let check = HostRequest::HookCheck { commands: vec!["./x".into()] };
        assert_eq!(serde_json::to_value(&check).unwrap(), json!({"request": "hook_check", "commands": ["./x"]}));
        assert_eq!(serde_json::to_value(HostRequest::McpTools).unwrap(), json!({"request": "mcp_tools"}));
        for request in [call, check, HostRequest::ProjectInstructions, HostRequest::McpStderr] {
            let back: HostRequest = serde_json::from_value(serde_json::to_value(&request).unwrap()).unwrap();
            assert_eq!(back, request);
        }
        // A tool name is never a service: `__hook` in the tool field is just an unknown tool.
        let odd: HostRequest =
            serde_json::from_value(json!({"request": "tool", "tool": "__hook", "input": {}})).unwrap();
        assert!(matches!(odd, HostRequest::Tool(ToolRequest { tool, .. }) if tool == "__hook"));
        assert!(serde_json::from_value::<HostRequest>(json!({"tool": "Read", "input": {}})).is_err());
    }
}
