//! Nested sub-agents: the `Agent` tool.
//!
//! A model calls `Agent` with a task; the tool runs a fresh, stateless agent through
//! the same [`query`] loop and hands back only its final report (and what it spent).
//! The sub-agent works through its caller's tool host (same sandbox, same executor),
//! with at most its caller's tools, under an abort token that is a child of the call's
//! own: cancelling the caller cancels the whole subtree, cancelling a sub-agent (see
//! [`SubagentRun::cancel`]) leaves its caller running.
//!
//! The tool runs in the coordinator (it drives model loops), as a
//! [`LocalTool`](crate::pipeline::LocalTool) of the caller's pool, so it still goes
//! through the pipeline's schema check, hooks and permissions.
//!
//! Ids are deterministic: the n-th `Agent` call an agent makes (counted in the order
//! the model made them) starts `<agent>/sub-<n>`; its own sub-agents are
//! `<agent>/sub-<n>/sub-<m>`. Scripted model turns select sub-agents by these ids.
//!
//! Limits, shared by every agent of a run through one [`SubagentRun`]: the nesting
//! depth (a workflow agent is depth 0; its sub-agents depth 1), how many sub-agents run
//! at once, and how many start in all. A call beyond `max_concurrent` waits for a slot,
//! for at most [`SubagentRun::queue_wait`]; past that (a tree whose callers hold every
//! slot while their own sub-agents wait) it becomes an error result, so a tree can
//! never deadlock. The other limits are error results at once.
//!
//! `Task` is another name for `Agent` (older Claude Code models call it that), and the
//! built-in agent types `general-purpose`, `Explore` and `Plan` exist in every run (an
//! agent definition of the same name replaces one).
//!
//! Events of a sub-agent reach the caller's sink wrapped in [`Event::Subagent`]; their
//! usage is counted as it arrives and added to the caller's totals (and so to its
//! budgets) after the call.
//!
//! With `run_in_background: true` the call returns at once with the sub-agent's id, and
//! the sub-agent runs beside its caller (a task of its own, under the same limits: it
//! waits for a slot there, not in the call). When it ends, its report waits in the
//! caller's [`AgentTool`] until the caller's loop adds it to its next request (see
//! [`ToolRunner::take_background_reports`](crate::tool::ToolRunner)); a caller that
//! answers without tool calls while one still runs waits for it first, so no report is
//! lost. Its usage reaches the caller's totals before each of the caller's model calls.
//! The caller's abort, or the end of its loop for any other reason, cancels its
//! background sub-agents (and the loop waits for them to stop). `TaskOutput` and
//! `TaskStop` (in `tools/`) read and stop one by id.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::event::{Event, EventSink};
use crate::message::Message;
use crate::model::{ModelProvider, SystemPart};
use crate::permissions::{Mode, stricter};
use crate::pipeline::{LocalTool, PoolError, ToolPool};
use crate::query::{QueryConfig, query};
use crate::tool::{ToolCall, ToolOutput};
use crate::tools::task_output::{TASK_OUTPUT_TOOL, TaskOutputSpec, TaskOutputTool};
use crate::tools::task_stop::{TASK_STOP_TOOL, TaskStopSpec, TaskStopTool};
use crate::tools::{DynTool, Tool, ToolContext, ToolError};
use crate::usage::Usage;

/// The tool's name, as Claude Code calls it.
pub const AGENT_TOOL: &str = "Agent";
/// The tool's older name in Claude Code; a call or a tool list naming it means `Agent`.
pub const TASK_TOOL: &str = "Task";

/// How long a sub-agent call waits for a free slot by default.
pub const DEFAULT_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// The tools the built-in `Explore` and `Plan` types get: the catalog's read-only file
/// tools, by name.
fn read_only_tools() -> Vec<String> {
    let mut names: Vec<String> = orch_types::tools::CATALOG
        .iter()
        .filter(|t| t.read_only && t.rule == orch_types::tools::RuleKind::Path)
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    names
}

const EXPLORE_PROMPT: &str = "You explore a code base to answer a question about it. \
You can only look: find files by name with Glob, search contents with Grep, list \
directories with LS and open files with Read; you cannot change anything. Search broadly \
first, then read what matters. Answer with what you found, naming files and line \
numbers, and say plainly what you could not find.";

const PLAN_PROMPT: &str = "You prepare an implementation plan; you do not carry it out. \
You can only look: Glob, Grep, LS and Read; you cannot change anything. Study the code \
the task concerns, then answer with a concrete, ordered plan: which files change and how, \
what to test, and the risks or open questions you see.";

/// The agent types every run has: `general-purpose` (the caller's prompt and tools, as
/// with no type), `Explore` and `Plan` (read-only tools, their own prompt).
pub fn builtin_definitions() -> Vec<AgentDefinition> {
    let read_only = Some(read_only_tools());
    vec![
        AgentDefinition {
            name: "general-purpose".into(),
            description: "the default agent for research and multi-step tasks, with all of your tools".into(),
            ..AgentDefinition::default()
        },
        AgentDefinition {
            name: "Explore".into(),
            description: "a read-only agent that searches and reads the code to answer a question quickly".into(),
            tools: read_only.clone(),
            system_prompt: EXPLORE_PROMPT.into(),
            ..AgentDefinition::default()
        },
        AgentDefinition {
            name: "Plan".into(),
            description: "a read-only agent that studies the code and returns an implementation plan".into(),
            tools: read_only,
            system_prompt: PLAN_PROMPT.into(),
            ..AgentDefinition::default()
        },
    ]
}

/// How deep, how many at once and how many in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentLimits {
    /// Levels of sub-agents below a workflow agent.
    pub max_depth: u32,
    /// Sub-agents running at the same time, in the whole run.
    pub max_concurrent: u32,
    /// Sub-agents started in the whole run.
    pub max_total: u32,
}

impl Default for SubagentLimits {
    fn default() -> Self {
        Self { max_depth: 3, max_concurrent: 10, max_total: 200 }
    }
}

/// A named kind of sub-agent (from an agent definition file). The coordinator reads
/// the files; this crate only uses what they say.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentDefinition {
    pub name: String,
    /// When to use it; shown to the model in the tool's description.
    pub description: String,
    /// The tools it gets (intersected with the caller's); `None`: the caller's.
    pub tools: Option<Vec<String>>,
    /// `None`: the caller's model.
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    /// Applied only when it is at least as strict as the caller's mode.
    pub permission_mode: Option<Mode>,
    /// Replaces the static part of the system prompt.
    pub system_prompt: String,
}

/// One finished sub-agent, for the caller's report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SubagentRecord {
    /// `<caller>/sub-<n>`.
    pub id: String,
    /// The agent definition it ran, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subagent_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The name of its terminal reason (`completed`, `aborted`, ...).
    pub status: String,
    pub turns: u32,
    /// Its own spend and that of its sub-agents.
    pub usage: Usage,
    pub cost_usd: f64,
    pub duration_ms: u64,
}

/// What every agent of one run shares: the limits, the slots, the count, the
/// definitions, and the tokens of the sub-agents that are running.
#[derive(Debug)]
pub struct SubagentRun {
    limits: SubagentLimits,
    slots: Arc<Semaphore>,
    started: AtomicU32,
    definitions: Vec<AgentDefinition>,
    /// The built-in types no definition replaces.
    builtins: Vec<AgentDefinition>,
    running: Mutex<HashMap<String, CancellationToken>>,
    peak: AtomicU32,
    queue_wait: std::time::Duration,
}

impl SubagentRun {
    pub fn new(limits: SubagentLimits, definitions: Vec<AgentDefinition>) -> Self {
        let builtins =
            builtin_definitions().into_iter().filter(|b| definitions.iter().all(|d| d.name != b.name)).collect();
        Self {
            slots: Arc::new(Semaphore::new(limits.max_concurrent as usize)),
            limits,
            started: AtomicU32::new(0),
            definitions,
            builtins,
            running: Mutex::new(HashMap::new()),
            peak: AtomicU32::new(0),
            queue_wait: DEFAULT_QUEUE_WAIT,
        }
    }

    /// Sets how long a call beyond `max_concurrent` waits for a slot.
    pub fn with_queue_wait(mut self, wait: std::time::Duration) -> Self {
        self.queue_wait = wait;
        self
    }

    /// How long a call beyond `max_concurrent` waits for a slot before it is an error.
    pub fn queue_wait(&self) -> std::time::Duration {
        self.queue_wait
    }

    pub fn limits(&self) -> SubagentLimits {
        self.limits
    }

    pub fn definitions(&self) -> &[AgentDefinition] {
        &self.definitions
    }

    /// The definition or built-in type called `name`.
    pub fn definition(&self, name: &str) -> Option<&AgentDefinition> {
        self.definitions.iter().chain(&self.builtins).find(|d| d.name == name)
    }

    /// Every agent type a call may name: the definitions, then the built-ins.
    pub fn agent_types(&self) -> impl Iterator<Item = &AgentDefinition> {
        self.definitions.iter().chain(&self.builtins)
    }

    /// Sub-agents started so far.
    pub fn started(&self) -> u32 {
        self.started.load(Ordering::SeqCst)
    }

    /// The most sub-agents that ran at the same time.
    pub fn peak_concurrent(&self) -> u32 {
        self.peak.load(Ordering::SeqCst)
    }

    /// Cancels one running sub-agent and its own sub-agents; its caller goes on (the
    /// call returns an error result). `false` when no sub-agent with that id runs.
    pub fn cancel(&self, id: &str) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The ids of the sub-agents running now.
    pub fn running(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.running.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
        ids.sort();
        ids
    }

    /// A slot for the sub-agent `id`: at once when one is free, else after a wait of at
    /// most [`Self::queue_wait`]; the error is the call's result.
    async fn acquire(&self, id: &str, cancel: &CancellationToken) -> Result<OwnedSemaphorePermit, ToolOutput> {
        if let Ok(p) = self.slots.clone().try_acquire_owned() {
            return Ok(p);
        }
        tracing::debug!(agent = %id, "sub-agent queued: every slot is taken");
        let wait = self.queue_wait;
        let acquired = tokio::select! {
            _ = cancel.cancelled() => return Err(AgentTool::error(id, "the call was cancelled while it waited for a slot")),
            acquired = tokio::time::timeout(wait, self.slots.clone().acquire_owned()) => acquired,
        };
        match acquired {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(AgentTool::error(id, "the run is shutting down")),
            Err(_) => Err(AgentTool::error(
                id,
                format!(
                    "{} sub-agents were running, the most this run allows at once (subagents.max_concurrent), \
                     and no slot came free within {} s; wait for yours to finish, or start fewer in one answer",
                    self.limits.max_concurrent,
                    wait.as_secs_f64()
                ),
            )),
        }
    }

    fn register(&self, id: &str, token: CancellationToken) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        running.insert(id.to_string(), token);
        self.peak.fetch_max(running.len() as u32, Ordering::SeqCst);
    }

    fn unregister(&self, id: &str) {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

/// The input of the `Agent` tool.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentInput {
    /// The whole task for the sub-agent. It starts with no memory of this conversation,
    /// so say everything it needs: goal, files, constraints, and what to report back.
    pub prompt: String,
    /// A short label for the task (three to five words), shown in logs and reports.
    #[serde(default)]
    pub description: Option<String>,
    /// The name of an agent definition to run; omit it for a general-purpose agent.
    #[serde(default)]
    pub subagent_type: Option<String>,
    /// The tools the sub-agent may use, a subset of yours; omit it for all of yours
    /// (or those the agent definition names).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// The model the sub-agent runs on: `sonnet`, `opus`, `haiku` or a full model id.
    /// Omit it for the agent definition's model, or else yours.
    #[serde(default)]
    pub model: Option<String>,
    /// Set to true to run the sub-agent in the background: the call returns at once
    /// with its id, and its report is given to you when it finishes.
    #[serde(default)]
    pub run_in_background: Option<bool>,
}

const DESCRIPTION: &str = "Starts a sub-agent: a fresh agent that works on one task \
through your own tools and working directory, then returns its final report to you. \
It does not see this conversation, so the prompt must carry the whole task and say \
what to report. Use it for independent pieces of work (a survey of one area, a change \
in one module) that you want done without filling your own context. Several Agent \
calls in one answer run in parallel. With `run_in_background: true` the call returns at \
once and you go on working; the report is added to the conversation when the sub-agent \
finishes (you never need to poll, and if you end your answer first, you are given the \
report before you finish). Only its report comes back, not its steps; check its claims \
when they matter.";

/// The metadata face of the `Agent` tool (name, schema, safety flags) for the pipeline.
/// Its call never reaches a tool host: the pool runs it through [`AgentTool`].
#[derive(Debug, Clone, Copy, Default)]
pub struct AgentToolSpec;

#[async_trait]
impl Tool for AgentToolSpec {
    type Input = AgentInput;
    const NAME: &'static str = AGENT_TOOL;

    fn description(&self) -> &'static str {
        DESCRIPTION
    }

    /// Sub-agents of one answer run in parallel. They have effects, so they are not
    /// read-only and never start while the answer is still streaming (a retried
    /// stream would start them twice).
    fn is_concurrency_safe(&self, _input: &AgentInput) -> bool {
        true
    }

    fn is_destructive(&self, _input: &AgentInput) -> bool {
        false
    }

    fn validate(&self, input: &AgentInput) -> Result<(), String> {
        if input.prompt.trim().is_empty() {
            return Err("`prompt` is empty; give the sub-agent its whole task".into());
        }
        if input.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err("`model` is empty; give sonnet, opus, haiku or a model id, or leave it out".into());
        }
        Ok(())
    }

    /// Permission rules can match `Agent(<subagent_type>)`.
    fn permission_subject(&self, input: &AgentInput) -> Option<String> {
        input.subagent_type.clone()
    }

    async fn call(&self, _input: AgentInput, _ctx: &ToolContext) -> Result<String, ToolError> {
        Err(ToolError::new("the Agent tool runs in the coordinator, not in a tool host"))
    }
}

/// Tokens and cost counted from a subtree's events.
#[derive(Debug, Default)]
struct Ledger(Mutex<(Usage, f64)>);

impl Ledger {
    fn add(&self, usage: Usage, cost: f64) {
        let mut total = self.0.lock().unwrap_or_else(|p| p.into_inner());
        total.0 += usage;
        total.1 += cost;
    }

    fn take(&self) -> Option<(Usage, f64)> {
        let mut total = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let taken = std::mem::take(&mut *total);
        (taken != (Usage::default(), 0.0)).then_some(taken)
    }
}

/// The sink of a sub-agent: wraps its events once with its id, counts their usage for
/// the caller, and passes them on to the caller's sink.
struct NestedSink {
    parent: Arc<dyn EventSink>,
    agent: String,
    /// The `Agent` call that started it.
    tool_use_id: String,
    ledger: Arc<Ledger>,
}

impl EventSink for NestedSink {
    fn emit(&self, event: Event) {
        if matches!(event, Event::TextDelta { .. }) {
            return;
        }
        if let Event::Usage { usage, cost_usd, .. } = event.innermost() {
            self.ledger.add(*usage, *cost_usd);
        }
        let wrapped = match event {
            e @ Event::Subagent { .. } => e,
            other => Event::Subagent {
                agent: self.agent.clone(),
                tool_use_id: Some(self.tool_use_id.clone()),
                event: Box::new(other),
            },
        };
        self.parent.emit(wrapped);
    }
}

/// The background sub-agents of one caller: the token that cancels them, which run,
/// their reports, and which of those its loop has not taken yet. Shared by the caller's
/// `Agent` and `TaskOutput` tools.
#[derive(Debug, Default)]
pub(crate) struct Background {
    /// The parent of every background sub-agent's token; replaced by a fresh one when
    /// the caller's loop stops them, so a later loop over the same tools can start more.
    token: Mutex<CancellationToken>,
    state: Mutex<BackgroundState>,
    changed: Notify,
}

#[derive(Debug, Default)]
pub(crate) struct BackgroundState {
    /// The running ones, with their own tokens.
    running: std::collections::BTreeMap<String, CancellationToken>,
    /// Every report, by sub-agent id.
    results: std::collections::BTreeMap<String, String>,
    /// The ids whose report neither the loop nor `TaskOutput` has taken, oldest first.
    unread: Vec<String>,
}

impl Background {
    fn lock(&self) -> std::sync::MutexGuard<'_, BackgroundState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn token(&self) -> CancellationToken {
        self.token.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn started(&self, id: &str, token: CancellationToken) {
        self.lock().running.insert(id.to_string(), token);
    }

    pub(crate) fn is_running(&self, id: &str) -> bool {
        self.lock().running.contains_key(id)
    }

    /// Cancels the running sub-agent `id` (and its subtree); its report follows.
    pub(crate) fn cancel_one(&self, id: &str) {
        if let Some(token) = self.lock().running.get(id) {
            token.cancel();
        }
    }

    pub(crate) fn finish(&self, id: &str, report: String) {
        let mut state = self.lock();
        state.running.remove(id);
        state.results.insert(id.to_string(), report);
        state.unread.push(id.to_string());
        drop(state);
        self.changed.notify_waiters();
    }

    /// The reports not taken yet, oldest first; they count as read.
    pub(crate) fn take(&self) -> Vec<String> {
        let mut state = self.lock();
        let unread = std::mem::take(&mut state.unread);
        unread.iter().filter_map(|id| state.results.get(id).cloned()).collect()
    }

    fn running(&self) -> usize {
        self.lock().running.len()
    }

    /// `Err` with the message for the model when a `task_id` input is blank (before the
    /// call: the schema lets an empty string through).
    pub(crate) fn validate_task_id(id: &str) -> Result<(), String> {
        if id.trim().is_empty() {
            return Err("`task_id` is empty; give the id the Agent call returned".into());
        }
        Ok(())
    }

    /// `Err` with the message for the model when `id` is none of these sub-agents
    /// (running or finished); the message lists those there are (what `TaskOutput` and
    /// `TaskStop` answer to a wrong id).
    pub(crate) fn check_id(&self, id: &str) -> Result<(), String> {
        let state = self.lock();
        if state.running.contains_key(id) || state.results.contains_key(id) {
            return Ok(());
        }
        let mut ids: Vec<&str> = state.running.keys().chain(state.results.keys()).map(String::as_str).collect();
        ids.sort_unstable();
        let known = if ids.is_empty() { "none was started".to_string() } else { ids.join(", ") };
        Err(format!("there is no background sub-agent `{id}`; the background sub-agents of this agent: {known}"))
    }

    /// The report of `id` when it has finished; it counts as read.
    pub(crate) fn result(&self, id: &str) -> Option<String> {
        let mut state = self.lock();
        state.unread.retain(|u| u != id);
        state.results.get(id).cloned()
    }

    /// Returns once `id` is not running.
    pub(crate) async fn wait_for(&self, id: &str) {
        self.wait_until(|s| !s.running.contains_key(id)).await;
    }

    /// Returns once `done` holds for the state, checked at every change.
    async fn wait_until(&self, done: impl Fn(&BackgroundState) -> bool) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if done(&self.lock()) {
                return;
            }
            changed.await;
        }
    }

    fn cancel(&self) {
        let old = std::mem::take(&mut *self.token.lock().unwrap_or_else(|p| p.into_inner()));
        old.cancel();
    }
}

/// Files a background sub-agent's report when its task ends, however it ends.
struct Finish {
    background: Arc<Background>,
    id: String,
    report: Option<String>,
}

impl Drop for Finish {
    fn drop(&mut self) {
        let report = self
            .report
            .take()
            .unwrap_or_else(|| notification(&self.id, None, &ToolOutput::error("its task ended without a report")));
        self.background.finish(&self.id, report);
    }
}

/// What the caller is given when a background sub-agent ends: `output` is what the
/// call would have returned had it run in the foreground.
fn notification(id: &str, description: Option<&str>, output: &ToolOutput) -> String {
    let label = description.map(|d| format!(" ({})", d.trim())).unwrap_or_default();
    let how = if output.is_error { "ended with an error" } else { "finished" };
    format!(
        "<task-notification>\nThe background sub-agent {id}{label} {how}. Its result:\n{}\n</task-notification>",
        output.content.trim()
    )
}

/// The coordinator side of the `Agent` tool for one agent.
pub struct AgentTool {
    run: Arc<SubagentRun>,
    provider: Arc<dyn ModelProvider>,
    /// The caller's loop settings: the template of its sub-agents'.
    config: QueryConfig,
    /// The caller's depth: 0 for a workflow agent.
    depth: u32,
    /// The caller's sink.
    sink: Arc<dyn EventSink>,
    ledger: Arc<Ledger>,
    /// Finished sub-agents of the whole tree below the workflow agent.
    records: Arc<Mutex<Vec<SubagentRecord>>>,
    /// This agent's sub-agents started with `run_in_background`.
    background: Arc<Background>,
}

impl Drop for AgentTool {
    /// The agent's tools are gone: its background sub-agents stop too.
    fn drop(&mut self) {
        self.background.cancel();
    }
}

impl std::fmt::Debug for AgentTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentTool").field("agent", &self.config.agent_id).field("depth", &self.depth).finish()
    }
}

impl AgentTool {
    /// The `Agent` tool of a workflow agent (depth 0) whose loop runs with `config` and
    /// reports to `sink`. `records` collects every sub-agent of its tree.
    pub fn new(
        run: Arc<SubagentRun>,
        provider: Arc<dyn ModelProvider>,
        config: QueryConfig,
        sink: Arc<dyn EventSink>,
        records: Arc<Mutex<Vec<SubagentRecord>>>,
    ) -> Self {
        Self {
            run,
            provider,
            config,
            depth: 0,
            sink,
            ledger: Arc::new(Ledger::default()),
            records,
            background: Arc::default(),
        }
    }

    /// Adds the `Agent` tool to `pool`, with `TaskOutput` and `TaskStop` that read and
    /// stop its background sub-agents, when the depth limit allows sub-agents below
    /// this agent; otherwise a call of any of them says which limit stops it.
    pub fn install(self, pool: ToolPool) -> Result<ToolPool, PoolError> {
        let max = self.run.limits.max_depth;
        if self.depth >= max {
            let reason = format!(
                "sub-agents cannot start here: this agent is at nesting depth {}, the most this run allows \
                 (subagents.max_depth: {max}); do the work yourself",
                self.depth
            );
            return Ok(pool
                .with_withheld(AGENT_TOOL, reason.clone())
                .with_withheld(TASK_TOOL, reason.clone())
                .with_withheld(TASK_OUTPUT_TOOL, reason.clone())
                .with_withheld(TASK_STOP_TOOL, reason));
        }
        let output: Arc<dyn DynTool> = Arc::new(TaskOutputSpec);
        let pool = pool.with_local(output, Arc::new(TaskOutputTool::new(self.background.clone())))?;
        let stop: Arc<dyn DynTool> = Arc::new(TaskStopSpec);
        let pool = pool.with_local(stop, Arc::new(TaskStopTool::new(self.background.clone())))?;
        let spec: Arc<dyn DynTool> = Arc::new(AgentToolSpec);
        pool.with_local(spec, Arc::new(self))
    }

    fn error(id: &str, message: impl std::fmt::Display) -> ToolOutput {
        ToolOutput::error(format!("sub-agent {id} was not started: {message}"))
    }

    /// The tools the sub-agent gets: those asked for (which the caller must have), else
    /// the definition's that the caller has, else all the caller's host-side tools.
    /// `Agent` is in the list when the caller may pass it on.
    fn tool_names(
        &self,
        pool: &ToolPool,
        asked: Option<&[String]>,
        definition: Option<&AgentDefinition>,
    ) -> Result<Vec<String>, String> {
        let have: Vec<&str> = pool.tool_names();
        let canonical = |names: &[String]| -> Vec<String> {
            let mut out: Vec<String> =
                names.iter().map(|t| orch_types::tools::canonical(t.trim()).to_string()).collect();
            out.dedup();
            out
        };
        if let Some(asked) = asked {
            let asked = canonical(asked);
            if let Some(missing) = asked.iter().find(|t| !have.contains(&t.as_str())) {
                return Err(format!(
                    "you asked for the tool `{missing}`, which you do not have; a sub-agent gets at most your tools ({})",
                    have.join(", ")
                ));
            }
            return Ok(asked);
        }
        if let Some(listed) = definition.and_then(|d| d.tools.as_ref()) {
            return Ok(canonical(listed).into_iter().filter(|t| have.contains(&t.as_str())).collect());
        }
        Ok(have.iter().map(|t| t.to_string()).collect())
    }
}

/// A running sub-agent. Dropping it (the call finished, or its caller was aborted and
/// dropped the call) takes it off the running list and files its record; a record
/// that never got its outcome says `aborted`.
struct Running<'a> {
    run: &'a SubagentRun,
    records: &'a Mutex<Vec<SubagentRecord>>,
    record: Option<SubagentRecord>,
    started: std::time::Instant,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if let Some(mut record) = self.record.take() {
            self.run.unregister(&record.id);
            record.duration_ms = self.started.elapsed().as_millis() as u64;
            self.records.lock().unwrap_or_else(|p| p.into_inner()).push(record);
        }
    }
}

const SUBAGENT_NOTE: &str = "You are a sub-agent: another agent gave you this task and \
will read your final message as your report. Nobody else sees your work. Finish with a \
short, concrete report of what you found or changed.";

#[async_trait]
impl LocalTool for AgentTool {
    fn description(&self) -> Option<String> {
        let mut text = format!(
            "{DESCRIPTION}\n\nNamed agent types (set `subagent_type` to one of these; leave it out for a \
             general-purpose agent):"
        );
        for d in self.run.agent_types() {
            text.push_str(&format!("\n- {}: {}", d.name, d.description.trim()));
        }
        Some(text)
    }

    async fn call(
        &self,
        pool: &ToolPool,
        ordinal: u64,
        call: &ToolCall,
        input: Value,
        cancel: CancellationToken,
    ) -> ToolOutput {
        let id = format!("{}/sub-{ordinal}", pool.agent_id());
        let input: AgentInput = match serde_json::from_value(input) {
            Ok(i) => i,
            Err(e) => return Self::error(&id, format!("invalid input: {e}")),
        };
        let limits = self.run.limits;
        let depth = self.depth + 1;
        if depth > limits.max_depth {
            return Self::error(&id, format!("the nesting depth limit of {} is reached", limits.max_depth));
        }
        let definition = match &input.subagent_type {
            None => None,
            Some(name) => match self.run.definition(name) {
                Some(d) => Some(d),
                None => {
                    let known: Vec<&str> = self.run.agent_types().map(|d| d.name.as_str()).collect();
                    let known = if known.is_empty() { "none".to_string() } else { known.join(", ") };
                    return Self::error(&id, format!("there is no agent type `{name}`; the agent types are: {known}"));
                }
            },
        };
        let mut names = match self.tool_names(pool, input.tools.as_deref(), definition) {
            Ok(n) => n,
            Err(e) => return Self::error(&id, e),
        };
        let pass_agent = names.iter().any(|n| n == AGENT_TOOL);
        let general = definition.is_some_and(|d| d.system_prompt.is_empty() && d.tools.is_none());
        names.retain(|n| n != AGENT_TOOL);
        let background = input.run_in_background == Some(true);
        // A background sub-agent waits for its slot in its own task, not in the call.
        let permit = match background {
            true => None,
            false => match self.run.acquire(&id, &cancel).await {
                Ok(p) => Some(p),
                Err(e) => return e,
            },
        };
        if self.run.started.fetch_add(1, Ordering::SeqCst) >= limits.max_total {
            self.run.started.fetch_sub(1, Ordering::SeqCst);
            return Self::error(
                &id,
                format!(
                    "this run has already started {} sub-agents, the most it allows (subagents.max_total); \
                     do the rest of the work yourself",
                    limits.max_total
                ),
            );
        }
        let mut permissions = pool.permissions().clone();
        if let Some(mode) = definition.and_then(|d| d.permission_mode) {
            permissions.mode = stricter(permissions.mode, Some(mode));
        }
        let agent_type = input.subagent_type.as_deref().unwrap_or(crate::pipeline::GENERAL_AGENT_TYPE);
        let mut child_pool = match pool.derive_as(&id, agent_type, Some(&names), permissions) {
            Ok(p) => p,
            Err(e) => return Self::error(&id, e),
        };

        let mut config = self.config.clone();
        config.agent_id = id.clone();
        if let Some(model) = definition.and_then(|d| d.model.clone()) {
            config.model = model;
        }
        // The call's own choice wins over the definition's; `inherit` keeps the caller's.
        if let Some(asked) = input.model.as_deref() {
            config.model = orch_types::model::model_id(asked).unwrap_or_else(|| self.config.model.clone());
        }
        if let Some(d) = definition.filter(|_| !general) {
            let part = SystemPart { text: d.system_prompt.clone(), cache: true };
            match config.system.first_mut() {
                Some(first) => *first = part,
                None => config.system.push(part),
            }
        }
        config.system.push(SystemPart { text: SUBAGENT_NOTE.to_string(), cache: false });
        if let Some(turns) = definition.and_then(|d| d.max_turns) {
            config.limits.max_turns = Some(config.limits.max_turns.map_or(turns, |t| t.min(turns)));
        }
        let sink: Arc<dyn EventSink> = Arc::new(NestedSink {
            parent: self.sink.clone(),
            agent: id.clone(),
            tool_use_id: call.id.clone(),
            ledger: self.ledger.clone(),
        });
        if pass_agent {
            // Its own sub-agents start from the plain prompt again, on its model.
            let mut template = self.config.clone();
            template.model = config.model.clone();
            let child = AgentTool {
                run: self.run.clone(),
                provider: self.provider.clone(),
                config: template,
                depth,
                sink: sink.clone(),
                ledger: Arc::new(Ledger::default()),
                records: self.records.clone(),
                background: Arc::default(),
            };
            child_pool = match child.install(child_pool) {
                Ok(p) => p,
                Err(e) => return Self::error(&id, e),
            };
        }

        if background {
            return self.start_background(id, input, config, child_pool, sink);
        }
        let outcome = drive(
            &self.run,
            &self.records,
            self.provider.as_ref(),
            &child_pool,
            &config,
            &input,
            &sink,
            cancel.child_token(),
        )
        .await;
        drop(permit);
        report(&id, &outcome)
    }

    fn take_nested_usage(&self) -> Option<(Usage, f64)> {
        self.ledger.take()
    }

    fn take_background_reports(&self) -> Vec<String> {
        self.background.take()
    }

    fn background_running(&self) -> usize {
        self.background.running()
    }

    async fn wait_background(&self) {
        self.background.wait_until(|s| !s.unread.is_empty() || s.running.is_empty()).await;
    }

    async fn stop_background(&self) {
        self.background.cancel();
        self.background.wait_until(|s| s.running.is_empty()).await;
    }
}

impl AgentTool {
    /// Starts a prepared sub-agent in a task of its own and returns the call's result:
    /// its id, and that the report comes later.
    fn start_background(
        &self,
        id: String,
        input: AgentInput,
        config: QueryConfig,
        pool: ToolPool,
        sink: Arc<dyn EventSink>,
    ) -> ToolOutput {
        let background = self.background.clone();
        let token = background.token().child_token();
        background.started(&id, token.clone());
        let mut finish = Finish { background, id: id.clone(), report: None };
        let (run, records, provider) = (self.run.clone(), self.records.clone(), self.provider.clone());
        tracing::debug!(agent = %id, "sub-agent started in the background");
        tokio::spawn(async move {
            let description = input.description.as_deref();
            let output = match run.acquire(&finish.id, &token).await {
                Ok(permit) => {
                    let outcome = drive(&run, &records, provider.as_ref(), &pool, &config, &input, &sink, token).await;
                    drop(permit);
                    report(&finish.id, &outcome)
                }
                Err(refused) => {
                    // It never started: it does not count against `max_total`.
                    run.started.fetch_sub(1, Ordering::SeqCst);
                    refused
                }
            };
            finish.report.replace(notification(&finish.id, description, &output));
        });
        ToolOutput::ok(format!(
            "Sub-agent {id} is running in the background. Go on with other work (do not do its task \
             yourself): its report is added to the conversation when it finishes, and if you end your \
             answer while it still runs, you are given the report before you finish. To wait for it \
             now, call TaskOutput with task_id \"{id}\"; to stop it, TaskStop."
        ))
    }
}

/// Runs a prepared sub-agent to its end under `token`, listed as running meanwhile,
/// and files its record.
#[allow(clippy::too_many_arguments)]
async fn drive(
    run: &SubagentRun,
    records: &Mutex<Vec<SubagentRecord>>,
    provider: &dyn ModelProvider,
    pool: &ToolPool,
    config: &QueryConfig,
    input: &AgentInput,
    sink: &Arc<dyn EventSink>,
    token: CancellationToken,
) -> crate::query::QueryOutcome {
    let id = config.agent_id.clone();
    run.register(&id, token.clone());
    let mut guard = Running {
        run,
        records,
        record: Some(SubagentRecord {
            id: id.clone(),
            subagent_type: input.subagent_type.clone(),
            description: input.description.clone(),
            status: "aborted".to_string(),
            turns: 0,
            usage: Usage::default(),
            cost_usd: 0.0,
            duration_ms: 0,
        }),
        started: std::time::Instant::now(),
    };
    tracing::debug!(agent = %id, kind = ?input.subagent_type, "sub-agent started");
    let outcome = query(provider, pool, config, vec![Message::user(&input.prompt)], sink, &token).await;
    if let Some(record) = guard.record.as_mut() {
        record.status = outcome.terminal.name().to_string();
        record.turns = outcome.turns;
        record.usage = outcome.usage;
        record.cost_usd = outcome.cost_usd;
    }
    drop(guard);
    outcome
}

/// The call's result for a sub-agent that ended: its report and what it spent.
fn report(id: &str, outcome: &crate::query::QueryOutcome) -> ToolOutput {
    let stats = format!(
        "[sub-agent {id}: {}, {} turns, {} tokens, ${:.4}]",
        outcome.terminal.name(),
        outcome.turns,
        outcome.usage.total(),
        outcome.cost_usd
    );
    let report = outcome.final_text.trim();
    match &outcome.terminal {
        crate::event::Terminal::Completed => ToolOutput::ok(format!("{report}\n\n{stats}")),
        terminal => {
            let last = if report.is_empty() { "(no report)".to_string() } else { report.to_string() };
            ToolOutput::error(format!(
                "the sub-agent did not finish: {terminal}. What it said last:\n{last}\n\n{stats}"
            ))
        }
    }
}
