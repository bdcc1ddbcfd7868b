//! Hook commands: the [`Hooks`] of an agent built from shell commands, in Claude Code's
//! hook protocol.
//!
//! Each hook is a shell command bound to an event, a matcher (on the tool name; on the
//! source of a SessionStart, the trigger of a compaction, the agent type of a nested
//! agent, the kind of a notification or of a model failure, the reason a session
//! ended) and optionally a permission-rule pattern on the call (`Bash(git push *)`).
//! It gets the event as JSON on stdin, with Claude Code's fields (`session_id`,
//! `transcript_path`, `cwd`, `permission_mode`, `hook_event_name`, `agent_id` and
//! `agent_type` in a nested agent, then the event's own), and answers with its exit
//! code and stdout:
//! - exit 0: fine; a JSON object on stdout may carry `decision` (`approve`/`block`),
//!   `hookSpecificOutput.permissionDecision` (`allow`/`deny`/`ask`), `updatedInput`,
//!   `updatedToolOutput`, `additionalContext`, `continue: false` with `stopReason`. The
//!   plain stdout of a SessionStart or UserPromptSubmit hook is context for the model;
//! - exit 2: blocks what the event is about (the prompt, the call, the stop, the
//!   compaction) with stderr as the reason; after a tool ran, the reason is feedback
//!   added to its result. Events that cannot block only report it;
//! - anything else: a non-blocking error, reported.
//!
//! Hooks never run in the coordinator: each run is the internal host request
//! [`HostRequest::Hook`] to the agent's tool host, so the command runs in the agent's sandbox
//! with its environment. No pool offers that request as a tool, so the model cannot
//! call it. Each run has a timeout and capped output; a crash or a timeout is reported
//! as an [`Event::Hook`] and never stops the loop.
//!
//! A hook is a shell command, as in Claude Code on Linux: it runs as `/bin/sh -c
//! <command>`. What it needs to start is `/bin/sh`, the program its first word names
//! (`bash` in `bash -c '…'`, `python3` in `python3 hook.py`, after assignments and
//! wrappers such as `env`), and, when that program is a script, the interpreter of its
//! `#!` line. Before an agent works, [`check`] asks its tool host
//! ([`HostRequest::HookCheck`]) whether all of that exists there: in a container image without
//! `bash`, a `bash` hook fails the agent's start (fails closed) instead of failing at
//! every event while the agent goes on.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::hooks::{
    DEFAULT_STOP_BLOCK_LIMIT, HookDecision, Hooks, PermissionAnswer, PostToolUse, PreToolUse, PromptSubmit,
};
use crate::permissions::{Rule, RuleError};
use crate::protocol::{HookRun, HostRequest, ToolExecutor};
use crate::tool::{ToolCall, ToolOutput};
use crate::tools::DynTool;

/// The shell every hook command runs with (`sh -c`).
pub const SHELL: &str = "/bin/sh";

/// How long a hook may run when its configuration does not say.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How much of a hook's stdout and of its stderr is kept.
pub const OUTPUT_CAP: usize = 64 * 1024;

pub use orch_types::HookEvent;

/// One configured hook command.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandHook {
    pub event: HookEvent,
    /// An exact name, names joined by `|`, a regular expression, or `None`/`*` for all.
    pub matcher: Option<String>,
    /// A permission rule the tool call must match too (`Bash(git push *)`).
    pub condition: Option<String>,
    pub command: String,
    pub timeout: Duration,
}

/// A hook configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HookConfigError {
    #[error("the {event} hook matcher `{matcher}` is not a valid regular expression: {message}")]
    Matcher { event: &'static str, matcher: String, message: String },
    #[error("the {event} hook condition is not a valid permission rule: {error}")]
    Condition { event: &'static str, error: RuleError },
}

enum Matcher {
    All,
    Names(Vec<String>),
    Regex(regex::Regex),
}

impl Matcher {
    fn new(event: HookEvent, text: Option<&str>) -> Result<Matcher, HookConfigError> {
        let text = text.map(str::trim).unwrap_or_default();
        if text.is_empty() || text == "*" {
            return Ok(Matcher::All);
        }
        if text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '|')) {
            return Ok(Matcher::Names(text.split('|').map(str::to_string).collect()));
        }
        regex::Regex::new(&format!("^(?:{text})$")).map(Matcher::Regex).map_err(|e| HookConfigError::Matcher {
            event: event.as_str(),
            matcher: text.to_string(),
            message: e.to_string(),
        })
    }

    fn matches(&self, target: &str) -> bool {
        match self {
            Matcher::All => true,
            Matcher::Names(names) => names.iter().any(|n| n == target),
            Matcher::Regex(re) => re.is_match(target),
        }
    }
}

/// Checks every matcher and condition of `hooks`, so a bad one is found before any
/// agent starts.
pub fn validate(hooks: &[CommandHook]) -> Result<(), HookConfigError> {
    for hook in hooks {
        Matcher::new(hook.event, hook.matcher.as_deref())?;
        if let Some(condition) = hook.condition.as_deref().filter(|c| !c.trim().is_empty()) {
            Rule::parse(condition, Path::new("/"), None)
                .map_err(|error| HookConfigError::Condition { event: hook.event.as_str(), error })?;
        }
    }
    Ok(())
}

struct Compiled {
    hook: CommandHook,
    matcher: Matcher,
    condition: Option<Rule>,
}

/// What came of one run, as the tool host reports it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookResult {
    /// The exit code; `None` when it was killed by a signal or never ran.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
    /// It could not be started (or was cancelled).
    pub error: Option<String>,
}

/// What one hook said, once its result is read.
#[derive(Debug, Default)]
struct Reply {
    /// Exit 2 or `decision: block`: the reason.
    blocked: Option<String>,
    decision: Option<HookDecision>,
    updated_input: Option<Value>,
    /// PostToolUse's `updatedToolOutput`, as text.
    updated_output: Option<String>,
    context: Option<String>,
    /// PermissionRequest's `decision`.
    permission: Option<PermissionAnswer>,
}

/// The hook commands of one agent, run in its tool host.
pub struct CommandHooks {
    agent_id: String,
    /// A nested agent's type (`general-purpose`, a definition's name); `None` for the
    /// agent of the session.
    agent_type: Option<String>,
    session_id: String,
    transcript_path: String,
    permission_mode: String,
    /// The model of the agent's loop, for SessionStart's `model` (left out if empty).
    model: String,
    cwd: PathBuf,
    hooks: Vec<Compiled>,
    tools: Vec<Arc<dyn DynTool>>,
    executor: Arc<dyn ToolExecutor>,
    events: Arc<dyn EventSink>,
    subagent: bool,
    stop_limit: u32,
    halt: Mutex<Option<String>>,
    cancel: CancellationToken,
}

impl std::fmt::Debug for CommandHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandHooks")
            .field("agent_id", &self.agent_id)
            .field("hooks", &self.hooks.iter().map(|h| &h.hook).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl CommandHooks {
    /// The hooks of the agent `agent_id` working in `cwd` (conditions are read from
    /// there), with `tools` (to read the subject of a call for conditions), running
    /// through `executor` and reporting to `events`.
    pub fn new(
        agent_id: impl Into<String>,
        cwd: &Path,
        hooks: Vec<CommandHook>,
        tools: Vec<Arc<dyn DynTool>>,
        executor: Arc<dyn ToolExecutor>,
        events: Arc<dyn EventSink>,
    ) -> Result<CommandHooks, HookConfigError> {
        let compiled = hooks
            .into_iter()
            .map(|hook| {
                let matcher = Matcher::new(hook.event, hook.matcher.as_deref())?;
                let condition = hook
                    .condition
                    .as_deref()
                    .filter(|c| !c.trim().is_empty())
                    .map(|c| Rule::parse(c, cwd, None))
                    .transpose()
                    .map_err(|error| HookConfigError::Condition { event: hook.event.as_str(), error })?;
                Ok(Compiled { hook, matcher, condition })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let agent_id = agent_id.into();
        Ok(CommandHooks {
            session_id: agent_id.clone(),
            agent_id,
            agent_type: None,
            transcript_path: String::new(),
            permission_mode: "default".into(),
            model: String::new(),
            cwd: cwd.to_path_buf(),
            hooks: compiled,
            tools,
            executor,
            events,
            subagent: false,
            stop_limit: DEFAULT_STOP_BLOCK_LIMIT,
            halt: Mutex::new(None),
            cancel: CancellationToken::new(),
        })
    }

    /// The same hooks for a nested agent of type `agent_type`: its start runs the
    /// SubagentStart hooks and its stop the SubagentStop hooks.
    pub fn for_subagent(
        &self,
        agent_id: impl Into<String>,
        agent_type: &str,
        events: Arc<dyn EventSink>,
    ) -> CommandHooks {
        CommandHooks {
            agent_id: agent_id.into(),
            agent_type: Some(agent_type.to_string()),
            session_id: self.session_id.clone(),
            transcript_path: self.transcript_path.clone(),
            permission_mode: self.permission_mode.clone(),
            model: self.model.clone(),
            cwd: self.cwd.clone(),
            hooks: self
                .hooks
                .iter()
                .filter_map(|c| {
                    Some(Compiled {
                        hook: c.hook.clone(),
                        matcher: Matcher::new(c.hook.event, c.hook.matcher.as_deref()).ok()?,
                        condition: c.condition.clone(),
                    })
                })
                .collect(),
            tools: self.tools.clone(),
            executor: self.executor.clone(),
            events,
            subagent: true,
            stop_limit: self.stop_limit,
            halt: Mutex::new(None),
            cancel: self.cancel.child_token(),
        }
    }

    /// The model SessionStart hooks see as `model`.
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    pub fn with_session_id(mut self, id: impl Into<String>) -> Self {
        self.session_id = id.into();
        self
    }

    /// The file hooks see as `transcript_path` (empty when there is none).
    pub fn with_transcript_path(mut self, path: Option<&Path>) -> Self {
        self.transcript_path = path.map(|p| p.display().to_string()).unwrap_or_default();
        self
    }

    /// The permission mode hooks see as `permission_mode`, in Claude Code's names.
    pub fn with_permission_mode(mut self, mode: impl Into<String>) -> Self {
        self.permission_mode = mode.into();
        self
    }

    pub fn with_stop_block_limit(mut self, limit: u32) -> Self {
        self.stop_limit = limit;
        self
    }

    /// Hook runs still going stop when `cancel` fires (the agent's abort token).
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Whether any hook is bound to `event`.
    pub fn has(&self, event: HookEvent) -> bool {
        self.hooks.iter().any(|h| h.hook.event == event)
    }

    /// Claude Code's common input fields, and orch's own agent id (`orch_agent_id`).
    /// As in Claude Code, `agent_id` and `agent_type` are there only in a nested agent.
    fn base_payload(&self, event: HookEvent) -> serde_json::Map<String, Value> {
        let mut map = serde_json::Map::new();
        map.insert("session_id".into(), json!(self.session_id));
        map.insert("transcript_path".into(), json!(self.transcript_path));
        map.insert("cwd".into(), json!(self.cwd.display().to_string()));
        map.insert("permission_mode".into(), json!(self.permission_mode));
        map.insert("hook_event_name".into(), json!(event.as_str()));
        if let Some(agent_type) = &self.agent_type {
            map.insert("agent_id".into(), json!(self.agent_id));
            map.insert("agent_type".into(), json!(agent_type));
        }
        map.insert("orch_agent_id".into(), json!(self.agent_id));
        map
    }

    /// Runs every hook of `event` whose matcher takes `target` (and whose condition,
    /// if any, covers `call`), one after the other, and reads their replies.
    async fn fire(
        &self,
        event: HookEvent,
        target: &str,
        call: Option<&ToolCall>,
        payload: serde_json::Map<String, Value>,
    ) -> Vec<Reply> {
        let stdin = Value::Object(payload).to_string();
        let mut replies = Vec::new();
        // As in Claude Code, a matcher on an event that has none to match is ignored.
        let unmatched = matches!(event, HookEvent::UserPromptSubmit | HookEvent::Stop | HookEvent::PostToolBatch);
        for compiled in self.hooks.iter().filter(|c| c.hook.event == event && (unmatched || c.matcher.matches(target)))
        {
            if let Some(rule) = &compiled.condition {
                let tool = call.and_then(|c| self.tools.iter().find(|t| t.name() == c.name));
                match (tool, call) {
                    (Some(tool), Some(call)) if rule.covers(tool.as_ref(), &call.input, &self.cwd) => {}
                    _ => continue,
                }
            }
            replies.push(self.run_one(event, &compiled.hook, &stdin).await);
        }
        replies
    }

    async fn run_one(&self, event: HookEvent, hook: &CommandHook, stdin: &str) -> Reply {
        let started = Instant::now();
        let run = HookRun {
            command: hook.command.clone(),
            stdin: stdin.to_string(),
            timeout_ms: hook.timeout.as_millis() as u64,
            cap: OUTPUT_CAP,
        };
        let request = HostRequest::Hook(run);
        let result = match self.executor.execute(request, self.cancel.child_token()).await {
            Ok(output) if !output.is_error => serde_json::from_str::<HookResult>(&output.content)
                .map_err(|e| format!("the tool host sent a bad hook result: {e}")),
            Ok(output) => Err(output.content),
            Err(e) => Err(e),
        };
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.report(event, hook, format!("could not run: {e}"), true, started);
                return Reply::default();
            }
        };
        let (reply, outcome, is_error) = self.read(event, hook, result);
        self.report(event, hook, outcome, is_error, started);
        reply
    }

    /// Turns a result into a reply, the outcome line, and whether it went wrong.
    fn read(&self, event: HookEvent, hook: &CommandHook, result: HookResult) -> (Reply, String, bool) {
        let mut reply = Reply::default();
        if let Some(error) = result.error {
            return (reply, format!("could not run: {error}"), true);
        }
        if result.timed_out {
            return (reply, format!("timed out after {}s and was killed", hook.timeout.as_secs_f64()), true);
        }
        match result.code {
            Some(0) => {}
            Some(2) if !event.can_block() => {
                let outcome = format!("exit 2, which a {} hook cannot block with: {}", event.as_str(), {
                    first_line(result.stderr.trim())
                });
                return (reply, outcome, false);
            }
            Some(2) => {
                let reason = result.stderr.trim();
                let reason =
                    if reason.is_empty() { "a hook blocked this without giving a reason" } else { reason }.to_string();
                let outcome = format!("blocked: {}", first_line(&reason));
                reply.blocked = Some(reason);
                return (reply, outcome, false);
            }
            Some(code) => return (reply, format!("exit {code}: {}", first_line(result.stderr.trim())), true),
            None => return (reply, format!("killed by a signal: {}", first_line(result.stderr.trim())), true),
        }
        let stdout = result.stdout.trim();
        if !stdout.starts_with('{') {
            if matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit) && !stdout.is_empty() {
                reply.context = Some(stdout.to_string());
            }
            return (reply, "ok".into(), false);
        }
        let out: Value = match serde_json::from_str(stdout) {
            Ok(v) => v,
            Err(e) => return (reply, format!("exit 0 with stdout that is not valid JSON: {e}"), true),
        };
        let specific = out.get("hookSpecificOutput").cloned().unwrap_or(Value::Null);
        let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
        if out.get("continue") == Some(&Value::Bool(false)) {
            let why = text(&out, "stopReason").unwrap_or_else(|| format!("a {} hook asked to stop", event.as_str()));
            if let Ok(mut halt) = self.halt.lock() {
                halt.get_or_insert(why);
            }
        }
        let reason = text(&specific, "permissionDecisionReason")
            .or_else(|| text(&out, "reason"))
            .unwrap_or_else(|| format!("decided by a {} hook", event.as_str()));
        match text(&specific, "permissionDecision").or_else(|| text(&out, "decision")).as_deref() {
            Some("allow" | "approve") => reply.decision = Some(HookDecision::Allow),
            Some("deny") => reply.decision = Some(HookDecision::Deny(reason)),
            Some("ask") => reply.decision = Some(HookDecision::Ask(reason)),
            Some("block") if event.can_block() => reply.blocked = Some(reason),
            _ => {}
        }
        reply.updated_input = specific.get("updatedInput").or_else(|| out.get("updatedInput")).cloned();
        reply.updated_output = ["updatedToolOutput", "updatedMCPToolOutput"]
            .iter()
            .find_map(|key| specific.get(*key))
            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string));
        reply.context = text(&specific, "additionalContext").or_else(|| text(&out, "additionalContext"));
        if event == HookEvent::PermissionRequest
            && let Some(decision) = specific.get("decision")
        {
            reply.permission = match decision.get("behavior").and_then(Value::as_str) {
                Some("allow") => Some(PermissionAnswer::Allow { updated_input: decision.get("updatedInput").cloned() }),
                Some("deny") => Some(PermissionAnswer::Deny(
                    text(decision, "message").unwrap_or_else(|| "a PermissionRequest hook said no".to_string()),
                )),
                _ => None,
            };
        }
        let outcome = match (&reply.blocked, &reply.decision) {
            (Some(r), _) => format!("blocked: {}", first_line(r)),
            (None, Some(HookDecision::Allow)) => "allow".into(),
            (None, Some(HookDecision::Deny(r))) => format!("deny: {}", first_line(r)),
            (None, Some(HookDecision::Ask(r))) => format!("ask: {}", first_line(r)),
            (None, None) if reply.updated_input.is_some() => "rewrote the input".into(),
            (None, None) => "ok".into(),
        };
        (reply, outcome, false)
    }

    /// The SessionStart hooks, with `source` (`startup`, `compact`): their context.
    async fn session_start_from(&self, source: &str) -> Option<String> {
        let mut payload = self.base_payload(HookEvent::SessionStart);
        payload.insert("source".into(), json!(source));
        if !self.model.is_empty() {
            payload.insert("model".into(), json!(self.model));
        }
        let replies = self.fire(HookEvent::SessionStart, source, None, payload).await;
        joined(replies.into_iter().filter_map(|r| r.context))
    }

    fn report(&self, event: HookEvent, hook: &CommandHook, outcome: String, is_error: bool, started: Instant) {
        if is_error {
            tracing::warn!(agent = %self.agent_id, event = event.as_str(), command = %hook.command, "hook failed: {outcome}");
        }
        self.events.emit(Event::Hook {
            event,
            command: hook.command.clone(),
            outcome,
            is_error,
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }
}

fn first_line(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(200) {
        Some((at, _)) => &line[..at],
        None => line,
    }
}

fn joined(parts: impl Iterator<Item = String>) -> Option<String> {
    let parts: Vec<String> = parts.collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

#[async_trait]
impl Hooks for CommandHooks {
    async fn pre_tool_use(&self, call: &ToolCall) -> PreToolUse {
        let mut payload = self.base_payload(HookEvent::PreToolUse);
        payload.insert("tool_name".into(), json!(call.name));
        payload.insert("tool_input".into(), call.input.clone());
        payload.insert("tool_use_id".into(), json!(call.id));
        let replies = self.fire(HookEvent::PreToolUse, &call.name, Some(call), payload).await;
        let mut out = PreToolUse::default();
        let mut deny = None;
        let mut ask = None;
        let mut allow = false;
        for reply in &replies {
            match (&reply.blocked, &reply.decision) {
                (Some(reason), _) | (None, Some(HookDecision::Deny(reason))) => {
                    deny.get_or_insert_with(|| reason.clone());
                }
                (None, Some(HookDecision::Ask(reason))) => {
                    ask.get_or_insert_with(|| reason.clone());
                }
                (None, Some(HookDecision::Allow)) => allow = true,
                (None, None) => {}
            }
        }
        out.decision = match (deny, ask, allow) {
            (Some(r), _, _) => Some(HookDecision::Deny(r)),
            (None, Some(r), _) => Some(HookDecision::Ask(r)),
            (None, None, true) => Some(HookDecision::Allow),
            (None, None, false) => None,
        };
        out.updated_input = replies.iter().rev().find_map(|r| r.updated_input.clone());
        out.context = joined(replies.into_iter().filter_map(|r| r.context));
        out
    }

    async fn post_tool_use(&self, call: &ToolCall, output: &ToolOutput) -> PostToolUse {
        // As in Claude Code: PostToolUse after a call that worked, PostToolUseFailure
        // after one that failed.
        let event = if output.is_error { HookEvent::PostToolUseFailure } else { HookEvent::PostToolUse };
        let mut payload = self.base_payload(event);
        payload.insert("tool_name".into(), json!(call.name));
        payload.insert("tool_input".into(), call.input.clone());
        payload.insert("tool_use_id".into(), json!(call.id));
        if output.is_error {
            payload.insert("error".into(), json!(output.content));
            payload.insert("is_interrupt".into(), json!(false));
        } else {
            payload.insert("tool_response".into(), json!({ "content": output.content, "is_error": false }));
        }
        let replies = self.fire(event, &call.name, Some(call), payload).await;
        PostToolUse {
            block: replies.iter().find_map(|r| r.blocked.clone()),
            updated_output: replies.iter().rev().find_map(|r| r.updated_output.clone()),
            context: joined(replies.into_iter().filter_map(|r| r.context)),
        }
    }

    async fn instructions_loaded(&self, files: &[crate::instructions::Loaded]) {
        if !self.has(HookEvent::InstructionsLoaded) {
            return;
        }
        for file in files {
            let mut payload = self.base_payload(HookEvent::InstructionsLoaded);
            if let Ok(Value::Object(fields)) = serde_json::to_value(file) {
                payload.extend(fields);
            }
            self.fire(HookEvent::InstructionsLoaded, &file.load_reason, None, payload).await;
        }
    }

    async fn post_tool_batch(&self, batch: &[(&ToolCall, &ToolOutput)]) -> Option<String> {
        if !self.has(HookEvent::PostToolBatch) {
            return None;
        }
        let calls: Vec<Value> = batch
            .iter()
            .map(|(call, output)| {
                json!({
                    "tool_name": call.name,
                    "tool_input": call.input,
                    "tool_use_id": call.id,
                    "tool_response": { "content": output.content, "is_error": output.is_error },
                })
            })
            .collect();
        let mut payload = self.base_payload(HookEvent::PostToolBatch);
        payload.insert("tool_calls".into(), Value::Array(calls));
        let replies = self.fire(HookEvent::PostToolBatch, "", None, payload).await;
        let block =
            replies.iter().find_map(|r| r.blocked.clone()).map(|r| format!("Feedback from a PostToolBatch hook: {r}"));
        joined(block.into_iter().chain(replies.into_iter().filter_map(|r| r.context)))
    }

    async fn permission_request(&self, call: &ToolCall) -> Option<PermissionAnswer> {
        if !self.has(HookEvent::PermissionRequest) {
            return None;
        }
        let mut payload = self.base_payload(HookEvent::PermissionRequest);
        payload.insert("tool_name".into(), json!(call.name));
        payload.insert("tool_input".into(), call.input.clone());
        payload.insert("permission_suggestions".into(), json!([]));
        let replies = self.fire(HookEvent::PermissionRequest, &call.name, Some(call), payload).await;
        // A refusal (exit 2 or `behavior: deny`) wins over an approval.
        let mut allow = None;
        for reply in replies {
            match (reply.blocked, reply.permission) {
                (Some(reason), _) | (None, Some(PermissionAnswer::Deny(reason))) => {
                    return Some(PermissionAnswer::Deny(reason));
                }
                (None, Some(answer @ PermissionAnswer::Allow { .. })) => allow = Some(answer),
                (None, None) => {}
            }
        }
        allow
    }

    async fn session_start(&self) -> Option<String> {
        if let Some(agent_type) = &self.agent_type {
            let payload = self.base_payload(HookEvent::SubagentStart);
            let replies = self.fire(HookEvent::SubagentStart, agent_type, None, payload).await;
            return joined(replies.into_iter().filter_map(|r| r.context));
        }
        self.session_start_from("startup").await
    }

    async fn user_prompt_submit(&self, prompt: &str) -> PromptSubmit {
        if self.subagent {
            return PromptSubmit::default();
        }
        let mut payload = self.base_payload(HookEvent::UserPromptSubmit);
        payload.insert("prompt".into(), json!(prompt));
        let replies = self.fire(HookEvent::UserPromptSubmit, "", None, payload).await;
        PromptSubmit {
            blocked: replies.iter().find_map(|r| r.blocked.clone()),
            context: joined(replies.into_iter().filter_map(|r| r.context)),
        }
    }

    async fn stop(&self, active: bool, last_message: &str) -> Option<String> {
        let event = if self.subagent { HookEvent::SubagentStop } else { HookEvent::Stop };
        let mut payload = self.base_payload(event);
        payload.insert("stop_hook_active".into(), json!(active));
        payload.insert("last_assistant_message".into(), json!(last_message));
        let target = match &self.agent_type {
            Some(agent_type) => {
                // A nested agent's messages are part of its parent's transcript.
                payload.insert("agent_transcript_path".into(), json!(self.transcript_path));
                agent_type.as_str()
            }
            None => "",
        };
        let replies = self.fire(event, target, None, payload).await;
        replies.into_iter().find_map(|r| r.blocked)
    }

    async fn pre_compact(&self, trigger: &str) -> Option<String> {
        let mut payload = self.base_payload(HookEvent::PreCompact);
        payload.insert("trigger".into(), json!(trigger));
        // Only `/compact <instructions>` gives any; orch compacts on its own.
        payload.insert("custom_instructions".into(), Value::Null);
        let replies = self.fire(HookEvent::PreCompact, trigger, None, payload).await;
        replies.into_iter().find_map(|r| r.blocked)
    }

    async fn post_compact(&self, trigger: &str, summary: &str) -> Option<String> {
        let mut payload = self.base_payload(HookEvent::PostCompact);
        payload.insert("trigger".into(), json!(trigger));
        payload.insert("compact_summary".into(), json!(summary));
        let post = self.fire(HookEvent::PostCompact, trigger, None, payload).await;
        let context = joined(post.into_iter().filter_map(|r| r.context));
        let start = if self.subagent { None } else { self.session_start_from("compact").await };
        joined(context.into_iter().chain(start))
    }

    async fn notification(&self, message: &str, kind: &str) -> Option<String> {
        let mut payload = self.base_payload(HookEvent::Notification);
        payload.insert("message".into(), json!(message));
        payload.insert("title".into(), json!("Permission needed"));
        payload.insert("notification_type".into(), json!(kind));
        let replies = self.fire(HookEvent::Notification, kind, None, payload).await;
        joined(replies.into_iter().filter_map(|r| r.context))
    }

    async fn stop_failure(&self, error: &str, details: &str, last_message: &str) {
        let mut payload = self.base_payload(HookEvent::StopFailure);
        payload.insert("error".into(), json!(error));
        payload.insert("error_details".into(), json!(details));
        payload.insert("last_assistant_message".into(), json!(last_message));
        self.fire(HookEvent::StopFailure, error, None, payload).await;
    }

    async fn session_end(&self, reason: &str) {
        if self.subagent {
            return;
        }
        let mut payload = self.base_payload(HookEvent::SessionEnd);
        payload.insert("reason".into(), json!(reason));
        self.fire(HookEvent::SessionEnd, reason, None, payload).await;
    }

    fn halted(&self) -> Option<String> {
        self.halt.lock().ok().and_then(|h| h.clone())
    }

    fn stop_block_limit(&self) -> u32 {
        self.stop_limit
    }

    fn for_subagent(&self, agent_id: &str, agent_type: &str, permission_mode: &str) -> Option<Arc<dyn Hooks>> {
        let nested = CommandHooks::for_subagent(self, agent_id, agent_type, self.events.clone());
        Some(Arc::new(nested.with_permission_mode(permission_mode)))
    }
}

/// The tool-host side of [`HostRequest::Hook`]: runs the command with `sh -c` in `cwd`, the
/// event on stdin, in its own process group (killed whole at the timeout or on
/// cancel), keeping at most `cap` bytes of stdout and of stderr.
pub async fn run_in_host(run: HookRun, cwd: &Path, cancel: CancellationToken) -> ToolOutput {
    let result = execute(&run, cwd, cancel).await;
    match serde_json::to_string(&result) {
        Ok(json) => ToolOutput::ok(json),
        Err(e) => ToolOutput::error(format!("cannot encode the hook result: {e}")),
    }
}

async fn execute(run: &HookRun, cwd: &Path, cancel: CancellationToken) -> HookResult {
    let mut command = tokio::process::Command::new(SHELL);
    command
        .arg("-c")
        .arg(&run.command)
        .current_dir(cwd)
        .envs(crate::tools::bash::CLAUDE_CODE_ENV.iter().copied())
        .env("CLAUDE_PROJECT_DIR", cwd)
        .env("ORCH_PROJECT_DIR", cwd)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => return HookResult { error: Some(format!("cannot start `sh -c`: {e}")), ..HookResult::default() },
    };
    let pid = child.id();
    let kill = move || {
        if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        let text = run.stdin.clone();
        // A hook that does not read its stdin is fine: the write error is dropped.
        tokio::spawn(async move {
            let _ = stdin.write_all(text.as_bytes()).await;
        });
    }
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let work = async {
        let (out, err, status) = tokio::join!(read_capped(stdout, run.cap), read_capped(stderr, run.cap), child.wait());
        (out, err, status)
    };
    let timeout = Duration::from_millis(run.timeout_ms.max(1));
    tokio::select! {
        (stdout, stderr, status) = work => match status {
            Ok(status) => HookResult { code: status.code(), stdout, stderr, timed_out: false, error: None },
            Err(e) => HookResult { error: Some(format!("cannot wait for the hook: {e}")), ..HookResult::default() },
        },
        _ = tokio::time::sleep(timeout) => {
            kill();
            HookResult { timed_out: true, ..HookResult::default() }
        }
        _ = cancel.cancelled() => {
            kill();
            HookResult { error: Some("cancelled".into()), ..HookResult::default() }
        }
    }
}

/// A hook command that cannot start in the sandbox: what it lacks, and why it needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingInterpreter {
    pub command: String,
    /// The program or path that is not there.
    pub missing: String,
    /// Where the need comes from, in words (`its first word`, `the #! line of …`).
    pub needed_by: String,
}

/// Asks the tool host behind `executor` whether each distinct command of `hooks` can
/// start there (see the module's documentation). `Err` lists every one that cannot.
pub async fn check(
    hooks: &[CommandHook],
    executor: &dyn ToolExecutor,
    cancel: CancellationToken,
) -> Result<(), Vec<MissingInterpreter>> {
    let mut commands: Vec<&str> = hooks.iter().map(|h| h.command.as_str()).collect();
    commands.sort_unstable();
    commands.dedup();
    if commands.is_empty() {
        return Ok(());
    }
    let request = HostRequest::HookCheck { commands: commands.iter().map(|c| c.to_string()).collect() };
    let unknown =
        |why: String| vec![MissingInterpreter { command: commands.join("; "), missing: SHELL.into(), needed_by: why }];
    let missing: Vec<MissingInterpreter> = match executor.execute(request, cancel).await {
        Ok(out) if !out.is_error => serde_json::from_str(&out.content)
            .map_err(|e| unknown(format!("the tool host's answer could not be read: {e}")))?,
        Ok(out) => return Err(unknown(format!("the tool host could not check: {}", out.content))),
        Err(e) => return Err(unknown(format!("the tool host could not check: {e}"))),
    };
    if missing.is_empty() { Ok(()) } else { Err(missing) }
}

/// The tool-host side of [`HostRequest::HookCheck`]: what each command lacks in this
/// process's filesystem and `PATH`, as a JSON list of [`MissingInterpreter`].
pub fn check_in_host(commands: &[String], cwd: &Path) -> ToolOutput {
    let path = std::env::var("PATH").unwrap_or_default();
    let missing: Vec<MissingInterpreter> = commands.iter().filter_map(|c| missing_interpreter(c, cwd, &path)).collect();
    match serde_json::to_string(&missing) {
        Ok(json) => ToolOutput::ok(json),
        Err(e) => ToolOutput::error(format!("cannot encode the hook check: {e}")),
    }
}

/// What `command` lacks to start here, if anything.
fn missing_interpreter(command: &str, cwd: &Path, path: &str) -> Option<MissingInterpreter> {
    let lacks = |missing: &str, needed_by: String| {
        Some(MissingInterpreter { command: command.to_string(), missing: missing.to_string(), needed_by })
    };
    if !is_executable(Path::new(SHELL)) {
        return lacks(SHELL, "every hook, which runs as `sh -c`".into());
    }
    let program = first_program(command, cwd)?;
    let found = if program.contains('/') {
        let file = cwd.join(&program);
        // A script that is not there yet may be made before the hook runs; its run
        // reports the failure.
        if !file.exists() {
            return None;
        }
        file
    } else {
        match which(&program, path) {
            Some(file) => file,
            None => return lacks(&program, "its first word".into()),
        }
    };
    let (interpreter, argument) = shebang(&found)?;
    let needed_by = format!("the `#!` line of `{}`", found.display());
    let base = Path::new(&interpreter).file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if !is_executable(Path::new(&interpreter)) {
        return lacks(&interpreter, needed_by);
    }
    if base == "env"
        && let Some(name) = argument.filter(|a| !a.contains('='))
        && which(&name, path).is_none()
    {
        return lacks(&name, needed_by);
    }
    None
}

/// Whether `path` is a file this process may execute (by its mode bits).
fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `name` found in the directories of `path`.
fn which(name: &str, path: &str) -> Option<PathBuf> {
    path.split(':').filter(|d| !d.is_empty()).map(|d| Path::new(d).join(name)).find(|p| is_executable(p))
}

/// The interpreter of a script's `#!` line and the first word after it (for `env`: the
/// program it runs, past its options).
fn shebang(file: &Path) -> Option<(String, Option<String>)> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(file).and_then(|mut f| f.read(&mut head)).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut words = line.split_whitespace();
    let interpreter = words.next()?.to_string();
    let argument = words.find(|w| !w.starts_with('-')).map(str::to_string);
    Some((interpreter, argument))
}

/// Shell words and keywords after which the first word is not a program to look for.
const SHELL_WORDS: &[&str] = &[
    "!", "{", "(", "[", "[[", ":", ".", "source", "if", "then", "while", "until", "for", "case", "function", "true",
    "false", "echo", "printf", "test", "cd", "exit", "set", "export", "read", "eval", "return", "trap", "shift",
    "unset", "wait", "type", "umask", "ulimit", "alias", "local", "readonly", "times", "kill", "pwd",
];

/// Wrappers that run the word after them (and their options).
const WRAPPERS: &[&str] = &["env", "exec", "command", "nohup", "nice", "timeout", "time"];

/// The program `command` starts with, as `sh` would look it up: after variable
/// assignments and wrappers, with the project directory variables replaced by `cwd`.
/// `None` when it starts with a shell word or a word only known when it runs.
fn first_program(command: &str, cwd: &Path) -> Option<String> {
    let dir = cwd.display().to_string();
    let mut text = command.to_string();
    for var in ["CLAUDE_PROJECT_DIR", "ORCH_PROJECT_DIR"] {
        text = text.replace(&format!("${{{var}}}"), &dir).replace(&format!("${var}"), &dir);
    }
    let mut words = shell_words(&text).into_iter().peekable();
    let mut wrapped = false;
    while let Some((word, dynamic)) = words.next() {
        if dynamic {
            return None;
        }
        let assignment = word
            .split_once('=')
            .is_some_and(|(name, _)| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        if assignment && !wrapped {
            continue;
        }
        if wrapped && (word.starts_with('-') || assignment) {
            continue;
        }
        if WRAPPERS.contains(&word.as_str()) {
            // `command -v jq` asks whether a program exists: it runs nothing.
            if word == "command" && words.peek().is_some_and(|(w, _)| w == "-v" || w == "-V") {
                return None;
            }
            wrapped = true;
            // `timeout 5 cmd`, `nice -n 5 cmd`: their number is no program.
            while words.peek().is_some_and(|(w, _)| {
                w.starts_with('-') || w.chars().all(|c| c.is_ascii_digit() || c == '.' || c == 's' || c == 'm')
            }) {
                words.next();
            }
            continue;
        }
        if SHELL_WORDS.contains(&word.as_str()) {
            return None;
        }
        return Some(word);
    }
    None
}

/// The words of the first simple command of `text` (up to an operator), quotes
/// removed, each with whether it holds an expansion (`$`, a backtick) that only the
/// running shell knows.
fn shell_words(text: &str) -> Vec<(String, bool)> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut dynamic = false;
    let mut started = false;
    let mut chars = text.chars();
    let push = |words: &mut Vec<(String, bool)>, word: &mut String, dynamic: &mut bool, started: &mut bool| {
        if *started {
            words.push((std::mem::take(word), *dynamic));
        }
        *dynamic = false;
        *started = false;
    };
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' => push(&mut words, &mut word, &mut dynamic, &mut started),
            ';' | '|' | '&' | '<' | '>' | ')' => break,
            '(' if !started => {
                word.push(c);
                started = true;
                push(&mut words, &mut word, &mut dynamic, &mut started);
            }
            '\'' => {
                started = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        '$' | '`' => {
                            dynamic = true;
                            word.push(c);
                        }
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                started = true;
                word.extend(chars.next());
            }
            '$' | '`' => {
                started = true;
                dynamic = true;
                word.push(c);
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    push(&mut words, &mut word, &mut dynamic, &mut started);
    words
}

/// Reads a pipe to its end, keeping the first `cap` bytes.
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>, cap: usize) -> String {
    let Some(mut pipe) = pipe else { return String::new() };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    let mut dropped = 0usize;
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                dropped += n.saturating_sub(room);
            }
        }
    }
    let mut text = String::from_utf8_lossy(&kept).into_owned();
    if dropped > 0 {
        text.push_str(&format!("\n[{dropped} more bytes of hook output were cut]"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_take_names_lists_regexes_and_stars() {
        let m = |t: Option<&str>| Matcher::new(HookEvent::PreToolUse, t).unwrap();
        assert!(m(None).matches("Bash"));
        assert!(m(Some("*")).matches("Read"));
        assert!(m(Some("Bash")).matches("Bash"));
        assert!(!m(Some("Bash")).matches("BashX"));
        assert!(m(Some("Edit|Write")).matches("Write"));
        assert!(!m(Some("Edit|Write")).matches("Read"));
        assert!(m(Some("mcp__docs__.*")).matches("mcp__docs__search"));
        assert!(!m(Some("mcp__docs__.*")).matches("mcp__web__search"));
        assert!(Matcher::new(HookEvent::PreToolUse, Some("(")).is_err());
    }

    #[tokio::test]
    async fn the_host_side_caps_output_and_kills_at_the_timeout() {
        let dir = std::env::temp_dir();
        let run = HookRun {
            command: "head -c 100000 /dev/zero | tr '\\0' x; echo oops >&2; exit 3".into(),
            stdin: "{}".into(),
            timeout_ms: 10_000,
            cap: 1000,
        };
        let r = execute(&run, &dir, CancellationToken::new()).await;
        assert_eq!(r.code, Some(3));
        assert!(r.stdout.starts_with(&"x".repeat(1000)));
        assert!(r.stdout.contains("99000 more bytes"), "{}", &r.stdout[1000..]);
        assert_eq!(r.stderr.trim(), "oops");
        let started = Instant::now();
        let run = HookRun { command: "sleep 30".into(), stdin: String::new(), timeout_ms: 200, cap: 100 };
        let r = execute(&run, &dir, CancellationToken::new()).await;
        assert!(r.timed_out);
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn the_first_program_is_found_past_assignments_wrappers_and_quotes() {
        let cwd = Path::new("/work/tree");
        let first = |c: &str| first_program(c, cwd);
        assert_eq!(first("bash -c 'echo hi'").as_deref(), Some("bash"));
        assert_eq!(first("  FOO=1 BAR='a b' python3 hook.py | jq .").as_deref(), Some("python3"));
        assert_eq!(first("env -i PATH=/bin node x.js").as_deref(), Some("node"));
        assert_eq!(first("timeout 5 bash x.sh").as_deref(), Some("bash"));
        assert_eq!(first("exec \"/usr/bin/python3\" h.py").as_deref(), Some("/usr/bin/python3"));
        assert_eq!(
            first("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/x.sh").as_deref(),
            Some("/work/tree/.claude/hooks/x.sh")
        );
        assert_eq!(first("${ORCH_PROJECT_DIR}/x.sh arg").as_deref(), Some("/work/tree/x.sh"));
        assert_eq!(first("./check.sh&&true").as_deref(), Some("./check.sh"));
        // Shell words and runtime values: only `sh` is needed, or it cannot be known.
        assert_eq!(first("printf '%s' '{}'"), None);
        assert_eq!(first("if true; then bash; fi"), None);
        assert_eq!(first("$HOOK_RUNNER x"), None);
        assert_eq!(first("`which bash` x"), None);
        assert_eq!(first("command -v jq >/dev/null && jq -r .tool_name"), None);
        assert_eq!(first("command jq -r .x").as_deref(), Some("jq"));
        assert_eq!(first(""), None);
    }

    #[test]
    fn a_missing_program_or_shebang_interpreter_is_found() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let exe = |name: &str, text: &str| {
            let path = bin.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        exe("tool", "#!/bin/sh\n");
        exe("needs-missing", "#!/no/such/interpreter -x\n");
        exe("env-missing", "#!/usr/bin/env -S no-such-program-xyz --flag\n");
        exe("env-sh", "#!/usr/bin/env sh\n");
        exe("plain", "echo no shebang\n");
        let path = format!("{}:/usr/bin:/bin", bin.display());
        let cwd = dir.path();
        let missing = |c: &str| missing_interpreter(c, cwd, &path).map(|m| (m.missing, m.needed_by));
        assert_eq!(missing("tool --flag"), None);
        assert_eq!(missing("plain"), None);
        assert_eq!(missing("env-sh"), None);
        assert_eq!(missing("echo hi"), None);
        assert_eq!(missing("./not-made-yet.sh"), None);
        assert_eq!(
            missing("no-such-program-xyz -c 'x'"),
            Some(("no-such-program-xyz".into(), "its first word".into()))
        );
        let (what, why) = missing("needs-missing").unwrap();
        assert_eq!(what, "/no/such/interpreter");
        assert!(why.contains("`#!` line") && why.contains("needs-missing"), "{why}");
        assert_eq!(missing("env-missing").unwrap().0, "no-such-program-xyz");
        std::fs::write(cwd.join("local.sh"), "#!/no/such/bash\n").unwrap();
        assert_eq!(missing("./local.sh").unwrap().0, "/no/such/bash");
        let out = check_in_host(&["tool".into(), "no-such-program-xyz".into()], cwd);
        assert!(!out.is_error, "{}", out.content);
        let list: Vec<MissingInterpreter> = serde_json::from_str(&out.content).unwrap();
        // `check_in_host` reads this process's PATH, where `no-such-program-xyz` is not.
        assert_eq!(list.iter().map(|m| m.missing.as_str()).collect::<Vec<_>>(), ["tool", "no-such-program-xyz"]);
        // A malformed check no longer reaches this far: the typed request fails to decode.
        let bad = serde_json::from_value::<HostRequest>(json!({"request": "hook_check", "commands": "x"}));
        assert!(bad.is_err());
    }

    #[tokio::test]
    async fn stdin_carries_the_event() {
        let run = HookRun { command: "cat".into(), stdin: "{\"a\":1}".into(), timeout_ms: 5_000, cap: 100 };
        let r = execute(&run, &std::env::temp_dir(), CancellationToken::new()).await;
        assert_eq!((r.code, r.stdout.as_str()), (Some(0), "{\"a\":1}"));
    }

    #[tokio::test]
    async fn hooks_get_claude_codes_environment() {
        let command = "printf '%s|%s|%s' \"$CLAUDECODE\" \"$CLAUDE_CODE_ENTRYPOINT\" \"$GIT_EDITOR\"";
        let run = HookRun { command: command.into(), stdin: String::new(), timeout_ms: 5_000, cap: 100 };
        let r = execute(&run, &std::env::temp_dir(), CancellationToken::new()).await;
        assert_eq!((r.code, r.stdout.as_str()), (Some(0), "1|sdk-cli|true"));
    }
}
