//! Planning: a validated [`Workflow`] plus the run's inputs, turned into stages of
//! [`AgentSpec`]s that say exactly what will run.
//!
//! - **Stages** are the topological levels of the `needs` graph: stage 1 holds the agents
//!   that need nothing, stage N the agents whose deepest need is in stage N-1. Inside a
//!   stage, agents keep file order and fan-out instances keep item order. A coordinator
//!   may start an agent as soon as its own needs are done; stages are one valid order.
//! - **Settings** are merged per agent: `tools`, `model`, `sandbox.backend`,
//!   `sandbox.network`, `sandbox.image` (kept only for `backend: container`),
//!   `permissions.mode` and each limit come from the
//!   agent, else from `defaults` (the model then from the top-level `model`); lists of
//!   sandbox paths and permission rules are the defaults' followed by the agent's own.
//!   Without any `tools`, an agent gets the read-only [`DEFAULT_TOOLS`]; without any
//!   sandbox settings, `landlock` with `network: none`.
//! - **Fan-out** over a list (or over inputs) expands now; over an earlier agent's output
//!   it stays a [`DynamicFanOut`] until [`expand_dynamic`] is given that output.
//! - **Prompts** that read only inputs and the item are rendered now
//!   ([`Prompt::Rendered`]); prompts that read earlier agents' results stay templates
//!   ([`Prompt::Deferred`]) and are rendered by [`render_prompt`] once those agents are
//!   done.
//! - **Built-ins** ([`Builtins`]) are values the coordinator computes outside the
//!   workflow and passes in with [`plan_with`]: `pr` (the pull request's base, head and
//!   changed files). Templates read them by root name wherever they read `inputs`; one
//!   that is not given is undefined, so a template that reads it fails to render.
//!
//! # Agent ids
//!
//! An agent without `for_each` keeps its key as id (`survey`). A fan-out instance is
//! `<agent>/<slug>`: the slug is the item itself when it is text, a number or a boolean,
//! or the first of the `id`, `name`, `path`, `title`, `file` fields of an object;
//! lowercased, every run of characters other than `a-z`, `0-9` and `_` turned into one
//! `-`, trimmed of `-`, cut to 48 characters. An item with no usable text gets its index
//! (`fix/3`); a slug already taken gets `-<index>` appended (`fix/core-2`). So
//! `for_each: [crates/core, "crates/cli"]` gives `fix/crates-core` and `fix/crates-cli`.
//! Ids are unique within a run, the same for the same items in the same order, and safe
//! in branch names `orch/<run>/<id>` and file paths: agent keys cannot contain `/`, so an
//! instance id never collides with another agent's id.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::diagnostic::{Diagnostic, Location};
use crate::load::{did_you_mean, push_sentence};
use crate::schema::{
    Agent, Backend, DEFAULT_TOOLS, ForEach, Integrate, Limits, NetworkSetting, PermissionMode, Source, Workflow,
};
use crate::template;
use crate::yaml::Seg;

/// The run's input values by name, as given with `--input name=value`.
pub type Inputs = BTreeMap<String, Value>;

/// Longest fan-out slug, in characters.
const MAX_SLUG: usize = 48;

/// Everything a run will do, in order.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub name: String,
    pub file: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The workflow's model (agents and synthesis fall back to it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// Limits for the whole run.
    pub limits: Limits,
    /// Every declared input with its value (given, or the default), in file order.
    pub inputs: Vec<PlanInput>,
    pub setup: Vec<String>,
    /// The network of the `setup:` commands (`full` unless the workflow says otherwise).
    #[serde(skip_serializing_if = "is_full")]
    pub setup_network: NetworkSetting,
    pub stages: Vec<Stage>,
    pub synthesis: SynthesisSpec,
    pub integrate: Integrate,
    pub fail_fast: bool,
    /// Agents that fan out (their results are lists), including those with no items.
    #[serde(skip)]
    fan_outs: BTreeSet<String>,
    /// The built-in values templates read (`pr`).
    #[serde(flatten)]
    pub builtins: Builtins,
}

/// Values the coordinator computes outside the workflow (from git and the event), read
/// in templates by their root name. This crate only passes them on.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Builtins {
    /// `pr`: the pull request (or the `--diff-base`) the run is about, an object with
    /// `number`, `base`, `head`, `merge_base`, `changed_files`, `deleted_files`, `diff`
    /// and `diffs`. `None`: undefined in templates.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pr: Option<Value>,
}

/// The root names [`Builtins`] gives templates, with the fields each one has.
pub const BUILTIN_ROOTS: [(&str, &[&str]); 1] = [(
    "pr",
    &["number", "base", "head", "merge_base", "changed_files", "deleted_files", "diff", "diff_truncated", "diffs"],
)];

impl Builtins {
    /// The template context: `inputs` and every built-in that has a value.
    fn context(&self, inputs: &Map<String, Value>) -> Map<String, Value> {
        let mut vars = Map::new();
        vars.insert("inputs".to_string(), Value::Object(inputs.clone()));
        if let Some(pr) = &self.pr {
            vars.insert("pr".to_string(), pr.clone());
        }
        vars
    }
}

/// Whether a template of `workflow` (a prompt, a `for_each`, the synthesis prompt) reads
/// the built-in `root` (e.g. `pr`), so the coordinator computes it only when needed.
pub fn reads_builtin(workflow: &Workflow, root: &str) -> bool {
    let reads = |text: &str| template::references(text).unwrap_or_default().iter().any(|r| r.root() == root);
    let for_each = |agent: &Agent| match &agent.for_each {
        Some(ForEach::Expr(text)) => template::single_expression(text)
            .and_then(|(expr, _)| template::expression_references(expr).ok())
            .is_some_and(|refs| refs.iter().any(|r| r.root() == root)),
        _ => false,
    };
    workflow.agents.iter().any(|a| a.prompt.as_deref().is_some_and(reads) || for_each(a))
        || workflow.synthesis.prompt.as_deref().is_some_and(reads)
}

impl Plan {
    /// Every node, stage by stage.
    pub fn nodes(&self) -> impl Iterator<Item = &PlanNode> {
        self.stages.iter().flat_map(|s| s.agents.iter())
    }

    /// Every agent known now (dynamic fan-outs not included), stage by stage.
    pub fn agents(&self) -> impl Iterator<Item = &AgentSpec> {
        self.nodes().filter_map(|n| match n {
            PlanNode::Agent(spec) => Some(spec),
            PlanNode::DynamicFanOut(_) => None,
        })
    }

    /// The input values as a JSON object.
    pub fn input_values(&self) -> Map<String, Value> {
        self.inputs.iter().map(|i| (i.name.clone(), i.value.clone())).collect()
    }
}

/// One input of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanInput {
    pub name: String,
    pub value: Value,
    /// Whether the value is the declared default (not given on the command line).
    pub default: bool,
}

/// Agents whose needs are all in earlier stages.
#[derive(Debug, Clone, Serialize)]
pub struct Stage {
    /// 1-based.
    pub stage: usize,
    pub agents: Vec<PlanNode>,
}

/// An agent to run, or a fan-out whose items are not known yet.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PlanNode {
    Agent(AgentSpec),
    DynamicFanOut(DynamicFanOut),
}

impl PlanNode {
    /// The agent's id (for a dynamic fan-out, the key of the agent that fans out).
    pub fn id(&self) -> &str {
        match self {
            PlanNode::Agent(spec) => &spec.id,
            PlanNode::DynamicFanOut(node) => &node.id,
        }
    }
}

/// Everything needed to run one agent.
#[derive(Debug, Clone, Serialize)]
pub struct AgentSpec {
    /// Unique in the run; `<agent>/<slug>` for a fan-out instance (see the module docs).
    pub id: String,
    /// The key under `agents:` this spec comes from.
    pub agent: String,
    /// The item, for a fan-out instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fan_out: Option<FanOutItem>,
    /// `None`: the coordinator's default model.
    pub model: Option<String>,
    pub tools: Vec<String>,
    pub sandbox: SandboxSpec,
    pub limits: Limits,
    /// `model_settings`, the agent's over `defaults.model_settings`.
    #[serde(skip_serializing_if = "crate::schema::ModelSettings::is_empty")]
    pub model_settings: crate::schema::ModelSettings,
    pub permissions: PermissionsSpec,
    /// Agent keys that must be done first: every instance of each, for a fan-out.
    pub needs: Vec<String>,
    /// `None` when `uses:` supplies the prompt.
    pub prompt: Option<Prompt>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uses: Option<String>,
    /// The file of the `uses:` definition, once resolved (`subagents::Uses::apply`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uses_source: Option<String>,
    /// The skills the agent is offered (`skills:`, else `defaults.skills`); `None`: all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// The slash command file the prompt was expanded from (`commands::Expanded::apply`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_source: Option<String>,
    /// The JSON Schema the final answer must satisfy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    pub continue_on_failure: bool,
    /// Whether the agent's system prompt carries the project's instruction files.
    #[serde(skip_serializing_if = "is_true")]
    pub instructions: bool,
    /// Where its worktree starts: the run's base, or a merge of what it needs.
    #[serde(skip_serializing_if = "crate::schema::Base::is_run")]
    pub base: crate::schema::Base,
    /// `expect:`, the agent's over `defaults.expect`.
    #[serde(skip_serializing_if = "crate::schema::Expect::is_empty")]
    pub expect: crate::schema::Expect,
    /// With `base: needs`, the finished agents it starts from, in order, as `(agent id,
    /// commit)`: filled in by the coordinator's dispatcher when the agent starts.
    #[serde(skip)]
    pub start_from: Vec<(String, String)>,
    /// Where the prompt is in the file, for render errors.
    #[serde(skip)]
    origin: Option<Origin>,
}

impl AgentSpec {
    /// An agent planned without a workflow file (`orch exec`, a one-agent run): named
    /// `id`, with no tools, limits, rules or prompt, the sandbox's defaults and the
    /// project's instructions; the caller sets what its options say.
    pub fn single(id: &str) -> AgentSpec {
        AgentSpec {
            id: id.to_string(),
            agent: id.to_string(),
            fan_out: None,
            model: None,
            tools: Vec::new(),
            sandbox: SandboxSpec {
                backend: Backend::default(),
                network: NetworkSetting::default(),
                image: None,
                read: Vec::new(),
                write: Vec::new(),
            },
            limits: Limits::default(),
            model_settings: crate::schema::ModelSettings::default(),
            permissions: PermissionsSpec { mode: None, allow: Vec::new(), deny: Vec::new(), ask: Vec::new() },
            needs: Vec::new(),
            prompt: None,
            uses: None,
            uses_source: None,
            skills: None,
            command_source: None,
            output_schema: None,
            continue_on_failure: false,
            instructions: true,
            base: crate::schema::Base::default(),
            expect: crate::schema::Expect::default(),
            start_from: Vec::new(),
            origin: None,
        }
    }
}

/// A fan-out instance's item.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FanOutItem {
    /// Position in the list of items.
    pub index: usize,
    /// The template variable that holds the item.
    #[serde(rename = "as")]
    pub as_name: String,
    pub item: Value,
}

/// Sandbox settings of one agent, defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SandboxSpec {
    pub backend: Backend,
    pub network: NetworkSetting,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    pub read: Vec<String>,
    pub write: Vec<String>,
}

/// Permission settings of one agent, defaults applied.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PermissionsSpec {
    /// The mode the workflow or an agent file names; `None` is orch's default, which
    /// is not Claude Code's `default` (docs/src/concepts/permissions.md).
    pub mode: Option<PermissionMode>,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub ask: Vec<String>,
}

/// An agent's prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Prompt {
    /// Final text.
    Rendered { text: String },
    /// A template that reads earlier agents' results (`reads`, by agent key); render it
    /// with [`render_prompt`] once they are done. In a [`DynamicFanOut`] template it may
    /// also wait for the item (then `reads` can be empty).
    Deferred { template: String, reads: Vec<String> },
}

impl Prompt {
    /// The rendered text, or the template.
    pub fn text(&self) -> &str {
        match self {
            Prompt::Rendered { text } => text,
            Prompt::Deferred { template, .. } => template,
        }
    }
}

/// A fan-out over an earlier agent's structured output: one agent per item, known when
/// that agent is done. Expand it with [`expand_dynamic`].
#[derive(Debug, Clone, Serialize)]
pub struct DynamicFanOut {
    /// The agent key; instances get ids `<id>/<slug>`.
    pub id: String,
    /// The expression over the source's output, e.g. `agents.survey.output.crates`.
    pub source: String,
    /// The agent whose output is read.
    pub source_agent: String,
    pub needs: Vec<String>,
    #[serde(rename = "as")]
    pub as_name: String,
    /// What every instance will be; its prompt is still a template.
    pub template: AgentSpec,
    #[serde(skip)]
    inputs: Map<String, Value>,
    #[serde(skip)]
    for_each_at: Option<Origin>,
    #[serde(skip)]
    builtins: Arc<Builtins>,
}

/// Synthesis settings.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SynthesisSpec {
    /// `synthesis.model`, else the workflow's model.
    pub model: Option<String>,
    /// The custom instructions, rendered; `None` means the default aggregation prompt.
    pub prompt: Option<String>,
    /// `synthesis.strategy`.
    pub strategy: crate::schema::SynthesisStrategy,
    /// `synthesis.group_size`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_size: Option<u32>,
    /// `defaults.model_settings.context_window`: the window the budget is half of,
    /// in place of the model's known one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// Where something came from in the workflow file.
#[derive(Debug, Clone)]
struct Origin {
    source: Source,
    path: Vec<Seg>,
}

impl Origin {
    /// The location of `offset..offset + len` inside the string at `path`, or of the
    /// whole value.
    fn locate(&self, text: Option<&str>, offset: Option<(usize, usize)>) -> Location {
        let file = &self.source.file;
        match self.source.tree.find(&self.path) {
            Some((node, _)) => match (text, offset) {
                (Some(text), Some((offset, len))) => file.inside(node, text, offset, len),
                _ => file.span(node.span),
            },
            None => file.at(1, 0, 1),
        }
    }
}

/// Plans a run of `workflow` with `inputs`.
/// The `max_turns` of an agent when neither it nor `defaults:` sets one.
pub const DEFAULT_MAX_TURNS: u32 = 100;

/// The `timeout` of an agent when neither it nor `defaults:` sets one: 30 minutes.
pub const DEFAULT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// The limits every agent starts from: [`DEFAULT_MAX_TURNS`] and [`DEFAULT_TIMEOUT`],
/// so a looping model stops, and the disk bounds (`max_disk` 2 GiB, `max_file_size`
/// 20 MiB). The agent's `limits:` and `defaults.limits` override them, up or down.
pub fn default_agent_limits() -> Limits {
    Limits {
        max_turns: Some(DEFAULT_MAX_TURNS),
        timeout: Some(crate::duration::Duration::from_std(DEFAULT_TIMEOUT)),
        max_disk: Some(orch_types::limits::DEFAULT_MAX_DISK),
        max_file_size: Some(orch_types::limits::DEFAULT_MAX_FILE_SIZE),
        ..Limits::default()
    }
}

pub fn plan(workflow: &Workflow, inputs: &Inputs) -> Result<Plan, Vec<Diagnostic>> {
    plan_with(workflow, inputs, &Builtins::default())
}

/// [`plan`] with the built-in values templates may read (see [`Builtins`]).
pub fn plan_with(workflow: &Workflow, inputs: &Inputs, builtins: &Builtins) -> Result<Plan, Vec<Diagnostic>> {
    let index: HashMap<&str, &Agent> = workflow.agents.iter().map(|a| (a.id.as_str(), a)).collect();
    let mut planner = Planner {
        workflow,
        index,
        diagnostics: Vec::new(),
        upstream: HashMap::new(),
        builtins: Arc::new(builtins.clone()),
    };
    let inputs = planner.inputs(inputs);
    if !planner.diagnostics.is_empty() {
        // Rendering without the inputs would only repeat these errors.
        return Err(planner.diagnostics);
    }
    let values: Map<String, Value> = inputs.iter().map(|i| (i.name.clone(), i.value.clone())).collect();
    let levels = levels(workflow, &planner.index);
    let depth = levels.values().copied().max().map_or(0, |m| m + 1);
    let mut stages: Vec<Stage> = (0..depth).map(|i| Stage { stage: i + 1, agents: Vec::new() }).collect();
    let mut fan_outs = BTreeSet::new();
    for agent in &workflow.agents {
        if agent.for_each.is_some() {
            fan_outs.insert(agent.id.clone());
        }
        let nodes = planner.agent(agent, &values);
        let level = levels.get(agent.id.as_str()).copied().unwrap_or(0);
        if let Some(stage) = stages.get_mut(level) {
            stage.agents.extend(nodes);
        }
    }
    let synthesis = SynthesisSpec {
        strategy: workflow.synthesis.strategy,
        group_size: workflow.synthesis.group_size,
        context_window: workflow.defaults.model_settings.context_window,
        model: workflow.synthesis.model.clone().or_else(|| workflow.model.clone()),
        prompt: workflow.synthesis.prompt.as_ref().and_then(|prompt| {
            let origin = planner.origin(vec![Seg::key("synthesis"), Seg::key("prompt")]);
            let context = Value::Object(builtins.context(&values));
            match template::render(prompt, &context) {
                Ok(text) => Some(text),
                Err(e) => {
                    planner.diagnostics.push(render_diagnostic("the synthesis prompt", &origin, prompt, &e));
                    None
                }
            }
        }),
    };
    if !planner.diagnostics.is_empty() {
        return Err(planner.diagnostics);
    }
    Ok(Plan {
        name: workflow.name.clone(),
        file: workflow.file().to_string(),
        description: workflow.description.clone(),
        model: workflow.model.clone(),
        concurrency: workflow.concurrency,
        limits: workflow.limits,
        inputs,
        setup: workflow.setup.clone(),
        setup_network: workflow.setup_network.clone().unwrap_or(NetworkSetting::Full),
        stages,
        synthesis,
        integrate: workflow.integrate.clone(),
        fail_fast: workflow.fail_fast,
        fan_outs,
        builtins: builtins.clone(),
    })
}

/// Stage index (0-based) of every agent: 0 without needs, else one more than its
/// deepest need. One iterative pass over the graph (no recursion, so a chain of
/// 100,000 agents is fine).
fn levels<'w>(workflow: &'w Workflow, index: &HashMap<&'w str, &'w Agent>) -> HashMap<&'w str, usize> {
    let mut memo: HashMap<&'w str, usize> = HashMap::new();
    let mut visiting: HashSet<&'w str> = HashSet::new();
    for agent in &workflow.agents {
        // (agent, index of the next need to look at)
        let mut stack: Vec<(&'w str, usize)> = vec![(agent.id.as_str(), 0)];
        while let Some(top) = stack.last_mut() {
            let (id, next) = *top;
            if next == 0 && (memo.contains_key(id) || !visiting.insert(id)) {
                // Known already, or a cycle (which cannot pass validation; kept total).
                stack.pop();
                continue;
            }
            let needs = index.get(id).map(|a| a.needs.as_slice()).unwrap_or_default();
            match needs.get(next) {
                Some(need) => {
                    top.1 += 1;
                    if let Some((&key, _)) = index.get_key_value(need.as_str())
                        && !memo.contains_key(key)
                    {
                        stack.push((key, 0));
                    }
                }
                None => {
                    let level = needs.iter().filter_map(|n| memo.get(n.as_str())).map(|l| l + 1).max().unwrap_or(0);
                    memo.insert(id, level);
                    visiting.remove(id);
                    stack.pop();
                }
            }
        }
    }
    memo
}

struct Planner<'w> {
    workflow: &'w Workflow,
    /// The agents by id.
    index: HashMap<&'w str, &'w Agent>,
    diagnostics: Vec<Diagnostic>,
    upstream: HashMap<String, Vec<String>>,
    builtins: Arc<Builtins>,
}

impl<'w> Planner<'w> {
    fn origin(&self, path: Vec<Seg>) -> Origin {
        Origin { source: self.workflow.source.clone(), path }
    }

    fn inputs(&mut self, given: &Inputs) -> Vec<PlanInput> {
        let mut resolved = Vec::new();
        for decl in &self.workflow.inputs {
            match (given.get(&decl.name), &decl.default) {
                (Some(value), _) => {
                    resolved.push(PlanInput { name: decl.name.clone(), value: value.clone(), default: false })
                }
                (None, Some(value)) => {
                    resolved.push(PlanInput { name: decl.name.clone(), value: value.clone(), default: true })
                }
                (None, None) => {
                    let at = self.origin(vec![Seg::key("inputs"), Seg::Key(decl.name.clone())]);
                    let mut diagnostic = Diagnostic::new(
                        format!("the input `{}` is required", decl.name),
                        key_location(&at),
                        format!("pass `--input {}=VALUE`, or give it a `default:`", decl.name),
                    );
                    if let Some(description) = &decl.description {
                        diagnostic = diagnostic.with_note(format!("`{}`: {description}", decl.name));
                    }
                    self.diagnostics.push(diagnostic);
                }
            }
        }
        let declared: Vec<&str> = self.workflow.inputs.iter().map(|i| i.name.as_str()).collect();
        for name in given.keys() {
            if declared.contains(&name.as_str()) {
                continue;
            }
            let at = self.origin(vec![Seg::key("inputs")]);
            let mut hint = did_you_mean(name, declared.iter().copied());
            if declared.is_empty() {
                push_sentence(
                    &mut hint,
                    &format!("this workflow declares no inputs; add `inputs: {{ {name}: {{}} }}` to use one"),
                );
            } else {
                push_sentence(&mut hint, &format!("the declared inputs are {}", crate::load::key_list(&declared)));
            }
            self.diagnostics.push(Diagnostic::new(format!("unknown input `{name}`"), key_location(&at), hint));
        }
        resolved
    }

    /// The agent keys `id` needs, directly or through others.
    fn upstream(&mut self, id: &str) -> Vec<String> {
        if let Some(found) = self.upstream.get(id) {
            return found.clone();
        }
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&str> =
            self.index.get(id).map(|a| a.needs.iter().map(String::as_str).collect()).unwrap_or_default();
        while let Some(next) = stack.pop() {
            if seen.insert(next.to_string())
                && let Some(agent) = self.index.get(next)
            {
                stack.extend(agent.needs.iter().map(String::as_str));
            }
        }
        let list: Vec<String> = seen.into_iter().collect();
        self.upstream.insert(id.to_string(), list.clone());
        list
    }

    /// The spec every instance of `agent` starts from: settings merged, no item, the
    /// prompt not rendered.
    fn base_spec(&mut self, agent: &Agent) -> AgentSpec {
        let defaults = &self.workflow.defaults;
        let tools = agent
            .tools
            .clone()
            .or_else(|| defaults.tools.clone())
            .unwrap_or_else(|| DEFAULT_TOOLS.iter().map(|t| t.to_string()).collect());
        let mut unique = Vec::new();
        for tool in tools {
            if !unique.contains(&tool) {
                unique.push(tool);
            }
        }
        let join = |a: &[String], b: &[String]| -> Vec<String> {
            let mut out: Vec<String> = a.to_vec();
            for item in b {
                if !out.contains(item) {
                    out.push(item.clone());
                }
            }
            out
        };
        let backend = agent.sandbox.backend.or(defaults.sandbox.backend).unwrap_or_default();
        let sandbox = SandboxSpec {
            backend,
            network: agent.sandbox.network.clone().or_else(|| defaults.sandbox.network.clone()).unwrap_or_default(),
            // An image only means something to the container backend.
            image: agent
                .sandbox
                .image
                .clone()
                .or_else(|| defaults.sandbox.image.clone())
                .filter(|_| backend == Backend::Container),
            read: join(&defaults.sandbox.read, &agent.sandbox.read),
            write: join(&defaults.sandbox.write, &agent.sandbox.write),
        };
        let permissions = PermissionsSpec {
            mode: agent.permissions.mode.or(defaults.permissions.mode),
            allow: join(&defaults.permissions.allow, &agent.permissions.allow),
            deny: join(&defaults.permissions.deny, &agent.permissions.deny),
            ask: join(&defaults.permissions.ask, &agent.permissions.ask),
        };
        let reads = match &agent.prompt {
            Some(prompt) => self.reads(agent, prompt),
            None => Vec::new(),
        };
        AgentSpec {
            id: agent.id.clone(),
            agent: agent.id.clone(),
            fan_out: None,
            model: agent.model.clone().or_else(|| defaults.model.clone()).or_else(|| self.workflow.model.clone()),
            tools: unique,
            sandbox,
            limits: agent.limits.or(defaults.limits).or(default_agent_limits()),
            model_settings: agent.model_settings.or(defaults.model_settings),
            permissions,
            needs: agent.needs.clone(),
            prompt: agent.prompt.as_ref().map(|template| Prompt::Deferred { template: template.clone(), reads }),
            uses: agent.uses.clone(),
            uses_source: None,
            skills: agent.skills.clone().or_else(|| defaults.skills.clone()),
            command_source: None,
            output_schema: agent.output.as_ref().map(|o| o.schema.clone()),
            continue_on_failure: agent.continue_on_failure,
            instructions: agent.instructions.or(defaults.instructions).unwrap_or(true),
            base: agent.base,
            expect: agent.expect.or(defaults.expect),
            start_from: Vec::new(),
            origin: Some(self.origin(vec![Seg::key("agents"), Seg::Key(agent.id.clone()), Seg::key("prompt")])),
        }
    }

    /// The agents a prompt reads (sorted); a bare `agents` reads every upstream agent.
    fn reads(&mut self, agent: &Agent, prompt: &str) -> Vec<String> {
        let refs = template::references(prompt).unwrap_or_default();
        let mut reads = BTreeSet::new();
        for reference in refs.iter().filter(|r| r.root() == "agents") {
            match reference.parts.get(1) {
                Some(id) => {
                    reads.insert(id.clone());
                }
                None => reads.extend(self.upstream(&agent.id)),
            }
        }
        reads.into_iter().collect()
    }

    fn agent(&mut self, agent: &Agent, inputs: &Map<String, Value>) -> Vec<PlanNode> {
        let base = self.base_spec(agent);
        let items = match &agent.for_each {
            None => return vec![PlanNode::Agent(self.finish(base, inputs))],
            Some(ForEach::List(items)) => items.clone(),
            Some(ForEach::Expr(text)) => {
                let for_each_path = vec![Seg::key("agents"), Seg::Key(agent.id.clone()), Seg::key("for_each")];
                let origin = self.origin(for_each_path);
                let Some((expr, offset)) = template::single_expression(text) else { return Vec::new() };
                let refs = template::expression_references(expr).unwrap_or_default();
                if let Some(source) = refs.iter().find(|r| r.root() == "agents").and_then(|r| r.parts.get(1)) {
                    return vec![PlanNode::DynamicFanOut(DynamicFanOut {
                        id: agent.id.clone(),
                        source: expr.to_string(),
                        source_agent: source.clone(),
                        needs: agent.needs.clone(),
                        as_name: agent.item_name().to_string(),
                        template: base,
                        inputs: inputs.clone(),
                        for_each_at: Some(origin),
                        builtins: self.builtins.clone(),
                    })];
                }
                let context = Value::Object(self.builtins.context(inputs));
                match template::eval(expr, &context) {
                    Ok(Value::Array(items)) => items,
                    // Text from `--input`: a JSON list; text with line breaks, one item per
                    // non-empty line (`git ls-files` output, where a name may hold a comma);
                    // else items separated by commas.
                    Ok(Value::String(list)) => match serde_json::from_str::<Vec<Value>>(&list) {
                        Ok(items) if list.trim_start().starts_with('[') => items,
                        _ => {
                            let separator = if list.trim().contains('\n') { '\n' } else { ',' };
                            list.split(separator).map(str::trim).filter(|s| !s.is_empty()).map(Value::from).collect()
                        }
                    },
                    Ok(other) => {
                        self.diagnostics.push(Diagnostic::new(
                            format!("`for_each` of `{}` needs a list, but `{expr}` is {}", agent.id, describe(&other)),
                            origin.locate(Some(text), Some((offset, expr.len()))),
                            "give a list, or text with items separated by commas or line breaks",
                        ));
                        return Vec::new();
                    }
                    Err(e) => {
                        self.diagnostics.push(render_diagnostic(
                            &format!("`for_each` of `{}`", agent.id),
                            &origin,
                            text,
                            &template::TemplateError { offset: offset + e.offset, ..e },
                        ));
                        return Vec::new();
                    }
                }
            }
        };
        let name = agent.item_name().to_string();
        fan_out_ids(&agent.id, &items)
            .into_iter()
            .zip(items)
            .enumerate()
            .map(|(index, (id, item))| {
                let mut spec = base.clone();
                spec.id = id;
                spec.fan_out = Some(FanOutItem { index, as_name: name.clone(), item });
                PlanNode::Agent(self.finish(spec, inputs))
            })
            .collect()
    }

    /// Renders the prompt of `spec` if it reads no agents.
    fn finish(&mut self, spec: AgentSpec, inputs: &Map<String, Value>) -> AgentSpec {
        match prerender(spec, inputs, &self.builtins) {
            Ok(spec) => spec,
            Err(failed) => {
                let (spec, diagnostic) = *failed;
                self.diagnostics.push(diagnostic);
                spec
            }
        }
    }
}

type PrerenderError = Box<(AgentSpec, Diagnostic)>;

/// Renders a deferred prompt that reads no agents, with the inputs, built-ins and the item.
fn prerender(
    mut spec: AgentSpec,
    inputs: &Map<String, Value>,
    builtins: &Builtins,
) -> Result<AgentSpec, PrerenderError> {
    let Some(Prompt::Deferred { template, reads }) = &spec.prompt else { return Ok(spec) };
    if !reads.is_empty() {
        return Ok(spec);
    }
    let context = variables(&spec, inputs, builtins, None);
    match template::render(template, &context) {
        Ok(text) => {
            spec.prompt = Some(Prompt::Rendered { text });
            Ok(spec)
        }
        Err(e) => {
            let diagnostic = match &spec.origin {
                Some(origin) => render_diagnostic(&format!("the prompt of `{}`", spec.id), origin, template, &e),
                None => Diagnostic::new(
                    format!("cannot render the prompt of `{}`: {}", spec.id, e.message),
                    Location { file: String::new(), line: 1, column: 1, len: 1, source_line: String::new() },
                    "check the names the prompt reads",
                ),
            };
            Err(Box::new((spec, diagnostic)))
        }
    }
}

/// The template variables of `spec`: inputs, built-ins, the item, and `agents` when given.
fn variables(spec: &AgentSpec, inputs: &Map<String, Value>, builtins: &Builtins, agents: Option<Value>) -> Value {
    let mut vars = builtins.context(inputs);
    if let Some(agents) = agents {
        vars.insert("agents".to_string(), agents);
    }
    if let Some(fan_out) = &spec.fan_out {
        vars.insert(fan_out.as_name.clone(), fan_out.item.clone());
    }
    Value::Object(vars)
}

fn render_diagnostic(what: &str, origin: &Origin, text: &str, e: &template::TemplateError) -> Diagnostic {
    let hint = if e.message.starts_with("`pr") {
        "`pr` has a value only in a pull-request run (`GITHUB_EVENT_NAME` `pull_request` or \
         `pull_request_target` with `GITHUB_EVENT_PATH`) or with `--diff-base REV`; guard optional uses with \
         `{% if pr is defined %}`"
    } else {
        "every name a template reads must have a value: check the inputs given, the item, and the earlier agents' \
         results"
    };
    Diagnostic::new(
        format!("cannot render {what}: {}", e.message),
        origin.locate(Some(text), Some((e.offset, e.len))),
        hint,
    )
}

fn key_location(origin: &Origin) -> Location {
    match origin.source.tree.find(&origin.path) {
        Some((_, Some(key_span))) => origin.source.file.span(key_span),
        Some((node, None)) => origin.source.file.span(node.span),
        None => origin.source.file.at(1, 0, 1),
    }
}

fn describe(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the text `{}`", crate::yaml::shorten(s)),
        Value::Array(_) => "a list".to_string(),
        Value::Object(_) => "an object".to_string(),
    }
}

/// The ids of the instances of a fan-out of `agent` over `items` (see the module docs).
pub fn fan_out_ids(agent: &str, items: &[Value]) -> Vec<String> {
    let mut used: HashSet<String> = HashSet::new();
    let mut ids = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let slug = slug(item);
        let base = if slug.is_empty() { index.to_string() } else { slug };
        let mut candidate = base.clone();
        if used.contains(&candidate) {
            candidate = format!("{base}-{index}");
            let mut n = 2;
            while used.contains(&candidate) {
                candidate = format!("{base}-{index}-{n}");
                n += 1;
            }
        }
        used.insert(candidate.clone());
        ids.push(format!("{agent}/{candidate}"));
    }
    ids
}

fn slug(item: &Value) -> String {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    let text = match item {
        Value::Object(map) => ["id", "name", "path", "title", "file"]
            .iter()
            .find_map(|k| map.get(*k).and_then(scalar).filter(|s| !s.trim().is_empty())),
        other => scalar(other),
    };
    let Some(text) = text else { return String::new() };
    let mut out = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() || c == '_' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let trimmed: String = out.trim_matches('-').chars().take(MAX_SLUG).collect();
    trimmed.trim_end_matches('-').to_string()
}

/// Expands a dynamic fan-out once its source agent is done: `source_output` is that
/// agent's structured output. The expression must give a list; each item becomes one
/// agent (ids as the module docs describe).
// A diagnostic is a cold, once-per-run error value: not worth a box in the API.
#[allow(clippy::result_large_err)]
pub fn expand_dynamic(node: &DynamicFanOut, source_output: &Value) -> Result<Vec<AgentSpec>, Diagnostic> {
    let mut agents = Map::new();
    agents.insert(node.source_agent.clone(), serde_json::json!({ "output": source_output }));
    let mut context = node.builtins.context(&node.inputs);
    context.insert("agents".to_string(), Value::Object(agents));
    let context = Value::Object(context);
    let at = || match &node.for_each_at {
        Some(origin) => origin.locate(None, None),
        None => Location { file: String::new(), line: 1, column: 1, len: 1, source_line: String::new() },
    };
    let value = template::eval(&node.source, &context).map_err(|e| {
        Diagnostic::new(
            format!("cannot expand `for_each` of `{}`: {}", node.id, e.message),
            at(),
            format!("make the output schema of `{}` require that field", node.source_agent),
        )
    })?;
    let Value::Array(items) = value else {
        return Err(Diagnostic::new(
            format!("`for_each` of `{}` needs a list, but `{}` is {}", node.id, node.source, describe(&value)),
            at(),
            format!("declare that field with `type: array` in the output schema of `{}`", node.source_agent),
        ));
    };
    let mut specs = Vec::with_capacity(items.len());
    for (index, (id, item)) in fan_out_ids(&node.id, &items).into_iter().zip(items).enumerate() {
        let mut spec = node.template.clone();
        spec.id = id;
        spec.fan_out = Some(FanOutItem { index, as_name: node.as_name.clone(), item });
        specs.push(prerender(spec, &node.inputs, &node.builtins).map_err(|failed| failed.1)?);
    }
    Ok(specs)
}

/// The results of finished agents, for rendering deferred prompts.
#[derive(Debug, Clone, Default)]
pub struct RunContext {
    inputs: Map<String, Value>,
    agents: BTreeMap<String, Recorded>,
    builtins: Arc<Builtins>,
}

#[derive(Debug, Clone)]
enum Recorded {
    One(Value),
    Many(BTreeMap<usize, Value>),
}

impl RunContext {
    /// An empty context for a run of `plan`: its inputs, no results yet.
    pub fn new(plan: &Plan) -> RunContext {
        let agents = plan.fan_outs.iter().map(|id| (id.clone(), Recorded::Many(BTreeMap::new()))).collect();
        RunContext { inputs: plan.input_values(), agents, builtins: Arc::new(plan.builtins.clone()) }
    }

    /// Records the result of the agent `spec`: its final text and structured output.
    /// Templates then see `agents.<agent>.text` / `.output`, or, for a fan-out, one
    /// `{ id, item, text, output }` per instance, in item order.
    pub fn record(&mut self, spec: &AgentSpec, text: &str, output: Option<&Value>) {
        let output = output.cloned().unwrap_or(Value::Null);
        match &spec.fan_out {
            None => {
                self.agents
                    .insert(spec.agent.clone(), Recorded::One(serde_json::json!({ "text": text, "output": output })));
            }
            Some(fan_out) => {
                let entry = self.agents.entry(spec.agent.clone()).or_insert_with(|| Recorded::Many(BTreeMap::new()));
                if let Recorded::One(_) = entry {
                    *entry = Recorded::Many(BTreeMap::new());
                }
                if let Recorded::Many(list) = entry {
                    list.insert(
                        fan_out.index,
                        serde_json::json!({ "id": spec.id, "item": fan_out.item, "text": text, "output": output }),
                    );
                }
            }
        }
    }

    /// The `agents` template variable.
    pub fn agents(&self) -> Value {
        let map = self
            .agents
            .iter()
            .map(|(id, recorded)| {
                let value = match recorded {
                    Recorded::One(value) => value.clone(),
                    Recorded::Many(list) => Value::Array(list.values().cloned().collect()),
                };
                (id.clone(), value)
            })
            .collect();
        Value::Object(map)
    }
}

/// The final prompt of `spec`: the rendered text, or its template rendered with the
/// inputs, its item and the results in `context`. `Ok(None)` when the agent has no
/// prompt of its own (`uses:` supplies it).
// A diagnostic is a cold, once-per-run error value: not worth a box in the API.
#[allow(clippy::result_large_err)]
pub fn render_prompt(spec: &AgentSpec, context: &RunContext) -> Result<Option<String>, Diagnostic> {
    match &spec.prompt {
        None => Ok(None),
        Some(Prompt::Rendered { text }) => Ok(Some(text.clone())),
        Some(Prompt::Deferred { template, .. }) => {
            let vars = variables(spec, &context.inputs, &context.builtins, Some(context.agents()));
            template::render(template, &vars).map(Some).map_err(|e| match &spec.origin {
                Some(origin) => render_diagnostic(&format!("the prompt of `{}`", spec.id), origin, template, &e),
                None => Diagnostic::new(
                    format!("cannot render the prompt of `{}`: {}", spec.id, e.message),
                    Location { file: String::new(), line: 1, column: 1, len: 1, source_line: String::new() },
                    "check the names the prompt reads",
                ),
            })
        }
    }
}

fn is_true(b: &bool) -> bool {
    *b
}

/// Renders the `integrate.message` template for one agent: `agent` is an object with
/// `id`, `text`, `output` and `item` (null when absent). The error says what failed.
pub fn render_integrate_message(template: &str, agent: &Value) -> Result<String, String> {
    let context = serde_json::json!({ "agent": agent });
    template::render(template, &context).map_err(|e| e.message)
}

fn is_full(network: &NetworkSetting) -> bool {
    *network == NetworkSetting::Full
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn fan_out_ids_are_slugs() {
        let items =
            [json!("crates/core"), json!("Crates Core"), json!(7), json!({ "name": "CLI" }), json!([1]), json!("")];
        assert_eq!(
            fan_out_ids("fix", &items),
            ["fix/crates-core", "fix/crates-core-1", "fix/7", "fix/cli", "fix/4", "fix/5"]
        );
    }

    #[test]
    fn slugs_are_short_and_clean() {
        assert_eq!(slug(&json!("--Hello, World!--")), "hello-world");
        assert_eq!(slug(&json!("a".repeat(100))).len(), MAX_SLUG);
        assert_eq!(slug(&json!("émile_x")), "mile_x");
        assert_eq!(slug(&json!({ "path": "src/lib.rs", "name": "" })), "src-lib-rs");
    }
}
