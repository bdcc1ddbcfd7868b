//! Publishing a run to GitHub, from the coordinator, after integration: one module per
//! output (`review`, `comment`, `pull_request`, `issue`, `check_run`, `sarif`), a small
//! client (`client`), the environment (`context`), model-text sanitizing (`sanitize`)
//! and the findings (`findings`). Every output is found again by a hidden marker and
//! updated on a re-run. `--publish dry-run` records the requests in `publish.json`
//! instead of sending them. A failed output names its HTTP status and the permission
//! the job needs; the others still run, and no agent work is touched.

mod check_run;
mod client;
mod comment;
mod context;
mod findings;
mod issue;
mod phase;
mod pull_request;
mod review;
mod sanitize;
mod sarif;

use std::path::{Path, PathBuf};

use orch_workflows::publish::Publish;
use serde::Serialize;
use serde_json::Value;

pub use client::PlannedRequest;
pub use context::{GitHubContext, Token};
pub use findings::Findings;
pub use phase::{left_to_merge, publish_run};

use client::{Client, HttpError};

/// The file a dry run writes into the run directory.
pub const DRY_RUN_FILE: &str = "publish.json";

/// `--publish`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PublishMode {
    On,
    DryRun,
    Off,
}

impl PublishMode {
    /// `on` under GitHub Actions with a token, `dry-run` otherwise.
    pub fn default_for(ctx: &GitHubContext) -> PublishMode {
        if ctx.actions && ctx.token.is_some() { PublishMode::On } else { PublishMode::DryRun }
    }

    pub fn parse(s: &str) -> Option<PublishMode> {
        match s {
            "on" => Some(PublishMode::On),
            "dry-run" => Some(PublishMode::DryRun),
            "off" => Some(PublishMode::Off),
            _ => None,
        }
    }
}

/// What a run hands to publishing.
#[derive(Debug, Clone)]
pub struct PublishInputs {
    pub workflow: String,
    pub publish: Publish,
    /// The run's answer (synthesis, or the only agent's final text).
    pub answer: String,
    /// What templates see: `run`, `workflow`, `inputs`, `answer`, `agents`.
    pub template_context: Value,
    /// Every agent's structured output, in order.
    pub outputs: Vec<Value>,
    /// Whether the run failed (a check run's conclusion).
    pub run_failed: bool,
    /// The user's repository (branches are pushed from it to its `origin`).
    pub repo: PathBuf,
    /// The commit a pull request would carry, in `repo`; `None` when there is no
    /// single result to push.
    pub commit: Option<String>,
    /// Why there is no commit, when there is none.
    pub no_commit_reason: Option<String>,
    pub run_dir: PathBuf,
    /// `--diff-base`: the base of the local diff a review without a token lays its
    /// findings out against (else the event's base).
    pub diff_base: Option<String>,
}

/// How one output went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeState {
    Created,
    Updated,
    /// Nothing to do, or impossible here (said in `detail`).
    Skipped,
    /// Dry run: the requests are in `publish.json`.
    Planned,
    Failed,
}

/// One output's result, as the report shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub output: String,
    pub state: OutcomeState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub permission: Option<String>,
}

impl Outcome {
    pub(crate) fn new(output: &str, state: OutcomeState, detail: impl Into<String>) -> Outcome {
        Outcome {
            output: output.to_string(),
            state,
            url: None,
            detail: detail.into(),
            http_status: None,
            permission: None,
        }
    }

    pub(crate) fn with_url(mut self, url: Option<&str>) -> Outcome {
        self.url = url.map(str::to_string);
        self
    }
}

/// What publishing did.
#[derive(Debug, Clone, Serialize)]
pub struct PublishReport {
    pub mode: PublishMode,
    pub outcomes: Vec<Outcome>,
    /// `publish.json`, relative to the run directory, in a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_file: Option<PathBuf>,
    /// Findings that were not findings and were left out.
    #[serde(skip_serializing_if = "crate::run::report::is_zero")]
    pub rejected_findings: usize,
}

impl PublishReport {
    /// Whether an output failed (the run exits 1).
    pub fn failed(&self) -> bool {
        self.outcomes.iter().any(|o| o.state == OutcomeState::Failed)
    }

    /// One line per output, for stderr and `report.md`.
    pub fn lines(&self) -> Vec<String> {
        self.outcomes
            .iter()
            .map(|o| {
                let state = match o.state {
                    OutcomeState::Created => "created",
                    OutcomeState::Updated => "updated",
                    OutcomeState::Skipped => "skipped",
                    OutcomeState::Planned => "planned (dry run)",
                    OutcomeState::Failed => "FAILED",
                };
                let url = o.url.as_deref().map(|u| format!(" {u}")).unwrap_or_default();
                format!("{}: {state}{url}: {}", o.output, o.detail)
            })
            .collect()
    }
}

/// A failed request of one output.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub(crate) struct OutputError {
    pub status: Option<u16>,
    pub message: String,
}

impl From<HttpError> for OutputError {
    fn from(e: HttpError) -> OutputError {
        OutputError { status: e.status, message: e.message }
    }
}

impl OutputError {
    pub(crate) fn msg(message: impl Into<String>) -> OutputError {
        OutputError { status: None, message: message.into() }
    }
}

/// What every output needs.
pub(crate) struct Job<'a> {
    pub client: &'a Client,
    pub ctx: &'a GitHubContext,
    /// `owner/name`.
    pub repo: &'a str,
    pub inputs: &'a PublishInputs,
    pub findings: &'a Findings,
}

impl Job<'_> {
    /// A template (`title`, `body`) rendered, or the fallback.
    pub(crate) fn render(&self, template: Option<&str>, fallback: &str) -> Result<String, OutputError> {
        match template {
            Some(t) => orch_workflows::publish::render_text(t, &self.inputs.template_context)
                .map_err(|e| OutputError::msg(format!("cannot render the template: {e}"))),
            None => Ok(fallback.to_string()),
        }
    }

    /// The marker key of this workflow and an output part (`""` for the sticky comment).
    pub(crate) fn marker(&self, part: &str) -> String {
        if part.is_empty() {
            sanitize::marker(&self.inputs.workflow)
        } else {
            sanitize::marker(&format!("{}:{part}", self.inputs.workflow))
        }
    }
}

/// The permission an output needs in the job's `permissions:`.
pub fn permission_of(output: &str) -> &'static str {
    match output {
        "review" => "pull-requests: write",
        "comment" => "pull-requests: write (issues: write for an issue)",
        "pull_request" => "contents: write and pull-requests: write",
        "issue" => "issues: write",
        "check_run" => "checks: write",
        "sarif" => "security-events: write",
        _ => "write access",
    }
}

/// Publishes every output `publish:` declares, in a fixed order; one failing does not
/// stop the others.
pub async fn publish(inputs: &PublishInputs, mode: PublishMode, ctx: &GitHubContext) -> PublishReport {
    let mut report = PublishReport { mode, outcomes: Vec::new(), requests_file: None, rejected_findings: 0 };
    let declared = declared(&inputs.publish);
    if mode == PublishMode::Off || declared.is_empty() {
        return report;
    }
    let findings = match inputs.publish.findings_template() {
        Some(t) => match Findings::from_template(t, &inputs.template_context) {
            Ok(f) => f,
            Err(e) => {
                report.outcomes.push(failure("review", OutputError::msg(e)));
                Findings::default()
            }
        },
        None => Findings::from_outputs(&inputs.outputs),
    };
    report.rejected_findings = findings.rejected;
    let repo = match (ctx.repository.clone(), mode) {
        (Some(repo), _) => Some(repo),
        // A local dry run still shows what would be sent, to a placeholder repository.
        (None, PublishMode::DryRun) => Some("OWNER/REPO".to_string()),
        (None, _) => None,
    };
    let Some(repo) = repo else {
        for output in declared {
            let detail = "GITHUB_REPOSITORY is not set, so there is no repository to publish to";
            let state = if mode == PublishMode::DryRun { OutcomeState::Skipped } else { OutcomeState::Failed };
            report.outcomes.push(Outcome::new(output, state, detail));
        }
        return report;
    };
    if mode == PublishMode::On && ctx.is_fork_pull_request() {
        for output in declared {
            report.outcomes.push(Outcome::new(
                output,
                OutcomeState::Skipped,
                "this pull request comes from a fork, and GitHub gives such runs a read-only token: nothing can be \
                 published (the run's report has the results)",
            ));
        }
        return report;
    }
    if mode == PublishMode::On && ctx.token.is_none() {
        for output in declared {
            let mut outcome = Outcome::new(
                output,
                OutcomeState::Failed,
                "no token: set GITHUB_TOKEN (or ORCH_GITHUB_TOKEN) for this step, or pass --publish dry-run",
            );
            outcome.permission = Some(permission_of(output).to_string());
            report.outcomes.push(outcome);
        }
        return report;
    }
    let client = match Client::new(&ctx.api_url, ctx.token.clone(), mode == PublishMode::DryRun) {
        Ok(c) => c,
        Err(e) => {
            for output in declared {
                report.outcomes.push(failure(output, e.clone().into()));
            }
            return report;
        }
    };
    let job = Job { client: &client, ctx, repo: &repo, inputs, findings: &findings };
    let p = &inputs.publish;
    let planned = |o: &str, r: Result<Outcome, OutputError>| match r {
        Ok(outcome) if mode == PublishMode::DryRun && outcome.state != OutcomeState::Skipped => {
            Outcome { state: OutcomeState::Planned, ..outcome }
        }
        Ok(outcome) => outcome,
        Err(e) => failure(o, e),
    };
    if let Some(cfg) = &p.pull_request {
        report.outcomes.push(planned("pull_request", pull_request::publish(&job, cfg).await));
    }
    if let Some(cfg) = &p.review {
        report.outcomes.push(planned("review", review::publish(&job, cfg).await));
    }
    if let Some(cfg) = &p.comment {
        report.outcomes.push(planned("comment", comment::publish(&job, cfg).await));
    }
    if let Some(cfg) = &p.issue {
        report.outcomes.push(planned("issue", issue::publish(&job, cfg).await));
    }
    if let Some(cfg) = &p.check_run {
        report.outcomes.push(planned("check_run", check_run::publish(&job, cfg).await));
    }
    if let Some(cfg) = &p.sarif {
        report.outcomes.push(planned("sarif", sarif::publish(&job, cfg).await));
    }
    if mode == PublishMode::DryRun {
        report.requests_file = write_dry_run(&inputs.run_dir, &client, &report);
    }
    report
}

fn declared(p: &Publish) -> Vec<&'static str> {
    let mut out = Vec::new();
    for (name, on) in [
        ("pull_request", p.pull_request.is_some()),
        ("review", p.review.is_some()),
        ("comment", p.comment.is_some()),
        ("issue", p.issue.is_some()),
        ("check_run", p.check_run.is_some()),
        ("sarif", p.sarif.is_some()),
    ] {
        if on {
            out.push(name);
        }
    }
    out
}

fn failure(output: &str, e: OutputError) -> Outcome {
    let permission = permission_of(output);
    let detail = match e.status {
        Some(403) => format!(
            "{}; GitHub refused the write: the job needs `{permission}` in its `permissions:` (a pull request from a \
             fork only ever gets a read-only token)",
            e.message
        ),
        Some(401) => format!("{}; the token was refused: check GITHUB_TOKEN / ORCH_GITHUB_TOKEN", e.message),
        Some(404) => {
            format!("{}; not found: check the repository, the event and that the job has `{permission}`", e.message)
        }
        Some(422) => format!("{}; GitHub could not process the request", e.message),
        _ => e.message,
    };
    let mut outcome = Outcome::new(
        output,
        OutcomeState::Failed,
        match e.status {
            Some(status) => format!("HTTP {status}: {detail}"),
            None => detail,
        },
    );
    outcome.http_status = e.status;
    outcome.permission = Some(permission.to_string());
    outcome
}

fn write_dry_run(run_dir: &Path, client: &Client, report: &PublishReport) -> Option<PathBuf> {
    let doc = serde_json::json!({
        "mode": "dry-run",
        "reads": if client.can_read() { "live (GET requests were sent with the token)" } else { "none (no token): every output is shown as new" },
        "requests": client.planned(),
        "outcomes": report.outcomes,
    });
    let text = serde_json::to_string_pretty(&doc).ok()?;
    match std::fs::write(run_dir.join(DRY_RUN_FILE), text + "\n") {
        Ok(()) => Some(PathBuf::from(DRY_RUN_FILE)),
        Err(e) => {
            tracing::warn!("cannot write {DRY_RUN_FILE}: {e}");
            None
        }
    }
}

/// The "Publishing" section of `report.md`.
pub fn markdown(published: &Value) -> String {
    let mut out = String::from("\n## Publishing\n\n");
    let mode = published["mode"].as_str().unwrap_or("on");
    if let Some(file) = published["requests_file"].as_str() {
        out.push_str(&format!("Dry run: nothing was sent; the requests are in `{file}`.\n\n"));
    } else {
        out.push_str(&format!("Mode: {mode}.\n\n"));
    }
    for o in published["outcomes"].as_array().into_iter().flatten() {
        let url = o["url"].as_str().map(|u| format!(" ({u})")).unwrap_or_default();
        out.push_str(&format!(
            "- `{}`: {}{url}: {}\n",
            o["output"].as_str().unwrap_or(""),
            o["state"].as_str().unwrap_or(""),
            o["detail"].as_str().unwrap_or("")
        ));
    }
    out
}
