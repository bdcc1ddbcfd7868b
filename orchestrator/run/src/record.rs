//! `--record DIR` and `--replay DIR`: every model exchange of a run saved per agent, in
//! the scripted provider's own format (`DIR/script.yaml`), so that `--replay DIR` is
//! `--provider scripted --script DIR/script.yaml`: offline, no API key, the same turns.
//!
//! Each recorded turn keeps the answer as it came (text, thinking, tool calls with their
//! ids, stop reason, usage). A turn that answered a plain prompt (not tool results)
//! also records `expect: { contains: <the prompt's first line> }`, so a replay whose
//! prompt changed stops at that agent and turn with a clear error. The file is rewritten
//! (through a rename) after every turn, so a crash loses nothing recorded so far.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orch_agents::message::{ContentBlock, Role};
use orch_agents::model::{ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamSink};
use serde_json::{Value, json};

/// The script file inside a record directory.
pub const SCRIPT: &str = "script.yaml";

/// Longest `expect.contains` recorded, in characters.
const EXPECT_CHARS: usize = 200;

/// The model provider `model` asks for, or with `--replay DIR` the scripted provider on
/// DIR's script (then `model` says so too), wrapped in a [`Recorder`] with `--record`.
pub fn provider(
    model: &mut crate::options::ModelSpec,
    record: Option<&Path>,
    replay: Option<&Path>,
) -> crate::error::Result<Arc<dyn ModelProvider>> {
    if let Some(dir) = replay {
        let script = dir.join(SCRIPT);
        if !script.is_file() {
            return Err(crate::exit::UsageError(format!(
                "--replay: {} does not exist; give a directory written by --record",
                script.display()
            ))
            .into());
        }
        model.provider = crate::options::Provider::Scripted;
        model.script = Some(script);
    }
    let provider = crate::provider::build(model)?;
    match record {
        Some(dir) => {
            let recorder = Recorder::new(provider, dir).map_err(|e| crate::error::Error::Failed {
                what: format!("cannot create the record directory {}", dir.display()),
                cause: Box::new(e),
            })?;
            Ok(Arc::new(recorder))
        }
        None => Ok(provider),
    }
}

/// The script file: `version` and `agents`, agents in the order they first spoke in.
#[derive(serde::Serialize)]
struct Doc<'a> {
    version: u32,
    agents: Agents<'a>,
}

/// Agent id -> turns, as a mapping in first-spoke order.
struct Agents<'a> {
    order: &'a [String],
    turns: &'a BTreeMap<String, Vec<Value>>,
}

impl serde::Serialize for Agents<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        let mut map = serializer.serialize_map(Some(self.order.len()))?;
        for id in self.order {
            map.serialize_entry(id, self.turns.get(id).map(Vec::as_slice).unwrap_or_default())?;
        }
        map.end()
    }
}

/// A provider that records what another one answers.
pub struct Recorder {
    inner: Arc<dyn ModelProvider>,
    path: PathBuf,
    turns: Mutex<Recorded>,
}

/// Agent id -> its turns, and the order agents first spoke in.
#[derive(Default)]
struct Recorded {
    order: Vec<String>,
    turns: BTreeMap<String, Vec<Value>>,
}

impl Recorder {
    /// Records into `dir` (created; an existing script there is replaced).
    pub fn new(inner: Arc<dyn ModelProvider>, dir: &Path) -> std::io::Result<Recorder> {
        std::fs::create_dir_all(dir)?;
        Ok(Recorder { inner, path: dir.join(SCRIPT), turns: Mutex::new(Recorded::default()) })
    }

    fn save(&self, agent: &str, turn: Value) -> std::io::Result<()> {
        let text = {
            let mut guard = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            let Recorded { order, turns } = &mut *guard;
            if !turns.contains_key(agent) {
                order.push(agent.to_string());
            }
            turns.entry(agent.to_string()).or_default().push(turn);
            // JSON is YAML 1.2, so the scripted provider reads this back as it is; the
            // agents stay in the order they first spoke in.
            let doc = Doc { version: 1, agents: Agents { order, turns } };
            serde_json::to_string_pretty(&doc).map_err(std::io::Error::other)?
        };
        let tmp = self.path.with_extension("yaml.tmp");
        std::fs::write(&tmp, format!("# Recorded by orch --record; replay with --replay.\n{text}\n"))?;
        std::fs::rename(&tmp, &self.path)
    }
}

#[async_trait]
impl ModelProvider for Recorder {
    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        let response = self.inner.send(request, sink).await?;
        if let Err(e) = self.save(request.agent_id, turn_of(request, &response)) {
            tracing::warn!(path = %self.path.display(), "cannot record a model turn: {e}");
        }
        Ok(response)
    }
}

/// One scripted turn for `response` to `request`.
fn turn_of(request: &ModelRequest<'_>, response: &ModelResponse) -> Value {
    let mut text = String::new();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    for block in &response.content {
        match block {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::Thinking { thinking: t, .. } => thinking.push_str(t),
            ContentBlock::ToolUse { id, name, input } => calls.push(json!({ "id": id, "name": name, "input": input })),
            _ => {}
        }
    }
    let mut turn = serde_json::Map::new();
    if !text.is_empty() {
        turn.insert("text".into(), text.into());
    }
    if !thinking.is_empty() {
        turn.insert("thinking".into(), thinking.into());
    }
    if !calls.is_empty() {
        turn.insert("tool_calls".into(), calls.into());
    }
    turn.insert("stop_reason".into(), stop_name(&response.stop_reason).into());
    turn.insert("usage".into(), serde_json::to_value(response.usage).unwrap_or(Value::Null));
    if let Some(prompt) = plain_prompt(request) {
        let first: String =
            prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or_default().chars().take(EXPECT_CHARS).collect();
        if !first.trim().is_empty() {
            turn.insert("expect".into(), json!({ "contains": first }));
        }
    }
    Value::Object(turn)
}

fn stop_name(stop: &StopReason) -> String {
    serde_json::to_value(stop).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_else(|| "end_turn".into())
}

/// The newest user message's text, when it is a plain prompt (no tool results).
fn plain_prompt(request: &ModelRequest<'_>) -> Option<String> {
    let last = request.messages.iter().rev().find(|m| m.role == Role::User)?;
    let mut text = String::new();
    for block in &last.content {
        match block {
            ContentBlock::Text { text: t } => text.push_str(t),
            ContentBlock::ToolResult { .. } => return None,
            _ => {}
        }
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use orch_agents::message::Message;
    use orch_agents::model::StreamEvent;

    async fn ask(provider: &dyn ModelProvider, agent: &str, prompt: &str) -> ModelResponse {
        let messages = [Message::user(prompt)];
        let request = ModelRequest {
            agent_id: agent,
            model: "m",
            system: &[],
            messages: &messages,
            tools: &[],
            max_tokens: 10,
            give_up_on_overload_after: None,
            timeouts: Default::default(),
            thinking: None,
            server_tools: &[],
        };
        let mut sink = |_e: StreamEvent| {};
        provider.send(&request, &mut sink).await.unwrap()
    }

    #[tokio::test]
    async fn a_recording_replays_through_the_positioned_loader() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source.yaml");
        let tricky = "a: \"quoted\" # not a comment\n\\u{1b} `tick` &anchor *alias";
        let text = serde_json::to_string(tricky).unwrap();
        std::fs::write(
            &source,
            format!("version: 1\nagents:\n  zeta:\n    - text: {text}\n  alpha:\n    - text: two\n"),
        )
        .unwrap();
        let recorder = Recorder::new(Arc::new(crate::provider::script(&source).unwrap()), dir.path()).unwrap();
        let first = ask(&recorder, "zeta", "go on").await;
        let second = ask(&recorder, "alpha", "next").await;

        let recorded = std::fs::read_to_string(dir.path().join(SCRIPT)).unwrap();
        // Agents stay in the order they first spoke in.
        assert!(recorded.find("zeta").unwrap() < recorded.find("alpha").unwrap(), "{recorded}");
        let replay = crate::provider::script(&dir.path().join(SCRIPT)).unwrap();
        assert_eq!(ask(&replay, "zeta", "go on").await.content, first.content);
        assert_eq!(ask(&replay, "alpha", "next").await.content, second.content);
        assert_eq!(first.content, vec![ContentBlock::text(tricky)]);
    }
}
