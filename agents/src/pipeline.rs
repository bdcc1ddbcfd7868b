//! The tool pool of one agent and the pipeline every call goes through:
//! lookup, schema check, `validate`, PreToolUse hooks, the permission decision, the
//! call in the agent's tool host, PostToolUse hooks, and result mapping (a result over
//! its limit is saved to the run directory and replaced by a preview and the path).
//!
//! A few tools run in the coordinator instead of the tool host ([`LocalTool`]: the
//! `Agent` tool, which drives model loops). They go through the same steps; only the
//! call itself stays in the coordinator.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::hooks::{HookDecision, Hooks, NoHooks, PermissionAnswer};
use crate::message::ToolSpec;
use crate::permissions::{Decision, Permissions};
use crate::protocol::{HostRequest, ToolExecutor, ToolRequest};
use crate::tool::{ToolCall, ToolOutput, ToolRunner};
use crate::tools::DynTool;
use crate::usage::Usage;

/// How much of an oversized result the model sees inline.
pub const PREVIEW_BYTES: usize = 2_000;

/// The agent type of a nested agent started without a `subagent_type`, as Claude Code
/// names it in hook input.
pub const GENERAL_AGENT_TYPE: &str = "general-purpose";

/// A tool pool that could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    #[error("unknown tool `{name}`; the tools are: {known}")]
    UnknownTool { name: String, known: String },
    #[error("the input schema of tool `{name}` does not compile: {message}")]
    BadSchema { name: String, message: String },
}

#[derive(Clone)]
struct Entry {
    tool: Arc<dyn DynTool>,
    schema: Arc<jsonschema::Validator>,
    /// Set for a tool that runs in the coordinator.
    local: Option<Arc<dyn LocalTool>>,
}

/// A tool whose call runs in the coordinator, not in the tool host. Its [`DynTool`]
/// face gives the pipeline its name, schema and safety flags; this gives the call.
#[async_trait]
pub trait LocalTool: Send + Sync {
    /// The description the model sees, when it is built at run time.
    fn description(&self) -> Option<String> {
        None
    }

    /// Runs one call that passed the pipeline. `ordinal` numbers this pool's calls of
    /// local tools from 1, in the order the model made them.
    async fn call(
        &self,
        pool: &ToolPool,
        ordinal: u64,
        call: &ToolCall,
        input: Value,
        cancel: CancellationToken,
    ) -> ToolOutput;

    /// See [`ToolRunner::take_nested_usage`].
    fn take_nested_usage(&self) -> Option<(Usage, f64)> {
        None
    }

    /// See [`ToolRunner::take_background_reports`].
    fn take_background_reports(&self) -> Vec<String> {
        Vec::new()
    }

    /// See [`ToolRunner::background_running`].
    fn background_running(&self) -> usize {
        0
    }

    /// See [`ToolRunner::wait_background`].
    async fn wait_background(&self) {}

    /// See [`ToolRunner::stop_background`].
    async fn stop_background(&self) {}
}

/// The tools one agent may use, bound to its tool host, its permissions and hooks.
pub struct ToolPool {
    agent_id: String,
    entries: Vec<Entry>,
    executor: Arc<dyn ToolExecutor>,
    permissions: Permissions,
    hooks: Arc<dyn Hooks>,
    results_dir: Option<PathBuf>,
    /// Tools left out on purpose, with the reason a call of one gets.
    withheld: Vec<(String, String)>,
    /// Calls of local tools so far.
    local_calls: AtomicU64,
    /// The tool host scope of a nested agent's calls (its own read stamps).
    scope: Option<String>,
}

impl std::fmt::Debug for ToolPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolPool")
            .field("agent_id", &self.agent_id)
            .field("tools", &self.entries.iter().map(|e| e.tool.name()).collect::<Vec<_>>())
            .finish()
    }
}

impl ToolPool {
    /// A pool of `tools` (sorted by name, so the prompt prefix is stable) that run
    /// through `executor`.
    pub fn new(
        agent_id: impl Into<String>,
        tools: Vec<Arc<dyn DynTool>>,
        executor: Arc<dyn ToolExecutor>,
        permissions: Permissions,
    ) -> Result<Self, PoolError> {
        let mut entries = Vec::with_capacity(tools.len());
        for tool in tools {
            let schema = jsonschema::validator_for(&tool.input_schema())
                .map_err(|e| PoolError::BadSchema { name: tool.name().to_string(), message: e.to_string() })?;
            entries.push(Entry { tool, schema: Arc::new(schema), local: None });
        }
        entries.sort_by_key(|e| e.tool.name());
        entries.dedup_by_key(|e| e.tool.name());
        Ok(Self {
            agent_id: agent_id.into(),
            entries,
            executor,
            permissions,
            hooks: Arc::new(NoHooks),
            results_dir: None,
            withheld: Vec::new(),
            local_calls: AtomicU64::new(0),
            scope: None,
        })
    }

    /// Adds a tool that runs in the coordinator: `tool` describes it, `local` runs it.
    pub fn with_local(mut self, tool: Arc<dyn DynTool>, local: Arc<dyn LocalTool>) -> Result<Self, PoolError> {
        let schema = jsonschema::validator_for(&tool.input_schema())
            .map_err(|e| PoolError::BadSchema { name: tool.name().to_string(), message: e.to_string() })?;
        self.entries.retain(|e| e.tool.name() != tool.name());
        self.entries.push(Entry { tool, schema: Arc::new(schema), local: Some(local) });
        self.entries.sort_by_key(|e| e.tool.name());
        Ok(self)
    }

    /// Leaves `name` out on purpose: a call of it gets `reason` instead of "no such tool".
    pub fn with_withheld(mut self, name: impl Into<String>, reason: impl Into<String>) -> Self {
        self.withheld.push((name.into(), reason.into()));
        self
    }

    /// A pool for a nested agent: the same tool host, hooks and results directory, the
    /// host-side tools of this pool named in `names` (all of them when `None`), and
    /// `permissions`. Local tools are not carried over; the caller adds its own. A name
    /// this pool does not have is an error: a nested agent gets at most these tools.
    pub fn derive(
        &self,
        agent_id: impl Into<String>,
        names: Option<&[String]>,
        permissions: Permissions,
    ) -> Result<ToolPool, PoolError> {
        self.derive_as(agent_id, GENERAL_AGENT_TYPE, names, permissions)
    }

    /// [`ToolPool::derive`] for a nested agent of type `agent_type` (what its
    /// SubagentStart and SubagentStop hooks match and see).
    pub fn derive_as(
        &self,
        agent_id: impl Into<String>,
        agent_type: &str,
        names: Option<&[String]>,
        permissions: Permissions,
    ) -> Result<ToolPool, PoolError> {
        let host: Vec<&Entry> = self.entries.iter().filter(|e| e.local.is_none()).collect();
        let entries = match names {
            None => host.into_iter().cloned().collect(),
            Some(names) => {
                let mut picked = Vec::with_capacity(names.len());
                // A local tool of this pool is not carried over (the caller adds its own).
                let local = |name: &str| self.entries.iter().any(|e| e.local.is_some() && e.tool.name() == name);
                for name in names.iter().filter(|n| !local(n)) {
                    let found = host.iter().find(|e| e.tool.name() == name).ok_or_else(|| PoolError::UnknownTool {
                        name: name.clone(),
                        known: self.tool_names().join(", "),
                    })?;
                    picked.push((*found).clone());
                }
                picked.sort_by_key(|e| e.tool.name());
                picked.dedup_by_key(|e| e.tool.name());
                picked
            }
        };
        let agent_id: String = agent_id.into();
        // A nested agent's start and stop run the SubagentStart and SubagentStop hooks.
        let mode = permissions.mode.map_or("default", |m| m.as_str());
        let hooks = self.hooks.for_subagent(&agent_id, agent_type, mode).unwrap_or_else(|| self.hooks.clone());
        Ok(ToolPool {
            scope: Some(agent_id.clone()),
            agent_id,
            entries,
            executor: self.executor.clone(),
            permissions,
            hooks,
            results_dir: self.results_dir.clone(),
            withheld: Vec::new(),
            local_calls: AtomicU64::new(0),
        })
    }

    /// The names of the tools in this pool, sorted.
    pub fn tool_names(&self) -> Vec<&'static str> {
        self.entries.iter().map(|e| e.tool.name()).collect()
    }

    /// The permissions every call of this pool is decided by.
    pub fn permissions(&self) -> &Permissions {
        &self.permissions
    }

    /// The agent this pool belongs to.
    pub fn agent_id(&self) -> &str {
        &self.agent_id
    }

    pub fn with_hooks(mut self, hooks: Arc<dyn Hooks>) -> Self {
        self.hooks = hooks;
        self
    }

    /// Where oversized results are saved (`<dir>/<agent>/<tool_use_id>.txt`).
    pub fn with_results_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.results_dir = Some(dir.into());
        self
    }

    /// Picks `names` out of `available`; an unknown name is an error.
    pub fn select(available: &[Arc<dyn DynTool>], names: &[String]) -> Result<Vec<Arc<dyn DynTool>>, PoolError> {
        names
            .iter()
            .map(|name| {
                available.iter().find(|t| t.name() == name).cloned().ok_or_else(|| PoolError::UnknownTool {
                    name: name.clone(),
                    known: available.iter().map(|t| t.name()).collect::<Vec<_>>().join(", "),
                })
            })
            .collect()
    }

    /// The entry of `name`, or of the tool it is another name for (`Task` is `Agent`).
    fn entry(&self, name: &str) -> Option<&Entry> {
        let find = |n: &str| self.entries.iter().find(|e| e.tool.name() == n);
        find(name).or_else(|| find(orch_types::tools::canonical(name)))
    }

    /// Steps 1 to 3: lookup, schema, `validate`.
    fn check(&self, name: &str, input: &Value) -> Result<&Entry, String> {
        let entry = self.entry(name).ok_or_else(|| {
            if let Some((_, reason)) = self.withheld.iter().find(|(n, _)| n == name) {
                return reason.clone();
            }
            let known: Vec<_> = self.entries.iter().map(|e| e.tool.name()).collect();
            format!("no tool named `{name}` is available to this agent; its tools are: {}", known.join(", "))
        })?;
        if let Some(error) = entry.schema.iter_errors(input).next() {
            let at = error.instance_path().to_string();
            let place = if at.is_empty() { String::new() } else { format!(" at `{at}`") };
            return Err(format!("invalid input for {name}{place}: {error}; fix the input and call again"));
        }
        entry.tool.validate(input).map_err(|e| format!("invalid input for {name}: {e}"))?;
        Ok(entry)
    }

    /// Step 5, given what the hooks said. `Err((message, needed_approval))`; the flag
    /// is set when the call would have run had someone approved it.
    fn permit(&self, tool: &dyn DynTool, input: &Value, hook: Option<&HookDecision>) -> Result<(), (String, bool)> {
        if let Some(reason) = self.permissions.hard_denial(tool, input) {
            return Err((format!("permission denied: {reason}"), false));
        }
        if let Some(HookDecision::Ask(reason)) = hook {
            let lifted = self.permissions.lifts_ask();
            if !lifted {
                // Deny rules still get their say first, for a clearer reason.
                if let Decision::Deny(r) = self.permissions.decide(tool, input, false) {
                    return Err((format!("permission denied: {r}"), false));
                }
                return Err((
                    format!(
                        "permission denied: a hook asks for approval ({reason}), and nobody can approve in an \
                         unattended run"
                    ),
                    true,
                ));
            }
        }
        let hook_allowed = matches!(hook, Some(HookDecision::Allow | HookDecision::Ask(_)));
        match self.permissions.decide(tool, input, hook_allowed) {
            Decision::Allow => Ok(()),
            Decision::Deny(reason) => {
                // Denied for want of an approval: someone who could say yes would have.
                let mut approving = self.permissions.clone();
                approving.ask_fallback = crate::permissions::AskFallback::Allow;
                // `dontAsk` never asks, so it has no one to notify.
                let approvable = !self.permissions.lifts_ask()
                    && self.permissions.mode != Some(crate::permissions::Mode::DontAsk)
                    && approving.decide(tool, input, hook_allowed) == Decision::Allow;
                Err((format!("permission denied: {reason}"), approvable))
            }
        }
    }

    async fn pipeline(&self, call: &ToolCall, cancel: CancellationToken) -> ToolOutput {
        let mut input = call.input.clone();
        let mut entry = match self.check(&call.name, &input) {
            Ok(e) => e,
            Err(message) => return ToolOutput::error(message),
        };
        let pre = self.hooks.pre_tool_use(call).await;
        if let Some(HookDecision::Deny(reason)) = &pre.decision {
            return ToolOutput::error(format!("blocked by a PreToolUse hook: {reason}")).denied();
        }
        if let Some(updated) = pre.updated_input {
            input = updated;
            entry = match self.check(&call.name, &input) {
                Ok(e) => e,
                Err(message) => {
                    return ToolOutput::error(format!("a PreToolUse hook rewrote the input badly: {message}"));
                }
            };
        }
        if let Err((mut message, needed_approval)) = self.permit(entry.tool.as_ref(), &input, pre.decision.as_ref()) {
            let mut approved = false;
            if needed_approval {
                let asking = ToolCall { id: call.id.clone(), name: call.name.clone(), input: input.clone() };
                match self.hooks.permission_request(&asking).await {
                    Some(PermissionAnswer::Allow { updated_input }) => {
                        if let Some(updated) = updated_input {
                            input = updated;
                            entry = match self.check(&call.name, &input) {
                                Ok(e) => e,
                                Err(m) => {
                                    return ToolOutput::error(format!(
                                        "a PermissionRequest hook rewrote the input badly: {m}"
                                    ));
                                }
                            };
                        }
                        // The hook's yes stands for a person's: deny rules, plan mode
                        // and hard denials still hold.
                        match self.permit(entry.tool.as_ref(), &input, Some(&HookDecision::Allow)) {
                            Ok(()) => approved = true,
                            Err((m, _)) => message = m,
                        }
                    }
                    Some(PermissionAnswer::Deny(reason)) => {
                        message = format!("permission denied by a PermissionRequest hook: {reason}");
                    }
                    None => {
                        let note = format!("{} needs an approval, and nobody can give one in this run", call.name);
                        if let Some(context) = self.hooks.notification(&note, "permission_prompt").await {
                            message.push_str(&format!("\n\n{context}"));
                        }
                    }
                }
            }
            if !approved {
                return ToolOutput::error(message).denied();
            }
        }
        let mut output = if let Some(local) = entry.local.clone() {
            let ordinal = self.local_calls.fetch_add(1, Ordering::SeqCst) + 1;
            local.call(self, ordinal, call, input.clone(), cancel).await
        } else {
            let request = HostRequest::Tool(ToolRequest {
                tool: call.name.clone(),
                input: input.clone(),
                scope: self.scope.clone(),
                hidden: self.permissions.hidden_paths(&call.name),
            });
            match self.executor.execute(request, cancel).await {
                Ok(output) => output,
                Err(message) => {
                    ToolOutput::error(format!("the tool host failed while running {}: {message}", call.name))
                }
            }
        };
        let effective = ToolCall { id: call.id.clone(), name: call.name.clone(), input };
        if !output.instructions.is_empty() {
            self.hooks.instructions_loaded(&output.instructions).await;
        }
        let post = self.hooks.post_tool_use(&effective, &output).await;
        if let Some(replacement) = post.updated_output {
            output.content = replacement;
        }
        if let Some(reason) = post.block {
            // As in Claude Code, the tool has run: its result stands, and the hook's
            // reason goes to the model with it.
            let event = if output.is_error { "PostToolUseFailure" } else { "PostToolUse" };
            output.content.push_str(&format!("\n\nFeedback from a {event} hook: {reason}"));
        }
        for context in [pre.context, post.context].into_iter().flatten() {
            output.content.push_str(&format!("\n\n{context}"));
        }
        self.map_result(call, entry.tool.max_result_bytes(), output).await
    }

    /// Step 8: an oversized result goes to a file; the model gets a preview and the path.
    async fn map_result(&self, call: &ToolCall, limit: usize, output: ToolOutput) -> ToolOutput {
        if output.content.len() <= limit {
            return output;
        }
        let total = output.content.len();
        let preview = &output.content[..floor_char_boundary(&output.content, PREVIEW_BYTES.min(limit))];
        let saved = match &self.results_dir {
            Some(dir) => self.save(dir, &call.id, &output.content).await,
            None => Err("no run directory is set".to_string()),
        };
        let note = match saved {
            Ok(path) => format!(
                "[the result is {total} bytes, over the {limit}-byte limit; it is saved in full at {}. \
                 Read it with offset and limit, or Grep it, to see more]",
                path.display()
            ),
            Err(e) => format!(
                "[the result is {total} bytes, over the {limit}-byte limit, and could not be saved ({e}); the rest is cut]"
            ),
        };
        ToolOutput {
            content: format!("{preview}\n…\n{note}"),
            is_error: output.is_error,
            attachments: output.attachments,
            instructions: output.instructions,
            denied: output.denied,
        }
    }

    async fn save(&self, dir: &std::path::Path, id: &str, content: &str) -> Result<PathBuf, String> {
        let dir = dir.join(sanitize(&self.agent_id));
        tokio::fs::create_dir_all(&dir).await.map_err(|e| e.to_string())?;
        let path = dir.join(format!("{}.txt", sanitize(id)));
        tokio::fs::write(&path, content).await.map_err(|e| e.to_string())?;
        Ok(path)
    }
}

fn sanitize(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '_' }).collect()
}

fn floor_char_boundary(s: &str, mut at: usize) -> usize {
    if at >= s.len() {
        return s.len();
    }
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

impl ToolPool {
    /// The local tools of the pool.
    fn locals(&self) -> impl Iterator<Item = &Arc<dyn LocalTool>> {
        self.entries.iter().filter_map(|e| e.local.as_ref())
    }
}

#[async_trait]
impl ToolRunner for ToolPool {
    fn specs(&self) -> Vec<ToolSpec> {
        self.entries
            .iter()
            .map(|e| ToolSpec {
                name: e.tool.name().to_string(),
                description: e
                    .local
                    .as_ref()
                    .and_then(|l| l.description())
                    .unwrap_or_else(|| e.tool.description().to_string()),
                input_schema: e.tool.input_schema(),
            })
            .collect()
    }

    fn is_concurrency_safe(&self, call: &ToolCall) -> bool {
        self.entry(&call.name).is_some_and(|e| e.tool.is_concurrency_safe(&call.input))
    }

    fn can_start_early(&self, call: &ToolCall) -> bool {
        self.entry(&call.name)
            .is_some_and(|e| e.tool.is_concurrency_safe(&call.input) && e.tool.is_read_only(&call.input))
    }

    fn cancels_siblings_on_error(&self, call: &ToolCall) -> bool {
        call.name == "Bash"
    }

    fn take_nested_usage(&self) -> Option<(Usage, f64)> {
        let mut total: Option<(Usage, f64)> = None;
        for local in self.entries.iter().filter_map(|e| e.local.as_ref()) {
            if let Some((usage, cost)) = local.take_nested_usage() {
                let sum = total.get_or_insert((Usage::default(), 0.0));
                sum.0 += usage;
                sum.1 += cost;
            }
        }
        total
    }

    fn take_background_reports(&self) -> Vec<String> {
        self.locals().flat_map(|l| l.take_background_reports()).collect()
    }

    fn background_running(&self) -> usize {
        self.locals().map(|l| l.background_running()).sum()
    }

    async fn wait_background(&self) {
        let waits: Vec<_> = self.locals().filter(|l| l.background_running() > 0).map(|l| l.wait_background()).collect();
        if !waits.is_empty() {
            futures::future::select_all(waits).await;
        }
    }

    async fn stop_background(&self) {
        futures::future::join_all(self.locals().map(|l| l.stop_background())).await;
    }

    async fn run(&self, call: &ToolCall, cancel: CancellationToken) -> ToolOutput {
        self.pipeline(call, cancel).await
    }

    fn hooks(&self) -> Option<&dyn Hooks> {
        Some(self.hooks.as_ref())
    }
}
