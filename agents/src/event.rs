//! Events the loop emits and the reasons it ends.
//!
//! Events flow one way, from the loop to reporters (progress, transcripts, JSON
//! output). No reporter can reach back into the loop.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::message::Message;
use crate::model::ModelErrorKind;
use crate::usage::Usage;

/// Why a loop ended. Every loop ends with exactly one of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum Terminal {
    /// The model answered without asking for tools.
    Completed,
    MaxTurns {
        limit: u32,
    },
    BudgetExceeded {
        budget: Budget,
        limit: f64,
        used: f64,
    },
    Timeout {
        after_ms: u64,
    },
    Aborted {
        during: Phase,
    },
    PromptTooLong {
        message: String,
    },
    ModelError {
        kind: ModelErrorKind,
        message: String,
    },
    HookStopped {
        message: String,
    },
    /// The context could not be compacted, several times in a row, so the loop stopped
    /// instead of sending requests that cannot fit.
    CompactionFailed {
        failures: u32,
        message: String,
    },
    /// A text answer was still cut at the output limit after the last continuation.
    MaxOutputTokens {
        continuations: u32,
    },
}

impl Terminal {
    /// Short machine-readable name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::MaxTurns { .. } => "max_turns",
            Self::BudgetExceeded { .. } => "budget_exceeded",
            Self::Timeout { .. } => "timeout",
            Self::Aborted { .. } => "aborted",
            Self::PromptTooLong { .. } => "prompt_too_long",
            Self::ModelError { .. } => "model_error",
            Self::HookStopped { .. } => "hook_stopped",
            Self::CompactionFailed { .. } => "compaction_failed",
            Self::MaxOutputTokens { .. } => "max_output_tokens",
        }
    }

    /// Whether the agent stopped at a limit, keeping partial work.
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            Self::MaxTurns { .. } | Self::BudgetExceeded { .. } | Self::Timeout { .. } | Self::MaxOutputTokens { .. }
        )
    }

    /// How this ending counts: the agent's status and whose fault a failure is. The one
    /// place that maps terminal reasons; a new reason must be added here. (The process
    /// exit code follows from these in `orch_run::exit`.)
    pub fn disposition(&self) -> Disposition {
        let (status, infrastructure) = match self {
            Self::Completed => (Status::Succeeded, false),
            Self::MaxTurns { .. }
            | Self::BudgetExceeded { .. }
            | Self::Timeout { .. }
            | Self::MaxOutputTokens { .. } => (Status::Partial, false),
            Self::Aborted { .. } => (Status::Cancelled, false),
            Self::ModelError { kind, .. } if kind.is_infrastructure() => (Status::Failed, true),
            Self::ModelError { .. }
            | Self::PromptTooLong { .. }
            | Self::HookStopped { .. }
            | Self::CompactionFailed { .. } => (Status::Failed, false),
        };
        Disposition { status, infrastructure }
    }
}

/// What an agent's ending means for its report and for the process: see
/// [`Terminal::disposition`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Disposition {
    pub status: Status,
    /// A failure of the infrastructure (the model API's auth, network or configuration)
    /// rather than of the work.
    pub infrastructure: bool,
}

impl Disposition {
    /// Whether the ending is the infrastructure's fault rather than the work's.
    pub fn infrastructure(self) -> bool {
        self.infrastructure
    }
}

/// An agent's status as its ending decides it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Completed.
    Succeeded,
    /// Stopped at a limit, with partial work.
    Partial,
    /// Failed.
    Failed,
    /// Stopped by cancellation.
    Cancelled,
}

impl std::fmt::Display for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Completed => write!(f, "completed"),
            Self::MaxTurns { limit } => write!(f, "stopped after the turn limit of {limit}"),
            Self::BudgetExceeded { budget, limit, used } => {
                write!(f, "stopped at the {budget} budget: used {used}, limit {limit}")
            }
            Self::Timeout { after_ms } => write!(f, "timed out after {:.1}s", *after_ms as f64 / 1000.0),
            Self::Aborted { during } => write!(f, "aborted during {during}"),
            Self::PromptTooLong { message } => write!(f, "prompt too long: {message}"),
            Self::ModelError { kind, message } => write!(f, "model error ({kind}): {message}"),
            Self::HookStopped { message } => write!(f, "stopped by a hook: {message}"),
            Self::CompactionFailed { failures, message } => {
                write!(f, "stopped after {failures} failed attempts in a row to compact the context: {message}")
            }
            Self::MaxOutputTokens { continuations } => write!(
                f,
                "the answer was still cut at the output token limit after {continuations} continuations; raise model_settings.max_output_tokens"
            ),
        }
    }
}

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Budget {
    Tokens,
    CostUsd,
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tokens => "token",
            Self::CostUsd => "cost (usd)",
        })
    }
}

/// What the loop was doing when it was aborted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Streaming,
    Tools,
    Idle,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Streaming => "model streaming",
            Self::Tools => "tool calls",
            Self::Idle => "idle",
        })
    }
}

/// Something that happened in a loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event {
    TurnStarted {
        turn: u32,
        model: String,
    },
    TextDelta {
        text: String,
    },
    /// The whole assistant message of a turn, once it is complete.
    AssistantMessage {
        turn: u32,
        /// A message in the Anthropic Messages shape (`role`, `content` blocks).
        #[schemars(with = "serde_json::Value")]
        message: Message,
    },
    ToolUseStarted {
        id: String,
        name: String,
        input: serde_json::Value,
    },
    ToolUseFinished {
        id: String,
        name: String,
        is_error: bool,
        duration_ms: u64,
        output: String,
        /// The call did not run: permissions or a PreToolUse hook denied it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        denied: bool,
    },
    Usage {
        turn: u32,
        model: String,
        usage: Usage,
        total: Usage,
        cost_usd: f64,
        total_cost_usd: f64,
    },
    Retry {
        attempt: u32,
        delay_ms: u64,
        error: String,
    },
    Fallback {
        from: String,
        to: String,
        error: String,
    },
    Compaction {
        before_tokens: u64,
        after_tokens: u64,
        reason: CompactionReason,
    },
    Terminal {
        reason: Terminal,
        turns: u32,
    },
    /// An event of a nested sub-agent, wrapped once with the sub-agent's full id
    /// (`<caller>/sub-<n>`; deeper levels append `/sub-<n>` again). Its `Usage` events
    /// are already part of the caller's totals when the sub-agent's report comes back.
    Subagent {
        agent: String,
        /// The id of the `Agent` call that started it (Claude Code's
        /// `parent_tool_use_id`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_use_id: Option<String>,
        event: Box<Event>,
    },
    /// A hook command ran. `outcome` says what came of it (`ok`, `blocked: ...`,
    /// `exit 1: ...`, `timed out after 30s and was killed`, ...); `is_error` when it
    /// failed to run properly (a crash, a timeout, an unexpected exit code), which never
    /// stops the agent by itself.
    Hook {
        event: orch_types::HookEvent,
        command: String,
        outcome: String,
        is_error: bool,
        duration_ms: u64,
    },
    /// An MCP server of the agent wrote to its stderr, or could not be used. `stderr` is
    /// what it wrote since its last such event (for a server that failed: the last
    /// 4 KiB); `error` says why the server is not available, when it is not.
    McpServer {
        server: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "String::is_empty")]
        stderr: String,
    },
}

impl Event {
    /// The event itself, or for a sub-agent's event (however deeply nested) the event
    /// it wraps.
    pub fn innermost(&self) -> &Event {
        let mut inner = self;
        while let Event::Subagent { event, .. } = inner {
            inner = event;
        }
        inner
    }

    pub(crate) fn retry(attempt: u32, delay: Duration, error: String) -> Self {
        Self::Retry { attempt, delay_ms: delay.as_millis() as u64, error }
    }
}

/// Why the context was compacted.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::Display,
    strum::IntoStaticStr,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum CompactionReason {
    /// Old results of refetchable tools were cleared, without a summary.
    Microcompact,
    /// The context passed its threshold and was summarized.
    Autocompact,
    /// The model refused a request as too long, and the context was summarized.
    PromptTooLong,
}

impl CompactionReason {
    /// The reason as events write it: `prompt_too_long`.
    pub fn as_str(&self) -> &'static str {
        self.into()
    }
}

/// Receives the events of a loop. Called from the loop's task: keep it cheap.
pub trait EventSink: Send + Sync {
    fn emit(&self, event: Event);
}

/// Drops every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NullSink;

impl EventSink for NullSink {
    fn emit(&self, _event: Event) {}
}

impl<F: Fn(Event) + Send + Sync> EventSink for F {
    fn emit(&self, event: Event) {
        self(event)
    }
}

impl EventSink for tokio::sync::mpsc::UnboundedSender<Event> {
    fn emit(&self, event: Event) {
        // A closed receiver means nobody listens any more; that is not the loop's problem.
        let _ = self.send(event);
    }
}

impl<T: EventSink + ?Sized> EventSink for Arc<T> {
    fn emit(&self, event: Event) {
        (**self).emit(event)
    }
}

#[cfg(test)]
mod disposition_tests {
    use super::*;

    #[test]
    fn every_terminal_has_a_status_and_a_fault() {
        let model = |kind: ModelErrorKind| Terminal::ModelError { kind, message: String::new() };
        let cases = [
            (Terminal::Completed, Status::Succeeded, false),
            (Terminal::MaxTurns { limit: 1 }, Status::Partial, false),
            (Terminal::Timeout { after_ms: 1 }, Status::Partial, false),
            (Terminal::Aborted { during: Phase::Tools }, Status::Cancelled, false),
            (model(ModelErrorKind::Auth), Status::Failed, true),
            (model(ModelErrorKind::Network), Status::Failed, true),
            (model(ModelErrorKind::Config), Status::Failed, true),
            (model(ModelErrorKind::Overloaded), Status::Failed, false),
            (Terminal::HookStopped { message: String::new() }, Status::Failed, false),
        ];
        for (terminal, status, infrastructure) in cases {
            assert_eq!(terminal.disposition(), Disposition { status, infrastructure }, "{terminal:?}");
        }
    }
}
