//! Hooks and MCP servers as configuration: the `hooks:` and `mcp_servers:` keys of a
//! workflow, in the same shapes Claude Code uses in `.claude/settings.json` and
//! `.mcp.json`, so the coordinator can read those files into the same types.
//!
//! ```yaml
//! hooks:
//!   PreToolUse:
//!     - matcher: Bash              # tool names: exact, `A|B`, a regex, or `*`
//!       if: "Bash(git push *)"     # optional: a permission rule the call must match
//!       hooks:
//!         - { type: command, command: ./ci/check-push.sh, timeout: 30 }
//! mcp_servers:
//!   docs: { command: python3, args: [tools/docs_server.py] }      # stdio
//!   search: { type: http, url: "http://127.0.0.1:8123/mcp" }     # streamable HTTP
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use orch_types::HookEvent;

/// `hooks:`: per event, the matcher groups in file order.
pub type HookSettings = BTreeMap<HookEvent, Vec<HookMatcher>>;

/// One matcher group: which calls it applies to, and the commands to run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookMatcher {
    /// Tool names (PreToolUse, PostToolUse) or the source/trigger of other events:
    /// an exact name, names joined by `|`, a regular expression, or `*`/empty for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// A permission rule such as `Bash(git push *)` the call must also match.
    #[serde(rename = "if", default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<String>,
    pub hooks: Vec<HookCommand>,
}

/// The kind of a hook; orch runs commands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookKind {
    #[default]
    Command,
}

/// One hook command.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookCommand {
    #[serde(rename = "type", default)]
    pub kind: HookKind,
    /// A shell command, run with `sh -c` in the agent's sandbox and working directory.
    pub command: String,
    /// Seconds before the hook is killed (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum McpTransport {
    /// A process speaking MCP on stdin/stdout, started inside the agent's sandbox.
    #[default]
    Stdio,
    /// Streamable HTTP at `url`.
    Http,
    /// The same as `http` (the name some `.mcp.json` files use).
    StreamableHttp,
    /// The older HTTP+SSE transport. Accepted in declarations, so that a `.mcp.json`
    /// written for Claude Code still loads; orch refuses that server alone when an
    /// agent starts it.
    Sse,
}

/// One MCP server, under `mcp_servers.<name>` (or `mcpServers.<name>` of `.mcp.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServer {
    #[serde(rename = "type", default)]
    pub transport: McpTransport,
    /// The program of a stdio server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Extra environment of a stdio server (the sandbox passes no other secrets).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The endpoint of an HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl McpServer {
    pub fn is_http(&self) -> bool {
        matches!(self.transport, McpTransport::Http | McpTransport::StreamableHttp)
    }

    /// What is wrong with this declaration, if anything: `(message, hint)`.
    pub fn problem(&self) -> Option<(&'static str, &'static str)> {
        if self.transport == McpTransport::Sse {
            return None;
        }
        if self.is_http() {
            if self.url.as_deref().is_none_or(|u| !(u.starts_with("http://") || u.starts_with("https://"))) {
                return Some(("an http MCP server needs a `url`", "write `url: http://host:port/mcp` (http or https)"));
            }
        } else if self.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
            return Some((
                "a stdio MCP server needs a `command`",
                "write `command: <program>` and `args: [...]`, or `type: http` with a `url`",
            ));
        }
        None
    }
}

/// Whether `name` can be an MCP server name (it becomes part of tool names).
pub fn is_server_name(name: &str) -> bool {
    !name.is_empty() && !name.contains("__") && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}
