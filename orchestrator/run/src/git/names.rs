//! Names derived from run and agent ids: branch names, worktree names and directory
//! names must be valid git ref components and plain file names whatever the workflow
//! calls its agents (fan-out ids can hold `/`, spaces, brackets or non-ASCII text).

use super::{GitError, Result};

/// Longest name kept from an id before the disambiguating hash is appended.
const MAX_LEN: usize = 64;
/// Names of run branches that are not agents' (`orch/<run>/integration`).
const RESERVED: &[&str] = &["integration"];

/// Checks that a run id can be used as is in `orch/<run-id>/<agent>`. Run ids are made
/// by orch, so they are validated, not rewritten.
pub fn validate_run_id(run_id: &str) -> Result<()> {
    let ok = !run_id.is_empty()
        && run_id.len() <= MAX_LEN
        && run_id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !run_id.starts_with(['.', '-'])
        && !run_id.ends_with('.')
        && !run_id.contains("..")
        && !run_id.ends_with(".lock");
    if ok { Ok(()) } else { Err(GitError::RunId(run_id.to_owned())) }
}

/// Maps an agent id to a name that is safe as a branch component, a worktree name and a
/// directory name: ASCII letters, digits, `_`, `-` and single inner dots, at most 64
/// characters. An id that is already such a name is kept as is; any other id is
/// rewritten and gets a `-` and 8 hex digits of its SHA-1 appended, so two ids that
/// rewrite to the same text (`a/b`, `a b`) still get different names. So does an id
/// that would take a reserved name (`integration`, the merge branch).
pub fn safe_name(agent_id: &str) -> Result<String> {
    if agent_id.is_empty() {
        return Err(GitError::AgentId(agent_id.to_owned()));
    }
    let mut name = String::with_capacity(agent_id.len().min(MAX_LEN));
    for c in agent_id.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.' { c } else { '-' };
        // No `..` (invalid in refs), no run of dashes (noise).
        if (c == '.' || c == '-') && name.ends_with(c) {
            continue;
        }
        name.push(c);
    }
    let mut name = name.trim_matches(['.', '-']).to_owned();
    if name.ends_with(".lock") {
        name.truncate(name.len() - ".lock".len());
    }
    name.truncate(MAX_LEN); // ASCII only, so any byte index is a char boundary
    let mut name = name.trim_end_matches(['.', '-']).to_owned();
    if name != agent_id || RESERVED.contains(&name.as_str()) {
        let hash = git2::Oid::hash_object(git2::ObjectType::Blob, agent_id.as_bytes())
            .map_err(|source| GitError::Git { action: format!("hash the agent id `{agent_id}`"), source })?;
        let hex = hash.to_string();
        if !name.is_empty() {
            name.push('-');
        }
        name.push_str(hex.get(..8).unwrap_or(&hex));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example names of the workflow-files reference are what orch writes (a tidy
    /// check).
    #[test]
    fn the_docs_name_the_branches_and_files_orch_writes() {
        let readme = include_str!("../../../../docs/src/reference/workflow-files.md");
        let name = safe_name("fix/crates-core").unwrap();
        for written in
            [format!("orch/<run>/{name}`"), format!("transcripts/{name}.jsonl"), format!("patches/{name}.patch")]
        {
            assert!(readme.contains(&written), "workflow-files.md does not show `{written}`");
        }
        assert!(!readme.contains("orch/<run>/fix/crates-core"), "workflow-files.md shows a branch orch never writes");
    }

    #[test]
    fn plain_ids_are_kept() {
        for id in ["fix", "fix-1", "survey_2", "crate.io", "A9"] {
            assert_eq!(safe_name(id).unwrap(), id);
        }
    }

    #[test]
    fn other_ids_are_rewritten_and_stay_distinct() {
        let names: Vec<String> =
            ["fix/a", "fix a", "fix-a-", "../../etc", ".hidden", "x.lock", "é", "a..b", "-", "fix[crates/foo]"]
                .iter()
                .map(|id| safe_name(id).unwrap())
                .collect();
        for (name, id) in names.iter().zip(["fix/a", "fix a"]) {
            assert!(name.starts_with("fix-a-"), "{id} -> {name}");
        }
        assert_ne!(names[0], names[1]);
        for name in &names {
            assert!(!name.is_empty() && name.len() <= MAX_LEN + 9, "{name}");
            assert!(!name.starts_with(['.', '-']) && !name.ends_with(['.', '-']), "{name}");
            assert!(!name.contains("..") && !name.contains('/') && !name.ends_with(".lock"), "{name}");
            assert!(git2::Reference::is_valid_name(&format!("refs/heads/orch/run/{name}")), "{name}");
        }
        assert!(safe_name("").is_err());
        assert!(safe_name("integration").unwrap().starts_with("integration-"));
        assert_eq!(safe_name(&"x".repeat(200)).unwrap().len(), MAX_LEN + 9);
    }

    #[test]
    fn run_ids() {
        for ok in ["20261129-1330-ab12", "run.1", "r_2"] {
            validate_run_id(ok).unwrap();
        }
        for bad in ["", "a/b", "..", ".a", "-a", "a.lock", "a b", "a.", &"x".repeat(65)] {
            assert!(validate_run_id(bad).is_err(), "{bad}");
        }
    }
}
