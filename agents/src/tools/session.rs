//! Per-agent state shared by the tools of one agent inside its tool host: the working
//! directory (and the one `Bash` left its shell in), what was read and when, the todo list, the background shells, and the
//! subdirectory instructions already given to the model.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::background::Shells;
use crate::permissions::paths::normalize;

/// What a file looked like when the agent read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStamp {
    pub modified: Option<SystemTime>,
    pub len: u64,
    /// A hash of the bytes, so a same-size rewrite within the mtime granularity is seen.
    pub hash: u64,
    pub read_at: SystemTime,
}

impl FileStamp {
    /// Stamps `bytes`, the current content of a file with `metadata`.
    pub fn of(bytes: &[u8], metadata: &std::fs::Metadata) -> Self {
        Self { modified: metadata.modified().ok(), len: metadata.len(), hash: hash(bytes), read_at: SystemTime::now() }
    }

    /// Whether `bytes` are still what was read.
    pub fn matches(&self, bytes: &[u8]) -> bool {
        self.len == bytes.len() as u64 && self.hash == hash(bytes)
    }
}

fn hash(bytes: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// One entry of the agent's todo list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Todo {
    /// What to do, in the imperative ("Run the tests").
    pub content: String,
    pub status: TodoStatus,
    /// The same task in the present continuous ("Running the tests").
    #[serde(default, rename = "activeForm", skip_serializing_if = "Option::is_none")]
    pub active_form: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Completed,
}

/// The state of one agent's tools.
#[derive(Debug)]
pub struct Session {
    cwd: PathBuf,
    /// Where the next `Bash` command starts: the directory the last one ended in, always
    /// inside `cwd`.
    shell_cwd: Mutex<PathBuf>,
    reads: Mutex<HashMap<PathBuf, FileStamp>>,
    todos: Mutex<Vec<Todo>>,
    shells: Arc<Shells>,
    nested: Mutex<crate::instructions::Nested>,
}

impl Session {
    pub fn new(cwd: impl Into<PathBuf>) -> Self {
        let cwd = cwd.into();
        Self {
            shell_cwd: Mutex::new(cwd.clone()),
            cwd,
            reads: Mutex::new(HashMap::new()),
            todos: Mutex::new(Vec::new()),
            shells: Arc::new(Shells::default()),
            nested: Mutex::default(),
        }
    }

    /// A session for a sub-agent: the same working directory and background shells, its
    /// shell starting where its caller's is now, but its own read stamps and todo list, so it cannot edit a file only its caller
    /// read, and its own record of the subdirectory instructions it was given (its
    /// caller's were attached to results it never sees).
    pub fn scoped(&self) -> Self {
        Self {
            cwd: self.cwd.clone(),
            shell_cwd: Mutex::new(self.shell_cwd()),
            reads: Mutex::new(HashMap::new()),
            todos: Mutex::new(Vec::new()),
            shells: self.shells.clone(),
            nested: Mutex::default(),
        }
    }

    /// The instruction files of the subdirectories between the working directory and
    /// `touched` that this session has not been given yet; see
    /// [`crate::instructions::Nested::on_touch`].
    pub fn nested_instructions(&self, touched: &Path) -> crate::instructions::Instructions {
        self.nested.lock().unwrap_or_else(|e| e.into_inner()).on_touch(&self.cwd, touched)
    }

    /// The background shells started by `Bash` with `run_in_background`.
    pub fn shells(&self) -> &Shells {
        &self.shells
    }

    /// The agent's working directory (its worktree).
    pub fn cwd(&self) -> &Path {
        &self.cwd
    }

    /// Where the next `Bash` command starts.
    pub fn shell_cwd(&self) -> PathBuf {
        self.shell_cwd.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records where the last `Bash` command ended; the caller checked that it is inside
    /// the working directory.
    pub fn set_shell_cwd(&self, dir: PathBuf) {
        *self.shell_cwd.lock().unwrap_or_else(|e| e.into_inner()) = dir;
    }

    /// `path` made absolute against the working directory, with `.` and `..` folded
    /// lexically (no symlinks are followed here; the sandbox decides what is reachable).
    pub fn resolve(&self, path: &str) -> PathBuf {
        let joined = if Path::new(path).is_absolute() { PathBuf::from(path) } else { self.cwd.join(path) };
        normalize(&joined)
    }

    pub fn record_read(&self, path: &Path, stamp: FileStamp) {
        self.reads.lock().unwrap_or_else(|e| e.into_inner()).insert(path.to_path_buf(), stamp);
    }

    pub fn last_read(&self, path: &Path) -> Option<FileStamp> {
        self.reads.lock().unwrap_or_else(|e| e.into_inner()).get(path).cloned()
    }

    pub fn set_todos(&self, todos: Vec<Todo>) {
        *self.todos.lock().unwrap_or_else(|e| e.into_inner()) = todos;
    }

    pub fn todos(&self) -> Vec<Todo> {
        self.todos.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_relative_and_dotted_paths() {
        let s = Session::new("/work/tree");
        assert_eq!(s.resolve("src/lib.rs"), PathBuf::from("/work/tree/src/lib.rs"));
        assert_eq!(s.resolve("./a/../b"), PathBuf::from("/work/tree/b"));
        assert_eq!(s.resolve("/etc/../etc/passwd"), PathBuf::from("/etc/passwd"));
        assert_eq!(s.resolve("../../../.."), PathBuf::from("/"));
    }
}
