//! `publish.pull_request`: push the run's result to a stable branch of the user's
//! repository's `origin` and open, or update, the one pull request for that branch.
//!
//! The push carries a lease: the branch on `origin` must still be at the commit orch
//! pushed last time (recorded in the pull request's hidden marker), or absent when there
//! is no pull request yet, so a branch someone else moved is never overwritten. It uses
//! the credentials `actions/checkout` left in the repository's configuration, or else
//! the token as an extra HTTP header passed through the environment of that one command.

use std::path::Path;

use base64::Engine as _;
use orch_workflows::publish::{PullRequestOutput, default_branch};
use reqwest::Method;
use serde_json::json;
use tokio::process::Command;

use super::issue::encode;
use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

pub(crate) async fn publish(job: &Job<'_>, cfg: &PullRequestOutput) -> Result<Outcome, OutputError> {
    let Some(commit) = job.inputs.commit.as_deref() else {
        let why = job.inputs.no_commit_reason.clone().unwrap_or_else(|| "the run changed nothing".to_string());
        return Ok(Outcome::new("pull_request", OutcomeState::Skipped, why));
    };
    let branch = cfg.branch.clone().unwrap_or_else(|| default_branch(&job.inputs.workflow));
    let owner = job.repo.split('/').next().unwrap_or_default();
    let prefix = job.marker("pull-request:").trim_end_matches(" -->").to_string();
    let open = job
        .client
        .list(&format!("/repos/{}/pulls?state=open&head={}", job.repo, encode(&format!("{owner}:{branch}"))))
        .await?;
    let existing = open.first();
    let leased = match existing {
        Some(pr) => {
            let body = pr["body"].as_str().unwrap_or("");
            match pushed_by_orch(body, &prefix) {
                Some(sha) => Some(sha),
                None => {
                    return Err(OutputError::msg(format!(
                        "the open pull request #{} for `{branch}` was not opened by this workflow; orch will not push to \
                         its branch: close it, or set `publish.pull_request.branch` to another branch",
                        pr["number"]
                    )));
                }
            }
        }
        None => None,
    };
    let repo = job.inputs.repo.as_path();
    let remote = remote_head(repo, &branch).await;
    match (&leased, &remote) {
        (None, Ok(Some(sha))) => {
            return Err(OutputError::msg(format!(
                "the branch `{branch}` already exists on origin (at {sha}) and no open pull request of this workflow owns \
                 it; delete the branch or set `publish.pull_request.branch` to another name"
            )));
        }
        (_, Err(e)) if !job.client.is_dry_run() => return Err(OutputError::msg(e.clone())),
        _ => {}
    }
    let expected = leased.clone().unwrap_or_default();
    let already = remote.as_ref().ok().and_then(|r| r.as_deref()) == Some(commit);
    if !already {
        let lease = format!("--force-with-lease=refs/heads/{branch}:{expected}");
        let refspec = format!("{commit}:refs/heads/{branch}");
        if job.client.is_dry_run() {
            job.client.plan(
                "pull_request",
                "GIT",
                format!("git push {lease} origin {refspec}"),
                json!({"repository": repo}),
            );
        } else {
            push(repo, &lease, &refspec, job.ctx.token.as_ref()).await?;
        }
    }
    let title = sanitize::text(&job.render(cfg.title.as_deref(), &format!("orch: {}", job.inputs.workflow))?);
    let title: String = title.lines().next().unwrap_or("orch").chars().take(256).collect();
    let text = job.render(cfg.body.as_deref(), &job.inputs.answer)?;
    let marker = format!("{prefix}{commit} -->");
    let body = sanitize::cap(sanitize::text(&text).trim(), &marker, MAX_BODY);
    let (number, url, state) = match existing {
        Some(pr) => {
            let number = pr["number"].as_u64().unwrap_or_default();
            let path = format!("/repos/{}/pulls/{number}", job.repo);
            let answer =
                job.client.write("pull_request", Method::PATCH, &path, json!({"title": title, "body": body})).await?;
            (
                Some(number),
                answer["html_url"].as_str().map(str::to_string).or(pr["html_url"].as_str().map(str::to_string)),
                OutcomeState::Updated,
            )
        }
        None => {
            let base = cfg.base.clone().or_else(|| job.ctx.default_branch()).unwrap_or(current_branch(repo).await);
            let request = json!({"title": title, "head": branch, "base": base, "body": body, "draft": cfg.draft});
            let answer =
                job.client.write("pull_request", Method::POST, &format!("/repos/{}/pulls", job.repo), request).await?;
            (answer["number"].as_u64(), answer["html_url"].as_str().map(str::to_string), OutcomeState::Created)
        }
    };
    if !cfg.labels.is_empty() {
        let number = number.map(|n| n.to_string()).unwrap_or_else(|| "{number}".to_string());
        let path = format!("/repos/{}/issues/{number}/labels", job.repo);
        job.client.write("pull_request", Method::POST, &path, json!({"labels": cfg.labels})).await?;
    }
    let pushed = if already { "unchanged" } else { "pushed" };
    let detail = format!(
        "`{branch}` {pushed} at {commit}{}",
        number.map(|n| format!(", pull request #{n}")).unwrap_or_default()
    );
    Ok(Outcome::new("pull_request", state, detail).with_url(url.as_deref()))
}

/// The commit recorded in an orch pull request's marker.
fn pushed_by_orch(body: &str, prefix: &str) -> Option<String> {
    let rest = &body[body.find(prefix)? + prefix.len()..];
    let sha = rest.split_whitespace().next()?;
    (sha.len() >= 7 && sha.chars().all(|c| c.is_ascii_hexdigit())).then(|| sha.to_string())
}

fn git(repo: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(repo).env("GIT_TERMINAL_PROMPT", "0").kill_on_drop(true);
    cmd
}

/// Where `branch` is on `origin`, if it exists.
async fn remote_head(repo: &Path, branch: &str) -> Result<Option<String>, String> {
    let out = git(repo)
        .args(["ls-remote", "--heads", "origin", &format!("refs/heads/{branch}")])
        .output()
        .await
        .map_err(|e| format!("cannot run git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cannot read `origin` of {}: {}",
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).split_whitespace().next().map(str::to_string))
}

async fn current_branch(repo: &Path) -> String {
    match git(repo).args(["symbolic-ref", "--short", "HEAD"]).output().await {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_string(),
        _ => "main".to_string(),
    }
}

async fn push(repo: &Path, lease: &str, refspec: &str, token: Option<&super::Token>) -> Result<(), OutputError> {
    let mut cmd = git(repo);
    cmd.args(["push", "--porcelain", lease, "origin", refspec]);
    if let Some(token) = token
        && needs_header(repo).await
    {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("x-access-token:{}", token.expose()));
        cmd.env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "http.extraheader")
            .env("GIT_CONFIG_VALUE_0", format!("AUTHORIZATION: basic {basic}"));
    }
    let out = cmd.output().await.map_err(|e| OutputError::msg(format!("cannot run git push: {e}")))?;
    if out.status.success() {
        return Ok(());
    }
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let why = if text.contains("stale info") || text.contains("rejected") {
        "the branch on origin moved since orch last pushed it (someone else pushed to it); orch does not overwrite it"
    } else {
        "check that the job has `contents: write` and that `origin` is reachable"
    };
    Err(OutputError::msg(format!("git push to origin failed: {}; {why}", last_lines(&text))))
}

/// Whether the push needs the token as a header: an HTTPS origin with no extra header
/// configured (actions/checkout leaves one unless `persist-credentials: false`).
async fn needs_header(repo: &Path) -> bool {
    let url = git(repo).args(["remote", "get-url", "origin"]).output().await;
    let https = url.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim().starts_with("https://"));
    let configured = git(repo).args(["config", "--get-regexp", r"^http\..*extraheader$"]).output().await;
    https && !configured.is_ok_and(|o| o.status.success() && !o.stdout.is_empty())
}

fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(3)..].join(" / ")
}
