//! Tree synthesis end to end: `orch run` with 41 agents and `synthesis.group_size`
//! against the mock model server, which records every request. The group requests
//! stay within the budget, the tree is in report.json, report.md and report.html,
//! and a failed agent's reason reaches the final request verbatim.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use orch_testkit::mock::{MockServer, Step};
use serde_json::Value;
use support::{Fixture, Run, orch};

/// The text of a request's first user message (a string or text blocks).
fn first_user_text(request: &orch_testkit::RecordedRequest) -> String {
    let content = &request.messages()[0]["content"];
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("\n"),
        other => panic!("unexpected content {other}"),
    }
}

async fn run_with_mock(fx: &Fixture, workflow: &str, mock: &MockServer) -> Run {
    fx.run_off_runtime(fx.mock_command(workflow, &mock.url())).await
}

/// Forty fixers and one agent whose answer never matches its schema (so it fails).
fn workflow(synthesis: &str) -> String {
    let items: Vec<String> = (1..=40).map(|i| i.to_string()).collect();
    format!(
        "version: 1\nname: batch\ndescription: Fix every file.\nconcurrency: 8\ndefaults:\n  tools: [LS]\n  \
         limits: {{ max_turns: 4, timeout: 2m }}\nagents:\n  fix:\n    for_each: [{}]\n    prompt: Fix file {{{{ item }}}}.\n  \
         strict:\n    prompt: Answer in JSON.\n    output:\n      schema: {{ type: object, required: [done] }}\n\
         integrate: none\n{synthesis}",
        items.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_size_synthesizes_in_a_tree_and_carries_failures_verbatim() {
    let fx = Fixture::new("t-tree", &[("a.txt", "a\n")]);
    let mock = MockServer::start().await;
    // Agents (their requests offer LS) answer with a report of about 2 KB; every
    // request without tools (synthesis) gets the group answer.
    mock.set_by_turn(vec![Step::text(format!("REPORT: fixed it. {}", "detail ".repeat(280)))]);
    mock.set_toolless(Some(Step::text("CONDENSED-ANSWER")));
    let run = run_with_mock(&fx, &workflow("synthesis:\n  group_size: 8\n"), &mock).await;
    // The strict agent failed, so the run failed; synthesis still ran.
    assert_eq!(run.agent("strict")["status"], "failed", "{:#}", run.agent("strict"));
    let reason = run.agent("strict")["reason"].as_str().unwrap().to_string();
    let s = &run.report["synthesis"];
    assert_eq!(s["status"], "succeeded", "{s:#}");
    let levels = s["tree"]["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 1, "{s:#}");
    let groups = levels[0]["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 6, "41 agents in groups of 8");
    assert_eq!(groups[0]["members"].as_array().unwrap().len(), 8);
    assert_eq!(groups[0]["members"][0], "fix/1");
    assert_eq!(groups[5]["members"], serde_json::json!(["strict"]));
    let budget = s["budget_tokens"].as_u64().unwrap();
    assert_eq!(budget, 100_000, "half of claude-sonnet-4-5's window");

    let synthesis: Vec<_> = mock.requests().into_iter().filter(|r| r.tools().is_empty()).collect();
    assert_eq!(synthesis.len(), 7, "six groups and the final request");
    let (last, level1) = synthesis.split_last().unwrap();
    for r in level1 {
        let text = first_user_text(r);
        assert!(text.contains("slice of a larger batch"), "not a group request:\n{text}");
        let tokens = (r.body.len() as u64).div_ceil(4);
        assert!(tokens <= budget, "a group request of {tokens} tokens");
        assert!(text.matches("## Agent `").count() <= 8);
    }
    let last = first_user_text(last);
    assert_eq!(last.matches("CONDENSED-ANSWER").count(), 6, "{last}");
    assert!(last.contains(&format!("- `strict` (failed): {}", reason.trim())), "the reason is not verbatim:\n{last}");
    assert!(!last.contains("REPORT: fixed it"), "the final request holds raw reports");
    // The tree is on disk and in every report.
    assert!(run.out.join("synthesis/L1-G6-prompt.md").is_file());
    assert!(run.out.join("transcripts/synthesis-L1-G1.jsonl").is_file());
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("Synthesized as a tree: 1 level of groups (6 groups)"), "{md}");
    assert!(md.contains("- `L1-G6` (succeeded, "), "{md}");
    let html = std::fs::read_to_string(run.out.join("report.html")).unwrap();
    assert!(html.contains("<code>L1-G6</code>"));
    // report.md lists the failure first.
    let table = md.split("| agent |").nth(1).unwrap();
    assert!(table.lines().nth(2).unwrap().starts_with("| `strict` | failed"), "{table}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_keeps_one_request_when_the_reports_fit() {
    let fx = Fixture::new("t-tree-one", &[("a.txt", "a\n")]);
    let mock = MockServer::start().await;
    mock.set_by_turn(vec![Step::text("REPORT: short.")]);
    mock.set_toolless(Some(Step::text("ONE-ANSWER")));
    let run = run_with_mock(&fx, &workflow(""), &mock).await;
    let s = &run.report["synthesis"];
    assert_eq!(s["status"], "succeeded", "{s:#}");
    assert!(s.get("tree").is_none(), "{s:#}");
    let synthesis: Vec<_> = mock.requests().into_iter().filter(|r| r.tools().is_empty()).collect();
    assert_eq!(synthesis.len(), 1);
    assert_eq!(first_user_text(&synthesis[0]).matches("## Agent `").count(), 41);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orch_merge_synthesizes_the_shards_in_a_tree() {
    let fx = Fixture::new("t-tree-merge", &[("a.txt", "a\n")]);
    let mock = MockServer::start().await;
    mock.set_by_turn(vec![Step::text("REPORT: fixed.")]);
    mock.set_toolless(Some(Step::text("CONDENSED-ANSWER")));
    let path = fx.write("workflow.yaml", &workflow("synthesis:\n  group_size: 4\n"));
    let mut dirs = Vec::new();
    for k in 1..=2 {
        let out = fx.dir.path().join(format!("shard-{k}"));
        let mut cmd = orch();
        cmd.current_dir(fx.dir.path())
            .env("ANTHROPIC_API_KEY", "test")
            .env("ANTHROPIC_BASE_URL", mock.url())
            .arg("run")
            .arg(&path)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(&out)
            .args(["--run-id", &format!("t-tree-m{k}"), "--shard", &format!("{k}/2")]);
        let done = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        let shard = Run::from_output(&out, done);
        assert!(shard.report["synthesis"].is_null(), "a shard synthesized: {}", shard.stderr);
        dirs.push(out);
    }
    assert!(mock.requests().iter().all(|r| !r.tools().is_empty()), "a shard sent a synthesis request");
    let merged = fx.dir.path().join("merged");
    let mut cmd = orch();
    cmd.current_dir(fx.dir.path())
        .env("ANTHROPIC_API_KEY", "test")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .arg("merge")
        .args(&dirs)
        .arg("--workflow")
        .arg(&path)
        .arg("--out")
        .arg(&merged);
    let done = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let run = Run::from_output(&merged, done);
    assert_eq!(run.report["agents"].as_array().map(Vec::len), Some(41), "{}", run.stderr);
    let levels = run.report["synthesis"]["tree"]["levels"].as_array().unwrap();
    // 41 reports in groups of 4: 11 groups, then 3 groups of their answers, then the final request.
    let sizes: Vec<usize> = levels.iter().map(|l| l["groups"].as_array().unwrap().len()).collect();
    assert_eq!(sizes, [11, 3], "{:#}", run.report["synthesis"]);
    assert_eq!(levels[1]["groups"][0]["members"], serde_json::json!(["L1-G1", "L1-G2", "L1-G3", "L1-G4"]));
    let reason = run.agent("strict")["reason"].as_str().unwrap().to_string();
    let synthesis: Vec<_> = mock.requests().into_iter().filter(|r| r.tools().is_empty()).collect();
    assert_eq!(synthesis.len(), 15);
    let last = first_user_text(synthesis.last().unwrap());
    assert!(last.contains(&format!("- `strict` (failed): {}", reason.trim())), "{last}");
    assert_eq!(last.matches("## Group `L2-G").count(), 3, "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_context_window_splits_by_budget_and_every_request_fits() {
    let fx = Fixture::new("t-tree-window", &[("a.txt", "a\n")]);
    let mock = MockServer::start().await;
    mock.set_by_turn(vec![Step::text(format!("REPORT: fixed it. {}", "detail ".repeat(280)))]);
    mock.set_toolless(Some(Step::text("CONDENSED-ANSWER")));
    // A 40,000-token window: a budget of 20,000 tokens, and 41 reports of about 2 KB
    // (some 23,000 tokens together) do not fit one request.
    let workflow = workflow("").replace("defaults:\n", "defaults:\n  model_settings: { context_window: 40000 }\n");
    let run = run_with_mock(&fx, &workflow, &mock).await;
    let s = &run.report["synthesis"];
    assert_eq!(s["status"], "succeeded", "{s:#}\n{}", run.stderr);
    assert_eq!(s["budget_tokens"], 20_000);
    let levels = s["tree"]["levels"].as_array().unwrap();
    assert!(levels[0]["groups"].as_array().unwrap().len() >= 2, "{s:#}");
    let synthesis: Vec<_> = mock.requests().into_iter().filter(|r| r.tools().is_empty()).collect();
    assert!(synthesis.len() >= 3);
    for r in &synthesis {
        let tokens = (r.body.len() as u64).div_ceil(4);
        assert!(tokens <= 20_000, "a synthesis request of {tokens} tokens");
    }
    let last = first_user_text(synthesis.last().unwrap());
    let reason = run.agent("strict")["reason"].as_str().unwrap().to_string();
    assert!(last.contains(&format!("- `strict` (failed): {}", reason.trim())), "{last}");
}
