//! The hooks and MCP servers of a run, gathered from the repository and the workflow.
//!
//! Hooks come from `.orch/settings.yaml` (`hooks:`), `.claude/settings.json` (Claude
//! Code's `hooks` object) and the workflow's `hooks:`, in that order; all of them run.
//! MCP servers come from `.mcp.json` (`mcpServers`) and the workflow's `mcp_servers:`;
//! a workflow server replaces a repository one of the same name. Repository files are
//! read through [`RepoConfig`], so off the trusted ref they come from that ref.
//!
//! Claude Code files may hold more than orch runs: other settings, hook events that
//! cannot happen in an unattended run (`PermissionRequest`, `Setup`, ...), hook types
//! other than `command`. Those are skipped with a warning that says why, so the same
//! files serve both.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Context as _;
use orch_agents::command_hooks::{CommandHook, DEFAULT_TIMEOUT, HookEvent as AgentEvent};
use orch_workflows::extensions::{HookCommand, HookEvent, HookMatcher, HookSettings, McpServer, is_server_name};
use serde_json::Value;

use crate::repo_config::RepoConfig;

/// The hooks and MCP servers agents get.
#[derive(Debug, Clone, Default)]
pub struct Extensions {
    pub hooks: Vec<CommandHook>,
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// The settings files' `permissions` (see [`crate::settings_permissions`]).
    pub permissions: crate::settings_permissions::RepoPermissions,
}

/// Reads the repository's files through `repo` and adds the workflow's own.
pub fn load(
    repo: &RepoConfig,
    workflow_hooks: &HookSettings,
    workflow_mcp: &BTreeMap<String, McpServer>,
) -> crate::error::Result<Extensions> {
    let mut out = Extensions::default();
    if let Some(text) = repo.read(".orch/settings.yaml")? {
        let value = orch_workflows::yaml::load_value(".orch/settings.yaml", text.as_bytes()).map_err(|e| {
            crate::error::Error::Message(format!(
                "{} (in the settings from {}); fix the file",
                crate::error::yaml_message(&e),
                repo.describe()
            ))
        })?;
        out.hooks.extend(hooks_of(&value, ".orch/settings.yaml")?);
    }
    if let Some(text) = repo.read(".claude/settings.json")? {
        let value: Value = serde_json::from_str(&text)
            .with_context(|| format!(".claude/settings.json (from {}) is not valid JSON", repo.describe()))?;
        out.hooks.extend(hooks_of(&value, ".claude/settings.json")?);
    }
    out.hooks.extend(convert(workflow_hooks));
    out.mcp_servers = repo_mcp_servers(repo)?;
    orch_agents::command_hooks::validate(&out.hooks)?;
    out.mcp_servers.extend(workflow_mcp.iter().map(|(k, v)| (k.clone(), v.clone())));
    if !out.hooks.is_empty() || !out.mcp_servers.is_empty() {
        tracing::info!(
            hooks = out.hooks.len(),
            mcp_servers = out.mcp_servers.len(),
            "repository configuration read from {}",
            repo.describe()
        );
    }
    Ok(out)
}

/// The MCP servers the repository configures in `.mcp.json` (`mcpServers`), read
/// through `repo`; none when the file does not exist.
pub fn repo_mcp_servers(repo: &RepoConfig) -> crate::error::Result<BTreeMap<String, McpServer>> {
    match repo.read(".mcp.json")? {
        Some(text) => mcp_servers_of(&text, &format!(".mcp.json (from {})", repo.describe())),
        None => Ok(BTreeMap::new()),
    }
}

/// The servers of one `.mcp.json`-shaped text (`mcpServers`), checked; `file` names
/// it in errors.
pub fn mcp_servers_of(text: &str, file: &str) -> crate::error::Result<BTreeMap<String, McpServer>> {
    let mut out = BTreeMap::new();
    let value: Value = serde_json::from_str(text).with_context(|| format!("{file} is not valid JSON"))?;
    let servers = value.get("mcpServers").cloned().unwrap_or(Value::Object(Default::default()));
    let servers: BTreeMap<String, McpServer> = serde_json::from_value(servers)
        .with_context(|| format!("{file}: `mcpServers` does not hold valid server entries"))?;
    for (name, server) in servers {
        if !is_server_name(&name) {
            return Err(crate::error::Error::Message(format!(
                "{file}: `{name}` cannot name an MCP server (letters, digits, `-`, single `_`)"
            )));
        }
        if let Some((message, hint)) = server.problem() {
            return Err(crate::error::Error::Message(format!("{file}: server `{name}`: {message}; {hint}")));
        }
        out.insert(name, server);
    }
    Ok(out)
}

/// The `hooks` object of a settings file, leniently: unknown events and non-command
/// hooks are skipped with a warning; a malformed command hook is an error.
fn hooks_of(settings: &Value, file: &str) -> crate::error::Result<Vec<CommandHook>> {
    let Some(hooks) = settings.get("hooks") else { return Ok(Vec::new()) };
    let Some(events) = hooks.as_object() else {
        return Err(crate::error::Error::Message(format!("{file}: `hooks` must be an object of events")));
    };
    let mut settings = HookSettings::new();
    for (event, groups) in events {
        let Ok(event) = serde_json::from_value::<HookEvent>(Value::String(event.clone())) else {
            tracing::warn!("{file}: orch does not run `{event}` hooks ({}); skipping them", not_run(event));
            continue;
        };
        let Some(groups) = groups.as_array() else {
            return Err(crate::error::Error::Message(format!("{file}: `hooks.{}` must be a list", event.as_str())));
        };
        for group in groups {
            let mut group = group.clone();
            if let Some(list) = group.get_mut("hooks").and_then(Value::as_array_mut) {
                list.retain(|h| {
                    let kind = h.get("type").and_then(Value::as_str).unwrap_or("command");
                    if kind != "command" {
                        tracing::warn!("{file}: orch runs only `command` hooks; skipping a `{kind}` hook");
                    }
                    kind == "command"
                });
            }
            let group: HookMatcher = serde_json::from_value(group)
                .with_context(|| format!("{file}: a `{}` hook entry is malformed", event.as_str()))?;
            settings.entry(event).or_default().push(group);
        }
    }
    Ok(convert(&settings))
}

/// Why orch does not run the Claude Code hook event `event`.
pub fn not_run(event: &str) -> &'static str {
    match event {
        "PermissionDenied" => "it follows denials by Claude Code's auto-mode classifier, which orch does not have",
        "UserPromptExpansion" => "it runs when a person types a slash command",
        "Setup" => "it runs for `claude --init` and `--maintenance`",
        "Elicitation" | "ElicitationResult" => "it runs when an MCP server asks a person for input",
        "TeammateIdle" | "TaskCreated" | "TaskCompleted" => "it belongs to Claude Code's agent teams",
        "ConfigChange" | "FileChanged" | "CwdChanged" => {
            "orch reads settings once, from the trusted ref, and watches no files"
        }
        "WorktreeCreate" | "WorktreeRemove" => "orch makes and removes worktrees in the coordinator itself",
        "MessageDisplay" => {
            "it changes how a message streams on a person's screen, and an orch agent's messages stream to none"
        }
        _ => "not an event orch knows",
    }
}

fn convert(settings: &HookSettings) -> Vec<CommandHook> {
    let mut out = Vec::new();
    for (event, groups) in settings {
        let event: AgentEvent = *event;
        for group in groups {
            for HookCommand { command, timeout, .. } in &group.hooks {
                out.push(CommandHook {
                    event,
                    matcher: group.matcher.clone(),
                    condition: group.condition.clone(),
                    command: command.clone(),
                    timeout: timeout.map(Duration::from_secs).unwrap_or(DEFAULT_TIMEOUT),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yaml_file_is_read_with_positions_and_caps() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join(".orch")).unwrap();
        let repo = RepoConfig::checkout(dir.path());
        let load = || load(&repo, &HookSettings::new(), &BTreeMap::new()).map(|_| ()).unwrap_err().to_string();
        std::fs::write(dir.path().join(".orch/settings.yaml"), "hooks: {}\nhooks: {}\n").unwrap();
        let err = load();
        assert!(err.contains(".orch/settings.yaml:2:1: duplicate key"), "{err}");
        std::fs::write(dir.path().join(".orch/settings.yaml"), crate::error::alias_bomb()).unwrap();
        let err = load();
        assert!(err.contains("aliases copy too much"), "{err}");
    }

    #[test]
    fn claude_code_settings_are_read_and_extras_skipped() {
        let settings: Value = serde_json::json!({
            "permissions": {"allow": ["Bash"]},
            "hooks": {
                "PreToolUse": [{"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "check.sh", "timeout": 30},
                    {"type": "prompt", "prompt": "Is this fine?"}
                ]}],
                "MessageDisplay": [{"hooks": [{"type": "command", "command": "x"}]}],
                "Stop": [{"hooks": [{"type": "command", "command": "stop.sh"}]}],
                "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "prompt.sh"}]}]
            }
        });
        let hooks = hooks_of(&settings, "s.json").unwrap();
        // In the order of an agent's life.
        assert_eq!(hooks.len(), 3);
        assert_eq!((hooks[0].event, hooks[0].command.as_str()), (AgentEvent::UserPromptSubmit, "prompt.sh"));
        assert_eq!(hooks[1].event, AgentEvent::PreToolUse);
        assert_eq!(hooks[1].matcher.as_deref(), Some("Bash"));
        assert_eq!(hooks[1].timeout, Duration::from_secs(30));
        assert_eq!((hooks[2].event, hooks[2].command.as_str()), (AgentEvent::Stop, "stop.sh"));
        assert_eq!(hooks[2].timeout, DEFAULT_TIMEOUT);
        let bad = serde_json::json!({"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}});
        assert!(hooks_of(&bad, "s.json").is_err());
        let regex = serde_json::json!({"hooks": {"PreToolUse": [{"matcher": "Bash(", "hooks": [{"command": "x"}]}]}});
        let error = orch_agents::command_hooks::validate(&hooks_of(&regex, "s.json").unwrap()).unwrap_err();
        assert!(error.to_string().contains("not a valid regular expression"), "{error}");
    }
}
