//! The query loop: the one async loop that every agent, nested agent and synthesis runs
//! through. It sends the history to the model, runs the tools the model asks for,
//! appends their results and repeats, until it reaches an explicit [`Terminal`].
//!
//! The loop owns budgets, turn limits, the wall-clock timeout and cancellation. It keeps
//! one invariant above all: every `tool_use` in the history is answered by exactly one
//! `tool_result`, whatever interrupts it.
//!
//! It also keeps the conversation inside the context window. Before every model call it
//! runs the context pipeline (see [`crate::context`]): microcompact, then autocompact
//! when the context is over its threshold (a summary request through the same provider,
//! with no tools; the oldest messages dropped and the request retried when it is itself
//! too long; the most recently read files restored afterwards). A prompt-too-long error
//! compacts and retries once; three failed compactions in a row end the loop with
//! [`Terminal::CompactionFailed`]. The size of the context is the usage the API
//! reported for the last call plus a local estimate of what came since.
//!
//! Output limits: a text answer cut at the output limit raises the limit and continues,
//! at most [`MAX_CONTINUATIONS`] times; still cut after that, the loop ends with
//! [`Terminal::MaxOutputTokens`]. An answer whose tool call was cut is never run: it is
//! asked again once with the model's largest output cap, and if it is still cut, the
//! model is told so and asked to split the work ([`CUT_TOOL_CALL`]). No request is sent
//! twice unchanged for it. Token and cost budgets reserve the next call's worst case
//! (the context estimate plus the output cap, which shrinks to fit), so a budget is
//! overshot by at most the error of one estimate; [`QueryOutcome::overshoot`] says by
//! how much.
//!
//! Background sub-agents (`Agent` with `run_in_background`) report through the tools:
//! before each model call the loop adds the reports that came in to the conversation;
//! an answer without tool calls while one still runs waits for the next report (within
//! the time limit and the abort) and goes on with it; when the loop ends, whatever still
//! runs is cancelled and awaited, so its spend is in the totals.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::context::{self, ContextConfig, Restored};
use crate::event::{Budget, CompactionReason, Event, EventSink, Phase, Terminal};
use crate::message::{ContentBlock, Message, Role, ToolSpec};
use crate::model::{
    ModelError, ModelProvider, ModelRequest, ModelResponse, ModelSettings, StopReason, StreamEvent, SystemPart,
    Thinking, Timeouts, limits_for,
};
use crate::tool::{ToolCall, ToolOutput, ToolRunner};
use crate::usage::{PriceTable, Usage};

/// Tool calls that may share one parallel run.
pub const MAX_PARALLEL_TOOLS: usize = 10;

/// The most tool calls of one answer that run (the default of
/// [`QueryConfig::max_tool_calls_per_turn`]). Past it, the next call gets one error
/// result that stands for it and every call after it, and those later calls are left out
/// of the history, so one answer cannot make the next request unbounded.
pub const MAX_TOOL_CALLS_PER_TURN: usize = 64;

/// Overloaded answers in a row before the loop switches to the fallback model.
pub const OVERLOADS_BEFORE_FALLBACK: u32 = 3;

/// Continuations of an answer cut at the output limit.
pub const MAX_CONTINUATIONS: u32 = 3;

/// The smallest output cap worth a call when a budget shrinks it; below it, the budget
/// counts as spent.
pub const MIN_RESERVED_OUTPUT_TOKENS: u32 = 256;

/// Times a too-long summary request is retried with its oldest messages dropped.
pub const MAX_HEAD_DROPS: u32 = 3;

/// Failed compactions in a row before the loop gives up.
pub const MAX_FAILED_COMPACTIONS: u32 = 3;

/// What the loop says after an answer was cut at the output limit.
pub const CONTINUE_PROMPT: &str = "Your answer was cut off at the output token limit. Continue exactly where \
                                   it stopped, without repeating anything and without a preamble.";

/// The result given to a tool call that the output limit cut twice.
pub const CUT_TOOL_CALL: &str = "Not run: your answer hit the output token limit while you were still writing this \
                                 tool call, so its input is incomplete. The limit is already at its highest. Do the \
                                 same work in smaller steps: write a large file in several parts (create it with the \
                                 first part, then add the rest with edits), and make one call at a time.";

/// Limits of one loop (defined in orch-types). `None` means unlimited.
pub use orch_types::Limits;

/// How one loop runs.
#[derive(Debug, Clone)]
pub struct QueryConfig {
    pub agent_id: String,
    pub model: String,
    /// Used after the main model stays overloaded through its retries.
    pub fallback_model: Option<String>,
    pub system: Vec<SystemPart>,
    /// The output cap of a normal call.
    pub max_output_tokens: u32,
    /// The highest output cap the loop raises to for a cut answer (the model's limit).
    pub max_output_ceiling: u32,
    /// The waits for the model.
    pub timeouts: Timeouts,
    /// Extended thinking, when on.
    pub thinking: Option<Thinking>,
    pub limits: Limits,
    pub prices: Arc<PriceTable>,
    /// The context window and how the loop keeps inside it.
    pub context: ContextConfig,
    /// The most tool calls of one answer that run (see [`MAX_TOOL_CALLS_PER_TURN`]).
    pub max_tool_calls_per_turn: usize,
}

impl QueryConfig {
    /// A loop for `model`, with its known output cap and context window (see
    /// [`limits_for`]) and the default waits.
    pub fn new(agent_id: impl Into<String>, model: impl Into<String>) -> Self {
        let model = model.into();
        let known = limits_for(&model);
        let context = ContextConfig { window: known.context_window, ..ContextConfig::default() };
        Self {
            agent_id: agent_id.into(),
            model,
            fallback_model: None,
            system: Vec::new(),
            max_output_tokens: known.default_output_tokens,
            max_output_ceiling: known.max_output_tokens,
            timeouts: Timeouts::default(),
            thinking: None,
            limits: Limits::default(),
            prices: Arc::new(PriceTable::default()),
            context,
            max_tool_calls_per_turn: MAX_TOOL_CALLS_PER_TURN,
        }
    }

    /// Applies a workflow's or agent's `model_settings`: what they set replaces the
    /// model's defaults. An output cap above the model's known ceiling raises the
    /// ceiling (the workflow knows better than the table).
    pub fn apply_settings(&mut self, settings: &ModelSettings) {
        self.timeouts = settings.timeouts();
        if let Some(cap) = settings.max_output_tokens.filter(|&c| c > 0) {
            self.max_output_tokens = cap;
            self.max_output_ceiling = self.max_output_ceiling.max(cap);
        }
        if let Some(window) = settings.context_window.filter(|&w| w > 0) {
            self.context.window = window;
            // Keep the reserve a fraction of a small window, so autocompact can work.
            self.context.reserve = self.context.reserve.min(window / 5);
        }
        if settings.thinking.is_some() {
            self.thinking = settings.thinking;
        }
    }
}

/// How far the loop went past a budget.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Overshoot {
    pub budget: Budget,
    pub limit: f64,
    pub used: f64,
    /// `used - limit`.
    pub by: f64,
}

/// How a loop ended and everything it produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueryOutcome {
    pub terminal: Terminal,
    /// The whole history, the initial messages included.
    pub messages: Vec<Message>,
    /// The text of the last assistant message.
    pub final_text: String,
    /// Model calls made.
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    /// The model that answered last.
    pub model: String,
    /// Set when the loop used more than a token or cost budget allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overshoot: Option<Overshoot>,
}

/// Why a wait ended early.
enum Interrupt {
    Cancelled,
    TimedOut,
}

struct Loop<'a> {
    provider: &'a dyn ModelProvider,
    tools: &'a dyn ToolRunner,
    config: &'a QueryConfig,
    events: &'a dyn EventSink,
    cancel: &'a CancellationToken,
    deadline: Option<Instant>,
    started: Instant,
    messages: Vec<Message>,
    turns: u32,
    usage: Usage,
    cost_usd: f64,
    model: String,
    fell_back: bool,
    /// The output limit of the next call.
    max_output: u32,
    /// Continuations since the last answer that was not cut.
    continuations: u32,
    /// The text of the cut answers the current one continues.
    cut_text: String,
    /// Compactions that failed in a row.
    failed_compactions: u32,
    /// Compactions done (numbers the ids of restored reads).
    compactions: u32,
    /// A prompt-too-long error was answered by compacting; the next one is final.
    reactive_retried: bool,
    /// `(history length, prompt tokens)`: the size the API reported for the last call
    /// and how much of the history it covered.
    anchor: Option<(usize, u64)>,
    /// The local estimate of the system prompt and the tools.
    fixed_tokens: u64,
    /// Times a Stop hook kept the agent going.
    stop_blocks: u32,
    /// The current answer's tool calls were cut at the output limit this many times in
    /// a row (the first time is asked again with a larger cap).
    cut_calls: u32,
}

/// Runs one agent until it reaches a terminal state.
pub async fn query(
    provider: &dyn ModelProvider,
    tools: &dyn ToolRunner,
    config: &QueryConfig,
    messages: Vec<Message>,
    events: &dyn EventSink,
    cancel: &CancellationToken,
) -> QueryOutcome {
    let started = Instant::now();
    let mut state = Loop {
        provider,
        tools,
        config,
        events,
        cancel,
        deadline: config.limits.timeout.map(|t| started + t.as_std()),
        started,
        messages,
        turns: 0,
        usage: Usage::default(),
        cost_usd: 0.0,
        model: config.model.clone(),
        fell_back: false,
        max_output: config.max_output_tokens,
        continuations: 0,
        cut_text: String::new(),
        failed_compactions: 0,
        compactions: 0,
        reactive_retried: false,
        anchor: None,
        fixed_tokens: 0,
        stop_blocks: 0,
        cut_calls: 0,
    };
    let terminal = state.run().await;
    // Background sub-agents still running (the loop ended early: abort, limit, error)
    // are cancelled, and what they spent is counted before the totals are final.
    state.tools.stop_background().await;
    state.end_hooks(&terminal).await;
    state.absorb_nested();
    events.emit(Event::Terminal { reason: terminal.clone(), turns: state.turns });
    let last = state.messages.iter().rev().find(|m| m.role == Role::Assistant).map(Message::text).unwrap_or_default();
    let final_text = state.cut_text.clone() + &last;
    let overshoot = state.overshoot();
    QueryOutcome {
        terminal,
        messages: state.messages,
        final_text,
        turns: state.turns,
        usage: state.usage,
        cost_usd: state.cost_usd,
        model: state.model,
        overshoot,
    }
}

impl Loop<'_> {
    async fn run(&mut self) -> Terminal {
        let mut specs = self.tools.specs();
        // Sorted by name, so the cached prefix is the same for every agent with these tools.
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        self.fixed_tokens = context::estimate_fixed(&self.config.system, &specs);
        if let Some(end) = self.session_start().await {
            return end;
        }
        loop {
            // Background sub-agents spend while the loop runs: their usage counts first.
            self.absorb_nested();
            if let Some(end) = self.check_limits() {
                return end;
            }
            self.deliver_background();
            if let Some(end) = self.manage_context(&specs).await {
                return end;
            }
            let max_tokens = match self.reserve() {
                Ok(cap) => cap,
                Err(end) => return end,
            };
            self.turns += 1;
            self.events.emit(Event::TurnStarted { turn: self.turns, model: self.model.clone() });

            let request = ModelRequest {
                agent_id: &self.config.agent_id,
                model: &self.model,
                system: &self.config.system,
                messages: &self.messages,
                tools: &specs,
                max_tokens,
                give_up_on_overload_after: match (&self.config.fallback_model, self.fell_back) {
                    (Some(_), false) => Some(OVERLOADS_BEFORE_FALLBACK),
                    _ => None,
                },
                timeouts: self.config.timeouts,
                thinking: self.config.thinking,
                server_tools: &[],
            };
            let tools = self.tools;
            let events = self.events;
            let mut streamed: BTreeMap<usize, ContentBlock> = BTreeMap::new();
            let mut early = Early::new(self.cancel.child_token());
            let (early_tx, mut early_rx) = mpsc::unbounded_channel::<(ToolCall, CancellationToken)>();
            let mut sink = |event: StreamEvent| match event {
                StreamEvent::AttemptStarted { .. } => {
                    streamed.clear();
                    early.restart();
                }
                StreamEvent::TextDelta(text) => events.emit(Event::TextDelta { text }),
                StreamEvent::ThinkingDelta(_) => {}
                StreamEvent::BlockComplete { index, block } => {
                    if let ContentBlock::ToolUse { id, name, input } = &block {
                        let call = ToolCall { id: id.clone(), name: name.clone(), input: input.clone() };
                        if early.admit(tools, &call) {
                            let _ = early_tx.send((call, early.token.clone()));
                        }
                    }
                    streamed.insert(index, block);
                }
                StreamEvent::Retrying { attempt, delay, error } => events.emit(Event::retry(attempt, delay, error)),
            };
            let mut running = FuturesUnordered::new();
            let mut done: HashMap<String, ToolOutput> = HashMap::new();
            let result = {
                let send = self.provider.send(&request, &mut sink);
                tokio::pin!(send);
                loop {
                    tokio::select! {
                        biased;
                        _ = self.cancel.cancelled() => break Err(Interrupt::Cancelled),
                        _ = sleep_until(self.deadline) => break Err(Interrupt::TimedOut),
                        Some((call, token)) = early_rx.recv() => running.push(run_owned(tools, call, token, events)),
                        Some((id, output)) = running.next(), if !running.is_empty() => {
                            done.insert(id, output);
                        }
                        r = &mut send => break Ok(r),
                    }
                }
            };
            while let Ok((call, token)) = early_rx.try_recv() {
                running.push(run_owned(tools, call, token, events));
            }
            let response = match result {
                Err(why) => {
                    early.token.cancel();
                    let blocks = streamed.into_values().collect();
                    return self.interrupted(Phase::Streaming, why, blocks, &done);
                }
                Ok(Err(error)) => {
                    early.token.cancel();
                    if let ModelError::PromptTooLong { message } = &error
                        && self.config.context.enabled
                        && !self.reactive_retried
                    {
                        // Compact, then send again, once.
                        self.reactive_retried = true;
                        self.turns -= 1;
                        match self.compact(CompactionReason::PromptTooLong, &specs).await {
                            Err(end) => return end,
                            Ok(true) => continue,
                            Ok(false) => return Terminal::PromptTooLong { message: message.clone() },
                        }
                    }
                    match self.model_failed(error) {
                        Some(end) => return end,
                        None => continue,
                    }
                }
                Ok(Ok(response)) => response,
            };

            self.account(&response);
            self.model = response.model.clone();
            self.reactive_retried = false;
            let prompt = response.usage.prompt_tokens();
            self.anchor = (prompt > 0).then_some((self.messages.len(), prompt));

            let calls = tool_calls(&response.content);
            if response.content.is_empty() {
                // An empty answer ends the agent too, once no background report is due.
                match self.await_background().await {
                    Ok(true) => continue,
                    Ok(false) => return Terminal::Completed,
                    Err(end) => return end,
                }
            }
            let cut = response.stop_reason == StopReason::MaxTokens;
            if cut && !calls.is_empty() {
                early.token.cancel();
                self.cut_tool_calls(response.content, &calls, max_tokens);
                continue;
            }
            self.cut_calls = 0;
            let (content, calls, refused) = cap_calls(response.content, calls, self.config.max_tool_calls_per_turn);
            let text = if cut && calls.is_empty() { blocks_text(&content) } else { String::new() };
            self.push_assistant(content);
            if calls.is_empty() {
                if cut {
                    if self.continuations >= MAX_CONTINUATIONS {
                        return Terminal::MaxOutputTokens { continuations: self.continuations };
                    }
                    self.continuations += 1;
                    self.max_output = self.raised_output(max_tokens);
                    tracing::info!(agent = %self.config.agent_id, limit = self.max_output, "answer cut at the output limit; continuing");
                    self.cut_text.push_str(&text);
                    self.messages.push(Message::user(CONTINUE_PROMPT));
                    continue;
                }
                match self.await_background().await {
                    Ok(true) => continue,
                    Ok(false) => {}
                    Err(end) => return end,
                }
                match self.stop_hooks().await {
                    Ok(true) => continue,
                    Ok(false) => return Terminal::Completed,
                    Err(end) => return end,
                }
            }
            self.continuations = 0;
            self.cut_text.clear();
            self.max_output = self.config.max_output_tokens;
            let started_early = calls.iter().take_while(|c| early.started.contains(&c.id)).count();
            let early_run = EarlyRun { running, done, token: early.token, count: started_early };
            if let Err(why) = self.run_tools(&calls, early_run, refused).await {
                return match why {
                    Interrupt::Cancelled => Terminal::Aborted { during: Phase::Tools },
                    Interrupt::TimedOut => self.timeout(),
                };
            }
            if let Some(message) = self.tools.hooks().and_then(|h| h.halted()) {
                return Terminal::HookStopped { message };
            }
        }
    }

    /// SessionStart (SubagentStart) hooks, then UserPromptSubmit hooks on the prompt,
    /// before the first model call of a fresh session: what they say is added to the
    /// prompt. `Some` ends the loop: a UserPromptSubmit hook that refuses the prompt
    /// ends it before any model call.
    async fn session_start(&mut self) -> Option<Terminal> {
        let hooks = self.tools.hooks()?;
        if self.messages.iter().any(|m| m.role == Role::Assistant) {
            return None;
        }
        // The prompt as the caller gave it, before any hook adds to it.
        let prompt = self.messages.iter().rev().find(|m| m.role == Role::User).map(Message::text).unwrap_or_default();
        let context = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Some(Terminal::Aborted { during: Phase::Idle }),
            _ = sleep_until(self.deadline) => return Some(self.timeout()),
            c = hooks.session_start() => c,
        };
        if let Some(text) = context {
            self.add_to_prompt(format!("Context from a SessionStart hook:\n{text}"));
        }
        if let Some(message) = hooks.halted() {
            return Some(Terminal::HookStopped { message });
        }
        let submitted = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Some(Terminal::Aborted { during: Phase::Idle }),
            _ = sleep_until(self.deadline) => return Some(self.timeout()),
            s = hooks.user_prompt_submit(&prompt) => s,
        };
        if let Some(reason) = submitted.blocked {
            tracing::info!(agent = %self.config.agent_id, "a UserPromptSubmit hook refused the prompt");
            return Some(Terminal::HookStopped {
                message: format!("a UserPromptSubmit hook refused the prompt: {reason}"),
            });
        }
        if let Some(text) = submitted.context {
            self.add_to_prompt(format!("Context from a UserPromptSubmit hook:\n{text}"));
        }
        hooks.halted().map(|message| Terminal::HookStopped { message })
    }

    /// Adds the reports of background sub-agents that finished to the conversation:
    /// to the last user message (tool results), or as a new one after an answer.
    /// `false` when there was none.
    fn deliver_background(&mut self) -> bool {
        let reports = self.tools.take_background_reports();
        if reports.is_empty() {
            return false;
        }
        tracing::debug!(agent = %self.config.agent_id, reports = reports.len(), "background reports delivered");
        let text = reports.join("\n\n");
        match self.messages.last_mut() {
            Some(last) if last.role == Role::User => last.content.push(ContentBlock::Text { text }),
            _ => self.messages.push(Message::user(text)),
        }
        true
    }

    /// The model answered without tool calls while background sub-agents may still
    /// run: the loop waits for the next one to finish (within the agent's time limit,
    /// and its abort) and hands its report to the model, so no work is lost. `Ok(true)`:
    /// a report was added and the loop goes on; `Ok(false)`: nothing runs, the agent may
    /// finish.
    async fn await_background(&mut self) -> Result<bool, Terminal> {
        if self.tools.background_running() > 0 {
            tracing::info!(agent = %self.config.agent_id, running = self.tools.background_running(), "waiting for background sub-agents before finishing");
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Idle }),
                _ = sleep_until(self.deadline) => return Err(self.timeout()),
                () = self.tools.wait_background() => {}
            }
        }
        Ok(self.deliver_background())
    }

    /// Adds `text` to the last user message (the prompt, or the compacted history).
    fn add_to_prompt(&mut self, text: String) {
        if let Some(last) = self.messages.iter_mut().rev().find(|m| m.role == Role::User) {
            last.content.push(ContentBlock::Text { text });
        }
    }

    /// The hooks of a loop's end: StopFailure when the model failed. It cannot change
    /// how the loop ended; an aborted loop runs none (its hooks are cancelled with it).
    /// SessionEnd is the caller's: one session may run the loop more than once.
    async fn end_hooks(&mut self, terminal: &Terminal) {
        let Some(hooks) = self.tools.hooks() else { return };
        if self.cancel.is_cancelled() {
            return;
        }
        let error = match terminal {
            Terminal::ModelError { kind, .. } => Some(match kind {
                crate::model::ModelErrorKind::Auth => "authentication_failed",
                crate::model::ModelErrorKind::RateLimit => "rate_limit",
                crate::model::ModelErrorKind::InvalidRequest => "invalid_request",
                crate::model::ModelErrorKind::Server | crate::model::ModelErrorKind::Overloaded => "server_error",
                _ => "unknown",
            }),
            Terminal::PromptTooLong { .. } => Some("invalid_request"),
            Terminal::MaxOutputTokens { .. } => Some("max_output_tokens"),
            _ => None,
        };
        if let Some(error) = error {
            let last = self.last_text();
            hooks.stop_failure(error, &terminal.to_string(), &last).await;
        }
    }

    /// The text of the last assistant message.
    fn last_text(&self) -> String {
        self.messages.iter().rev().find(|m| m.role == Role::Assistant).map(Message::text).unwrap_or_default()
    }

    /// Stop hooks, when the model answered without tool calls. `Ok(true)`: a hook
    /// blocked the stop and its reason is the next message; `Ok(false)`: the agent is
    /// done. Past [`crate::hooks::Hooks::stop_block_limit`] blocks, the loop ends with
    /// [`Terminal::HookStopped`].
    async fn stop_hooks(&mut self) -> Result<bool, Terminal> {
        let Some(hooks) = self.tools.hooks() else { return Ok(false) };
        let last = self.last_text();
        let blocked = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Idle }),
            _ = sleep_until(self.deadline) => return Err(self.timeout()),
            r = hooks.stop(self.stop_blocks > 0, &last) => r,
        };
        if let Some(message) = hooks.halted() {
            return Err(Terminal::HookStopped { message });
        }
        let Some(reason) = blocked else { return Ok(false) };
        let limit = hooks.stop_block_limit();
        if self.stop_blocks >= limit {
            return Err(Terminal::HookStopped {
                message: format!("a Stop hook blocked the end again after {limit} blocks; its reason: {reason}"),
            });
        }
        self.stop_blocks += 1;
        tracing::info!(agent = %self.config.agent_id, blocks = self.stop_blocks, "a Stop hook keeps the agent going");
        self.messages.push(Message::user(format!("A Stop hook does not let you finish yet:\n{reason}")));
        Ok(true)
    }

    /// The limits checked before each model call.
    fn check_limits(&self) -> Option<Terminal> {
        let limits = &self.config.limits;
        if self.cancel.is_cancelled() {
            return Some(Terminal::Aborted { during: Phase::Idle });
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(self.timeout());
        }
        if let Some(limit) = limits.max_turns.filter(|&l| self.turns >= l) {
            return Some(Terminal::MaxTurns { limit });
        }
        if let Some(limit) = limits.max_tokens.filter(|&l| self.usage.total() >= l) {
            return Some(Terminal::BudgetExceeded {
                budget: Budget::Tokens,
                limit: limit as f64,
                used: self.usage.total() as f64,
            });
        }
        if let Some(limit) = limits.max_cost_usd.filter(|&l| self.cost_usd >= l) {
            return Some(Terminal::BudgetExceeded { budget: Budget::CostUsd, limit, used: self.cost_usd });
        }
        None
    }

    fn timeout(&self) -> Terminal {
        Terminal::Timeout { after_ms: self.started.elapsed().as_millis() as u64 }
    }

    /// The output cap of the next call: the current cap, shrunk so that the call's
    /// worst case (the context estimate as input, plus the cap as output) fits what is
    /// left of the token and cost budgets. `Err` when less than
    /// [`MIN_RESERVED_OUTPUT_TOKENS`] would fit: the budget counts as spent.
    fn reserve(&self) -> Result<u32, Terminal> {
        let limits = &self.config.limits;
        let mut cap = u64::from(self.max_output);
        if limits.max_tokens.is_none() && limits.max_cost_usd.is_none() {
            return Ok(self.max_output);
        }
        let input = self.context_tokens();
        let floor = u64::from(MIN_RESERVED_OUTPUT_TOKENS).min(cap);
        if let Some(limit) = limits.max_tokens {
            let used = self.usage.total();
            let room = limit.saturating_sub(used).saturating_sub(input);
            if room < floor {
                tracing::info!(agent = %self.config.agent_id, used, input, limit, "the next call would not fit the token budget");
                return Err(Terminal::BudgetExceeded {
                    budget: Budget::Tokens,
                    limit: limit as f64,
                    used: used as f64,
                });
            }
            cap = cap.min(room);
        }
        if let Some(limit) = limits.max_cost_usd {
            let prices = &self.config.prices;
            // Worst case for the input: all of it written to the cache.
            let input_cost =
                prices.cost(&self.model, &Usage { cache_creation_input_tokens: input, ..Usage::default() });
            let per_output = prices.cost(&self.model, &Usage { output_tokens: 1, ..Usage::default() });
            let left = limit - self.cost_usd - input_cost;
            if per_output > 0.0 {
                let room = if left > 0.0 { (left / per_output).floor() as u64 } else { 0 };
                if room < floor {
                    tracing::info!(agent = %self.config.agent_id, used = self.cost_usd, limit, "the next call would not fit the cost budget");
                    return Err(Terminal::BudgetExceeded { budget: Budget::CostUsd, limit, used: self.cost_usd });
                }
                cap = cap.min(room);
            }
        }
        Ok(u32::try_from(cap).unwrap_or(self.max_output))
    }

    /// How far the totals went past a budget, if they did.
    fn overshoot(&self) -> Option<Overshoot> {
        let limits = &self.config.limits;
        let tokens = limits.max_tokens.filter(|&l| self.usage.total() > l).map(|l| Overshoot {
            budget: Budget::Tokens,
            limit: l as f64,
            used: self.usage.total() as f64,
            by: (self.usage.total() - l) as f64,
        });
        let cost = limits.max_cost_usd.filter(|&l| self.cost_usd > l).map(|l| Overshoot {
            budget: Budget::CostUsd,
            limit: l,
            used: self.cost_usd,
            by: self.cost_usd - l,
        });
        tokens.or(cost)
    }

    /// The output cap after an answer cut at `sent`: doubled, up to the ceiling.
    fn raised_output(&self, sent: u32) -> u32 {
        sent.max(self.max_output).saturating_mul(2).min(self.config.max_output_ceiling).max(self.max_output)
    }

    /// An answer whose tool calls the output limit cut. None of them runs. The first
    /// time, the answer is dropped and asked again with the largest cap (a different
    /// request: its cap is higher); when the cap cannot grow, or the new answer is cut
    /// too, the answer is kept and every call gets [`CUT_TOOL_CALL`] as its result.
    fn cut_tool_calls(&mut self, content: Vec<ContentBlock>, calls: &[ToolCall], sent: u32) {
        let ceiling = self.config.max_output_ceiling.max(self.max_output);
        let before = std::mem::replace(&mut self.max_output, ceiling);
        // A budget may hold the cap where it was: then the same request would go again.
        let grows = self.reserve().is_ok_and(|cap| cap > sent);
        if self.cut_calls == 0 && grows {
            self.cut_calls = 1;
            tracing::info!(agent = %self.config.agent_id, limit = ceiling, "a tool call was cut at the output limit; asking again with a larger cap");
            return;
        }
        self.max_output = before.max(sent);
        self.cut_calls += 1;
        tracing::warn!(agent = %self.config.agent_id, calls = calls.len(), "a tool call was cut at the output limit again; asking the model to split it");
        self.push_assistant(content);
        let results = calls
            .iter()
            .map(|c| {
                self.events.emit(Event::ToolUseFinished {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    is_error: true,
                    duration_ms: 0,
                    output: CUT_TOOL_CALL.to_string(),
                    denied: false,
                });
                ContentBlock::tool_result(&c.id, CUT_TOOL_CALL, true)
            })
            .collect();
        self.messages.push(Message { role: Role::User, content: results });
    }

    /// Adds a response's usage and cost to the totals and reports them.
    fn account(&mut self, response: &ModelResponse) {
        let cost = self.config.prices.cost(&response.model, &response.usage);
        self.usage += response.usage;
        self.cost_usd += cost;
        self.events.emit(Event::Usage {
            turn: self.turns,
            model: response.model.clone(),
            usage: response.usage,
            total: self.usage,
            cost_usd: cost,
            total_cost_usd: self.cost_usd,
        });
    }

    /// Adds what nested sub-agents spent for this agent to its totals (no `Usage`
    /// event: their own events already reported it).
    fn absorb_nested(&mut self) {
        if let Some((usage, cost)) = self.tools.take_nested_usage() {
            self.usage += usage;
            self.cost_usd += cost;
        }
    }

    /// The size of the context the next call would send: what the API reported for the
    /// last call plus the local estimate of the messages added since; the local
    /// estimate of everything when there is no report to start from.
    fn context_tokens(&self) -> u64 {
        match self.anchor {
            Some((len, tokens)) if len <= self.messages.len() => {
                tokens + context::estimate_messages(&self.messages[len..])
            }
            _ => self.fixed_tokens + context::estimate_messages(&self.messages),
        }
    }

    /// The context pipeline before a model call: microcompact, then autocompact over
    /// the threshold. `Some` ends the loop.
    async fn manage_context(&mut self, specs: &[ToolSpec]) -> Option<Terminal> {
        let config = &self.config.context;
        if !config.enabled {
            return None;
        }
        let threshold = config.threshold();
        let before = self.context_tokens();
        let batch = if before > threshold { 0 } else { config.microcompact_batch_tokens };
        let cleared = context::microcompact(&mut self.messages, config.keep_recent_turns, batch);
        if cleared.results > 0 {
            // The reported size stays the base; only what was cleared comes off it.
            self.anchor = self.anchor.map(|(len, tokens)| (len, tokens.saturating_sub(cleared.tokens)));
            let after = self.context_tokens();
            tracing::debug!(agent = %self.config.agent_id, results = cleared.results, before, after, "microcompact");
            self.events.emit(Event::Compaction {
                before_tokens: before,
                after_tokens: after,
                reason: CompactionReason::Microcompact,
            });
        }
        if self.context_tokens() > threshold {
            return self.compact(CompactionReason::Autocompact, specs).await.err();
        }
        None
    }

    /// Replaces the history with a summary and the most recently read files. `Ok(false)`
    /// when the compaction failed and the loop may go on; `Err` ends the loop (abort,
    /// timeout, or too many failures in a row).
    async fn compact(&mut self, reason: CompactionReason, specs: &[ToolSpec]) -> Result<bool, Terminal> {
        if let Some(hooks) = self.tools.hooks() {
            let blocked = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Idle }),
                _ = sleep_until(self.deadline) => return Err(self.timeout()),
                b = hooks.pre_compact("auto") => b,
            };
            if let Some(reason) = blocked {
                // As in Claude Code, a PreCompact hook may keep the history as it is.
                tracing::warn!(agent = %self.config.agent_id, "a PreCompact hook blocked the compaction: {reason}");
                return Ok(false);
            }
        }
        let before = self.context_tokens();
        let summary = match self.summarize().await? {
            Ok(summary) => summary,
            Err(why) => {
                self.failed_compactions += 1;
                tracing::warn!(agent = %self.config.agent_id, failures = self.failed_compactions, "compaction failed: {why}");
                if self.failed_compactions >= MAX_FAILED_COMPACTIONS {
                    return Err(Terminal::CompactionFailed { failures: self.failed_compactions, message: why });
                }
                return Ok(false);
            }
        };
        let restored = self.restore(specs).await?;
        self.compactions += 1;
        self.failed_compactions = 0;
        self.messages = context::compacted_history(&summary, &restored);
        if let Some(hooks) = self.tools.hooks() {
            let context = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Idle }),
                _ = sleep_until(self.deadline) => return Err(self.timeout()),
                c = hooks.post_compact("auto", &summary) => c,
            };
            if let Some(text) = context {
                self.add_to_prompt(format!("Context from a hook after the compaction:\n{text}"));
            }
        }
        self.anchor = None;
        let after = self.context_tokens();
        tracing::info!(agent = %self.config.agent_id, reason = reason.as_str(), before, after, restored = restored.len(), "context compacted");
        self.events.emit(Event::Compaction { before_tokens: before, after_tokens: after, reason });
        Ok(true)
    }

    /// Asks the model for the summary of the history, with no tools. When the request
    /// is too long, drops the oldest messages and tries again, at most
    /// [`MAX_HEAD_DROPS`] times. The inner error says why there is no summary.
    async fn summarize(&mut self) -> Result<Result<String, String>, Terminal> {
        let system = [SystemPart { text: context::SUMMARY_SYSTEM.to_string(), cache: false }];
        let mut history = self.messages.clone();
        let mut drops = 0;
        loop {
            let messages = context::summary_messages(&history);
            let request = ModelRequest {
                agent_id: &self.config.agent_id,
                model: &self.model,
                system: &system,
                messages: &messages,
                tools: &[],
                max_tokens: self.config.context.summary_max_tokens,
                give_up_on_overload_after: None,
                timeouts: self.config.timeouts,
                thinking: None,
                server_tools: &[],
            };
            let events = self.events;
            let mut sink = |event: StreamEvent| {
                if let StreamEvent::Retrying { attempt, delay, error } = event {
                    events.emit(Event::retry(attempt, delay, error));
                }
            };
            let result = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Streaming }),
                _ = sleep_until(self.deadline) => return Err(self.timeout()),
                r = self.provider.send(&request, &mut sink) => r,
            };
            match result {
                Ok(response) => {
                    self.account(&response);
                    let text = blocks_text(&response.content);
                    if text.trim().is_empty() {
                        return Ok(Err("the summary request came back without text".to_string()));
                    }
                    return Ok(Ok(text));
                }
                Err(ModelError::PromptTooLong { message }) if drops < MAX_HEAD_DROPS => {
                    match context::drop_head(&history) {
                        Some(shorter) => {
                            drops += 1;
                            tracing::info!(agent = %self.config.agent_id, drops, "summary request too long; dropping the oldest messages: {message}");
                            history = shorter;
                        }
                        None => {
                            return Ok(Err(format!(
                                "the summary request is too long and nothing is left to drop: {message}"
                            )));
                        }
                    }
                }
                Err(e) => return Ok(Err(format!("the summary request failed: {e}"))),
            }
        }
    }

    /// Re-reads the most recently read files through the tool runner, within the
    /// budget. Files that fail or do not fit are left out.
    async fn restore(&self, specs: &[ToolSpec]) -> Result<Vec<Restored>, Terminal> {
        let config = &self.config.context;
        if config.restore_files == 0 || !specs.iter().any(|s| s.name == "Read") {
            return Ok(Vec::new());
        }
        let mut budget = config.restore_budget_tokens;
        let mut out = Vec::new();
        for (k, path) in context::recent_reads(&self.messages, config.restore_files).into_iter().enumerate() {
            let call = ToolCall {
                id: format!("toolu_restore_{}_{k}", self.compactions + 1),
                name: "Read".to_string(),
                input: serde_json::json!({ "file_path": path }),
            };
            let output = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Err(Terminal::Aborted { during: Phase::Tools }),
                _ = sleep_until(self.deadline) => return Err(self.timeout()),
                o = run_one(self.tools, &call, self.cancel.child_token(), self.events) => o,
            };
            let tokens = context::estimate_text(&output.content);
            if output.is_error || tokens > config.restore_file_tokens || tokens > budget {
                continue;
            }
            budget -= tokens;
            out.push(Restored { id: call.id, path, content: output.content });
        }
        // Oldest first, so the file read last sits next to the note to carry on.
        out.reverse();
        Ok(out)
    }

    /// Decides what a failed model call means: `None` continues the loop.
    fn model_failed(&mut self, error: ModelError) -> Option<Terminal> {
        match error {
            ModelError::Overloaded { .. } if !self.fell_back && self.config.fallback_model.is_some() => {
                let to = self.config.fallback_model.clone().unwrap_or_default();
                tracing::warn!(agent = %self.config.agent_id, from = %self.model, %to, "model overloaded; switching to the fallback model");
                self.events.emit(Event::Fallback {
                    from: self.model.clone(),
                    to: to.clone(),
                    error: error.to_string(),
                });
                self.model = to;
                self.fell_back = true;
                self.turns -= 1;
                None
            }
            ModelError::PromptTooLong { message } => Some(Terminal::PromptTooLong { message }),
            other => Some(Terminal::ModelError { kind: other.kind(), message: other.to_string() }),
        }
    }

    /// Keeps the complete blocks of an interrupted answer, answers its tool calls with
    /// synthetic results, and names the terminal.
    fn interrupted(
        &mut self,
        phase: Phase,
        why: Interrupt,
        blocks: Vec<ContentBlock>,
        done: &HashMap<String, ToolOutput>,
    ) -> Terminal {
        if !blocks.is_empty() {
            let calls = tool_calls(&blocks);
            self.push_assistant(blocks);
            if !calls.is_empty() {
                let text = match why {
                    Interrupt::Cancelled => "not run: the agent was aborted while the model was still answering",
                    Interrupt::TimedOut => {
                        "not run: the agent's time limit ran out while the model was still answering"
                    }
                };
                let results = calls
                    .iter()
                    .map(|c| match done.get(&c.id) {
                        Some(out) => ContentBlock::tool_result_with(
                            &c.id,
                            out.content.clone(),
                            out.is_error,
                            out.attachments.clone(),
                        ),
                        None => ContentBlock::tool_result(&c.id, text, true),
                    })
                    .collect();
                self.messages.push(Message { role: Role::User, content: results });
            }
        }
        match why {
            Interrupt::Cancelled => Terminal::Aborted { during: phase },
            Interrupt::TimedOut => self.timeout(),
        }
    }

    fn push_assistant(&mut self, content: Vec<ContentBlock>) {
        let message = Message { role: Role::Assistant, content };
        self.events.emit(Event::AssistantMessage { turn: self.turns, message: message.clone() });
        self.messages.push(message);
    }

    /// Runs the calls of one answer and appends their results in the model's order.
    /// Calls that started early, while the answer streamed, are awaited first; the rest
    /// run in batches. On interrupt, the calls that did not finish get synthetic results.
    /// `refused` is the call past the per-turn cap, with its error, answered last.
    async fn run_tools(
        &mut self,
        calls: &[ToolCall],
        early: EarlyRun<'_>,
        refused: Option<(ToolCall, String)>,
    ) -> Result<(), Interrupt> {
        let mut slots: Vec<Option<ToolOutput>> = vec![None; calls.len()];
        let tool_cancel = self.cancel.child_token();
        let (tools, events) = (self.tools, self.events);
        let interrupted = {
            let k = early.count;
            let work = async {
                early.finish(tools, calls, &mut slots).await;
                run_batches(tools, &calls[k..], &mut slots[k..], &tool_cancel, events).await;
            };
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Some(Interrupt::Cancelled),
                _ = sleep_until(self.deadline) => Some(Interrupt::TimedOut),
                _ = work => None,
            }
        };
        tool_cancel.cancel();
        let mut outputs = Vec::with_capacity(calls.len());
        for (call, slot) in calls.iter().zip(slots) {
            let output = match slot {
                Some(output) => output,
                None => {
                    let text = match interrupted {
                        Some(Interrupt::TimedOut) => "the agent's time limit ran out before this tool call finished",
                        _ => "the agent was aborted before this tool call finished",
                    };
                    self.events.emit(Event::ToolUseFinished {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        is_error: true,
                        duration_ms: 0,
                        output: text.to_string(),
                        denied: false,
                    });
                    ToolOutput::error(text)
                }
            };
            outputs.push(output);
        }
        // PostToolBatch, once the whole answer's calls have their results.
        let mut batch_note = None;
        if interrupted.is_none()
            && let Some(hooks) = self.tools.hooks()
        {
            let batch: Vec<(&ToolCall, &ToolOutput)> = calls.iter().zip(&outputs).collect();
            batch_note = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => None,
                _ = sleep_until(self.deadline) => None,
                note = hooks.post_tool_batch(&batch) => note,
            };
        }
        let mut results = Vec::with_capacity(calls.len() + 2);
        for (call, output) in calls.iter().zip(outputs) {
            results.push(ContentBlock::tool_result_with(&call.id, output.content, output.is_error, output.attachments));
        }
        if let Some((call, text)) = refused {
            self.events.emit(Event::ToolUseFinished {
                id: call.id.clone(),
                name: call.name.clone(),
                is_error: true,
                duration_ms: 0,
                output: text.clone(),
                denied: false,
            });
            results.push(ContentBlock::tool_result_with(&call.id, text, true, Vec::new()));
        }
        if let Some(note) = batch_note {
            results.push(ContentBlock::text(note));
        }
        self.messages.push(Message { role: Role::User, content: results });
        self.absorb_nested();
        match interrupted {
            Some(why) => Err(why),
            None => Ok(()),
        }
    }
}

/// Which calls of a streaming answer start before the answer is complete: an unbroken
/// run of read-only, concurrency-safe calls from the first call on, at most
/// [`MAX_PARALLEL_TOOLS`]. The first call that cannot start early closes the gate, so
/// no call ever runs before a call the model made earlier.
struct Early {
    parent: CancellationToken,
    token: CancellationToken,
    open: bool,
    started: Vec<String>,
}

impl Early {
    fn new(parent: CancellationToken) -> Self {
        Self { token: parent.child_token(), parent, open: true, started: Vec::new() }
    }

    /// A new attempt of the same request: what the old attempt started is stale.
    fn restart(&mut self) {
        self.token.cancel();
        self.token = self.parent.child_token();
        self.open = true;
        self.started.clear();
    }

    fn admit(&mut self, tools: &dyn ToolRunner, call: &ToolCall) -> bool {
        if self.open && self.started.len() < MAX_PARALLEL_TOOLS && tools.can_start_early(call) {
            self.started.push(call.id.clone());
            return true;
        }
        self.open = false;
        false
    }
}

type Running<'a> = FuturesUnordered<Pin<Box<dyn Future<Output = (String, ToolOutput)> + Send + 'a>>>;

/// The early calls of one answer, as the tools phase takes them over.
struct EarlyRun<'a> {
    running: Running<'a>,
    done: HashMap<String, ToolOutput>,
    token: CancellationToken,
    /// How many leading calls of the answer started early.
    count: usize,
}

impl EarlyRun<'_> {
    /// Waits for the early calls and puts their results in the first slots. A failing
    /// `Bash` among them cancels the rest, as in any parallel run.
    async fn finish(mut self, tools: &dyn ToolRunner, calls: &[ToolCall], slots: &mut [Option<ToolOutput>]) {
        let early = &calls[..self.count];
        let mut failed: Option<String> = None;
        let mut place = |id: String, output: ToolOutput, failed: &mut Option<String>| {
            if let Some(k) = early.iter().position(|c| c.id == id) {
                slots[k] = Some(sibling_outcome(tools, &early[k], output, failed, &self.token));
            }
        };
        for (id, output) in std::mem::take(&mut self.done) {
            place(id, output, &mut failed);
        }
        while let Some((id, output)) = self.running.next().await {
            place(id, output, &mut failed);
        }
        self.token.cancel();
    }
}

/// Applies the sibling rule to one finished call of a parallel run: the first failing
/// call that cancels its siblings fires `batch`; later failures are reported as
/// cancelled because of it.
fn sibling_outcome(
    tools: &dyn ToolRunner,
    call: &ToolCall,
    output: ToolOutput,
    failed: &mut Option<String>,
    batch: &CancellationToken,
) -> ToolOutput {
    if let Some(first) = failed.as_ref()
        && output.is_error
    {
        return ToolOutput::error(format!(
            "cancelled: the parallel call {first} failed first; run this call again if it is still needed"
        ));
    }
    if output.is_error && failed.is_none() && tools.cancels_siblings_on_error(call) {
        *failed = Some(format!("{} ({})", call.name, call.id));
        batch.cancel();
    }
    output
}

/// Splits `calls` into runs (consecutive concurrency-safe calls together, every other
/// call alone) and runs them in order, filling `slots` as calls finish. A failing call
/// that cancels its siblings (`Bash`) stops the rest of its run.
async fn run_batches(
    tools: &dyn ToolRunner,
    calls: &[ToolCall],
    slots: &mut [Option<ToolOutput>],
    cancel: &CancellationToken,
    events: &dyn EventSink,
) {
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        if tools.is_concurrency_safe(&calls[i]) {
            while end < calls.len() && end - i < MAX_PARALLEL_TOOLS && tools.is_concurrency_safe(&calls[end]) {
                end += 1;
            }
        }
        let batch = cancel.child_token();
        let mut running: FuturesUnordered<_> = (i..end)
            .map(|k| {
                let batch = batch.clone();
                async move { (k, run_one(tools, &calls[k], batch, events).await) }
            })
            .collect();
        let mut failed = None;
        while let Some((k, output)) = running.next().await {
            slots[k] = Some(sibling_outcome(tools, &calls[k], output, &mut failed, &batch));
        }
        i = end;
    }
}

/// [`run_one`] over an owned call, tagged with its id, for calls started early.
fn run_owned<'a>(
    tools: &'a dyn ToolRunner,
    call: ToolCall,
    cancel: CancellationToken,
    events: &'a dyn EventSink,
) -> Pin<Box<dyn Future<Output = (String, ToolOutput)> + Send + 'a>> {
    Box::pin(async move {
        let output = run_one(tools, &call, cancel, events).await;
        (call.id, output)
    })
}

async fn run_one(
    tools: &dyn ToolRunner,
    call: &ToolCall,
    cancel: CancellationToken,
    events: &dyn EventSink,
) -> ToolOutput {
    events.emit(Event::ToolUseStarted { id: call.id.clone(), name: call.name.clone(), input: call.input.clone() });
    let started = Instant::now();
    let output = tools.run(call, cancel).await;
    events.emit(Event::ToolUseFinished {
        id: call.id.clone(),
        name: call.name.clone(),
        is_error: output.is_error,
        duration_ms: started.elapsed().as_millis() as u64,
        output: output.content.clone(),
        denied: output.denied,
    });
    output
}

/// The text blocks of an answer, joined.
fn blocks_text(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// An answer's content and calls cut to the first `cap` calls (at least one) when it has
/// more: the next call stays in the content, to be answered with the returned error,
/// and the calls after it are left out.
fn cap_calls(
    content: Vec<ContentBlock>,
    mut calls: Vec<ToolCall>,
    cap: usize,
) -> (Vec<ContentBlock>, Vec<ToolCall>, Option<(ToolCall, String)>) {
    let cap = cap.max(1);
    if calls.len() <= cap {
        return (content, calls, None);
    }
    let total = calls.len();
    tracing::warn!(calls = total, cap, "an answer asked for more tool calls than run per answer");
    let mut seen = 0;
    let content = content
        .into_iter()
        .filter(|b| {
            if matches!(b, ContentBlock::ToolUse { .. }) {
                seen += 1;
                return seen <= cap + 1;
            }
            true
        })
        .collect();
    calls.truncate(cap + 1);
    let refused = calls.pop().map(|call| {
        let text = format!(
            "not run: this answer asked for {total} tool calls and at most {cap} run per answer; this call and the \
             {} after it were not run (and are left out of the conversation). Ask again for the ones still needed, \
             at most {cap} at a time",
            total - cap - 1
        );
        (call, text)
    });
    (content, calls, refused)
}

fn tool_calls(content: &[ContentBlock]) -> Vec<ToolCall> {
    content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::ToolUse { id, name, input } => {
                Some(ToolCall { id: id.clone(), name: name.clone(), input: input.clone() })
            }
            _ => None,
        })
        .collect()
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
