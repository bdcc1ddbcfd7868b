//! The typed options of every command `orch-run` runs. The binary converts its command
//! line into these once, at the edge; nothing in this crate knows the argument syntax.

use std::path::PathBuf;
use std::sync::Arc;

use orch_sandbox::policy::{Backend, Network};

use crate::run::{Reporter, Shard};

/// Which model API to talk to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// The Anthropic Messages API (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL).
    Anthropic,
    /// An OpenAI-compatible chat-completions API (OPENAI_API_KEY, OPENAI_BASE_URL).
    Openai,
    /// Deterministic turns from a script file; runs offline.
    Scripted,
}

/// One model selection: the API, the model and what goes with it.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub provider: Provider,
    pub model: String,
    /// A model to switch to when the main one stays overloaded.
    pub fallback_model: Option<String>,
    /// The turn script of the scripted provider.
    pub script: Option<PathBuf>,
    /// A YAML or JSON price table that overrides the built-in prices.
    pub prices: Option<PathBuf>,
}

/// A model selection for a workflow run: as [`ModelSpec`], but the model may also come
/// from the workflow file.
#[derive(Debug, Clone)]
pub struct WorkflowModelSpec {
    pub provider: Provider,
    /// The model of every agent that names none (replaces the workflow's `model:`).
    pub model: Option<String>,
    pub fallback_model: Option<String>,
    pub script: Option<PathBuf>,
    pub prices: Option<PathBuf>,
}

impl WorkflowModelSpec {
    /// The selection with its model, else `fallback`, as the model.
    pub fn with_default(&self, fallback: impl FnOnce() -> String) -> ModelSpec {
        ModelSpec {
            provider: self.provider,
            model: self.model.clone().unwrap_or_else(fallback),
            fallback_model: self.fallback_model.clone(),
            script: self.script.clone(),
            prices: self.prices.clone(),
        }
    }
}

/// Where a sandbox setting came from, so that messages name what the user wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettingSource {
    /// Command-line flags (`--backend`, `--image`, ...).
    Flags,
    /// The workflow's `sandbox:` section.
    Workflow,
}

impl SettingSource {
    /// How the user spelled the backend setting.
    pub fn backend_key(self) -> &'static str {
        match self {
            SettingSource::Flags => "--backend",
            SettingSource::Workflow => "the workflow's `sandbox.backend`",
        }
    }

    /// How the user sets the container image.
    pub fn image_hint(self) -> &'static str {
        match self {
            SettingSource::Flags => "pass --image NAME",
            SettingSource::Workflow => "set `sandbox.image` in the workflow",
        }
    }
}

/// The sandbox an agent or a command runs in.
#[derive(Debug, Clone)]
pub struct SandboxSpec {
    pub backend: Backend,
    pub network: Network,
    /// Extra readable (and executable) paths.
    pub read: Vec<PathBuf>,
    /// Extra writable paths.
    pub write: Vec<PathBuf>,
    /// The container image (container backend).
    pub image: Option<String>,
    pub source: SettingSource,
}

/// `orch exec`: one ad-hoc agent, a one-agent run in place.
pub struct ExecOptions {
    pub prompt: String,
    /// Trust the checkout's configuration even when it is not the trusted ref.
    pub trust_repo_config: bool,
    /// The trusted ref, instead of the base or default branch.
    pub config_ref: Option<String>,
    pub model: ModelSpec,
    /// The agent, as a workflow would plan it: id, tools, limits, model settings,
    /// permissions, sandbox, instructions (made as every run's agent is, see
    /// [`crate::agent`]).
    pub agent: orch_workflows::AgentSpec,
    /// What goes to stdout: the answer, one JSON result, or every event.
    pub output_format: ExecOutput,
    /// `--output-schema`: the final answer must be JSON matching this schema (asked
    /// again when it does not, as a workflow's `output.schema`).
    pub output_schema: Option<serde_json::Value>,
    /// Write tools outside a git repository, or in the home or root directory.
    pub allow_outside_repo: bool,
    /// Started from an attended terminal (the system prompt says so).
    pub attended: bool,
    /// Where progress goes (the terminal's view, in the binary).
    pub reporter: Arc<dyn Reporter>,
    /// The working directory (default: the current one).
    pub cwd: Option<PathBuf>,
    pub record: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    pub transcript: Option<PathBuf>,
    /// `--system-prompt`: replaces the static part of the system prompt.
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`: added at the end of the system prompt.
    pub append_system_prompt: Option<String>,
    /// `--mcp-config`: files (or JSON texts) with `mcpServers`, beside `.mcp.json`.
    pub mcp_configs: Vec<String>,
}

impl std::fmt::Debug for ExecOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecOptions").field("agent", &self.agent.id).finish_non_exhaustive()
    }
}

/// `orch exec --output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExecOutput {
    /// The final answer as text.
    #[default]
    Text,
    /// One JSON object at the end, in the shape of Claude Code's `result` (with orch's
    /// own keys beside it).
    Json,
    /// Claude Code's `stream-json`: an `init` line, one line per assistant content
    /// block and per tool result, then the `result` line.
    StreamJson,
    /// orch's own event stream, one JSON line per event (`--json`).
    Events,
}

/// `orch run WORKFLOW`.
pub struct RunOptions {
    pub workflow: PathBuf,
    pub inputs: Vec<(String, serde_json::Value)>,
    pub models: WorkflowModelSpec,
    /// Most agents running at once (replaces the workflow's `concurrency:`).
    pub concurrency: Option<u32>,
    /// The run directory (default: see [`crate::run::run_dir`]).
    pub out: Option<PathBuf>,
    pub json: bool,
    pub keep_worktrees: bool,
    pub trust_repo_config: bool,
    pub config_ref: Option<String>,
    pub repo: Option<PathBuf>,
    /// The commit the agents start from.
    pub base: String,
    pub run_id: Option<String>,
    /// `(name, email)` of the commits orch makes.
    pub author: Option<(String, String)>,
    pub only: Vec<String>,
    pub shard: Option<Shard>,
    pub from: Option<PathBuf>,
    pub resume: Option<PathBuf>,
    pub max_fail: Option<u32>,
    pub junit: Option<PathBuf>,
    pub record: Option<PathBuf>,
    pub replay: Option<PathBuf>,
    /// `--publish`: `None` for the default (on under GitHub Actions with a token,
    /// dry-run otherwise).
    pub publish: Option<crate::publish::PublishMode>,
    /// `--backend`, `--network`, `--image`: replace the workflow's sandbox settings.
    pub sandbox: SandboxOverride,
    /// `--prune-branches`: delete the agents' branches the integration branch holds.
    pub prune_branches: bool,
    /// Where progress goes (the terminal's view, in the binary).
    pub reporter: Arc<dyn Reporter>,
    /// `--diff-base`: the base `pr.changed_files` is found against (see
    /// [`crate::changes`]).
    pub diff_base: Option<String>,
}

/// Sandbox settings given on the command line of `orch run`; each one replaces the
/// workflow's value for every agent and for `setup:`.
#[derive(Debug, Clone, Default)]
pub struct SandboxOverride {
    pub backend: Option<orch_types::Backend>,
    pub network: Option<orch_types::Network>,
    pub image: Option<String>,
}

impl SandboxOverride {
    /// Writes the overrides into the workflow's defaults and into every agent that sets
    /// its own value, before the workflow is planned (so the trust rule still sees them).
    pub fn apply(&self, workflow: &mut orch_workflows::Workflow) {
        let mut targets = vec![&mut workflow.defaults.sandbox];
        targets.extend(workflow.agents.iter_mut().map(|a| &mut a.sandbox));
        for sandbox in targets {
            if let Some(b) = self.backend {
                sandbox.backend = Some(b);
            }
            if let Some(n) = self.network {
                sandbox.network = Some(n.into());
            }
            if let Some(i) = &self.image {
                sandbox.image = Some(i.clone());
            }
        }
    }
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions").field("workflow", &self.workflow).finish_non_exhaustive()
    }
}

/// `orch merge DIR...`.
pub struct MergeOptions {
    pub dirs: Vec<PathBuf>,
    pub out: Option<PathBuf>,
    pub workflow: Option<PathBuf>,
    pub inputs: Vec<(String, serde_json::Value)>,
    pub models: WorkflowModelSpec,
    pub json: bool,
    pub junit: Option<PathBuf>,
    /// `--publish`, as for `orch run` (needs `workflow`).
    pub publish: Option<crate::publish::PublishMode>,
    pub reporter: Arc<dyn Reporter>,
    /// Read `workflow` from the checkout even off the trusted ref (see `RunOptions`).
    pub trust_repo_config: bool,
    /// The trusted ref (see [`crate::repo_config`]).
    pub config_ref: Option<String>,
    /// The repository that gets the integration branch built across the shards
    /// (default: the current directory).
    pub repo: Option<PathBuf>,
}

impl std::fmt::Debug for MergeOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeOptions").field("dirs", &self.dirs).finish_non_exhaustive()
    }
}

/// The hidden tool-host mode: what one agent's host serves (also what the tool host
/// zygote is sent for each host, as JSON).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct HostOptions {
    /// The agent's working directory.
    pub cwd: PathBuf,
    pub tools: Vec<String>,
    /// The sandbox policy, as JSON (`orch_sandbox::policy::Policy`).
    pub policy: String,
    /// The stdio MCP servers the host starts on request, as JSON (name -> server).
    pub mcp: Option<String>,
}
