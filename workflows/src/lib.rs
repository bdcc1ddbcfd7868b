//! orch-workflows: the workflow schema, loading with source positions, validation,
//! templating and planning (the DAG of agents and their fan-out).
//!
//! ```text
//! load / load_str   YAML -> Workflow (typed, validated) or Vec<Diagnostic>
//! plan              Workflow + Inputs -> Plan: stages of AgentSpec / DynamicFanOut
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

mod de;
mod diagnostic;
mod duration;
pub mod extensions;
mod load;
pub mod plan;
pub mod publish;
mod schema;
pub mod subagents;
mod template;
mod text;
mod validate;
mod yaml;

pub use diagnostic::{Diagnostic, Location, render_diagnostics};
pub use duration::{Duration, DurationError};
pub use load::{load, load_str};
pub use plan::{
    AgentSpec, DynamicFanOut, FanOutItem, Inputs, PermissionsSpec, Plan, PlanInput, PlanNode, Prompt, RunContext,
    SandboxSpec, Stage, SynthesisSpec, expand_dynamic, fan_out_ids, plan, render_prompt,
};
pub use schema::{
    Agent, Backend, DEFAULT_TOOLS, Defaults, ForEach, Input, Integrate, KNOWN_TOOLS, Limits, Network, Output,
    PermissionMode, Permissions, SandboxConfig, Synthesis, WORKFLOW_KEYS, Workflow, is_known_tool,
};
pub use text::render_text;
pub use validate::{MAX_ID_LEN, RESERVED_IDS, is_valid_agent_id};
