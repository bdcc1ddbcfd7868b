//! One permission rule: `Tool` or `Tool(specifier)` in Claude Code's grammar, where it
//! came from, and which tool calls it names.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use orch_types::tools::{CATALOG, FOREIGN, RuleKind, lookup, rule_kind};

use super::bash::CommandPattern;
use super::paths::{Bases, PathMatcher, PathPattern};

/// Which list a rule is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Allow,
    Deny,
    Ask,
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Allow => "allow",
            Verdict::Deny => "deny",
            Verdict::Ask => "ask",
        }
    }
}

/// Where a rule was written: a settings file (with its line) or another origin such as
/// `workflow` or `--allow`, and the directory its `/path` rules are relative to.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleSource {
    /// The file, or a name for a rule that comes from no file.
    pub file: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The settings file's directory; `None` means the working directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings_dir: Option<PathBuf>,
}

impl RuleSource {
    /// A source that is no file (`workflow`, `--deny`).
    pub fn named(name: impl Into<String>) -> RuleSource {
        RuleSource { file: name.into(), line: None, settings_dir: None }
    }
}

impl fmt::Display for RuleSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

/// A rule as a caller hands it over: its list, its text and its source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourcedRule {
    pub verdict: Verdict,
    pub rule: String,
    pub source: RuleSource,
}

/// A rule that cannot be used, with where it was written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad permission rule `{rule}`{place}: {reason}", place = .at.as_ref().map(|s| format!(" in {s}")).unwrap_or_default())]
pub struct RuleError {
    pub rule: String,
    pub reason: String,
    /// Where the rule was written, when the caller said.
    pub at: Option<Box<RuleSource>>,
}

/// Whether rules on `tool` name every writing tool (Claude Code's `Edit` rules do): the
/// catalog's file tools that write.
pub(crate) fn in_edit_family(tool: &str) -> bool {
    lookup(tool).is_some_and(|t| t.writes && t.rule == RuleKind::Path)
}

/// The names a rule may start with, for the error on one that names no tool.
fn known_names() -> String {
    let names: Vec<&str> = CATALOG
        .iter()
        .flat_map(|t| std::iter::once(t.name).chain(t.aliases.iter().copied()))
        .chain(FOREIGN.iter().map(|(n, _)| *n))
        .collect();
    names.join(", ")
}

/// One parsed rule.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    tool: String,
    spec: Spec,
    source: Option<RuleSource>,
}

#[derive(Debug, Clone)]
pub(crate) enum Spec {
    /// No specifier, `*` or `**`: every call of the tool.
    Any,
    Command(CommandPattern),
    Paths(PathPattern, PathMatcher),
    /// `Agent(name)`, `WebFetch(domain:x)`: the call's subject, where `*` is a wildcard.
    Name(String),
}

impl Rule {
    /// Parses a rule whose `/path` specifiers are relative to `cwd` too.
    pub fn parse(text: &str, cwd: &Path, home: Option<&Path>) -> Result<Rule, RuleError> {
        Rule::parse_in(text, Bases { cwd, home, settings_dir: cwd }, None)
    }

    /// Parses a rule written in `source`.
    pub fn parse_in(text: &str, bases: Bases<'_>, source: Option<RuleSource>) -> Result<Rule, RuleError> {
        let err = |reason: String| RuleError { rule: text.to_string(), reason, at: source.clone().map(Box::new) };
        let trimmed = text.trim();
        let (tool, inner) = match trimmed.find('(') {
            None => (trimmed, None),
            Some(open) => {
                let inner = trimmed[open + 1..]
                    .strip_suffix(')')
                    .ok_or_else(|| err("a specifier must end with `)`, as in `Bash(git diff:*)`".into()))?;
                (trimmed[..open].trim(), Some(inner.trim()))
            }
        };
        if tool.is_empty() || !tool.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '*')) {
            return Err(err("start with a tool name such as Bash, Read, Edit or mcp__server".into()));
        }
        if let Some(server) = tool.strip_prefix("mcp__") {
            if server.is_empty() || server.starts_with('*') {
                return Err(err("name the MCP server, as in `mcp__github` or `mcp__github__get_issue`".into()));
            }
            if inner.is_some_and(|i| !i.is_empty()) {
                return Err(
                    err("MCP rules take no specifier; name the tool instead, as in `mcp__server__tool`".into()),
                );
            }
        } else if tool.contains('*') {
            return Err(err("a wildcard in a tool name only works for MCP tools (`mcp__server__*`)".into()));
        }
        // MCP rules take no specifier, like plain tools.
        let kind = if tool.starts_with("mcp__") {
            RuleKind::Plain
        } else {
            rule_kind(tool).ok_or_else(|| {
                err(format!(
                    "there is no tool named `{tool}`, so the rule would never match; the tools are {} and mcp__server__tool",
                    known_names()
                ))
            })?
        };
        let spec = match (inner, kind) {
            (None | Some("") | Some("*") | Some("**"), _) => Spec::Any,
            (Some(p), RuleKind::Command) => Spec::Command(CommandPattern::parse(p).map_err(err)?),
            (Some(p), RuleKind::Path) => {
                let pattern = PathPattern::from_specifier(p, bases).map_err(err)?;
                let matcher = pattern.compile().map_err(err)?;
                Spec::Paths(pattern, matcher)
            }
            (Some(p), RuleKind::Domain | RuleKind::Name) => Spec::Name(p.to_string()),
            (Some(_), RuleKind::Plain) => {
                return Err(err(format!(
                    "`{tool}` has no paths or commands, so a specifier cannot match; write `{tool}`"
                )));
            }
        };
        Ok(Rule { text: trimmed.to_string(), tool: tool.to_string(), spec, source })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    pub fn source(&self) -> Option<&RuleSource> {
        self.source.as_ref()
    }

    pub(crate) fn tool(&self) -> &str {
        &self.tool
    }

    pub(crate) fn spec(&self) -> &Spec {
        &self.spec
    }

    /// Whether this rule's tool part names `tool` (before looking at the specifier).
    /// `Read` names every tool that reads paths, an `Edit`-family name every tool that
    /// writes, a tool and its aliases (`Agent`, `Task`) the same tool, `mcp__s` every
    /// tool of server `s`.
    pub(crate) fn names(&self, tool: &str, reads_paths: bool, writes_paths: bool) -> bool {
        let rule = self.tool.as_str();
        if let Some(prefix) = rule.strip_suffix('*') {
            return tool.starts_with(prefix);
        }
        if rule.starts_with("mcp__") && !rule["mcp__".len()..].contains("__") {
            return tool == rule || tool.strip_prefix(rule).is_some_and(|rest| rest.starts_with("__"));
        }
        rule == tool
            || (rule == "Read" && reads_paths)
            || (in_edit_family(rule) && writes_paths)
            || lookup(rule).is_some_and(|r| lookup(tool).is_some_and(|t| r.name == t.name))
    }

    /// Whether the rule is for reading tools as a family (a `Read` rule).
    pub(crate) fn is_read_family(&self) -> bool {
        self.tool == "Read"
    }

    pub(crate) fn is_edit_family(&self) -> bool {
        in_edit_family(&self.tool)
    }
}

/// `*` in a name specifier matches any run of characters.
pub(crate) fn name_matches(pattern: &str, subject: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == subject;
    }
    let Some(mut rest) = subject.strip_prefix(parts[0]) else { return false };
    for (i, part) in parts.iter().enumerate().skip(1) {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(pos) => rest = &rest[pos + part.len()..],
            None => return false,
        }
    }
    true
}
