//! Structured output: finding the JSON value in an agent's final answer and checking
//! it against the agent's `output.schema`; the texts that ask for it and, when it is
//! wrong, ask again ([`ask`], used by workflow agents and `orch exec --output-schema`).

use std::time::Instant;

use orch_agents::tool::ToolRunner;
use orch_agents::{EventSink, Message, ModelProvider, QueryConfig, Terminal, Usage, query};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// How many times an agent is asked again after an invalid answer.
pub const MAX_RETRIES: u32 = 2;

/// A compiled `output.schema`.
pub struct OutputSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl OutputSchema {
    /// Compiles `schema`; an invalid schema is the workflow's mistake.
    pub fn new(schema: &Value) -> Result<Self, String> {
        let validator = jsonschema::validator_for(schema)
            .map_err(|e| format!("`output.schema` is not a valid JSON Schema: {e}"))?;
        Ok(Self { schema: schema.clone(), validator })
    }

    /// What the agent's prompt gets appended, so it knows the shape to answer in.
    pub fn instructions(&self) -> String {
        format!(
            "\n\nWhen you have finished, end with your final answer as one JSON value that matches \
             this JSON Schema, on its own or in a ```json block, and nothing after it:\n\n```json\n{}\n```",
            serde_json::to_string_pretty(&self.schema).unwrap_or_default()
        )
    }

    /// The output in `answer`, or why there is none that matches.
    pub fn check(&self, answer: &str) -> Result<Value, String> {
        let value = extract(answer).ok_or_else(|| "the final answer contains no JSON value".to_string())?;
        let errors: Vec<String> = self
            .validator
            .iter_errors(&value)
            .take(10)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { format!("at the top level: {e}") } else { format!("at `{at}`: {e}") }
            })
            .collect();
        if errors.is_empty() { Ok(value) } else { Err(errors.join("; ")) }
    }

    /// The message that asks again after `error`.
    pub fn retry_message(&self, error: &str) -> String {
        format!(
            "Your final answer does not match the required output schema: {error}. Answer again with only \
             the corrected JSON value, matching this schema:\n\n```json\n{}\n```",
            serde_json::to_string_pretty(&self.schema).unwrap_or_default()
        )
    }
}

/// What the loop gave, over the first prompt and every retry.
#[derive(Debug)]
pub struct Answer {
    pub terminal: Terminal,
    pub turns: u32,
    pub usage: Usage,
    pub cost_usd: f64,
    /// The model that answered last.
    pub model: String,
    /// The last final answer.
    pub text: String,
    /// The structured output, when there is a schema and an answer matched it.
    pub output: Option<Value>,
    /// Why the last answer did not match the schema.
    pub output_error: Option<String>,
}

impl Answer {
    /// Completed, but the answer never matched the schema: the agent failed, with this
    /// reason.
    pub fn schema_failure(&self) -> Option<String> {
        match (&self.terminal, &self.output_error, &self.output) {
            (Terminal::Completed, Some(error), None) => {
                Some(format!("its final answer does not match output.schema after {MAX_RETRIES} retries: {error}"))
            }
            _ => None,
        }
    }
}

/// Runs the loop on `prompt` (which already carries [`OutputSchema::instructions`]
/// when there is a schema) and, while its
/// final answer does not match `schema`, asks again (at most [`MAX_RETRIES`] times)
/// within what is left of the limits.
///
/// The session ends with it: its SessionEnd hooks run once the last loop is over
/// (unless it was cancelled, which stops its hooks too).
pub async fn ask(
    provider: &dyn ModelProvider,
    tools: &dyn ToolRunner,
    config: QueryConfig,
    prompt: String,
    schema: Option<&OutputSchema>,
    events: &dyn EventSink,
    cancel: &CancellationToken,
) -> Answer {
    let answer = ask_again(provider, tools, config, prompt, schema, events, cancel).await;
    if let Some(hooks) = tools.hooks()
        && !cancel.is_cancelled()
    {
        // Claude Code's reason when a `-p` session ends by itself.
        hooks.session_end("other").await;
    }
    answer
}

async fn ask_again(
    provider: &dyn ModelProvider,
    tools: &dyn ToolRunner,
    mut config: QueryConfig,
    prompt: String,
    schema: Option<&OutputSchema>,
    events: &dyn EventSink,
    cancel: &CancellationToken,
) -> Answer {
    let mut messages = vec![Message::user(prompt)];
    let started = Instant::now();
    let mut retries = 0;
    let mut answer = Answer {
        terminal: Terminal::Completed,
        turns: 0,
        usage: Usage::default(),
        cost_usd: 0.0,
        model: config.model.clone(),
        text: String::new(),
        output: None,
        output_error: None,
    };
    loop {
        let outcome = query(provider, tools, &config, messages, events, cancel).await;
        answer.turns += outcome.turns;
        answer.usage += outcome.usage;
        answer.cost_usd += outcome.cost_usd;
        answer.model = outcome.model.clone();
        answer.text = outcome.final_text.clone();
        answer.terminal = outcome.terminal.clone();
        let (Some(schema), Terminal::Completed) = (schema, &outcome.terminal) else { return answer };
        match schema.check(&outcome.final_text) {
            Ok(value) => {
                answer.output = Some(value);
                answer.output_error = None;
                return answer;
            }
            Err(error) if retries == MAX_RETRIES => {
                answer.output_error = Some(error);
                return answer;
            }
            Err(error) => {
                retries += 1;
                tracing::info!(agent = %config.agent_id, "its answer does not match output.schema; asking again: {error}");
                answer.output_error = Some(error.clone());
                messages = outcome.messages;
                messages.push(Message::user(schema.retry_message(&error)));
                let limits = &mut config.limits;
                limits.max_turns = limits.max_turns.map(|t| t.saturating_sub(outcome.turns));
                limits.max_tokens = limits.max_tokens.map(|t| t.saturating_sub(outcome.usage.total()));
                limits.max_cost_usd = limits.max_cost_usd.map(|c| (c - outcome.cost_usd).max(0.0));
                limits.timeout = limits.timeout.map(|t| t.saturating_sub(started.elapsed()));
            }
        }
    }
}

/// The JSON value of an answer: the whole text; else the last fenced block that
/// parses; else the span from the first `{` or `[` to the last `}` or `]`.
pub fn extract(answer: &str) -> Option<Value> {
    let text = answer.trim();
    if let Ok(v) = serde_json::from_str(text) {
        return Some(v);
    }
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("```") {
        let after = &rest[start + 3..];
        // Skip the info string (`json`) up to the end of the line.
        let body_start = after.find('\n').map(|i| i + 1).unwrap_or(after.len());
        let body = &after[body_start..];
        let Some(end) = body.find("```") else { break };
        blocks.push(&body[..end]);
        rest = &body[end + 3..];
    }
    if let Some(v) = blocks.iter().rev().find_map(|b| serde_json::from_str(b.trim()).ok()) {
        return Some(v);
    }
    let start = text.find(['{', '['])?;
    let end = text.rfind(['}', ']'])?;
    (end > start).then(|| serde_json::from_str(&text[start..=end]).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn finds_the_json_in_an_answer() {
        assert_eq!(extract(r#" {"a": 1} "#), Some(json!({"a": 1})));
        assert_eq!(extract("Done.\n```json\n{\"a\": 2}\n```\n"), Some(json!({"a": 2})));
        assert_eq!(extract("```\n[1]\n```\nthen\n```json\n[2]\n```"), Some(json!([2])));
        assert_eq!(extract("The result is {\"a\": 3}."), Some(json!({"a": 3})));
        assert_eq!(extract("no json here"), None);
    }

    #[test]
    fn checks_against_the_schema() {
        let schema = OutputSchema::new(&json!({
            "type": "object", "required": ["crates"],
            "properties": { "crates": { "type": "array", "items": { "type": "string" } } }
        }))
        .unwrap();
        assert_eq!(schema.check(r#"{"crates": ["a"]}"#), Ok(json!({"crates": ["a"]})));
        let err = schema.check(r#"{"crates": [1]}"#).unwrap_err();
        assert!(err.contains("/crates/0"), "{err}");
        let err = schema.check(r#"{}"#).unwrap_err();
        assert!(err.contains("crates"), "{err}");
        assert!(schema.check("nothing").unwrap_err().contains("no JSON"));
        assert!(OutputSchema::new(&json!({"type": 5})).is_err());
    }
}
