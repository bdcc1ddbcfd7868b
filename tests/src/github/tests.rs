use std::io::Write;

use base64::Engine;
use serde_json::{Value, json};

use super::*;

const PATCH: &str = "@@ -1,3 +1,4 @@\n fn a() {}\n-fn b() {}\n+fn b() -> u8 { 1 }\n+fn c() {}\n fn d() {}";

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn send(
    gh: &FakeGitHub,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value, Option<String>) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut req = client().request(method, format!("{}{path}", gh.url()));
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let link = resp.headers().get("link").map(|v| v.to_str().unwrap().to_owned());
    let json = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, json, link)
}

async fn server() -> FakeGitHub {
    let gh = FakeGitHub::start().await;
    gh.add_token("w", Access::Write);
    gh.add_token("r", Access::ReadOnly);
    gh.add_pull("o/r", PullSpec::new(7, "abc").file("src/lib.rs", PATCH));
    gh
}

#[test]
fn diff_lines_follow_hunks() {
    let right: Vec<u64> = right_lines(PATCH).into_iter().collect();
    assert_eq!(right, vec![1, 2, 3, 4]);
    let right: Vec<u64> =
        right_lines("@@ -10,2 +20,3 @@ fn x\n a\n+b\n c\n@@ -40 +50 @@\n-x\n+y").into_iter().collect();
    assert_eq!(right, vec![20, 21, 22, 50]);
}

#[tokio::test]
async fn auth_is_checked_before_anything() {
    let gh = server().await;
    assert_eq!(send(&gh, "GET", "/repos/o/r/pulls/7", None, None).await.0, 401);
    assert_eq!(send(&gh, "GET", "/repos/o/r/pulls/7", Some("nope"), None).await.0, 401);
    assert_eq!(send(&gh, "GET", "/repos/o/r/pulls/7", Some("r"), None).await.0, 200);
    let (status, body, _) =
        send(&gh, "POST", "/repos/o/r/issues/7/comments", Some("r"), Some(json!({"body": "x"}))).await;
    assert_eq!(status, 403);
    assert_eq!(body["message"], "Resource not accessible by integration");
    assert!(gh.comments("o/r", 7).is_empty());
    assert_eq!(send(&gh, "GET", "/repos/o/r/pulls/8", Some("w"), None).await.0, 404);
    assert_eq!(gh.requests().len(), 5);
    assert_eq!(gh.requests()[0].status, 401);
}

#[tokio::test]
async fn review_comments_must_be_on_the_diff() {
    let gh = server().await;
    let path = "/repos/o/r/pulls/7/reviews";
    let bad = json!({"event": "COMMENT", "body": "b", "comments": [{"path": "src/lib.rs", "line": 9, "side": "RIGHT", "body": "x"}]});
    assert_eq!(send(&gh, "POST", path, Some("w"), Some(bad)).await.0, 422);
    let other = json!({"event": "COMMENT", "comments": [{"path": "README.md", "line": 1, "body": "x"}]});
    assert_eq!(send(&gh, "POST", path, Some("w"), Some(other)).await.0, 422);
    let good = json!({"event": "COMMENT", "body": "b", "commit_id": "abc", "comments": [
        {"path": "src/lib.rs", "line": 3, "side": "RIGHT", "body": "x"},
        {"path": "src/lib.rs", "start_line": 2, "line": 3, "side": "RIGHT", "body": "y"},
        {"path": "src/lib.rs", "line": 2, "side": "LEFT", "body": "z"}]});
    assert_eq!(send(&gh, "POST", path, Some("w"), Some(good)).await.0, 200);
    assert_eq!(gh.reviews("o/r", 7).len(), 1);
    assert_eq!(gh.reviews("o/r", 7)[0].comments.len(), 3);
    let (status, list, _) = send(&gh, "GET", path, Some("w"), None).await;
    assert_eq!(status, 200);
    assert_eq!(list[0]["commit_id"], "abc");
}

#[tokio::test]
async fn lists_are_paginated_with_link_headers() {
    let gh = server().await;
    for i in 0..5 {
        let (status, ..) =
            send(&gh, "POST", "/repos/o/r/issues/7/comments", Some("w"), Some(json!({"body": format!("c{i}")}))).await;
        assert_eq!(status, 201);
    }
    let (_, first, link) = send(&gh, "GET", "/repos/o/r/issues/7/comments?per_page=2", Some("w"), None).await;
    assert_eq!(first.as_array().unwrap().len(), 2);
    let link = link.unwrap();
    assert!(link.contains("page=2>; rel=\"next\""), "{link}");
    assert!(link.contains("page=3>; rel=\"last\""), "{link}");
    let (_, last, link) = send(&gh, "GET", "/repos/o/r/issues/7/comments?per_page=2&page=3", Some("w"), None).await;
    assert_eq!(last[0]["body"], "c4");
    assert!(!link.unwrap().contains("rel=\"next\""));
}

#[tokio::test]
async fn state_and_validation_of_pulls_issues_checks_and_sarif() {
    let gh = server().await;
    let pr = json!({"title": "t", "head": "orch/x", "base": "main", "body": "b", "draft": true});
    let (status, created, _) = send(&gh, "POST", "/repos/o/r/pulls", Some("w"), Some(pr.clone())).await;
    assert_eq!(status, 201);
    assert_eq!(created["number"], 8);
    assert_eq!(send(&gh, "POST", "/repos/o/r/pulls", Some("w"), Some(pr)).await.0, 422);
    let (_, found, _) = send(&gh, "GET", "/repos/o/r/pulls?head=o:orch/x&state=open", Some("w"), None).await;
    assert_eq!(found.as_array().unwrap().len(), 1);

    let (status, issue, _) =
        send(&gh, "POST", "/repos/o/r/issues", Some("w"), Some(json!({"title": "i", "labels": ["orch"]}))).await;
    assert_eq!((status, issue["number"].as_u64()), (201, Some(9)));
    let (_, listed, _) = send(&gh, "GET", "/repos/o/r/issues?labels=orch", Some("w"), None).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);

    let too_long = json!({"body": "x".repeat(MAX_BODY_CHARS + 1)});
    assert_eq!(send(&gh, "POST", "/repos/o/r/issues/9/comments", Some("w"), Some(too_long)).await.0, 422);

    let annotation =
        json!({"path": "a", "start_line": 1, "end_line": 1, "annotation_level": "warning", "message": "m"});
    let many = vec![annotation.clone(); 51];
    let check =
        json!({"name": "orch", "head_sha": "abc", "output": {"title": "t", "summary": "s", "annotations": many}});
    assert_eq!(send(&gh, "POST", "/repos/o/r/check-runs", Some("w"), Some(check)).await.0, 422);
    let check = json!({"name": "orch", "head_sha": "abc", "output": {"title": "t", "summary": "s", "annotations": vec![annotation.clone(); 50]}});
    let (status, run, _) = send(&gh, "POST", "/repos/o/r/check-runs", Some("w"), Some(check)).await;
    assert_eq!(status, 201);
    let more = json!({"output": {"title": "t", "summary": "s", "annotations": [annotation]}});
    assert_eq!(send(&gh, "PATCH", &format!("/repos/o/r/check-runs/{}", run["id"]), Some("w"), Some(more)).await.0, 200);
    assert_eq!(gh.check_runs("o/r")[0].annotations.len(), 51);

    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(br#"{"version":"2.1.0","runs":[]}"#).unwrap();
    let sarif = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
    let sha = "a".repeat(40);
    let upload = json!({"commit_sha": sha, "ref": "refs/heads/main", "sarif": sarif});
    assert_eq!(send(&gh, "POST", "/repos/o/r/code-scanning/sarifs", Some("w"), Some(upload)).await.0, 202);
    let plain = json!({"commit_sha": sha, "ref": "refs/heads/main", "sarif": "{}"});
    assert_eq!(send(&gh, "POST", "/repos/o/r/code-scanning/sarifs", Some("w"), Some(plain)).await.0, 400);
    assert_eq!(gh.sarif_uploads("o/r")[0].sarif["version"], "2.1.0");
}

#[tokio::test]
async fn injected_faults_carry_retry_after() {
    let gh = server().await;
    gh.inject(Fault::new("POST", "/comments", 429).retry_after("1"));
    let resp = client()
        .post(format!("{}/repos/o/r/issues/7/comments", gh.url()))
        .bearer_auth("w")
        .json(&json!({"body": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(send(&gh, "POST", "/repos/o/r/issues/7/comments", Some("w"), Some(json!({"body": "x"}))).await.0, 201);
}
