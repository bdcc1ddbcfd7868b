//! The JSON Schema of workflow files, generated from the types the loader deserializes
//! each top-level key into. [`WorkflowFile`] is the file's shape (agents and inputs as
//! mappings, `setup:` as a list or a mapping); a test keeps its keys equal to
//! [`WORKFLOW_KEYS`], so a new key cannot be loaded without being in the schema.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde_json::Value;

use crate::Limits;
use crate::extensions::{HookSettings, McpServer};
use crate::publish::Publish;
use crate::schema::{Agent, Defaults, Input, Integrate, SetupConfig, Synthesis};
use crate::subagents::Subagents;

/// Where the published schema lives, as its `$id`.
pub const WORKFLOW_SCHEMA_ID: &str = "https://github.com/orch-ci/orch/raw/v1/workflows/schemas/workflow.schema.json";

/// An orch workflow file (`orch run FILE`): agents that run in parallel sandboxed
/// worktrees, then synthesis, integration and publishing.
#[derive(JsonSchema)]
#[schemars(deny_unknown_fields)]
#[allow(dead_code)] // only its schema is used
struct WorkflowFile {
    /// A URL of this schema, for editors (ignored by orch).
    #[serde(rename = "$schema")]
    schema: Option<String>,
    /// The format version; only `1` exists.
    #[schemars(range(min = 1, max = 1))]
    version: u32,
    /// The workflow's name (default: the file name without its extension).
    name: Option<String>,
    /// The task as a whole; synthesis presents it as the original task.
    description: Option<String>,
    /// The model of every agent and of synthesis, unless they say otherwise.
    model: Option<String>,
    /// How many agents may run at once.
    #[schemars(range(min = 1))]
    concurrency: Option<u32>,
    /// Limits for the whole run.
    limits: Option<Limits>,
    /// Settings every agent starts from.
    defaults: Option<Defaults>,
    /// Declared inputs, by name (`--input name=value`).
    inputs: Option<BTreeMap<String, Option<Input>>>,
    /// Commands run once, before any agent, in the run clone.
    setup: Option<Setup>,
    /// The agents, by id, in the order they are written.
    #[schemars(extend("minProperties" = 1))]
    agents: BTreeMap<String, Option<Agent>>,
    /// How the agents' reports are combined into one.
    synthesis: Option<Synthesis>,
    /// How the agents' branches are integrated.
    integrate: Option<Integrate>,
    /// Stop the whole run at the first failed agent.
    fail_fast: Option<bool>,
    /// Limits of the `Agent` tool (nested sub-agents) for the whole run.
    subagents: Option<Subagents>,
    /// Hook commands of every agent, added to those of the repository's settings.
    hooks: Option<HookSettings>,
    /// MCP servers agents may use, by name.
    mcp_servers: Option<BTreeMap<String, McpServer>>,
    /// GitHub writes made after the run.
    publish: Option<Publish>,
}

/// `setup:` as a list of commands, or `{ commands, network }`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)] // only its schema is used
enum Setup {
    List(Vec<String>),
    Map(SetupConfig),
}

/// The JSON Schema (draft 2020-12) of workflow files.
pub fn workflow_schema() -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(WorkflowFile)).unwrap_or(Value::Null);
    if let Some(object) = schema.as_object_mut() {
        object.insert("$id".into(), Value::from(WORKFLOW_SCHEMA_ID));
        object.insert("title".into(), Value::from("orch workflow"));
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::WORKFLOW_KEYS;

    #[test]
    fn the_schema_has_every_key_the_loader_reads() {
        let schema = workflow_schema();
        let mut keys: Vec<&str> = schema["properties"].as_object().unwrap().keys().map(String::as_str).collect();
        keys.retain(|k| *k != "$schema");
        keys.sort_unstable();
        let mut expected = WORKFLOW_KEYS.to_vec();
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(schema["required"], serde_json::json!(["version", "agents"]));
        assert_eq!(schema["additionalProperties"], false);
    }

    #[test]
    fn valid_files_pass_and_mistakes_fail() {
        let validator = jsonschema::validator_for(&workflow_schema()).unwrap();
        let ok = |yaml: &str| {
            let value = crate::yaml::load_value("t.yaml", yaml.as_bytes()).unwrap();
            validator.iter_errors(&value).map(|e| e.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(ok("version: 1\nagents:\n  a:\n    prompt: Hi.\n    tools: [Read]\n"), Vec::<String>::new());
        assert_eq!(
            ok("version: 1\nsetup: [make]\nintegrate: merge\nagents: { a: { prompt: x } }\n"),
            Vec::<String>::new()
        );
        assert!(!ok("version: 1\nagents: { a: { prompt: x, tool: [Read] } }\n").is_empty(), "unknown agent key");
        assert!(!ok("version: 2\nagents: { a: { prompt: x } }\n").is_empty(), "version 2");
        assert!(!ok("version: 1\nagentz: {}\n").is_empty(), "misspelt key");
        assert!(!ok("version: 1\nintegrate: rebase\nagents: { a: { prompt: x } }\n").is_empty(), "bad mode");
    }
}
