//! Claude Code's headless output shapes for `orch exec --output-format json|stream-json`,
//! so that programs written for `claude -p` read orch's output unchanged: the `system`
//! `init` line, one `assistant` line per content block (with the turn's usage), one
//! `user` line per tool result, and the final `result` object with `subtype`,
//! `is_error`, `num_turns`, `duration_ms`, `total_cost_usd`, `usage`, `modelUsage` and
//! `session_id`. orch's own keys (`status`, `terminal`, `reason`, ...) sit beside
//! Claude Code's; readers that do not know them ignore them.
//!
//! A sub-agent is streamed as Claude Code streams it: a `system` `task_started` line,
//! its prompt as a `user` line, its tool calls and results, and a `task_notification`
//! line when it ends (its last answer is the Agent call's result, not a line of its
//! own), each with the id of the `Agent` call as `parent_tool_use_id`; its usage and
//! cost are in the totals. A call that permissions or a hook denied gets a `system`
//! `permission_denied` line and is listed in the result's `permission_denials`.

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
    main: Scope,
    /// Each sub-agent's, by its id.
    nested: std::collections::HashMap<String, Scope>,
    /// The sub-agents whose task_started line is out.
    started: std::collections::HashSet<String>,
    message: u32,
    /// Sub-agents' assistant messages so far (for their ids).
    nested_messages: u32,
    /// Whether the last assistant message asked for tools.
    tool_use: bool,
    /// The input of each call started, by id, until it finishes.
    inputs: std::collections::HashMap<String, Value>,
    /// `{tool_name, tool_use_id, tool_input}` of each denied call.
    denials: Vec<Value>,
}

/// The model and latest usage of one agent, for its assistant lines, and (for a
/// sub-agent) its report.
#[derive(Default)]
struct Scope {
    model: String,
    usage: Value,
    report: String,
    /// A sub-agent's type and description (from its Agent call), tokens, tool calls
    /// and start.
    subagent_type: String,
    description: String,
    tokens: u64,
    tool_uses: u64,
    started: Option<std::time::Instant>,
}

impl Stream {
    pub(crate) fn new(session_id: &str) -> Stream {
        Stream { session_id: session_id.to_string(), state: Mutex::new(State::default()) }
    }

    /// Notes what the result line needs of `event` (the last answer's stop reason, the
    /// denied calls), without making lines.
    pub(crate) fn observe(&self, event: &Event) {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Event::AssistantMessage { message, .. } = event {
            state.message += 1;
            state.tool_use = message.content.iter().any(|b| matches!(b, orch_agents::ContentBlock::ToolUse { .. }));
        }
        match event.innermost() {
            Event::ToolUseStarted { id, input, .. } => {
                state.inputs.insert(id.clone(), input.clone());
            }
            Event::ToolUseFinished { id, name, denied, .. } => {
                let input = state.inputs.remove(id);
                if *denied {
                    let input = input.unwrap_or(Value::Null);
                    state.denials.push(json!({"tool_name": name, "tool_use_id": id, "tool_input": input}));
                }
            }
            _ => {}
        }
    }

    /// The lines `event` makes (none for most events).
    pub(crate) fn lines(&self, event: &Event) -> Vec<Value> {
        self.observe(event);
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (event, nested) = match event {
            Event::Subagent { agent, tool_use_id, event } => {
                (event.innermost(), Some((agent.as_str(), tool_use_id.as_deref())))
            }
            event => (event, None),
        };
        let parent = nested.and_then(|(_, id)| id);
        let mut out = Vec::new();
        // A sub-agent's first event: Claude Code's task_started line, then its prompt as
        // a user line, both from the input of the Agent call.
        if let Some((agent, Some(call))) = nested
            && state.started.insert(agent.to_string())
        {
            let input = state.inputs.get(call).cloned().unwrap_or(Value::Null);
            let text = |key: &str| input.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
            let scope = state.nested.entry(agent.to_string()).or_default();
            scope.subagent_type =
                input.get("subagent_type").and_then(Value::as_str).unwrap_or("general-purpose").to_string();
            scope.description = text("description");
            scope.started = Some(std::time::Instant::now());
            out.push(json!({
                "type": "system",
                "subtype": "task_started",
                "task_id": agent,
                "tool_use_id": call,
                "description": text("description"),
                "subagent_type": input.get("subagent_type").and_then(Value::as_str).unwrap_or("general-purpose"),
                "is_backgrounded": input.get("run_in_background").and_then(Value::as_bool).unwrap_or(false),
                "task_type": "local_agent",
                "spawn_depth": agent.matches("/sub-").count(),
                "run_id": self.session_id,
                "prompt": text("prompt"),
                "uuid": uuid(),
                "session_id": self.session_id,
            }));
            out.push(json!({
                "type": "user",
                "message": {"role": "user", "content": [{"type": "text", "text": text("prompt")}]},
                "parent_tool_use_id": call,
                "session_id": self.session_id,
                "uuid": uuid(),
            }));
        }
        // What Claude Code adds to each line of a sub-agent.
        let tag = |state: &State, line: &mut Value| {
            if let Some((agent, _)) = nested {
                let scope = state.nested.get(agent);
                line["agent_id"] = agent.into();
                line["subagent_type"] = scope.map(|s| s.subagent_type.clone()).unwrap_or_default().into();
                line["task_description"] = scope.map(|s| s.description.clone()).unwrap_or_default().into();
            }
        };
        if let Some(first) = out.iter_mut().find(|l| l["type"] == "user") {
            tag(&state, first);
        }
        match event {
            Event::Usage { model, usage, .. } => {
                let scope = match nested {
                    Some((agent, _)) => state.nested.entry(agent.to_string()).or_default(),
                    None => &mut state.main,
                };
                scope.model = model.clone();
                scope.usage = serde_json::to_value(usage).unwrap_or(Value::Null);
                scope.tokens += usage.total();
            }
            // A sub-agent's last answer is its report, which the Agent call's result
            // carries: Claude Code does not stream it.
            Event::AssistantMessage { message, .. }
                if nested.is_some()
                    && !message.content.iter().any(|b| matches!(b, orch_agents::ContentBlock::ToolUse { .. })) =>
            {
                if let Some((agent, _)) = nested {
                    state.nested.entry(agent.to_string()).or_default().report = message.text();
                }
            }
            Event::AssistantMessage { message, .. } => {
                let blocks = serde_json::to_value(&message.content).unwrap_or(Value::Null);
                let blocks = blocks.as_array().cloned().unwrap_or_default();
                let (id, scope) = match nested {
                    Some((agent, _)) => {
                        state.nested_messages += 1;
                        (format!("msg_orch_{agent}_{}", state.nested_messages), state.nested.get(agent))
                    }
                    None => (format!("msg_orch_{}", state.message), Some(&state.main)),
                };
                let (model, usage) = scope.map_or((String::new(), Value::Null), |s| (s.model.clone(), s.usage.clone()));
                let start = out.len();
                out.extend(blocks.into_iter().map(|block| {
                    json!({
                        "type": "assistant",
                        "message": {
                            "id": id,
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [block],
                            "stop_reason": null,
                            "stop_sequence": null,
                            "usage": usage,
                        },
                        "parent_tool_use_id": parent,
                        "session_id": self.session_id,
                        "uuid": uuid(),
                    })
                }));
                for line in &mut out[start..] {
                    tag(&state, line);
                }
            }
            Event::ToolUseFinished { id, name, is_error, output, denied, .. } => {
                if *denied {
                    out.push(json!({
                        "type": "system",
                        "subtype": "permission_denied",
                        "tool_name": name,
                        "tool_use_id": id,
                        "message": output,
                        "uuid": uuid(),
                        "session_id": self.session_id,
                    }));
                }
                let mut result = json!({"tool_use_id": id, "type": "tool_result", "content": output});
                if *is_error {
                    result["is_error"] = true.into();
                }
                let mut line = json!({
                    "type": "user",
                    "message": {"role": "user", "content": [result]},
                    "parent_tool_use_id": parent,
                    "session_id": self.session_id,
                    "uuid": uuid(),
                });
                tag(&state, &mut line);
                out.push(line);
                if let Some((agent, _)) = nested {
                    state.nested.entry(agent.to_string()).or_default().tool_uses += 1;
                }
            }
            Event::Terminal { reason, .. } => {
                if let Some((agent, call)) = nested {
                    let scope = state.nested.get(agent);
                    let report = scope.map(|s| s.report.clone()).unwrap_or_default();
                    let usage = json!({
                        "total_tokens": scope.map_or(0, |s| s.tokens),
                        "tool_uses": scope.map_or(0, |s| s.tool_uses),
                        "duration_ms": scope.and_then(|s| s.started).map_or(0, |t| t.elapsed().as_millis() as u64),
                    });
                    out.push(json!({
                        "type": "system",
                        "subtype": "task_notification",
                        "task_id": agent,
                        "tool_use_id": call,
                        "status": if matches!(reason, Terminal::Completed) { "completed" } else { "failed" },
                        "summary": report,
                        "usage": usage,
                        "run_id": self.session_id,
                        "uuid": uuid(),
                        "session_id": self.session_id,
                    }));
                }
            }
            _ => {}
        }
        out
    }

    /// The calls denied so far, for the result's `permission_denials`.
    pub(crate) fn denials(&self) -> Vec<Value> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner).denials.clone()
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
    denials: Vec<Value>,
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
        "permission_denials": denials,
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
