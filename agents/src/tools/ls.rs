//! `LS`: a directory listed as an indented tree.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use ignore::overrides::{Override, OverrideBuilder};
use schemars::JsonSchema;
use serde::Deserialize;

use super::glob::{cancelled, display, existing_path};
use super::{Tool, ToolContext, ToolError};
use crate::permissions::paths::{PathFilter, hidden_paths, normalize};

/// The listing stops after this many entries.
const MAX_ENTRIES: usize = 1000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LsInput {
    /// The directory to list, absolute or relative to the working directory (`.` for
    /// the working directory itself).
    pub path: String,
    /// Glob patterns of entries to leave out, e.g. `target`, `*.log`, `docs/generated`.
    /// A pattern without `/` matches an entry's name at any depth; one with `/` is
    /// relative to the listed directory. A left-out directory is not entered.
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Ls;

#[async_trait]
impl Tool for Ls {
    type Input = LsInput;
    const NAME: &'static str = "LS";

    fn description(&self) -> &'static str {
        "List a directory and everything below it as an indented tree, names sorted, \
         directories ending in `/`. Entries excluded by .gitignore or .ignore and the \
         `.git` directory are left out; hidden files are shown. Symbolic links are shown \
         as `name -> target` and not entered. `ignore` takes extra glob patterns to leave \
         out. Stops after 1000 entries; then list a subdirectory or add ignore patterns. \
         Prefer Glob or Grep when you know which files you are looking for."
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
        if input.path.trim().is_empty() {
            return Err("path is empty; give a directory (`.` for the working directory)".into());
        }
        for pattern in input.ignore.iter().flatten() {
            let bare = pattern.strip_prefix('!').unwrap_or(pattern);
            globset::Glob::new(bare).map_err(|e| format!("invalid ignore pattern {pattern:?}: {}", e.kind()))?;
        }
        Ok(())
    }

    fn permission_subject(&self, input: &Self::Input) -> Option<String> {
        Some(input.path.clone())
    }

    async fn call(&self, input: Self::Input, ctx: &ToolContext) -> Result<String, ToolError> {
        Tool::validate(self, &input).map_err(ToolError)?;
        let (root, meta) = existing_path(ctx, Some(&input.path))?;
        if !meta.is_dir() {
            return Err(ToolError(format!("{} is a file, not a directory; use Read to view a file", input.path)));
        }
        let ignore = overrides(&root, input.ignore.as_deref().unwrap_or(&[])).map_err(ToolError)?;
        let cwd = normalize(ctx.session.cwd());
        let ctx = ctx.clone();
        let hidden = hidden_paths();
        tokio::task::spawn_blocking(move || list(&root, &cwd, ignore, &hidden, &ctx))
            .await
            .map_err(|e| ToolError(format!("LS failed: {e}")))?
    }
}

/// The ignore patterns as overrides: every pattern becomes an exclusion.
fn overrides(root: &Path, patterns: &[String]) -> Result<Override, String> {
    let mut builder = OverrideBuilder::new(root);
    for pattern in patterns {
        let bare = pattern.trim().strip_prefix('!').unwrap_or(pattern.trim());
        if bare.is_empty() {
            continue;
        }
        builder.add(&format!("!{bare}")).map_err(|e| format!("invalid ignore pattern {pattern:?}: {e}"))?;
    }
    builder.build().map_err(|e| format!("invalid ignore patterns: {e}"))
}

fn list(
    root: &Path,
    cwd: &Path,
    ignore: Override,
    hidden: &Arc<PathFilter>,
    ctx: &ToolContext,
) -> Result<String, ToolError> {
    let mut walk = super::glob::walker(root, hidden);
    walk.hidden(false).overrides(ignore).sort_by_file_name(|a, b| a.cmp(b));

    let shown = display(cwd, root);
    let mut out = format!("- {}/\n", shown.trim_end_matches('/'));
    let mut entries = 0usize;
    let mut truncated = false;
    for entry in walk.build() {
        if ctx.cancel.is_cancelled() {
            return Err(cancelled());
        }
        let Ok(entry) = entry else { continue };
        if entry.depth() == 0 {
            continue;
        }
        if entries == MAX_ENTRIES {
            truncated = true;
            break;
        }
        entries += 1;
        for _ in 0..entry.depth() {
            out.push_str("  ");
        }
        out.push_str("- ");
        out.push_str(&entry.file_name().to_string_lossy());
        match entry.file_type() {
            Some(t) if t.is_dir() => out.push('/'),
            Some(t) if t.is_symlink() => {
                if let Ok(target) = std::fs::read_link(entry.path()) {
                    out.push_str(" -> ");
                    out.push_str(&target.to_string_lossy());
                }
            }
            _ => {}
        }
        out.push('\n');
    }
    if entries == 0 {
        out.push_str("  (empty)\n");
    }
    if truncated {
        out.push_str(&format!(
            "(stopped after {MAX_ENTRIES} entries; list a subdirectory or pass ignore patterns to see the rest)\n"
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::DynTool;
    use crate::tools::glob::test_support::{ctx, write};
    use serde_json::{Value, json};

    async fn ls(root: &Path, input: Value) -> Result<String, ToolError> {
        DynTool::call(&Ls, input, &ctx(root)).await
    }

    #[tokio::test]
    async fn lists_a_tree_honoring_ignores() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, ".gitignore", "target/\n*.tmp\n");
        write(root, "Cargo.toml", "");
        write(root, "src/lib.rs", "");
        write(root, "src/nested/mod.rs", "");
        write(root, "target/debug/x", "");
        write(root, "scratch.tmp", "");
        write(root, ".git/HEAD", "");
        write(root, ".github/ci.yml", "");
        std::fs::create_dir(root.join("empty")).unwrap();
        let out = ls(root, json!({"path": "."})).await.unwrap();
        assert_eq!(
            out,
            "- ./\n  - .github/\n    - ci.yml\n  - .gitignore\n  - Cargo.toml\n  - empty/\n  - src/\n    - lib.rs\n    - nested/\n      - mod.rs\n"
        );
        let out = ls(root, json!({"path": "src"})).await.unwrap();
        assert_eq!(out, "- src/\n  - lib.rs\n  - nested/\n    - mod.rs\n");
    }

    #[tokio::test]
    async fn ignore_patterns_leave_entries_out() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.log", "");
        write(root, "keep.rs", "");
        write(root, "docs/gen/x.md", "");
        write(root, "docs/guide.md", "");
        write(root, "sub/b.log", "");
        write(root, "node_modules/pkg/index.js", "");
        let out = ls(root, json!({"path": ".", "ignore": ["*.log", "docs/gen", "node_modules"]})).await.unwrap();
        assert_eq!(out, "- ./\n  - docs/\n    - guide.md\n  - keep.rs\n  - sub/\n");
        let bad = json!({"path": ".", "ignore": ["[z-"]});
        assert!(DynTool::validate(&Ls, &bad).unwrap_err().contains("invalid ignore pattern"));
        assert!(ls(root, bad).await.unwrap_err().0.contains("invalid ignore pattern"));
    }

    #[tokio::test]
    async fn symlinks_are_shown_not_followed() {
        let outside = tempfile::tempdir().unwrap();
        write(outside.path(), "secret.txt", "");
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        write(root, "a.txt", "");
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        let out = ls(root, json!({"path": "."})).await.unwrap();
        assert_eq!(out, format!("- ./\n  - a.txt\n  - link -> {}\n", outside.path().display()));
        assert!(!out.contains("secret"));
    }

    #[tokio::test]
    async fn errors_for_missing_paths_and_files() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "f.txt", "");
        let err = ls(dir.path(), json!({"path": "missing"})).await.unwrap_err();
        assert!(err.0.contains("does not exist") && err.0.contains("missing"), "{err}");
        let err = ls(dir.path(), json!({"path": "f.txt"})).await.unwrap_err();
        assert!(err.0.contains("not a directory"), "{err}");
        assert!(DynTool::validate(&Ls, &json!({})).is_err());
        assert!(DynTool::validate(&Ls, &json!({"path": " "})).is_err());
        let other = tempfile::tempdir().unwrap();
        let out = ls(dir.path(), json!({"path": other.path().to_str().unwrap()})).await.unwrap();
        assert_eq!(out, format!("- {}/\n  (empty)\n", other.path().display()));
    }

    #[tokio::test]
    async fn caps_the_listing() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..1005 {
            write(dir.path(), &format!("f{i:04}"), "");
        }
        let out = ls(dir.path(), json!({"path": "."})).await.unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1002);
        assert_eq!(lines[1000], "  - f0999");
        assert!(lines[1001].starts_with("(stopped after 1000 entries"), "{}", lines[1001]);
    }

    #[tokio::test]
    async fn metadata_and_cancellation() {
        let input = json!({"path": "src"});
        assert!(DynTool::is_read_only(&Ls, &input));
        assert!(DynTool::is_concurrency_safe(&Ls, &input));
        assert!(!DynTool::is_destructive(&Ls, &input));
        assert_eq!(DynTool::permission_subject(&Ls, &input).as_deref(), Some("src"));
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        ctx.cancel.cancel();
        assert_eq!(DynTool::call(&Ls, json!({"path": "."}), &ctx).await.unwrap_err().0, "cancelled");
    }
}
