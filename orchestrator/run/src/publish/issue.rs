//! `publish.issue`: one open issue per workflow, found again by its hidden marker and
//! updated (title and body) on a re-run.

use orch_workflows::publish::IssueOutput;
use reqwest::Method;
use serde_json::json;

use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

pub(crate) async fn publish(job: &Job<'_>, cfg: &IssueOutput) -> Result<Outcome, OutputError> {
    let marker = job.marker("issue");
    let title: String = sanitize::text(&job.render(Some(&cfg.title), "")?).chars().take(256).collect();
    let text = job.render(cfg.body.as_deref(), &job.inputs.answer)?;
    let body = sanitize::cap(sanitize::text(&text).trim(), &marker, MAX_BODY);
    let mut query = String::from("?state=open");
    if let Some(first) = cfg.labels.first() {
        query.push_str(&format!("&labels={}", encode(first)));
    }
    let open = job.client.list(&format!("/repos/{}/issues{query}", job.repo)).await?;
    let found = open
        .iter()
        .filter(|i| i.get("pull_request").is_none())
        .find(|i| i["body"].as_str().is_some_and(|b| b.contains(&marker)))
        .and_then(|i| i["number"].as_u64());
    if let Some(number) = found {
        let answer = job
            .client
            .write(
                "issue",
                Method::PATCH,
                &format!("/repos/{}/issues/{number}", job.repo),
                json!({"title": title, "body": body}),
            )
            .await?;
        if !cfg.labels.is_empty() {
            let path = format!("/repos/{}/issues/{number}/labels", job.repo);
            job.client.write("issue", Method::POST, &path, json!({"labels": cfg.labels})).await?;
        }
        return Ok(Outcome::new("issue", OutcomeState::Updated, format!("updated issue #{number}"))
            .with_url(answer["html_url"].as_str()));
    }
    let answer = job
        .client
        .write(
            "issue",
            Method::POST,
            &format!("/repos/{}/issues", job.repo),
            json!({"title": title, "body": body, "labels": cfg.labels}),
        )
        .await?;
    let number = answer["number"].as_u64().map(|n| format!(" #{n}")).unwrap_or_default();
    Ok(Outcome::new("issue", OutcomeState::Created, format!("opened issue{number}"))
        .with_url(answer["html_url"].as_str()))
}

/// Percent-encodes a query value.
pub(crate) fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}
