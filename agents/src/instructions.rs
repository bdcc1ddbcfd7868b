//! Project instructions: the `AGENTS.md`, `CLAUDE.md`, `.claude/CLAUDE.md` and
//! `CLAUDE.local.md` files from the repository root down to the agent's working
//! directory (nearest last), each labelled with its path,
//! with their `@path` imports followed at most [`MAX_IMPORT_DEPTH`] levels deep.
//!
//! Collection ([`collect`]) runs inside the agent's tool host, answering the internal
//! request [`HostRequest::ProjectInstructions`], which is no tool call, so the model cannot
//! make it.
//! The coordinator asks for it with [`load`]. Reading in the host means the sandbox
//! decides what is reachable; on top of that every file is resolved (symlinks
//! included) and refused unless it lies inside the repository. Only text files are
//! read, each at most once, each cut at [`MAX_FILE_CHARS`] characters with a note.
//!
//! Subdirectories below the working directory are loaded later, as Claude Code does:
//! the first time a file tool touches a path under a directory with its own
//! instruction files ([`touched_path`], [`Nested::on_touch`]), those files (with their
//! imports) are attached once to that tool's result. Each agent and sub-agent scope
//! keeps its own [`Nested`] record, so nothing is given twice to the same model.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::protocol::{HostRequest, ToolExecutor};

/// The file names collected in each directory, in this order. As in Claude Code, the
/// project file may sit in `.claude/`, and `CLAUDE.local.md` (personal, usually not
/// committed) comes after the shared ones so that it can refine them.
pub const INSTRUCTION_FILES: &[&str] = &["AGENTS.md", "CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md"];

/// Levels of `@path` imports followed below a collected file.
pub const MAX_IMPORT_DEPTH: usize = 5;

/// Characters kept of each file.
pub const MAX_FILE_CHARS: usize = 40_000;

/// Bytes read of a file at most (a file is cut at [`MAX_FILE_CHARS`] anyway).
const MAX_READ_BYTES: u64 = 4 * MAX_FILE_CHARS as u64 + 4;

/// One instruction file as it goes into the prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstructionFile {
    /// Relative to the repository root.
    pub path: String,
    /// The file whose `@` import brought this one in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported_by: Option<String>,
    pub text: String,
    /// The file was longer than [`MAX_FILE_CHARS`]; `text` ends with a note saying so.
    #[serde(default)]
    pub truncated: bool,
}

/// What [`collect`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instructions {
    /// In prompt order: root first, the working directory last, imports right after
    /// the file that imports them.
    pub files: Vec<InstructionFile>,
    /// Imports that were not followed, and why.
    #[serde(default)]
    pub skipped: Vec<String>,
}

impl Instructions {
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.skipped.is_empty()
    }

    /// The files as InstructionsLoaded hooks see them, loaded for `reason`
    /// (`session_start`, `nested_traversal`) for an agent working in `cwd`, after a tool
    /// touched `trigger` (nested loads); an imported file's reason is `include`.
    pub fn loaded(&self, cwd: &Path, reason: &str, trigger: Option<&Path>) -> Vec<Loaded> {
        // Paths are relative to the repository root, as the collector resolved it.
        let root = repository_root(cwd);
        let root = root.canonicalize().unwrap_or(root);
        let absolute = |rel: &str| root.join(rel).display().to_string();
        self.files
            .iter()
            .map(|f| Loaded {
                file_path: absolute(&f.path),
                memory_type: if f.path.ends_with("CLAUDE.local.md") { "Local" } else { "Project" }.to_string(),
                load_reason: if f.imported_by.is_some() { "include" } else { reason }.to_string(),
                trigger_file_path: trigger.map(|t| t.display().to_string()),
                parent_file_path: f.imported_by.as_deref().map(absolute),
            })
            .collect()
    }
}

/// An instruction file that went into an agent's context, with Claude Code's
/// InstructionsLoaded input fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loaded {
    /// Absolute.
    pub file_path: String,
    /// `Project`, or `Local` for `CLAUDE.local.md`.
    pub memory_type: String,
    /// `session_start`, `nested_traversal` or `include`.
    pub load_reason: String,
    /// The path whose first touch loaded a subdirectory's files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_file_path: Option<String>,
    /// The file whose `@` import brought this one in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_file_path: Option<String>,
}

/// The repository root of `cwd`: the nearest directory, `cwd` included, that holds a
/// `.git` entry; `cwd` itself when there is none.
pub fn repository_root(cwd: &Path) -> PathBuf {
    cwd.ancestors().find(|d| d.join(".git").symlink_metadata().is_ok()).unwrap_or(cwd).to_path_buf()
}

/// Collects the instruction files for an agent working in `cwd`.
pub fn collect(cwd: &Path) -> Instructions {
    match start(cwd) {
        Some((c, _)) => c.out,
        None => Instructions::default(),
    }
}

/// The collection of [`collect`], with the collector (for the files it read) and the
/// directories it looked in; `None` when the repository root cannot be resolved.
fn start(cwd: &Path) -> Option<(Collector, Vec<PathBuf>)> {
    let root = repository_root(cwd).canonicalize().ok()?;
    let cwd = cwd.canonicalize().unwrap_or_else(|_| root.clone());
    let mut dirs = vec![root.clone()];
    if let Ok(rel) = cwd.strip_prefix(&root) {
        let mut dir = root.clone();
        for part in rel.components() {
            dir.push(part);
            dirs.push(dir.clone());
        }
    }
    let mut c = Collector { root, seen: HashSet::new(), out: Instructions::default() };
    for dir in &dirs {
        c.load_dir(dir);
    }
    Some((c, dirs))
}

/// The path a call of `tool` with `input` touches, as the model gave it; `None` for
/// other tools and for calls without a path (they work in the working directory, whose
/// instructions are in the prompt already).
pub fn touched_path<'a>(tool: &str, input: &'a serde_json::Value) -> Option<&'a str> {
    // The catalog names the input field of each tool that works on a path.
    let field = orch_types::tools::lookup(tool)?.path_field?;
    input.get(field)?.as_str().filter(|p| !p.is_empty())
}

/// The subdirectory instructions one agent scope has been given: the files already in
/// its context (those of its system prompt included) and the directories already
/// looked in. Starts empty; the first [`Nested::on_touch`] records the prompt's files.
#[derive(Debug, Default)]
pub struct Nested {
    started: bool,
    seen: HashSet<PathBuf>,
    checked: HashSet<PathBuf>,
    /// The last working directory asked about and its repository's real root, looked
    /// up once rather than on every call.
    root: Option<(PathBuf, PathBuf)>,
}

impl Nested {
    /// The instruction files, not yet given to this scope, of the directories between
    /// the working directory `cwd` and `touched` (a path a tool call reached, made
    /// absolute): from the shallowest directory down, each with its imports. Nothing
    /// outside the repository is read, and no file is returned twice.
    pub fn on_touch(&mut self, cwd: &Path, touched: &Path) -> Instructions {
        if !self.started {
            self.started = true;
            if let Some((c, dirs)) = start(cwd) {
                self.seen = c.seen;
                self.checked.extend(dirs);
            }
        }
        let root = match &self.root {
            Some((known, root)) if known == cwd => root.clone(),
            _ => {
                let Ok(root) = repository_root(cwd).canonicalize() else { return Instructions::default() };
                self.root = Some((cwd.to_path_buf(), root.clone()));
                root
            }
        };
        // A path that does not exist (a failed call) still names its directory.
        let Some(dir) = touched
            .canonicalize()
            .ok()
            .map(|real| if real.is_dir() { real } else { real.parent().map(Path::to_path_buf).unwrap_or(real) })
            .or_else(|| touched.parent().and_then(|p| p.canonicalize().ok()))
        else {
            return Instructions::default();
        };
        if !dir.starts_with(&root) || dir == root {
            return Instructions::default();
        }
        let mut fresh: Vec<PathBuf> = dir
            .ancestors()
            .take_while(|d| *d != root)
            .filter(|d| !self.checked.contains(*d))
            .map(Path::to_path_buf)
            .collect();
        fresh.reverse();
        if fresh.is_empty() {
            return Instructions::default();
        }
        let mut c = Collector { root, seen: std::mem::take(&mut self.seen), out: Instructions::default() };
        for d in fresh {
            c.load_dir(&d);
            self.checked.insert(d);
        }
        self.seen = c.seen;
        c.out
    }
}

struct Collector {
    root: PathBuf,
    seen: HashSet<PathBuf>,
    out: Instructions,
}

impl Collector {
    /// Loads the instruction files that exist in `dir`.
    fn load_dir(&mut self, dir: &Path) {
        for name in INSTRUCTION_FILES {
            let path = dir.join(name);
            if path.symlink_metadata().is_ok() {
                self.load(&path, None, 0);
            }
        }
    }

    fn label(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).unwrap_or(path).display().to_string()
    }

    fn load(&mut self, path: &Path, imported_by: Option<&str>, depth: usize) {
        let shown = self.label(path);
        let skip = |out: &mut Instructions, why: &str| match imported_by {
            Some(by) => out.skipped.push(format!("{shown} (imported by {by}): {why}")),
            None => out.skipped.push(format!("{shown}: {why}")),
        };
        let Ok(real) = path.canonicalize() else {
            if imported_by.is_some() {
                skip(&mut self.out, "not found");
            }
            return;
        };
        if !real.starts_with(&self.root) {
            skip(&mut self.out, "outside the repository, not read");
            return;
        }
        if !self.seen.insert(real.clone()) {
            return;
        }
        if !real.is_file() {
            skip(&mut self.out, "not a regular file");
            return;
        }
        let Some(text) = read_text(&real) else {
            skip(&mut self.out, "not a text file, not read");
            return;
        };
        let label = self.label(&real);
        let total = text.chars().count();
        let (text, truncated) = if total > MAX_FILE_CHARS {
            let kept: String = text.chars().take(MAX_FILE_CHARS).collect();
            (
                format!(
                    "{kept}\n[cut here: the file has {total} characters and only the first {MAX_FILE_CHARS} are shown]"
                ),
                true,
            )
        } else {
            (text, false)
        };
        let imports = imports(&text);
        self.out.files.push(InstructionFile {
            path: label.clone(),
            imported_by: imported_by.map(str::to_string),
            text,
            truncated,
        });
        let base = real.parent().map(Path::to_path_buf).unwrap_or_else(|| self.root.clone());
        for import in imports {
            let target = if let Some(rest) = import.strip_prefix("~/") {
                // A home directory is never inside the repository.
                PathBuf::from("/nonexistent-home").join(rest)
            } else {
                base.join(&import)
            };
            if depth + 1 > MAX_IMPORT_DEPTH {
                self.out.skipped.push(format!(
                    "@{import} (imported by {label}): more than {MAX_IMPORT_DEPTH} levels of imports, not followed"
                ));
                continue;
            }
            if import.starts_with("~/") {
                self.out.skipped.push(format!("@{import} (imported by {label}): outside the repository, not read"));
                continue;
            }
            self.load(&target, Some(&label), depth + 1);
        }
    }
}

/// The file as text: valid UTF-8 without NUL bytes, or nothing.
fn read_text(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_READ_BYTES).read_to_end(&mut bytes).ok()?;
    if bytes.contains(&0) {
        return None;
    }
    match String::from_utf8(bytes) {
        Ok(text) => Some(text),
        // Cut inside a character at the read limit: keep the valid part.
        Err(e) if e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            String::from_utf8(bytes).ok()
        }
        Err(_) => None,
    }
}

/// The `@path` imports of a text, in order: an `@` at the start of a word, followed by a
/// path. Code blocks and inline code are skipped; trailing punctuation is dropped.
pub fn imports(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") || line.trim_start().starts_with("~~~") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Inline code spans alternate with plain text between backticks.
        for (n, part) in line.split('`').enumerate() {
            if n % 2 == 1 {
                continue;
            }
            for word in part.split_whitespace() {
                let Some(path) = word.strip_prefix('@') else { continue };
                let path = path.trim_end_matches(['.', ',', ';', ':', ')', ']', '!', '?', '"', '\'']);
                let looks_like_path = path.contains('/') || path.contains('.');
                if !path.is_empty() && looks_like_path && !out.iter().any(|p| p == path) {
                    out.push(path.to_string());
                }
            }
        }
    }
    out
}

/// Asks the agent's tool host for the instructions of its working directory.
pub async fn load(executor: &dyn ToolExecutor, cancel: CancellationToken) -> Result<Instructions, String> {
    let request = HostRequest::ProjectInstructions;
    let output = executor.execute(request, cancel).await?;
    if output.is_error {
        return Err(output.content);
    }
    serde_json::from_str(&output.content).map_err(|e| format!("the tool host sent unreadable instructions: {e}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use std::fs;

    use super::*;

    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join(".git")).unwrap();
        dir
    }

    fn paths(found: &Instructions) -> Vec<&str> {
        found.files.iter().map(|f| f.path.as_str()).collect()
    }

    #[test]
    fn root_to_cwd_nearest_last() {
        let r = repo();
        let sub = r.path().join("a/b");
        fs::create_dir_all(&sub).unwrap();
        fs::write(r.path().join("AGENTS.md"), "root agents").unwrap();
        fs::write(r.path().join("CLAUDE.md"), "root claude").unwrap();
        fs::write(r.path().join("a/CLAUDE.md"), "mid").unwrap();
        fs::write(sub.join("AGENTS.md"), "leaf").unwrap();
        fs::write(r.path().join("a/b/other.md"), "not collected").unwrap();
        let found = collect(&sub);
        assert_eq!(paths(&found), vec!["AGENTS.md", "CLAUDE.md", "a/CLAUDE.md", "a/b/AGENTS.md"]);
        assert_eq!(found.files[3].text, "leaf");
        assert!(found.skipped.is_empty());
    }

    #[test]
    fn claude_dir_and_local_files() {
        let r = repo();
        let p = r.path();
        fs::create_dir_all(p.join(".claude")).unwrap();
        fs::create_dir_all(p.join("sub/.claude")).unwrap();
        fs::write(p.join("CLAUDE.local.md"), "local").unwrap();
        fs::write(p.join(".claude/CLAUDE.md"), "in dot claude").unwrap();
        fs::write(p.join("CLAUDE.md"), "shared").unwrap();
        fs::write(p.join("sub/.claude/CLAUDE.md"), "sub dot claude").unwrap();
        fs::write(p.join(".claude/settings.json"), "{}").unwrap();
        let found = collect(&p.join("sub"));
        assert_eq!(paths(&found), vec!["CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md", "sub/.claude/CLAUDE.md"]);
        assert_eq!(found.files[2].text, "local");
    }

    #[test]
    fn imports_follow_once_and_stop_at_depth() {
        let r = repo();
        let p = r.path();
        fs::write(p.join("AGENTS.md"), "see @docs/one.md and `@ignored.md`, and @docs/one.md again").unwrap();
        fs::create_dir(p.join("docs")).unwrap();
        // one -> two -> three -> four -> five -> six -> seven: six is depth 6.
        let names = ["one", "two", "three", "four", "five", "six", "seven"];
        for w in names.windows(2) {
            fs::write(p.join(format!("docs/{}.md", w[0])), format!("{} then @{}.md", w[0], w[1])).unwrap();
        }
        fs::write(p.join("docs/seven.md"), "seven").unwrap();
        fs::write(p.join("CLAUDE.md"), "also @docs/one.md").unwrap();
        let found = collect(p);
        assert_eq!(
            paths(&found),
            vec![
                "AGENTS.md",
                "docs/one.md",
                "docs/two.md",
                "docs/three.md",
                "docs/four.md",
                "docs/five.md",
                "CLAUDE.md"
            ]
        );
        assert_eq!(found.files[1].imported_by.as_deref(), Some("AGENTS.md"));
        assert_eq!(found.skipped.len(), 1, "{:?}", found.skipped);
        assert!(found.skipped[0].contains("six.md") && found.skipped[0].contains("levels"), "{:?}", found.skipped);
    }

    #[test]
    fn refuses_files_outside_the_repository() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret.md"), "SECRET").unwrap();
        let r = repo();
        let p = r.path();
        fs::write(
            p.join("AGENTS.md"),
            format!(
                "@../{}/secret.md @{}/secret.md @~/x.md @link.md",
                outside.path().file_name().unwrap().to_str().unwrap(),
                outside.path().display()
            ),
        )
        .unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), p.join("link.md")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.md"), p.join("CLAUDE.md")).unwrap();
        let found = collect(p);
        assert_eq!(paths(&found), vec!["AGENTS.md"]);
        assert!(found.files.iter().all(|f| !f.text.contains("SECRET")));
        assert_eq!(found.skipped.len(), 5, "{:?}", found.skipped);
        assert!(found.skipped.iter().all(|s| s.contains("outside the repository")), "{:?}", found.skipped);
    }

    #[test]
    fn caps_long_files_and_skips_binary_ones() {
        let r = repo();
        let p = r.path();
        fs::write(p.join("AGENTS.md"), format!("{}@bin.dat", "é".repeat(MAX_FILE_CHARS + 10))).unwrap();
        fs::write(p.join("bin.dat"), b"a\0b").unwrap();
        let found = collect(p);
        assert_eq!(found.files.len(), 1);
        let f = &found.files[0];
        assert!(f.truncated && f.text.contains("cut here"));
        assert_eq!(f.text.chars().take_while(|c| *c == 'é').count(), MAX_FILE_CHARS);
        // The import sat past the cut, so it was never seen.
        assert!(found.skipped.is_empty());
        fs::write(p.join("AGENTS.md"), "@bin.dat").unwrap();
        let found = collect(p);
        assert_eq!(found.skipped, vec!["bin.dat (imported by AGENTS.md): not a text file, not read"]);
    }

    #[test]
    fn import_syntax() {
        assert_eq!(imports("@a.md, @b/c (@d.md) me@x.com @user\n```\n@e.md\n```\n@f.md."), vec!["a.md", "b/c", "f.md"]);
    }

    #[test]
    fn subdirectory_files_come_once_on_first_touch() {
        let r = repo();
        let p = r.path();
        fs::create_dir_all(p.join("sub/deep")).unwrap();
        fs::create_dir_all(p.join("other")).unwrap();
        fs::write(p.join("CLAUDE.md"), "root, in the prompt").unwrap();
        fs::write(p.join("sub/CLAUDE.md"), "sub rules @notes.md").unwrap();
        fs::write(p.join("sub/notes.md"), "sub notes").unwrap();
        fs::write(p.join("sub/deep/AGENTS.md"), "deep rules").unwrap();
        fs::write(p.join("sub/deep/x.rs"), "").unwrap();
        fs::write(p.join("other/y.rs"), "").unwrap();
        let mut nested = Nested::default();
        // The root's files are the prompt's: touching the root brings nothing.
        assert!(nested.on_touch(p, &p.join("CLAUDE.md")).files.is_empty());
        let found = nested.on_touch(p, &p.join("sub/deep/x.rs"));
        assert_eq!(paths(&found), vec!["sub/CLAUDE.md", "sub/notes.md", "sub/deep/AGENTS.md"]);
        assert_eq!(found.files[1].imported_by.as_deref(), Some("sub/CLAUDE.md"));
        // Never twice, whatever reaches the directory again.
        assert!(nested.on_touch(p, &p.join("sub/deep/x.rs")).files.is_empty());
        assert!(nested.on_touch(p, &p.join("sub/deep")).files.is_empty());
        assert!(nested.on_touch(p, &p.join("sub/../sub/new-file.rs")).files.is_empty());
        assert!(nested.on_touch(p, &p.join("other/y.rs")).files.is_empty());
        // Another scope starts over.
        let mut other = Nested::default();
        assert_eq!(paths(&other.on_touch(p, &p.join("sub"))), vec!["sub/CLAUDE.md", "sub/notes.md"]);
    }

    #[test]
    fn subdirectory_files_already_imported_by_the_prompt_are_not_repeated() {
        let r = repo();
        let p = r.path();
        fs::create_dir_all(p.join("sub")).unwrap();
        fs::write(p.join("AGENTS.md"), "see @sub/CLAUDE.md").unwrap();
        fs::write(p.join("sub/CLAUDE.md"), "sub rules").unwrap();
        fs::write(p.join("sub/AGENTS.md"), "sub agents").unwrap();
        let mut nested = Nested::default();
        assert_eq!(paths(&nested.on_touch(p, &p.join("sub/a.rs"))), vec!["sub/AGENTS.md"]);
    }

    #[test]
    fn subdirectory_files_outside_the_repository_are_never_read() {
        let outside = tempfile::tempdir().unwrap();
        fs::create_dir_all(outside.path().join("d")).unwrap();
        fs::write(outside.path().join("d/CLAUDE.md"), "SECRET").unwrap();
        fs::write(outside.path().join("d/f.rs"), "").unwrap();
        fs::write(outside.path().join("CLAUDE.md"), "SECRET TOO").unwrap();
        let r = repo();
        let p = r.path();
        fs::create_dir_all(p.join("sub")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("d"), p.join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("d/CLAUDE.md"), p.join("sub/CLAUDE.md")).unwrap();
        let mut nested = Nested::default();
        assert!(nested.on_touch(p, &outside.path().join("d/f.rs")).files.is_empty());
        assert!(nested.on_touch(p, &p.join("linked/f.rs")).files.is_empty());
        let found = nested.on_touch(p, &p.join("sub/x.rs"));
        assert!(found.files.is_empty(), "{found:?}");
        assert!(found.skipped.iter().all(|s| s.contains("outside the repository")), "{:?}", found.skipped);
    }

    #[test]
    fn touched_paths_of_the_file_tools() {
        let input = serde_json::json!({"file_path": "a/b.rs", "path": "c", "notebook_path": "n.ipynb"});
        assert_eq!(touched_path("Read", &input), Some("a/b.rs"));
        assert_eq!(touched_path("MultiEdit", &input), Some("a/b.rs"));
        assert_eq!(touched_path("NotebookEdit", &input), Some("n.ipynb"));
        assert_eq!(touched_path("Grep", &input), Some("c"));
        assert_eq!(touched_path("LS", &serde_json::json!({})), None);
        assert_eq!(touched_path("Bash", &input), None);
    }

    #[tokio::test]
    async fn the_host_attaches_them_to_the_result_once_per_scope() {
        use crate::protocol::{HostRequest, ToolRequest};
        use crate::tools::host::HostTools;
        use crate::tools::{Session, core_tools};
        let r = repo();
        let p = r.path();
        fs::create_dir_all(p.join("sub")).unwrap();
        fs::write(p.join("sub/CLAUDE.md"), "SUB-RULES").unwrap();
        fs::write(p.join("sub/a.txt"), "alpha\n").unwrap();
        let host = HostTools::new(core_tools(), std::sync::Arc::new(Session::new(p)));
        let read = |scope: Option<&str>| {
            let request = ToolRequest {
                tool: "Read".into(),
                input: serde_json::json!({"file_path": "sub/a.txt"}),
                scope: scope.map(str::to_string),
                hidden: Vec::new(),
            };
            host.run(HostRequest::Tool(request), CancellationToken::new())
        };
        let first = read(None).await;
        assert!(!first.is_error, "{}", first.content);
        assert!(first.content.contains("alpha"), "{}", first.content);
        assert_eq!(first.content.matches("SUB-RULES").count(), 1, "{}", first.content);
        assert!(first.content.contains("<instructions path=\"sub/CLAUDE.md\">"), "{}", first.content);
        assert!(!read(None).await.content.contains("SUB-RULES"));
        // A sub-agent has its own context: it gets them once too.
        assert!(read(Some("sub-1")).await.content.contains("SUB-RULES"));
        assert!(!read(Some("sub-1")).await.content.contains("SUB-RULES"));
        // A failed call brings nothing.
        let ls = host
            .run(HostRequest::tool("Read", serde_json::json!({"file_path": "sub/missing"})), CancellationToken::new());
        assert!(!ls.await.content.contains("SUB-RULES"));
    }
}
