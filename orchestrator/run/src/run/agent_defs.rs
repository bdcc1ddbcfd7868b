//! Agent definition files of the repository (`.orch/agents/*.md`, then
//! `.claude/agents/*.md`), read with git2 as blobs of one commit: never from the user's
//! working tree, so no symlink or uncommitted file is followed. `orch run` picks the
//! commit by the trust rule (`repo_config`): the base ref in a pull-request run,
//! otherwise the run's base commit. The parsing itself takes file contents
//! (`AgentFiles::from_files`), whatever their source.

use std::path::Path;

use git2::{ObjectType, Oid, Repository};
use orch_agents::permissions::Mode;
use orch_agents::subagent::AgentDefinition;
use orch_workflows::PermissionMode;
use orch_workflows::subagents::{AGENT_DIRS, AgentFile, AgentFiles};

/// The `*.md` files under the agent directories at `commit`, as (path, contents), in
/// search order (each directory sorted by name).
pub fn files_at(git_dir: &Path, commit: Oid) -> Result<Vec<(String, String)>, git2::Error> {
    let repo = Repository::open(git_dir)?;
    let tree = repo.find_commit(commit)?.tree()?;
    let mut files = Vec::new();
    for dir in AGENT_DIRS {
        let Ok(entry) = tree.get_path(Path::new(dir)) else { continue };
        if entry.kind() != Some(ObjectType::Tree) {
            continue;
        }
        let sub = repo.find_tree(entry.id())?;
        let mut names: Vec<(String, Oid)> = sub
            .iter()
            .filter(|e| e.kind() == Some(ObjectType::Blob))
            .filter_map(|e| e.name().ok().map(|n| (n.to_string(), e.id())))
            .filter(|(n, _)| n.ends_with(".md"))
            .collect();
        names.sort();
        for (name, id) in names {
            let blob = repo.find_blob(id)?;
            let path = format!("{dir}/{name}");
            match std::str::from_utf8(blob.content()) {
                Ok(text) => files.push((path, text.to_string())),
                Err(_) => tracing::warn!("{path} is not UTF-8 text; the agent definition is ignored"),
            }
        }
    }
    Ok(files)
}

/// The definitions at the run's base commit; warnings are logged.
pub fn load(git_dir: &Path, commit: Oid) -> AgentFiles {
    match files_at(git_dir, commit) {
        Ok(files) => {
            let found = AgentFiles::from_files(&files);
            for warning in &found.warnings {
                tracing::warn!("agent definitions: {warning}");
            }
            found
        }
        Err(e) => {
            tracing::warn!("cannot read the agent definition files at the base commit: {e}");
            AgentFiles::default()
        }
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
        tools: file.tools.clone(),
        model: file.model.clone(),
        max_turns: file.max_turns,
        permission_mode: file.permission_mode.map(mode),
        system_prompt: file.prompt.clone(),
    }
}
