//! `orch __mcp-client` (hidden): the coordinator's MCP client on its own, which the
//! official conformance suite drives (`tests/conformance/client.py`). It reads HTTP
//! servers from a file of `.mcp.json`'s shape, checks and expands them as `orch run`
//! does, connects with [`McpHub`] (OAuth included), lists their tools, makes the calls
//! asked for, and returns one JSON line per tool and per call, which the binary prints on
//! stdout.

use std::path::Path;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::exit::Code;
use crate::mcp::McpHub;

/// Connects to the servers of `config`, then calls each of `calls`
/// (`<server>/<tool>=<JSON arguments>`, the arguments optional). `Failed` when a server
/// is not available or a call fails; each failure is a `warning:` line on stderr.
pub async fn probe(config: &Path, calls: &[String]) -> Result<Probe, Error> {
    let text = std::fs::read_to_string(config)
        .map_err(|e| Error::Message(format!("cannot read {}: {e}", config.display())))?;
    let servers = crate::hooks_config::mcp_servers_of(&text, &config.display().to_string())?;
    for (name, spec) in &servers {
        if !spec.is_http() {
            return Err(Error::Message(format!(
                "server `{name}`: only HTTP servers are probed (stdio ones run in an agent's sandbox)"
            )));
        }
    }
    let (servers, unexpanded) = crate::mcp_env::expand_all(servers, &crate::mcp_env::process_env);
    let mut ok = true;
    for (server, why) in unexpanded {
        tracing::warn!("the MCP server `{server}` is not available: {why}");
        ok = false;
    }
    let cwd = std::env::current_dir()?;
    let (hub, listing) = McpHub::start(&servers, &cwd).await;
    for (server, why) in &listing.failed {
        tracing::warn!("the MCP server `{server}` is not available: {why}");
        ok = false;
    }
    let mut lines = Vec::new();
    for tool in &listing.tools {
        lines.push(json!({"server": tool.server, "tool": tool.tool}));
    }
    for call in calls {
        let (target, input) = call.split_once('=').unwrap_or((call, "{}"));
        let Some((server, tool)) = target.split_once('/') else {
            return Err(Error::Message(format!(
                "`--call {call}`: write `<server>/<tool>` or `<server>/<tool>=<JSON>`"
            )));
        };
        let input: Value = serde_json::from_str(input)
            .map_err(|e| Error::Message(format!("`--call {call}`: the arguments are not JSON: {e}")))?;
        let name = format!("mcp__{server}__{tool}");
        let out = hub.call(&name, input, CancellationToken::new()).await;
        lines.push(json!({"tool": name, "is_error": out.is_error, "content": out.content}));
        if out.is_error {
            tracing::warn!("`{name}` failed: {}", out.content);
            ok = false;
        }
    }
    hub.shutdown().await;
    Ok(Probe { lines, code: if ok { Code::Success } else { Code::Failed } })
}

/// What a probe found: one JSON line per tool listed and per call made, in order, and
/// how it ended.
#[derive(Debug)]
pub struct Probe {
    pub lines: Vec<Value>,
    pub code: Code,
}
