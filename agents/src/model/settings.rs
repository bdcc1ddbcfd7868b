//! What a workflow may set about the model calls of one agent: the waits (first byte,
//! idle stream, retry budget), the output cap, the context window and extended thinking.
//! Unset values come from the model's known limits (see [`super::limits`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The default wait for the first byte of an answer.
pub const DEFAULT_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default longest silence between two stream events.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The default time one request may spend in failed attempts and waits between them.
pub const DEFAULT_RETRY_BUDGET: Duration = Duration::from_secs(300);
/// The smallest thinking budget the Anthropic API accepts.
pub const MIN_THINKING_BUDGET: u32 = 1024;

/// The waits of one request. Every wait for the model is bounded by one of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// From sending the request to the first event of the answer (headers included).
    pub first_byte: Duration,
    /// The longest silence between two events of a stream.
    pub idle: Duration,
    /// Time spent in failed attempts and the waits between them; once spent, the
    /// last error is final. It is counted as well as the policy's attempts.
    pub retry_budget: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self { first_byte: DEFAULT_FIRST_BYTE_TIMEOUT, idle: DEFAULT_IDLE_TIMEOUT, retry_budget: DEFAULT_RETRY_BUDGET }
    }
}

/// Extended thinking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    /// Tokens the model may think before it answers (at least 1024; kept under the
    /// output cap).
    pub budget_tokens: u32,
}

/// The `model_settings` of a workflow or agent. Every field is optional: `None` keeps
/// the default (for the waits) or the model's known limit (for the sizes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSettings {
    pub first_byte_timeout: Option<Duration>,
    pub idle_timeout: Option<Duration>,
    pub retry_budget: Option<Duration>,
    pub max_output_tokens: Option<u32>,
    pub context_window: Option<u64>,
    pub thinking: Option<Thinking>,
}

impl ModelSettings {
    /// The waits, with defaults for what is unset.
    pub fn timeouts(&self) -> Timeouts {
        let d = Timeouts::default();
        Timeouts {
            first_byte: self.first_byte_timeout.unwrap_or(d.first_byte),
            idle: self.idle_timeout.unwrap_or(d.idle),
            retry_budget: self.retry_budget.unwrap_or(d.retry_budget),
        }
    }

    /// These settings with `over`'s set fields on top (an agent's over its workflow's).
    pub fn merged(&self, over: &ModelSettings) -> ModelSettings {
        ModelSettings {
            first_byte_timeout: over.first_byte_timeout.or(self.first_byte_timeout),
            idle_timeout: over.idle_timeout.or(self.idle_timeout),
            retry_budget: over.retry_budget.or(self.retry_budget),
            max_output_tokens: over.max_output_tokens.or(self.max_output_tokens),
            context_window: over.context_window.or(self.context_window),
            thinking: over.thinking.or(self.thinking),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_waits_take_the_defaults_and_agents_override_workflows() {
        let workflow = ModelSettings { idle_timeout: Some(Duration::from_secs(5)), ..Default::default() };
        let agent = ModelSettings {
            retry_budget: Some(Duration::from_secs(9)),
            idle_timeout: Some(Duration::from_secs(7)),
            ..Default::default()
        };
        let t = workflow.merged(&agent).timeouts();
        assert_eq!(t.first_byte, DEFAULT_FIRST_BYTE_TIMEOUT);
        assert_eq!(t.idle, Duration::from_secs(7));
        assert_eq!(t.retry_budget, Duration::from_secs(9));
        assert_eq!(ModelSettings::default().timeouts(), Timeouts::default());
    }
}
