//! Permission rules and modes with Claude Code's semantics: whether a tool call may run.
//!
//! Rules are `allow`, `deny` and `ask` lists in Claude Code's grammar (`Bash(git diff:*)`,
//! `Read(./secrets/**)`, `mcp__github`, `Agent(reviewer)`), each with its source.
//! Evaluation: hard denials (writes outside the writable roots or into `.git`), then
//! deny rules, then ask rules, then allow rules, then the mode. The first match wins
//! and nothing lifts a deny. Nobody can answer a question in CI, so `ask` means deny
//! unless the mode is `bypassPermissions` (or `on_ask: allow`). See the README's
//! Permissions section for the modes and orch's default when no mode is named.

mod bash;
pub(crate) mod paths;
mod rules;

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::tools::DynTool;
use orch_types::tools::{RuleKind, lookup};

pub use paths::{Bases, PathFilter, PathPattern, normalize};
use rules::Spec;
pub use rules::{Rule, RuleError, RuleSource, SourcedRule, Verdict};

/// How much an agent may do without a matching rule: Claude Code's five modes, defined
/// once in orch-types.
pub use orch_types::PermissionMode as Mode;

/// The stricter of two modes, where `None` is orch's default (between acceptEdits and
/// bypassPermissions: it allows Bash, but allow-lists hold).
pub fn stricter(a: Option<Mode>, b: Option<Mode>) -> Option<Mode> {
    let rank = |m: Option<Mode>| match m {
        Some(Mode::Plan) => 0,
        Some(Mode::DontAsk) => 1,
        Some(Mode::Default) => 2,
        Some(Mode::AcceptEdits) => 3,
        None => 4,
        Some(Mode::BypassPermissions) => 5,
    };
    if rank(a) <= rank(b) { a } else { b }
}

/// What `ask` means when nobody can answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AskFallback {
    #[default]
    Deny,
    Allow,
}

/// The outcome of a permission check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    /// Denied; the reason goes to the model.
    Deny(String),
}

/// Rule texts of one origin, as a workflow or the command line gives them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleSet {
    /// `None`: orch's default (see [`Permissions::decide`]).
    #[serde(default)]
    pub mode: Option<Mode>,
    #[serde(default)]
    pub on_ask: AskFallback,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub ask: Vec<String>,
    /// Where the rules come from, for messages and the rule listing (`workflow` when
    /// unset).
    #[serde(skip)]
    pub origin: Option<String>,
}

impl RuleSet {
    /// The rules with their source, deny first.
    pub fn sourced(&self) -> Vec<SourcedRule> {
        let source = RuleSource::named(self.origin.clone().unwrap_or_else(|| "workflow".to_string()));
        let list = |verdict: Verdict, rules: &[String]| {
            rules
                .iter()
                .map(|rule| SourcedRule { verdict, rule: rule.clone(), source: source.clone() })
                .collect::<Vec<_>>()
        };
        let mut out = list(Verdict::Deny, &self.deny);
        out.extend(list(Verdict::Ask, &self.ask));
        out.extend(list(Verdict::Allow, &self.allow));
        out
    }
}

/// One line of an agent's rule listing (like Claude Code's `/permissions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct EffectiveRule {
    pub rule: String,
    pub verdict: Verdict,
    /// `file:line`, or the origin of a rule from no file.
    pub source: String,
}

/// The permission settings of one agent.
#[derive(Debug, Clone)]
pub struct Permissions {
    /// `None`: orch's default, see [`Permissions::decide`].
    pub mode: Option<Mode>,
    pub ask_fallback: AskFallback,
    rules: Vec<(Verdict, Rule)>,
    /// Where the agent may write: its worktree, private tmp and home.
    pub writable_roots: Vec<PathBuf>,
    pub cwd: PathBuf,
}

/// What rules see of one call.
struct Call {
    tool: &'static str,
    subject: Option<String>,
    /// Paths the call reads (and writes): what `Read` rules look at.
    reads: Vec<PathBuf>,
    /// Paths the call writes: what `Edit` rules look at.
    writes: Vec<PathBuf>,
    /// For `Bash`, the simple commands of the command line.
    parts: Option<Vec<bash::Part>>,
    read_only: bool,
}

/// The shell commands `acceptEdits` approves like file edits, inside the writable roots.
/// `sed` is left out: its `e` command runs shell commands.
const ACCEPT_EDITS_COMMANDS: [&str; 6] = ["mkdir", "touch", "rm", "rmdir", "mv", "cp"];

/// Whether `name` runs without approval in every mode and plan's write ban does not
/// touch it: it starts a sub-agent, which gets the stricter of the two modes.
fn needs_no_approval(name: &str) -> bool {
    lookup(name).is_some_and(|t| t.starts_agent)
}

impl Permissions {
    /// Parses `rules` for an agent working in `cwd` that may write under `writable_roots`.
    pub fn new(
        rules: &RuleSet,
        cwd: &Path,
        home: Option<&Path>,
        writable_roots: Vec<PathBuf>,
    ) -> Result<Self, RuleError> {
        let mut permissions = Self::from_rules(rules.mode, &rules.sourced(), cwd, home, writable_roots)?;
        permissions.ask_fallback = rules.on_ask;
        Ok(permissions)
    }

    /// Parses rules from several sources (settings files, the workflow, the command
    /// line). Each `/path` rule is relative to its source's `settings_dir` (the working
    /// directory when unset). A rule that cannot match anything is an error naming its
    /// source.
    pub fn from_rules(
        mode: Option<Mode>,
        rules: &[SourcedRule],
        cwd: &Path,
        home: Option<&Path>,
        writable_roots: Vec<PathBuf>,
    ) -> Result<Self, RuleError> {
        let cwd = normalize(cwd);
        let mut parsed = Vec::with_capacity(rules.len());
        for r in rules {
            let settings_dir = r.source.settings_dir.as_deref().map(normalize).unwrap_or_else(|| cwd.clone());
            let bases = Bases { cwd: &cwd, home, settings_dir: &settings_dir };
            parsed.push((r.verdict, Rule::parse_in(&r.rule, bases, Some(r.source.clone()))?));
        }
        Ok(Self {
            mode,
            ask_fallback: AskFallback::Deny,
            rules: parsed,
            writable_roots: writable_roots.iter().map(|p| normalize(p)).collect(),
            cwd,
        })
    }

    /// Everything allowed under `cwd` (tests and ad-hoc runs): orch's default mode with
    /// no rules.
    pub fn allow_all(cwd: &Path) -> Self {
        Self {
            mode: None,
            ask_fallback: AskFallback::Deny,
            rules: Vec::new(),
            writable_roots: vec![normalize(cwd)],
            cwd: normalize(cwd),
        }
    }

    /// The rules in evaluation order (deny, ask, allow) with where each came from.
    pub fn effective_rules(&self) -> Vec<EffectiveRule> {
        let mut out = Vec::with_capacity(self.rules.len());
        for verdict in [Verdict::Deny, Verdict::Ask, Verdict::Allow] {
            for (v, rule) in self.rules.iter().filter(|(v, _)| *v == verdict) {
                out.push(EffectiveRule {
                    rule: rule.text().to_string(),
                    verdict: *v,
                    source: rule.source().map(|s| s.to_string()).unwrap_or_else(|| "workflow".to_string()),
                });
            }
        }
        out
    }

    /// The mode's name for reports: Claude Code's, or `orch-default`.
    pub fn mode_name(&self) -> &'static str {
        self.mode.map_or("orch-default", |m| m.as_str())
    }

    /// Whether an `ask` (a rule's or a hook's) counts as yes. No mode lifts one, not
    /// even `bypassPermissions`: as with `claude -p`, nobody is there to approve.
    pub fn lifts_ask(&self) -> bool {
        self.ask_fallback == AskFallback::Allow
    }

    /// Whether every simple command of a `Bash` call is one of the file commands
    /// `acceptEdits` approves (`mkdir`, `touch`, `rm`, `rmdir`, `mv`, `cp`, as Claude
    /// Code does) with every path it names inside the writable roots.
    fn file_commands_inside(&self, call: &Call) -> bool {
        let Some(parts) = &call.parts else { return false };
        !parts.is_empty()
            && parts.iter().all(|part| match part {
                bash::Part::Command { words, .. } => {
                    let program = words.first().filter(|w| !w.dynamic).map(|w| w.text.as_str());
                    let known = program.is_some_and(|p| ACCEPT_EDITS_COMMANDS.contains(&p));
                    let dynamic = words.iter().any(|w| w.dynamic);
                    known
                        && !dynamic
                        && part.path_args().iter().all(|arg| {
                            let path = self.absolute(Path::new(arg));
                            self.writable_roots.iter().any(|root| path.starts_with(root))
                        })
                }
                bash::Part::Opaque(_) => false,
            })
    }

    fn rules(&self, verdict: Verdict) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(move |(v, _)| *v == verdict).map(|(_, r)| r)
    }

    /// The path patterns whose matches `tool` must not show in its results (the search
    /// tools' hook): deny rules, and ask rules when nobody can say yes, that cover
    /// reading (`Read(…)`) or name `tool` itself.
    pub fn hidden_paths(&self, tool: &str) -> Vec<PathPattern> {
        self.rules
            .iter()
            .filter(|(v, _)| *v == Verdict::Deny || (*v == Verdict::Ask && !self.lifts_ask()))
            .filter(|(_, r)| r.is_read_family() || r.tool() == tool)
            .filter_map(|(_, r)| match r.spec() {
                Spec::Paths(pattern, _) => Some(pattern.clone()),
                _ => None,
            })
            .collect()
    }

    fn absolute(&self, path: &Path) -> PathBuf {
        absolute(&self.cwd, path)
    }

    fn call(&self, tool: &dyn DynTool, input: &Value) -> Call {
        describe(tool, input, &self.cwd)
    }

    fn rule_covers(&self, rule: &Rule, call: &Call, conservative: bool) -> bool {
        covers(rule, call, conservative)
    }

    /// The first rule of `verdict` that covers the call the conservative way.
    fn first_match(&self, verdict: Verdict, call: &Call, specific_only: bool) -> Option<&Rule> {
        self.rules(verdict)
            .filter(|r| !specific_only || !matches!(r.spec(), Spec::Any))
            .find(|r| self.rule_covers(r, call, true))
    }

    /// For `Bash`: a file the command names that a `Read` deny rule covers (`cat .env`).
    fn denied_path_arg(&self, call: &Call) -> Option<(String, &Rule)> {
        let parts = call.parts.as_ref()?;
        for part in parts {
            for arg in part.path_args() {
                let path = self.absolute(Path::new(arg));
                for rule in self.rules(Verdict::Deny).filter(|r| r.is_read_family()) {
                    if let Spec::Paths(_, matcher) = rule.spec()
                        && matcher.covers(&path)
                    {
                        return Some((arg.to_string(), rule));
                    }
                }
            }
        }
        None
    }

    /// Whether allow rules cover the call: for `Bash`, every simple command must be
    /// covered by some allow rule, and a command the parser could not follow only by a
    /// bare `Bash` rule.
    fn allowed(&self, call: &Call) -> bool {
        if let Some(parts) = &call.parts {
            if self.rules(Verdict::Allow).any(|r| matches!(r.spec(), Spec::Any) && r.names(call.tool, false, false)) {
                return true;
            }
            return !parts.is_empty()
                && parts.iter().all(|part| {
                    self.rules(Verdict::Allow).any(|r| match r.spec() {
                        Spec::Command(pattern) => r.names(call.tool, false, false) && pattern.matches(part, false),
                        _ => false,
                    })
                });
        }
        self.rules(Verdict::Allow).any(|r| self.rule_covers(r, call, false))
    }

    /// The writes no rule, hook or mode can allow.
    pub fn hard_denial(&self, tool: &dyn DynTool, input: &Value) -> Option<String> {
        for path in tool.writes(input) {
            let path = self.absolute(&path);
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
    /// hook's allow: it skips `ask` and the mode, never a deny rule or plan mode.
    ///
    /// Order: deny rules (and, for `Bash`, a file argument a `Read` deny covers); plan
    /// mode's ban on anything not read-only; ask rules with a specifier; allow rules;
    /// bare-tool ask rules (`ask: [Bash]` asks for what no allow rule covers); then
    /// the mode. With no mode named (`None`), a tool some allow rule names is limited
    /// to its allow rules, and any other call runs.
    pub fn decide(&self, tool: &dyn DynTool, input: &Value, hook_allowed: bool) -> Decision {
        let call = self.call(tool, input);
        let name = call.tool;
        if let Some(rule) = self.first_match(Verdict::Deny, &call, false) {
            return Decision::Deny(format!("denied by the permission rule `{}`{}", rule.text(), from(rule)));
        }
        if let Some((arg, rule)) = self.denied_path_arg(&call) {
            return Decision::Deny(format!(
                "the command names {arg}, which the permission rule `{}`{} denies",
                rule.text(),
                from(rule)
            ));
        }
        let no_approval = needs_no_approval(name);
        if self.mode == Some(Mode::Plan) && !call.read_only && !no_approval {
            return Decision::Deny(format!(
                "{name} changes things, and this agent runs in plan mode: read-only tools only"
            ));
        }
        if hook_allowed {
            return Decision::Allow;
        }
        let asked = if let Some(rule) = self.first_match(Verdict::Ask, &call, true) {
            format!("the permission rule `{}`{} asks for approval", rule.text(), from(rule))
        } else if self.allowed(&call) {
            return Decision::Allow;
        } else if let Some(rule) = self.first_match(Verdict::Ask, &call, false) {
            format!(
                "the permission rule `{}`{} asks for approval of what no allow rule covers",
                rule.text(),
                from(rule)
            )
        } else if let Some(reason) = self.mode_denies(&call, no_approval) {
            reason
        } else {
            return Decision::Allow;
        };
        if self.lifts_ask() {
            return Decision::Allow;
        }
        Decision::Deny(format!(
            "{asked}, and nobody can approve in an unattended run; do without this call or ask for the rules to change"
        ))
    }

    /// What the mode says of a call no rule covers: `None` to allow, else why it
    /// would need approval.
    fn mode_denies(&self, call: &Call, no_approval: bool) -> Option<String> {
        let name = call.tool;
        let read_only = call.read_only && !name.starts_with("mcp__");
        if read_only || no_approval {
            return None;
        }
        let needs_rule = || Some(format!("no allow rule covers this {name} call ({} mode)", self.mode_name()));
        match self.mode {
            Some(Mode::BypassPermissions) => None,
            Some(Mode::AcceptEdits) if !call.writes.is_empty() && name != "Bash" => None,
            Some(Mode::AcceptEdits) if call.parts.is_some() && self.file_commands_inside(call) => None,
            Some(_) => needs_rule(),
            None => {
                // `Read` allow rules list the tools that only read.
                let reads_only = !call.reads.is_empty() && call.writes.is_empty();
                let listed = self.rules(Verdict::Allow).any(|r| r.names(name, reads_only, !call.writes.is_empty()));
                if listed { Some(format!("the allow rules for {name} do not cover this call")) } else { None }
            }
        }
    }
}

fn absolute(cwd: &Path, path: &Path) -> PathBuf {
    normalize(&if path.is_absolute() { path.to_path_buf() } else { cwd.join(path) })
}

/// What rules see of a call of `tool` with `input` in `cwd`.
fn describe(tool: &dyn DynTool, input: &Value, cwd: &Path) -> Call {
    let name = tool.name();
    let subject = tool.permission_subject(input);
    let writes: Vec<PathBuf> = tool.writes(input).iter().map(|p| absolute(cwd, p)).collect();
    let kind = lookup(name).map(|t| t.rule);
    let is_bash = kind == Some(RuleKind::Command);
    // A catalog tool's subject is a path only if its rules take one (`WebFetch`'s is a
    // host, `Skill`'s a name); any other tool but an MCP one is taken for a path, the
    // conservative reading.
    let path_subject = match kind {
        Some(kind) => kind == RuleKind::Path,
        None => !name.starts_with("mcp__"),
    };
    let mut reads: Vec<PathBuf> = Vec::new();
    if path_subject && let Some(s) = subject.as_deref() {
        reads.push(absolute(cwd, Path::new(s)));
    }
    for w in &writes {
        if !reads.contains(w) {
            reads.push(w.clone());
        }
    }
    let parts = if is_bash { subject.as_deref().map(bash::parse) } else { None };
    Call { tool: name, subject, reads, writes, parts, read_only: tool.is_read_only(input) }
}

/// Whether `rule` covers `call`. `conservative` (deny and ask rules): any part of a
/// command, any path, and commands known only at run time when they could match.
/// Otherwise (allow rules) every part and every path must match.
fn covers(rule: &Rule, call: &Call, conservative: bool) -> bool {
    if !rule.names(call.tool, !call.reads.is_empty(), !call.writes.is_empty()) {
        return false;
    }
    // A `Read` deny also stops writes to its paths; a `Read` allow never allows a write.
    if !conservative && rule.is_read_family() && !call.writes.is_empty() {
        return false;
    }
    match rule.spec() {
        Spec::Any => true,
        Spec::Command(pattern) => match &call.parts {
            Some(parts) if conservative => parts.iter().any(|p| pattern.matches(p, true)),
            Some(parts) => !parts.is_empty() && parts.iter().all(|p| pattern.matches(p, false)),
            None => false,
        },
        Spec::Paths(_, matcher) => {
            let paths = if rule.is_edit_family() { &call.writes } else { &call.reads };
            if conservative {
                paths.iter().any(|p| matcher.covers(p))
            } else {
                !paths.is_empty() && paths.iter().all(|p| matcher.covers(p))
            }
        }
        Spec::Name(pattern) => call.subject.as_deref().is_some_and(|s| rules::name_matches(pattern, s)),
    }
}

impl Rule {
    /// Whether the rule covers a call of `tool` with `input` (any part of a compound
    /// command will do), for matchers outside the permission decision such as hooks'
    /// `if` conditions.
    pub fn covers(&self, tool: &dyn DynTool, input: &Value, cwd: &Path) -> bool {
        covers(self, &describe(tool, input, cwd), true)
    }
}

fn from(rule: &Rule) -> String {
    rule.source().map(|s| format!(" (from {s})")).unwrap_or_default()
}

#[cfg(test)]
mod tests;
