//! `publish.comment`: the answer as one comment on the pull request or issue the event
//! is about. A sticky comment is found again by its hidden marker
//! (`<!-- orch:<workflow> -->`) and edited.

use orch_workflows::publish::CommentOutput;
use reqwest::Method;
use serde_json::json;

use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

pub(crate) async fn publish(job: &Job<'_>, cfg: &CommentOutput) -> Result<Outcome, OutputError> {
    let Some(number) = job.ctx.thread_number() else {
        return Ok(Outcome::new("comment", OutcomeState::Skipped, "the event is not about a pull request or an issue"));
    };
    let marker = job.marker("");
    let text = job.render(cfg.body.as_deref(), &job.inputs.answer)?;
    let body = sanitize::cap(sanitize::text(&text).trim(), &marker, MAX_BODY);
    let path = format!("/repos/{}/issues/{number}/comments", job.repo);
    if cfg.sticky {
        let existing = job.client.list(&path).await?;
        if let Some(id) = existing
            .iter()
            .find(|c| c["body"].as_str().is_some_and(|b| b.contains(&marker)))
            .and_then(|c| c["id"].as_u64())
        {
            let answer = job
                .client
                .write(
                    "comment",
                    Method::PATCH,
                    &format!("/repos/{}/issues/comments/{id}", job.repo),
                    json!({"body": body}),
                )
                .await?;
            return Ok(Outcome::new("comment", OutcomeState::Updated, format!("edited the comment on #{number}"))
                .with_url(answer["html_url"].as_str()));
        }
    }
    let answer = job.client.write("comment", Method::POST, &path, json!({"body": body})).await?;
    Ok(Outcome::new("comment", OutcomeState::Created, format!("commented on #{number}"))
        .with_url(answer["html_url"].as_str()))
}
