//! The changes a run is about: the template built-in `pr` (`{{ pr.changed_files }}`),
//! computed with git2 so a workflow needs no survey agent to find them.
//!
//! Where the base and head come from:
//! - `--diff-base REV` (`orch run`, `orch plan`): the base is REV (tried as written, then
//!   as `origin/REV`); the head is the pull request's head when the event is one, else
//!   the commit the run starts from (`HEAD`);
//! - otherwise, when `GITHUB_EVENT_NAME` is `pull_request` or `pull_request_target`: the
//!   payload at `GITHUB_EVENT_PATH` gives `pull_request.base.sha`, `head.sha` and
//!   `number`;
//! - otherwise `pr` is undefined, and a template that reads it fails to render.
//!
//! The files are those of `git diff --name-only BASE...HEAD`: changes on the head side
//! since the merge base of the two, renames followed. Deleted files are left out of
//! `changed_files` (there is nothing to read or review in the checkout) and listed in
//! `deleted_files`. The diff itself is given twice, both bounded: `pr.diff` (the whole
//! patch, cut at [`MAX_DIFF`]) and `pr.diffs` (one patch per changed or deleted path,
//! each cut at [`MAX_FILE_DIFF`], all together at most [`MAX_DIFFS`]); a cut diff ends
//! with a line that names the `git diff` command giving the rest. Nothing is computed
//! unless a template of the workflow reads `pr`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use orch_workflows::{Builtins, Workflow};
use serde_json::{Value, json};

use crate::repo_config::PR_EVENTS;

/// Longest `pr.diff`, in bytes.
pub const MAX_DIFF: usize = 256 * 1024;
/// Longest patch of one file in `pr.diffs`, in bytes.
pub const MAX_FILE_DIFF: usize = 64 * 1024;
/// Most bytes of all of `pr.diffs` together; later files get only the cut line.
pub const MAX_DIFFS: usize = 1024 * 1024;

/// A problem finding the changes.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error("cannot open the repository at {path}: {message}")]
    Open { path: String, message: String },
    #[error(
        "the event is `{event}`, but {path} has no `pull_request.base.sha`; pass --diff-base REV to name the base \
         the changed files are found against"
    )]
    NoEventBase { event: String, path: String },
    #[error(
        "cannot find the {what} `{rev}` in {repo}: {message}; fetch the history first (actions/checkout with \
         `fetch-depth: 0`, or `git fetch origin {rev}`)"
    )]
    Missing { what: &'static str, rev: String, repo: String, message: String },
    #[error("the {what} `{rev}` is not a commit: {message}")]
    NotCommit { what: &'static str, rev: String, message: String },
    #[error(
        "`{base}` and `{head}` have no common history, so there is no `BASE...HEAD` diff; pass another --diff-base"
    )]
    NoMergeBase { base: String, head: String },
    #[error("cannot compute the diff of {base}...{head}: {message}")]
    Diff { base: String, head: String, message: String },
}

/// What a command was told about the changes it is about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangesRequest {
    /// The repository (default: the one around the current directory).
    pub repo: Option<PathBuf>,
    /// `--diff-base`.
    pub diff_base: Option<String>,
    /// The head when the event names none (default `HEAD`).
    pub head: Option<String>,
}

/// Where the base and head come from, before git is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The pull request's number, when the event is one.
    pub number: Option<u64>,
    /// A revision: a sha from the event, or `--diff-base` as written.
    pub base: String,
    /// A revision: the event's head sha, or the run's start.
    pub head: String,
}

impl Source {
    /// The source from `--diff-base` and the event in `event_name` / `event_path`;
    /// `Ok(None)` when neither makes this a run about changes.
    pub fn find(
        diff_base: Option<&str>,
        default_head: &str,
        event_name: Option<&str>,
        event_path: Option<&Path>,
    ) -> Result<Option<Source>, ChangesError> {
        let pull_request = event_name.filter(|e| PR_EVENTS.contains(e));
        let event: Value = match (pull_request, event_path) {
            (Some(_), Some(path)) => {
                std::fs::read(path).ok().and_then(|bytes| serde_json::from_slice(&bytes).ok()).unwrap_or(Value::Null)
            }
            _ => Value::Null,
        };
        Source::of_event(diff_base, default_head, event_name, &event, event_path)
    }

    /// [`Source::find`] with the event payload already read (`Null` when there is
    /// none); `event_path` only names it in an error.
    pub fn of_event(
        diff_base: Option<&str>,
        default_head: &str,
        event_name: Option<&str>,
        event: &Value,
        event_path: Option<&Path>,
    ) -> Result<Option<Source>, ChangesError> {
        let pull_request = event_name.filter(|e| PR_EVENTS.contains(e));
        let pr = if pull_request.is_some() { &event["pull_request"] } else { &Value::Null };
        let sha = |side: &str| pr[side]["sha"].as_str().map(str::trim).filter(|s| !s.is_empty()).map(str::to_string);
        let number = pr["number"].as_u64();
        let head = sha("head").unwrap_or_else(|| default_head.to_string());
        if let Some(base) = diff_base {
            return Ok(Some(Source { number, base: base.to_string(), head }));
        }
        let Some(event) = pull_request else { return Ok(None) };
        match sha("base") {
            Some(base) => Ok(Some(Source { number, base, head })),
            None => Err(ChangesError::NoEventBase {
                event: event.to_string(),
                path: event_path.map_or_else(|| "GITHUB_EVENT_PATH (unset)".to_string(), |p| p.display().to_string()),
            }),
        }
    }

    /// [`Source::find`] with this process's environment.
    pub fn from_env(diff_base: Option<&str>, default_head: &str) -> Result<Option<Source>, ChangesError> {
        let var = |name: &str| std::env::var(name).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let path = var("GITHUB_EVENT_PATH").map(PathBuf::from);
        Source::find(diff_base, default_head, var("GITHUB_EVENT_NAME").as_deref(), path.as_deref())
    }
}

/// The changes between a base and a head, as templates see them (`pr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changes {
    pub number: Option<u64>,
    /// Full shas.
    pub base: String,
    pub head: String,
    pub merge_base: String,
    /// Added, modified, renamed (the new path) and type-changed files, in path order.
    pub changed_files: Vec<String>,
    pub deleted_files: Vec<String>,
    pub diff: String,
    pub diff_truncated: bool,
    /// One patch per path of `changed_files` and `deleted_files`.
    pub diffs: BTreeMap<String, String>,
}

impl Changes {
    /// The `pr` template value.
    pub fn to_value(&self) -> Value {
        json!({
            "number": self.number,
            "base": self.base,
            "head": self.head,
            "merge_base": self.merge_base,
            "changed_files": self.changed_files,
            "deleted_files": self.deleted_files,
            "diff": self.diff,
            "diff_truncated": self.diff_truncated,
            "diffs": self.diffs,
        })
    }
}

/// Computes the changes of `source` in the repository at (or around) `repo`.
pub fn compute(repo: &Path, source: &Source) -> Result<Changes, ChangesError> {
    let git = open(repo)?;
    let ThreeDot { diff, base: base_id, head: head_id, merge_base } = three_dot(&git, source)?;
    let diff_error = |e: git2::Error| ChangesError::Diff {
        base: base_id.clone(),
        head: head_id.clone(),
        message: e.message().into(),
    };

    let rest = |path: &str| format!("git diff {merge_base} {head_id} -- {path}");
    let mut changes = Changes {
        number: source.number,
        base: base_id.clone(),
        head: head_id.clone(),
        merge_base: merge_base.clone(),
        changed_files: Vec::new(),
        deleted_files: Vec::new(),
        diff: String::new(),
        diff_truncated: false,
        diffs: BTreeMap::new(),
    };
    let mut diffs_size = 0usize;
    for (index, delta) in diff.deltas().enumerate() {
        let deleted = delta.status() == git2::Delta::Deleted;
        let file = if deleted { delta.old_file() } else { delta.new_file() };
        let Some(path) = file.path().map(|p| p.to_string_lossy().into_owned()) else { continue };
        if deleted {
            changes.deleted_files.push(path.clone());
        } else {
            changes.changed_files.push(path.clone());
        }
        let patch = match git2::Patch::from_diff(&diff, index).map_err(diff_error)? {
            Some(mut patch) => String::from_utf8_lossy(&patch.to_buf().map_err(diff_error)?).into_owned(),
            None => String::new(),
        };
        if !changes.diff_truncated {
            if changes.diff.len() + patch.len() <= MAX_DIFF {
                changes.diff.push_str(&patch);
            } else {
                let room = MAX_DIFF.saturating_sub(changes.diff.len());
                changes.diff.push_str(cut(&patch, room));
                changes.diff.push_str(&format!(
                    "\n[orch: the diff is cut here at {} KiB; run `git diff {merge_base} {head_id}` for the rest]\n",
                    MAX_DIFF / 1024
                ));
                changes.diff_truncated = true;
            }
        }
        let room = MAX_FILE_DIFF.min(MAX_DIFFS.saturating_sub(diffs_size));
        let text = if patch.len() <= room {
            patch
        } else {
            format!("{}\n[orch: this file's diff is cut here; run `{}` for the rest]\n", cut(&patch, room), rest(&path))
        };
        diffs_size += text.len();
        changes.diffs.insert(path, text);
    }
    Ok(changes)
}

/// The whole patch of each file on the head side of `source` (added, modified,
/// renamed under its new path, type-changed; deleted files are left out), uncut: what
/// GitHub lists as a pull request's files, from the local repository.
pub fn patches(repo: &Path, source: &Source) -> Result<BTreeMap<String, String>, ChangesError> {
    let git = open(repo)?;
    let ThreeDot { diff, base, head, .. } = three_dot(&git, source)?;
    let diff_error =
        |e: git2::Error| ChangesError::Diff { base: base.clone(), head: head.clone(), message: e.message().into() };
    let mut out = BTreeMap::new();
    for (index, delta) in diff.deltas().enumerate() {
        if delta.status() == git2::Delta::Deleted {
            continue;
        }
        let Some(path) = delta.new_file().path().map(|p| p.to_string_lossy().into_owned()) else { continue };
        let patch = match git2::Patch::from_diff(&diff, index).map_err(diff_error)? {
            Some(mut patch) => String::from_utf8_lossy(&patch.to_buf().map_err(diff_error)?).into_owned(),
            None => String::new(),
        };
        out.insert(path, patch);
    }
    Ok(out)
}

fn open(repo: &Path) -> Result<git2::Repository, ChangesError> {
    git2::Repository::discover(repo)
        .map_err(|e| ChangesError::Open { path: repo.display().to_string(), message: e.message().to_string() })
}

/// The diff of `BASE...HEAD` and the full shas it was taken between.
struct ThreeDot<'r> {
    diff: git2::Diff<'r>,
    base: String,
    head: String,
    merge_base: String,
}

/// The diff from the merge base of `source`'s base and head to its head, renames
/// followed.
fn three_dot<'r>(git: &'r git2::Repository, source: &Source) -> Result<ThreeDot<'r>, ChangesError> {
    let repo_name = git.workdir().unwrap_or_else(|| git.path()).display().to_string();
    let commit = |what: &'static str, rev: &str| -> Result<git2::Commit<'r>, ChangesError> {
        let object = git.revparse_single(rev).or_else(|first| {
            git.revparse_single(&format!("origin/{rev}")).map_err(|_| ChangesError::Missing {
                what,
                rev: rev.to_string(),
                repo: repo_name.clone(),
                message: first.message().to_string(),
            })
        })?;
        object.peel_to_commit().map_err(|e| ChangesError::NotCommit {
            what,
            rev: rev.to_string(),
            message: e.message().to_string(),
        })
    };
    let base = commit("diff base", &source.base)?;
    let head = commit("head", &source.head)?;
    let (base_id, head_id) = (base.id().to_string(), head.id().to_string());
    let merge_base = git
        .merge_base(base.id(), head.id())
        .map_err(|_| ChangesError::NoMergeBase { base: source.base.clone(), head: source.head.clone() })?;
    let diff_error = |e: git2::Error| ChangesError::Diff {
        base: base_id.clone(),
        head: head_id.clone(),
        message: e.message().into(),
    };
    let old_tree = git.find_commit(merge_base).and_then(|c| c.tree()).map_err(diff_error)?;
    let new_tree = head.tree().map_err(diff_error)?;
    let mut diff = git.diff_tree_to_tree(Some(&old_tree), Some(&new_tree), None).map_err(diff_error)?;
    diff.find_similar(Some(git2::DiffFindOptions::new().renames(true))).map_err(diff_error)?;
    Ok(ThreeDot { diff, base: base_id, head: head_id, merge_base: merge_base.to_string() })
}

/// The longest prefix of `text` of at most `max` bytes that ends on a line break (or on
/// a character boundary when there is none).
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let prefix = &text[..end];
    match prefix.rfind('\n') {
        Some(i) => &text[..=i],
        None => prefix,
    }
}

/// The built-ins of a run of `workflow`: `pr` when a template reads it and the request
/// or the event says what the changes are (see the module docs).
pub fn builtins(workflow: &Workflow, request: &ChangesRequest) -> Result<Builtins, ChangesError> {
    if !orch_workflows::reads_builtin(workflow, "pr") {
        return Ok(Builtins::default());
    }
    let head = request.head.as_deref().unwrap_or("HEAD");
    let Some(source) = Source::from_env(request.diff_base.as_deref(), head)? else {
        return Ok(Builtins::default());
    };
    let repo = match &request.repo {
        Some(r) => r.clone(),
        None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
    };
    let changes = compute(&repo, &source)?;
    Ok(Builtins { pr: Some(changes.to_value()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit(repo: &git2::Repository, files: &[(&str, Option<&str>)], message: &str) -> git2::Oid {
        let workdir = repo.workdir().unwrap().to_path_buf();
        let mut index = repo.index().unwrap();
        for (path, content) in files {
            let full = workdir.join(path);
            match content {
                Some(text) => {
                    std::fs::create_dir_all(full.parent().unwrap()).unwrap();
                    std::fs::write(&full, text).unwrap();
                    index.add_path(Path::new(path)).unwrap();
                }
                None => {
                    std::fs::remove_file(&full).unwrap();
                    index.remove_path(Path::new(path)).unwrap();
                }
            }
        }
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let sig = git2::Signature::now("t", "t@example.com").unwrap();
        let parents: Vec<git2::Commit<'_>> =
            repo.head().ok().and_then(|h| h.peel_to_commit().ok()).into_iter().collect();
        let parents: Vec<&git2::Commit<'_>> = parents.iter().collect();
        repo.commit(Some("HEAD"), &sig, &sig, message, &tree, &parents).unwrap()
    }

    /// A base commit, a commit on the base branch after the fork, and a head branch.
    fn fixture() -> (tempfile::TempDir, git2::Oid, git2::Oid, git2::Oid) {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let fork = commit(
            &repo,
            &[("src/app.py", Some("print(1)\n")), ("src/util.py", Some("x = 1\n")), ("README", Some("hi\n"))],
            "base",
        );
        // The head side: one edit, one new file, one deletion.
        let head = commit(
            &repo,
            &[("src/app.py", Some("print(2)\n")), ("docs/new.md", Some("new\n")), ("README", None)],
            "head",
        );
        // The base moves on after the fork: not part of BASE...HEAD.
        let branch = repo.branch("main", &repo.find_commit(fork).unwrap(), true).unwrap();
        repo.set_head(branch.get().name().unwrap()).unwrap();
        repo.checkout_head(Some(git2::build::CheckoutBuilder::new().force())).unwrap();
        let base = commit(&repo, &[("src/util.py", Some("x = 2\n"))], "base moves");
        (dir, fork, base, head)
    }

    #[test]
    fn changed_files_are_those_of_the_three_dot_diff() {
        let (dir, fork, base, head) = fixture();
        let source = Source { number: Some(7), base: base.to_string(), head: head.to_string() };
        let changes = compute(dir.path(), &source).unwrap();
        assert_eq!(changes.changed_files, ["docs/new.md", "src/app.py"]);
        assert_eq!(changes.deleted_files, ["README"]);
        assert_eq!(changes.merge_base, fork.to_string());
        assert_eq!(changes.number, Some(7));
        assert!(changes.diff.contains("+print(2)"), "{}", changes.diff);
        assert!(!changes.diff.contains("x = 2"), "the base's own change is not in the diff");
        assert!(changes.diffs["src/app.py"].contains("-print(1)"));
        assert!(changes.diffs["README"].contains("-hi"));
        assert!(!changes.diff_truncated);
        let value = changes.to_value();
        assert_eq!(value["changed_files"], json!(["docs/new.md", "src/app.py"]));
    }

    #[test]
    fn patches_are_whole_and_leave_deleted_files_out() {
        let (dir, _, base, head) = fixture();
        let source = Source { number: None, base: base.to_string(), head: head.to_string() };
        let patches = patches(dir.path(), &source).unwrap();
        assert_eq!(patches.keys().collect::<Vec<_>>(), ["docs/new.md", "src/app.py"]);
        assert!(patches["src/app.py"].contains("@@ -1 +1 @@\n-print(1)\n+print(2)"), "{}", patches["src/app.py"]);
        assert!(!patches.values().any(|p| p.contains("x = 2")), "the base's own change is not in a patch");
    }

    #[test]
    fn a_branch_name_works_as_diff_base() {
        let (dir, _, _, head) = fixture();
        let source = Source { number: None, base: "main".into(), head: head.to_string() };
        assert_eq!(compute(dir.path(), &source).unwrap().changed_files, ["docs/new.md", "src/app.py"]);
    }

    #[test]
    fn a_missing_base_says_to_fetch_the_history() {
        let (dir, _, _, head) = fixture();
        let source =
            Source { number: None, base: "0123456789012345678901234567890123456789".into(), head: head.to_string() };
        let err = compute(dir.path(), &source).unwrap_err().to_string();
        assert!(err.contains("fetch-depth: 0"), "{err}");
    }

    #[test]
    fn long_diffs_are_cut_on_a_line_and_say_so() {
        let dir = tempfile::tempdir().unwrap();
        let repo = git2::Repository::init(dir.path()).unwrap();
        let base = commit(&repo, &[("keep.txt", Some("k\n"))], "base");
        let big: String = (0..40_000).map(|i| format!("line {i}\n")).collect();
        let head = commit(&repo, &[("big.txt", Some(&big)), ("small.txt", Some("s\n"))], "head");
        let source = Source { number: None, base: base.to_string(), head: head.to_string() };
        let changes = compute(dir.path(), &source).unwrap();
        assert!(changes.diff_truncated);
        assert!(changes.diff.len() <= MAX_DIFF + 200);
        assert!(changes.diff.contains("for the rest"));
        let one = &changes.diffs["big.txt"];
        assert!(one.len() <= MAX_FILE_DIFF + 200 && one.contains("git diff"), "{}", one.len());
        assert_eq!(changes.diffs["small.txt"].lines().last(), Some("+s"));
        assert_eq!(changes.changed_files, ["big.txt", "small.txt"]);
    }

    #[test]
    fn the_event_or_the_flag_gives_the_source() {
        let dir = tempfile::tempdir().unwrap();
        let event = dir.path().join("event.json");
        std::fs::write(&event, r#"{"pull_request":{"number":5,"base":{"sha":"b1"},"head":{"sha":"h1"}}}"#).unwrap();
        let pr = Source::find(None, "HEAD", Some("pull_request"), Some(&event)).unwrap();
        assert_eq!(pr, Some(Source { number: Some(5), base: "b1".into(), head: "h1".into() }));
        let flag = Source::find(Some("main"), "HEAD", Some("pull_request_target"), Some(&event)).unwrap();
        assert_eq!(flag, Some(Source { number: Some(5), base: "main".into(), head: "h1".into() }));
        assert_eq!(Source::find(None, "HEAD", Some("push"), Some(&event)).unwrap(), None);
        let local = Source::find(Some("v1"), "main", None, None).unwrap();
        assert_eq!(local, Some(Source { number: None, base: "v1".into(), head: "main".into() }));
        std::fs::write(&event, r#"{"action":"opened"}"#).unwrap();
        let err = Source::find(None, "HEAD", Some("pull_request"), Some(&event)).unwrap_err().to_string();
        assert!(err.contains("--diff-base"), "{err}");
    }
}
