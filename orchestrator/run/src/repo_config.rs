//! Where executable repository configuration is read from: hooks
//! (`.orch/settings.yaml`, `.claude/settings.json`), MCP servers (`.mcp.json`), agent
//! files (`.orch/agents/`, `.claude/agents/`), skills (`.orch/skills/`,
//! `.claude/skills/`) and slash commands (`.orch/commands/`, `.claude/commands/`).
//!
//! The trust rule: in a pull-request run, these files come from the **base ref**, not
//! from the checked-out pull request, so a pull request cannot add a hook or a server
//! that runs in its own CI. `--trust-repo-config` opts in to the checked-out files.
//!
//! A run is a pull-request run when `--config-ref REF` is given, or when
//! `GITHUB_EVENT_NAME` is `pull_request` or `pull_request_target`. The base ref is
//! `--config-ref`, else `GITHUB_BASE_REF` (looked up as `refs/remotes/origin/<ref>`,
//! then `origin/<ref>`, then `<ref>` as git revision syntax). A pull-request run whose
//! base cannot be resolved fails: it never falls back to the checkout.
//!
//! From a commit, files are read as blobs from the git object database (git2), so no
//! symlink or path on disk is followed. From the checkout, a symlink is refused too.
//!
//! The API for other readers: [`RepoConfig::resolve`] once per run, then
//! [`RepoConfig::read`] (one file, `None` when absent) and [`RepoConfig::list`] (the
//! regular files directly in a directory, sorted).

use std::path::{Component, Path, PathBuf};

/// Environment variables that make a run a pull-request run.
pub const PR_EVENTS: [&str; 2] = ["pull_request", "pull_request_target"];

/// A problem reading repository configuration.
#[derive(Debug, thiserror::Error)]
pub enum RepoConfigError {
    #[error(
        "this is a pull-request run, so repository configuration is read from the base ref, but no base ref is \
         known; pass --config-ref REF, set GITHUB_BASE_REF, or pass --trust-repo-config to use the checked-out files"
    )]
    NoBaseRef,
    #[error(
        "cannot resolve the config ref `{reference}` in {repo}: {message}; fetch it first (e.g. `git fetch origin \
         {reference}`) or pass --trust-repo-config"
    )]
    BadRef { reference: String, repo: String, message: String },
    #[error("cannot open the repository {repo}: {message}")]
    Open { repo: String, message: String },
    #[error("`{0}` is not a relative path inside the repository")]
    BadPath(String),
    #[error("cannot read {path} from {from}: {message}")]
    Read { path: String, from: String, message: String },
}

/// What the run was told about trust (flags and environment).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Trust {
    /// `--trust-repo-config`.
    pub trust_checkout: bool,
    /// `--config-ref`.
    pub config_ref: Option<String>,
    /// `GITHUB_EVENT_NAME`.
    pub event_name: Option<String>,
    /// `GITHUB_BASE_REF`.
    pub base_ref: Option<String>,
}

impl Trust {
    /// The flags, with the rest from this process's environment.
    pub fn from_env(trust_checkout: bool, config_ref: Option<String>) -> Trust {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let base_ref =
            var("GITHUB_BASE_REF").or_else(|| var("GITHUB_EVENT_PATH").and_then(|p| event_base_ref(Path::new(&p))));
        Trust { trust_checkout, config_ref, event_name: var("GITHUB_EVENT_NAME"), base_ref }
    }

    /// Whether this is a pull-request run.
    pub fn is_pull_request(&self) -> bool {
        self.config_ref.is_some() || self.event_name.as_deref().is_some_and(|e| PR_EVENTS.contains(&e))
    }
}

#[derive(Debug, Clone)]
enum Source {
    Checkout(PathBuf),
    Commit { repo: PathBuf, reference: String, commit: git2::Oid },
}

/// Reads repository configuration files from the checkout or from a trusted commit.
#[derive(Debug, Clone)]
pub struct RepoConfig {
    source: Source,
}

impl RepoConfig {
    /// Where to read from, for the user's repository at `repo` (its working tree is the
    /// checkout).
    pub fn resolve(repo: &Path, trust: &Trust) -> Result<RepoConfig, RepoConfigError> {
        // The top of the working tree, when `repo` is inside one.
        let top = git2::Repository::discover(repo).ok().and_then(|r| r.workdir().map(Path::to_path_buf));
        let repo = top.as_deref().unwrap_or(repo);
        if trust.trust_checkout || !trust.is_pull_request() {
            return Ok(RepoConfig::checkout(repo));
        }
        let reference =
            trust.config_ref.clone().or_else(|| trust.base_ref.clone()).ok_or(RepoConfigError::NoBaseRef)?;
        RepoConfig::at_ref(repo, &reference)
    }

    /// The files of `commit` in the repository (or git directory) at `repo`.
    pub fn at_commit(repo: &Path, commit: git2::Oid) -> RepoConfig {
        RepoConfig { source: Source::Commit { repo: repo.to_path_buf(), reference: commit.to_string(), commit } }
    }

    /// The checked-out files under `root`.
    pub fn checkout(root: &Path) -> RepoConfig {
        RepoConfig { source: Source::Checkout(root.to_path_buf()) }
    }

    /// The files of `reference` in the repository at `repo`.
    pub fn at_ref(repo: &Path, reference: &str) -> Result<RepoConfig, RepoConfigError> {
        let git = git2::Repository::open(repo)
            .map_err(|e| RepoConfigError::Open { repo: repo.display().to_string(), message: e.message().into() })?;
        let candidates =
            [format!("refs/remotes/origin/{reference}"), format!("origin/{reference}"), reference.to_string()];
        let mut last = String::new();
        for candidate in &candidates {
            match git.revparse_single(candidate).and_then(|o| o.peel_to_commit()) {
                Ok(commit) => {
                    return Ok(RepoConfig {
                        source: Source::Commit {
                            repo: repo.to_path_buf(),
                            reference: reference.to_string(),
                            commit: commit.id(),
                        },
                    });
                }
                Err(e) => last = e.message().to_string(),
            }
        }
        Err(RepoConfigError::BadRef {
            reference: reference.to_string(),
            repo: repo.display().to_string(),
            message: last,
        })
    }

    /// Where the files come from, for messages: `the checkout at …` or `ref … (commit)`.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Checkout(root) => format!("the checkout at {}", root.display()),
            Source::Commit { reference, commit, .. } => format!("the base ref `{reference}` ({commit})"),
        }
    }

    /// The repository and commit the files come from, for readers that walk a commit
    /// themselves (agent definitions); `None` for the checkout.
    pub fn commit(&self) -> Option<(&Path, git2::Oid)> {
        match &self.source {
            Source::Checkout(_) => None,
            Source::Commit { repo, commit, .. } => Some((repo.as_path(), *commit)),
        }
    }

    /// The top of the repository's working tree (the checkout).
    pub fn root(&self) -> &Path {
        match &self.source {
            Source::Checkout(root) => root,
            Source::Commit { repo, .. } => repo,
        }
    }

    /// Whether the files come from a base ref rather than the checkout.
    pub fn is_base_ref(&self) -> bool {
        matches!(self.source, Source::Commit { .. })
    }

    /// The text of the file at `path` (relative, `/`-separated), `None` when absent.
    pub fn read(&self, path: &str) -> Result<Option<String>, RepoConfigError> {
        let rel = relative(path)?;
        let err = |message: String| RepoConfigError::Read { path: path.to_string(), from: self.describe(), message };
        match &self.source {
            Source::Checkout(root) => {
                let full = root.join(&rel);
                match std::fs::symlink_metadata(&full) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(err(e.to_string())),
                    Ok(meta) if meta.file_type().is_symlink() => Err(err("it is a symbolic link".into())),
                    Ok(meta) if !meta.is_file() => Ok(None),
                    Ok(_) => std::fs::read_to_string(&full).map(Some).map_err(|e| err(e.to_string())),
                }
            }
            Source::Commit { repo, commit, .. } => {
                let git = git2::Repository::open(repo).map_err(|e| err(e.message().into()))?;
                let tree = git.find_commit(*commit).and_then(|c| c.tree()).map_err(|e| err(e.message().into()))?;
                let entry = match tree.get_path(&rel) {
                    Ok(e) => e,
                    Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(None),
                    Err(e) => return Err(err(e.message().into())),
                };
                if entry.kind() != Some(git2::ObjectType::Blob) || entry.filemode() == 0o120000 {
                    return Ok(None);
                }
                let blob = git.find_blob(entry.id()).map_err(|e| err(e.message().into()))?;
                String::from_utf8(blob.content().to_vec()).map(Some).map_err(|_| err("it is not UTF-8 text".into()))
            }
        }
    }

    /// The regular files directly in directory `dir`, as `(path, text)`, sorted by path.
    /// A missing directory is empty.
    pub fn list(&self, dir: &str) -> Result<Vec<(String, String)>, RepoConfigError> {
        let rel = relative(dir)?;
        let err = |message: String| RepoConfigError::Read { path: dir.to_string(), from: self.describe(), message };
        let prefix = rel.to_string_lossy().trim_end_matches('/').to_string();
        let mut names = Vec::new();
        match &self.source {
            Source::Checkout(root) => {
                let full = root.join(&rel);
                match std::fs::symlink_metadata(&full) {
                    Ok(meta) if meta.is_dir() => {}
                    _ => return Ok(Vec::new()),
                }
                for entry in std::fs::read_dir(&full).map_err(|e| err(e.to_string()))? {
                    let entry = entry.map_err(|e| err(e.to_string()))?;
                    if entry.file_type().map(|t| t.is_file()).unwrap_or(false) {
                        names.push(entry.file_name().to_string_lossy().into_owned());
                    }
                }
            }
            Source::Commit { repo, commit, .. } => {
                let git = git2::Repository::open(repo).map_err(|e| err(e.message().into()))?;
                let tree = git.find_commit(*commit).and_then(|c| c.tree()).map_err(|e| err(e.message().into()))?;
                let sub = match tree.get_path(&rel) {
                    Ok(e) if e.kind() == Some(git2::ObjectType::Tree) => {
                        git.find_tree(e.id()).map_err(|e| err(e.message().into()))?
                    }
                    _ => return Ok(Vec::new()),
                };
                for entry in sub.iter() {
                    if entry.kind() == Some(git2::ObjectType::Blob)
                        && entry.filemode() != 0o120000
                        && let Ok(name) = entry.name()
                    {
                        names.push(name.to_string());
                    }
                }
            }
        }
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let path = format!("{prefix}/{name}");
            if let Some(text) = self.read(&path)? {
                out.push((path, text));
            }
        }
        Ok(out)
    }
}

/// The most files [`RepoConfig::tree`] returns, and the most bytes in all of them.
const TREE_MAX_FILES: usize = 5_000;
const TREE_MAX_BYTES: u64 = 64 << 20;

/// One file of [`RepoConfig::tree`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// The path relative to the repository, `/`-separated.
    pub path: String,
    pub bytes: Vec<u8>,
    pub executable: bool,
}

impl RepoConfig {
    /// Every regular file below directory `dir`, at any depth, sorted by path; symbolic
    /// links are skipped, never followed. A missing directory is empty. At most
    /// 5,000 files and 64 MiB in all: past that, an error.
    pub fn tree(&self, dir: &str) -> Result<Vec<TreeFile>, RepoConfigError> {
        let rel = relative(dir)?;
        let prefix = rel.to_string_lossy().trim_end_matches('/').to_string();
        let err = |message: String| RepoConfigError::Read { path: dir.to_string(), from: self.describe(), message };
        let too_big = || err("it holds more than 5,000 files or 64 MiB; make it smaller".into());
        let mut out = Vec::new();
        let mut total = 0u64;
        match &self.source {
            Source::Checkout(root) => {
                let mut stack = vec![(root.join(&rel), prefix)];
                while let Some((full, path)) = stack.pop() {
                    match std::fs::symlink_metadata(&full) {
                        Ok(meta) if meta.is_dir() => {}
                        _ => continue,
                    }
                    for entry in std::fs::read_dir(&full).map_err(|e| err(e.to_string()))? {
                        let entry = entry.map_err(|e| err(e.to_string()))?;
                        let name = entry.file_name().to_string_lossy().into_owned();
                        let kind = entry.file_type().map_err(|e| err(e.to_string()))?;
                        let child = format!("{path}/{name}");
                        if kind.is_dir() {
                            stack.push((entry.path(), child));
                        } else if kind.is_file() {
                            use std::os::unix::fs::PermissionsExt as _;
                            let meta = entry.metadata().map_err(|e| err(e.to_string()))?;
                            total += meta.len();
                            if out.len() >= TREE_MAX_FILES || total > TREE_MAX_BYTES {
                                return Err(too_big());
                            }
                            let bytes = std::fs::read(entry.path()).map_err(|e| err(e.to_string()))?;
                            out.push(TreeFile {
                                path: child,
                                bytes,
                                executable: meta.permissions().mode() & 0o111 != 0,
                            });
                        }
                    }
                }
            }
            Source::Commit { repo, commit, .. } => {
                let git = git2::Repository::open(repo).map_err(|e| err(e.message().into()))?;
                let tree = git.find_commit(*commit).and_then(|c| c.tree()).map_err(|e| err(e.message().into()))?;
                let sub = match tree.get_path(&rel) {
                    Ok(e) if e.kind() == Some(git2::ObjectType::Tree) => {
                        git.find_tree(e.id()).map_err(|e| err(e.message().into()))?
                    }
                    _ => return Ok(Vec::new()),
                };
                let mut blobs = Vec::new();
                sub.walk(git2::TreeWalkMode::PreOrder, |parent, entry| {
                    let mode = entry.filemode();
                    if entry.kind() == Some(git2::ObjectType::Blob)
                        && mode != 0o120000
                        && let Ok(name) = entry.name()
                    {
                        blobs.push((format!("{prefix}/{parent}{name}"), entry.id(), mode == 0o100755));
                    }
                    git2::TreeWalkResult::Ok
                })
                .map_err(|e| err(e.message().into()))?;
                for (path, id, executable) in blobs {
                    let blob = git.find_blob(id).map_err(|e| err(e.message().into()))?;
                    total += blob.size() as u64;
                    if out.len() >= TREE_MAX_FILES || total > TREE_MAX_BYTES {
                        return Err(too_big());
                    }
                    out.push(TreeFile { path, bytes: blob.content().to_vec(), executable });
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// The UTF-8 text files below `dirs` (each in turn), as `(path, text)`; other files
    /// are skipped.
    pub fn texts_under(&self, dirs: &[&str]) -> Result<Vec<(String, String)>, RepoConfigError> {
        let mut out = Vec::new();
        for dir in dirs {
            for file in self.tree(dir)? {
                if let Ok(text) = String::from_utf8(file.bytes) {
                    out.push((file.path, text));
                }
            }
        }
        Ok(out)
    }

    /// The repository's agent files, skills and slash commands.
    pub fn extension_files(&self) -> Result<RepoFiles, RepoConfigError> {
        use orch_workflows::{commands, skills, subagents};
        let mut agents = Vec::new();
        for dir in subagents::AGENT_DIRS {
            agents.extend(self.list(dir)?.into_iter().filter(|(p, _)| p.ends_with(".md")));
        }
        let skill_files: Vec<(String, String)> =
            self.texts_under(&skills::SKILL_DIRS)?.into_iter().filter(|(p, _)| p.ends_with("/SKILL.md")).collect();
        Ok(RepoFiles {
            agents: subagents::AgentFiles::from_files(&agents),
            skills: skills::Skills::from_files(&skill_files),
            commands: commands::Commands::from_files(&self.texts_under(&commands::COMMAND_DIRS)?),
        })
    }

    /// Copies the files of every skill in `skills` (its directory, as read here) to
    /// `dest/<name>/`, read-only for everyone but the owner, and returns each skill's
    /// copy. Agents read a skill's files there, whatever their worktree holds.
    pub fn copy_skills(
        &self,
        skills: &orch_workflows::skills::Skills,
        dest: &Path,
    ) -> Result<Vec<(String, PathBuf)>, RepoConfigError> {
        use std::os::unix::fs::PermissionsExt as _;
        let mut out = Vec::new();
        for skill in &skills.skills {
            let target = dest.join(&skill.name);
            let err = |e: std::io::Error| RepoConfigError::Read {
                path: skill.directory.clone(),
                from: self.describe(),
                message: format!("cannot copy it to {}: {e}", target.display()),
            };
            for file in self.tree(&skill.directory)? {
                let Some(rest) = file.path.strip_prefix(&skill.directory).map(|r| r.trim_start_matches('/')) else {
                    continue;
                };
                let rel = relative(rest)?;
                let path = target.join(rel);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(err)?;
                }
                std::fs::write(&path, &file.bytes).map_err(err)?;
                let mode = if file.executable { 0o755 } else { 0o644 };
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).map_err(err)?;
            }
            out.push((skill.name.clone(), target));
        }
        Ok(out)
    }
}

/// The repository's Claude Code extension files, parsed.
#[derive(Debug, Clone, Default)]
pub struct RepoFiles {
    pub agents: orch_workflows::subagents::AgentFiles,
    pub skills: orch_workflows::skills::Skills,
    pub commands: orch_workflows::commands::Commands,
}

impl RepoFiles {
    /// Every warning of the three, one line each.
    pub fn warnings(&self) -> impl Iterator<Item = &String> {
        self.agents.warnings.iter().chain(&self.skills.warnings).chain(&self.commands.warnings)
    }

    /// What the workflow names that these files do not have (skills, slash commands),
    /// with positions.
    pub fn check(&self, workflow: &orch_workflows::Workflow) -> Vec<orch_workflows::Diagnostic> {
        let mut out = self.skills.check_workflow(workflow);
        out.extend(orch_workflows::commands::check_workflow(workflow, &self.commands));
        out.sort_by_key(|d| (d.location.line, d.location.column));
        out
    }
}

/// The base branch named in a GitHub event payload (`pull_request.base.ref`), for a
/// runner that did not set `GITHUB_BASE_REF`.
fn event_base_ref(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(16 << 20).read_to_string(&mut text).ok()?;
    let event: serde_json::Value = serde_json::from_str(&text).ok()?;
    let base = event.pointer("/pull_request/base/ref")?.as_str()?.trim();
    (!base.is_empty()).then(|| base.to_string())
}

/// `path` as a relative path with no `..`, `.` or root.
fn relative(path: &str) -> Result<PathBuf, RepoConfigError> {
    let p = Path::new(path);
    if path.is_empty() || !p.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(RepoConfigError::BadPath(path.to_string()));
    }
    Ok(p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn git(dir: &Path, args: &[&str]) {
        let out = std::process::Command::new("git")
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }

    #[test]
    fn a_pull_request_reads_the_base_ref_and_trust_reads_the_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        git(repo, &["init", "-q", "-b", "main"]);
        std::fs::create_dir_all(repo.join(".orch/agents")).unwrap();
        std::fs::write(repo.join(".mcp.json"), "base").unwrap();
        std::fs::write(repo.join(".orch/agents/a.md"), "A").unwrap();
        git(repo, &["add", "-A"]);
        git(repo, &["commit", "-q", "-m", "base"]);
        git(repo, &["checkout", "-q", "-b", "pr"]);
        std::fs::write(repo.join(".mcp.json"), "head").unwrap();
        std::fs::write(repo.join(".orch/agents/b.md"), "B").unwrap();
        std::fs::write(repo.join(".orch/settings.yaml"), "hooks: {}").unwrap();
        git(repo, &["add", "-A"]);
        git(repo, &["commit", "-q", "-m", "pr"]);

        let pr = Trust { event_name: Some("pull_request".into()), base_ref: Some("main".into()), ..Trust::default() };
        let config = RepoConfig::resolve(repo, &pr).unwrap();
        assert!(config.is_base_ref(), "{}", config.describe());
        assert_eq!(config.read(".mcp.json").unwrap().as_deref(), Some("base"));
        assert_eq!(config.read(".orch/settings.yaml").unwrap(), None);
        assert_eq!(config.list(".orch/agents").unwrap(), [(".orch/agents/a.md".to_string(), "A".to_string())]);
        assert!(config.list(".claude/agents").unwrap().is_empty());

        let trusted = RepoConfig::resolve(repo, &Trust { trust_checkout: true, ..pr.clone() }).unwrap();
        assert_eq!(trusted.read(".mcp.json").unwrap().as_deref(), Some("head"));
        assert_eq!(trusted.list(".orch/agents").unwrap().len(), 2);

        let push = Trust { event_name: Some("push".into()), ..Trust::default() };
        assert!(!RepoConfig::resolve(repo, &push).unwrap().is_base_ref());
        let flag = Trust { config_ref: Some("main".into()), ..Trust::default() };
        assert_eq!(RepoConfig::resolve(repo, &flag).unwrap().read(".mcp.json").unwrap().as_deref(), Some("base"));

        let no_base = Trust { event_name: Some("pull_request_target".into()), ..Trust::default() };
        assert!(matches!(RepoConfig::resolve(repo, &no_base), Err(RepoConfigError::NoBaseRef)));
        let bad = Trust { config_ref: Some("nope".into()), ..Trust::default() };
        assert!(matches!(RepoConfig::resolve(repo, &bad), Err(RepoConfigError::BadRef { .. })));
        assert!(matches!(config.read("../x"), Err(RepoConfigError::BadPath(_))));
    }

    #[test]
    fn symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join(".mcp.json")).unwrap();
        assert!(RepoConfig::checkout(dir.path()).read(".mcp.json").is_err());
    }
}
