//! `RunEvent`: the one shape of every line of `--json` output (`orch run`, `orch exec`,
//! `orch merge`) and of transcripts. A line says which agent it is about (absent for
//! the run as a whole) and what happened: an event of the query loop, the prompt an
//! agent was given, an agent finished, or the run finished with its report.
//!
//! Its JSON Schema ([`schema`]) is the public contract for consumers of the stream; a
//! snapshot test pins it, so a change to it is a visible, reviewed change.

use orch_agents::Event;
use schemars::JsonSchema;
use serde::Serialize;

/// One line of the event stream.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunEvent {
    /// The agent (its id) the event is about; absent for run-level events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// What happened.
    pub event: RunEventKind,
}

/// What a [`RunEvent`] reports. Every kind is an object with a `type` field.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum RunEventKind {
    /// An event of an agent's query loop (`turn_started`, `tool_use_finished`, ...).
    Event(Event),
    /// A step of the run around the loops.
    Run(RunStep),
}

/// The steps of a run that are not events of a query loop.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunStep {
    /// The prompt an agent was given (its first user message).
    Prompt { text: String },
    /// An agent ended, its work committed.
    AgentFinished {
        /// `succeeded`, `partial`, `failed`, `cancelled` or `skipped`.
        status: String,
        /// Why it did not succeed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        turns: u32,
        cost_usd: f64,
        duration_ms: u64,
    },
    /// A decision of the egress proxy on a connection of the agent's sandbox (network
    /// allowlists only): allowed with its bytes once it closed, or refused and why.
    Network {
        host: String,
        port: u16,
        allowed: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        bytes_up: u64,
        bytes_down: u64,
        /// Requests the proxy added a credential to (its value is never recorded).
        #[serde(default, skip_serializing_if = "is_zero")]
        credentials: u64,
    },
    /// The run ended; `report` is the run's `report.json` (versioned separately, see
    /// its `version` field).
    RunFinished {
        #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
        report: serde_json::Value,
    },
}

impl RunEvent {
    /// `event` of the agent `agent`.
    pub fn of(agent: &str, event: Event) -> RunEvent {
        RunEvent { agent: Some(agent.to_string()), event: RunEventKind::Event(event) }
    }

    /// A run step of the agent `agent`.
    pub fn step(agent: &str, step: RunStep) -> RunEvent {
        RunEvent { agent: Some(agent.to_string()), event: RunEventKind::Run(step) }
    }

    /// The run finished with `report` (anything that serializes as the report).
    pub fn run_finished(report: &impl Serialize) -> RunEvent {
        let report = serde_json::to_value(report).unwrap_or(serde_json::Value::Null);
        RunEvent { agent: None, event: RunEventKind::Run(RunStep::RunFinished { report }) }
    }

    /// The line as a JSON value.
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or(serde_json::Value::Null)
    }
}

/// The JSON Schema of a [`RunEvent`] line.
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RunEvent)).unwrap_or(serde_json::Value::Null)
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_schema_is_the_public_contract() {
        insta::assert_json_snapshot!("run_event_schema", schema());
    }

    #[test]
    fn lines_keep_their_shapes_and_validate_against_the_schema() {
        let validator = jsonschema::validator_for(&schema()).unwrap();
        let lines = [
            RunEvent::of("a", Event::TurnStarted { turn: 1, model: "m".into() }),
            RunEvent::step("a", RunStep::Prompt { text: "Go.".into() }),
            RunEvent::step(
                "a",
                RunStep::AgentFinished {
                    status: "partial".into(),
                    reason: Some("turn limit".into()),
                    turns: 3,
                    cost_usd: 0.5,
                    duration_ms: 10,
                },
            ),
            RunEvent::run_finished(&serde_json::json!({"version": 1, "status": "succeeded"})),
        ];
        let values: Vec<serde_json::Value> = lines.iter().map(RunEvent::to_value).collect();
        for value in &values {
            assert!(validator.is_valid(value), "{value}");
        }
        assert_eq!(
            values[0],
            serde_json::json!({"agent": "a", "event": {"type": "turn_started", "turn": 1, "model": "m"}})
        );
        assert_eq!(values[1], serde_json::json!({"agent": "a", "event": {"type": "prompt", "text": "Go."}}));
        assert_eq!(values[3]["event"]["type"], "run_finished");
        assert!(values[3].get("agent").is_none());
        // A line of another shape does not pass.
        assert!(!validator.is_valid(&serde_json::json!({"agent": "a", "event": {"type": "teleported"}})));
    }
}
