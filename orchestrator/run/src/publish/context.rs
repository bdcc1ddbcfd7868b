//! Where publishing writes to, read from the GitHub Actions environment: the API base
//! (`GITHUB_API_URL`), the repository (`GITHUB_REPOSITORY`), the event
//! (`GITHUB_EVENT_NAME`, the payload at `GITHUB_EVENT_PATH`), the commit (`GITHUB_SHA`,
//! `GITHUB_REF`) and the token (`ORCH_GITHUB_TOKEN`, else `GITHUB_TOKEN`). The token
//! never leaves this process: agents' sandboxes get an allowlisted environment, and the
//! token's `Debug` is redacted.

use std::fmt;

use serde_json::Value;

/// A GitHub token. Its `Debug` and `Display` never show it.
#[derive(Clone)]
pub struct Token(String);

impl Token {
    pub fn new(value: String) -> Token {
        Token(value)
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(***)")
    }
}

/// The GitHub side of a run.
#[derive(Debug, Clone, Default)]
pub struct GitHubContext {
    /// Without a trailing slash.
    pub api_url: String,
    /// `owner/name`.
    pub repository: Option<String>,
    pub event_name: Option<String>,
    /// The event payload (`Null` when there is none).
    pub event: Value,
    /// Where the payload was read from (`GITHUB_EVENT_PATH`).
    pub event_path: Option<std::path::PathBuf>,
    pub sha: Option<String>,
    pub git_ref: Option<String>,
    pub token: Option<Token>,
    /// `GITHUB_ACTIONS=true`.
    pub actions: bool,
}

impl GitHubContext {
    /// Reads the process environment.
    pub fn from_env() -> GitHubContext {
        let var = |k: &str| std::env::var(k).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
        let event_path = var("GITHUB_EVENT_PATH").map(std::path::PathBuf::from);
        let event = event_path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or(Value::Null);
        GitHubContext {
            api_url: var("GITHUB_API_URL")
                .unwrap_or_else(|| "https://api.github.com".to_string())
                .trim_end_matches('/')
                .to_string(),
            repository: var("GITHUB_REPOSITORY"),
            event_name: var("GITHUB_EVENT_NAME"),
            event,
            event_path,
            sha: var("GITHUB_SHA"),
            git_ref: var("GITHUB_REF"),
            // The coordinator took the tokens out of its environment at start-up.
            token: crate::secrets::var("ORCH_GITHUB_TOKEN")
                .or_else(|| crate::secrets::var("GITHUB_TOKEN"))
                .map(Token::new),
            actions: var("GITHUB_ACTIONS").as_deref() == Some("true"),
        }
    }

    /// The pull request the event is about.
    pub fn pull_number(&self) -> Option<u64> {
        if let Some(n) = self.event["pull_request"]["number"].as_u64() {
            return Some(n);
        }
        // A comment on a pull request arrives as an issue event.
        let issue = &self.event["issue"];
        if issue["pull_request"].is_object() { issue["number"].as_u64() } else { None }
    }

    /// The issue or pull request a comment goes to.
    pub fn thread_number(&self) -> Option<u64> {
        self.pull_number().or_else(|| self.event["issue"]["number"].as_u64())
    }

    /// The commit checks and uploads are about: the pull request's head, else `GITHUB_SHA`.
    pub fn head_sha(&self) -> Option<String> {
        self.event["pull_request"]["head"]["sha"].as_str().map(str::to_string).or_else(|| self.sha.clone())
    }

    /// The ref a SARIF upload names.
    pub fn sarif_ref(&self) -> Option<String> {
        match self.pull_number() {
            Some(n) if self.event["pull_request"].is_object() => Some(format!("refs/pull/{n}/head")),
            _ => self.git_ref.clone(),
        }
    }

    /// A `pull_request` run from a fork: its token cannot write.
    pub fn is_fork_pull_request(&self) -> bool {
        if self.event_name.as_deref() != Some("pull_request") {
            return false;
        }
        let head = self.event["pull_request"]["head"]["repo"]["full_name"].as_str();
        let base = self.event["pull_request"]["base"]["repo"]["full_name"].as_str();
        matches!((head, base), (Some(h), Some(b)) if h != b)
    }

    /// The branch a pull request is opened against when `base` is not set.
    pub fn default_branch(&self) -> Option<String> {
        self.event["repository"]["default_branch"].as_str().map(str::to_string)
    }
}
