//! Where configuration that runs code or steers agents is read from: the workflow file,
//! hooks and settings (`.orch/settings.yaml`, `.claude/settings.json`), MCP servers
//! (`.mcp.json`), agent files (`.orch/agents/`, `.claude/agents/`), skills
//! (`.orch/skills/`, `.claude/skills/`) and slash commands (`.orch/commands/`,
//! `.claude/commands/`).
//!
//! The trust rule follows the checked-out commit, not the event: these files come from
//! the **trusted ref** unless the checked-out commit is that ref, or
//! `--trust-repo-config` is given. The trusted ref is `--config-ref`, else the pull
//! request's base branch (`GITHUB_BASE_REF` or the event payload's
//! `pull_request.base.ref`), else the repository's default branch (the event payload's
//! `repository.default_branch`, `origin/HEAD`, `init.defaultBranch`, `main`, `master`).
//! A name is looked up as `refs/remotes/origin/<ref>`, then `origin/<ref>`, then `<ref>`
//! as git revision syntax. Outside GitHub Actions, being on the local branch of that
//! name counts as being at the ref (local commits not yet pushed included). In GitHub
//! Actions (`GITHUB_EVENT_NAME` set) a trusted ref that cannot be found fails the run:
//! it never falls back to the checkout. Locally, a repository with no default branch at
//! all (or no repository) has nothing more trusted than its checkout.
//!
//! From a commit, files are read as blobs from the git object database (git2), so no
//! symlink or path on disk is followed. From the checkout, a symlink is refused too.
//!
//! The API for other readers: [`RepoConfig::resolve`] once per run, then
//! [`RepoConfig::read`] (one file, `None` when absent) and [`RepoConfig::list`] (the
//! regular files directly in a directory, sorted).

use std::path::{Component, Path, PathBuf};

/// The events whose payload is a pull request's changes (see [`crate::changes`]); trust
/// does not depend on them.
pub const PR_EVENTS: [&str; 2] = ["pull_request", "pull_request_target"];

/// A problem reading repository configuration.
#[derive(Debug, thiserror::Error)]
pub enum RepoConfigError {
    #[error(
        "in GitHub Actions repository configuration is read from the trusted ref (the default branch) unless that \
         ref is checked out, but no trusted ref is known; pass --config-ref REF, set GITHUB_BASE_REF, fetch the \
         default branch, or pass --trust-repo-config to use the checked-out files"
    )]
    NoBaseRef,
    #[error(
        "cannot resolve the trusted ref `{reference}` in {repo}: {message}; fetch it first (e.g. `git fetch origin \
         {reference}`), name another with --config-ref REF, or pass --trust-repo-config"
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
    /// `GITHUB_EVENT_NAME`: set, this is GitHub Actions.
    pub event_name: Option<String>,
    /// `GITHUB_BASE_REF`, else the event payload's `pull_request.base.ref`.
    pub base_ref: Option<String>,
    /// The event payload's `repository.default_branch`.
    pub default_branch: Option<String>,
}

impl Trust {
    /// The flags, with the rest from this process's environment.
    pub fn from_env(trust_checkout: bool, config_ref: Option<String>) -> Trust {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let event = var("GITHUB_EVENT_PATH").and_then(|p| read_event(Path::new(&p)));
        let field = |pointer: &str| {
            let value = event.as_ref()?.pointer(pointer)?.as_str()?.trim();
            (!value.is_empty()).then(|| value.to_string())
        };
        let base_ref = var("GITHUB_BASE_REF").or_else(|| field("/pull_request/base/ref"));
        let default_branch = field("/repository/default_branch");
        Trust { trust_checkout, config_ref, event_name: var("GITHUB_EVENT_NAME"), base_ref, default_branch }
    }

    /// Whether this runs in GitHub Actions, where a missing trusted ref is an error.
    fn github(&self) -> bool {
        self.event_name.is_some()
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
    /// Why the files come from there, for `orch plan`.
    why: String,
}

impl RepoConfig {
    /// Where to read from, for the user's repository at `repo` (its working tree is the
    /// checkout), by the trust rule of this module.
    pub fn resolve(repo: &Path, trust: &Trust) -> Result<RepoConfig, RepoConfigError> {
        let git = git2::Repository::discover(repo).ok();
        // The top of the working tree, when `repo` is inside one.
        let top = git.as_ref().and_then(|r| r.workdir().map(Path::to_path_buf));
        let root = top.as_deref().unwrap_or(repo);
        let checkout = |why: &str| Ok(RepoConfig { why: why.to_string(), ..RepoConfig::checkout(root) });
        if trust.trust_checkout {
            return checkout("--trust-repo-config");
        }
        let Some(git) = git.filter(|_| top.is_some()) else {
            if let Some(reference) = &trust.config_ref {
                return Err(RepoConfigError::BadRef {
                    reference: reference.clone(),
                    repo: repo.display().to_string(),
                    message: "it is not in a git repository".into(),
                });
            }
            return checkout("not a git repository, so there is no ref to trust more");
        };
        let named =
            trust.config_ref.clone().or_else(|| trust.base_ref.clone()).or_else(|| trust.default_branch.clone());
        let Some(reference) = named.or_else(|| local_default_branch(&git)) else {
            if trust.github() {
                return Err(RepoConfigError::NoBaseRef);
            }
            return checkout("the repository has no default branch, so there is no ref to trust more");
        };
        let commit = find_ref(&git, root, &reference)?;
        let head = git.head().ok();
        let at_commit = head.as_ref().and_then(|h| h.peel_to_commit().ok()).is_some_and(|c| c.id() == commit);
        let on_branch = !trust.github()
            && head.as_ref().and_then(|h| h.name().ok()) == Some(format!("refs/heads/{reference}").as_str());
        if at_commit || on_branch {
            return checkout(&format!("the checked-out commit is the trusted ref `{reference}`"));
        }
        Ok(RepoConfig {
            source: Source::Commit { repo: root.to_path_buf(), reference: reference.clone(), commit },
            why: format!(
                "the checked-out commit is not the trusted ref `{reference}`; pass --trust-repo-config to use the checkout"
            ),
        })
    }

    /// The files of `commit` in the repository (or git directory) at `repo`.
    pub fn at_commit(repo: &Path, commit: git2::Oid) -> RepoConfig {
        RepoConfig {
            source: Source::Commit { repo: repo.to_path_buf(), reference: commit.to_string(), commit },
            why: String::new(),
        }
    }

    /// The checked-out files under `root`.
    pub fn checkout(root: &Path) -> RepoConfig {
        RepoConfig { source: Source::Checkout(root.to_path_buf()), why: String::new() }
    }

    /// The files of `reference` in the repository at `repo`.
    pub fn at_ref(repo: &Path, reference: &str) -> Result<RepoConfig, RepoConfigError> {
        let git = git2::Repository::open(repo)
            .map_err(|e| RepoConfigError::Open { repo: repo.display().to_string(), message: e.message().into() })?;
        let commit = find_ref(&git, repo, reference)?;
        let source = Source::Commit { repo: repo.to_path_buf(), reference: reference.to_string(), commit };
        Ok(RepoConfig { source, why: String::new() })
    }

    /// Where the files come from, for messages: `the checkout at …` or `ref … (commit)`.
    pub fn describe(&self) -> String {
        match &self.source {
            Source::Checkout(root) => format!("the checkout at {}", root.display()),
            Source::Commit { reference, commit, .. } => format!("the trusted ref `{reference}` ({commit})"),
        }
    }

    /// Why the files come from where [`RepoConfig::describe`] says (empty when not
    /// resolved by the trust rule).
    pub fn why(&self) -> &str {
        &self.why
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

    /// Whether the files come from the trusted ref because the checkout is another
    /// commit: the checkout is untrusted, and so are settings that widen the sandbox.
    pub fn is_trusted_ref(&self) -> bool {
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

    /// What the workflow names that these files do not have (agent definitions, skills,
    /// slash commands), with positions.
    pub fn check(&self, workflow: &orch_workflows::Workflow) -> Vec<orch_workflows::Diagnostic> {
        let mut out = self.agents.check_workflow(workflow);
        out.extend(self.skills.check_workflow(workflow));
        out.extend(orch_workflows::commands::check_workflow(workflow, &self.commands));
        out.sort_by_key(|d| (d.location.line, d.location.column));
        out
    }
}

/// The GitHub event payload at `path`, when it can be read.
fn read_event(path: &Path) -> Option<serde_json::Value> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path).ok()?.take(16 << 20).read_to_string(&mut text).ok()?;
    serde_json::from_str(&text).ok()
}

/// The commit `reference` names in `git`: `refs/remotes/origin/<ref>`, then
/// `origin/<ref>`, then `<ref>` as revision syntax.
fn find_ref(git: &git2::Repository, repo: &Path, reference: &str) -> Result<git2::Oid, RepoConfigError> {
    let candidates = [format!("refs/remotes/origin/{reference}"), format!("origin/{reference}"), reference.to_string()];
    let mut last = String::new();
    for candidate in &candidates {
        match git.revparse_single(candidate).and_then(|o| o.peel_to_commit()) {
            Ok(commit) => return Ok(commit.id()),
            Err(e) => last = e.message().to_string(),
        }
    }
    Err(RepoConfigError::BadRef { reference: reference.to_string(), repo: repo.display().to_string(), message: last })
}

/// The repository's default branch as git knows it: the target of `origin/HEAD`, else
/// `init.defaultBranch`, `main` or `master`, whichever names a commit (on `origin` or
/// locally).
fn local_default_branch(git: &git2::Repository) -> Option<String> {
    if let Ok(head) = git.find_reference("refs/remotes/origin/HEAD")
        && let Ok(Some(target)) = head.symbolic_target()
        && let Some(name) = target.strip_prefix("refs/remotes/origin/")
    {
        return Some(name.to_string());
    }
    let configured = git.config().ok().and_then(|c| c.get_string("init.defaultBranch").ok());
    let names = configured.into_iter().chain(["main".to_string(), "master".to_string()]);
    names.into_iter().find(|name| {
        [format!("refs/remotes/origin/{name}"), format!("refs/heads/{name}")]
            .iter()
            .any(|r| git.find_reference(r).ok().and_then(|r| r.peel_to_commit().ok()).is_some())
    })
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
        assert!(config.is_trusted_ref(), "{}", config.describe());
        assert_eq!(config.read(".mcp.json").unwrap().as_deref(), Some("base"));
        assert_eq!(config.read(".orch/settings.yaml").unwrap(), None);
        assert_eq!(config.list(".orch/agents").unwrap(), [(".orch/agents/a.md".to_string(), "A".to_string())]);
        assert!(config.list(".claude/agents").unwrap().is_empty());

        let trusted = RepoConfig::resolve(repo, &Trust { trust_checkout: true, ..pr.clone() }).unwrap();
        assert_eq!(trusted.read(".mcp.json").unwrap().as_deref(), Some("head"));
        assert_eq!(trusted.list(".orch/agents").unwrap().len(), 2);

        // Whatever the event, or none, the checkout on another commit is not trusted.
        for event in [None, Some("push"), Some("issue_comment"), Some("workflow_run"), Some("merge_group")] {
            let trust = Trust { event_name: event.map(Into::into), ..Trust::default() };
            let config = RepoConfig::resolve(repo, &trust).unwrap();
            assert!(config.is_trusted_ref(), "{event:?}: {}", config.describe());
            assert_eq!(config.read(".mcp.json").unwrap().as_deref(), Some("base"), "{event:?}");
        }
        let flag = Trust { config_ref: Some("main".into()), ..Trust::default() };
        assert_eq!(RepoConfig::resolve(repo, &flag).unwrap().read(".mcp.json").unwrap().as_deref(), Some("base"));
        // The event's default branch is the trusted ref; at it, the checkout is read.
        let at_pr =
            Trust { event_name: Some("issue_comment".into()), default_branch: Some("pr".into()), ..Trust::default() };
        let config = RepoConfig::resolve(repo, &at_pr).unwrap();
        assert!(!config.is_trusted_ref() && config.why().contains("is the trusted ref `pr`"), "{}", config.why());
        // Locally, being on the default branch trusts its checkout, uncommitted files too.
        git(repo, &["checkout", "-q", "main"]);
        std::fs::write(repo.join(".mcp.json"), "edited").unwrap();
        let config = RepoConfig::resolve(repo, &Trust::default()).unwrap();
        assert_eq!(config.read(".mcp.json").unwrap().as_deref(), Some("edited"));
        git(repo, &["checkout", "-q", "--", ".mcp.json"]);
        git(repo, &["checkout", "-q", "pr"]);

        let bad = Trust { config_ref: Some("nope".into()), ..Trust::default() };
        assert!(matches!(RepoConfig::resolve(repo, &bad), Err(RepoConfigError::BadRef { .. })));
        assert!(matches!(config.read("../x"), Err(RepoConfigError::BadPath(_))));
    }

    #[test]
    fn without_a_default_branch_github_fails_and_a_local_run_reads_the_checkout() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path();
        git(repo, &["init", "-q", "-b", "trunk"]);
        std::fs::write(repo.join(".mcp.json"), "head").unwrap();
        git(repo, &["add", "-A"]);
        git(repo, &["commit", "-q", "-m", "one"]);
        let github = Trust { event_name: Some("pull_request_target".into()), ..Trust::default() };
        assert!(matches!(RepoConfig::resolve(repo, &github), Err(RepoConfigError::NoBaseRef)));
        let local = RepoConfig::resolve(repo, &Trust::default()).unwrap();
        assert!(!local.is_trusted_ref() && local.why().contains("no default branch"), "{}", local.why());
        // `origin/HEAD` names the default branch; a named ref that is missing fails.
        git(repo, &["update-ref", "refs/remotes/origin/trunk", "HEAD"]);
        git(repo, &["symbolic-ref", "refs/remotes/origin/HEAD", "refs/remotes/origin/trunk"]);
        git(repo, &["checkout", "-q", "-b", "feature"]);
        git(repo, &["commit", "-q", "--allow-empty", "-m", "two"]);
        assert!(RepoConfig::resolve(repo, &github).unwrap().is_trusted_ref());
        let gone = Trust { default_branch: Some("gone".into()), ..github };
        assert!(matches!(RepoConfig::resolve(repo, &gone), Err(RepoConfigError::BadRef { .. })));
    }

    #[test]
    fn symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(dir.path().join("secret"), dir.path().join(".mcp.json")).unwrap();
        assert!(RepoConfig::checkout(dir.path()).read(".mcp.json").is_err());
    }
}
