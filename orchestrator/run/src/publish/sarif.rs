//! `publish.sarif`: the findings as a SARIF 2.1.0 log, gzipped and base64-encoded as
//! the code-scanning upload API wants it, for the head commit. A re-run uploads again
//! under the same category (`automationDetails.id`), which GitHub takes as the new
//! analysis of that category, replacing the last one; each result carries a
//! `partialFingerprints` entry that does not depend on its line, so an alert found
//! again is the same alert, not a second one.

use std::collections::HashMap;
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
    let mut seen: HashMap<u64, u32> = HashMap::new();
    let results: Vec<Value> = findings
        .iter()
        .map(|f| {
            let level = match f.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            };
            // The same rule, file and message: the nth such finding is the nth alert.
            let message = f.message.split_whitespace().collect::<Vec<_>>().join(" ");
            let hash = fnv1a(&[category, level, &f.path, &message]);
            let nth = seen.entry(hash).or_insert(0);
            *nth += 1;
            json!({
                "ruleId": format!("orch/{level}"),
                "level": level,
                "message": {"text": f.message},
                "partialFingerprints": {"orchFinding/v1": format!("{hash:016x}:{nth}")},
                "locations": [{"physicalLocation": {
                    "artifactLocation": {"uri": f.path},
                    "region": {"startLine": f.line, "endLine": f.end_line.unwrap_or(f.line).max(f.line)}
                }}],
            })
        })
        .collect();
    let rules: Vec<Value> = ["error", "warning", "note"].iter().map(|l| rule(l)).collect();
    json!({
        "version": "2.1.0",
        "$schema": "https://json.schemastore.org/sarif-2.1.0.json",
        "runs": [{
            "tool": {"driver": {
                "name": "orch",
                "version": env!("CARGO_PKG_VERSION"),
                "informationUri": env!("CARGO_PKG_REPOSITORY"),
                "rules": rules,
            }},
            "automationDetails": {"id": format!("{category}/")},
            "results": results,
        }],
    })
}

/// The rule of one severity level, with the descriptions and help that GitHub's code
/// scanning requires of every rule (checked with Microsoft's SARIF multitool).
fn rule(level: &str) -> Value {
    let help = "An orch agent reported this in its structured output. Read the message and \
                the lines it points to; the run's report (report.md) shows the agent's \
                transcript and how it reached the finding. Fix the code, or dismiss the \
                alert if the agent was wrong.";
    json!({
        "id": format!("orch/{level}"),
        "name": format!("OrchFinding{}", capitalised(level)),
        "shortDescription": {"text": format!("A finding of severity {level} reported by an orch agent")},
        "fullDescription": {"text": format!(
            "A finding of severity {level} that an orch agent reported about this code; \
             the message says what the agent found."
        )},
        "help": {"text": help, "markdown": help},
        "defaultConfiguration": {"level": level},
    })
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
}

/// FNV-1a (64 bits) of `parts`, each followed by a NUL byte: stable across runs and
/// builds, which is all a fingerprint needs.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.bytes().chain([0])) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// gzip, then base64.
pub(crate) fn encode(log: &Value) -> std::io::Result<String> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&serde_json::to_vec(log)?)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(gz.finish()?))
}
