//! The repository's agent definition files (`.orch/agents/*.md`, then
//! `.claude/agents/*.md`), skills (`.orch/skills/`, `.claude/skills/`) and slash commands
//! (`.orch/commands/`, `.claude/commands/`), read as blobs of one commit: never from the
//! user's working tree, so no symlink or uncommitted file is followed. `orch run` picks
//! the commit by the trust rule (`repo_config`): the trusted ref when the checkout is
//! another commit, otherwise the run's base commit. The parsing itself takes file contents, whatever
//! their source.
//!
//! Skills are also copied out of that commit into the run directory (`skills/<name>/`),
//! which every agent's sandbox may read and none may write: the `Skill` tool points the
//! model there for the files beside `SKILL.md`.

use std::path::{Path, PathBuf};

use orch_agents::permissions::Mode;
use orch_agents::subagent::AgentDefinition;
use orch_agents::tools::skill::SkillEntry;
use orch_workflows::PermissionMode;
use orch_workflows::skills::Skills;
use orch_workflows::subagents::AgentFile;

use crate::repo_config::{RepoConfig, RepoFiles};

/// The agent files, skills and commands of `config`; warnings are logged.
pub fn load(config: &RepoConfig) -> crate::error::Result<RepoFiles> {
    let files = config.extension_files().map_err(|e| crate::error::Error::Message(e.to_string()))?;
    for warning in files.warnings() {
        tracing::warn!("repository configuration: {warning}");
    }
    Ok(files)
}

/// The skills of a run, with the directory each was copied to.
#[derive(Debug, Clone, Default)]
pub struct RunSkills {
    pub skills: Skills,
    /// The copies, by name; every one under `root`.
    pub copies: Vec<(String, PathBuf)>,
    /// Where the copies are (a read-only root of every agent that can load skills).
    pub root: Option<PathBuf>,
}

impl RunSkills {
    /// Copies the skills of `config` into `dest`.
    pub fn copy(config: &RepoConfig, skills: Skills, dest: &Path) -> crate::error::Result<RunSkills> {
        if skills.skills.is_empty() {
            return Ok(RunSkills { skills, ..RunSkills::default() });
        }
        let copies = config.copy_skills(&skills, dest).map_err(|e| crate::error::Error::Message(e.to_string()))?;
        Ok(RunSkills { skills, copies, root: Some(dest.to_path_buf()) })
    }

    /// The skills an agent whose `skills:` is `allowed` is offered, as the `Skill` tool
    /// takes them.
    pub fn entries(&self, allowed: Option<&[String]>) -> Vec<SkillEntry> {
        self.skills
            .visible(allowed)
            .filter_map(|skill| {
                let (_, directory) = self.copies.iter().find(|(name, _)| *name == skill.name)?;
                Some(SkillEntry {
                    name: skill.name.clone(),
                    summary: skill.listing(),
                    body: skill.body.clone(),
                    directory: directory.clone(),
                    allowed_tools: skill.allowed_tools.clone(),
                })
            })
            .collect()
    }
}

pub fn mode(mode: PermissionMode) -> Mode {
    mode
}

/// A definition as the `Agent` tool uses it.
pub fn definition(file: &AgentFile) -> AgentDefinition {
    AgentDefinition {
        name: file.name.clone(),
        description: file.description.clone(),
        tools: effective_tools(file),
        model: file.model.clone(),
        max_turns: file.max_turns,
        permission_mode: file.permission_mode.map(mode),
        system_prompt: file.prompt.clone(),
    }
}

/// The tools of a definition with its `disallowedTools` taken away. A definition that
/// lists no tools inherits its caller's; with a `disallowedTools`, that becomes every
/// built-in tool but those (the `Agent` tool intersects it with the caller's).
fn effective_tools(file: &AgentFile) -> Option<Vec<String>> {
    if file.disallowed_tools.is_empty() {
        return file.tools.clone();
    }
    let denied = |t: &str| {
        let canonical = orch_types::tools::lookup(t).map_or(t, |info| info.name);
        file.disallowed_tools.iter().any(|d| {
            let d = d.split('(').next().unwrap_or(d).trim();
            orch_types::tools::lookup(d).map_or(d, |info| info.name) == canonical
        })
    };
    let base: Vec<String> = match &file.tools {
        Some(tools) => tools.clone(),
        None => orch_types::tools::ALL_NAMES.iter().map(|t| t.to_string()).collect(),
    };
    Some(base.into_iter().filter(|t| !denied(t)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disallowed_tools_are_taken_away() {
        let text = "---\nname: r\ndescription: reviews\ndisallowedTools: Write, Edit, Task\n---\nbody";
        let (file, _) = orch_workflows::subagents::parse_agent_file(text, ".claude/agents/r.md").unwrap();
        let tools = definition(&file).tools.unwrap();
        assert!(tools.contains(&"Read".to_string()) && tools.contains(&"Bash".to_string()), "{tools:?}");
        assert!(!tools.iter().any(|t| t == "Write" || t == "Edit" || t == "Agent"), "{tools:?}");
        let listed = "---\nname: r\ndescription: d\ntools: Read, Edit\ndisallowedTools: [Edit]\n---\nb";
        let (file, _) = orch_workflows::subagents::parse_agent_file(listed, ".claude/agents/r.md").unwrap();
        assert_eq!(definition(&file).tools, Some(vec!["Read".to_string()]));
    }
}
