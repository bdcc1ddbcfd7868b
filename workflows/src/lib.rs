//! orch-workflows: the workflow schema, loading with source positions, validation,
//! templating and planning (the DAG of agents and their fan-out).
//!
//! ```text
//! load / load_str   YAML -> Workflow (typed, validated) or Vec<Diagnostic>
//! load_with         the same, with LoadOptions (size cap, MCP servers from elsewhere)
//! yaml::load_value  any other YAML file orch reads -> serde_json::Value, same caps
//! plan              Workflow + Inputs -> Plan: stages of AgentSpec / DynamicFanOut
//! plan_with         the same, with Builtins the coordinator computed (`pr`)
//! expand_dynamic    DynamicFanOut + the source agent's output -> AgentSpecs
//! render_prompt     AgentSpec + RunContext (earlier results) -> the final prompt
//! render_text       Plan -> what `orch plan` prints (Plan is Serialize for JSON)
//! ```
//!
//! Invariants: this crate knows nothing of processes, the network or git. Every
//! [`Diagnostic`] names `file:line:column` and carries a hint. A [`Workflow`] exists only
//! once it has passed validation, and keeps its agents in file order. Fan-out instance
//! ids (`<agent>/<slug>`) are unique, stable for the same items, and branch-safe (see
//! [`plan`](mod@plan)). Templates are strict: an undefined name is an error, never an
//! empty string.

pub mod commands;
mod de;
mod diagnostic;
mod duration;
pub mod extensions;
mod file_schema;
pub mod frontmatter;
mod input;
mod load;
pub mod plan;
pub mod publish;
mod schema;
pub mod skills;
pub mod subagents;
mod template;
mod text;
mod validate;
pub mod yaml;

pub use diagnostic::{Diagnostic, Location, render_diagnostics};
pub use duration::{Duration, DurationError};
pub use file_schema::{WORKFLOW_SCHEMA_ID, workflow_schema};
pub use load::{LoadOptions, load, load_bytes, load_str, load_str_with, load_with};
pub use plan::{
    AgentSpec, BUILTIN_ROOTS, Builtins, DEFAULT_MAX_TURNS, DEFAULT_TIMEOUT, DynamicFanOut, FanOutItem, Inputs,
    PermissionsSpec, Plan, PlanInput, PlanNode, Prompt, RunContext, SandboxSpec, Stage, SynthesisSpec,
    default_agent_limits, expand_dynamic, fan_out_ids, plan, plan_with, reads_builtin, render_integrate_message,
    render_prompt,
};
pub use schema::{
    Agent, Allowlist, Backend, Base, DEFAULT_TOOLS, Defaults, Expect, ForEach, Input, Integrate, IntegrateMode,
    KNOWN_TOOLS, Limits, ModelSettings, Network, NetworkSetting, Output, PermissionMode, Permissions, SandboxConfig,
    Synthesis, SynthesisStrategy, Thinking, WORKFLOW_KEYS, Workflow, is_known_tool,
};
pub use text::render_text;
pub use validate::{MAX_ID_LEN, RESERVED_IDS, is_valid_agent_id};
