//! Sub-agent settings and agent definition files.
//!
//! - [`Subagents`]: the workflow's top-level `subagents:` key, the limits of the
//!   `Agent` tool (nesting depth, how many run at once, how many start in a run).
//! - [`parse_agent_file`]: one agent definition in Claude Code's format, Markdown with
//!   YAML front matter (`name`, `description`, `tools`, `disallowedTools`, `model`,
//!   `maxTurns`, `permissionMode`; the body is the system prompt). It takes the file's
//!   contents, so the coordinator decides where they come from (the base commit, or the
//!   checked-out files when the repository's configuration is trusted). It accepts
//!   exactly what Claude Code accepts (front matter read by [`crate::frontmatter`]; only
//!   a missing `name` or `description` refuses a file); everything else that is off is a
//!   warning, so files written for any Claude Code version load.
//! - [`AgentFiles`]: the definitions of a repository with a defined precedence on name
//!   clashes (`.orch/agents/`, then `.claude/agents/`, then plugins; see [`Origin`]), and
//!   their lookup by name for `uses:`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::{AgentSpec, Plan, PlanNode};
use crate::schema::{Agent, KNOWN_TOOLS, PermissionMode, Workflow, is_known_tool};

/// `subagents:` in a workflow: limits of the `Agent` tool for the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Subagents {
    /// Levels of sub-agents below a workflow agent (default 3).
    pub max_depth: u32,
    /// Sub-agents running at once, in the whole run (default 10).
    pub max_concurrent: u32,
    /// Sub-agents started in the whole run (default 200).
    pub max_total: u32,
}

impl Default for Subagents {
    fn default() -> Self {
        Self { max_depth: 3, max_concurrent: 10, max_total: 200 }
    }
}

impl Subagents {
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }

    /// The first field that is out of range, with the message and hint to show.
    pub(crate) fn problem(&self) -> Option<(&'static str, String, &'static str)> {
        if self.max_depth == 0 {
            return Some((
                "max_depth",
                "`subagents.max_depth` is 0".into(),
                "give at least 1; to stop agents from starting sub-agents, leave `Agent` out of their tools",
            ));
        }
        if self.max_concurrent == 0 {
            return Some((
                "max_concurrent",
                "`subagents.max_concurrent` is 0".into(),
                "give how many sub-agents may run at once, at least 1 (default 10)",
            ));
        }
        if self.max_total == 0 {
            return Some((
                "max_total",
                "`subagents.max_total` is 0".into(),
                "give how many sub-agents a run may start, at least 1 (default 200)",
            ));
        }
        None
    }
}

/// Where a repository keeps agent definition files, searched in this order.
pub const AGENT_DIRS: [&str; 2] = [".orch/agents", ".claude/agents"];

/// Front matter keys that only change how Claude Code shows an agent.
const PRESENTATIONAL: [&str; 2] = ["color", "icon"];

/// Keys orch reads.
const KNOWN_KEYS: [&str; 7] =
    ["name", "description", "tools", "disallowedTools", "model", "maxTurns", "permissionMode"];

/// Keys Claude Code documents that orch does not act on (yet); ignored without a warning
/// each, but listed once so that a user sees they have no effect.
const CLAUDE_ONLY_KEYS: [&str; 10] = [
    "skills",
    "mcpServers",
    "hooks",
    "memory",
    "background",
    "effort",
    "isolation",
    "initialPrompt",
    "version",
    "author",
];

/// Where a definition comes from; on a name clash the earlier kind wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// `.orch/agents/`.
    Orch,
    /// `.claude/agents/`.
    Claude,
    /// An agent that a plugin ships (`<plugin>/agents/x.md`).
    Plugin,
}

impl Origin {
    /// The kind of definition at `path`: a file under `.orch/agents/` is orch's; one in
    /// an `agents/` directory elsewhere (`plugins/<plugin>/agents/x.md`) is a plugin's;
    /// anything else is read as a project agent of Claude Code.
    pub fn of(path: &str) -> Origin {
        let path = path.strip_prefix("./").unwrap_or(path);
        if path.starts_with(".orch/agents/") {
            Origin::Orch
        } else if path.starts_with(".claude/agents/") || !path.contains("/agents/") {
            Origin::Claude
        } else {
            Origin::Plugin
        }
    }

    fn label(self) -> &'static str {
        match self {
            Origin::Orch => ".orch/agents",
            Origin::Claude => ".claude/agents",
            Origin::Plugin => "a plugin",
        }
    }
}

/// One agent definition, as read from its file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentFile {
    pub name: String,
    pub description: String,
    /// `None`: every tool of the agent that runs it.
    pub tools: Option<Vec<String>>,
    /// Tools taken away from the agent's tools (`disallowedTools`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    /// `None`: the model of the agent that runs it (`inherit`, or not given).
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub permission_mode: Option<PermissionMode>,
    /// The Markdown body: the system prompt.
    pub prompt: String,
    /// The file it came from.
    pub source: String,
    pub origin: Origin,
}

/// An agent definition file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{file}: {message}")]
pub struct AgentFileError {
    pub file: String,
    pub message: String,
}

fn bad(source: &str, message: impl Into<String>) -> AgentFileError {
    AgentFileError { file: source.to_string(), message: message.into() }
}

/// Claude Code's model aliases, as model ids; `None` for `inherit`.
pub(crate) fn model_id(model: &str) -> Option<String> {
    orch_types::model::model_id(model)
}

fn permission_mode(text: &str) -> Option<PermissionMode> {
    text.parse().ok()
}

/// The file name without directories and `.md`.
fn stem(source: &str) -> &str {
    let name = source.rsplit('/').next().unwrap_or(source);
    name.strip_suffix(".md").unwrap_or(name)
}

/// Tool names as orch knows them: `Task` becomes `Agent`, `*` means every tool (`None`),
/// and names orch does not have are left out with a warning.
fn known_tools(list: Vec<String>, key: &str, source: &str, warnings: &mut Vec<String>) -> Option<Vec<String>> {
    if list.iter().any(|t| t == "*") {
        return None;
    }
    let mut kept = Vec::new();
    for tool in list {
        // Claude Code's older name for the Agent tool.
        let tool = if tool == "Task" { "Agent".to_string() } else { tool };
        if is_known_tool(&tool) {
            if !kept.contains(&tool) {
                kept.push(tool);
            }
        } else {
            warnings.push(format!(
                "{source}: `{key}` names `{tool}`, which is not a tool orch has ({}); it is left out",
                KNOWN_TOOLS.join(", ")
            ));
        }
    }
    Some(kept)
}

/// Parses one agent definition file; `source` is its path in the repository (it names
/// the file in errors and warnings, and decides its [`Origin`]). The warnings say what
/// was ignored.
///
/// What is accepted is what Claude Code accepts: the front matter is read with its
/// leniency ([`crate::frontmatter`]), and a file is refused only when it has no `name`
/// or no `description` as text (which includes front matter that does not parse even
/// after re-quoting). Everything else that is wrong is a warning. A plugin's file is
/// treated as Claude Code treats plugin agents: the name falls back to the file name,
/// the description to a placeholder, and `permissionMode` is ignored.
pub fn parse_agent_file(text: &str, source: &str) -> Result<(AgentFile, Vec<String>), AgentFileError> {
    let origin = Origin::of(source);
    let front = crate::frontmatter::parse(text);
    let mut warnings = Vec::new();
    let map = &front.fields;
    let plugin = origin == Origin::Plugin;
    if let Some(problem) = &front.problem {
        if !plugin {
            return Err(bad(
                source,
                format!(
                    "{problem}, so it has no `name` (Claude Code does not load it either); put the `description` \
                     on one line or in quotes, or indent its continuation lines"
                ),
            ));
        }
        warnings.push(format!("{source}: {problem}; the agent is loaded with its file name and no settings"));
    }
    let name = match map.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        _ if plugin => stem(source).to_string(),
        _ if !front.found && text.starts_with("---") => {
            return Err(bad(source, "the front matter never ends; close it with a `---` line"));
        }
        _ if !front.found => {
            return Err(bad(
                source,
                "no front matter; start the file with a `---` line, then `name:` and `description:`",
            ));
        }
        _ => return Err(bad(source, "`name` is missing or is not text; give the agent's name, e.g. `name: reviewer`")),
    };
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c)) {
        warnings.push(format!(
            "{source}: the agent name `{name}` has characters other than letters, digits, `-` and `_`; refer to it \
             exactly as written"
        ));
    }
    let description = match map.get("description") {
        // Claude Code turns the two characters `\n` into a line break.
        Some(Value::String(s)) if !s.is_empty() => s.replace("\\n", "\n"),
        _ if plugin => format!("Agent from the plugin of {source}"),
        _ => {
            return Err(bad(source, "`description` is missing or is not text; say when this agent should be used"));
        }
    };
    let tools = match map.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::String(_) | Value::Array(_)) => crate::frontmatter::name_list(map, "tools")
            .and_then(|list| known_tools(list, "tools", source, &mut warnings)),
        Some(other) => {
            warnings.push(format!(
                "{source}: `tools: {other}` is neither a comma-separated list nor a list; the agent gets no tools"
            ));
            Some(Vec::new())
        }
    };
    let disallowed_tools = crate::frontmatter::name_list(map, "disallowedTools")
        .map(|list| list.into_iter().map(|t| if t == "Task" { "Agent".to_string() } else { t }).collect())
        .unwrap_or_default();
    let model = match map.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => model_id(m.trim()),
        Some(other) => {
            warnings.push(format!("{source}: `model: {other}` is not a model name; the caller's model applies"));
            None
        }
    };
    let max_turns = match map.get("maxTurns") {
        None | Some(Value::Null) => None,
        Some(v) => {
            let n = match v {
                Value::String(s) => s.trim().parse::<u64>().ok(),
                other => other.as_u64(),
            };
            match n.and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0) {
                Some(n) => Some(n),
                None => {
                    warnings.push(format!("{source}: `maxTurns: {v}` is not a whole number above 0; it is ignored"));
                    None
                }
            }
        }
    };
    let permission_mode = match crate::frontmatter::text(map, "permissionMode") {
        None => None,
        Some(_) if plugin => {
            warnings.push(format!(
                "{source}: a plugin's agent cannot set `permissionMode` (as in Claude Code); the caller's mode applies"
            ));
            None
        }
        Some(text) => match permission_mode(text.trim()) {
            Some(mode) => Some(mode),
            None => {
                warnings.push(format!(
                    "{source}: `permissionMode: {text}` is not one orch knows (default, acceptEdits, plan, \
                     dontAsk, bypassPermissions); the caller's mode applies"
                ));
                None
            }
        },
    };
    let ignored: Vec<&str> =
        map.keys().map(String::as_str).filter(|k| !KNOWN_KEYS.contains(k) && !PRESENTATIONAL.contains(k)).collect();
    if !ignored.is_empty() {
        let (claude, other): (Vec<&str>, Vec<&str>) = ignored.into_iter().partition(|k| CLAUDE_ONLY_KEYS.contains(k));
        if !claude.is_empty() {
            warnings.push(format!("{source}: orch does not act on `{}` in agent files; ignored", claude.join("`, `")));
        }
        for key in other {
            warnings.push(format!("{source}: the front matter key `{key}` is not one orch uses; it is ignored"));
        }
    }
    let prompt = front.body.trim().to_string();
    if prompt.is_empty() {
        warnings.push(format!("{source}: the body is empty, so the agent runs with no instructions of its own"));
    }
    let file = AgentFile {
        name,
        description: description.trim().to_string(),
        tools,
        disallowed_tools,
        model,
        max_turns,
        permission_mode,
        prompt,
        source: source.to_string(),
        origin,
    };
    Ok((file, warnings))
}

/// Two definitions with one name: which one is used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Clash {
    pub name: String,
    /// The file whose definition is used.
    pub used: String,
    /// The file whose definition is not.
    pub ignored: String,
}

/// The agent definitions of a repository.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentFiles {
    /// The definitions in use, one per name.
    pub agents: Vec<AgentFile>,
    /// Names defined more than once, and which file won.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clashes: Vec<Clash>,
    /// What was ignored or could not be read, one line each.
    pub warnings: Vec<String>,
    /// The files that could not be used at all (also among the warnings).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rejected: Vec<AgentFileError>,
}

impl AgentFiles {
    /// Reads `files` (path and contents). Only `*.md` files count. A file that does
    /// not parse is a warning. Of two definitions with the same name, the one from the
    /// stronger [`Origin`] wins (`.orch/agents` over `.claude/agents` over a plugin);
    /// between two of the same origin, the one that comes first in `files` (callers
    /// pass each directory sorted by path). Every clash is recorded in `clashes` and
    /// warned about.
    pub fn from_files(files: &[(String, String)]) -> AgentFiles {
        let mut out = AgentFiles::default();
        let mut parsed = Vec::new();
        for (path, text) in files {
            if !path.ends_with(".md") {
                continue;
            }
            match parse_agent_file(text, path) {
                Ok((file, warnings)) => {
                    out.warnings.extend(warnings);
                    parsed.push(file);
                }
                Err(e) => {
                    out.warnings.push(format!("{e}; the file is ignored"));
                    out.rejected.push(e);
                }
            }
        }
        // Stable: within one origin, the callers' order stands.
        parsed.sort_by_key(|f| f.origin);
        for file in parsed {
            if let Some(used) = out.agents.iter().find(|a| a.name == file.name) {
                let rule = if used.origin == file.origin {
                    "the first by path wins".to_string()
                } else {
                    format!("{} wins over {}", used.origin.label(), file.origin.label())
                };
                out.warnings.push(format!(
                    "{}: the agent `{}` is also defined in {}, which is used ({rule}); this one is ignored",
                    file.source, file.name, used.source
                ));
                out.clashes.push(Clash { name: file.name, used: used.source.clone(), ignored: file.source });
            } else {
                out.agents.push(file);
            }
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&AgentFile> {
        self.agents.iter().find(|a| a.name == name)
    }

    /// Every `uses:` of `workflow` that names no definition, as an error at the `uses:`
    /// key: with the closest name, the names there are, and the file that would have
    /// defined it when that file was rejected.
    pub fn check_workflow(&self, workflow: &Workflow) -> Vec<crate::Diagnostic> {
        use crate::yaml::Seg;
        let known: Vec<&str> = self.agents.iter().map(|a| a.name.as_str()).collect();
        let mut out = Vec::new();
        for agent in &workflow.agents {
            let Some(name) = &agent.uses else { continue };
            if known.contains(&name.as_str()) {
                continue;
            }
            let path = [Seg::key("agents"), Seg::key(&agent.id), Seg::key("uses")];
            let location = workflow.source.locate(&path);
            let mut hint = crate::load::did_you_mean(name, known.iter().copied());
            if let Some(e) = self.rejected.iter().find(|e| stem(&e.file) == name.as_str()) {
                crate::load::push_sentence(&mut hint, &format!("{} is not loaded: {}.", e.file, e.message));
            }
            let listed = if known.is_empty() { "none".to_string() } else { known.join(", ") };
            crate::load::push_sentence(
                &mut hint,
                &format!(
                    "the agent definitions (<name>.md in {}, at the commit the run reads) are: {listed}",
                    AGENT_DIRS.join(" or ")
                ),
            );
            out.push(crate::Diagnostic::new(
                format!("agent `{}` says `uses: {name}`, but no agent definition has that name", agent.id),
                location,
                hint,
            ));
        }
        out
    }

    /// Resolves every `uses:` of `plan` (made from `workflow`) against these definitions,
    /// so that the plan shows each agent's effective tools and model and the file they
    /// come from (what `orch plan` prints). Returns the ids of the agents whose `uses:`
    /// names no definition; their specs are left as they are.
    pub fn apply_to_plan(&self, workflow: &Workflow, plan: &mut Plan) -> Vec<String> {
        let mut missing = Vec::new();
        for node in plan.stages.iter_mut().flat_map(|s| s.agents.iter_mut()) {
            let PlanNode::Agent(spec) = node else { continue };
            let Some(agent) = workflow.agents.iter().find(|a| a.id == spec.agent) else { continue };
            let Some(name) = &agent.uses else { continue };
            match self.get(name) {
                Some(file) => Uses::resolve(agent, file).apply(spec),
                None => {
                    if !missing.contains(&agent.id) {
                        missing.push(agent.id.clone());
                    }
                }
            }
        }
        missing
    }
}

/// What an agent definition gives a workflow agent that says `uses: <name>`: the
/// definition's settings, except those the workflow agent sets itself.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Uses {
    pub name: String,
    /// Replaces the static part of the agent's system prompt.
    pub system_prompt: String,
    /// The task when the workflow agent has no `prompt:` of its own.
    pub task: String,
    pub tools: Option<Vec<String>>,
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub permission_mode: Option<PermissionMode>,
    /// Tools the definition takes away (`disallowedTools`), when it decides the tools.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub disallowed_tools: Vec<String>,
    /// The file of the definition.
    pub source: String,
}

impl Uses {
    /// Resolves `file` for the workflow agent `agent`: its own `tools`, `model`,
    /// `limits.max_turns` and `permissions.mode` win over the definition's.
    pub fn resolve(agent: &Agent, file: &AgentFile) -> Uses {
        Uses {
            name: file.name.clone(),
            system_prompt: file.prompt.clone(),
            task: format!(
                "Do the work your instructions describe, in this repository. Your role: {}",
                file.description
            ),
            tools: if agent.tools.is_some() { None } else { file.tools.clone() },
            disallowed_tools: if agent.tools.is_some() { Vec::new() } else { file.disallowed_tools.clone() },
            source: file.source.clone(),
            model: if agent.model.is_some() { None } else { file.model.clone() },
            max_turns: if agent.limits.max_turns.is_some() { None } else { file.max_turns },
            permission_mode: if agent.permissions.mode.is_some() { None } else { file.permission_mode },
        }
    }

    /// Applies what this resolution sets to `spec` (a planned instance of the agent).
    pub fn apply(&self, spec: &mut AgentSpec) {
        if let Some(tools) = &self.tools {
            spec.tools = tools.clone();
        }
        // `disallowedTools` may name a tool by an alias (`Task`) or with a rule (`Bash(rm:*)`
        // takes nothing away: only a bare name removes the tool).
        let canonical = |t: &str| orch_types::tools::lookup(t).map_or(t.to_string(), |info| info.name.to_string());
        let denied: Vec<String> = self.disallowed_tools.iter().map(|t| canonical(t.trim())).collect();
        spec.tools.retain(|t| !denied.contains(&canonical(t)));
        spec.uses_source = Some(self.source.clone());
        if let Some(model) = &self.model {
            spec.model = Some(model.clone());
        }
        if let Some(turns) = self.max_turns {
            spec.limits.max_turns = Some(turns);
        }
        if let Some(mode) = self.permission_mode {
            spec.permissions.mode = Some(mode);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REVIEWER: &str = "---\nname: code-reviewer\ndescription: Reviews a change for bugs. Use after edits.\n\
tools: Read, Grep, Glob, NotebookRead\nmodel: inherit\ncolor: purple\nmaxTurns: 12\npermissionMode: plan\n\
futureKey: 1\n---\n\nYou review code.\n\nBe brief.\n";

    #[test]
    fn reads_a_claude_code_file() {
        let (file, warnings) = parse_agent_file(REVIEWER, ".claude/agents/reviewer.md").unwrap();
        assert_eq!(file.name, "code-reviewer");
        assert_eq!(file.tools.as_deref(), Some(&["Read".to_string(), "Grep".into(), "Glob".into()][..]));
        assert_eq!(file.model, None);
        assert_eq!(file.max_turns, Some(12));
        assert_eq!(file.permission_mode, Some(PermissionMode::Plan));
        assert_eq!(file.prompt, "You review code.\n\nBe brief.");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("`NotebookRead`"), "{warnings:?}");
        assert!(warnings[1].contains("`futureKey`"), "{warnings:?}");
    }

    #[test]
    fn tools_as_a_list_and_model_aliases() {
        let text = "---\nname: a\ndescription: d\ntools: [Bash, Task]\nmodel: haiku\n---\nbody\n";
        let (file, warnings) = parse_agent_file(text, "a.md").unwrap();
        assert_eq!(file.tools, Some(vec!["Bash".to_string(), "Agent".into()]));
        assert_eq!(file.model.as_deref(), Some("claude-haiku-4-5"));
        assert!(warnings.is_empty());
        let (file, _) = parse_agent_file("---\nname: b\ndescription: d\n---\nbody", "b.md").unwrap();
        assert_eq!((file.tools, file.model), (None, None));
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let err = |t: &str| parse_agent_file(t, "x.md").unwrap_err().to_string();
        assert!(err("no front matter").contains("no front matter"));
        assert!(err("---\nname: a\n").contains("never ends"));
        assert!(err("---\ndescription: d\n---\nbody").contains("`name` is missing"));
        assert!(err("---\nname: 7\ndescription: d\n---\nbody").contains("`name` is missing or is not text"));
        assert!(err("---\nname: a\n---\nbody").contains("`description` is missing"));
        assert!(err("---\nname: a\ndescription: d\n<b>\nc: d\n---\nbody").contains("not valid YAML"));
    }

    #[test]
    fn what_claude_code_tolerates_is_a_warning() {
        let warned = |t: &str| {
            let (file, warnings) = parse_agent_file(t, "x.md").unwrap();
            assert_eq!(warnings.len(), 1, "{warnings:?}");
            (file, warnings[0].clone())
        };
        let (file, w) = warned("---\nname: a\ndescription: d\nmaxTurns: 0\n---\nbody");
        assert_eq!((file.max_turns, w.contains("maxTurns")), (None, true));
        let (file, w) = warned("---\nname: a b\ndescription: d\n---\nbody");
        assert_eq!((file.name.as_str(), w.contains("exactly as written")), ("a b", true));
        let (file, w) = warned("---\nname: a\ndescription: d\n---\n");
        assert_eq!((file.prompt.as_str(), w.contains("body is empty")), ("", true));
        let (file, w) = warned("---\nname: a\ndescription: d\ntools: 3\n---\nb");
        assert_eq!((file.tools, w.contains("no tools")), (Some(vec![]), true));
        let (file, _) =
            parse_agent_file("---\nname: a\ndescription: d\nmaxTurns: \"5\"\nmodel: Inherit\n---\nb", "x.md").unwrap();
        assert_eq!((file.max_turns, file.model), (Some(5), None));
    }

    #[test]
    fn the_first_definition_of_a_name_wins() {
        let files = vec![
            (".orch/agents/a.md".to_string(), "---\nname: a\ndescription: first\n---\none".to_string()),
            (".claude/agents/a.md".to_string(), "---\nname: a\ndescription: second\n---\ntwo".to_string()),
            (".claude/agents/notes.txt".to_string(), "not an agent".to_string()),
            (".claude/agents/broken.md".to_string(), "nothing".to_string()),
        ];
        let found = AgentFiles::from_files(&files);
        assert_eq!(found.agents.len(), 1);
        assert_eq!(found.get("a").unwrap().description, "first");
        assert_eq!(found.warnings.len(), 2, "{:?}", found.warnings);
    }

    #[test]
    fn uses_keeps_the_agents_own_keys() {
        let (file, _) = parse_agent_file(REVIEWER, "r.md").unwrap();
        let own = Agent { tools: Some(vec!["Read".into()]), ..Agent::default() };
        let uses = Uses::resolve(&own, &file);
        assert_eq!(uses.tools, None);
        assert_eq!(uses.max_turns, Some(12));
        assert_eq!(uses.permission_mode, Some(PermissionMode::Plan));
        let bare = Uses::resolve(&Agent::default(), &file);
        assert_eq!(bare.tools.as_ref().map(Vec::len), Some(3));
        assert!(bare.task.contains("Reviews a change"));
    }

    #[test]
    fn subagent_limits_must_be_positive() {
        assert!(Subagents::default().problem().is_none());
        let zero = Subagents { max_concurrent: 0, ..Subagents::default() };
        assert_eq!(zero.problem().unwrap().0, "max_concurrent");
    }
}
