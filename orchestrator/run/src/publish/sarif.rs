//! `publish.sarif`: the findings as a SARIF 2.1.0 log, gzipped and base64-encoded as
//! the code-scanning upload API wants it, for the head commit.

use std::io::Write as _;

use base64::Engine as _;
use orch_workflows::publish::{Finding, SarifOutput, Severity};
use reqwest::Method;
use serde_json::{Value, json};

use super::{Job, Outcome, OutcomeState, OutputError};

pub(crate) async fn publish(job: &Job<'_>, cfg: &SarifOutput) -> Result<Outcome, OutputError> {
    let (Some(head), Some(git_ref)) = (job.ctx.head_sha(), job.ctx.sarif_ref()) else {
        return Ok(Outcome::new(
            "sarif",
            OutcomeState::Skipped,
            "no commit or ref to upload for (GITHUB_SHA, GITHUB_REF)",
        ));
    };
    let findings: Vec<&Finding> = job.findings.items.iter().take(cfg.max_results as usize).collect();
    let log = log(&findings, cfg.category.as_deref().unwrap_or(&job.inputs.workflow));
    let sarif = encode(&log).map_err(|e| OutputError::msg(format!("cannot compress the SARIF log: {e}")))?;
    let body = json!({"commit_sha": head, "ref": git_ref, "sarif": sarif, "tool_name": "orch"});
    let answer =
        job.client.write("sarif", Method::POST, &format!("/repos/{}/code-scanning/sarifs", job.repo), body).await?;
    let detail = format!("{} result(s) for {head}", findings.len());
    Ok(Outcome::new("sarif", OutcomeState::Created, detail).with_url(answer["url"].as_str()))
}

/// The SARIF log of `findings`.
pub(crate) fn log(findings: &[&Finding], category: &str) -> Value {
    let results: Vec<Value> = findings
        .iter()
        .map(|f| {
            let level = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            json!({
                "ruleId": format!("orch/{level}"),
                "level": level,
                "message": {"text": f.message},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.path},
                    "region": {"startLine": f.line, "endLine": f.end_line.unwrap_or(f.line).max(f.line)}
                }}],
            })
        })
        .collect();
    let rules: Vec<Value> = ["error", "warning", "note"]
        .iter()
        .map(|l| json!({"id": format!("orch/{l}"), "shortDescription": {"text": format!("A finding of severity {l} reported by an orch agent")}}))
        .collect();
    json!({
        "version": "2.1.0",
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "runs": [{
            "tool": {"driver": {"name": "orch", "version": env!("CARGO_PKG_VERSION"), "rules": rules}},
            "automationDetails": {"id": format!("{category}/")},
            "results": results,
        }],
    })
}

/// gzip, then base64.
pub(crate) fn encode(log: &Value) -> std::io::Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&serde_json::to_vec(log)?)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz.finish()?))
}
