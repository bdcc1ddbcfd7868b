//! Permission rules and modes: whether a tool call may run.
//!
//! Rules are `allow`, `deny` and `ask` lists of patterns such as `Bash(git diff *)`,
//! `Edit(src/**)` or `Read(~/.ssh/**)`. Deny beats ask beats allow. With nobody to ask
//! in CI, `ask` means deny (with the reason sent to the model) unless the configuration
//! says otherwise. Hard denials come first and nothing lifts them: writes outside the
//! agent's writable roots and writes into `.git` internals.
//!
//! A tool that is in an agent's pool is allowed unless a rule or the mode says
//! otherwise: listing a tool in the workflow is the opt-in.

use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::{DynTool, normalize};

/// How much an agent may do without a matching rule (defined in orch-types).
pub use orch_types::PermissionMode as Mode;

/// What `ask` means when nobody can answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskFallback {
    #[default]
    Deny,
    Allow,
}

/// What happens to a call that no rule matches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unmatched {
    /// Listing the tool for the agent was the opt-in.
    #[default]
    Allow,
    /// Treat it as an `ask` rule would: only `allow` rules let calls through.
    Ask,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied; the reason goes to the model.
    Deny(String),
}

/// A rule that failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad permission rule `{rule}`: {reason}")]
pub struct RuleError {
    pub rule: String,
    pub reason: String,
}

/// One parsed rule: a tool name and an optional pattern on its subject.
#[derive(Debug, Clone)]
pub struct Rule {
    text: String,
    tool: String,
    pattern: Option<Pattern>,
}

#[derive(Debug, Clone)]
enum Pattern {
    /// A command pattern: `*` matches anything; a trailing `:*` means "this prefix".
    Command(String),
    /// A path glob, made absolute.
    Path(GlobMatcher),
}

impl Rule {
    /// Parses `Tool` or `Tool(pattern)`. Path patterns starting with `~/` are under
    /// `home`; relative ones are under `cwd`.
    pub fn parse(text: &str, cwd: &Path, home: Option<&Path>) -> Result<Rule, RuleError> {
        let err = |reason: &str| RuleError { rule: text.to_string(), reason: reason.to_string() };
        let text = text.trim();
        let (tool, pattern) = match text.find('(') {
            None => (text, None),
            Some(open) => {
                let inner = text[open + 1..].strip_suffix(')').ok_or_else(|| err("a pattern must end with `)`"))?;
                (&text[..open], Some(inner.trim()))
            }
        };
        if tool.is_empty() || !tool.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '*') {
            return Err(err("start with a tool name such as Bash, Read or Edit"));
        }
        let pattern = match pattern {
            None | Some("") | Some("*") | Some("**") => None,
            Some(p) if tool == "Bash" => Some(Pattern::Command(p.to_string())),
            Some(p) => {
                let absolute = if let Some(rest) = p.strip_prefix("~/") {
                    let home = home.ok_or_else(|| err("`~` is used but no home directory is known"))?;
                    home.join(rest)
                } else if p == "~" {
                    home.ok_or_else(|| err("`~` is used but no home directory is known"))?.to_path_buf()
                } else if Path::new(p).is_absolute() {
                    PathBuf::from(p)
                } else {
                    cwd.join(p)
                };
                let glob = GlobBuilder::new(&absolute.to_string_lossy())
                    .literal_separator(true)
                    .build()
                    .map_err(|e| err(&format!("not a valid glob: {e}")))?;
                Some(Pattern::Path(glob.compile_matcher()))
            }
        };
        Ok(Rule { text: text.to_string(), tool: tool.to_string(), pattern })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether the rule covers a call of `tool` with `input` (any part of a compound
    /// command will do), for matchers outside the permission decision such as hooks'.
    pub fn covers(&self, tool: &dyn DynTool, input: &Value, cwd: &Path) -> bool {
        self.matches(tool.name(), tool.permission_subject(input).as_deref(), cwd, false)
    }

    /// Whether the rule names `tool`. `Read` rules cover every reading tool and `Edit`
    /// rules every writing tool, as in Claude Code; `*` ends a name prefix.
    fn names(&self, tool: &str) -> bool {
        if let Some(prefix) = self.tool.strip_suffix('*') {
            return tool.starts_with(prefix);
        }
        self.tool == tool
            || (self.tool == "Read" && matches!(tool, "Grep" | "Glob" | "LS"))
            || (self.tool == "Edit" && matches!(tool, "Write" | "MultiEdit" | "NotebookEdit"))
    }

    /// Whether the rule covers a call. For commands, `all_parts` asks that every part
    /// of a compound command matches (allow rules); otherwise any part will do.
    fn matches(&self, tool: &str, subject: Option<&str>, cwd: &Path, all_parts: bool) -> bool {
        if !self.names(tool) {
            return false;
        }
        let Some(pattern) = &self.pattern else { return true };
        let Some(subject) = subject else { return false };
        match pattern {
            Pattern::Command(p) => {
                let parts = split_command(subject);
                if parts.is_empty() {
                    return false;
                }
                if all_parts {
                    parts.iter().all(|c| command_matches(p, c))
                } else {
                    parts.iter().any(|c| command_matches(p, c))
                }
            }
            Pattern::Path(glob) => {
                let path = normalize(&if Path::new(subject).is_absolute() {
                    PathBuf::from(subject)
                } else {
                    cwd.join(subject)
                });
                // A rule that covers a directory's contents covers searching the directory.
                glob.is_match(&path) || glob.is_match(path.join("_"))
            }
        }
    }
}

/// `pattern` against one simple command: `*` matches any run of characters, and a
/// trailing `:*` (Claude Code's prefix form) matches the prefix alone or followed by
/// arguments.
fn command_matches(pattern: &str, command: &str) -> bool {
    let command = command.trim();
    if let Some(prefix) = pattern.strip_suffix(":*") {
        return command == prefix || command.starts_with(&format!("{prefix} "));
    }
    if let Some(prefix) = pattern.strip_suffix(" *")
        && command == prefix
    {
        return true;
    }
    wildcard(pattern, command)
}

fn wildcard(pattern: &str, text: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = text.strip_prefix(first) else { return false };
    let parts: Vec<&str> = parts.collect();
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(pos) => rest = &rest[pos + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Splits a shell command line into its simple commands at `;`, `&&`, `||`, `|`, `&`
/// and newlines outside quotes. Anything that hides a command (substitution) stays in
/// its part, so an allow rule will not match it.
pub fn split_command(command: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                current.push(c);
            }
            (Some(_), '\\') => {
                current.push(c);
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            (Some(_), c) => current.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                current.push(c);
            }
            (None, '\\') => {
                current.push(c);
                if let Some(n) = chars.next() {
                    current.push(n);
                }
            }
            (None, ';' | '\n' | '|' | '&') => {
                if matches!(chars.peek(), Some('|' | '&')) && (c == '|' || c == '&') {
                    chars.next();
                }
                // `2>&1` and `>&2` are redirections, not separators.
                if c == '&' && current.ends_with('>') {
                    current.push(c);
                    continue;
                }
                push_part(&mut parts, &mut current);
            }
            (None, c) => current.push(c),
        }
    }
    push_part(&mut parts, &mut current);
    parts
}

fn push_part(parts: &mut Vec<String>, current: &mut String) {
    let part = current.trim();
    if !part.is_empty() {
        parts.push(part.to_string());
    }
    current.clear();
}

/// The permission settings of one agent.
#[derive(Debug, Clone)]
pub struct Permissions {
    pub mode: Mode,
    pub ask_fallback: AskFallback,
    pub unmatched: Unmatched,
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
    pub ask: Vec<Rule>,
    /// Where the agent may write: its worktree, private tmp and home.
    pub writable_roots: Vec<PathBuf>,
    pub cwd: PathBuf,
}

/// Rule texts, as a workflow or settings file gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSet {
    #[serde(default)]
    pub mode: Mode,
    #[serde(default)]
    pub on_ask: AskFallback,
    #[serde(default)]
    pub unmatched: Unmatched,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
}

impl Permissions {
    /// Parses `rules` for an agent working in `cwd` that may write under `writable_roots`.
    pub fn new(
        rules: &RuleSet,
        cwd: &Path,
        home: Option<&Path>,
        writable_roots: Vec<PathBuf>,
    ) -> Result<Self, RuleError> {
        let parse = |list: &[String]| list.iter().map(|r| Rule::parse(r, cwd, home)).collect::<Result<Vec<_>, _>>();
        Ok(Self {
            mode: rules.mode,
            ask_fallback: rules.on_ask,
            unmatched: rules.unmatched,
            allow: parse(&rules.allow)?,
            deny: parse(&rules.deny)?,
            ask: parse(&rules.ask)?,
            writable_roots: writable_roots.iter().map(|p| normalize(p)).collect(),
            cwd: cwd.to_path_buf(),
        })
    }

    /// Everything allowed under `cwd` (tests and ad-hoc runs).
    pub fn allow_all(cwd: &Path) -> Self {
        Self {
            mode: Mode::Default,
            ask_fallback: AskFallback::Deny,
            unmatched: Unmatched::Allow,
            allow: Vec::new(),
            deny: Vec::new(),
            ask: Vec::new(),
            writable_roots: vec![normalize(cwd)],
            cwd: cwd.to_path_buf(),
        }
    }

    /// The writes no rule, hook or mode can allow.
    pub fn hard_denial(&self, tool: &dyn DynTool, input: &Value) -> Option<String> {
        for path in tool.writes(input) {
            let path = normalize(&if path.is_absolute() { path } else { self.cwd.join(path) });
            if path.components().any(|c| c == Component::Normal(".git".as_ref())) {
                return Some(format!(
                    "{} may not write {}: git internals are read-only for agents; the coordinator commits your changes",
                    tool.name(),
                    path.display()
                ));
            }
            if !self.writable_roots.iter().any(|root| path.starts_with(root)) {
                return Some(format!(
                    "{} may not write {}: it is outside this agent's writable roots ({})",
                    tool.name(),
                    path.display(),
                    self.writable_roots.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                ));
            }
        }
        None
    }

    /// Decides a call that passed the hard denials. `hook_allowed` is a PreToolUse
    /// hook's allow: it skips `ask`, but never a deny rule.
    pub fn decide(&self, tool: &dyn DynTool, input: &Value, hook_allowed: bool) -> Decision {
        let name = tool.name();
        let subject = tool.permission_subject(input);
        let subject = subject.as_deref();
        if let Some(rule) = self.deny.iter().find(|r| r.matches(name, subject, &self.cwd, false)) {
            return Decision::Deny(format!("denied by the permission rule `{}`", rule.text()));
        }
        let read_only = tool.is_read_only(input);
        if self.mode == Mode::Plan && !read_only {
            return Decision::Deny(format!(
                "{name} changes things, and this agent runs in plan mode: read-only tools only"
            ));
        }
        if hook_allowed {
            return Decision::Allow;
        }
        let asked = match self.ask.iter().find(|r| r.matches(name, subject, &self.cwd, false)) {
            Some(rule) => format!("the permission rule `{}` asks for approval", rule.text()),
            None if self.allow.iter().any(|r| r.matches(name, subject, &self.cwd, true)) => return Decision::Allow,
            None if self.unmatched == Unmatched::Ask => format!("no allow rule covers this {name} call"),
            None => return Decision::Allow,
        };
        let lifted = match self.mode {
            Mode::Bypass => true,
            Mode::AcceptEdits if !tool.writes(input).is_empty() => true,
            _ => self.ask_fallback == AskFallback::Allow,
        };
        if !lifted {
            return Decision::Deny(format!(
                "{asked}, and nobody can approve in an unattended run; do without this call or ask for the rules to change"
            ));
        }
        Decision::Allow
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::core_tools;
    use serde_json::json;

    fn tool(name: &str) -> std::sync::Arc<dyn DynTool> {
        core_tools().into_iter().find(|t| t.name() == name).unwrap()
    }

    fn perms(rules: RuleSet) -> Permissions {
        Permissions::new(
            &rules,
            Path::new("/w/tree"),
            Some(Path::new("/home/u")),
            vec!["/w/tree".into(), "/w/tmp".into()],
        )
        .unwrap()
    }

    fn rules(allow: &[&str], deny: &[&str], ask: &[&str]) -> RuleSet {
        let v = |l: &[&str]| l.iter().map(|s| s.to_string()).collect();
        RuleSet { allow: v(allow), deny: v(deny), ask: v(ask), ..Default::default() }
    }

    #[test]
    fn splits_compound_commands() {
        assert_eq!(split_command("git diff && rm -rf /"), ["git diff", "rm -rf /"]);
        assert_eq!(split_command("a; b | c || d & e"), ["a", "b", "c", "d", "e"]);
        assert_eq!(split_command("echo 'a; b' \"c && d\""), ["echo 'a; b' \"c && d\""]);
        assert_eq!(split_command("make 2>&1 | tail"), ["make 2>&1", "tail"]);
    }

    #[test]
    fn command_patterns() {
        assert!(command_matches("git diff *", "git diff --stat"));
        assert!(command_matches("git diff *", "git diff"));
        assert!(!command_matches("git diff *", "git difftool"));
        assert!(command_matches("npm run test:*", "npm run test"));
        assert!(command_matches("npm run test:*", "npm run test -- --watch"));
        assert!(!command_matches("npm run test:*", "npm run testing"));
        assert!(command_matches("cargo * --release", "cargo build --release"));
    }

    #[test]
    fn deny_beats_ask_beats_allow() {
        let bash = tool("Bash");
        let p = perms(rules(&["Bash(git *)"], &["Bash(git push *)"], &["Bash(git commit *)"]));
        assert_eq!(p.decide(bash.as_ref(), &json!({"command": "git status"}), false), Decision::Allow);
        assert!(
            matches!(p.decide(bash.as_ref(), &json!({"command": "git push origin"}), false), Decision::Deny(r) if r.contains("git push"))
        );
        assert!(
            matches!(p.decide(bash.as_ref(), &json!({"command": "git commit -m x"}), false), Decision::Deny(r) if r.contains("asks for approval"))
        );
    }

    #[test]
    fn allow_rules_cover_every_part_and_deny_rules_any_part() {
        let bash = tool("Bash");
        let mut p = perms(rules(&["Bash(git diff *)"], &["Bash(rm *)"], &[]));
        p.unmatched = Unmatched::Ask;
        assert_eq!(p.decide(bash.as_ref(), &json!({"command": "git diff HEAD"}), false), Decision::Allow);
        // The allow rule does not cover `curl`, so the call counts as unmatched.
        assert!(matches!(p.decide(bash.as_ref(), &json!({"command": "git diff && curl x"}), false), Decision::Deny(_)));
        assert!(
            matches!(p.decide(bash.as_ref(), &json!({"command": "ls; rm -rf x"}), false), Decision::Deny(r) if r.contains("rm *"))
        );
    }

    #[test]
    fn path_rules_with_home_relative_and_tool_families() {
        let read = tool("Read");
        let grep = tool("Grep");
        let edit = tool("Edit");
        let write = tool("Write");
        let p = perms(rules(&[], &["Read(~/.ssh/**)", "Edit(secrets/**)"], &[]));
        assert!(matches!(
            p.decide(read.as_ref(), &json!({"file_path": "/home/u/.ssh/id_rsa"}), false),
            Decision::Deny(_)
        ));
        assert!(matches!(
            p.decide(grep.as_ref(), &json!({"pattern": "x", "path": "/home/u/.ssh"}), false),
            Decision::Deny(_)
        ));
        assert!(matches!(
            p.decide(grep.as_ref(), &json!({"pattern": "x", "path": "/home/u/src"}), false),
            Decision::Allow
        ));
        assert!(matches!(
            p.decide(grep.as_ref(), &json!({"pattern": "x", "path": "/home/u/.ssh/keys"}), false),
            Decision::Deny(_)
        ));
        assert!(matches!(
            p.decide(
                edit.as_ref(),
                &json!({"file_path": "secrets/a.txt", "old_string": "a", "new_string": "b"}),
                false
            ),
            Decision::Deny(_)
        ));
        assert!(matches!(
            p.decide(write.as_ref(), &json!({"file_path": "/w/tree/secrets/b", "content": ""}), false),
            Decision::Deny(_)
        ));
        assert_eq!(
            p.decide(write.as_ref(), &json!({"file_path": "/w/tree/src/b", "content": ""}), false),
            Decision::Allow
        );
    }

    #[test]
    fn modes() {
        let bash = tool("Bash");
        let edit = tool("Edit");
        let read = tool("Read");
        let mut p = perms(rules(&[], &[], &["Edit", "Bash"]));
        let e = json!({"file_path": "a.rs", "old_string": "a", "new_string": "b"});
        let b = json!({"command": "make"});
        assert!(matches!(p.decide(edit.as_ref(), &e, false), Decision::Deny(_)));
        p.mode = Mode::AcceptEdits;
        assert_eq!(p.decide(edit.as_ref(), &e, false), Decision::Allow);
        assert!(matches!(p.decide(bash.as_ref(), &b, false), Decision::Deny(_)));
        p.mode = Mode::Bypass;
        assert_eq!(p.decide(bash.as_ref(), &b, false), Decision::Allow);
        p.mode = Mode::Plan;
        assert!(matches!(p.decide(edit.as_ref(), &e, false), Decision::Deny(r) if r.contains("plan mode")));
        assert_eq!(p.decide(read.as_ref(), &json!({"file_path": "a.rs"}), false), Decision::Allow);
        p.mode = Mode::Default;
        p.ask_fallback = AskFallback::Allow;
        assert_eq!(p.decide(bash.as_ref(), &b, false), Decision::Allow);
    }

    #[test]
    fn a_hook_allow_skips_ask_but_never_a_deny() {
        let bash = tool("Bash");
        let p = perms(rules(&[], &["Bash(rm *)"], &["Bash"]));
        assert_eq!(p.decide(bash.as_ref(), &json!({"command": "make"}), true), Decision::Allow);
        assert!(matches!(p.decide(bash.as_ref(), &json!({"command": "rm -rf x"}), true), Decision::Deny(_)));
    }

    #[test]
    fn hard_denials() {
        let write = tool("Write");
        let edit = tool("Edit");
        let p = perms(RuleSet { mode: Mode::Bypass, ..Default::default() });
        let w = |path: &str| json!({"file_path": path, "content": "x"});
        assert!(p.hard_denial(write.as_ref(), &w("src/a.rs")).is_none());
        assert!(p.hard_denial(write.as_ref(), &w("/w/tmp/scratch")).is_none());
        assert!(p.hard_denial(write.as_ref(), &w("/etc/passwd")).unwrap().contains("outside"));
        assert!(p.hard_denial(write.as_ref(), &w("../other/x")).unwrap().contains("outside"));
        assert!(p.hard_denial(write.as_ref(), &w("/w/tree-evil/x")).unwrap().contains("outside"));
        assert!(p.hard_denial(write.as_ref(), &w(".git/config")).unwrap().contains("git internals"));
        assert!(p.hard_denial(write.as_ref(), &w("sub/.git/hooks/pre-commit")).unwrap().contains("git internals"));
        let e = json!({"file_path": ".git/HEAD", "old_string": "a", "new_string": "b"});
        assert!(p.hard_denial(edit.as_ref(), &e).unwrap().contains("git internals"));
    }

    #[test]
    fn bad_rules_are_errors() {
        let cwd = Path::new("/w");
        assert!(Rule::parse("Bash(git *", cwd, None).unwrap_err().reason.contains("end with `)`"));
        assert!(Rule::parse("(x)", cwd, None).is_err());
        assert!(Rule::parse("Read(~/.ssh/**)", cwd, None).unwrap_err().reason.contains("home"));
        assert!(Rule::parse("Edit(src/[)", cwd, None).unwrap_err().reason.contains("glob"));
    }
}
