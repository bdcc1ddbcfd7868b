//! The typed workflow: what a workflow file may say, field by field.
//!
//! Every struct denies unknown keys. Agents and inputs keep their file order, because
//! synthesis and merges follow it. A [`Workflow`] only comes out of
//! [`load`](crate::load) / [`load_str`](crate::load_str), so it has passed validation:
//! ids are unique and branch-safe, every `needs` target exists, there is no cycle, every
//! tool is known, templates compile and only name things that exist.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::diagnostic::SourceFile;
use crate::extensions::{HookSettings, McpServer};
use crate::yaml::Node;

pub use orch_types::{Allowlist, Backend, Limits, Network, NetworkSetting, PermissionMode};

/// The core tools an agent may be given (besides `mcp__<server>__<tool>` names), from
/// the tool catalog.
pub const KNOWN_TOOLS: [&str; orch_types::tools::ALL_NAMES.len()] = orch_types::tools::ALL_NAMES;

/// The tools of an agent when neither the agent nor `defaults` lists any: read-only.
pub const DEFAULT_TOOLS: [&str; orch_types::tools::DEFAULT_NAMES.len()] = orch_types::tools::DEFAULT_NAMES;

/// The keys of the top-level mapping, in the order the documentation gives them.
pub const WORKFLOW_KEYS: &[&str] = &[
    "version",
    "name",
    "description",
    "model",
    "concurrency",
    "limits",
    "defaults",
    "inputs",
    "setup",
    "agents",
    "synthesis",
    "integrate",
    "fail_fast",
    "subagents",
    "hooks",
    "mcp_servers",
    "publish",
];

/// Whether `name` is a tool an agent may list: a core tool, or `mcp__<server>__<tool>`
/// (`<tool>` may be `*` for every tool of that server).
pub fn is_known_tool(name: &str) -> bool {
    if KNOWN_TOOLS.contains(&name) {
        return true;
    }
    let Some(rest) = name.strip_prefix("mcp__") else { return false };
    let Some((server, tool)) = rest.split_once("__") else { return false };
    let word = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    word(server) && (tool == "*" || word(tool))
}

/// A whole workflow file.
#[derive(Debug, Clone, Serialize)]
pub struct Workflow {
    /// The format version; only `1` exists.
    pub version: u32,
    /// `name:`, or the file name without its extension.
    pub name: String,
    /// The task as a whole; synthesis presents it as the original task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The model of every agent and of synthesis, unless they say otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// How many agents may run at once (the coordinator's default when absent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Limits for the whole run.
    pub limits: Limits,
    /// Settings every agent starts from.
    pub defaults: Defaults,
    /// Declared inputs, in file order.
    pub inputs: Vec<Input>,
    /// Commands run once, before any agent, in the run clone (network allowed).
    pub setup: Vec<String>,
    /// The network of `setup:` when written as `setup: { commands: [...], network: ... }`
    /// (`None`: `full`, as for the list form).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_network: Option<NetworkSetting>,
    /// The agents, in file order.
    pub agents: Vec<Agent>,
    pub synthesis: Synthesis,
    pub integrate: Integrate,
    /// Stop the whole run at the first failed agent.
    pub fail_fast: bool,
    /// Limits of the `Agent` tool (nested sub-agents) for the whole run.
    #[serde(skip_serializing_if = "crate::subagents::Subagents::is_default")]
    pub subagents: crate::subagents::Subagents,
    /// Hook commands of every agent, added to those of the repository's settings.
    #[serde(skip_serializing_if = "HookSettings::is_empty")]
    pub hooks: HookSettings,
    /// MCP servers agents may use (their tools are listed as `mcp__<server>__<tool>`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// GitHub writes made after the run (see [`crate::publish`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub publish: Option<crate::publish::Publish>,
    #[serde(skip)]
    pub(crate) source: Source,
}

impl Workflow {
    /// The file name the workflow was loaded from, as given to `load_str`.
    pub fn file(&self) -> &str {
        &self.source.file.name
    }

    /// The agent with this id.
    pub fn agent(&self, id: &str) -> Option<&Agent> {
        self.agents.iter().find(|a| a.id == id)
    }
}

/// The text and tree a workflow was loaded from, kept for diagnostics at plan time.
#[derive(Clone)]
pub(crate) struct Source {
    pub file: Arc<SourceFile>,
    pub tree: Arc<Node>,
}

impl Source {
    /// Where `path` is in the file: the node of its longest prefix that exists (a key
    /// left out points at its parent), or the file's start.
    pub(crate) fn locate(&self, path: &[crate::yaml::Seg]) -> crate::diagnostic::Location {
        for len in (0..=path.len()).rev() {
            if let Some((node, _)) = self.tree.find(&path[..len]) {
                return self.file.span(node.span);
            }
        }
        self.file.at(1, 0, 1)
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Source").field("file", &self.file.name).finish_non_exhaustive()
    }
}

/// `defaults:` settings every agent starts from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The skills (`.orch/skills`, `.claude/skills`) agents are offered; `None`: all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub permissions: Permissions,
    /// Whether agents get the project's instruction files (`AGENTS.md`, `CLAUDE.md`) in
    /// their system prompt; default true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<bool>,
    /// The model calls of every agent (waits, output cap, window, thinking).
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub model_settings: ModelSettings,
    /// Outcomes every agent must reach (`expect: { changes: true }`).
    #[serde(default, skip_serializing_if = "Expect::is_empty")]
    pub expect: Expect,
}

/// `model_settings:` (in `defaults:` or an agent): how an agent's model calls are made.
/// Unset fields keep the defaults (waits: 60 s, 60 s, 5 min) or the model's limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Longest wait for the first byte of an answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_byte_timeout: Option<crate::Duration>,
    /// Longest silence between two events of a streamed answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<crate::Duration>,
    /// Time one request may spend in failed attempts and the waits between them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_budget: Option<crate::Duration>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// Extended thinking: `{ budget_tokens: N }` (at least 1024).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
}

/// `thinking:` of `model_settings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    pub budget_tokens: u32,
}

impl ModelSettings {
    /// `self`, with every unset field taken from `fallback`.
    pub fn or(self, fallback: ModelSettings) -> ModelSettings {
        ModelSettings {
            first_byte_timeout: self.first_byte_timeout.or(fallback.first_byte_timeout),
            idle_timeout: self.idle_timeout.or(fallback.idle_timeout),
            retry_budget: self.retry_budget.or(fallback.retry_budget),
            max_output_tokens: self.max_output_tokens.or(fallback.max_output_tokens),
            context_window: self.context_window.or(fallback.context_window),
            thinking: self.thinking.or(fallback.thinking),
        }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == ModelSettings::default()
    }
}

/// `sandbox:` as written; unset fields come from `defaults.sandbox`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// `none`, `full`, or `{allow: [...], deny: [...]}` (hosts through the egress proxy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSetting>,
    /// The container image (`backend: container`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Extra readable paths, added to the defaults'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read: Vec<String>,
    /// Extra writable paths, added to the defaults'.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write: Vec<String>,
}

/// `permissions:` rules such as `Bash(git diff *)`. Per-agent rules are added to the
/// defaults' rules; the mode replaces the default mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
}

/// A declared input (`inputs.<name>`), given with `--input name=value`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Input {
    #[serde(skip_deserializing)]
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The value when none is given; an input without a default is required.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default: Option<Value>,
}

/// One agent, as written under `agents.<id>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The key under `agents:`.
    #[serde(skip_deserializing)]
    pub id: String,
    /// The task, a template. Required unless `uses:` names an agent definition.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// An agent definition (kept as written; the coordinator resolves it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uses: Option<String>,
    /// Replaces `defaults.tools`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Replaces `defaults.skills`: the skills this agent is offered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    #[serde(default)]
    pub sandbox: SandboxConfig,
    #[serde(default)]
    pub limits: Limits,
    /// Over `defaults.model_settings`, field by field.
    #[serde(default, skip_serializing_if = "ModelSettings::is_empty")]
    pub model_settings: ModelSettings,
    #[serde(default)]
    pub permissions: Permissions,
    /// Agents that must finish first (every instance, for a fan-out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// One instance of this agent per item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub for_each: Option<ForEach>,
    /// The template variable holding the item (default `item`).
    #[serde(rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Output>,
    /// This agent's failure neither fails the run nor stops its dependents.
    #[serde(default)]
    pub continue_on_failure: bool,
    /// Replaces `defaults.instructions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<bool>,
    /// `needs`: start from a merge of the needed agents' branches (requires `needs`).
    #[serde(default, skip_serializing_if = "Base::is_run")]
    pub base: Base,
    /// Over `defaults.expect`, field by field.
    #[serde(default, skip_serializing_if = "Expect::is_empty")]
    pub expect: Expect,
}

impl Agent {
    /// The name of the fan-out item in templates.
    pub fn item_name(&self) -> &str {
        self.as_name.as_deref().unwrap_or("item")
    }
}

/// `for_each:` a YAML list (static fan-out) or one `{{ expression }}`: over inputs it
/// is expanded at plan time, over an earlier agent's output when that agent finishes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ForEach {
    List(Vec<Value>),
    Expr(String),
}

impl JsonSchema for ForEach {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ForEach".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A list of items (a static fan-out) or one quoted `{{ expression }}`.",
            "oneOf": [{"type": "array"}, {"type": "string"}],
        })
    }
}

impl<'de> Deserialize<'de> for ForEach {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<ForEach, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = ForEach;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of items or a quoted `{{ expression }}`")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ForEach, E> {
                Ok(ForEach::Expr(v.to_string()))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<ForEach, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<Value>()? {
                    items.push(item);
                }
                Ok(ForEach::List(items))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `output:` structured output of an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Output {
    /// A JSON Schema its final answer must satisfy.
    pub schema: Value,
}

/// `synthesis:` the final aggregation over every agent's report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Synthesis {
    /// Replaces the default instructions; the agents' reports are still included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// One prompt, or a tree of group syntheses when the reports do not fit.
    #[serde(default)]
    pub strategy: SynthesisStrategy,
    /// Most reports (or group answers) one synthesis request combines (at least 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
}

/// `synthesis.strategy`: how the reports reach the synthesis model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SynthesisStrategy {
    /// One prompt when the reports fit the budget (half the model's context window)
    /// and `group_size`; a tree otherwise.
    #[default]
    Auto,
    /// Always one prompt, however large.
    Single,
    /// Always a tree of groups of `group_size` (default 8), each fitting the budget.
    Tree,
}

impl SynthesisStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Single => "single",
            Self::Tree => "tree",
        }
    }
}

/// `integrate:` what happens to the agents' branches at the end. Written as a mode
/// (`integrate: merge`) or a mapping (`integrate: { mode: squash, message: …, prune:
/// true }`); a bare mode serializes back as a bare mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Integrate {
    pub mode: IntegrateMode,
    /// The commit message template of `squash` and `merge` (variables: `agent.id`,
    /// `agent.text`, `agent.output`, `agent.item`); `None`: `<id>: <first line of the
    /// summary>`, a blank line, then the summary.
    pub message: Option<String>,
    /// Delete the per-agent branches the integration branch contains.
    pub prune: bool,
}

/// How the agents' branches are integrated.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum IntegrateMode {
    /// Leave the changes in the run directory only.
    None,
    /// Fetch each agent's branch `orch/<run>/<agent>` into the repository.
    #[default]
    Branches,
    /// Also merge them, in order, into `orch/<run>/integration` (merge commits whose
    /// messages carry each agent's summary).
    Merge,
    /// Also put one commit per agent, in order, on `orch/<run>/integration`.
    Squash,
}

/// The mapping form of `integrate:`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct IntegrateMap {
    #[serde(default)]
    mode: IntegrateMode,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    prune: bool,
}

impl Serialize for Integrate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap as _;
        if self.message.is_none() && !self.prune {
            return self.mode.serialize(serializer);
        }
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("mode", &self.mode)?;
        if let Some(message) = &self.message {
            map.serialize_entry("message", message)?;
        }
        if self.prune {
            map.serialize_entry("prune", &true)?;
        }
        map.end()
    }
}

impl JsonSchema for Integrate {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Integrate".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mode = generator.subschema_for::<IntegrateMode>();
        let map = generator.subschema_for::<IntegrateMap>();
        schemars::json_schema!({
            "description": "How the agents' branches are integrated: a mode, or a mapping with `mode`, `message`, `prune`.",
            "oneOf": [mode, map],
        })
    }
}

impl<'de> Deserialize<'de> for Integrate {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Integrate, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Integrate;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "one of `none`, `branches`, `merge`, `squash`, or a mapping with `mode`, `message`, `prune`",
                )
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Integrate, E> {
                let mode = IntegrateMode::deserialize(serde::de::value::StrDeserializer::<E>::new(v))?;
                Ok(Integrate { mode, ..Integrate::default() })
            }

            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Integrate, A::Error> {
                let m = IntegrateMap::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(Integrate { mode: m.mode, message: m.message, prune: m.prune })
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

/// `base:` where an agent's worktree starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Base {
    /// The run's base commit.
    #[default]
    Run,
    /// A merge of the branches of the agents it `needs`, in order.
    Needs,
}

impl Base {
    /// Whether this is the default (`run`).
    pub fn is_run(&self) -> bool {
        *self == Base::Run
    }
}

/// `expect:` (in `defaults:` or an agent): outcomes an agent must reach to succeed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// `true`: an agent that ends with no changed files fails with "no changes".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<bool>,
}

impl Expect {
    /// `self`, with every unset field taken from `fallback`.
    pub fn or(self, fallback: Expect) -> Expect {
        Expect { changes: self.changes.or(fallback.changes) }
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        *self == Expect::default()
    }
}

/// `setup:` as a mapping: its commands and their network.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SetupConfig {
    pub commands: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSetting>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn knows_core_and_mcp_tools() {
        assert!(is_known_tool("Read"));
        assert!(is_known_tool("mcp__github__create_issue"));
        assert!(is_known_tool("mcp__github__*"));
        assert!(!is_known_tool("mcp__github"));
        assert!(!is_known_tool("mcp____x"));
        assert!(!is_known_tool("read"));
    }

    #[test]
    fn limits_fall_back_field_by_field() {
        let agent = Limits { max_turns: Some(5), ..Limits::default() };
        let defaults = Limits { max_turns: Some(40), max_cost_usd: Some(3.0), ..Limits::default() };
        assert_eq!(agent.or(defaults), Limits { max_turns: Some(5), max_cost_usd: Some(3.0), ..Limits::default() });
    }
}

#[cfg(test)]
mod tidy {
    use orch_types::tools::{CATALOG, CORE_NAMES, lookup};

    use super::*;

    /// The tool names a workflow may list are the catalog's: the core tools the agent
    /// loop implements plus the coordinator's `Agent` (which the model may also call
    /// `Task`), `TaskOutput`, `TaskStop`, `Skill` and `WebSearch`.
    #[test]
    fn workflow_tool_names_are_the_catalog_plus_agent_and_skill() {
        let mut expected: Vec<&str> = CORE_NAMES.to_vec();
        expected.extend(["Agent", "TaskOutput", "TaskStop", "Skill", "WebSearch"]);
        let mut known = KNOWN_TOOLS.to_vec();
        known.sort_unstable();
        expected.sort_unstable();
        assert_eq!(known, expected);
        assert!(CATALOG.iter().all(|t| is_known_tool(t.name)));
        assert_eq!(lookup("Task").map(|t| t.name), Some("Agent"));
        assert!(DEFAULT_TOOLS.iter().all(|t| KNOWN_TOOLS.contains(t)));
        assert!(DEFAULT_TOOLS.iter().all(|t| lookup(t).is_some_and(|t| t.read_only)));
    }
}
