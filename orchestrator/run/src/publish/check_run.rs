//! `publish.check_run`: a completed check on the head commit with one annotation per
//! finding, sent 50 per request as GitHub requires (the first batch with the check,
//! the rest as updates). The check carries an `external_id` naming the workflow: a
//! re-run on the same commit finds the check by name and `external_id` and updates it
//! instead of adding a second one. GitHub appends annotations on every update and
//! cannot delete them, so a re-run sends only the annotations the check lacks, and the
//! summary says how many earlier ones no longer apply.

use std::collections::HashSet;

use orch_workflows::publish::{CheckRunOutput, Severity};
use reqwest::Method;
use serde_json::{Value, json};

use super::issue::encode;
use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

/// GitHub's limit on annotations per request.
pub const BATCH: usize = 50;

pub(crate) async fn publish(job: &Job<'_>, cfg: &CheckRunOutput) -> Result<Outcome, OutputError> {
    let Some(head) = job.ctx.head_sha() else {
        return Ok(Outcome::new("check_run", OutcomeState::Skipped, "no commit to check: GITHUB_SHA is not set"));
    };
    let external_id = format!("orch:{}", job.inputs.workflow);
    let existing = find(job, &cfg.name, &head, &external_id).await?;
    let findings = &job.findings.items;
    let errors = findings.iter().filter(|f| f.severity == Severity::Error).count();
    let conclusion = if job.inputs.run_failed || errors > 0 { "failure" } else { "success" };
    let annotations: Vec<Value> = findings.iter().take(cfg.max_annotations as usize).map(annotation).collect();
    let left_out = findings.len() - annotations.len();
    // On a re-run: what the check already has stays; only the missing ones are sent.
    let (posted, stale) = match &existing {
        Some(id) => {
            let before = job.client.list(&format!("/repos/{}/check-runs/{id}/annotations", job.repo)).await?;
            let before: HashSet<String> = before.iter().map(key).collect();
            let now: HashSet<String> = annotations.iter().map(key).collect();
            let stale = before.difference(&now).count();
            (annotations.iter().filter(|a| !before.contains(&key(a))).cloned().collect::<Vec<_>>(), stale)
        }
        None => (annotations.clone(), 0),
    };
    let title = format!("{} finding(s), {errors} error(s)", findings.len());
    let mut summary = sanitize::text(&job.inputs.answer);
    if left_out > 0 {
        summary.push_str(&format!("\n\n{left_out} more finding(s) past `max_annotations` are not annotated."));
    }
    if stale > 0 {
        summary.push_str(&format!(
            "\n\n{stale} annotation(s) from an earlier run of this check on this commit no longer apply (GitHub keeps \
             annotations once posted)."
        ));
    }
    let summary = sanitize::cap(summary.trim(), "", MAX_BODY - 1);
    let mut batches = posted.chunks(BATCH);
    let first = batches.next().unwrap_or(&[]);
    let output = |batch: &[Value]| json!({"title": title, "summary": summary, "annotations": batch});
    let mut body = json!({"name": cfg.name, "external_id": external_id, "status": "completed",
                          "conclusion": conclusion, "output": output(first)});
    let answer = match &existing {
        Some(id) => {
            let path = format!("/repos/{}/check-runs/{id}", job.repo);
            job.client.write("check_run", Method::PATCH, &path, body).await?
        }
        None => {
            body["head_sha"] = json!(head);
            job.client.write("check_run", Method::POST, &format!("/repos/{}/check-runs", job.repo), body).await?
        }
    };
    let id = existing
        .clone()
        .or_else(|| answer["id"].as_u64().map(|id| id.to_string()))
        .unwrap_or_else(|| "{check_run_id}".to_string());
    let mut requests = 1;
    for batch in batches {
        let path = format!("/repos/{}/check-runs/{id}", job.repo);
        job.client.write("check_run", Method::PATCH, &path, json!({"output": output(batch)})).await?;
        requests += 1;
    }
    let (state, detail) = match &existing {
        Some(_) => (
            OutcomeState::Updated,
            format!(
                "`{}` updated, {conclusion} on {head}: {} annotation(s), {} of them new, in {requests} request(s)",
                cfg.name,
                annotations.len(),
                posted.len()
            ),
        ),
        None => (
            OutcomeState::Created,
            format!(
                "`{}` {conclusion} on {head}: {} annotation(s) in {requests} request(s)",
                cfg.name,
                annotations.len()
            ),
        ),
    };
    Ok(Outcome::new("check_run", state, detail).with_url(answer["html_url"].as_str()))
}

/// The id of this workflow's check named `name` on `head`, if one exists.
async fn find(job: &Job<'_>, name: &str, head: &str, external_id: &str) -> Result<Option<String>, OutputError> {
    if !job.client.can_read() {
        return Ok(None);
    }
    let path =
        format!("/repos/{}/commits/{head}/check-runs?check_name={}&filter=all&per_page=100", job.repo, encode(name));
    let answer = job.client.get(&path).await?;
    Ok(answer["check_runs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["name"].as_str() == Some(name) && r["external_id"].as_str() == Some(external_id))
        .filter_map(|r| r["id"].as_u64())
        .max()
        .map(|id| id.to_string()))
}

/// What makes two annotations the same one.
fn key(a: &Value) -> String {
    json!([a["path"], a["start_line"], a["end_line"], a["annotation_level"], a["message"]]).to_string()
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
