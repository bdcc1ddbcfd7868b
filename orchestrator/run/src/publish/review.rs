//! `publish.review`: one pull-request review per head commit. Findings on lines of the
//! pull request's diff become inline comments (suggestions as ```suggestion blocks), up
//! to `max_comments`; the others are listed in the body, since GitHub refuses comments
//! off the diff. A review already posted for the head commit is not posted again.

use std::collections::{BTreeSet, HashMap};

use orch_workflows::publish::{Finding, ReviewOutput};
use reqwest::Method;
use serde_json::{Value, json};

use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

pub(crate) async fn publish(job: &Job<'_>, cfg: &ReviewOutput) -> Result<Outcome, OutputError> {
    let Some(number) = job.ctx.pull_number() else {
        return Ok(Outcome::new("review", OutcomeState::Skipped, "the event is not about a pull request"));
    };
    let client = job.client;
    let base = format!("/repos/{}/pulls/{number}", job.repo);
    let mut head = job.ctx.head_sha();
    let mut diff: Option<HashMap<String, BTreeSet<u64>>> = None;
    if client.can_read() {
        let pull = client.get(&base).await?;
        head = pull["head"]["sha"].as_str().map(str::to_string).or(head);
        let files = client.list(&format!("{base}/files")).await?;
        diff = Some(
            files
                .iter()
                .filter_map(|f| {
                    Some((f["filename"].as_str()?.to_string(), right_lines(f["patch"].as_str().unwrap_or(""))))
                })
                .collect(),
        );
    }
    let head = head.unwrap_or_default();
    let marker = job.marker(&format!("review:{head}"));
    if client.can_read() {
        let reviews = client.list(&format!("{base}/reviews")).await?;
        if reviews.iter().any(|r| r["body"].as_str().is_some_and(|b| b.contains(&marker))) {
            return Ok(Outcome::new("review", OutcomeState::Skipped, format!("already reviewed at {head}")));
        }
    }
    let (inline, outside): (Vec<&Finding>, Vec<&Finding>) = job.findings.items.iter().partition(|f| match &diff {
        Some(files) => files.get(&f.path).is_some_and(|lines| on_diff(f, lines)),
        None => true,
    });
    let max = cfg.max_comments as usize;
    let (inline, over) = inline.split_at(inline.len().min(max));
    let comments: Vec<Value> = inline.iter().map(|f| comment(f)).collect();
    let answer = job.render(cfg.body.as_deref(), &job.inputs.answer)?;
    let mut body = sanitize::text(&answer);
    if !outside.is_empty() {
        body.push_str(&format!("\n\n**Findings outside the diff** ({})\n\n", outside.len()));
        listing(&mut body, &outside);
    }
    if !over.is_empty() {
        body.push_str(&format!("\n\n**More findings** ({} past `max_comments: {max}`)\n\n", over.len()));
        listing(&mut body, over);
    }
    let body = sanitize::cap(body.trim(), &marker, MAX_BODY);
    let mut request = json!({"event": cfg.event.as_str(), "body": body, "comments": comments});
    if !head.is_empty() {
        request["commit_id"] = json!(head);
    }
    let answer = client.write("review", Method::POST, &format!("{base}/reviews"), request).await?;
    let url = answer["html_url"].as_str();
    let detail = format!("{} inline comment(s), {} finding(s) in the body", inline.len(), outside.len() + over.len());
    Ok(Outcome::new("review", OutcomeState::Created, detail).with_url(url))
}

fn on_diff(f: &Finding, lines: &BTreeSet<u64>) -> bool {
    lines.contains(&f.line) && f.end_line.is_none_or(|e| lines.contains(&e))
}

fn comment(f: &Finding) -> Value {
    let mut body = format!("**{}**: {}", f.severity.as_str(), sanitize::text(&f.message));
    if let Some(suggestion) = &f.suggestion {
        let fence = sanitize::fence(suggestion);
        let suggestion = suggestion.strip_suffix('\n').unwrap_or(suggestion);
        body.push_str(&format!("\n\n{fence}suggestion\n{suggestion}\n{fence}"));
    }
    let body: String = body.chars().take(MAX_BODY).collect();
    match f.end_line.filter(|&e| e > f.line) {
        Some(end) => {
            json!({"path": f.path, "start_line": f.line, "line": end, "side": "RIGHT", "start_side": "RIGHT", "body": body})
        }
        None => json!({"path": f.path, "line": f.line, "side": "RIGHT", "body": body}),
    }
}

fn listing(body: &mut String, findings: &[&Finding]) {
    for f in findings {
        let place = match f.end_line.filter(|&e| e > f.line) {
            Some(end) => format!("{}:{}-{end}", f.path, f.line),
            None => format!("{}:{}", f.path, f.line),
        };
        body.push_str(&format!(
            "- `{}` **{}**: {}\n",
            place.replace('`', "'"),
            f.severity.as_str(),
            sanitize::text(&one_line(&f.message))
        ));
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The new-side lines a patch's hunks cover (added and context lines).
pub(crate) fn right_lines(patch: &str) -> BTreeSet<u64> {
    let mut lines = BTreeSet::new();
    let mut new = 0u64;
    let mut in_hunk = false;
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("@@ ") {
            let start = header
                .split_whitespace()
                .nth(1)
                .and_then(|p| p.strip_prefix('+'))
                .and_then(|p| p.split(',').next())
                .and_then(|p| p.parse::<u64>().ok());
            in_hunk = start.is_some();
            new = start.unwrap_or(0);
            continue;
        }
        if !in_hunk {
            continue;
        }
        match line.chars().next() {
            Some('-') | Some('\\') => {}
            _ => {
                lines.insert(new);
                new += 1;
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use orch_workflows::publish::Severity;

    use super::*;

    #[test]
    fn diff_lines_skip_removed_lines() {
        let lines: Vec<u64> =
            right_lines("@@ -1,3 +1,3 @@\n a\n-b\n+c\n d\n@@ -20 +20,2 @@\n+x\n y").into_iter().collect();
        assert_eq!(lines, vec![1, 2, 3, 20, 21]);
    }

    #[test]
    fn suggestions_are_fenced_blocks() {
        let f = Finding {
            path: "a.rs".into(),
            line: 2,
            end_line: Some(3),
            severity: Severity::Warning,
            message: "ask @octocat".into(),
            suggestion: Some("let x = 1;\n".into()),
        };
        let c = comment(&f);
        assert_eq!(c["start_line"], 2);
        assert_eq!(c["line"], 3);
        let body = c["body"].as_str().unwrap();
        assert!(body.contains("```suggestion\nlet x = 1;\n```"), "{body}");
        assert!(!body.contains("@octocat"));
    }
}
