//! `publish.check_run`: a completed check on the head commit with one annotation per
//! finding, sent 50 per request as GitHub requires (the first batch with the check,
//! the rest as updates).

use orch_workflows::publish::{CheckRunOutput, Severity};
use reqwest::Method;
use serde_json::{Value, json};

use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

/// GitHub's limit on annotations per request.
pub const BATCH: usize = 50;

pub(crate) async fn publish(job: &Job<'_>, cfg: &CheckRunOutput) -> Result<Outcome, OutputError> {
    let Some(head) = job.ctx.head_sha() else {
        return Ok(Outcome::new("check_run", OutcomeState::Skipped, "no commit to check: GITHUB_SHA is not set"));
    };
    let findings = &job.findings.items;
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    let conclusion = if job.inputs.run_failed || errors > 0 { "failure" } else { "success" };
    let annotations: Vec<Value> = findings.iter().take(cfg.max_annotations as usize).map(annotation).collect();
    let left_out = findings.len() - annotations.len();
    let title = format!("{} finding(s), {errors} error(s)", findings.len());
    let mut summary = sanitize::text(&job.inputs.answer);
    if left_out > 0 {
        summary.push_str(&format!("\n\n{left_out} more finding(s) past `max_annotations` are not annotated."));
    }
    let summary = sanitize::cap(summary.trim(), "", MAX_BODY - 1);
    let mut batches = annotations.chunks(BATCH);
    let first = batches.next().unwrap_or(&[]);
    let output = |batch: &[Value]| json!({"title": title, "summary": summary, "annotations": batch});
    let body = json!({"name": cfg.name, "head_sha": head, "status": "completed", "conclusion": conclusion, "output": output(first)});
    let created = job.client.write("check_run", Method::POST, &format!("/repos/{}/check-runs", job.repo), body).await?;
    let id = created["id"].as_u64().map(|id| id.to_string()).unwrap_or_else(|| "{check_run_id}".to_string());
    let mut requests = 1;
    for batch in batches {
        let path = format!("/repos/{}/check-runs/{id}", job.repo);
        job.client.write("check_run", Method::PATCH, &path, json!({"output": output(batch)})).await?;
        requests += 1;
    }
    let detail =
        format!("`{}` {conclusion} on {head}: {} annotation(s) in {requests} request(s)", cfg.name, annotations.len());
    Ok(Outcome::new("check_run", OutcomeState::Created, detail).with_url(created["html_url"].as_str()))
}

fn annotation(f: &orch_workflows::publish::Finding) -> Value {
    let level = match f.severity {
        Severity::Error => "failure",
        Severity::Warning => "warning",
        Severity::Note => "notice",
    };
    let message: String = f.message.chars().take(64 * 1024 - 1).collect();
    let mut a = json!({
        "path": f.path,
        "start_line": f.line,
        "end_line": f.end_line.unwrap_or(f.line).max(f.line),
        "annotation_level": level,
        "message": message,
    });
    if let Some(s) = &f.suggestion {
        a["raw_details"] = json!(s.chars().take(64 * 1024 - 1).collect::<String>());
    }
    a
}
