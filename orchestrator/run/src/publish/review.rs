//! `publish.review`: one pull-request review per head commit. Findings on lines of the
//! pull request's diff become inline comments (suggestions as ```suggestion blocks), up
//! to `max_comments`; the others are listed in the body, since GitHub refuses comments
//! off the diff. A review already posted for the head commit is not posted again.
//! Which lines the pull request changes comes from GitHub with a token, and from the
//! local `BASE...HEAD` diff without one (a dry run), so both lay the review out alike
//! ([`layout`]).

use std::collections::{BTreeSet, HashMap};

use orch_workflows::publish::{Finding, ReviewOutput};
use reqwest::Method;
use serde_json::{Value, json};

use super::sanitize::{self, MAX_BODY};
use super::{Job, Outcome, OutcomeState, OutputError};

/// The new-side lines of each file a pull request changes (the lines GitHub takes
/// inline comments on), by path.
pub(crate) type DiffLines = HashMap<String, BTreeSet<u64>>;

/// Where each finding of a review goes.
#[derive(Debug, Default)]
pub(crate) struct Layout<'a> {
    /// Inline comments, at most `max_comments`.
    pub inline: Vec<&'a Finding>,
    /// Listed in the body: off the diff (GitHub refuses the whole review otherwise).
    pub outside: Vec<&'a Finding>,
    /// Listed in the body: on the diff, but past `max_comments`.
    pub over: Vec<&'a Finding>,
}

/// Lays out `findings` against the pull request's changed lines: the one decision the
/// live run (lines from GitHub) and the dry run (lines from the local diff) share.
/// Without `diff`, which lines are changed is unknown and every finding stays inline.
pub(crate) fn layout<'a>(findings: &'a [Finding], diff: Option<&DiffLines>, max_comments: usize) -> Layout<'a> {
    let (mut inline, outside): (Vec<&Finding>, Vec<&Finding>) = findings.iter().partition(|f| match diff {
        Some(files) => files.get(&f.path).is_some_and(|lines| on_diff(f, lines)),
        None => true,
    });
    let over = inline.split_off(inline.len().min(max_comments));
    Layout { inline, outside, over }
}

/// The changed lines of each file, from patches in GitHub's shape (or git's: the
/// header lines before the first hunk are skipped).
pub(crate) fn diff_lines<'a>(patches: impl IntoIterator<Item = (&'a str, &'a str)>) -> DiffLines {
    patches.into_iter().map(|(path, patch)| (path.to_string(), right_lines(patch))).collect()
}

pub(crate) async fn publish(job: &Job<'_>, cfg: &ReviewOutput) -> Result<Outcome, OutputError> {
    let Some(number) = job.ctx.pull_number() else {
        return Ok(Outcome::new("review", OutcomeState::Skipped, "the event is not about a pull request"));
    };
    let client = job.client;
    let base = format!("/repos/{}/pulls/{number}", job.repo);
    let mut head = job.ctx.head_sha();
    let mut unknown_lines = None;
    let diff: Option<DiffLines> = if client.can_read() {
        let pull = client.get(&base).await?;
        head = pull["head"]["sha"].as_str().map(str::to_string).or(head);
        let files = client.list(&format!("{base}/files")).await?;
        Some(diff_lines(
            files.iter().filter_map(|f| Some((f["filename"].as_str()?, f["patch"].as_str().unwrap_or("")))),
        ))
    } else {
        match local_diff(job, head.as_deref()).await {
            Ok(lines) => Some(lines),
            Err(why) => {
                unknown_lines = Some(why);
                None
            }
        }
    };
    let head = head.unwrap_or_default();
    let marker = job.marker(&format!("review:{head}"));
    if client.can_read() {
        let reviews = client.list(&format!("{base}/reviews")).await?;
        if reviews.iter().any(|r| r["body"].as_str().is_some_and(|b| b.contains(&marker))) {
            return Ok(Outcome::new("review", OutcomeState::Skipped, format!("already reviewed at {head}")));
        }
    }
    let max = cfg.max_comments as usize;
    let Layout { inline, outside, over } = layout(&job.findings.items, diff.as_ref(), max);
    let comments: Vec<Value> = inline.iter().map(|f| comment(f)).collect();
    let answer = job.render(cfg.body.as_deref(), &job.inputs.answer)?;
    let mut body = sanitize::text(&answer);
    if !outside.is_empty() {
        body.push_str(&format!("\n\n**Findings outside the diff** ({})\n\n", outside.len()));
        listing(&mut body, &outside);
    }
    if !over.is_empty() {
        body.push_str(&format!("\n\n**More findings** ({} past `max_comments: {max}`)\n\n", over.len()));
        listing(&mut body, &over);
    }
    let body = sanitize::cap(body.trim(), &marker, MAX_BODY);
    let mut request = json!({"event": cfg.event.as_str(), "body": body, "comments": comments});
    if !head.is_empty() {
        request["commit_id"] = json!(head);
    }
    let answer = client.write("review", Method::POST, &format!("{base}/reviews"), request).await?;
    let url = answer["html_url"].as_str();
    let mut detail =
        format!("{} inline comment(s), {} finding(s) in the body", inline.len(), outside.len() + over.len());
    if let Some(why) = unknown_lines {
        detail.push_str(&format!(
            "; which lines the pull request changes is unknown ({why}): every finding is shown inline, though \
             GitHub refuses a review with a comment off the diff"
        ));
    }
    Ok(Outcome::new("review", OutcomeState::Created, detail).with_url(url))
}

/// Without a token (a dry run), the lines the pull request changes, from the local
/// repository's `BASE...HEAD` diff: the base from `--diff-base` or the event's
/// `pull_request.base.sha`, the head from the event (or `HEAD`). `Err` says why they
/// are unknown.
async fn local_diff(job: &Job<'_>, head: Option<&str>) -> Result<DiffLines, String> {
    let ctx = job.ctx;
    let source = crate::changes::Source::of_event(
        job.inputs.diff_base.as_deref(),
        head.unwrap_or("HEAD"),
        ctx.event_name.as_deref(),
        &ctx.event,
        ctx.event_path.as_deref(),
    )
    .map_err(|e| e.to_string())?
    .ok_or_else(|| "the event names no base commit (pass --diff-base)".to_string())?;
    let repo = job.inputs.repo.clone();
    let patches = tokio::task::spawn_blocking(move || crate::changes::patches(&repo, &source))
        .await
        .map_err(|e| format!("the diff was not computed: {e}"))?
        .map_err(|e| e.to_string())?;
    Ok(diff_lines(patches.iter().map(|(path, patch)| (path.as_str(), patch.as_str()))))
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

    fn finding(path: &str, line: u64, end_line: Option<u64>) -> Finding {
        Finding {
            path: path.into(),
            line,
            end_line,
            severity: Severity::Note,
            message: format!("{path}:{line}"),
            suggestion: None,
        }
    }

    #[test]
    fn the_layout_keeps_inline_only_findings_on_changed_lines_up_to_the_cap() {
        let findings = [
            finding("a.rs", 2, None),
            finding("a.rs", 2, Some(9)),
            finding("a.rs", 3, None),
            finding("b.rs", 1, None),
            finding("a.rs", 1, None),
        ];
        let diff = diff_lines([("a.rs", "@@ -1,2 +1,3 @@\n a\n+b\n c")]);
        let placed = |l: &[&Finding]| l.iter().map(|f| f.message.clone()).collect::<Vec<_>>();
        let l = layout(&findings, Some(&diff), 2);
        assert_eq!(placed(&l.inline), ["a.rs:2", "a.rs:3"]);
        assert_eq!(placed(&l.outside), ["a.rs:2", "b.rs:1"], "a range past the hunk and another file");
        assert_eq!(placed(&l.over), ["a.rs:1"]);
        // Unknown lines: everything inline, still capped.
        let l = layout(&findings, None, 30);
        assert_eq!((l.inline.len(), l.outside.len(), l.over.len()), (5, 0, 0));
    }

    #[test]
    fn git_patches_give_the_lines_githubs_give() {
        let github = "@@ -1,3 +1,4 @@\n fn a() {}\n-fn b() {}\n+fn b() -> u8 { 1 }\n+fn c() {}\n fn d() {}";
        let git = format!(
            "diff --git a/src/lib.rs b/src/lib.rs\nindex 1..2 100644\n--- a/src/lib.rs\n+++ b/src/lib.rs\n{github}\n"
        );
        assert_eq!(right_lines(&git), right_lines(github));
        assert_eq!(right_lines(github).into_iter().collect::<Vec<_>>(), [1, 2, 3, 4]);
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
