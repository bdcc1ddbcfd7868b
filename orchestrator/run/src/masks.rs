//! From an agent's `Read` deny rules to the paths its sandbox masks: the rules' gitignore
//! patterns resolved against the worktree into the files and directories they cover
//! when the agent starts (`Policy::masked`), and what cannot be masked that way.

use std::path::{Path, PathBuf};

use orch_agents::permissions::{PathFilter, PathPattern, Permissions};
use orch_sandbox::policy::{Backend, Policy};

/// At most this many worktree entries are looked at to resolve the patterns.
pub const MAX_SCANNED: usize = 10_000;

/// The paths to mask and what stays readable to commands.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// Existing entries the patterns cover (the topmost: nothing inside a masked
    /// directory is listed again), never through a symlink.
    pub paths: Vec<PathBuf>,
    /// The worktree held more than [`MAX_SCANNED`] entries: the rest was not looked at.
    pub truncated: bool,
}

/// The `Read` deny patterns of `permissions` (the ones every reading tool hides).
pub fn denied_patterns(permissions: &Permissions) -> Vec<PathPattern> {
    permissions.hidden_paths("Read")
}

/// Walks `root` (not following symlinks, skipping `.git`) and collects the entries
/// `patterns` cover. Symlinks are never masked themselves: reading through one reaches
/// its target, which is masked where a pattern covers it.
pub fn resolve(patterns: &[PathPattern], root: &Path) -> Resolved {
    let mut out = Resolved::default();
    let Ok(filter) = PathFilter::new(patterns) else { return out };
    if filter.is_empty() {
        return out;
    }
    let mut scanned = 0usize;
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            scanned += 1;
            if scanned > MAX_SCANNED {
                out.truncated = true;
                return out;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_symlink() || entry.file_name() == ".git" {
                continue;
            }
            let path = entry.path();
            if (kind.is_dir() || kind.is_file()) && filter.hides(&path, kind.is_dir()) {
                out.paths.push(path);
            } else if kind.is_dir() {
                stack.push(path);
            }
        }
    }
    out.paths.sort();
    out
}

/// Fills `policy.masked` for an agent working in `cwd` under `permissions`, and returns
/// the warning to print when the denies cannot be enforced on Bash (backend `none`, or,
/// as a normal user with Landlock, too many entries to grant one by one).
pub fn apply(policy: &mut Policy, permissions: &Permissions, cwd: &Path, agent: &str) -> Option<String> {
    let patterns = denied_patterns(permissions);
    if patterns.is_empty() || policy.backend == Backend::None {
        return None;
    }
    let resolved = resolve(&patterns, cwd);
    policy.masked = resolved.paths;
    let too_many = if resolved.truncated {
        Some(format!("the worktree holds more than {MAX_SCANNED} entries to search"))
    } else if policy.backend == Backend::Landlock && !orch_sandbox::identity::is_root() {
        orch_sandbox::mask::command_rules(&policy.read, &policy.write, &policy.masked).err().map(|e| e.to_string())
    } else {
        None
    };
    too_many.map(|why| {
        format!(
            "warning: agent `{agent}`: its Read deny rules cannot be enforced on Bash ({why}); the file tools \
             still refuse the denied paths, but a command can read them"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use orch_agents::permissions::RuleSet;

    fn permissions(cwd: &Path, deny: &[&str]) -> Permissions {
        let rules = RuleSet { deny: deny.iter().map(|s| s.to_string()).collect(), ..RuleSet::default() };
        Permissions::new(&rules, cwd, None, vec![cwd.to_path_buf()]).unwrap()
    }

    #[test]
    fn read_denies_become_the_existing_paths_they_cover() {
        let dir = tempfile::tempdir().unwrap();
        let wt = dir.path();
        for d in ["secrets/sub", "src/conf", ".git"] {
            std::fs::create_dir_all(wt.join(d)).unwrap();
        }
        for f in [".env", ".env.local", "src/conf/.env.test", "secrets/k", "secrets/sub/k2", "src/main.rs", ".git/.env"]
        {
            std::fs::write(wt.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink(wt.join(".env"), wt.join("link")).unwrap();
        let p = permissions(wt, &["Read(.env*)", "Read(./secrets/**)", "Edit(src/**)", "Bash(rm:*)"]);
        let resolved = resolve(&denied_patterns(&p), wt);
        let rel: Vec<_> = resolved.paths.iter().map(|p| p.strip_prefix(wt).unwrap().to_path_buf()).collect();
        assert_eq!(
            rel,
            [".env", ".env.local", "secrets", "src/conf/.env.test"].map(PathBuf::from),
            "Edit denies, symlinks, .git and what is inside a masked directory are left out"
        );
        assert!(!resolved.truncated);
        // No Read deny: nothing to mask.
        assert!(resolve(&denied_patterns(&permissions(wt, &["Edit(.env)"])), wt).paths.is_empty());
    }
}
