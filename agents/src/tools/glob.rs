//! `Glob`: find files by a glob pattern on their path, as Claude Code's (`rg --files
//! --glob PATTERN --sort=modified --no-ignore --hidden`): a pattern without a `/` matches
//! a file name at any depth, ignored and hidden files are listed (never what is inside
//! `.git`, nor what the permission rules deny reading), oldest first.
//!
//! Also holds the helpers the three search tools (`Glob`, `Grep`, `LS`) share: how a
//! search root is resolved and checked, how the walker is configured, and how a found
//! path is shown to the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use globset::{GlobBuilder, GlobMatcher};
use ignore::WalkBuilder;
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Tool, ToolContext, ToolError};
use crate::permissions::paths::{PathFilter, hidden_paths, normalize};

/// At most this many paths are returned.
const MAX_RESULTS: usize = 100;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// The glob to match against each file's path relative to the search directory.
    /// `*` and `?` stay inside one path segment, `**` crosses directories and `{a,b}`
    /// picks alternatives. A pattern without a `/` matches file names at any depth
    /// (`*.rs` finds Rust files everywhere, as `**/*.rs` does); one with a `/` matches
    /// the whole relative path (`src/**/*.{ts,tsx}`; `./*.toml` only the top level).
    pub pattern: String,
    /// The directory to search, absolute or relative to the working directory. Leave it
    /// out to search the working directory.
    #[serde(default)]
    pub path: Option<String>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Glob;

#[async_trait]
impl Tool for Glob {
    type Input = GlobInput;
    const NAME: &'static str = "Glob";

    fn description(&self) -> &'static str {
        "Find files by path pattern. The glob is matched against each file's path relative \
         to the search directory (`path`, default the working directory): `*` and `?` match \
         within one path segment, `**` spans any number of directories, `{a,b}` gives \
         alternatives; a pattern without a `/` matches file names at any depth. Examples: \
         `*.rs` or `**/*.rs` (Rust files anywhere), `src/**/*.{ts,tsx}`, `Cargo.toml`, \
         `./*.md` (top level only). Files git ignores and hidden files are listed too; `.git` \
         is skipped and symbolic links are not followed. Returns file paths (relative to the \
         working directory when inside it), least recently modified first, at most 100. Use \
         it to locate files by name; use Grep to search inside them."
    }

    fn is_read_only(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_concurrency_safe(&self, _input: &Self::Input) -> bool {
        true
    }

    fn is_destructive(&self, _input: &Self::Input) -> bool {
        false
    }

    fn validate(&self, input: &Self::Input) -> Result<(), String> {
        build_glob(&input.pattern).map(|_| ())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(subject(input.path.as_deref()))
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        let matcher = build_glob(&input.pattern).map_err(ToolError)?;
        let root = existing_dir(ctx, input.path.as_deref())?;
        let cwd = normalize(ctx.session.cwd());
        let absolute = input.pattern.starts_with('/');
        let ctx = ctx.clone();
        let hidden = hidden_paths();
        tokio::task::spawn_blocking(move || find(&root, &cwd, &matcher, absolute, &hidden, &ctx))
            .await
            .map_err(|e| ToolError(format!("Glob failed: {e}")))?
    }
}

fn build_glob(pattern: &str) -> Result<GlobMatcher, String> {
    let trimmed = pattern.trim();
    if trimmed.is_empty() {
        return Err("pattern is empty; give a glob such as **/*.rs".into());
    }
    // As in ripgrep's globs (gitignore's rule): no `/`, then any depth.
    let anywhere;
    let trimmed = match trimmed.strip_prefix("./") {
        Some(rest) => rest,
        None if !trimmed.contains('/') => {
            anywhere = format!("**/{trimmed}");
            &anywhere
        }
        None => trimmed,
    };
    GlobBuilder::new(trimmed)
        .literal_separator(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("invalid glob pattern {pattern:?}: {}", e.kind()))
}

fn find(
    root: &Path,
    cwd: &Path,
    matcher: &GlobMatcher,
    absolute: bool,
    hidden: &Arc<PathFilter>,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    let mut found: Vec<(Option<SystemTime>, PathBuf)> = Vec::new();
    for entry in listing_walker(root, hidden).build() {
        if ctx.cancel.is_cancelled() {
            return Err(cancelled());
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 || !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let candidate = if absolute { path } else { path.strip_prefix(root).unwrap_or(path) };
        if matcher.is_match(candidate) {
            let modified = entry.metadata().ok().and_then(|m| m.modified().ok());
            found.push((modified, entry.into_path()));
        }
    }
    if found.is_empty() {
        return Ok("No files found".into());
    }
    // Oldest first, as `rg --sort=modified`; files without a time go first; ties by path
    // for a stable order.
    found.sort_by(|(ta, pa), (tb, pb)| ta.cmp(tb).then_with(|| pa.cmp(pb)));
    let total = found.len();
    let mut out = String::new();
    for (_, path) in found.iter().take(MAX_RESULTS) {
        out.push_str(&display(cwd, path));
        out.push('\n');
    }
    if total > MAX_RESULTS {
        out.push_str(&format!("(showing {MAX_RESULTS} of {total}; narrow the pattern)\n"));
    }
    Ok(out)
}

/// What permission rules see for a search tool: the path as given, or `.` (the working
/// directory) when none was given.
pub(super) fn subject(path: Option<&str>) -> String {
    match path {
        Some(p) if !p.trim().is_empty() => p.to_string(),
        _ => ".".to_string(),
    }
}

/// The error a search returns when its call was cancelled.
pub(super) fn cancelled() -> ToolError {
    ToolError::new("cancelled")
}

/// Resolves `path` (or the working directory) and checks that it exists.
pub(super) fn existing_path(ctx: &ToolContext, path: Option<&str>) -> Result<(PathBuf, std::fs::Metadata), ToolError> {
    let given = path.filter(|p| !p.trim().is_empty());
    let root = match given {
        Some(p) => ctx.session.resolve(p),
        None => normalize(ctx.session.cwd()),
    };
    match std::fs::metadata(&root) {
        Ok(meta) => Ok((root, meta)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ToolError(format!("path does not exist: {} ({})", given.unwrap_or("."), root.display())))
        }
        Err(e) => Err(ToolError(format!("cannot access {}: {e}", root.display()))),
    }
}

/// Resolves `path` (or the working directory) and checks that it is a directory.
pub(super) fn existing_dir(ctx: &ToolContext, path: Option<&str>) -> Result<PathBuf, ToolError> {
    let (root, meta) = existing_path(ctx, path)?;
    if meta.is_dir() {
        Ok(root)
    } else {
        Err(ToolError(format!(
            "{} is a file, not a directory; give a directory (use Read to view a file)",
            path.unwrap_or(".")
        )))
    }
}

/// The walker every search tool starts from, with ripgrep's rules: `.ignore` files
/// everywhere; `.gitignore`, `.git/info/exclude` and git's global excludes inside a git
/// repository (a `.git` directory or file), including those of parent directories up to
/// the repository root but not beyond it; hidden entries skipped; symbolic links never
/// followed; `.git` never entered; what `denied` covers (paths the agent's permission
/// rules deny reading) neither shown nor entered. The root itself is always visited.
pub(super) fn walker(root: &Path, denied: &Arc<PathFilter>) -> WalkBuilder {
    let mut builder = WalkBuilder::new(root);
    // `require_git` stays on: without it the crate applies the .gitignore of every
    // ancestor up to `/`, so the rules of an enclosing repository (or a stray
    // ~/.gitignore) would hide files of a worktree nested inside it.
    let denied = denied.clone();
    builder.hidden(true).follow_links(false).filter_entry(move |entry| {
        let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
        entry.file_name() != ".git" && !denied.hides(entry.path(), is_dir)
    });
    builder
}

/// The walker of `Glob`: as [`walker`], but listing hidden files and those ignore files
/// exclude (Claude Code's `--no-ignore --hidden`). `.git` is still never entered, and
/// what `denied` covers is still neither shown nor entered.
fn listing_walker(root: &Path, denied: &Arc<PathFilter>) -> WalkBuilder {
    let mut builder = walker(root, denied);
    builder.hidden(false).ignore(false).git_ignore(false).git_global(false).git_exclude(false).parents(false);
    builder
}

/// `path` as the model sees it: relative to the working directory when inside it,
/// absolute otherwise. `cwd` must be normalized.
pub(super) fn display(cwd: &Path, path: &Path) -> String {
    match path.strip_prefix(cwd) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_string(),
        Ok(rel) => rel.to_string_lossy().into_owned(),
        Err(_) => path.to_string_lossy().into_owned(),
    }
}

#[cfg(test)]
pub(super) mod test_support {
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use crate::tools::{Session, ToolContext};

    pub fn ctx(cwd: &Path) -> ToolContext {
        ToolContext { session: Arc::new(Session::new(cwd)), cancel: Default::default() }
    }

    /// Writes `content` to `root/rel`, creating parent directories.
    pub fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, content).unwrap();
    }

    /// Sets the modification time of `root/rel` to `secs` after the epoch.
    pub fn set_mtime(root: &Path, rel: &str, secs: u64) {
        let file = std::fs::File::options().write(true).open(root.join(rel)).unwrap();
        file.set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{ctx, set_mtime, write};
    use super::*;
    use crate::tools::DynTool;
    use serde_json::json;

    async fn glob(root: &Path, input: serde_json::Value) -> Result<String, ToolError> {
        DynTool::call(&Glob, input, &ctx(root)).await
    }

    #[tokio::test]
    async fn matches_relative_paths_oldest_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.rs", "");
        write(root, "src/b.rs", "");
        write(root, "src/deep/c.rs", "");
        write(root, "src/d.txt", "");
        set_mtime(root, "a.rs", 1_000);
        set_mtime(root, "src/b.rs", 3_000);
        set_mtime(root, "src/deep/c.rs", 2_000);
        let out = glob(root, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(out, "a.rs\nsrc/deep/c.rs\nsrc/b.rs\n");
        // A bare name pattern matches at any depth, as in Claude Code.
        let out = glob(root, json!({"pattern": "*.rs"})).await.unwrap();
        assert_eq!(out, "a.rs\nsrc/deep/c.rs\nsrc/b.rs\n");
        assert_eq!(glob(root, json!({"pattern": "c.rs"})).await.unwrap(), "src/deep/c.rs\n");
        // With a `/`, the whole path: `*` does not cross a separator.
        let out = glob(root, json!({"pattern": "./*.rs"})).await.unwrap();
        assert_eq!(out, "a.rs\n");
        let out = glob(root, json!({"pattern": "src/*.rs"})).await.unwrap();
        assert_eq!(out, "src/b.rs\n");
        let out = glob(root, json!({"pattern": "src/**/*.{rs,txt}", "path": "."})).await.unwrap();
        assert_eq!(out.lines().count(), 3, "{out}");
        // A sub-directory as root: the pattern is relative to it, output to the cwd.
        let out = glob(root, json!({"pattern": "./*.rs", "path": "src"})).await.unwrap();
        assert_eq!(out, "src/b.rs\n");
        assert_eq!(glob(root, json!({"pattern": "**/*.go"})).await.unwrap(), "No files found");
    }

    #[tokio::test]
    async fn ties_are_broken_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for name in ["c.rs", "a.rs", "b.rs"] {
            write(root, name, "");
            set_mtime(root, name, 5_000);
        }
        assert_eq!(glob(root, json!({"pattern": "*.rs"})).await.unwrap(), "a.rs\nb.rs\nc.rs\n");
    }

    #[tokio::test]
    async fn lists_ignored_and_hidden_files_but_nothing_of_git() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join(".git")).unwrap();
        write(root, ".gitignore", "target/\n");
        write(root, ".ignore", "*.gen.rs\n");
        write(root, "target/out.rs", "");
        write(root, "src/x.gen.rs", "");
        write(root, "src/keep.rs", "");
        write(root, ".hidden/h.rs", "");
        write(root, ".git/hooks/h.rs", "");
        for (i, name) in [".hidden/h.rs", "src/keep.rs", "src/x.gen.rs", "target/out.rs"].iter().enumerate() {
            set_mtime(root, name, 1_000 + i as u64);
        }
        let out = glob(root, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(out, ".hidden/h.rs\nsrc/keep.rs\nsrc/x.gen.rs\ntarget/out.rs\n");
        // A worktree's `.git` file is not listed either.
        let wt = tempfile::tempdir().unwrap();
        write(wt.path(), ".git", "gitdir: /elsewhere\n");
        write(wt.path(), "a.rs", "");
        assert_eq!(glob(wt.path(), json!({"pattern": "*"})).await.unwrap(), "a.rs\n");
    }

    #[tokio::test]
    async fn denied_paths_stay_out_of_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "secrets/key.pem", "");
        write(root, "open.pem", "");
        let pattern = crate::permissions::paths::PathPattern { root: root.to_path_buf(), pattern: "/secrets/".into() };
        let denied = Arc::new(PathFilter::new(&[pattern]).unwrap());
        let found = listing_walker(root, &denied)
            .build()
            .flatten()
            .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
            .map(|e| display(root, e.path()))
            .collect::<Vec<_>>();
        assert_eq!(found, ["open.pem"]);
    }

    #[tokio::test]
    async fn caps_at_one_hundred_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for i in 0..105 {
            write(root, &format!("f{i:03}.txt"), "");
            set_mtime(root, &format!("f{i:03}.txt"), 10_000 + i);
        }
        let out = glob(root, json!({"pattern": "*.txt"})).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 101);
        assert_eq!(lines[0], "f000.txt");
        assert_eq!(lines[100], "(showing 100 of 105; narrow the pattern)");
    }

    #[tokio::test]
    async fn does_not_follow_symlinks() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.rs", "");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "in.rs", "");
        std::os::unix::fs::symlink(outside.path(), root.join("linkdir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.rs"), root.join("link.rs")).unwrap();
        let out = glob(root, json!({"pattern": "**/*.rs"})).await.unwrap();
        assert_eq!(out, "in.rs\n");
    }

    #[tokio::test]
    async fn outside_cwd_is_absolute_and_errors_are_clear() {
        let other = tempfile::tempdir().unwrap();
        write(other.path(), "z.md", "");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let out = glob(root, json!({"pattern": "*.md", "path": other.path().to_str().unwrap()})).await.unwrap();
        assert_eq!(out, format!("{}\n", other.path().join("z.md").display()));
        let err = glob(root, json!({"pattern": "*", "path": "missing"})).await.unwrap_err();
        assert!(err.0.contains("does not exist"), "{err}");
        write(root, "f.txt", "");
        let err = glob(root, json!({"pattern": "*", "path": "f.txt"})).await.unwrap_err();
        assert!(err.0.contains("not a directory"), "{err}");
        let bad = json!({"pattern": "src/[a-"});
        assert!(DynTool::validate(&Glob, &bad).unwrap_err().contains("invalid glob"));
        assert!(glob(root, bad).await.unwrap_err().0.contains("invalid glob"));
        assert!(DynTool::validate(&Glob, &json!({"pattern": "*", "bogus": 1})).is_err());
    }

    #[tokio::test]
    async fn metadata_and_cancellation() {
        let input = json!({"pattern": "*.rs"});
        assert!(DynTool::is_read_only(&Glob, &input));
        assert!(DynTool::is_concurrency_safe(&Glob, &input));
        assert!(!DynTool::is_destructive(&Glob, &input));
        assert_eq!(DynTool::permission_subject(&Glob, &input).as_deref(), Some("."));
        let with_path = json!({"pattern": "*.rs", "path": "src"});
        assert_eq!(DynTool::permission_subject(&Glob, &with_path).as_deref(), Some("src"));
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.rs", "");
        let ctx = ctx(dir.path());
        ctx.cancel.cancel();
        assert_eq!(DynTool::call(&Glob, input, &ctx).await.unwrap_err().0, "cancelled");
    }
}
