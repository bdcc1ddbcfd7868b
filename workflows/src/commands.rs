//! Slash commands in Claude Code's format: `.claude/commands/<name>.md` (a file in a
//! subdirectory is `<dir>:<name>`), front matter `description`, `argument-hint`,
//! `allowed-tools` and `model`, and a body where `$ARGUMENTS`, `$ARGUMENTS[0]` and `$1`,
//! `$2`, ... stand for the arguments.
//!
//! [`expand`] turns a workflow prompt such as `/review src/lib.rs --strict` into the
//! command's text with the arguments put in, plus the tools and model the command asks
//! for. Pure functions: callers pass file contents, and render the prompt's template
//! (`{{ file }}`) before expanding it.

use serde::Serialize;

use crate::diagnostic::Diagnostic;
use crate::frontmatter;
use crate::plan::{AgentSpec, Plan, PlanNode, Prompt};
use crate::schema::Workflow;
use crate::yaml::Seg;

/// Where a repository keeps slash commands, searched in this order.
pub const COMMAND_DIRS: [&str; 2] = [".orch/commands", ".claude/commands"];

/// One slash command.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Command {
    /// What follows the `/`: the file name without `.md`, after its subdirectories
    /// joined with `:` (`frontend:component`).
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// `allowed-tools`; `None` when not given (the agent's own tools apply).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<String>>,
    /// `None`: the agent's model (`inherit`, or not given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The body: the prompt, with its placeholders.
    pub body: String,
    pub source: String,
}

/// A command that cannot be used, or a prompt that cannot be expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("{file}: {message}")]
    File { file: String, message: String },
    #[error(
        "the prompt calls `/{name}`, but there is no such command (known: {known}); add `.claude/commands/{name}.md` or fix the name"
    )]
    Unknown { name: String, known: String },
}

/// The command name of `path` under one of [`COMMAND_DIRS`], or `None`.
fn command_name(path: &str) -> Option<String> {
    let rest = COMMAND_DIRS.iter().find_map(|root| path.strip_prefix(root)?.strip_prefix('/'))?;
    let rest = rest.strip_suffix(".md")?;
    let parts: Vec<&str> = rest.split('/').collect();
    if parts.iter().any(|p| p.is_empty() || p.starts_with('.')) {
        return None;
    }
    Some(parts.join(":"))
}

/// Parses the command file at `path` (under `.orch/commands/` or `.claude/commands/`).
/// As in Claude Code, front matter that does not parse leaves the command without
/// settings rather than refusing it; the warnings say so.
pub fn parse_command(text: &str, path: &str) -> Result<(Command, Vec<String>), CommandError> {
    let name = command_name(path).ok_or_else(|| CommandError::File {
        file: path.to_string(),
        message: format!("a command is a `.md` file under {}", COMMAND_DIRS.join(" or ")),
    })?;
    let front = frontmatter::parse(text);
    let mut warnings = Vec::new();
    if let Some(problem) = &front.problem {
        warnings.push(format!("{path}: {problem}; the command is used without its front matter settings"));
    }
    let fields = &front.fields;
    let string =
        |key: &str| frontmatter::text(fields, key).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
    // An alias (`haiku`, `sonnet`, `opus`) becomes a model id, `inherit` the agent's model.
    let model = frontmatter::text(fields, "model")
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .and_then(crate::subagents::model_id);
    let body = front.body.trim().to_string();
    if body.contains("!`") {
        warnings.push(format!(
            "{path}: orch does not run the command's `!`-prefixed shell snippets; they reach the model as text"
        ));
    }
    let command = Command {
        name,
        description: string("description"),
        argument_hint: string("argument-hint"),
        allowed_tools: frontmatter::name_list(fields, "allowed-tools"),
        model,
        body,
        source: path.to_string(),
    };
    Ok((command, warnings))
}

/// The commands of a repository: `.orch/commands` wins over `.claude/commands` on a
/// name clash.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Commands {
    pub commands: Vec<Command>,
    pub warnings: Vec<String>,
}

impl Commands {
    /// Reads `files` (path and contents); files outside [`COMMAND_DIRS`] or not `*.md`
    /// are skipped.
    pub fn from_files(files: &[(String, String)]) -> Commands {
        let mut out = Commands::default();
        let mut found = Vec::new();
        for (path, text) in files {
            let Some(rank) = COMMAND_DIRS.iter().position(|root| path.starts_with(&format!("{root}/"))) else {
                continue;
            };
            if !path.ends_with(".md") {
                continue;
            }
            match parse_command(text, path) {
                Ok((command, warnings)) => {
                    out.warnings.extend(warnings);
                    found.push((rank, command));
                }
                Err(e) => out.warnings.push(format!("{e}; the file is ignored")),
            }
        }
        found.sort_by_key(|(rank, _)| *rank);
        for (_, command) in found {
            if let Some(used) = out.commands.iter().find(|c| c.name == command.name) {
                out.warnings.push(format!(
                    "{}: the command `/{}` is also defined in {}, which is used; this one is ignored",
                    command.source, command.name, used.source
                ));
            } else {
                out.commands.push(command);
            }
        }
        out
    }

    pub fn get(&self, name: &str) -> Option<&Command> {
        self.commands.iter().find(|c| c.name == name)
    }
}

/// A prompt after its slash command was expanded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Expanded {
    /// The command's text with the arguments put in.
    pub prompt: String,
    /// The command's `allowed-tools`, when it gives them.
    pub tools: Option<Vec<String>>,
    /// The command's model, when it names one.
    pub model: Option<String>,
    /// The command file.
    pub source: String,
}

/// The command name and argument text of a prompt that starts with `/name`, or `None`
/// when the prompt is not a slash command (a path such as `/usr/bin` is not: a command
/// name holds no `/`).
pub fn split_invocation(prompt: &str) -> Option<(&str, &str)> {
    let rest = prompt.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let name = &rest[..end];
    let valid = !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || "-_:.".contains(c))
        && name.chars().next().is_some_and(char::is_alphanumeric);
    valid.then(|| (name, rest[end..].trim()))
}

/// The arguments as words: split at whitespace, with `"..."` and `'...'` grouping.
fn words(arguments: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    for c in arguments.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                started = true;
            }
            None if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut current));
                    started = false;
                }
            }
            None => {
                current.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(current);
    }
    out
}

/// Puts `arguments` into `body`: `$ARGUMENTS` is all of them as given, `$ARGUMENTS[n]`
/// the word at 0-based `n`, `$1`, `$2`, ... the words from 1. A missing word is empty.
/// When the body has none of these and there are arguments, they are appended after an
/// `ARGUMENTS:` line, as Claude Code does.
pub fn substitute(body: &str, arguments: &str) -> String {
    let list = words(arguments);
    let word = |i: usize| list.get(i).map(String::as_str).unwrap_or("");
    let mut out = String::with_capacity(body.len() + arguments.len());
    let mut used = false;
    let mut rest = body;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            used = true;
            // `$ARGUMENTS[n]`
            if let Some(index) = tail.strip_prefix('[').and_then(|t| {
                let close = t.find(']')?;
                Some((t[..close].parse::<usize>().ok()?, close))
            }) {
                out.push_str(word(index.0));
                rest = &tail[index.1 + 2..];
            } else {
                out.push_str(arguments);
                rest = tail;
            }
            continue;
        }
        let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0
            && let Ok(n) = after[..digits].parse::<usize>()
            && n > 0
        {
            used = true;
            out.push_str(word(n - 1));
            rest = &after[digits..];
            continue;
        }
        out.push('$');
        rest = after;
    }
    out.push_str(rest);
    if !used && !arguments.trim().is_empty() {
        out.push_str("\n\nARGUMENTS: ");
        out.push_str(arguments.trim());
    }
    out
}

/// Expands `prompt` when it starts with `/name`: `Ok(None)` when it is not a slash
/// command, an error when it names a command that does not exist.
pub fn expand(prompt: &str, commands: &Commands) -> Result<Option<Expanded>, CommandError> {
    let Some((name, arguments)) = split_invocation(prompt) else {
        return Ok(None);
    };
    let Some(command) = commands.get(name) else {
        let known: Vec<String> = commands.commands.iter().map(|c| format!("/{}", c.name)).collect();
        return Err(CommandError::Unknown {
            name: name.to_string(),
            known: if known.is_empty() { "none".to_string() } else { known.join(", ") },
        });
    };
    Ok(Some(Expanded {
        prompt: substitute(&command.body, arguments),
        tools: command.allowed_tools.clone(),
        model: command.model.clone(),
        source: command.source.clone(),
    }))
}

impl Expanded {
    /// Applies the command to a planned agent, as Claude Code honours a command's front
    /// matter: its `allowed-tools` become allow rules (and the built-in tools they name
    /// are added to the agent's tools, so the rules can be used), its `model` runs the
    /// agent. The prompt itself is the caller's to replace.
    pub fn apply(&self, spec: &mut AgentSpec) {
        if let Some(rules) = &self.tools {
            for rule in rules {
                let rule = rule.trim();
                let name = rule.split('(').next().unwrap_or(rule).trim();
                if let Some(info) = orch_types::tools::lookup(name)
                    && !spec.tools.iter().any(|t| t == info.name)
                {
                    spec.tools.push(info.name.to_string());
                }
                if !rule.is_empty() && !spec.permissions.allow.iter().any(|r| r == rule) {
                    spec.permissions.allow.push(rule.to_string());
                }
            }
        }
        if let Some(model) = &self.model {
            spec.model = Some(model.clone());
        }
        spec.command_source = Some(self.source.clone());
    }
}

/// Expands the slash command of every prompt of `plan` that is rendered already (a
/// template that waits for other agents is expanded when it is rendered). Returns the
/// errors of prompts that name no command.
pub fn apply_to_plan(commands: &Commands, plan: &mut Plan) -> Vec<CommandError> {
    let mut errors = Vec::new();
    for node in plan.stages.iter_mut().flat_map(|s| s.agents.iter_mut()) {
        let PlanNode::Agent(spec) = node else { continue };
        let Some(Prompt::Rendered { text }) = &spec.prompt else { continue };
        match expand(text, commands) {
            Ok(Some(expanded)) => {
                expanded.apply(spec);
                spec.prompt = Some(Prompt::Rendered { text: expanded.prompt });
            }
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    errors
}

/// A diagnostic, at the prompt's position, for every agent prompt that starts with a
/// slash command the repository does not have.
pub fn check_workflow(workflow: &Workflow, commands: &Commands) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for agent in &workflow.agents {
        let Some(prompt) = &agent.prompt else { continue };
        let Err(e) = expand(prompt, commands) else { continue };
        let path = [Seg::key("agents"), Seg::key(&agent.id), Seg::key("prompt")];
        let location = workflow.source.locate(&path);
        let hint = format!(
            "commands are read from {} (a file `<name>.md` is `/<name>`); add the file or fix the name, or \
             start the prompt with other text",
            COMMAND_DIRS.join(" and ")
        );
        out.push(Diagnostic::new(e.to_string(), location, hint));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(files: &[(&str, &str)]) -> Commands {
        let files: Vec<(String, String)> = files.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect();
        Commands::from_files(&files)
    }

    #[test]
    fn expands_a_command_with_its_front_matter() {
        let set = commands(&[(
            ".claude/commands/review.md",
            "---\nallowed-tools: Read, Grep, Bash(git diff:*)\nmodel: haiku\nargument-hint: [file] [focus]\n\
             description: Review one file\n---\n\nReview $1 with a focus on $2.\nAll: $ARGUMENTS\n",
        )]);
        let cmd = set.get("review").unwrap();
        assert_eq!(cmd.argument_hint.as_deref(), Some("[file] [focus]"));
        let out = expand("/review src/lib.rs \"error handling\"", &set).unwrap().unwrap();
        assert_eq!(out.prompt, "Review src/lib.rs with a focus on error handling.\nAll: src/lib.rs \"error handling\"");
        assert_eq!(out.tools, Some(vec!["Read".to_string(), "Grep".into(), "Bash(git diff:*)".into()]));
        assert_eq!(out.model.as_deref(), Some("claude-haiku-4-5"));
        assert_eq!(out.source, ".claude/commands/review.md");
    }

    #[test]
    fn substitution_rules() {
        assert_eq!(substitute("Fix #$ARGUMENTS now", "42"), "Fix #42 now");
        assert_eq!(substitute("$ARGUMENTS[1]-$ARGUMENTS[0]-$3.", "a b"), "b-a-.");
        assert_eq!(substitute("Costs $5 and $x", ""), "Costs  and $x");
        assert_eq!(
            substitute("Summarize the change.", "quickly please"),
            "Summarize the change.\n\nARGUMENTS: quickly please"
        );
        assert_eq!(substitute("Summarize the change.", "  "), "Summarize the change.");
        assert_eq!(substitute("end $", "a"), "end $\n\nARGUMENTS: a");
    }

    #[test]
    fn names_and_lookup() {
        let set = commands(&[
            (".claude/commands/frontend/component.md", "Make $1"),
            (".claude/commands/x.md", "claude"),
            (".orch/commands/x.md", "orch"),
            (".claude/commands/notes.txt", "skip"),
        ]);
        assert_eq!(set.commands.len(), 2);
        assert_eq!(set.get("x").unwrap().body, "orch");
        assert_eq!(set.warnings.len(), 1, "{:?}", set.warnings);
        let out = expand("/frontend:component Button", &set).unwrap().unwrap();
        assert_eq!(out.prompt, "Make Button");
        assert_eq!(expand("Look at /usr/bin first", &set).unwrap(), None);
        assert_eq!(expand("/usr/bin/env is odd", &set).unwrap(), None);
        let err = expand("/missing a", &set).unwrap_err().to_string();
        assert!(err.contains("`/missing`") && err.contains("/x"), "{err}");
    }

    #[test]
    fn broken_front_matter_keeps_the_command() {
        let set = commands(&[(".claude/commands/a.md", "---\ndescription: a\n<b>\nc: d\n---\nBody $1")]);
        let cmd = set.get("a").unwrap();
        assert_eq!(cmd.description, None);
        assert_eq!(cmd.body, "Body $1");
        assert_eq!(set.warnings.len(), 1);
    }
}
