//! What the fake GitHub server holds: tokens, pull requests (and their files), issues,
//! comments, reviews, check runs, SARIF uploads, the request log and injected faults.
//! Issues and pull requests share one number sequence per repository, as on GitHub.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;
use serde_json::Value;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and write (a workflow token with the permissions granted).
    Write,
    /// Read only (a `pull_request` run from a fork): every write is a 403.
    ReadOnly,
}

/// One request as received.
#[derive(Debug, Clone, Serialize)]
pub struct GhRequest {
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query string, without `?` (empty when none).
    pub query: String,
    /// The `Authorization` header, as sent.
    pub authorization: Option<String>,
    /// Every header, lowercase names.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON (`Null` when empty or not JSON).
    pub body: Value,
    /// The HTTP status the server answered.
    pub status: u16,
    /// When the request arrived and when its answer was ready (benchmarks time the
    /// span of a run's requests with them).
    #[serde(skip)]
    pub received: std::time::Instant,
    #[serde(skip)]
    pub answered: std::time::Instant,
}

/// An answer forced on the next request matching `method` and a path ending in
/// `path_suffix` (`retry_after` sets the header of that name).
#[derive(Debug, Clone)]
pub struct Fault {
    pub method: String,
    pub path_suffix: String,
    pub status: u16,
    pub retry_after: Option<String>,
    /// How many matching requests get it.
    pub times: u32,
}

impl Fault {
    pub fn new(method: &str, path_suffix: &str, status: u16) -> Fault {
        Fault { method: method.to_owned(), path_suffix: path_suffix.to_owned(), status, retry_after: None, times: 1 }
    }

    pub fn retry_after(mut self, seconds: &str) -> Fault {
        self.retry_after = Some(seconds.to_owned());
        self
    }

    pub fn times(mut self, times: u32) -> Fault {
        self.times = times;
        self
    }
}

/// A pull request to create with [`FakeGitHub::add_pull`](super::FakeGitHub::add_pull).
#[derive(Debug, Clone)]
pub struct PullSpec {
    pub number: u64,
    pub head_sha: String,
    pub head_ref: String,
    pub base_ref: String,
    /// `owner/name` of the head repository; a fork when it differs from the base.
    pub head_repo: Option<String>,
    pub files: Vec<PullFile>,
}

impl PullSpec {
    pub fn new(number: u64, head_sha: &str) -> PullSpec {
        PullSpec {
            number,
            head_sha: head_sha.to_owned(),
            head_ref: "feature".to_owned(),
            base_ref: "main".to_owned(),
            head_repo: None,
            files: Vec::new(),
        }
    }

    /// Adds a changed file with its unified-diff patch (hunks only, as GitHub gives it).
    pub fn file(mut self, filename: &str, patch: &str) -> PullSpec {
        self.files.push(PullFile {
            filename: filename.to_owned(),
            status: "modified".to_owned(),
            patch: Some(patch.to_owned()),
        });
        self
    }

    pub fn from_fork(mut self, head_repo: &str) -> PullSpec {
        self.head_repo = Some(head_repo.to_owned());
        self
    }
}

/// A file of a pull request.
#[derive(Debug, Clone, Serialize)]
pub struct PullFile {
    pub filename: String,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Pull {
    pub repo: String,
    pub number: u64,
    pub title: String,
    pub body: String,
    pub state: String,
    pub draft: bool,
    pub head_ref: String,
    pub head_sha: String,
    pub head_repo: String,
    pub base_ref: String,
    pub labels: Vec<String>,
    pub files: Vec<PullFile>,
    /// How many times it was edited after it was opened.
    pub updates: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Issue {
    pub repo: String,
    pub number: u64,
    pub title: String,
    pub body: String,
    pub state: String,
    pub labels: Vec<String>,
    pub updates: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comment {
    pub repo: String,
    pub id: u64,
    pub issue: u64,
    pub body: String,
    pub updates: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Review {
    pub repo: String,
    pub id: u64,
    pub pull: u64,
    pub commit_id: String,
    pub event: String,
    pub body: String,
    /// The inline comments as posted (`path`, `line`, `side`, `start_line`, `body`).
    pub comments: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CheckRun {
    pub repo: String,
    pub id: u64,
    pub name: String,
    pub head_sha: String,
    /// The integrator's own reference for the check.
    pub external_id: Option<String>,
    pub status: String,
    pub conclusion: Option<String>,
    pub title: String,
    pub summary: String,
    pub annotations: Vec<Value>,
    /// How many requests carried annotations.
    pub annotation_requests: u32,
    /// How many times it was updated after it was created.
    pub updates: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct SarifUpload {
    pub repo: String,
    pub id: String,
    pub commit_sha: String,
    pub git_ref: String,
    /// The tool (`runs[0].tool.driver.name`).
    pub tool: String,
    /// The category: `runs[0].automationDetails.id` up to its last `/` (empty when none).
    pub category: String,
    /// The SARIF document, un-gzipped and parsed.
    pub sarif: Value,
}

#[derive(Default)]
pub(crate) struct Data {
    pub tokens: HashMap<String, Access>,
    pub pulls: Vec<Pull>,
    pub issues: Vec<Issue>,
    pub comments: Vec<Comment>,
    pub reviews: Vec<Review>,
    pub check_runs: Vec<CheckRun>,
    pub sarifs: Vec<SarifUpload>,
    /// The last issue/PR number used, per repository.
    pub numbers: HashMap<String, u64>,
    /// The last id used for comments, reviews, check runs.
    pub ids: u64,
}

impl Data {
    pub fn next_id(&mut self) -> u64 {
        self.ids += 1;
        self.ids
    }

    pub fn next_number(&mut self, repo: &str) -> u64 {
        let n = self.numbers.entry(repo.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    pub fn add_pull(&mut self, repo: &str, spec: PullSpec) {
        let n = self.numbers.entry(repo.to_owned()).or_insert(0);
        *n = (*n).max(spec.number);
        self.pulls.push(Pull {
            repo: repo.to_owned(),
            number: spec.number,
            title: format!("Pull request {}", spec.number),
            body: String::new(),
            state: "open".to_owned(),
            draft: false,
            head_ref: spec.head_ref,
            head_sha: spec.head_sha,
            head_repo: spec.head_repo.unwrap_or_else(|| repo.to_owned()),
            base_ref: spec.base_ref,
            labels: Vec::new(),
            files: spec.files,
            updates: 0,
        });
    }

    pub fn pull_mut(&mut self, repo: &str, number: u64) -> Option<&mut Pull> {
        self.pulls.iter_mut().find(|p| p.repo == repo && p.number == number)
    }

    pub fn issue_mut(&mut self, repo: &str, number: u64) -> Option<&mut Issue> {
        self.issues.iter_mut().find(|i| i.repo == repo && i.number == number)
    }

    /// Whether `number` is an issue or a pull request of `repo`.
    pub fn has_number(&self, repo: &str, number: u64) -> bool {
        self.pulls.iter().any(|p| p.repo == repo && p.number == number)
            || self.issues.iter().any(|i| i.repo == repo && i.number == number)
    }
}
