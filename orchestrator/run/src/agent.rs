//! The one way an agent is made, for `orch run` and `orch exec` alike (`orch exec` is a
//! one-agent run that works in place).
//!
//! [`Sources`] is what the repository (and a workflow) configures for its agents: hooks,
//! MCP servers and the permissions of the settings files ([`extensions`]), agent files,
//! skills and slash commands. One agent is an [`AgentSpec`] (the plan's; `orch exec` makes
//! one from its flags): [`prepare`] applies its `uses:` definition and slash command,
//! [`start`] merges its permissions with the settings files' and starts its session
//! (sandbox, tool host, MCP servers, hooks), [`equip`] makes its loop configuration
//! (model, instructions, skills, limits, model settings) and installs the tools that run
//! in the coordinator (`Agent`, `Skill`, `WebSearch`). Where it works ([`Place`]: a
//! worktree of the run, or exec's directory), where its events go, and what is done with
//! its answer and its work are the caller's.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use orch_agents::permissions::{AskFallback, Permissions, RuleSet};
use orch_agents::prompt::Setting;
use orch_agents::subagent::{AGENT_TOOL, AgentTool, SubagentLimits, SubagentRecord, SubagentRun};
use orch_agents::tools::skill::{SKILL_TOOL, SkillTool};
use orch_agents::tools::web_search::{WEB_SEARCH_TOOL, WebSearchTool};
use orch_agents::{EventSink, Limits, ModelProvider, PriceTable, QueryConfig};
use orch_workflows::AgentSpec;
use orch_workflows::commands::{CommandError, Commands};
use orch_workflows::extensions::{HookSettings, McpServer};
use orch_workflows::subagents::{Subagents, Uses};
use tokio_util::sync::CancellationToken;

use crate::exit::UsageError;
use crate::hooks_config::Extensions;
use crate::options::{SandboxSpec, SettingSource};
use crate::repo_config::{RepoConfig, RepoFiles};
use crate::run::agent_defs::{self, RunSkills};
use crate::session::{AgentSession, SessionSpec};
use crate::settings_permissions::PermissionListing;

/// What the repository and the workflow configure for every agent.
#[derive(Clone)]
pub struct Sources {
    /// Hooks, MCP servers and the settings files' permissions.
    pub extensions: Arc<Extensions>,
    /// The sub-agent limits and agent definitions every `Agent` tool shares.
    pub subagents: Arc<SubagentRun>,
    /// `uses:` of each workflow agent (by key), resolved against the definitions.
    pub uses: HashMap<String, Uses>,
    /// The skills, copied where agents can read them.
    pub skills: Arc<RunSkills>,
    /// The slash commands, for prompts that start with `/name`.
    pub commands: Arc<Commands>,
}

impl Sources {
    /// The sources of `extensions` and the agent files, skills and commands of `files`
    /// (read from `config`; the skills are copied into `skills_dir`).
    pub fn new(
        extensions: Extensions,
        files: RepoFiles,
        config: &RepoConfig,
        subagents: &Subagents,
        uses: HashMap<String, Uses>,
        skills_dir: &Path,
    ) -> crate::error::Result<Sources> {
        let RepoFiles { agents, skills, commands } = files;
        let definitions = agents.agents.iter().map(agent_defs::definition).collect();
        let skills = RunSkills::copy(config, skills, skills_dir)?;
        Ok(Sources {
            extensions: Arc::new(extensions),
            subagents: Arc::new(SubagentRun::new(subagent_limits(subagents), definitions)),
            uses,
            skills: Arc::new(skills),
            commands: Arc::new(commands),
        })
    }

    /// Nothing configured: no hooks, servers, rules, definitions, skills or commands.
    pub fn none() -> Sources {
        Sources {
            extensions: Arc::new(Extensions::default()),
            subagents: Arc::new(SubagentRun::new(subagent_limits(&Subagents::default()), Vec::new())),
            uses: HashMap::new(),
            skills: Arc::new(RunSkills::default()),
            commands: Arc::new(Commands::default()),
        }
    }
}

/// The hooks and MCP servers of the repository (through `config`) and of a workflow,
/// and the permissions of the settings files; `root` is the checkout (for validating
/// path rules). Every problem is a usage error.
pub fn extensions(
    config: &RepoConfig,
    root: &Path,
    hooks: &HookSettings,
    mcp_servers: &BTreeMap<String, McpServer>,
) -> crate::error::Result<Extensions> {
    let mut extensions =
        crate::hooks_config::load(config, hooks, mcp_servers).map_err(|e| UsageError(format!("{e:#}")))?;
    extensions.permissions = crate::settings_permissions::load(config, root).map_err(|e| UsageError(e.to_string()))?;
    Ok(extensions)
}

/// `subagents:` of a workflow, as the `Agent` tool takes them.
pub fn subagent_limits(subagents: &Subagents) -> SubagentLimits {
    let Subagents { max_depth, max_concurrent, max_total } = *subagents;
    SubagentLimits { max_depth, max_concurrent, max_total }
}

/// The model an agent's loop calls, and what goes with it.
#[derive(Clone)]
pub struct Models {
    pub provider: Arc<dyn ModelProvider>,
    /// The model of an agent that names none.
    pub default_model: String,
    pub fallback_model: Option<String>,
    pub prices: Arc<PriceTable>,
}

impl Models {
    /// The model `spec`'s loop calls: its own, or the default.
    pub fn model_of(&self, spec: &AgentSpec) -> String {
        spec.model.clone().unwrap_or_else(|| self.default_model.clone())
    }
}

/// Applies the agent's `uses:` definition and, when `prompt` starts with `/name`, the
/// repository's slash command `name` to `spec`; returns the prompt to send (a `uses:`
/// agent with no prompt gets the definition's task). An error names a command that
/// does not exist.
pub fn prepare(sources: &Sources, spec: &mut AgentSpec, mut prompt: String) -> Result<String, CommandError> {
    if let Some(uses) = sources.uses.get(&spec.agent) {
        uses.apply(spec);
        if prompt.trim().is_empty() {
            prompt = uses.task.clone();
        }
    }
    if let Some(expanded) = orch_workflows::commands::expand(&prompt, &sources.commands)? {
        expanded.apply(spec);
        prompt = expanded.prompt;
    }
    Ok(prompt)
}

/// Where an agent works, besides what its spec says.
pub struct Place {
    /// The run's id (sandbox and container names, the session id).
    pub run: String,
    /// The directory it works in (a worktree of the run, or exec's directory).
    pub cwd: PathBuf,
    /// Roots it may read besides its spec's `sandbox.read` (git paths, setup's cache).
    pub read: Vec<PathBuf>,
    /// Variables added to its sandbox's environment.
    pub env: Vec<(String, String)>,
    /// Its directory of results too large to send inline (readable by it).
    pub results: PathBuf,
    /// Where its private tmp and home are made.
    pub private: PathBuf,
    /// Its access to the run's egress proxy, for a network allowlist.
    pub egress: Option<crate::proxy::run::Grant>,
    /// Where its sandbox settings came from (for messages).
    pub source: SettingSource,
    /// The session id hooks see, when not `<run>/<agent>` (exec's Claude Code id).
    pub session_id: Option<String>,
    /// Its transcript file, which hooks see as `transcript_path`.
    pub transcript: Option<PathBuf>,
    /// The model its loop calls, which SessionStart hooks see as `model`.
    pub model: String,
    /// The git snapshot of `cwd` when the caller knows it ([`SessionSpec::git`]).
    pub git: Option<orch_agents::prompt::GitSnapshot>,
}

/// A started agent session, and its effective permissions for the report.
pub struct Started {
    pub session: AgentSession,
    pub permissions: PermissionListing,
}

/// Starts the session of `spec` in `place`: its rules merged with the settings files'
/// (Claude Code's precedence, see [`crate::settings_permissions`]), its sandbox, tool
/// host, MCP servers and hooks. Invalid rules are a usage error.
pub async fn start(
    sources: &Sources,
    spec: &AgentSpec,
    place: Place,
    sink: Arc<dyn EventSink>,
    cancel: &CancellationToken,
) -> crate::error::Result<Started> {
    let Place { run, cwd, read: extra_read, env, results, private, egress, source, session_id, transcript, model, git } =
        place;
    let mut read: Vec<PathBuf> = spec.sandbox.read.iter().map(PathBuf::from).collect();
    read.extend(extra_read);
    // The skills it may load: their files are readable (never writable).
    if spec.tools.iter().any(|t| t == SKILL_TOOL) && !skill_entries(sources, spec).is_empty() {
        read.extend(sources.skills.root.iter().cloned());
    }
    let orch_workflows::SandboxSpec { backend, network, image, read: _, write } = &spec.sandbox;
    let sandbox = SandboxSpec {
        backend: *backend,
        network: network.mode(),
        read,
        write: write.iter().map(PathBuf::from).collect(),
        image: image.clone(),
        source,
    };
    let orch_workflows::PermissionsSpec { mode, allow, deny, ask } = &spec.permissions;
    let rules = RuleSet {
        // `None`: no mode named, orch's default.
        mode: *mode,
        on_ask: AskFallback::default(),
        allow: allow.clone(),
        deny: deny.clone(),
        ask: ask.clone(),
        origin: None,
    };
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let repo_rules = &sources.extensions.permissions;
    let (mode, merged) = crate::settings_permissions::merge(repo_rules, rules.mode, &rules.sourced());
    let mut roots = vec![cwd.clone()];
    roots.extend(crate::settings_permissions::additional_roots(repo_rules, &cwd, home.as_deref()));
    let permissions = Permissions::from_rules(mode, &merged, &cwd, home.as_deref(), roots)
        .map_err(|e| UsageError(format!("the permission rules of `{}` are invalid: {e}", spec.id)))?;
    let listing = crate::settings_permissions::listing(&permissions, repo_rules, rules.mode.is_some());
    let session = SessionSpec {
        run: run.clone(),
        agent: spec.id.clone(),
        cwd,
        sandbox,
        writes: orch_types::tools::any_writes(&spec.tools),
        // Its own transcript, which hooks get as `transcript_path`, is readable too.
        read: std::iter::once(results.clone()).chain(transcript.iter().filter(|t| t.is_file()).cloned()).collect(),
        private,
        env,
        tools: spec.tools.clone(),
        permissions,
        results_dir: Some(results),
        hooks: sources.extensions.hooks.clone(),
        mcp_servers: sources.extensions.mcp_servers.clone(),
        session_id: session_id.unwrap_or_else(|| format!("{run}/{}", spec.id)),
        transcript: transcript.clone(),
        model,
        // No single file can grow past the agent's disk limit.
        file_size_limit: Some(max_disk(spec).bytes()),
        egress,
        git,
    };
    let session = AgentSession::start(session, sink, cancel).await?;
    Ok(Started { session, permissions: listing })
}

/// What the caller decides of an agent's loop: its `limits` (its own, or what the run
/// has left of them) and the `setting` its system prompt names (`None`: unattended).
pub struct LoopOptions {
    pub limits: Limits,
    pub setting: Option<Setting>,
}

/// What [`equip`] made: the loop's configuration, and where the `Agent` tool records
/// the sub-agents it ran.
pub struct Equipped {
    pub config: QueryConfig,
    pub subagents: Arc<Mutex<Vec<SubagentRecord>>>,
}

/// The loop configuration of `spec` in its started `session`: model, system prompt
/// (instructions through the tool host, the `uses:` definition's prompt, the setting it
/// runs in, the skills it is offered), limits, model settings; and the coordinator's
/// tools installed in its pool. The caller stops the session when this fails.
pub async fn equip(
    sources: &Sources,
    spec: &AgentSpec,
    models: &Models,
    options: LoopOptions,
    session: &mut AgentSession,
    sink: Arc<dyn EventSink>,
    cancel: &CancellationToken,
) -> crate::error::Result<Equipped> {
    let LoopOptions { limits, setting } = options;
    let model = models.model_of(spec);
    let mut config = QueryConfig::new(&spec.id, &model);
    config.fallback_model = models.fallback_model.clone();
    config.prices = models.prices.clone();
    let (system, loaded) = session.instructions(&model, spec.instructions, cancel).await;
    config.system = system;
    if !loaded.is_empty()
        && let Some(hooks) = session.pool().and_then(|pool| orch_agents::tool::ToolRunner::hooks(pool))
    {
        hooks.instructions_loaded(&loaded).await;
    }
    if let Some(setting) = setting {
        orch_agents::prompt::set_setting(&mut config.system, setting);
    }
    if let Some(uses) = sources.uses.get(&spec.agent)
        && let Some(first) = config.system.first_mut()
    {
        first.text = uses.system_prompt.clone();
    }
    let skills = if spec.tools.iter().any(|t| t == SKILL_TOOL) { skill_entries(sources, spec) } else { Vec::new() };
    orch_agents::prompt::add_skills(&mut config.system, &skills);
    config.limits = limits;
    config.apply_settings(&model_settings(&spec.model_settings));
    let records = Arc::new(Mutex::new(Vec::new()));
    let usage = |e: orch_agents::pipeline::PoolError| UsageError(e.to_string());
    if spec.tools.iter().any(|t| t == AGENT_TOOL) {
        let tool =
            AgentTool::new(sources.subagents.clone(), models.provider.clone(), config.clone(), sink, records.clone());
        session.map_pool(|pool| tool.install(pool)).map_err(usage)?;
    }
    if spec.tools.iter().any(|t| t == SKILL_TOOL) {
        let tool = SkillTool::new(skills);
        session.map_pool(|pool| tool.install(pool)).map_err(usage)?;
    }
    if spec.tools.iter().any(|t| t == WEB_SEARCH_TOOL) {
        let provider = models.provider.clone();
        let tool =
            WebSearchTool::new(provider, &config.agent_id, &config.model, config.timeouts, config.prices.clone());
        session.offer_web_search(tool, models.provider.name()).map_err(usage)?;
    }
    Ok(Equipped { config, subagents: records })
}

/// The skills `spec` is offered (its `skills:`, else all).
fn skill_entries(sources: &Sources, spec: &AgentSpec) -> Vec<orch_agents::tools::skill::SkillEntry> {
    sources.skills.entries(spec.skills.as_deref())
}

/// The agent's `limits.max_disk` (the plan fills in the default).
pub fn max_disk(spec: &AgentSpec) -> orch_types::Size {
    spec.limits.max_disk.unwrap_or(orch_types::limits::DEFAULT_MAX_DISK)
}

/// A workflow's `model_settings`, as the loop takes them.
pub fn model_settings(settings: &orch_workflows::ModelSettings) -> orch_agents::model::ModelSettings {
    let orch_workflows::ModelSettings {
        first_byte_timeout,
        idle_timeout,
        retry_budget,
        max_output_tokens,
        context_window,
        thinking,
    } = settings;
    orch_agents::model::ModelSettings {
        first_byte_timeout: first_byte_timeout.map(|d| d.as_std()),
        idle_timeout: idle_timeout.map(|d| d.as_std()),
        retry_budget: retry_budget.map(|d| d.as_std()),
        max_output_tokens: *max_output_tokens,
        context_window: *context_window,
        thinking: thinking.map(|t| orch_agents::model::Thinking { budget_tokens: t.budget_tokens }),
    }
}

/// Whether anything of an agent with `tools` can write to its directories: a tool that
/// writes (`Bash` among them), a stdio MCP server (started in its tool host), or a hook
/// command (`hooks`: whether any is configured).
pub fn may_write(tools: &[String], hooks: bool) -> bool {
    hooks || orch_types::tools::any_writes(tools) || tools.iter().any(|t| t.starts_with(orch_agents::mcp::PREFIX))
}

#[cfg(test)]
mod tests {
    use super::may_write;

    fn tools(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn only_an_agent_that_can_write_may_change_files() {
        assert!(!may_write(&tools(&["Read", "LS", "Grep", "Glob"]), false));
        assert!(!may_write(&[], false));
        for writer in ["Bash", "Write", "Edit", "MultiEdit", "NotebookEdit", "mcp__files__put"] {
            assert!(may_write(&tools(&["Read", writer]), false), "{writer}");
        }
        assert!(may_write(&tools(&["Read"]), true), "a hook command can write");
    }
}
