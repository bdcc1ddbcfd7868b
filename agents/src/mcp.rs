//! MCP tools as the pipeline sees them: a [`DynTool`] per tool of an MCP server, named
//! `mcp__<server>__<tool>`, with the server's description and JSON schema, so lookup,
//! the schema check, hooks and permission rules apply to it as to any tool.
//!
//! The MCP clients themselves live in the binary (`orch`): stdio servers are started
//! and called inside the agent's tool host, HTTP servers from the coordinator. This
//! module only carries the shapes they exchange ([`McpToolInfo`], [`McpListing`], the
//! answer to [`crate::protocol::HostRequest::McpTools`]) and the tool objects.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::tools::{DynTool, ToolContext, ToolError};

/// The prefix of every MCP tool name.
pub const PREFIX: &str = "mcp__";

/// One tool of one server, as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct McpToolInfo {
    pub server: String,
    pub tool: String,
    pub description: String,
    pub input_schema: Value,
    /// The server says the tool changes nothing (`readOnlyHint`).
    #[serde(default)]
    pub read_only: bool,
}

impl McpToolInfo {
    /// `mcp__<server>__<tool>`.
    pub fn full_name(&self) -> String {
        full_name(&self.server, &self.tool)
    }
}

/// What a set of servers offered, and the servers that could not be started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct McpListing {
    pub tools: Vec<McpToolInfo>,
    /// `(server, why)`.
    pub failed: Vec<(String, String)>,
}

/// `mcp__<server>__<tool>`.
pub fn full_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// `(server, tool)` of an `mcp__<server>__<tool>` name.
pub fn split_name(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(PREFIX)?.split_once("__")
}

/// Tool names live as long as the process (the tool interface hands out `&'static
/// str`); each distinct text is kept once.
fn intern(text: String) -> &'static str {
    static TABLE: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let table = TABLE.get_or_init(|| Mutex::new(HashSet::new()));
    let mut table = match table.lock() {
        Ok(t) => t,
        Err(poisoned) => poisoned.into_inner(),
    };
    if let Some(known) = table.get(text.as_str()) {
        return known;
    }
    let leaked: &'static str = Box::leak(text.into_boxed_str());
    table.insert(leaked);
    leaked
}

/// An MCP tool in an agent's pool. Its calls never run here: the pool sends them,
/// by name, through the agent's executor to wherever its server is reached.
#[derive(Debug, Clone)]
pub struct McpTool {
    name: &'static str,
    description: &'static str,
    schema: Value,
    read_only: bool,
    /// Why it cannot be called (its server did not start).
    unavailable: Option<String>,
}

impl McpTool {
    pub fn new(info: &McpToolInfo) -> McpTool {
        let mut schema = info.input_schema.clone();
        if !schema.is_object() {
            schema = json!({ "type": "object" });
        }
        McpTool {
            name: intern(info.full_name()),
            description: intern(info.description.clone()),
            schema,
            read_only: info.read_only,
            unavailable: None,
        }
    }

    /// A tool a workflow names whose server failed to start: every call is an error
    /// that says why.
    pub fn unavailable(name: &str, why: String) -> McpTool {
        McpTool {
            name: intern(name.to_string()),
            description: intern(format!("Unavailable: its MCP server could not be started ({why}).")),
            schema: json!({ "type": "object" }),
            read_only: false,
            unavailable: Some(why),
        }
    }

    /// Why calls fail, when they do.
    pub fn unavailable_reason(&self) -> Option<&str> {
        self.unavailable.as_deref()
    }
}

#[async_trait]
impl DynTool for McpTool {
    fn name(&self) -> &'static str {
        self.name
    }

    fn description(&self) -> &'static str {
        self.description
    }

    fn input_schema(&self) -> Value {
        self.schema.clone()
    }

    fn is_read_only(&self, _input: &Value) -> bool {
        self.read_only
    }

    fn is_concurrency_safe(&self, _input: &Value) -> bool {
        self.read_only
    }

    fn is_destructive(&self, _input: &Value) -> bool {
        !self.read_only
    }

    fn validate(&self, _input: &Value) -> Result<(), String> {
        match &self.unavailable {
            Some(why) => Err(format!("the MCP server of {} could not be started: {why}", self.name)),
            None => Ok(()),
        }
    }

    fn permission_subject(&self, _input: &Value) -> Option<String> {
        None
    }

    fn writes(&self, _input: &Value) -> Vec<PathBuf> {
        Vec::new()
    }

    fn max_result_bytes(&self) -> usize {
        50_000
    }

    async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new(format!(
            "{} is an MCP tool; it is called through its server, not as a local tool",
            self.name
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_and_intern() {
        assert_eq!(split_name("mcp__docs__search"), Some(("docs", "search")));
        assert_eq!(split_name("Read"), None);
        let info = McpToolInfo {
            server: "docs".into(),
            tool: "search".into(),
            description: "Search.".into(),
            input_schema: json!({"type": "object"}),
            read_only: true,
        };
        let (a, b) = (McpTool::new(&info), McpTool::new(&info));
        assert!(std::ptr::eq(a.name(), b.name()));
        assert_eq!(a.name(), "mcp__docs__search");
        assert!(a.is_read_only(&json!({})));
        let down = McpTool::unavailable("mcp__gone__x", "it exited".into());
        assert!(down.validate(&json!({})).unwrap_err().contains("it exited"));
    }
}
