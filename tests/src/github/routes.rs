//! The request handler of the fake GitHub server: authentication, injected faults, then
//! one arm per endpoint, each checking its input the way GitHub does.

// Handlers answer errors as whole responses; their size does not matter in a test server.
#![allow(clippy::result_large_err)]

use std::io::Read;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};

use super::diff::{left_lines, right_lines};
use super::page::{page, param};
use super::state::{Access, CheckRun, Comment, Data, GhRequest, Issue, Pull, Review, SarifUpload};
use super::{MAX_ANNOTATIONS_PER_REQUEST, MAX_BODY_CHARS, Shared};

type Answer = Result<Response, Response>;

pub(crate) async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let received = std::time::Instant::now();
    let path = uri.path().to_owned();
    let query = uri.query().unwrap_or("").to_owned();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let response = match answer(&shared, &method, &path, &query, authorization.as_deref(), &json) {
        Ok(r) | Err(r) => r,
    };
    let mut header_map = std::collections::BTreeMap::new();
    for (name, value) in &headers {
        header_map.insert(name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    shared.log().push(GhRequest {
        method: method.as_str().to_owned(),
        path,
        query,
        authorization,
        headers: header_map,
        body: json,
        status: response.status().as_u16(),
        received,
        answered: std::time::Instant::now(),
    });
    response
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"message": message, "documentation_url": "https://docs.github.com/rest", "status": status.as_u16().to_string()});
    (status, axum::Json(body)).into_response()
}

fn unprocessable(message: &str, detail: &str) -> Response {
    let body = json!({"message": message, "errors": [detail], "documentation_url": "https://docs.github.com/rest", "status": "422"});
    (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(body)).into_response()
}

fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "Not Found")
}

fn ok(status: StatusCode, body: Value) -> Answer {
    Ok((status, axum::Json(body)).into_response())
}

fn answer(shared: &Shared, method: &Method, path: &str, query: &str, auth: Option<&str>, body: &Value) -> Answer {
    let token = auth.and_then(|a| a.strip_prefix("Bearer ").or_else(|| a.strip_prefix("token ")));
    let Some(token) = token else {
        return Err(error(StatusCode::UNAUTHORIZED, "Requires authentication"));
    };
    let access = shared.data().tokens.get(token.trim()).copied();
    match access {
        None => return Err(error(StatusCode::UNAUTHORIZED, "Bad credentials")),
        Some(Access::ReadOnly) if method != Method::GET => {
            return Err(error(StatusCode::FORBIDDEN, "Resource not accessible by integration"));
        }
        Some(_) => {}
    }
    if let Some(fault) = take_fault(shared, method, path) {
        let mut response =
            error(StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "injected fault");
        if let Some(after) = fault.retry_after.as_deref().and_then(|a| HeaderValue::from_str(a).ok()) {
            response.headers_mut().insert(header::RETRY_AFTER, after);
        }
        return Err(response);
    }
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let ["repos", owner, name, rest @ ..] = segs.as_slice() else { return Err(not_found()) };
    let repo = format!("{owner}/{name}");
    let base = shared.base_url();
    let mut data = shared.data();
    let data = &mut *data;
    let number = |s: &str| s.parse::<u64>().map_err(|_| not_found());
    match (method.as_str(), rest) {
        ("GET", ["pulls"]) => {
            let state = param(query, "state").unwrap_or_else(|| "open".to_owned());
            let head = param(query, "head");
            let items = data
                .pulls
                .iter()
                .filter(|p| p.repo == repo && (state == "all" || p.state == state))
                .filter(|p| head.as_deref().is_none_or(|h| h == head_label(p) || h == p.head_ref))
                .map(|p| pull_json(p, &base))
                .collect();
            Ok(page(items, &base, path, query))
        }
        ("POST", ["pulls"]) => create_pull(data, &repo, body, &base),
        ("GET", ["pulls", n]) => {
            let n = number(n)?;
            let pull = data.pulls.iter().find(|p| p.repo == repo && p.number == n).ok_or_else(not_found)?;
            ok(StatusCode::OK, pull_json(pull, &base))
        }
        ("PATCH", ["pulls", n]) => {
            let n = number(n)?;
            check_body(body)?;
            let pull = data.pull_mut(&repo, n).ok_or_else(not_found)?;
            if let Some(title) = body["title"].as_str() {
                pull.title = title.to_owned();
            }
            if let Some(text) = body["body"].as_str() {
                pull.body = text.to_owned();
            }
            if let Some(state) = body["state"].as_str() {
                pull.state = state.to_owned();
            }
            pull.updates += 1;
            let pull = pull.clone();
            ok(StatusCode::OK, pull_json(&pull, &base))
        }
        ("GET", ["pulls", n, "files"]) => {
            let n = number(n)?;
            let pull = data.pulls.iter().find(|p| p.repo == repo && p.number == n).ok_or_else(not_found)?;
            let items = pull.files.iter().map(|f| serde_json::to_value(f).unwrap_or(Value::Null)).collect();
            Ok(page(items, &base, path, query))
        }
        ("GET", ["pulls", n, "reviews"]) => {
            let n = number(n)?;
            if !data.pulls.iter().any(|p| p.repo == repo && p.number == n) {
                return Err(not_found());
            }
            let items = data.reviews.iter().filter(|r| r.repo == repo && r.pull == n).map(review_json).collect();
            Ok(page(items, &base, path, query))
        }
        ("POST", ["pulls", n, "reviews"]) => create_review(data, &repo, number(n)?, body),
        ("GET", ["issues"]) => {
            let state = param(query, "state").unwrap_or_else(|| "open".to_owned());
            let labels: Vec<String> =
                param(query, "labels").map(|l| l.split(',').map(str::to_owned).collect()).unwrap_or_default();
            let wanted = |s: &str, l: &[String]| (state == "all" || s == state) && labels.iter().all(|x| l.contains(x));
            let mut items: Vec<(u64, Value)> = data
                .issues
                .iter()
                .filter(|i| i.repo == repo && wanted(&i.state, &i.labels))
                .map(|i| (i.number, issue_json(i, &base)))
                .collect();
            items.extend(
                data.pulls
                    .iter()
                    .filter(|p| p.repo == repo && wanted(&p.state, &p.labels))
                    .map(|p| (p.number, pull_as_issue_json(p, &base))),
            );
            // Newest first, as GitHub lists them by default.
            items.sort_by_key(|item| std::cmp::Reverse(item.0));
            Ok(page(items.into_iter().map(|(_, v)| v).collect(), &base, path, query))
        }
        ("POST", ["issues"]) => {
            check_body(body)?;
            let Some(title) = body["title"].as_str().filter(|t| !t.is_empty()) else {
                return Err(unprocessable("Validation Failed", "title is missing"));
            };
            let number = data.next_number(&repo);
            let issue = Issue {
                repo: repo.clone(),
                number,
                title: title.to_owned(),
                body: body["body"].as_str().unwrap_or("").to_owned(),
                state: "open".to_owned(),
                labels: strings(&body["labels"]),
                updates: 0,
            };
            let json = issue_json(&issue, &base);
            data.issues.push(issue);
            ok(StatusCode::CREATED, json)
        }
        ("PATCH", ["issues", n]) => {
            let n = number(n)?;
            check_body(body)?;
            if let Some(issue) = data.issue_mut(&repo, n) {
                if let Some(title) = body["title"].as_str() {
                    issue.title = title.to_owned();
                }
                if let Some(text) = body["body"].as_str() {
                    issue.body = text.to_owned();
                }
                if body["labels"].is_array() {
                    issue.labels = strings(&body["labels"]);
                }
                if let Some(state) = body["state"].as_str() {
                    issue.state = state.to_owned();
                }
                issue.updates += 1;
                let issue = issue.clone();
                return ok(StatusCode::OK, issue_json(&issue, &base));
            }
            let pull = data.pull_mut(&repo, n).ok_or_else(not_found)?;
            if let Some(title) = body["title"].as_str() {
                pull.title = title.to_owned();
            }
            if let Some(text) = body["body"].as_str() {
                pull.body = text.to_owned();
            }
            if body["labels"].is_array() {
                pull.labels = strings(&body["labels"]);
            }
            pull.updates += 1;
            let pull = pull.clone();
            ok(StatusCode::OK, pull_as_issue_json(&pull, &base))
        }
        ("POST", ["issues", n, "labels"]) => {
            let n = number(n)?;
            let add = strings(&body["labels"]);
            let labels = if let Some(issue) = data.issue_mut(&repo, n) {
                &mut issue.labels
            } else {
                &mut data.pull_mut(&repo, n).ok_or_else(not_found)?.labels
            };
            for label in add {
                if !labels.contains(&label) {
                    labels.push(label);
                }
            }
            let out: Vec<Value> = labels.iter().map(|l| json!({"name": l})).collect();
            ok(StatusCode::OK, Value::Array(out))
        }
        ("GET", ["issues", n, "comments"]) => {
            let n = number(n)?;
            if !data.has_number(&repo, n) {
                return Err(not_found());
            }
            let items = data
                .comments
                .iter()
                .filter(|c| c.repo == repo && c.issue == n)
                .map(|c| comment_json(c, &base))
                .collect();
            Ok(page(items, &base, path, query))
        }
        ("POST", ["issues", n, "comments"]) => {
            let n = number(n)?;
            if !data.has_number(&repo, n) {
                return Err(not_found());
            }
            check_body(body)?;
            let Some(text) = body["body"].as_str().filter(|b| !b.is_empty()) else {
                return Err(unprocessable("Validation Failed", "body is missing"));
            };
            let comment =
                Comment { repo: repo.clone(), id: data.next_id(), issue: n, body: text.to_owned(), updates: 0 };
            let json = comment_json(&comment, &base);
            data.comments.push(comment);
            ok(StatusCode::CREATED, json)
        }
        ("PATCH", ["issues", "comments", id]) => {
            let id = number(id)?;
            check_body(body)?;
            let comment = data.comments.iter_mut().find(|c| c.repo == repo && c.id == id).ok_or_else(not_found)?;
            if let Some(text) = body["body"].as_str() {
                comment.body = text.to_owned();
            }
            comment.updates += 1;
            let comment = comment.clone();
            ok(StatusCode::OK, comment_json(&comment, &base))
        }
        ("POST", ["check-runs"]) => {
            let (Some(name), Some(sha)) = (body["name"].as_str(), body["head_sha"].as_str()) else {
                return Err(unprocessable("Invalid request", "name and head_sha are required"));
            };
            let annotations = check_annotations(&body["output"]["annotations"])?;
            let run = CheckRun {
                repo: repo.clone(),
                id: data.next_id(),
                name: name.to_owned(),
                head_sha: sha.to_owned(),
                external_id: body["external_id"].as_str().map(str::to_owned),
                status: body["status"].as_str().unwrap_or("queued").to_owned(),
                conclusion: body["conclusion"].as_str().map(str::to_owned),
                title: body["output"]["title"].as_str().unwrap_or("").to_owned(),
                summary: body["output"]["summary"].as_str().unwrap_or("").to_owned(),
                annotation_requests: u32::from(!annotations.is_empty()),
                annotations,
                updates: 0,
            };
            let json = check_run_json(&run, &base);
            data.check_runs.push(run);
            ok(StatusCode::CREATED, json)
        }
        ("PATCH", ["check-runs", id]) => {
            let id = number(id)?;
            let annotations = check_annotations(&body["output"]["annotations"])?;
            let run = data.check_runs.iter_mut().find(|c| c.repo == repo && c.id == id).ok_or_else(not_found)?;
            if let Some(name) = body["name"].as_str() {
                run.name = name.to_owned();
            }
            if let Some(external_id) = body["external_id"].as_str() {
                run.external_id = Some(external_id.to_owned());
            }
            if let Some(status) = body["status"].as_str() {
                run.status = status.to_owned();
            }
            if let Some(conclusion) = body["conclusion"].as_str() {
                run.conclusion = Some(conclusion.to_owned());
            }
            if let Some(title) = body["output"]["title"].as_str() {
                run.title = title.to_owned();
            }
            if let Some(summary) = body["output"]["summary"].as_str() {
                run.summary = summary.to_owned();
            }
            if !annotations.is_empty() {
                run.annotation_requests += 1;
            }
            // Appended, never replaced, as on GitHub.
            run.annotations.extend(annotations);
            run.updates += 1;
            let run = run.clone();
            ok(StatusCode::OK, check_run_json(&run, &base))
        }
        ("GET", ["check-runs", id, "annotations"]) => {
            let id = number(id)?;
            let run = data.check_runs.iter().find(|c| c.repo == repo && c.id == id).ok_or_else(not_found)?;
            Ok(page(run.annotations.clone(), &base, path, query))
        }
        ("GET", ["commits", sha, "check-runs"]) => {
            let name = param(query, "check_name");
            let runs: Vec<Value> = data
                .check_runs
                .iter()
                .filter(|c| c.repo == repo && c.head_sha == *sha && name.as_deref().is_none_or(|n| n == c.name))
                .map(|c| check_run_json(c, &base))
                .collect();
            ok(StatusCode::OK, json!({"total_count": runs.len(), "check_runs": runs}))
        }
        ("POST", ["code-scanning", "sarifs"]) => {
            let (Some(sha), Some(git_ref), Some(sarif)) =
                (body["commit_sha"].as_str(), body["ref"].as_str(), body["sarif"].as_str())
            else {
                return Err(unprocessable("Invalid request", "commit_sha, ref and sarif are required"));
            };
            if sha.len() != 40 || !sha.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(unprocessable("Invalid request", "commit_sha is not a full commit SHA"));
            }
            let sarif = decode_sarif(sarif)
                .ok_or_else(|| error(StatusCode::BAD_REQUEST, "Invalid SARIF: not gzip+base64 JSON"))?;
            let id = format!("sarif-{}", data.next_id());
            let url = format!("{base}/repos/{repo}/code-scanning/sarifs/{id}");
            let tool = sarif["runs"][0]["tool"]["driver"]["name"].as_str().unwrap_or("").to_owned();
            let automation = sarif["runs"][0]["automationDetails"]["id"].as_str().unwrap_or("");
            let category = automation.rsplit_once('/').map(|(c, _)| c).unwrap_or("").to_owned();
            data.sarifs.push(SarifUpload {
                repo,
                id: id.clone(),
                commit_sha: sha.to_owned(),
                git_ref: git_ref.to_owned(),
                tool,
                category,
                sarif,
            });
            ok(StatusCode::ACCEPTED, json!({"id": id, "url": url}))
        }
        _ => Err(not_found()),
    }
}

fn take_fault(shared: &Shared, method: &Method, path: &str) -> Option<super::Fault> {
    let mut faults = shared.faults();
    let index = faults.iter().position(|f| f.method == method.as_str() && path.ends_with(&f.path_suffix))?;
    let fault = faults[index].clone();
    if faults[index].times <= 1 {
        faults.remove(index);
    } else {
        faults[index].times -= 1;
    }
    Some(fault)
}

fn check_body(body: &Value) -> Result<(), Response> {
    match body["body"].as_str() {
        Some(text) if text.chars().count() > MAX_BODY_CHARS => Err(unprocessable(
            "Validation Failed",
            &format!("body is too long (maximum is {MAX_BODY_CHARS} characters)"),
        )),
        _ => Ok(()),
    }
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}

fn head_label(pull: &Pull) -> String {
    let owner = pull.head_repo.split('/').next().unwrap_or("");
    format!("{owner}:{}", pull.head_ref)
}

fn create_pull(data: &mut Data, repo: &str, body: &Value, base: &str) -> Answer {
    check_body(body)?;
    let (Some(title), Some(head), Some(base_ref)) =
        (body["title"].as_str(), body["head"].as_str(), body["base"].as_str())
    else {
        return Err(unprocessable("Validation Failed", "title, head and base are required"));
    };
    let owner = repo.split('/').next().unwrap_or("");
    let (head_owner, head_ref) = head.split_once(':').unwrap_or((owner, head));
    let label = format!("{head_owner}:{head_ref}");
    if data.pulls.iter().any(|p| p.repo == repo && p.state == "open" && head_label(p) == label) {
        return Err(unprocessable("Validation Failed", &format!("A pull request already exists for {label}.")));
    }
    let number = data.next_number(repo);
    let pull = Pull {
        repo: repo.to_owned(),
        number,
        title: title.to_owned(),
        body: body["body"].as_str().unwrap_or("").to_owned(),
        state: "open".to_owned(),
        draft: body["draft"].as_bool().unwrap_or(false),
        head_ref: head_ref.to_owned(),
        head_sha: String::new(),
        head_repo: format!("{head_owner}/{}", repo.split('/').nth(1).unwrap_or("")),
        base_ref: base_ref.to_owned(),
        labels: Vec::new(),
        files: Vec::new(),
        updates: 0,
    };
    let json = pull_json(&pull, base);
    data.pulls.push(pull);
    ok(StatusCode::CREATED, json)
}

fn create_review(data: &mut Data, repo: &str, n: u64, body: &Value) -> Answer {
    check_body(body)?;
    let pull = data.pulls.iter().find(|p| p.repo == repo && p.number == n).ok_or_else(not_found)?;
    let event = body["event"].as_str().unwrap_or("PENDING").to_owned();
    let text = body["body"].as_str().unwrap_or("").to_owned();
    if event == "REQUEST_CHANGES" && text.is_empty() {
        return Err(unprocessable("Unprocessable Entity", "Review body is required for REQUEST_CHANGES"));
    }
    let comments = body["comments"].as_array().cloned().unwrap_or_default();
    for comment in &comments {
        let path = comment["path"].as_str().unwrap_or("");
        let Some(patch) = pull.files.iter().find(|f| f.filename == path).and_then(|f| f.patch.as_deref()) else {
            return Err(unprocessable("Unprocessable Entity", "Path could not be resolved"));
        };
        let lines = if comment["side"].as_str() == Some("LEFT") { left_lines(patch) } else { right_lines(patch) };
        let line = comment["line"].as_u64();
        let start = comment["start_line"].as_u64();
        let in_diff = line.is_some_and(|l| lines.contains(&l)) && start.is_none_or(|s| lines.contains(&s));
        if !in_diff {
            return Err(unprocessable(
                "Unprocessable Entity",
                "Pull request review thread line must be part of the diff",
            ));
        }
        if comment["body"].as_str().is_none_or(str::is_empty) {
            return Err(unprocessable("Unprocessable Entity", "Review comment body is missing"));
        }
    }
    let commit_id = body["commit_id"].as_str().map(str::to_owned).unwrap_or_else(|| pull.head_sha.clone());
    let review = Review { repo: repo.to_owned(), id: data.next_id(), pull: n, commit_id, event, body: text, comments };
    let json = review_json(&review);
    data.reviews.push(review);
    ok(StatusCode::OK, json)
}

fn check_annotations(value: &Value) -> Result<Vec<Value>, Response> {
    let annotations = value.as_array().cloned().unwrap_or_default();
    if annotations.len() > MAX_ANNOTATIONS_PER_REQUEST {
        return Err(unprocessable(
            "Invalid request",
            &format!("Only {MAX_ANNOTATIONS_PER_REQUEST} annotations are allowed per request"),
        ));
    }
    for a in &annotations {
        let level_ok = matches!(a["annotation_level"].as_str(), Some("notice" | "warning" | "failure"));
        if a["path"].as_str().is_none()
            || a["start_line"].as_u64().is_none()
            || a["end_line"].as_u64().is_none()
            || !level_ok
            || a["message"].as_str().is_none()
        {
            return Err(unprocessable(
                "Invalid request",
                "annotation needs path, start_line, end_line, annotation_level, message",
            ));
        }
    }
    Ok(annotations)
}

fn decode_sarif(encoded: &str) -> Option<Value> {
    let gz = base64::engine::general_purpose::STANDARD.decode(encoded.trim()).ok()?;
    let mut text = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice()).read_to_end(&mut text).ok()?;
    serde_json::from_slice(&text).ok()
}

fn labels_json(labels: &[String]) -> Value {
    Value::Array(labels.iter().map(|l| json!({"name": l})).collect())
}

fn pull_json(p: &Pull, base: &str) -> Value {
    json!({
        "number": p.number,
        "title": p.title,
        "body": p.body,
        "state": p.state,
        "draft": p.draft,
        "html_url": format!("{base}/{}/pull/{}", p.repo, p.number),
        "head": {"ref": p.head_ref, "sha": p.head_sha, "label": head_label(p), "repo": {"full_name": p.head_repo}},
        "base": {"ref": p.base_ref, "repo": {"full_name": p.repo}},
        "labels": labels_json(&p.labels),
    })
}

fn pull_as_issue_json(p: &Pull, base: &str) -> Value {
    json!({
        "number": p.number,
        "title": p.title,
        "body": p.body,
        "state": p.state,
        "labels": labels_json(&p.labels),
        "html_url": format!("{base}/{}/pull/{}", p.repo, p.number),
        "pull_request": {"url": format!("{base}/repos/{}/pulls/{}", p.repo, p.number)},
    })
}

fn issue_json(i: &Issue, base: &str) -> Value {
    json!({
        "number": i.number,
        "title": i.title,
        "body": i.body,
        "state": i.state,
        "labels": labels_json(&i.labels),
        "html_url": format!("{base}/{}/issues/{}", i.repo, i.number),
    })
}

fn comment_json(c: &Comment, base: &str) -> Value {
    json!({
        "id": c.id,
        "body": c.body,
        "html_url": format!("{base}/{}/issues/{}#issuecomment-{}", c.repo, c.issue, c.id),
        "user": {"login": "github-actions[bot]"},
    })
}

fn review_json(r: &Review) -> Value {
    let state = match r.event.as_str() {
        "COMMENT" => "COMMENTED",
        "REQUEST_CHANGES" => "CHANGES_REQUESTED",
        "APPROVE" => "APPROVED",
        _ => "PENDING",
    };
    json!({"id": r.id, "body": r.body, "commit_id": r.commit_id, "state": state, "user": {"login": "github-actions[bot]"}})
}

fn check_run_json(c: &CheckRun, base: &str) -> Value {
    json!({
        "id": c.id,
        "name": c.name,
        "head_sha": c.head_sha,
        "external_id": c.external_id,
        "status": c.status,
        "conclusion": c.conclusion,
        "html_url": format!("{base}/{}/runs/{}", c.repo, c.id),
    })
}
