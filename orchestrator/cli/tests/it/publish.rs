//! Publishing to GitHub through the binary, against the test kit's fake GitHub server
//! and a local bare repository standing in for `origin`: a review with inline comments,
//! off-diff findings in its body and a suggestion block; a sticky comment edited by a
//! second run; a pull request opened, then updated; an issue; a check run with more than
//! 50 annotations; a SARIF upload; dry-run; failures (401, 403, 404, 422, rate limits);
//! and the token kept out of every sandbox and transcript.

use std::path::{Path, PathBuf};

use orch_testkit::github::{Access, FakeGitHub, Fault, PullSpec};
use serde_json::{Value, json};

use super::support::{Fixture, Run, git, orch};

const TOKEN: &str = "ghs_publishtoken0123456789abcdef";
const REPO: &str = "acme/app";
const PATCH: &str = "@@ -1,3 +1,4 @@\n fn a() {}\n-fn b() {}\n+fn b() -> u8 { 1 }\n+fn c() {}\n fn d() {}";

/// A fixture repository with a bare `origin`, a fake GitHub with pull request 7, and
/// the event file of a `pull_request` run.
struct World {
    fx: Fixture,
    gh: FakeGitHub,
    origin: PathBuf,
    event: PathBuf,
    head: String,
}

impl World {
    async fn new(run_id: &str) -> World {
        let fx = Fixture::new(run_id, &[("src/lib.rs", "fn a() {}\nfn b() -> u8 { 1 }\nfn c() {}\nfn d() {}\n")]);
        let origin = fx.dir.path().join("origin.git");
        git(fx.dir.path(), &["init", "-q", "--bare", "-b", "main", origin.to_str().unwrap()]);
        git(&fx.repo, &["remote", "add", "origin", origin.to_str().unwrap()]);
        git(&fx.repo, &["push", "-q", "origin", "main"]);
        let head = git(&fx.repo, &["rev-parse", "HEAD"]).trim().to_string();
        let gh = FakeGitHub::start().await;
        gh.add_token(TOKEN, Access::Write);
        gh.add_token("ghs_readonly", Access::ReadOnly);
        gh.add_pull(REPO, PullSpec::new(7, &head).file("src/lib.rs", PATCH));
        let event = fx.write(
            "event.json",
            &json!({"pull_request": {"number": 7, "head": {"sha": head, "repo": {"full_name": REPO}},
                    "base": {"repo": {"full_name": REPO}}},
                    "repository": {"default_branch": "main"}})
            .to_string(),
        );
        World { fx, gh, origin, event, head }
    }

    /// `orch run` with the GitHub environment; `run_id` names this run's directory.
    async fn run(&self, run_id: &str, workflow: &str, script: &str, token: Option<&str>, extra: &[&str]) -> Run {
        let out = self.fx.dir.path().join(format!("out-{run_id}"));
        let workflow = self.fx.write("workflow.yaml", workflow);
        let script = self.fx.write("script.yaml", script);
        let mut cmd = orch();
        cmd.current_dir(self.fx.dir.path())
            .arg("run")
            .arg(&workflow)
            .args(["--provider", "scripted", "--script"])
            .arg(&script)
            .arg("--repo")
            .arg(&self.fx.repo)
            .args(["--out", out.to_str().unwrap(), "--run-id", run_id, "--trust-repo-config"])
            .args(extra);
        self.github_env(&mut cmd, token);
        let output = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        Run::from_output(&out, output)
    }

    /// The environment of a step of a `pull_request` job, pointed at the fake server.
    fn github_env(&self, cmd: &mut std::process::Command, token: Option<&str>) {
        cmd.env("GITHUB_API_URL", self.gh.url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_EVENT_NAME", "pull_request")
            .env("GITHUB_EVENT_PATH", &self.event)
            .env("GITHUB_SHA", &self.head)
            .env("GITHUB_REF", "refs/pull/7/merge")
            .env_remove("ORCH_GITHUB_TOKEN")
            .env_remove("GITHUB_ACTIONS");
        match token {
            Some(t) => cmd.env("GITHUB_TOKEN", t),
            None => cmd.env_remove("GITHUB_TOKEN"),
        };
    }

    /// `orch merge DIRS --workflow WORKFLOW` (the workflow written by the last `run`).
    async fn merge(&self, name: &str, dirs: &[&str], script: &str, token: Option<&str>, extra: &[&str]) -> Run {
        let out = self.fx.dir.path().join(format!("out-{name}"));
        let script = self.fx.write("merge-script.yaml", script);
        let mut cmd = orch();
        cmd.current_dir(self.fx.dir.path()).arg("merge");
        for dir in dirs {
            cmd.arg(self.fx.dir.path().join(format!("out-{dir}")));
        }
        // The workflow file lies outside the repository here: read it as it is (the trust
        // rule for `orch merge` has its own test in trust.rs).
        cmd.args(["--provider", "scripted", "--script"]).arg(&script).arg("--out").arg(&out).args(extra);
        cmd.arg("--trust-repo-config");
        self.github_env(&mut cmd, token);
        let output = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        Run::from_output(&out, output)
    }
}

fn findings_script(findings: Value, answer: &str) -> String {
    agent_findings_script("review", findings, answer)
}

fn agent_findings_script(agent: &str, findings: Value, answer: &str) -> String {
    format!(
        "version: 1\nagents:\n  {agent}:\n    - text: |\n        {answer}\n        ```json\n        {}\n        ```\n",
        json!({ "findings": findings })
    )
}

const REVIEW: &str = r#"
version: 1
name: pr-review
agents:
  review:
    prompt: Review the pull request.
    output:
      schema:
        type: object
        required: [findings]
        properties:
          findings: { type: array, items: { type: object, required: [path, line, severity, message],
                      properties: { path: {type: string}, line: {type: integer}, end_line: {type: integer},
                                    severity: {enum: [error, warning, note]}, message: {type: string},
                                    suggestion: {type: string} } } }
integrate: none
publish:
  review: { event: COMMENT, max_comments: 30 }
"#;

fn review_findings() -> Value {
    json!([
        {"path": "src/lib.rs", "line": 2, "severity": "error", "message": "b must not return a constant, cc @octocat",
         "suggestion": "fn b() -> u8 { compute() }"},
        {"path": "src/lib.rs", "line": 3, "end_line": 4, "severity": "warning", "message": "c and d are empty"},
        {"path": "src/lib.rs", "line": 40, "severity": "note", "message": "far from the diff"},
        {"path": "README.md", "line": 1, "severity": "note", "message": "not in the pull request"}
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn review_posts_inline_comments_lists_off_diff_findings_and_only_once_per_head() {
    let w = World::new("t-review").await;
    let script = findings_script(review_findings(), "Two problems <!-- orch:pr-review --> in the diff.");
    let run = w.run("r1", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    let reviews = w.gh.reviews(REPO, 7);
    assert_eq!(reviews.len(), 1, "{:?}", w.gh.requests());
    let review = &reviews[0];
    assert_eq!(review.event, "COMMENT");
    assert_eq!(review.commit_id, w.head);
    assert_eq!(review.comments.len(), 2, "{:#?}", review.comments);
    let first = review.comments[0]["body"].as_str().unwrap();
    assert!(first.contains("```suggestion\nfn b() -> u8 { compute() }\n```"), "{first}");
    assert!(!first.contains("@octocat"), "a mention reached GitHub: {first}");
    assert_eq!(review.comments[1]["start_line"], 3);
    assert_eq!(review.comments[1]["line"], 4);
    assert!(review.body.contains("Findings outside the diff"), "{}", review.body);
    assert!(review.body.contains("`src/lib.rs:40`") && review.body.contains("`README.md:1`"), "{}", review.body);
    // The model's fake marker is escaped: exactly one real marker, at the end.
    assert_eq!(review.body.matches("<!--").count(), 1, "{}", review.body);
    assert!(run.report["publish"]["outcomes"][0]["state"] == "created", "{:#}", run.report["publish"]);

    let again = w.run("r2", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    again.expect_code(0);
    assert_eq!(w.gh.reviews(REPO, 7).len(), 1, "a second review was posted for the same head");
    assert_eq!(again.report["publish"]["outcomes"][0]["state"], "skipped");
}

const COMMENT_AND_ISSUE: &str = r#"
version: 1
name: nightly report
agents:
  report:
    prompt: Write the report.
integrate: none
publish:
  comment: { sticky: true }
  issue: { title: "Nightly report", labels: [orch] }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn sticky_comment_and_issue_are_updated_by_a_second_run() {
    let w = World::new("t-sticky").await;
    let first = "version: 1\nagents:\n  report:\n    - text: First answer.\n";
    w.run("s1", COMMENT_AND_ISSUE, first, Some(TOKEN), &["--publish", "on"]).await.expect_code(0);
    let second = "version: 1\nagents:\n  report:\n    - text: Second answer.\n";
    let run = w.run("s2", COMMENT_AND_ISSUE, second, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    let comments = w.gh.comments(REPO, 7);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(comments[0].updates, 1);
    assert!(comments[0].body.starts_with("Second answer."), "{}", comments[0].body);
    let issues = w.gh.issues(REPO);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_eq!(issues[0].title, "Nightly report");
    assert_eq!(issues[0].labels, ["orch"]);
    assert!(issues[0].body.starts_with("Second answer."));
    assert_eq!(issues[0].updates, 1);
}

const REFACTOR: &str = r#"
version: 1
name: nightly refactor
agents:
  refactor:
    prompt: Refactor.
    tools: [Bash]
integrate: branches
publish:
  pull_request: { branch: orch/nightly-refactor, title: "Nightly refactor", draft: true, labels: [orch] }
"#;

fn refactor_script(line: &str) -> String {
    format!(
        "version: 1\nagents:\n  refactor:\n    - tool_calls: [{{name: Bash, input: {{command: \"echo '{line}' >> src/lib.rs\"}}}}]\n    - text: Refactored.\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn pull_request_is_opened_then_updated_and_a_moved_branch_is_not_overwritten() {
    let w = World::new("t-pr").await;
    let run = w.run("p1", REFACTOR, &refactor_script("// one"), Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    let pulls: Vec<_> = w.gh.pulls(REPO).into_iter().filter(|p| p.head_ref == "orch/nightly-refactor").collect();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert!(pulls[0].draft);
    assert_eq!(pulls[0].labels, ["orch"]);
    assert_eq!(pulls[0].base_ref, "main");
    let pushed = git(&w.origin, &["rev-parse", "refs/heads/orch/nightly-refactor"]).trim().to_string();
    assert_eq!(pushed, run.agent("refactor")["commit"].as_str().unwrap());

    let run = w.run("p2", REFACTOR, &refactor_script("// two"), Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    let pulls: Vec<_> = w.gh.pulls(REPO).into_iter().filter(|p| p.head_ref == "orch/nightly-refactor").collect();
    assert_eq!(pulls.len(), 1, "a second pull request was opened");
    assert_eq!(pulls[0].updates, 1);
    let second = git(&w.origin, &["rev-parse", "refs/heads/orch/nightly-refactor"]).trim().to_string();
    assert_eq!(second, run.agent("refactor")["commit"].as_str().unwrap());

    // Someone else pushes to the branch: the next run must not overwrite it.
    git(&w.fx.repo, &["push", "-q", "-f", "origin", "main:refs/heads/orch/nightly-refactor"]);
    let theirs = git(&w.origin, &["rev-parse", "refs/heads/orch/nightly-refactor"]).trim().to_string();
    let run = w.run("p3", REFACTOR, &refactor_script("// three"), Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(1);
    assert_eq!(git(&w.origin, &["rev-parse", "refs/heads/orch/nightly-refactor"]).trim(), theirs);
    let outcome = &run.report["publish"]["outcomes"][0];
    assert_eq!(outcome["state"], "failed", "{outcome:#}");
    // The agent's work is still there.
    assert!(run.agent("refactor")["commit"].is_string());
}

const CHECKS: &str = r#"
version: 1
name: lint
agents:
  lint:
    prompt: Lint.
    output:
      schema: { type: object, properties: { findings: { type: array, items: { type: object, properties: { path: {}, line: {}, severity: {}, message: {} } } } } }
integrate: none
publish:
  check_run: { name: orch-lint }
  sarif: { category: lint }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn check_run_sends_annotations_in_batches_and_sarif_is_uploaded() {
    let w = World::new("t-check").await;
    let findings: Vec<Value> = (1..=60)
        .map(|i| json!({"path": "src/lib.rs", "line": i, "severity": if i == 1 { "error" } else { "warning" }, "message": format!("finding {i}")}))
        .collect();
    let run = w
        .run(
            "c1",
            CHECKS,
            &agent_findings_script("lint", json!(findings), "Sixty findings."),
            Some(TOKEN),
            &["--publish", "on"],
        )
        .await;
    run.expect_code(0);
    let checks = w.gh.check_runs(REPO);
    assert_eq!(checks.len(), 1);
    assert_eq!(checks[0].name, "orch-lint");
    assert_eq!(checks[0].head_sha, w.head);
    assert_eq!(checks[0].annotations.len(), 60);
    assert_eq!(checks[0].annotation_requests, 2);
    assert_eq!(checks[0].conclusion.as_deref(), Some("failure"));
    let uploads = w.gh.sarif_uploads(REPO);
    assert_eq!(uploads.len(), 1);
    assert_eq!(uploads[0].commit_sha, w.head);
    let results = uploads[0].sarif["runs"][0]["results"].as_array().unwrap();
    assert_eq!(results.len(), 60);
    assert_eq!(results[0]["level"], "error");
    assert_eq!(results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"], "src/lib.rs");
}

/// The SARIF log that a check-run workflow uploads for `findings`.
pub(crate) async fn sarif_log_of_a_run(findings: Value) -> Value {
    let w = World::new("t-sarif").await;
    let run = w
        .run("s1", CHECKS, &agent_findings_script("lint", findings, "Findings."), Some(TOKEN), &["--publish", "on"])
        .await;
    run.expect_code(0);
    let uploads = w.gh.sarif_uploads(REPO);
    assert_eq!(uploads.len(), 1);
    uploads[0].sarif.clone()
}

#[tokio::test(flavor = "multi_thread")]
async fn dry_run_writes_the_requests_and_sends_no_write() {
    let w = World::new("t-dry").await;
    let script = findings_script(review_findings(), "Answer.");
    let run = w.run("d1", REVIEW, &script, None, &[]).await;
    run.expect_code(0);
    assert!(w.gh.writes().is_empty(), "{:#?}", w.gh.writes());
    let planned: Value = serde_json::from_str(&std::fs::read_to_string(run.out.join("publish.json")).unwrap()).unwrap();
    let requests = planned["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 1, "{planned:#}");
    assert_eq!(requests[0]["method"], "POST");
    assert!(requests[0]["url"].as_str().unwrap().ends_with("/repos/acme/app/pulls/7/reviews"));
    assert_eq!(run.report["publish"]["mode"], "dry-run");
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("publish.json"), "{md}");
    // The event names no base: the review says its lines are unknown, and how to name one.
    let detail = run.report["publish"]["outcomes"][0]["detail"].as_str().unwrap_or_default().to_owned();
    assert!(detail.contains("4 inline comment(s)") && detail.contains("--diff-base"), "{detail}");
    // --diff-base names it: `main` is the head here, so no line is changed and every
    // finding goes to the body.
    let run = w.run("d2", REVIEW, &script, None, &["--diff-base", "main"]).await;
    run.expect_code(0);
    let detail = run.report["publish"]["outcomes"][0]["detail"].as_str().unwrap_or_default().to_owned();
    assert_eq!(detail, "0 inline comment(s), 4 finding(s) in the body", "{:#}", run.report["publish"]);
}

/// Where each finding of a review went: the inline comments as sent, and the body.
fn decisions(review: &Value) -> (Value, String) {
    (review["comments"].clone(), review["body"].as_str().unwrap_or_default().to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_without_a_token_lays_the_review_out_as_the_live_run_does() {
    let w = World::new("t-exact").await;
    // The pull request's base has the old file and its head the new one, so the local
    // `base...head` diff is the patch the fake GitHub serves for it.
    let lib = w.fx.repo.join("src/lib.rs");
    std::fs::write(&lib, "fn a() {}\nfn b() {}\nfn d() {}\n").unwrap();
    git(&w.fx.repo, &["commit", "-q", "-am", "the base"]);
    let base = git(&w.fx.repo, &["rev-parse", "HEAD"]).trim().to_string();
    std::fs::write(&lib, "fn a() {}\nfn b() -> u8 { 1 }\nfn c() {}\nfn d() {}\n").unwrap();
    git(&w.fx.repo, &["commit", "-q", "-am", "the change"]);
    let head = git(&w.fx.repo, &["rev-parse", "HEAD"]).trim().to_string();
    w.gh.add_pull(REPO, PullSpec::new(8, &head).file("src/lib.rs", PATCH));
    std::fs::write(
        &w.event,
        json!({"pull_request": {"number": 8, "head": {"sha": head, "repo": {"full_name": REPO}},
                "base": {"sha": base, "repo": {"full_name": REPO}}},
                "repository": {"default_branch": "main"}})
        .to_string(),
    )
    .unwrap();
    let mut findings = review_findings();
    // A context line of the hunk takes a comment too; a range that leaves the hunk does not.
    findings.as_array_mut().unwrap().extend([
        json!({"path": "src/lib.rs", "line": 1, "severity": "note", "message": "a context line"}),
        json!({"path": "src/lib.rs", "line": 4, "end_line": 9, "severity": "note", "message": "runs off the hunk"}),
    ]);
    let script = findings_script(findings, "Answer.");

    let dry = w.run("x1", REVIEW, &script, None, &[]).await;
    dry.expect_code(0);
    assert!(w.gh.writes().is_empty(), "{:#?}", w.gh.writes());
    let planned: Value = serde_json::from_str(&std::fs::read_to_string(dry.out.join("publish.json")).unwrap()).unwrap();
    let (dry_comments, dry_body) = decisions(&planned["requests"][0]["body"]);

    let live = w.run("x2", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    live.expect_code(0);
    let reviews = w.gh.reviews(REPO, 8);
    assert_eq!(reviews.len(), 1, "GitHub took no review: {:#}", live.report["publish"]);
    let review = serde_json::to_value(&reviews[0]).unwrap();
    let (live_comments, live_body) = decisions(&review);

    assert_eq!(dry_comments, live_comments, "the dry run placed other comments inline than the live run");
    assert_eq!(dry_body, live_body, "the dry run's body lists other findings than the live run's");
    let places: Vec<(u64, Option<u64>)> = live_comments
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["line"].as_u64().unwrap(), c["start_line"].as_u64()))
        .collect();
    assert_eq!(places, [(2, None), (4, Some(3)), (1, None)], "{live_comments:#}");
    for off in ["`src/lib.rs:40`", "`README.md:1`", "`src/lib.rs:4-9`"] {
        assert!(live_body.contains(off), "{off} is not in the body: {live_body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn published_text_is_inert_in_the_dry_run_requests() {
    let w = World::new("t-inert").await;
    let findings = json!([
        {"path": "src/lib.rs", "line": 2, "severity": "error", "message": "cc &commat;octocat and &#x40;org/team"},
        {"path": "src/lib.rs", "line": 40, "severity": "note", "message": "off the diff, cc &#64;hubot <!-- hidden -->"}
    ]);
    let answer = "Fine &#064;octocat. <!-- orch:pr-review --> <!--hidden--> <?x ?> <!DOCTYPE y> -->";
    let run = w.run("inert", REVIEW, &findings_script(findings, answer), None, &[]).await;
    run.expect_code(0);
    let planned = std::fs::read_to_string(run.out.join("publish.json")).unwrap();
    let planned: Value = serde_json::from_str(&planned).unwrap();
    let request = &planned["requests"][0];
    let body = request["body"]["body"].as_str().unwrap_or_default();
    assert!(body.contains("Fine @\u{2060}octocat"), "{request:#}");
    assert!(body.contains("cc @\u{2060}hubot"), "{request:#}");
    // Only orch's own marker is a live comment, and it is the last line.
    assert_eq!(body.matches("<!--").count(), 1, "{body}");
    let last = body.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("<!-- orch:pr-review:review:") && last.ends_with(" -->"), "{body}");
    assert!(!body.contains("<?") && !body.contains("<!D"), "{body}");
    let inline = request["body"]["comments"][0]["body"].as_str().unwrap_or_default();
    assert!(inline.contains("cc @\u{2060}octocat and @\u{2060}org/team"), "{request:#}");
    let all = request.to_string();
    for mention in ["&commat;", "&#x40;", "&#64;", "&#064;"] {
        assert!(!all.contains(mention), "{mention} left in {all}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_name_the_output_status_and_permission_and_keep_the_work() {
    let w = World::new("t-fail").await;
    let script = findings_script(review_findings(), "Answer.");
    // 403: a read-only token.
    let run = w.run("f1", REVIEW, &script, Some("ghs_readonly"), &["--publish", "on"]).await;
    run.expect_code(1);
    let o = &run.report["publish"]["outcomes"][0];
    assert_eq!(
        (o["output"].as_str(), o["state"].as_str(), o["http_status"].as_u64()),
        (Some("review"), Some("failed"), Some(403)),
        "{o:#}"
    );
    assert!(o["detail"].as_str().unwrap().contains("pull-requests: write"), "{o:#}");
    assert!(run.stderr.contains("pull-requests: write"), "{}", run.stderr);
    assert!(run.agent("review")["output"]["findings"].is_array());
    // 401: a token GitHub does not know.
    let run = w.run("f2", REVIEW, &script, Some("ghs_unknown"), &["--publish", "on"]).await;
    run.expect_code(1);
    assert_eq!(run.report["publish"]["outcomes"][0]["http_status"], 401);
    // 422 from GitHub.
    w.gh.inject(Fault::new("POST", "/pulls/7/reviews", 422));
    let run = w.run("f3", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(1);
    assert_eq!(run.report["publish"]["outcomes"][0]["http_status"], 422);
    // A rate limit with retry-after is retried, then the review lands.
    w.gh.inject(Fault::new("POST", "/pulls/7/reviews", 429).retry_after("1"));
    let run = w.run("f4", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    assert_eq!(w.gh.reviews(REPO, 7).len(), 1);
    // 404: the event names a pull request that does not exist.
    let event = w.fx.write("event404.json", &json!({"pull_request": {"number": 99, "head": {"sha": w.head, "repo": {"full_name": REPO}}, "base": {"repo": {"full_name": REPO}}}}).to_string());
    let w404 = World { event, ..w };
    let run = w404.run("f5", REVIEW, &script, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(1);
    assert_eq!(run.report["publish"]["outcomes"][0]["http_status"], 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn fork_pull_requests_say_publishing_is_impossible() {
    let w = World::new("t-fork").await;
    let event = w.fx.write("fork.json", &json!({"pull_request": {"number": 7, "head": {"sha": w.head, "repo": {"full_name": "someone/app"}}, "base": {"repo": {"full_name": REPO}}}}).to_string());
    let w = World { event, ..w };
    let run = w
        .run("k1", REVIEW, &findings_script(review_findings(), "Answer."), Some("ghs_readonly"), &["--publish", "on"])
        .await;
    run.expect_code(0);
    assert!(w.gh.writes().is_empty());
    let o = &run.report["publish"]["outcomes"][0];
    assert_eq!(o["state"], "skipped");
    assert!(o["detail"].as_str().unwrap().contains("fork"), "{o:#}");
}

const LEAK: &str = r#"
version: 1
name: leak
agents:
  snoop:
    prompt: Look around.
    tools: [Bash]
integrate: none
publish:
  comment: {}
"#;

#[tokio::test(flavor = "multi_thread")]
async fn the_token_reaches_no_sandbox_and_no_transcript() {
    let w = World::new("t-leak").await;
    let script = "version: 1\nagents:\n  snoop:\n    - tool_calls: [{name: Bash, input: {command: \"env; cat /proc/$PPID/environ 2>/dev/null | tr '\\\\0' '\\\\n'\"}}]\n    - text: Done.\n";
    let run = w.run("l1", LEAK, script, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);
    assert_eq!(w.gh.comments(REPO, 7).len(), 1);
    let transcript = std::fs::read_to_string(run.out.join("transcripts/snoop.jsonl")).unwrap();
    assert!(
        transcript.contains("GITHUB_REPOSITORY") || transcript.contains("PATH="),
        "the probe did not run: {transcript}"
    );
    assert_no_token(&run.out);
    assert!(!run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN));
}

fn assert_no_token(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_no_token(&path);
        } else if let Ok(bytes) = std::fs::read(&path) {
            assert!(!String::from_utf8_lossy(&bytes).contains(TOKEN), "the token is in {}", path.display());
        }
    }
}

#[test]
fn validate_warns_when_no_output_can_produce_findings() {
    let fx = Fixture::new("t-validate", &[("a.txt", "a\n")]);
    let path = fx.write("w.yaml", "version: 1\nname: w\nagents:\n  a: { prompt: Look. }\npublish:\n  check_run: {}\n");
    let out = orch().arg("validate").arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("warning:") && stderr.contains("no agent's `output.schema`"), "{stderr}");
    let path = fx.write(
        "bad.yaml",
        "version: 1\nname: w\nagents:\n  a: { prompt: Look. }\npublish:\n  review: { event: APPROVE }\n",
    );
    let out = orch().arg("validate").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_run_updates_the_check_run_and_replaces_the_sarif_analysis() {
    let w = World::new("t-rerun-check").await;
    let findings =
        |lines: std::ops::RangeInclusive<u64>| -> Value {
            json!(lines
            .map(|i| json!({"path": "src/lib.rs", "line": i, "severity": if i == 1 { "error" } else { "warning" },
                            "message": format!("finding {i}")}))
            .collect::<Vec<_>>())
        };
    let first = agent_findings_script("lint", findings(1..=60), "Sixty findings.");
    w.run("c1", CHECKS, &first, Some(TOKEN), &["--publish", "on"]).await.expect_code(0);
    // The second run on the same head: finding 1 is fixed, finding 61 is new.
    let second = agent_findings_script("lint", findings(2..=61), "Sixty findings again.");
    let run = w.run("c2", CHECKS, &second, Some(TOKEN), &["--publish", "on"]).await;
    run.expect_code(0);

    let checks = w.gh.check_runs(REPO);
    assert_eq!(checks.len(), 1, "a second check run was created: {checks:#?}");
    let check = &checks[0];
    assert_eq!(check.external_id.as_deref(), Some("orch:lint"));
    assert!(check.updates >= 1, "{check:#?}");
    assert_eq!(check.conclusion.as_deref(), Some("success"), "the error is gone");
    assert!(check.summary.starts_with("Sixty findings again."), "{}", check.summary);
    assert!(check.summary.contains("1 annotation(s) from an earlier run"), "{}", check.summary);
    // Every finding annotated once: the 59 kept ones were not sent again.
    let mut lines: Vec<u64> = check.annotations.iter().map(|a| a["start_line"].as_u64().unwrap()).collect();
    lines.sort_unstable();
    assert_eq!(lines, (1..=61).collect::<Vec<_>>(), "annotations duplicated or lost");
    let outcome = run.report["publish"]["outcomes"].as_array().unwrap().iter().find(|o| o["output"] == "check_run");
    assert_eq!(outcome.unwrap()["state"], "updated");

    // SARIF: each run uploads, under the same category; the second analysis replaces
    // the first, and a finding found again keeps its fingerprint.
    let uploads = w.gh.sarif_uploads(REPO);
    assert_eq!(uploads.len(), 2);
    let analyses = w.gh.sarif_analyses(REPO);
    assert_eq!(analyses.len(), 1, "{analyses:#?}");
    assert_eq!((analyses[0].category.as_str(), analyses[0].id.as_str()), ("lint", uploads[1].id.as_str()));
    let fingerprint = |upload: usize, line: u64| {
        uploads[upload].sarif["runs"][0]["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["locations"][0]["physicalLocation"]["region"]["startLine"] == line)
            .map(|r| r["partialFingerprints"]["orchFinding/v1"].clone())
            .unwrap()
    };
    assert!(fingerprint(0, 30).is_string());
    assert_eq!(fingerprint(0, 30), fingerprint(1, 30));
    assert_ne!(fingerprint(1, 30), fingerprint(1, 31));
}

const SHARDED: &str = r#"
version: 1
name: sharded report
agents:
  one: { prompt: Look at one. }
  two: { prompt: Look at two. }
integrate: none
publish:
  comment: { sticky: true }
  issue: { title: "Sharded report", labels: [orch] }
"#;

const SHARDED_SCRIPT: &str = "version: 1\nagents:\n  one:\n    - text: One is fine.\n  two:\n    - text: Two is fine.\n  synthesis:\n    - text: Both are fine.\n    - text: Both are still fine.\n";

#[tokio::test(flavor = "multi_thread")]
async fn shards_leave_publishing_to_merge_which_publishes_like_run() {
    let w = World::new("t-merge").await;
    let mut dirs = Vec::new();
    for k in 1..=2 {
        let name = format!("m{k}");
        let run = w
            .run(&name, SHARDED, SHARDED_SCRIPT, Some(TOKEN), &["--publish", "on", "--shard", &format!("{k}/2")])
            .await;
        run.expect_code(0);
        assert!(run.stderr.contains("publish skipped"), "{}", run.stderr);
        dirs.push(name);
    }
    assert!(w.gh.writes().is_empty(), "a shard published: {:#?}", w.gh.writes());
    let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
    let workflow = w.fx.dir.path().join("workflow.yaml");
    let workflow = workflow.to_str().unwrap();

    // --publish without --workflow has nothing to publish from: a usage error.
    let run = w.merge("no-workflow", &dirs, SHARDED_SCRIPT, Some(TOKEN), &["--publish", "on"]).await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    // Off: nothing is sent.
    let run = w.merge("off", &dirs, SHARDED_SCRIPT, Some(TOKEN), &["--workflow", workflow, "--publish", "off"]).await;
    run.expect_code(0);
    assert!(w.gh.writes().is_empty(), "{:#?}", w.gh.writes());
    // Dry run: the requests are listed, nothing is sent.
    let run =
        w.merge("dry", &dirs, SHARDED_SCRIPT, Some(TOKEN), &["--workflow", workflow, "--publish", "dry-run"]).await;
    run.expect_code(0);
    assert!(w.gh.writes().is_empty(), "{:#?}", w.gh.writes());
    let planned: Value = serde_json::from_str(&std::fs::read_to_string(run.out.join("publish.json")).unwrap()).unwrap();
    assert_eq!(planned["requests"].as_array().unwrap().len(), 2, "{planned:#}");

    // On: the merged answer (the one synthesis) is the comment and the issue.
    let run = w.merge("on", &dirs, SHARDED_SCRIPT, Some(TOKEN), &["--workflow", workflow, "--publish", "on"]).await;
    run.expect_code(0);
    assert_eq!(run.report["publish"]["mode"], "on", "{:#}", run.report["publish"]);
    let comments = w.gh.comments(REPO, 7);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert!(comments[0].body.starts_with("Both are fine."), "{}", comments[0].body);
    assert_eq!(w.gh.issues(REPO).len(), 1);

    // Merging again edits the same comment and issue.
    let run = w.merge("again", &dirs, SHARDED_SCRIPT, Some(TOKEN), &["--workflow", workflow, "--publish", "on"]).await;
    run.expect_code(0);
    let comments = w.gh.comments(REPO, 7);
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(comments[0].updates, 1);
    let issues = w.gh.issues(REPO);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_eq!(issues[0].updates, 1);
    let states: Vec<&str> =
        run.report["publish"]["outcomes"].as_array().unwrap().iter().map(|o| o["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["updated", "updated"]);

    // A failed output fails the merge (exit 1), as it fails a run.
    let run =
        w.merge("ro", &dirs, SHARDED_SCRIPT, Some("ghs_readonly"), &["--workflow", workflow, "--publish", "on"]).await;
    run.expect_code(1);
    assert_eq!(run.report["publish"]["outcomes"][0]["http_status"], 403);
}

/// The recipes of `examples/github/`, end to end through the binary: a copy of
/// `examples/` committed in a repository whose `origin` is a local bare repository, the
/// environment of a GitHub Actions step (`GITHUB_ACTIONS=true` and a token, so
/// publishing is on by default, as in the recipes), and the fake server.
struct Recipe {
    dir: tempfile::TempDir,
    repo: PathBuf,
    origin: PathBuf,
    head: String,
    gh: FakeGitHub,
}

impl Recipe {
    async fn new() -> Recipe {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        let status = std::process::Command::new("cp").arg("-r").arg(root.join("examples")).arg(&repo).status().unwrap();
        assert!(status.success());
        git(&repo, &["init", "-q", "-b", "main"]);
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "fixture"]);
        let origin = dir.path().join("origin.git");
        git(dir.path(), &["init", "-q", "--bare", "-b", "main", origin.to_str().unwrap()]);
        git(&repo, &["remote", "add", "origin", origin.to_str().unwrap()]);
        git(&repo, &["push", "-q", "origin", "main"]);
        let head = git(&repo, &["rev-parse", "HEAD"]).trim().to_string();
        let gh = FakeGitHub::start().await;
        gh.add_token(TOKEN, Access::Write);
        Recipe { dir, repo, origin, head, gh }
    }

    /// `orch run examples/NAME/workflow.yaml` as the recipe's step runs it.
    async fn run(&self, name: &str, run_id: &str, event_name: &str, event: &Value, extra: &[&str]) -> Run {
        let out = self.dir.path().join(format!("out-{run_id}"));
        let event_path = self.dir.path().join(format!("event-{run_id}.json"));
        std::fs::write(&event_path, event.to_string()).unwrap();
        let mut cmd = orch();
        cmd.current_dir(&self.repo)
            .args(["run", &format!("examples/{name}/workflow.yaml"), "--provider", "scripted"])
            .args(["--script", &format!("examples/{name}/script.yaml"), "--run-id", run_id, "--out"])
            .arg(&out)
            .args(extra)
            .env("GITHUB_ACTIONS", "true")
            .env("GITHUB_STEP_SUMMARY", self.dir.path().join(format!("summary-{run_id}.md")))
            .env("GITHUB_OUTPUT", self.dir.path().join(format!("output-{run_id}.txt")))
            .env("GITHUB_API_URL", self.gh.url())
            .env("GITHUB_REPOSITORY", REPO)
            .env("GITHUB_EVENT_NAME", event_name)
            .env("GITHUB_EVENT_PATH", &event_path)
            .env("GITHUB_SHA", &self.head)
            .env("GITHUB_REF", "refs/heads/main")
            .env("GITHUB_TOKEN", TOKEN)
            .env_remove("ORCH_GITHUB_TOKEN");
        if event_name == "pull_request" {
            // Actions sets it for pull requests: orch reads the repository's configuration there.
            cmd.env("GITHUB_BASE_REF", "main");
        }
        let output = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        Run::from_output(&out, output)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_pr_review_recipe_posts_one_review_and_a_rerun_posts_nothing_new() {
    let r = Recipe::new().await;
    let recipe = std::fs::read_to_string(r.repo.join("examples/github/pr-review.yml")).unwrap();
    assert!(recipe.contains("pull-requests: write") && recipe.contains("GITHUB_TOKEN"), "{recipe}");
    // The pull request changes greet.py line 2 and sums.py line 3; sums.py line 2 is
    // outside its diff.
    r.gh.add_pull(
        REPO,
        PullSpec::new(7, &r.head)
            .file(
                "examples/refactor/fixture/greet.py",
                "@@ -1,2 +1,2 @@\n def greet(name):\n-    pass\n+    print \"hello, %s\" % name",
            )
            .file("examples/refactor/fixture/sums.py", "@@ -3 +3 @@\n-def total():\n+def total(xs):"),
    );
    let event = json!({"pull_request": {"number": 7, "head": {"sha": r.head, "repo": {"full_name": REPO}},
                       "base": {"sha": r.head, "repo": {"full_name": REPO}}}});
    let junit = r.dir.path().join("junit.xml");
    let extra = ["--base", &r.head, "--junit", junit.to_str().unwrap()];
    let run = r.run("review", "rv1", "pull_request", &event, &extra).await;
    run.expect_code(0);
    assert_eq!(run.report["publish"]["mode"], "on", "publishing is on by default under Actions with a token");
    let reviews = r.gh.reviews(REPO, 7);
    assert_eq!(reviews.len(), 1, "{:#?}", r.gh.requests());
    let lines: Vec<(String, u64)> = reviews[0]
        .comments
        .iter()
        .map(|c| (c["path"].as_str().unwrap().to_string(), c["line"].as_u64().unwrap()))
        .collect();
    assert_eq!(
        lines,
        [("examples/refactor/fixture/greet.py".to_string(), 2), ("examples/refactor/fixture/sums.py".to_string(), 3)]
    );
    assert!(reviews[0].body.contains("Verdict"), "the synthesis is the body: {}", reviews[0].body);
    assert!(reviews[0].body.contains("`examples/refactor/fixture/sums.py:2`"), "{}", reviews[0].body);
    let writes = r.gh.writes().len();

    let again = r.run("review", "rv2", "pull_request", &event, &extra).await;
    again.expect_code(0);
    assert_eq!(r.gh.reviews(REPO, 7).len(), 1, "a re-run posted a second review");
    assert_eq!(r.gh.writes().len(), writes, "a re-run wrote something: {:#?}", r.gh.writes());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_nightly_refactor_recipe_opens_one_pr_and_one_issue_then_updates_them() {
    let r = Recipe::new().await;
    let event = json!({"schedule": "17 2 * * *", "repository": {"default_branch": "main"}});
    let run = r.run("refactor", "n1", "schedule", &event, &[]).await;
    run.expect_code(0);
    let pulls = r.gh.pulls(REPO);
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    assert_eq!((pulls[0].head_ref.as_str(), pulls[0].base_ref.as_str()), ("orch/py3-prints", "main"));
    assert_eq!(pulls[0].labels, ["orch"]);
    let integration = run.report["integration"]["merge"]["branch"].as_str().unwrap().to_string();
    let pushed = git(&r.origin, &["rev-parse", "refs/heads/orch/py3-prints"]).trim().to_string();
    assert_eq!(pushed, git(&r.repo, &["rev-parse", &integration]).trim());
    let ported = git(&r.origin, &["show", "orch/py3-prints:examples/refactor/fixture/greet.py"]);
    assert!(ported.contains("print(\"hello, %s\" % name)"), "{ported}");
    let issues = r.gh.issues(REPO);
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_eq!(issues[0].title, "Python 3 port: nightly report");

    // The next night: the same pull request and issue are updated, nothing is added.
    let run = r.run("refactor", "n2", "schedule", &event, &[]).await;
    run.expect_code(0);
    let pulls = r.gh.pulls(REPO);
    assert_eq!(pulls.len(), 1, "a second pull request: {pulls:#?}");
    assert_eq!(pulls[0].updates, 1);
    let issues = r.gh.issues(REPO);
    assert_eq!(issues.len(), 1, "a second issue: {issues:#?}");
    assert_eq!(issues[0].updates, 1);
    let integration = run.report["integration"]["merge"]["branch"].as_str().unwrap().to_string();
    let pushed = git(&r.origin, &["rev-parse", "refs/heads/orch/py3-prints"]).trim().to_string();
    assert_eq!(pushed, git(&r.repo, &["rev-parse", &integration]).trim(), "the second night's result was pushed");
}
