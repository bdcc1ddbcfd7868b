//! The scripted provider: deterministic model turns read from a YAML file, selected by
//! agent id. Examples and offline runs use it; it never touches the network.
//!
//! # File format
//!
//! ```yaml
//! version: 1
//! agents:
//!   survey:                  # an agent id; `*` wildcards match several agents
//!     - text: Let me look at the tree.
//!       tool_calls:
//!         - name: Glob
//!           input: { pattern: "src/**/*.rs" }
//!     - text: Three crates have warnings.
//!       expect: { contains: "src/lib.rs" }   # optional: the newest user message must contain this
//!       usage: { input_tokens: 1200, output_tokens: 40 }   # optional; estimated otherwise
//!       stop_reason: end_turn                # optional; inferred from tool_calls
//!   "*":                     # every agent without a list of its own
//!     - text: Nothing to do.
//! ```
//!
//! This crate does not read YAML: the caller parses the file (in `orch-run`, with the
//! positioned loader of `orch-workflows`) into a [`Script`] and hands it to
//! [`ScriptedProvider::new`].
//!
//! Each agent id keeps its own cursor: the n-th model call of that agent gets the n-th
//! turn of the first entry that matches it (an exact id before any wildcard). A script
//! that has no entry for an agent, runs out of turns, or whose `expect` does not hold
//! fails the call with a clear error; it never hangs.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::Value;

use super::{ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamEvent, StreamSink};
use crate::message::{ContentBlock, Role};
use crate::usage::Usage;

/// A whole script file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    pub version: u32,
    /// Agent ids (or `*` patterns) with their turns, in file order.
    #[serde(deserialize_with = "in_order")]
    pub agents: Vec<(String, Vec<ScriptedTurn>)>,
}

/// A mapping read as its entries in file order (the first matching pattern wins).
fn in_order<'de, D: serde::Deserializer<'de>>(de: D) -> Result<Vec<(String, Vec<ScriptedTurn>)>, D::Error> {
    struct Entries;
    impl<'de> serde::de::Visitor<'de> for Entries {
        type Value = Vec<(String, Vec<ScriptedTurn>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a mapping of agent ids to lists of turns")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(entry) = map.next_entry()? {
                out.push(entry);
            }
            Ok(out)
        }
    }
    de.deserialize_map(Entries)
}

/// One scripted model answer.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedTurn {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub thinking: Option<String>,
    #[serde(default)]
    pub tool_calls: Vec<ScriptedToolCall>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub usage: Option<Usage>,
    #[serde(default)]
    pub expect: Option<Expect>,
}

/// A tool call inside a scripted turn.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    #[serde(default = "empty_object")]
    pub input: Value,
}

/// A check on the request a turn answers.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// Text the newest user message (its text or tool results) must contain.
    pub contains: String,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Serves a [`Script`].
#[derive(Debug)]
pub struct ScriptedProvider {
    source: String,
    entries: Vec<(String, Vec<ScriptedTurn>)>,
    cursors: Mutex<HashMap<String, usize>>,
}

impl ScriptedProvider {
    /// Serves `script`; `source` names it (the file) in errors.
    pub fn new(script: Script, source: &str) -> Result<Self, ModelError> {
        if script.version != 1 {
            return Err(ModelError::Config {
                message: format!("{source}: unsupported script version {}; this orch reads version 1", script.version),
            });
        }
        Ok(Self { source: source.to_string(), entries: script.agents, cursors: Mutex::new(HashMap::new()) })
    }

    /// The turns for `agent`: an exact entry first, then the first matching pattern.
    fn turns_for(&self, agent: &str) -> Option<&[ScriptedTurn]> {
        let exact = self.entries.iter().find(|(k, _)| k == agent);
        let pattern = || self.entries.iter().find(|(k, _)| k.contains('*') && wildcard(k, agent));
        exact.or_else(pattern).map(|(_, t)| t.as_slice())
    }

    fn next_turn(&self, agent: &str) -> Result<(usize, ScriptedTurn), ModelError> {
        let turns = self.turns_for(agent).ok_or_else(|| ModelError::Script {
            message: format!(
                "{} has no turns for agent `{agent}`; add an entry for it (or a `\"*\"` entry)",
                self.source
            ),
        })?;
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        let cursor = cursors.entry(agent.to_string()).or_insert(0);
        let n = *cursor;
        let turn = turns.get(n).cloned().ok_or_else(|| ModelError::Script {
            message: format!(
                "agent `{agent}` asked for model turn {} but {} scripts only {}; add turns or check why the agent did not stop",
                n + 1,
                self.source,
                turns.len()
            ),
        })?;
        *cursor += 1;
        Ok((n, turn))
    }
}

/// `*` matches any run of characters; everything else matches itself.
fn wildcard(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = match parts.split_first() {
        Some(x) => x,
        None => return pattern == text,
    };
    let Some(mut remaining) = text.strip_prefix(first) else { return false };
    for (i, part) in rest.iter().enumerate() {
        let last = i + 1 == rest.len();
        if last {
            return remaining.ends_with(part);
        }
        match remaining.find(part) {
            Some(pos) => remaining = &remaining[pos + part.len()..],
            None => return false,
        }
    }
    remaining.is_empty()
}

/// The text of the newest user message, tool results included.
fn newest_user_text(request: &ModelRequest<'_>) -> String {
    let Some(msg) = request.messages.iter().rev().find(|m| m.role == Role::User) else { return String::new() };
    let mut out = String::new();
    for block in &msg.content {
        match block {
            ContentBlock::Text { text } => out.push_str(text),
            ContentBlock::ToolResult { content, .. } => out.push_str(content),
            _ => {}
        }
        out.push('\n');
    }
    out
}

/// A rough token count (four bytes a token), so scripted runs report plausible usage.
fn estimate_tokens(request: &ModelRequest<'_>) -> u64 {
    let bytes = serde_json::to_string(request.messages).map(|s| s.len()).unwrap_or(0)
        + request.system.iter().map(|p| p.text.len()).sum::<usize>()
        + serde_json::to_string(request.tools).map(|s| s.len()).unwrap_or(0);
    (bytes as u64).div_ceil(4)
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        let agent = request.agent_id;
        let (n, turn) = self.next_turn(agent)?;
        if let Some(expect) = &turn.expect {
            let got = newest_user_text(request);
            if !got.contains(&expect.contains) {
                return Err(ModelError::Script {
                    message: format!(
                        "turn {} of agent `{agent}` in {} expects the newest user message to contain {:?}, but it does not; it reads: {}",
                        n + 1,
                        self.source,
                        expect.contains,
                        super::short(&got)
                    ),
                });
            }
        }
        sink(StreamEvent::AttemptStarted { attempt: 1 });
        let mut content = Vec::new();
        if let Some(thinking) = turn.thinking {
            content.push(ContentBlock::Thinking { thinking, signature: String::new() });
        }
        if let Some(text) = turn.text.filter(|t| !t.is_empty()) {
            sink(StreamEvent::TextDelta(text.clone()));
            content.push(ContentBlock::Text { text });
        }
        for (i, call) in turn.tool_calls.iter().enumerate() {
            let id = call.id.clone().unwrap_or_else(|| format!("toolu_{}_{}_{}", sanitize(agent), n + 1, i + 1));
            content.push(ContentBlock::ToolUse { id, name: call.name.clone(), input: call.input.clone() });
        }
        for (index, block) in content.iter().enumerate() {
            sink(StreamEvent::BlockComplete { index, block: block.clone() });
        }
        let stop_reason = match &turn.stop_reason {
            Some(r) => StopReason::parse(r),
            None if turn.tool_calls.is_empty() => StopReason::EndTurn,
            None => StopReason::ToolUse,
        };
        let usage = turn.usage.unwrap_or_else(|| Usage {
            input_tokens: estimate_tokens(request),
            output_tokens: (serde_json::to_string(&content).map(|s| s.len()).unwrap_or(0) as u64).div_ceil(4),
            ..Usage::default()
        });
        Ok(ModelResponse { content, stop_reason, usage, model: request.model.to_string() })
    }
}

fn sanitize(id: &str) -> String {
    id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::Message;

    const SCRIPT: &str = r#"
version: 1
agents:
  main:
    - text: looking
      tool_calls: [{ name: Echo, input: { text: hi } }]
    - text: done
      expect: { contains: "hi" }
  "fix-*":
    - text: fixed
"#;

    fn scripted(text: &str) -> Result<ScriptedProvider, ModelError> {
        let script = orch_workflows::yaml::load_as("test.yaml", text.as_bytes()).unwrap();
        ScriptedProvider::new(script, "test.yaml")
    }

    fn req<'a>(agent: &'a str, messages: &'a [Message]) -> ModelRequest<'a> {
        ModelRequest {
            agent_id: agent,
            model: "m",
            system: &[],
            messages,
            tools: &[],
            max_tokens: 10,
            give_up_on_overload_after: None,
            timeouts: Default::default(),
            thinking: None,
            server_tools: &[],
        }
    }

    async fn send(p: &ScriptedProvider, agent: &str, messages: &[Message]) -> Result<ModelResponse, ModelError> {
        let mut sink = |_e: StreamEvent| {};
        p.send(&req(agent, messages), &mut sink).await
    }

    #[tokio::test]
    async fn serves_turns_in_order_per_agent() {
        let p = scripted(SCRIPT).unwrap();
        let msgs = [Message::user("go")];
        let r1 = send(&p, "main", &msgs).await.unwrap();
        assert_eq!(r1.stop_reason, StopReason::ToolUse);
        assert!(
            matches!(&r1.content[1], ContentBlock::ToolUse { id, name, .. } if id == "toolu_main_1_1" && name == "Echo")
        );
        let with_result = [
            Message::user("go"),
            Message { role: Role::User, content: vec![ContentBlock::tool_result("x", "hi there", false)] },
        ];
        let r2 = send(&p, "main", &with_result).await.unwrap();
        assert_eq!(r2.content, vec![ContentBlock::text("done")]);
        let err = send(&p, "main", &msgs).await.unwrap_err();
        assert!(err.to_string().contains("asked for model turn 3 but test.yaml scripts only 2"), "{err}");
    }

    #[tokio::test]
    async fn wildcards_and_missing_agents() {
        let p = scripted(SCRIPT).unwrap();
        let msgs = [Message::user("go")];
        assert_eq!(send(&p, "fix-a", &msgs).await.unwrap().content, vec![ContentBlock::text("fixed")]);
        assert_eq!(send(&p, "fix-b", &msgs).await.unwrap().content, vec![ContentBlock::text("fixed")]);
        let err = send(&p, "other", &msgs).await.unwrap_err();
        assert!(err.to_string().contains("no turns for agent `other`"), "{err}");
    }

    #[tokio::test]
    async fn expect_mismatch_is_an_error() {
        let p = scripted(SCRIPT).unwrap();
        let msgs = [Message::user("go")];
        send(&p, "main", &msgs).await.unwrap();
        let err = send(&p, "main", &[Message::user("zzz")]).await.unwrap_err();
        assert!(err.to_string().contains("expects the newest user message to contain"), "{err}");
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let err = orch_workflows::yaml::load_as::<Script>("s.yaml", b"version: 1\nagents:\n  a:\n    - txt: hi\n")
            .unwrap_err();
        assert_eq!((err.location.line, err.location.column), (4, 7), "{err}");
        assert!(err.to_string().contains("txt"), "{err}");
        let err = scripted("version: 2\nagents: {}\n").unwrap_err();
        assert!(err.to_string().contains("unsupported script version 2"), "{err}");
    }

    #[tokio::test]
    async fn entries_keep_file_order() {
        // The first matching pattern wins, so the order of the file must survive loading.
        let p = scripted("version: 1\nagents:\n  \"z-*\": [{ text: first }]\n  \"*\": [{ text: second }]\n").unwrap();
        let msgs = [Message::user("go")];
        assert_eq!(send(&p, "z-1", &msgs).await.unwrap().content, vec![ContentBlock::text("first")]);
    }

    #[test]
    fn wildcard_matching() {
        assert!(wildcard("*", "anything"));
        assert!(wildcard("fix-*", "fix-1"));
        assert!(wildcard("*-review", "sec-review"));
        assert!(wildcard("a*b*c", "axxbyyc"));
        assert!(!wildcard("a*b*c", "axxbyy"));
        assert!(!wildcard("fix-*", "fox-1"));
    }
}
