//! Sub-agent settings and agent definition files.
//!
//! - [`Subagents`]: the workflow's top-level `subagents:` key, the limits of the
//!   `Agent` tool (nesting depth, how many run at once, how many start in a run).
//! - [`parse_agent_file`]: one agent definition in Claude Code's format, Markdown with
//!   YAML front matter (`name`, `description`, `tools`, `model`, `maxTurns`,
//!   `permissionMode`; the body is the system prompt). It takes the file's contents, so
//!   the coordinator decides where they come from (the base commit, or the checked-out
//!   files when the repository's configuration is trusted). Presentational keys such as
//!   `color` are ignored; other unknown keys and unknown tool names are warnings, so
//!   files written for newer Claude Code versions still load.
//! - [`AgentFiles`]: the definitions of a repository, `.orch/agents/` before
//!   `.claude/agents/`, and their lookup by name for `uses:`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plan::AgentSpec;
use crate::schema::{Agent, KNOWN_TOOLS, PermissionMode, is_known_tool};

/// `subagents:` in a workflow: limits of the `Agent` tool for the whole run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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

const KNOWN_KEYS: [&str; 6] = ["name", "description", "tools", "model", "maxTurns", "permissionMode"];

/// One agent definition, as read from its file.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentFile {
    pub name: String,
    pub description: String,
    /// `None`: every tool of the agent that runs it.
    pub tools: Option<Vec<String>>,
    /// `None`: the model of the agent that runs it (`inherit`, or not given).
    pub model: Option<String>,
    pub max_turns: Option<u32>,
    pub permission_mode: Option<PermissionMode>,
    /// The Markdown body: the system prompt.
    pub prompt: String,
    /// The file it came from.
    pub source: String,
}

/// An agent definition file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {message}")]
pub struct AgentFileError {
    pub file: String,
    pub message: String,
}

fn bad(source: &str, message: impl Into<String>) -> AgentFileError {
    AgentFileError { file: source.to_string(), message: message.into() }
}

/// Claude Code's model aliases, as model ids.
fn model_id(model: &str) -> Option<String> {
    let id = match model {
        "inherit" => return None,
        "sonnet" => "claude-sonnet-4-5",
        "opus" => "claude-opus-4-1",
        "haiku" => "claude-haiku-4-5",
        other => other,
    };
    Some(id.to_string())
}

fn permission_mode(text: &str) -> Option<PermissionMode> {
    text.parse().ok()
}

/// Parses one agent definition file; `source` names it in errors and warnings. The
/// warnings say what was ignored.
pub fn parse_agent_file(text: &str, source: &str) -> Result<(AgentFile, Vec<String>), AgentFileError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(bad(source, "no front matter; start the file with a `---` line, then `name:` and `description:`"));
    }
    let mut front = String::new();
    let mut body = None;
    let mut consumed = 0;
    for line in lines {
        consumed += 1;
        if line.trim_end() == "---" {
            body = Some(text.split_inclusive('\n').skip(consumed + 1).collect::<String>());
            break;
        }
        front.push_str(line);
    }
    let Some(body) = body else {
        return Err(bad(source, "the front matter never ends; close it with a `---` line"));
    };
    let node = match crate::yaml::parse(&front) {
        Ok((Some(node), _)) => node,
        Ok((None, _)) => {
            return Err(bad(source, "the front matter is empty; give at least `name:` and `description:`"));
        }
        Err(errors) => {
            let first = errors.first().map(|e| e.message.clone()).unwrap_or_default();
            return Err(bad(source, format!("the front matter is not valid YAML: {first}")));
        }
    };
    let map: BTreeMap<String, Value> = crate::de::from_node(&node, Vec::new(), None)
        .map_err(|e| bad(source, format!("the front matter must be a mapping of keys to values: {e}")))?;
    let mut warnings = Vec::new();
    let text_of = |key: &str| -> Result<Option<String>, AgentFileError> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(bad(source, format!("`{key}` must be text, not {other}"))),
        }
    };
    let name = text_of("name")?.filter(|n| !n.trim().is_empty()).ok_or_else(|| bad(source, "`name` is missing"))?;
    let name = name.trim().to_string();
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(bad(source, format!("`name: {name}` may hold only letters, digits, `-` and `_`")));
    }
    let description = text_of("description")?
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| bad(source, "`description` is missing; say when this agent should be used"))?;
    let tools = match map.get("tools") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect()),
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .map(|v| v.as_str().map(|s| s.trim().to_string()))
                .collect::<Option<Vec<String>>>()
                .ok_or_else(|| bad(source, "`tools` must list tool names"))?,
        ),
        Some(other) => {
            return Err(bad(source, format!("`tools` must be a comma-separated list or a list, not {other}")));
        }
    };
    let tools = tools.map(|list: Vec<String>| {
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
                    "{source}: the tool `{tool}` is not one orch has ({}); it is left out",
                    KNOWN_TOOLS.join(", ")
                ));
            }
        }
        kept
    });
    let model = text_of("model")?.and_then(|m| model_id(m.trim()));
    let max_turns = match map.get("maxTurns") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64().and_then(|n| u32::try_from(n).ok()).filter(|&n| n > 0) {
            Some(n) => Some(n),
            None => return Err(bad(source, format!("`maxTurns` must be a whole number above 0, not {v}"))),
        },
    };
    let permission_mode = match text_of("permissionMode")? {
        None => None,
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
    for key in map.keys() {
        if !KNOWN_KEYS.contains(&key.as_str()) && !PRESENTATIONAL.contains(&key.as_str()) {
            warnings.push(format!("{source}: the front matter key `{key}` is not one orch uses; it is ignored"));
        }
    }
    let prompt = body.trim().to_string();
    if prompt.is_empty() {
        return Err(bad(source, "the body is empty; write the agent's system prompt below the front matter"));
    }
    let file = AgentFile {
        name,
        description: description.trim().to_string(),
        tools,
        model,
        max_turns,
        permission_mode,
        prompt,
        source: source.to_string(),
    };
    Ok((file, warnings))
}

/// The agent definitions of a repository.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AgentFiles {
    pub agents: Vec<AgentFile>,
    /// What was ignored or could not be read, one line each.
    pub warnings: Vec<String>,
}

impl AgentFiles {
    /// Reads `files` (path and contents, `.orch/agents/` first, then `.claude/agents/`,
    /// each sorted by path). Only `*.md` files count. A file that does not parse is a
    /// warning; of two definitions with the same name, the first one wins.
    pub fn from_files(files: &[(String, String)]) -> AgentFiles {
        let mut out = AgentFiles::default();
        for (path, text) in files {
            if !path.ends_with(".md") {
                continue;
            }
            match parse_agent_file(text, path) {
                Ok((file, warnings)) => {
                    out.warnings.extend(warnings);
                    if let Some(first) = out.agents.iter().find(|a| a.name == file.name) {
                        out.warnings.push(format!(
                            "{path}: the agent `{}` is already defined in {}; this one is ignored",
                            file.name, first.source
                        ));
                    } else {
                        out.agents.push(file);
                    }
                }
                Err(e) => out.warnings.push(format!("{e}; the file is ignored")),
            }
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&AgentFile> {
        self.agents.iter().find(|a| a.name == name)
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
        if let Some(model) = &self.model {
            spec.model = Some(model.clone());
        }
        if let Some(turns) = self.max_turns {
            spec.limits.max_turns = Some(turns);
        }
        if let Some(mode) = self.permission_mode {
            spec.permissions.mode = mode;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REVIEWER: &str = "---\nname: code-reviewer\ndescription: Reviews a change for bugs. Use after edits.\n\
tools: Read, Grep, Glob, WebFetch\nmodel: inherit\ncolor: purple\nmaxTurns: 12\npermissionMode: plan\n\
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
        assert!(warnings[0].contains("`WebFetch`"), "{warnings:?}");
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
        assert!(err("---\nname: a\n---\nbody").contains("`description` is missing"));
        assert!(err("---\nname: a\ndescription: d\nmaxTurns: 0\n---\nbody").contains("maxTurns"));
        assert!(err("---\nname: a b\ndescription: d\n---\nbody").contains("may hold only"));
        assert!(err("---\nname: a\ndescription: d\n---\n").contains("body is empty"));
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
