//! `orch run` in CI, through the real binary: GitHub Actions output in a simulated
//! environment, the `--json` event stream, signals during model streaming and in the
//! container backend, record and replay, sharding and merging, and the nextest-style
//! flags (`--only`, `--max-fail`, `--resume`, `--junit`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::{Duration, Instant};

use orch_testkit::mock::{MockServer, Step, Turn};
use serde_json::Value;
use support::{Fixture, Run, orch, processes_left};

const SECRET: &str = "sk-test-Zq8v1SECRETVALUE";

/// `orch run` like `Fixture::command`, into `out` with the run id `run_id`.
fn command_at(
    fx: &Fixture,
    workflow: &str,
    script: &str,
    out: &std::path::Path,
    run_id: &str,
) -> std::process::Command {
    let workflow = fx.write("workflow.yaml", workflow);
    let script = fx.write("script.yaml", script);
    let mut cmd = orch();
    cmd.current_dir(fx.dir.path())
        .arg("run")
        .arg(&workflow)
        .args(["--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(out)
        .args(["--run-id", run_id]);
    cmd
}

fn three_agents() -> (&'static str, &'static str) {
    let workflow = r#"
version: 1
name: ci-mix
description: Exercise the CI output.
concurrency: 3
agents:
  good:
    prompt: Write the file.
    tools: [Write]
  bad:
    prompt: Answer in JSON.
    tools: []
    output: { schema: { type: object, required: [ok] } }
  slow:
    prompt: Keep going.
    tools: [Read]
    limits: { max_turns: 1 }
"#;
    let script = r#"
version: 1
agents:
  good:
    - tool_calls: [{name: Write, input: {file_path: out.txt, content: "hello\n"}}]
    - text: Wrote out.txt.
  bad:
    - text: "not json, see src/a.rs:1"
    - text: "still not json, see src/a.rs:1"
    - text: "never json, see src/a.rs:1"
  slow:
    - tool_calls: [{name: Read, input: {file_path: src/a.rs}}]
  synthesis:
    - text: One agent wrote out.txt; one failed; one stopped early.
"#;
    (workflow, script)
}

#[test]
fn github_actions_gets_a_summary_outputs_annotations_groups_and_masks() {
    let fx = Fixture::new("t-gha", &[("src/a.rs", "fn a() {}\n")]);
    let summary = fx.write("summary.md", "earlier step\n");
    let outputs = fx.write("outputs.txt", "");
    let (workflow, script) = three_agents();
    let out = fx
        .command(workflow, script)
        .env("GITHUB_ACTIONS", "true")
        .env("CI", "true")
        .env("GITHUB_STEP_SUMMARY", &summary)
        .env("GITHUB_OUTPUT", &outputs)
        .env("GITHUB_REPOSITORY", "octo/demo")
        .env("GITHUB_SERVER_URL", "https://github.example")
        .env("ANTHROPIC_API_KEY", SECRET)
        .output()
        .unwrap();
    let run = Run::from_output(&fx.out, out);
    run.expect_code(1);

    let summary = std::fs::read_to_string(&summary).unwrap();
    assert!(summary.starts_with("earlier step\n## orch: `ci-mix` failed"), "{summary}");
    assert!(summary.contains("| agent | status | turns | tokens | cost | changed files | branch |"), "{summary}");
    let good = fx.branch("good");
    assert!(summary.contains(&format!("[`{good}`](https://github.example/octo/demo/tree/{good})")), "{summary}");
    assert!(summary.contains("| `bad` | failed: its final answer does not match output.schema"), "{summary}");
    assert!(summary.contains("| `slow` | partial"), "{summary}");
    assert!(summary.contains("`out.txt`"), "{summary}");
    // Model text sits in a code block that nothing inside it can close.
    assert!(summary.contains("### Synthesis (succeeded)\n\n```text\nOne agent wrote out.txt"), "{summary}");

    let outputs = std::fs::read_to_string(&outputs).unwrap();
    assert!(outputs.contains("status=failed\n") && outputs.contains("exit-code=1\n"), "{outputs}");
    assert!(outputs.contains(&format!("branches=[\"{good}\"]\n")), "{outputs}");
    assert!(outputs.contains(&format!("report={}\n", fx.out.join("report.json").display())), "{outputs}");
    let heredoc = outputs.lines().find(|l| l.starts_with("summary<<")).expect("a multiline summary output");
    let delimiter = heredoc.trim_start_matches("summary<<");
    assert!(delimiter.starts_with("ghadelimiter_") && delimiter.len() > 20, "{heredoc}");
    assert!(outputs.contains(&format!("\n{delimiter}\n")), "the heredoc is closed: {outputs}");

    let stderr = &run.stderr;
    let first = stderr.lines().next().unwrap();
    assert_eq!(first, format!("::add-mask::{SECRET}"), "the mask comes before anything else");
    assert_eq!(stderr.matches(SECRET).count(), 1, "the secret appears only in its mask:\n{stderr}");
    assert!(
        stderr.contains("::error title=orch%3A agent bad failed,file=src/a.rs,line=1::its final answer does not match"),
        "{stderr}"
    );
    assert!(stderr.contains("::warning title=orch%3A agent slow partial::"), "{stderr}");
    assert!(stderr.contains("::group::good succeeded"), "{stderr}");
    let group = stderr.split("::group::good succeeded").nth(1).unwrap();
    let group = group.split("::endgroup::").next().unwrap();
    assert!(group.contains("Write out.txt") && group.contains("Wrote out.txt."), "{group}");
    for entry in std::fs::read_dir(&fx.out).unwrap().flatten() {
        if entry.path().is_file() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            assert!(!text.contains(SECRET), "{} holds the secret", entry.path().display());
        }
    }
}

#[test]
fn json_streams_one_event_per_line_and_ends_with_the_report() {
    let fx = Fixture::new("t-json-ci", &[("src/a.rs", "fn a() {}\n")]);
    let workflow = "version: 1\nname: j\nagents:\n  reader:\n    prompt: Read it.\n    tools: [Read]\n";
    let script = r#"
version: 1
agents:
  reader:
    - tool_calls: [{name: Read, input: {file_path: src/a.rs}}]
    - text: It defines a.
"#;
    let run = fx.run(workflow, script, &["--json"]);
    run.expect_code(0);
    let lines: Vec<Value> = run.stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let shape: Vec<String> = lines
        .iter()
        .map(|l| {
            if l["event"]["type"] == "run_finished" {
                return format!("run_finished {}", l["event"]["report"]["status"]);
            }
            let e = &l["event"];
            let detail = match e["type"].as_str().unwrap() {
                "tool_use_started" | "tool_use_finished" => format!(" {}", e["name"].as_str().unwrap()),
                "turn_started" | "assistant_message" => format!(" {}", e["turn"]),
                "terminal" => format!(" {}", e["reason"]["reason"].as_str().unwrap()),
                _ => String::new(),
            };
            format!("{} {}{detail}", l["agent"].as_str().unwrap(), e["type"].as_str().unwrap())
        })
        .collect();
    insta::assert_snapshot!(shape.join("\n"), @r#"
    reader prompt
    reader turn_started 1
    reader usage
    reader assistant_message 1
    reader tool_use_started Read
    reader tool_use_finished Read
    reader turn_started 2
    reader usage
    reader assistant_message 2
    reader terminal completed
    reader agent_finished
    run_finished "succeeded"
    "#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_model_streaming_exits_143_promptly() {
    interrupt_streaming(nix::sys::signal::Signal::SIGTERM, 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_during_model_streaming_exits_130_promptly() {
    interrupt_streaming(nix::sys::signal::Signal::SIGINT, 130).await;
}

async fn interrupt_streaming(signal: nix::sys::signal::Signal, code: i32) {
    let server = MockServer::start().await;
    server.push(Step::Stall);
    let fx = Fixture::new("t-stream-term", &[("a.txt", "a\n")]);
    let workflow = fx.write("workflow.yaml", "version: 1\nname: s\nagents:\n  a:\n    prompt: Think.\n    tools: []\n");
    let mut child = orch()
        .arg("run")
        .arg(&workflow)
        .args(["--provider", "anthropic", "--repo"])
        .arg(&fx.repo)
        .arg("--out")
        .arg(&fx.out)
        .env("ANTHROPIC_BASE_URL", server.url())
        .env("ANTHROPIC_API_KEY", "test")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.requests().is_empty() {
        assert!(Instant::now() < deadline, "the model was never called");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let signalled = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert_eq!(status.code(), Some(code));
    assert!(signalled.elapsed() < Duration::from_secs(3), "took {:?}", signalled.elapsed());
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: vec![], stderr: vec![] });
    assert_eq!(run.report["status"], "interrupted");
    assert_eq!(run.agent("a")["status"], "cancelled");
    assert_eq!(run.agent("a")["terminal"]["during"], "streaming");
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

fn docker_available() -> bool {
    if std::env::var_os("ORCH_SKIP_DOCKER_TESTS").is_some() {
        eprintln!("skipped: ORCH_SKIP_DOCKER_TESTS is set");
        return false;
    }
    let ok = std::process::Command::new("docker").args(["image", "inspect", "orch-test:busybox"]).output();
    assert!(
        ok.is_ok_and(|o| o.status.success()),
        "the container tests need a Docker engine and the image orch-test:busybox: run `bash .ci/docker.sh` \
         (or set ORCH_SKIP_DOCKER_TESTS=1 to skip them)"
    );
    true
}

#[test]
fn sigint_in_the_container_backend_removes_the_container() {
    interrupt_in_a_container("t-ctr-int", nix::sys::signal::Signal::SIGINT, 130);
}

#[test]
fn sigterm_in_the_container_backend_removes_the_container() {
    interrupt_in_a_container("t-ctr-term", nix::sys::signal::Signal::SIGTERM, 143);
}

fn interrupt_in_a_container(run_id: &str, signal: nix::sys::signal::Signal, code: i32) {
    if !docker_available() {
        return;
    }
    let fx = Fixture::new(run_id, &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: ctr
defaults:
  sandbox: { backend: container, image: "orch-test:busybox" }
agents:
  stuck:
    prompt: Wait.
    tools: [Bash]
"#;
    let script = r#"
version: 1
agents:
  stuck:
    - tool_calls: [{name: Bash, input: {command: "echo started > started.txt; sleep 30"}}]
    - text: never
"#;
    let mut child = fx.command(workflow, script).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let marker = fx.out.join("worktrees/stuck/started.txt");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the command never started in the container");
        std::thread::sleep(Duration::from_millis(50));
    }
    let signalled = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(code));
    assert!(signalled.elapsed() < Duration::from_secs(10), "took {:?}", signalled.elapsed());
    let left = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label=orch.run={}", fx.run_id)])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "", "a container of the run is left");
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: vec![], stderr: vec![] });
    assert_eq!(run.report["status"], "interrupted");
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

/// A report with what differs between two runs of the same work taken out.
fn normalized(report: &Value) -> Value {
    let mut r = report.clone();
    let obj = r.as_object_mut().unwrap();
    for key in ["run_id", "started_at", "finished_at", "duration_ms", "run_dir", "timings"] {
        obj.remove(key);
    }
    for a in obj["agents"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        for key in ["duration_ms", "timings", "commit", "branch"] {
            a.remove(key);
        }
    }
    if let Some(fetched) = obj["integration"]["fetched"].as_array_mut() {
        fetched.clear();
    }
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_then_replay_gives_the_same_report_offline() {
    let server = MockServer::start().await;
    let fx = Fixture::new("t-record", &[("src/a.rs", "fn a() {}\n")]);
    let workflow = fx.write(
        "workflow.yaml",
        "version: 1\nname: rr\nconcurrency: 1\nagents:\n  one:\n    prompt: Read and edit.\n    tools: [Read, Write]\n  \
         two:\n    prompt: Just answer.\n    tools: []\n",
    );
    // `one`: read, write, answer; `two`: answer; then synthesis.
    server.push_all([
        Step::Reply(Turn::tool("Read", serde_json::json!({"file_path": "src/a.rs"}))),
        Step::Reply(Turn::tool("Write", serde_json::json!({"file_path": "b.txt", "content": "b\n"}))),
        Step::text("Read a.rs and wrote b.txt."),
        Step::text("Nothing to do."),
        Step::text("Combined: b.txt was written."),
    ]);
    let record = fx.dir.path().join("rec");
    let run_a = |extra: Vec<String>, out: &std::path::Path| {
        let mut cmd = orch();
        cmd.arg("run")
            .arg(&workflow)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(out)
            .args(extra)
            .env("ANTHROPIC_BASE_URL", server.url());
        cmd
    };
    let out_a = fx.dir.path().join("a");
    let mut cmd = run_a(vec!["--record".into(), record.display().to_string()], &out_a);
    cmd.env("ANTHROPIC_API_KEY", "test");
    let a = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let a = Run::from_output(&out_a, a);
    a.expect_code(0);
    assert_eq!(server.requests().len(), 5);
    server.assert_tool_pairing();

    let out_b = fx.dir.path().join("b");
    let mut cmd = run_a(vec!["--replay".into(), record.display().to_string()], &out_b);
    let b = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    let b = Run::from_output(&out_b, b);
    b.expect_code(0);
    assert_eq!(server.requests().len(), 5, "the replay made no model request");
    assert_eq!(normalized(&a.report), normalized(&b.report));
    // The same calls with the same results, once the run directory is named alike.
    let calls = |run: &Run| -> Vec<(String, bool, String)> {
        let dir = run.out.display().to_string();
        run.tool_results("one").into_iter().map(|(n, e, out)| (n, e, out.replace(&dir, "<run>"))).collect()
    };
    assert_eq!(calls(&a), calls(&b));
    assert_eq!(calls(&a).len(), 2);
    assert_eq!(
        std::fs::read(out_a.join("patches/one.patch")).unwrap(),
        std::fs::read(out_b.join("patches/one.patch")).unwrap()
    );

    // A changed prompt is caught at its agent and turn.
    let changed = fx.write(
        "changed.yaml",
        "version: 1\nname: rr\nconcurrency: 1\nagents:\n  one:\n    prompt: Read and edit more.\n    tools: [Read, Write]\n  \
         two:\n    prompt: Just answer.\n    tools: []\n",
    );
    let out_c = fx.dir.path().join("c");
    let c = orch()
        .arg("run")
        .arg(&changed)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&out_c)
        .arg("--replay")
        .arg(&record)
        .output()
        .unwrap();
    let c = Run::from_output(&out_c, c);
    c.expect_code(1);
    let reason = c.agent("one")["reason"].as_str().unwrap();
    assert!(reason.contains("turn 1 of agent `one`") && reason.contains("Read and edit more."), "{reason}");
}

fn fan_out_of(n: usize) -> (String, String) {
    let items: Vec<String> = (1..=n).map(|i| format!("f{i}")).collect();
    let workflow = format!(
        "version: 1\nname: batch\ndescription: A batch.\nconcurrency: 4\nagents:\n  fix:\n    for_each: [{}]\n    \
         prompt: Fix {{{{ item }}}}.\n    tools: []\n",
        items.join(", ")
    );
    let script =
        "version: 1\nagents:\n  \"fix/*\":\n    - text: fixed\n  synthesis:\n    - text: all fixed\n".to_string();
    (workflow, script)
}

#[test]
fn shards_cover_the_plan_exactly_and_merge_equals_an_unsharded_run() {
    let fx = Fixture::new("t-shard", &[("a.txt", "a\n")]);
    let (workflow, script) = fan_out_of(12);
    let whole = fx.run(&workflow, &script, &[]);
    whole.expect_code(0);
    let all: BTreeSet<String> = whole.agent_ids().into_iter().collect();
    assert_eq!(all.len(), 12);

    // The matrix `orch plan` prints is the partition the shards run.
    let plan = orch()
        .arg("plan")
        .arg(fx.dir.path().join("workflow.yaml"))
        .args(["--shards", "3", "--format", "github-matrix"])
        .output()
        .unwrap();
    let matrix: Value = serde_json::from_slice(&plan.stdout).unwrap();
    let mut seen = BTreeSet::new();
    let mut dirs = Vec::new();
    for (k, entry) in matrix["include"].as_array().unwrap().iter().enumerate() {
        let shard = format!("{}/3", k + 1);
        assert_eq!(entry["shard"], shard.as_str());
        let out = fx.dir.path().join(format!("shard{}", k + 1));
        let run = command_at(&fx, &workflow, &script, &out, &format!("t-shard-{}", k + 1))
            .arg("--shard")
            .arg(&shard)
            .output()
            .unwrap();
        let run = Run::from_output(&out, run);
        run.expect_code(0);
        assert!(run.report.get("synthesis").is_none(), "a shard leaves synthesis to merge");
        let ids: BTreeSet<String> = run.agent_ids().into_iter().collect();
        let planned: BTreeSet<String> =
            entry["agents"].as_str().unwrap().split_whitespace().map(str::to_string).collect();
        assert_eq!(ids, planned, "shard {shard} runs what the matrix says");
        assert!(seen.is_disjoint(&ids), "shards overlap");
        seen.extend(ids);
        dirs.push(out);
    }
    assert_eq!(seen, all, "the union of the shards is the plan");

    let merged_dir = fx.dir.path().join("merged");
    let merged = orch()
        .arg("merge")
        .args(&dirs)
        .arg("--workflow")
        .arg(fx.dir.path().join("workflow.yaml"))
        .args(["--provider", "scripted", "--script"])
        .arg(fx.dir.path().join("script.yaml"))
        .arg("--out")
        .arg(&merged_dir)
        .output()
        .unwrap();
    let merged = Run::from_output(&merged_dir, merged);
    merged.expect_code(0);
    assert_eq!(merged.agent_ids(), whole.agent_ids(), "same agents, in plan order");
    let pick = |r: &Run| -> Vec<(Value, Value)> {
        r.report["agents"].as_array().unwrap().iter().map(|a| (a["status"].clone(), a["text"].clone())).collect()
    };
    assert_eq!(pick(&merged), pick(&whole));
    assert_eq!(merged.report["synthesis"]["text"], whole.report["synthesis"]["text"]);
    assert_eq!(merged.report["totals"]["succeeded"], 12);
    assert_eq!(merged.report["totals"]["turns"], whole.report["totals"]["turns"]);
}

#[test]
fn a_shard_that_needs_upstream_results_without_from_is_refused() {
    let fx = Fixture::new("t-shard-from", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: dyn
agents:
  survey:
    prompt: List.
    tools: []
    output: { schema: { type: object, required: [items], properties: { items: { type: array } } } }
  fix:
    needs: [survey]
    for_each: "{{ agents.survey.output.items }}"
    prompt: Fix {{ item }}.
    tools: []
"#;
    let script = "version: 1\nagents:\n  survey:\n    - text: '{\"items\": [\"a\", \"b\", \"c\", \"d\"]}'\n  \"fix/*\":\n    - text: fixed\n";
    for k in 1..=2 {
        let run = fx.run(workflow, script, &["--shard", &format!("{k}/2")]);
        if run.code == 2 {
            assert!(run.stderr.contains("--from DIR"), "{}", run.stderr);
            return;
        }
    }
    panic!("no shard refused to run without the survey's results");
}

#[test]
fn only_max_fail_resume_and_junit() {
    let fx = Fixture::new("t-flags", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: flags
concurrency: 1
agents:
  a1: { prompt: One., tools: [] }
  a2: { prompt: Two., tools: [] }
  b1: { prompt: Three., tools: [] }
  b2: { prompt: Four., tools: [] }
"#;
    // a1 fails (the script has no turn for it); the others answer.
    let script = "version: 1\nagents:\n  a2: [{text: two}]\n  b1: [{text: three}]\n  b2: [{text: four}]\n  synthesis: [{text: sum}]\n";
    let only = fx.run(workflow, script, &["--only", "b*"]);
    only.expect_code(0);
    assert_eq!(only.agent_ids(), ["b1", "b2"]);

    std::fs::remove_dir_all(&fx.out).unwrap();
    let junit = fx.dir.path().join("junit.xml");
    let first = fx.run(workflow, script, &["--max-fail", "1", "--junit", junit.to_str().unwrap()]);
    first.expect_code(1);
    assert_eq!(first.agent("a1")["status"], "failed");
    for id in ["a2", "b1", "b2"] {
        assert_eq!(first.agent(id)["status"], "skipped", "{id} after --max-fail 1");
        assert!(first.agent(id)["reason"].as_str().unwrap().contains("--max-fail"));
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"<testsuite name="flags" tests="4" failures="1" skipped="3" errors="0""#), "{xml}");
    // junit-10.xsd: `errors` on <testsuites>, and no `skipped` there.
    assert!(xml.contains(r#"<testsuites name="orch" tests="4" failures="1" errors="0" time=""#), "{xml}");
    assert!(xml.contains(r#"<testcase classname="flags" name="a1""#) && xml.contains("<failure "), "{xml}");

    // Resume: only what did not succeed runs again; a1 now has a turn.
    let resumed_out = fx.dir.path().join("resumed");
    let script2 = format!("{script}  a1: [{{text: one}}]\n");
    let resumed =
        command_at(&fx, workflow, &script2, &resumed_out, "t-flags-2").arg("--resume").arg(&fx.out).output().unwrap();
    let resumed = Run::from_output(&resumed_out, resumed);
    resumed.expect_code(0);
    assert_eq!(resumed.agent_ids(), ["a1", "a2", "b1", "b2"]);
    assert!(resumed.report["agents"].as_array().unwrap().iter().all(|a| a["status"] == "succeeded"));

    // Resuming a run that fully succeeded runs nothing again but keeps everything.
    let again_out = fx.dir.path().join("again");
    let again = command_at(&fx, workflow, "version: 1\nagents:\n  synthesis: [{text: sum}]\n", &again_out, "t-flags-3")
        .arg("--resume")
        .arg(&resumed_out)
        .output()
        .unwrap();
    let again = Run::from_output(&again_out, again);
    again.expect_code(0);
    assert_eq!(again.agent("b2")["text"], "four");
}

#[test]
fn a_second_signal_hurries_but_still_commits_and_leaves_nothing_running() {
    let fx = Fixture::new("t-double", &[("a.txt", "a\n")]);
    let workflow = "version: 1\nname: d\nagents:\n  stuck:\n    prompt: Wait.\n    tools: [Bash]\n";
    // Ignores SIGTERM, so only the grace period's SIGKILL (or the host's cleanup) ends it.
    let script = r#"
version: 1
agents:
  stuck:
    - tool_calls: [{name: Bash, input: {command: "trap '' TERM; touch started; while :; do sleep 0.1; done"}}]
    - text: never
"#;
    let mut child = fx.command(workflow, script).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let marker = fx.out.join("worktrees/stuck/started");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let signalled = Instant::now();
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // About a second: no grace periods after the second signal (issue 18: it no longer
    // exits before the commit).
    assert!(signalled.elapsed() < Duration::from_secs(10), "took {:?}", signalled.elapsed());
    assert_eq!(fx.show(&fx.branch("stuck"), "started"), "", "the work was not committed");
    // The tool host notices its pipe closed and kills what it started.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = processes_left(fx.dir.path());
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "left running: {left:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn exec_records_replays_and_writes_a_transcript() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "remember the milk\n").unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        "version: 1\nagents:\n  main:\n    - tool_calls: [{name: Read, input: {file_path: notes.txt}}]\n    - text: milk\n",
    )
    .unwrap();
    let record = dir.path().join("rec");
    let transcript = dir.path().join("t.jsonl");
    let first = orch()
        .current_dir(dir.path())
        .args(["exec", "--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--record")
        .arg(&record)
        .arg("--transcript")
        .arg(&transcript)
        .arg("What should I remember?")
        .output()
        .unwrap();
    assert!(first.status.success(), "{}", String::from_utf8_lossy(&first.stderr));
    let lines: Vec<Value> =
        std::fs::read_to_string(&transcript).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert!(lines.iter().any(|l| l["event"]["type"] == "tool_use_finished" && l["event"]["name"] == "Read"));
    assert_eq!(lines.last().unwrap()["event"]["type"], "terminal");

    let replay = orch()
        .current_dir(dir.path())
        .args(["exec", "--replay"])
        .arg(&record)
        .arg("What should I remember?")
        .output()
        .unwrap();
    assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
    assert_eq!(String::from_utf8_lossy(&replay.stdout), String::from_utf8_lossy(&first.stdout));
    let changed =
        orch().current_dir(dir.path()).args(["exec", "--replay"]).arg(&record).arg("Something else?").output().unwrap();
    assert!(!changed.status.success());
    assert!(String::from_utf8_lossy(&changed.stderr).contains("turn 1 of agent `main`"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn project_instructions_and_git_state_reach_the_prompt_through_the_tool_host() {
    let server = MockServer::start().await;
    let fx = Fixture::new(
        "t-instr",
        &[
            ("AGENTS.md", "Indent with TABS-NOT-SPACES.\n@docs/style.md\n"),
            ("docs/style.md", "Name things IMPORTED-STYLE.\n"),
            ("sub/CLAUDE.md", "In sub, prefer NEAREST-LAST.\n"),
            ("secret.md", "x\n"),
        ],
    );
    // A planted symlink to a file outside the repository must not be pulled in.
    let outside = fx.dir.path().join("outside.md");
    std::fs::write(&outside, "OUTSIDE-SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, fx.repo.join("sub/AGENTS.md")).unwrap();
    support::git(&fx.repo, &["add", "-A"]);
    support::git(&fx.repo, &["commit", "-q", "-m", "instructions and a planted link"]);
    let run_with = |instructions: bool, out: &std::path::Path| {
        let workflow = fx.write(
            &format!("w{instructions}.yaml"),
            &format!("version: 1\nname: i\ndefaults:\n  instructions: {instructions}\nagents:\n  a:\n    prompt: Go.\n    tools: [Read]\n"),
        );
        let mut cmd = orch();
        cmd.arg("run")
            .arg(workflow)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(out)
            .env("ANTHROPIC_BASE_URL", server.url())
            .env("ANTHROPIC_API_KEY", "test");
        cmd
    };
    server.push(Step::text("ok"));
    let mut cmd = run_with(true, &fx.dir.path().join("on"));
    let on = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert!(on.status.success(), "{}", String::from_utf8_lossy(&on.stderr));
    let system = server.last_request().unwrap().system().unwrap().to_string();
    for needle in ["TABS-NOT-SPACES", "IMPORTED-STYLE", "AGENTS.md", "instructions and a planted link", "branch: orch/"]
    {
        assert!(system.contains(needle), "`{needle}` is not in the system prompt: {system}");
    }
    assert!(!system.contains("OUTSIDE-SECRET"), "a planted symlink pulled an outside file in: {system}");
    // `sub/CLAUDE.md` is below the agent's working directory (the root): not collected.
    assert!(!system.contains("NEAREST-LAST"), "{system}");

    server.push(Step::text("ok"));
    let mut cmd = run_with(false, &fx.dir.path().join("off"));
    let off = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    assert!(off.status.success(), "{}", String::from_utf8_lossy(&off.stderr));
    let system = server.last_request().unwrap().system().unwrap().to_string();
    assert!(!system.contains("TABS-NOT-SPACES"), "instructions: false still loaded them: {system}");
}
