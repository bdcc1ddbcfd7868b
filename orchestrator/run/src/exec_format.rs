//! Claude Code's headless output shapes for `orch exec --output-format json|stream-json`,
//! so that programs written for `claude -p` read orch's output unchanged: the `system`
//! `init` line, one `assistant` line per content block (with the turn's usage), one
//! `user` line per tool result, and the final `result` object with `subtype`,
//! `is_error`, `num_turns`, `duration_ms`, `total_cost_usd`, `usage`, `modelUsage` and
//! `session_id`. orch's own keys (`status`, `terminal`, `reason`, ...) sit beside
//! Claude Code's; readers that do not know them ignore them.
//!
//! Sub-agents' events are not streamed (Claude Code shows them with a
//! `parent_tool_use_id`); their usage and cost are in the totals.

use std::sync::Mutex;

use orch_agents::{Event, Terminal};
use serde_json::{Value, json};

use crate::run::output::Answer;
use crate::run::report::{AgentReport, AgentStatus};

/// A random id in the UUID v4 form Claude Code's ids have.
pub(crate) fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    // Version 4, variant 10xx.
    let variant = ["8", "9", "a", "b"][usize::from(b[8] >> 6)];
    format!("{}-{}-4{}-{variant}{}-{}", &hex[0..8], &hex[8..12], &hex[13..16], &hex[17..20], &hex[20..32])
}

/// What the `init` line says about the agent.
pub(crate) struct Init<'a> {
    pub cwd: &'a std::path::Path,
    pub model: &'a str,
    pub tools: Vec<String>,
    pub mcp_servers: Vec<String>,
    pub permission_mode: String,
    pub slash_commands: Vec<String>,
    pub agents: Vec<String>,
    pub skills: Vec<String>,
}

/// The `{"type": "system", "subtype": "init", ...}` line that starts a stream.
pub(crate) fn init_line(session_id: &str, init: &Init<'_>) -> Value {
    let connected = |server: &str| init.tools.iter().any(|t| t.starts_with(&format!("mcp__{server}__")));
    let servers: Vec<Value> = init
        .mcp_servers
        .iter()
        .map(|s| json!({"name": s, "status": if connected(s) { "connected" } else { "failed" }}))
        .collect();
    let key_source = if std::env::var_os("ANTHROPIC_API_KEY").is_some() { "ANTHROPIC_API_KEY" } else { "none" };
    json!({
        "type": "system",
        "subtype": "init",
        "cwd": init.cwd,
        "session_id": session_id,
        "tools": init.tools,
        "mcp_servers": servers,
        "model": init.model,
        "permissionMode": init.permission_mode,
        "slash_commands": init.slash_commands,
        "apiKeySource": key_source,
        "output_style": "default",
        "agents": init.agents,
        "skills": init.skills,
        "plugins": [],
        "orch_version": env!("CARGO_PKG_VERSION"),
        "uuid": uuid(),
    })
}

/// Turns the agent's events into stream lines; it also remembers what the result line
/// needs (the last answer's stop reason).
pub(crate) struct Stream {
    session_id: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    model: String,
    usage: Value,
    message: u32,
    /// Whether the last assistant message asked for tools.
    tool_use: bool,
}

impl Stream {
    pub(crate) fn new(session_id: &str) -> Stream {
        Stream { session_id: session_id.to_string(), state: Mutex::new(State::default()) }
    }

    /// Notes what the result line needs of `event` (the last answer's stop reason),
    /// without making lines.
    pub(crate) fn observe(&self, event: &Event) {
        if let Event::AssistantMessage { message, .. } = event {
            let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            state.message += 1;
            state.tool_use = message.content.iter().any(|b| matches!(b, orch_agents::ContentBlock::ToolUse { .. }));
        }
    }

    /// The lines `event` makes (none for most events).
    pub(crate) fn lines(&self, event: &Event) -> Vec<Value> {
        self.observe(event);
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match event {
            Event::Usage { model, usage, .. } => {
                state.model = model.clone();
                state.usage = serde_json::to_value(usage).unwrap_or(Value::Null);
                Vec::new()
            }
            Event::AssistantMessage { message, .. } => {
                let blocks = serde_json::to_value(&message.content).unwrap_or(Value::Null);
                let blocks = blocks.as_array().cloned().unwrap_or_default();
                let id = format!("msg_orch_{}", state.message);
                blocks
                    .into_iter()
                    .map(|block| {
                        json!({
                            "type": "assistant",
                            "message": {
                                "id": id,
                                "type": "message",
                                "role": "assistant",
                                "model": state.model,
                                "content": [block],
                                "stop_reason": null,
                                "stop_sequence": null,
                                "usage": state.usage,
                            },
                            "parent_tool_use_id": null,
                            "session_id": self.session_id,
                            "uuid": uuid(),
                        })
                    })
                    .collect()
            }
            Event::ToolUseFinished { id, is_error, output, .. } => {
                let mut result = json!({"tool_use_id": id, "type": "tool_result", "content": output});
                if *is_error {
                    result["is_error"] = true.into();
                }
                vec![json!({
                    "type": "user",
                    "message": {"role": "user", "content": [result]},
                    "parent_tool_use_id": null,
                    "session_id": self.session_id,
                    "uuid": uuid(),
                })]
            }
            _ => Vec::new(),
        }
    }

    /// The stop reason of the last answer, as the Messages API names it.
    pub(crate) fn stop_reason(&self) -> Option<&'static str> {
        let state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match state.message {
            0 => None,
            _ if state.tool_use => Some("tool_use"),
            _ => Some("end_turn"),
        }
    }
}

/// Claude Code's `subtype` and `terminal_reason` for how the agent ended.
fn subtype(report: &AgentReport, terminal: &Terminal) -> (&'static str, &'static str) {
    match terminal {
        Terminal::Completed if report.status == AgentStatus::Succeeded => ("success", "completed"),
        Terminal::Completed => ("error_during_execution", "completed"),
        Terminal::MaxTurns { .. } => ("error_max_turns", "max_turns"),
        Terminal::BudgetExceeded { budget: orch_agents::Budget::CostUsd, .. } => ("error_max_budget_usd", "max_budget"),
        Terminal::BudgetExceeded { .. } => ("error_during_execution", "max_budget"),
        Terminal::Timeout { .. } => ("error_during_execution", "timeout"),
        Terminal::Aborted { .. } => ("error_during_execution", "aborted"),
        _ => ("error_during_execution", "error"),
    }
}

/// The final `result` object (`--output-format json`, and the last line of
/// `stream-json`).
pub(crate) fn result(
    report: &AgentReport,
    answer: &Answer,
    session_id: &str,
    stop_reason: Option<&str>,
    interrupted: Option<crate::exit::Code>,
) -> Value {
    let (subtype, terminal_reason) = subtype(report, &answer.terminal);
    let is_error = subtype != "success";
    let usage = serde_json::to_value(report.usage).unwrap_or(Value::Null);
    let model = report.model.clone().unwrap_or_default();
    let model_usage = json!({ model.clone(): {
        "inputTokens": report.usage.input_tokens,
        "outputTokens": report.usage.output_tokens,
        "cacheReadInputTokens": report.usage.cache_read_input_tokens,
        "cacheCreationInputTokens": report.usage.cache_creation_input_tokens,
        "webSearchRequests": 0,
        "costUSD": report.cost_usd,
    }});
    let mut out = json!({
        "type": "result",
        "subtype": subtype,
        "is_error": is_error,
        "duration_ms": report.duration_ms,
        "num_turns": report.turns,
        "stop_reason": stop_reason,
        "session_id": session_id,
        "total_cost_usd": report.cost_usd,
        "usage": usage,
        "modelUsage": model_usage,
        "permission_denials": [],
        "terminal_reason": terminal_reason,
        "uuid": uuid(),
        // orch's own keys.
        "status": report.status.as_str(),
        "terminal": answer.terminal,
        "model": model,
        "agent": report.id,
    });
    if !report.text.is_empty() || !is_error {
        out["result"] = report.text.clone().into();
    }
    if let Some(reason) = &report.reason {
        out["reason"] = reason.clone().into();
        if is_error {
            out["errors"] = json!([reason]);
        }
    } else if is_error {
        out["errors"] = json!([answer.terminal.to_string()]);
    }
    if let Some(output) = &report.output {
        out["structured_output"] = output.clone();
    }
    if let Some(code) = interrupted {
        out["interrupted"] = true.into();
        out["exit_code"] = (code as u8).into();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_uuid_v4_form() {
        for _ in 0..50 {
            let id = uuid();
            let parts: Vec<&str> = id.split('-').collect();
            assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
            assert!(parts[2].starts_with('4'), "{id}");
            assert!("89ab".contains(&parts[3][..1]), "{id}");
            assert!(id.chars().all(|c| c == '-' || c.is_ascii_hexdigit()), "{id}");
        }
        assert_ne!(uuid(), uuid());
    }
}
