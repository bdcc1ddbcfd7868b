//! The tool host's side of the host protocol ([`crate::protocol`]): [`HostTools`]
//! answers each request, running a tool call against the agent's [`Session`] and the
//! other services (hooks, the hook check, project instructions) in the host's process.
//!
//! A tool call also carries the path patterns the agent's permission rules deny reading;
//! the search tools leave what they cover out of their results
//! ([`crate::permissions::paths::hidden_paths`]).

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{DynTool, Session, ToolContext};
use crate::permissions::paths::{PathFilter, hiding};
use crate::protocol::{HostRequest, ToolExecutor, ToolRequest};
use crate::tool::ToolOutput;

/// The host side: the tools of one agent and their shared session.
#[derive(Debug)]
pub struct HostTools {
    tools: Vec<Arc<dyn DynTool>>,
    session: Arc<Session>,
    /// The sessions of the sub-agents that called through this host, by scope.
    scoped: std::sync::Mutex<std::collections::HashMap<String, Arc<Session>>>,
}

impl std::fmt::Debug for dyn DynTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tool({})", self.name())
    }
}

impl HostTools {
    pub fn new(tools: Vec<Arc<dyn DynTool>>, session: Arc<Session>) -> Self {
        Self { tools, session, scoped: Default::default() }
    }

    /// The session of `scope`: the host's own for `None`, else one per sub-agent that
    /// shares the working directory and background shells but not the read stamps.
    fn session(&self, scope: Option<&str>) -> Arc<Session> {
        match scope {
            None => self.session.clone(),
            Some(scope) => self
                .scoped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(scope.to_string())
                .or_insert_with(|| Arc::new(self.session.scoped()))
                .clone(),
        }
    }

    /// Kills the background shells of this host's agent and its sub-agents. Call it when
    /// the agent ends; dropping the host does the same.
    pub fn shutdown(&self) -> usize {
        self.session.shells().kill_all()
    }

    /// Runs one request. Unknown tools and bad input are error results, not failures.
    /// The services other than tool calls are no tools, so no pool offers them; the MCP
    /// ones are answered before this by the run crate's stdio servers, and reach here
    /// only in a host started without any.
    pub async fn run(&self, request: HostRequest, cancel: CancellationToken) -> ToolOutput {
        match request {
            HostRequest::Tool(call) => self.call(call, cancel).await,
            HostRequest::Hook(run) => crate::command_hooks::run_in_host(run, self.session.cwd(), cancel).await,
            HostRequest::HookCheck { commands } => crate::command_hooks::check_in_host(&commands, self.session.cwd()),
            HostRequest::ProjectInstructions => {
                let found = crate::instructions::collect(self.session.cwd());
                match serde_json::to_string(&found) {
                    Ok(json) => ToolOutput::ok(json),
                    Err(e) => ToolOutput::error(format!("cannot encode the project instructions: {e}")),
                }
            }
            HostRequest::McpTools | HostRequest::McpStderr => {
                ToolOutput::error("this tool host was started without MCP servers")
            }
        }
    }

    /// Runs one tool call.
    async fn call(&self, request: ToolRequest, cancel: CancellationToken) -> ToolOutput {
        let Some(tool) = self.tools.iter().find(|t| t.name() == request.tool) else {
            return ToolOutput::error(format!("the tool host has no tool named `{}`", request.tool));
        };
        let hidden = match PathFilter::new(&request.hidden) {
            Ok(filter) => Arc::new(filter),
            Err(e) => return ToolOutput::error(format!("cannot build the filter of denied paths for this call: {e}")),
        };
        let ctx = ToolContext { session: self.session(request.scope.as_deref()), cancel };
        let touched = crate::instructions::touched_path(&request.tool, &request.input).map(|p| ctx.session.resolve(p));
        match hiding(hidden, tool.call_with_attachments(request.input, &ctx)).await {
            Ok(mut rich) => {
                // A directory with its own instruction files, reached for the first
                // time: its files go with this result, once.
                let mut loaded = Vec::new();
                if let Some(touched) = touched {
                    let found = ctx.session.nested_instructions(&touched);
                    if !found.files.is_empty() {
                        rich.text.push_str("\n\n");
                        rich.text.push_str(&crate::prompt::render_nested(&found));
                        loaded = found.loaded(ctx.session.cwd(), "nested_traversal", Some(&touched));
                    }
                }
                let mut output = ToolOutput::ok(rich.text).with_attachments(rich.attachments);
                output.instructions = loaded;
                output
            }
            Err(e) => ToolOutput::error(e.0),
        }
    }

    /// Decodes a request payload, runs it, and encodes the reply.
    pub async fn handle_json(&self, payload: Value, cancel: CancellationToken) -> Result<Value, String> {
        let request: HostRequest = serde_json::from_value(payload).map_err(|e| format!("bad host request: {e}"))?;
        let output = self.run(request, cancel).await;
        serde_json::to_value(output).map_err(|e| format!("cannot encode the tool result: {e}"))
    }
}

/// Runs calls in this process. For tests of the pipeline only: the product always
/// crosses into a tool host.
#[derive(Debug)]
pub struct InProcess(pub HostTools);

#[async_trait]
impl ToolExecutor for InProcess {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String> {
        Ok(self.0.run(request, cancel).await)
    }
}
