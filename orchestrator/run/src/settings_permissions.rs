//! The permission rules a repository's settings files give its agents, merged with the
//! workflow's the way Claude Code merges its settings scopes.
//!
//! Files, from lowest to highest precedence: `.claude/settings.json` (shared project),
//! `.orch/settings.yaml` (orch's shared project file), `.claude/settings.local.json`
//! (local project); the workflow's `permissions:` rank like Claude Code's command-line
//! settings, above all three. As in Claude Code, the `allow`, `deny` and `ask` lists of
//! every scope are concatenated (deny still beats allow whatever its scope), and
//! `defaultMode` is taken from the highest scope that sets it. Each rule keeps its
//! `file:line`. Files are read through [`RepoConfig`], so off the trusted ref they come
//! from that ref.

use std::path::{Path, PathBuf};

use orch_agents::permissions::{Mode, Permissions, RuleSource, SourcedRule, Verdict};
use serde_json::Value;

use crate::repo_config::RepoConfig;

/// The settings files, lowest precedence first.
pub const FILES: [&str; 3] = [".claude/settings.json", ".orch/settings.yaml", ".claude/settings.local.json"];

/// A settings file's `permissions`, or an error naming the file and line.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("{file} (from {from}) cannot be read: {message}")]
    Parse { file: String, from: String, message: String },
    #[error("{file}: `permissions.{key}` {message}")]
    Shape { file: String, key: String, message: String },
    #[error(transparent)]
    Rule(#[from] orch_agents::permissions::RuleError),
    #[error(transparent)]
    Read(#[from] crate::repo_config::RepoConfigError),
}

/// What the repository's settings files say about permissions.
#[derive(Debug, Clone, Default)]
pub struct RepoPermissions {
    /// Highest precedence first (local, then `.orch`, then `.claude/settings.json`).
    pub rules: Vec<SourcedRule>,
    /// `defaultMode` of the highest scope that sets one, with its `file:line`.
    pub default_mode: Option<(Mode, String)>,
    /// `additionalDirectories`, relative ones resolved against the agent's worktree.
    pub additional_directories: Vec<(String, String)>,
}

impl RepoPermissions {
    /// Whether the files said anything about permissions.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty() && self.default_mode.is_none() && self.additional_directories.is_empty()
    }
}

/// Reads the three files through `repo`; `root` is the checkout (for validating path
/// rules). A rule that cannot match anything is an error with its file and line.
pub fn load(repo: &RepoConfig, root: &Path) -> Result<RepoPermissions, SettingsError> {
    let mut out = RepoPermissions::default();
    for file in FILES {
        let Some(text) = repo.read(file)? else { continue };
        let parse_err =
            |message: String| SettingsError::Parse { file: file.to_string(), from: repo.describe(), message };
        let value: Value = if file.ends_with(".yaml") {
            orch_workflows::yaml::load_value(file, text.as_bytes())
                .map_err(|e| parse_err(crate::error::yaml_message(&e)))?
        } else {
            serde_json::from_str(&text).map_err(|e| parse_err(e.to_string()))?
        };
        let scope = of_file(&value, &text, file)?;
        // Higher scopes go first, so each file's rules are put before the lower ones.
        let mut rules = scope.rules;
        rules.extend(std::mem::take(&mut out.rules));
        out.rules = rules;
        if scope.default_mode.is_some() {
            out.default_mode = scope.default_mode;
        }
        out.additional_directories.extend(scope.additional_directories);
    }
    let home = std::env::var_os("HOME").map(PathBuf::from);
    Permissions::from_rules(None, &out.rules, root, home.as_deref(), vec![root.to_path_buf()])?;
    Ok(out)
}

/// The `permissions` object of one parsed file; `text` is its source, for line numbers.
fn of_file(value: &Value, text: &str, file: &str) -> Result<RepoPermissions, SettingsError> {
    let mut out = RepoPermissions::default();
    let Some(permissions) = value.get("permissions") else { return Ok(out) };
    let shape = |key: &str, message: &str| SettingsError::Shape {
        file: file.to_string(),
        key: key.to_string(),
        message: message.to_string(),
    };
    let Some(permissions) = permissions.as_object() else {
        return Err(shape("", "must be an object with `allow`, `deny`, `ask`, `defaultMode`"));
    };
    let start = find_key(text, "permissions", 0).unwrap_or(0);
    let mut lines = Lines { text };
    for (key, verdict) in [("deny", Verdict::Deny), ("ask", Verdict::Ask), ("allow", Verdict::Allow)] {
        let Some(list) = permissions.get(key) else { continue };
        let Some(list) = list.as_array() else { return Err(shape(key, "must be a list of rules")) };
        let mut cursor = find_key(text, key, start).unwrap_or(start);
        for rule in list {
            let Some(rule) = rule.as_str() else {
                return Err(shape(key, "must hold strings such as `Bash(git diff:*)`"));
            };
            let line = lines.locate(rule, &mut cursor);
            out.rules.push(SourcedRule {
                verdict,
                rule: rule.to_string(),
                source: RuleSource { file: file.to_string(), line, settings_dir: None },
            });
        }
    }
    if let Some(mode) = permissions.get("defaultMode") {
        let mode: Mode = serde_json::from_value(mode.clone()).map_err(|_| {
            shape("defaultMode", "must be one of default, acceptEdits, plan, dontAsk, bypassPermissions")
        })?;
        let line = find_key(text, "defaultMode", start).map(|at| line_at(text, at));
        out.default_mode = Some((mode, RuleSource { file: file.to_string(), line, settings_dir: None }.to_string()));
    }
    if let Some(dirs) = permissions.get("additionalDirectories") {
        let Some(dirs) = dirs.as_array() else { return Err(shape("additionalDirectories", "must be a list of paths")) };
        let mut cursor = find_key(text, "additionalDirectories", start).unwrap_or(start);
        for dir in dirs {
            let Some(dir) = dir.as_str() else { return Err(shape("additionalDirectories", "must hold paths")) };
            let line = lines.locate(dir, &mut cursor);
            let source = RuleSource { file: file.to_string(), line, settings_dir: None };
            out.additional_directories.push((dir.to_string(), source.to_string()));
        }
    }
    Ok(out)
}

struct Lines<'a> {
    text: &'a str,
}

impl Lines<'_> {
    /// The line of the next occurrence of the string `value` at or after `cursor`
    /// (moving the cursor past it); JSON-escaped first, then as written (YAML).
    fn locate(&mut self, value: &str, cursor: &mut usize) -> Option<usize> {
        let escaped = serde_json::to_string(value).ok()?;
        let tail = self.text.get(*cursor..)?;
        let found =
            tail.find(&escaped).map(|i| (i, escaped.len())).or_else(|| tail.find(value).map(|i| (i, value.len())));
        let (offset, len) = found?;
        let at = *cursor + offset;
        *cursor = at + len;
        Some(line_at(self.text, at))
    }
}

/// The byte offset of `key` as a JSON or YAML mapping key at or after `from`.
fn find_key(text: &str, key: &str, from: usize) -> Option<usize> {
    let tail = text.get(from..)?;
    [format!("\"{key}\""), format!("'{key}'"), format!("{key}:")]
        .iter()
        .filter_map(|needle| tail.find(needle.as_str()))
        .min()
        .map(|i| from + i)
}

/// The 1-based line of byte offset `at`.
fn line_at(text: &str, at: usize) -> usize {
    text.get(..at).map_or(0, |head| head.matches('\n').count()) + 1
}

/// An agent's effective permissions, for its report (like Claude Code's `/permissions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct PermissionListing {
    /// Claude Code's mode name, or `orch-default`.
    pub mode: String,
    /// Where the mode came from (`workflow`, a settings file's `file:line`, or `orch`).
    pub mode_source: String,
    /// In evaluation order (deny, ask, allow), each with its `file:line` or origin.
    pub rules: Vec<orch_agents::permissions::EffectiveRule>,
    /// Directories the settings files add to the agent's working directories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub additional_directories: Vec<String>,
}

/// The listing of `permissions`, built from `repo` and whether the workflow named the
/// mode.
pub fn listing(permissions: &Permissions, repo: &RepoPermissions, workflow_named_mode: bool) -> PermissionListing {
    let mode_source = if workflow_named_mode {
        "workflow".to_string()
    } else if let Some((_, at)) = &repo.default_mode {
        at.clone()
    } else {
        "orch".to_string()
    };
    PermissionListing {
        mode: permissions.mode_name().to_string(),
        mode_source,
        rules: permissions.effective_rules(),
        additional_directories: repo.additional_directories.iter().map(|(d, at)| format!("{d} ({at})")).collect(),
    }
}

/// `additionalDirectories` as absolute paths: relative ones against `cwd`, `~/` against
/// the home directory.
pub fn additional_roots(repo: &RepoPermissions, cwd: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    repo.additional_directories
        .iter()
        .filter_map(|(dir, _)| match dir.strip_prefix("~/") {
            Some(rest) => home.map(|h| h.join(rest)),
            None => Some(cwd.join(dir)),
        })
        .collect()
}

/// The note said once per run (and by `orch validate`) when a deny rule covers paths:
/// what the sandbox hides from Bash (see `crate::masks`) and what it cannot.
pub fn bash_gap_note<'a>(denies: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let example = denies.into_iter().find(|rule| {
        let rule = rule.trim();
        // Rules on tools whose specifier is a path: what the sandbox would have to hide
        // from Bash.
        rule.split_once('(').is_some_and(|(tool, _)| {
            orch_types::tools::lookup(tool.trim()).is_some_and(|t| t.rule == orch_types::tools::RuleKind::Path)
        })
    })?;
    Some(format!(
        "note: path deny rules such as `{example}` stop the file tools and any Bash command that names a denied \
         path; for `Read` denies the sandbox also hides from every command the files and directories they cover \
         when an agent starts. This cannot be enforced on Bash for files that match only later (a pattern cannot \
         mask what does not exist yet), paths outside the worktree, what git history holds (`git show \
         HEAD:<file>`), `Edit` denies (commands may still write those paths), or under `backend: none`; keep \
         secrets out of the repository"
    ))
}

/// The mode and rules of one agent: the workflow's rules (highest scope) first, then the
/// repository's; the workflow's mode when it names one, else the repository's
/// `defaultMode`, else orch's default (`None`).
pub fn merge(
    repo: &RepoPermissions,
    workflow_mode: Option<Mode>,
    workflow: &[SourcedRule],
) -> (Option<Mode>, Vec<SourcedRule>) {
    let mode = workflow_mode.or(repo.default_mode.as_ref().map(|(m, _)| *m));
    let mut rules = workflow.to_vec();
    rules.extend(repo.rules.iter().cloned());
    (mode, rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAUDE: &str = r#"{
  "permissions": {
    "allow": [
      "Bash(npm run lint)",
      "Bash(git diff:*)"
    ],
    "deny": [
      "Read(./.env)",
      "Read(.env*)"
    ],
    "defaultMode": "acceptEdits",
    "additionalDirectories": ["../docs/"]
  },
  "hooks": {}
}"#;

    const ORCH: &str = "permissions:\n  deny:\n    - \"Bash(git push:*)\"\n  defaultMode: dontAsk\n";

    #[test]
    fn the_yaml_file_is_read_with_positions_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".orch")).unwrap();
        let repo = RepoConfig::checkout(dir.path());
        std::fs::write(dir.path().join(".orch/settings.yaml"), "permissions:\n  deny: []\n  deny: []\n").unwrap();
        let err = load(&repo, dir.path()).unwrap_err().to_string();
        assert!(err.contains(".orch/settings.yaml:3:3: duplicate key"), "{err}");
        std::fs::write(dir.path().join(".orch/settings.yaml"), crate::error::alias_bomb()).unwrap();
        let err = load(&repo, dir.path()).unwrap_err().to_string();
        assert!(err.contains("aliases copy too much"), "{err}");
    }

    #[test]
    fn rules_carry_file_and_line_and_the_higher_scope_wins_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::create_dir_all(dir.path().join(".orch")).unwrap();
        std::fs::write(dir.path().join(".claude/settings.json"), CLAUDE).unwrap();
        std::fs::write(dir.path().join(".orch/settings.yaml"), ORCH).unwrap();
        let repo = RepoConfig::checkout(dir.path());
        let loaded = load(&repo, dir.path()).unwrap();
        let listed: Vec<(Verdict, &str, String)> =
            loaded.rules.iter().map(|r| (r.verdict, r.rule.as_str(), r.source.to_string())).collect();
        assert_eq!(
            listed,
            [
                (Verdict::Deny, "Bash(git push:*)", ".orch/settings.yaml:3".to_string()),
                (Verdict::Deny, "Read(./.env)", ".claude/settings.json:8".to_string()),
                (Verdict::Deny, "Read(.env*)", ".claude/settings.json:9".to_string()),
                (Verdict::Allow, "Bash(npm run lint)", ".claude/settings.json:4".to_string()),
                (Verdict::Allow, "Bash(git diff:*)", ".claude/settings.json:5".to_string()),
            ]
        );
        assert_eq!(loaded.default_mode, Some((Mode::DontAsk, ".orch/settings.yaml:4".to_string())));
        assert_eq!(loaded.additional_directories, [("../docs/".to_string(), ".claude/settings.json:12".to_string())]);

        // The local file is the highest repository scope.
        std::fs::write(
            dir.path().join(".claude/settings.local.json"),
            r#"{"permissions": {"defaultMode": "plan", "allow": ["Bash(make:*)"]}}"#,
        )
        .unwrap();
        let loaded = load(&repo, dir.path()).unwrap();
        assert_eq!(loaded.default_mode.as_ref().map(|m| m.0), Some(Mode::Plan));
        assert_eq!(loaded.rules[0].rule, "Bash(make:*)");

        // The workflow's mode beats every file; its rules come first.
        let workflow =
            [SourcedRule { verdict: Verdict::Allow, rule: "Read".into(), source: RuleSource::named("workflow") }];
        let (mode, rules) = merge(&loaded, Some(Mode::AcceptEdits), &workflow);
        assert_eq!(mode, Some(Mode::AcceptEdits));
        assert_eq!(rules[0].rule, "Read");
        assert_eq!(rules.len(), 7);
        assert_eq!(merge(&loaded, None, &workflow).0, Some(Mode::Plan));
    }

    #[test]
    fn path_denies_get_the_bash_note_and_others_do_not() {
        let note = bash_gap_note(["Bash(git push:*)", "Read(./.env)"]).unwrap();
        assert!(note.contains("`Read(./.env)`"), "{note}");
        assert_eq!(bash_gap_note(["Bash(git push:*)", "WebFetch", "mcp__x"]), None);
    }

    #[test]
    fn a_rule_that_cannot_match_names_its_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".claude")).unwrap();
        std::fs::write(
            dir.path().join(".claude/settings.json"),
            "{\n  \"permissions\": {\n    \"deny\": [\n      \"Raed(.env)\"\n    ]\n  }\n}\n",
        )
        .unwrap();
        let error = load(&RepoConfig::checkout(dir.path()), dir.path()).unwrap_err();
        assert!(error.to_string().contains(".claude/settings.json:4"), "{error}");
        assert!(error.to_string().contains("Raed(.env)"), "{error}");

        std::fs::write(dir.path().join(".claude/settings.json"), r#"{"permissions": {"defaultMode": "yolo"}}"#)
            .unwrap();
        let error = load(&RepoConfig::checkout(dir.path()), dir.path()).unwrap_err();
        assert!(error.to_string().contains("defaultMode"), "{error}");
    }
}
