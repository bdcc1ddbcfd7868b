//! `orch run`, `orch validate` and `orch plan` end to end, through the real binary: real
//! fixture repositories, the scripted provider (deterministic per-agent turns) and the
//! mock model server where the requests themselves are checked. Covers worktrees and
//! branches, fan-out, structured output, synthesis, partial agents, merges, git safety,
//! `setup:`, what a run leaves behind, exit codes and interrupts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use orch_testkit::mock::{MockServer, Step};
use serde_json::{Value, json};
use support::{Fixture, Run, git, orch, processes_left};

/// Checks that `needles` appear in `text` in this order.
#[track_caller]
fn assert_in_order(text: &str, needles: &[&str]) {
    let mut at = 0;
    for needle in needles {
        match text[at..].find(needle) {
            Some(found) => at += found + needle.len(),
            None => panic!("`{needle}` is missing after byte {at} (or out of order) in:\n{text}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Parallel agents in worktrees

const PARALLEL: &str = r#"
version: 1
name: parallel
description: Change three files.
concurrency: 3
defaults:
  tools: [Read, Write, Edit, Bash]
  limits: { max_turns: 5, timeout: 1m }
agents:
  alpha:
    prompt: Edit a.txt.
  beta:
    prompt: Append to b.txt.
  gamma:
    prompt: Add c/new.txt.
integrate: branches
"#;

const PARALLEL_SCRIPT: &str = r#"
version: 1
agents:
  alpha:
    - tool_calls: [{name: Bash, input: {command: "git rev-parse --abbrev-ref HEAD; git status --porcelain; git log --format=%s"}}]
    - expect: {contains: "orch/t-par/alpha\nfixture"}
      tool_calls: [{name: Read, input: {file_path: a.txt}}]
    - tool_calls: [{name: Edit, input: {file_path: a.txt, old_string: A1, new_string: A2}}]
    - text: Changed a.txt.
  beta:
    - tool_calls: [{name: Bash, input: {command: "printf 'B2\\n' >> b.txt"}}]
    - text: Appended to b.txt.
  gamma:
    - tool_calls: [{name: Write, input: {file_path: c/new.txt, content: "new\n"}}]
    - text: Added c/new.txt.
  synthesis:
    - expect: {contains: "Agent `gamma`"}
      text: All three files changed.
"#;

#[test]
fn parallel_agents_work_in_their_own_worktrees_and_land_as_branches() {
    let fx = Fixture::new("t-par", &[("a.txt", "A1\n"), ("b.txt", "B1\n")]);
    let base = git(&fx.repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let run = fx.run(PARALLEL, PARALLEL_SCRIPT, &[]);
    run.expect_code(0);
    let r = &run.report;
    assert_eq!(r["schema_version"], 1);
    assert_eq!(r["run_id"], "t-par");
    assert_eq!(r["status"], "succeeded");
    assert_eq!(r["exit_code"], 0);
    assert_eq!(r["base"], base.as_str());
    assert_eq!(r["integration"]["mode"], "branches");
    assert_eq!(run.agent_ids(), ["alpha", "beta", "gamma"]);
    assert_eq!(run.stdout.trim(), "All three files changed.");

    let expected = [
        ("alpha", "a.txt", "modified", "A2\n"),
        ("beta", "b.txt", "modified", "B1\nB2\n"),
        ("gamma", "c/new.txt", "added", "new\n"),
    ];
    let fetched = r["integration"]["fetched"].as_array().unwrap();
    assert_eq!(fetched.len(), 3, "{fetched:?}");
    for (id, path, kind, content) in expected {
        let a = run.agent(id);
        assert_eq!(a["status"], "succeeded", "{a:#}");
        let branch = fx.branch(id);
        assert_eq!(a["branch"], branch.as_str());
        assert_eq!(a["changed_files"], json!([{"path": path, "kind": kind}]));
        // The branch is in the user's repository, at the reported commit, with the work.
        let tip = git(&fx.repo, &["rev-parse", &branch]).trim().to_owned();
        assert_eq!(a["commit"], tip.as_str());
        assert!(fetched.iter().any(|f| f["branch"] == branch.as_str() && f["commit"] == tip.as_str()));
        assert_eq!(fx.show(&branch, path), content);
        assert_eq!(git(&fx.repo, &["rev-parse", &format!("{branch}^")]).trim(), base, "one commit on the base");
        assert_eq!(git(&fx.repo, &["log", "-1", "--format=%an <%ae>", &branch]).trim(), "orch <orch@localhost>");
        // Each agent saw only its own worktree: nobody else's change is on its branch.
        let names = git(&fx.repo, &["diff", "--name-only", &base, &branch]);
        assert_eq!(names.trim(), path, "{id} changed more than its file");
        // The patch applies to the base and names the file.
        let patch = run.out.join(a["patch"].as_str().unwrap());
        let text = std::fs::read_to_string(&patch).unwrap();
        assert!(text.contains(&format!("+++ b/{path}")), "{text}");
        assert!(run.out.join(a["transcript"].as_str().unwrap()).is_file());
    }
    // The agents' tools ran in their own worktree of the run clone, on their branch.
    let (_, is_error, output) = &run.tool_results("alpha")[0];
    assert!(!is_error, "{output}");
    assert!(output.starts_with("orch/t-par/alpha\n"), "{output}");
    // Run directory layout.
    for file in ["report.json", "report.md", "synthesis-prompt.md", "transcripts/synthesis.jsonl"] {
        assert!(run.out.join(file).is_file(), "{file} is missing");
    }
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("`orch/t-par/beta`"), "{md}");
    // The user's checkout is still on main, clean.
    assert_eq!(git(&fx.repo, &["symbolic-ref", "HEAD"]).trim(), "refs/heads/main");
    assert_eq!(git(&fx.repo, &["status", "--porcelain"]), "");
}

// ---------------------------------------------------------------------------------------
// Dynamic fan-out and structured output

const FAN_OUT: &str = r#"
version: 1
name: fan-out
description: Fix every file the survey finds.
concurrency: 2
defaults:
  tools: [Read, Bash]
  limits: { max_turns: 4, timeout: 1m }
agents:
  survey:
    prompt: List the files to fix.
    output:
      schema: { type: object, required: [files],
                properties: { files: { type: array, items: { type: string } } } }
  fix:
    needs: [survey]
    for_each: "{{ agents.survey.output.files }}"
    as: file
    tools: [Bash]
    prompt: "Fix {{ file }}."
integrate: branches
"#;

#[test]
fn dynamic_fan_out_expands_from_the_survey_output() {
    let fx = Fixture::new("t-fan", &[("src/one.txt", "1\n"), ("src/two.txt", "2\n"), ("src/three.txt", "3\n")]);
    let script = r#"
version: 1
agents:
  survey:
    - tool_calls: [{name: Bash, input: {command: "ls src"}}]
    - expect: {contains: "three.txt"}
      text: |
        Two files need work:
        ```json
        {"files": ["src/one.txt", "src/two.txt"]}
        ```
  fix/src-one-txt:
    - expect: {contains: "Fix src/one.txt."}
      tool_calls: [{name: Bash, input: {command: "echo fixed >> src/one.txt"}}]
    - text: Fixed one.
  fix/src-two-txt:
    - expect: {contains: "Fix src/two.txt."}
      tool_calls: [{name: Bash, input: {command: "echo fixed >> src/two.txt"}}]
    - text: Fixed two.
  synthesis:
    - expect: {contains: "Agent `fix/src-two-txt`"}
      text: Fixed both.
"#;
    let run = fx.run(FAN_OUT, script, &[]);
    run.expect_code(0);
    assert_eq!(run.agent_ids(), ["survey", "fix/src-one-txt", "fix/src-two-txt"]);
    assert_eq!(run.agent("survey")["output"], json!({"files": ["src/one.txt", "src/two.txt"]}));
    for (id, item, path) in
        [("fix/src-one-txt", "src/one.txt", "src/one.txt"), ("fix/src-two-txt", "src/two.txt", "src/two.txt")]
    {
        let a = run.agent(id);
        assert_eq!(a["status"], "succeeded", "{a:#}");
        assert_eq!(a["agent"], "fix");
        assert_eq!(a["item"], item);
        let branch = a["branch"].as_str().unwrap();
        assert!(branch.starts_with("orch/t-fan/fix-src-"), "{branch}");
        let content = fx.show(branch, path);
        assert!(content.ends_with("fixed\n"), "{content}");
    }
    // The survey changed nothing, so it has no branch.
    assert!(run.agent("survey")["commit"].is_null());
    assert_eq!(fx.orch_branches().len(), 2, "{:?}", fx.orch_branches());
}

const SURVEY: &str = r#"
version: 1
name: survey
defaults:
  limits: { max_turns: 6, timeout: 1m }
agents:
  survey:
    prompt: List the files.
    tools: []
    output:
      schema: { type: object, required: [files],
                properties: { files: { type: array, items: { type: string } } } }
"#;

#[test]
fn an_invalid_structured_output_is_asked_for_again() {
    let fx = Fixture::new("t-retry", &[("a.txt", "a\n")]);
    let script = r#"
version: 1
agents:
  survey:
    - expect: {contains: "matches this JSON Schema"}
      text: '{"files": "a.txt"}'
    - expect: {contains: "does not match the required output schema"}
      text: '{"files": ["a.txt"]}'
"#;
    let run = fx.run(SURVEY, script, &[]);
    run.expect_code(0);
    let a = run.agent("survey");
    assert_eq!(a["status"], "succeeded");
    assert_eq!(a["output"], json!({"files": ["a.txt"]}));
    assert_eq!(a["turns"], 2);
    // The retry message named what was wrong; it is in the transcript too.
    let prompts: Vec<String> = run
        .events("survey")
        .iter()
        .filter(|e| e["type"] == "prompt")
        .map(|e| e["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(prompts.len(), 1);
    // Only one agent: its answer is the run's answer, no synthesis.
    assert!(run.report["synthesis"].is_null());
    assert_eq!(run.stdout.trim(), r#"{"files": ["a.txt"]}"#);
}

#[test]
fn three_invalid_structured_outputs_fail_the_agent() {
    let fx = Fixture::new("t-invalid", &[("a.txt", "a\n")]);
    let script = r#"
version: 1
agents:
  survey:
    - text: 'I found a.txt.'
    - expect: {contains: "contains no JSON value"}
      text: '{"files": [1]}'
    - expect: {contains: "/files/0"}
      text: '{"files": 2}'
"#;
    let run = fx.run(SURVEY, script, &[]);
    run.expect_code(1);
    assert_eq!(run.report["status"], "failed");
    let a = run.agent("survey");
    assert_eq!(a["status"], "failed");
    assert_eq!(a["turns"], 3, "asked at most twice again: {a:#}");
    assert!(a["output"].is_null());
    let reason = a["reason"].as_str().unwrap();
    assert!(reason.contains("does not match output.schema after 2 retries"), "{reason}");
    assert!(reason.contains("/files") && reason.contains("not of type \"array\""), "{reason}");
    assert!(a["output_error"].as_str().unwrap().contains("/files"), "{a:#}");
}

// ---------------------------------------------------------------------------------------
// Synthesis, through the mock server

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

const TWO_REVIEWERS: &str = r#"
version: 1
name: review
description: Review the greeting module for bugs.
concurrency: 1
defaults:
  tools: [Read]
  limits: { max_turns: 4, timeout: 1m }
agents:
  first:
    prompt: Look at the greeting.
  second:
    prompt: Look at the file list.
integrate: none
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn synthesis_gets_the_task_then_each_report_in_order_then_the_instructions() {
    let fx = Fixture::new("t-synth", &[("greet.txt", "hello\n")]);
    let mock = MockServer::start().await;
    // Concurrency 1: the agents ask in file order, then synthesis.
    mock.push_all([
        Step::tool("Read", json!({"file_path": "greet.txt"})),
        Step::text("REPORT-ONE: the greeting is lowercase."),
        Step::tool("Read", json!({"file_path": "missing.txt"})),
        Step::text("REPORT-TWO: there is one file."),
        Step::text("The unified answer."),
    ]);
    let run = run_with_mock(&fx, TWO_REVIEWERS, &mock).await;
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "The unified answer.");
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    let synthesis = requests.last().unwrap();
    assert_eq!(synthesis.messages().len(), 1, "synthesis starts a fresh conversation");
    assert!(synthesis.tool_names().is_empty(), "synthesis has tools: {:?}", synthesis.tool_names());
    let prompt = first_user_text(synthesis);
    assert_in_order(
        &prompt,
        &[
            "Review the greeting module for bugs.",
            "## Agent `first`",
            "REPORT-ONE: the greeting is lowercase.",
            "## Agent `second`",
            "REPORT-TWO: there is one file.",
            "# Instructions",
            "unified answer",
            "disagree",
        ],
    );
    assert_eq!(std::fs::read_to_string(run.out.join("synthesis-prompt.md")).unwrap(), prompt);
    assert_eq!(run.report["synthesis"]["status"], "succeeded");
    assert_eq!(run.report["synthesis"]["text"], "The unified answer.");
    // The tool results reached the model: the file's text, and the error for the other.
    let read_ok = &requests[1].messages().last().unwrap()["content"][0];
    assert!(read_ok["content"].as_str().unwrap().contains("hello"), "{read_ok}");
    let read_err = &requests[3].messages().last().unwrap()["content"][0];
    assert_eq!(read_err["is_error"], true, "{read_err}");
    mock.assert_tool_pairing();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_synthesis_prompt_replaces_the_instructions_only() {
    let fx = Fixture::new("t-synth2", &[("greet.txt", "hello\n")]);
    let mock = MockServer::start().await;
    mock.push_all([
        Step::text("REPORT-ONE"),
        Step::tool("Read", json!({"file_path": "greet.txt"})),
        Step::text("REPORT-TWO"),
        Step::text("Only the names."),
    ]);
    let workflow = format!("{TWO_REVIEWERS}synthesis:\n  prompt: List CUSTOM-INSTRUCTIONS only.\n");
    let run = run_with_mock(&fx, &workflow, &mock).await;
    run.expect_code(0);
    let prompt = first_user_text(mock.requests().last().unwrap());
    assert_in_order(
        &prompt,
        &[
            "Review the greeting module",
            "## Agent `first`",
            "REPORT-ONE",
            "## Agent `second`",
            "REPORT-TWO",
            "List CUSTOM-INSTRUCTIONS only.",
        ],
    );
    assert!(!prompt.contains("unified answer"), "the default instructions stayed:\n{prompt}");
    assert_eq!(run.stdout.trim(), "Only the names.");
    mock.assert_tool_pairing();
}

// ---------------------------------------------------------------------------------------
// Partial agents and merges

#[test]
fn an_agent_at_its_turn_limit_is_partial_and_keeps_its_work() {
    let fx = Fixture::new("t-partial", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: partial
agents:
  slow:
    prompt: Do a lot.
    tools: [Write, Bash]
    limits: { max_turns: 2 }
"#;
    let script = r#"
version: 1
agents:
  slow:
    - tool_calls: [{name: Write, input: {file_path: half.txt, content: "half done\n"}}]
    - tool_calls: [{name: Bash, input: {command: "echo more >> half.txt"}}]
    - text: never asked
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(4);
    assert_eq!(run.report["status"], "partial");
    assert_eq!(run.report["exit_code"], 4);
    let a = run.agent("slow");
    assert_eq!(a["status"], "partial");
    assert!(a["reason"].as_str().unwrap().contains("turn limit of 2"), "{a:#}");
    assert_eq!(a["turns"], 2);
    assert_eq!(a["changed_files"], json!([{"path": "half.txt", "kind": "added"}]));
    assert_eq!(fx.show(&fx.branch("slow"), "half.txt"), "half done\nmore\n");
    let patch = std::fs::read_to_string(run.out.join(a["patch"].as_str().unwrap())).unwrap();
    assert!(patch.contains("+half done"), "{patch}");
    assert!(run.stderr.contains("partial"), "{}", run.stderr);
}

#[test]
fn a_merge_conflict_is_reported_and_does_not_fail_the_run() {
    let fx = Fixture::new("t-merge", &[("shared.txt", "line one\nline two\n"), ("other.txt", "o\n")]);
    let workflow = r#"
version: 1
name: merge
concurrency: 3
defaults:
  tools: [Read, Edit]
  limits: { max_turns: 4 }
agents:
  left:
    prompt: Change line one.
  right:
    prompt: Change line one too.
  other:
    prompt: Change the other file.
integrate: merge
"#;
    let edit = |file: &str, old: &str, new: &str| {
        format!(
            "    - tool_calls: [{{name: Read, input: {{file_path: {file}}}}}]\n    - tool_calls: [{{name: Edit, input: {{file_path: {file}, old_string: \"{old}\", new_string: \"{new}\"}}}}]\n    - text: done\n"
        )
    };
    let script = format!(
        "version: 1\nagents:\n  left:\n{}  right:\n{}  other:\n{}  synthesis:\n    - text: merged what could be merged\n",
        edit("shared.txt", "line one", "LEFT"),
        edit("shared.txt", "line one", "RIGHT"),
        edit("other.txt", "o", "OTHER"),
    );
    let run = fx.run(workflow, &script, &[]);
    run.expect_code(0);
    assert_eq!(run.report["status"], "succeeded");
    assert_eq!(run.report["overlaps"], json!([{"path": "shared.txt", "agents": ["left", "right"]}]));
    let merge = &run.report["integration"]["merge"];
    let integration = fx.branch("integration");
    assert_eq!(merge["branch"], integration.as_str());
    let merges = merge["merges"].as_array().unwrap();
    let entry = |agent: &str| merges.iter().find(|m| m["agent"] == agent).unwrap_or_else(|| panic!("{merge:#}"));
    assert_eq!(entry("left")["merged"], true);
    assert_eq!(entry("right")["merged"], false);
    assert_eq!(entry("right")["conflicts"], json!(["shared.txt"]));
    assert_eq!(entry("other")["merged"], true);
    // The integration branch is in the user's repository with everything but `right`.
    assert_eq!(fx.show(&integration, "shared.txt"), "LEFT\nline two\n");
    assert_eq!(fx.show(&integration, "other.txt"), "OTHER\n");
    // `right`'s work is still on its own branch.
    assert_eq!(fx.show(&fx.branch("right"), "shared.txt"), "RIGHT\nline two\n");
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains("Likely conflicts") && md.contains("**not merged**, conflicts in `shared.txt`"), "{md}");
}

// ---------------------------------------------------------------------------------------
// orch validate / orch plan

/// Each `run/invalid/*.yaml` through `orch validate`, `orch plan` and `orch run`: exit 2,
/// and the same diagnostics (file:line:col, the source line, a hint) on stderr, which
/// are snapshot-tested.
#[test]
fn invalid_workflows_exit_2_with_positions_and_hints() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/run/invalid");
    let mut cases: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    cases.retain(|p| p.extension().is_some_and(|e| e == "yaml"));
    cases.sort();
    assert!(cases.len() >= 8, "{cases:?}");
    for path in &cases {
        let dir = dir.as_path();
        let name = path.file_name().unwrap().to_str().unwrap();
        let output = |args: &[&str]| {
            let out = orch().current_dir(dir).args(args).arg(name).output().unwrap();
            (out.status.code(), String::from_utf8(out.stderr).unwrap(), out.stdout)
        };
        let (code, stderr, stdout) = output(&["validate"]);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(stdout.is_empty(), "{name}: validate printed on stdout");
        assert!(stderr.contains(&format!(" --> {name}:")), "{name}: no file:line:col\n{stderr}");
        assert!(stderr.contains("= help: "), "{name}: no hint\n{stderr}");
        let (code, plan_stderr, stdout) = output(&["plan"]);
        assert_eq!(code, Some(2), "{name}: {plan_stderr}");
        assert!(stdout.is_empty(), "{name}: plan printed on stdout");
        assert_eq!(plan_stderr, stderr, "{name}: plan and validate disagree");
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let out_arg = out.to_str().unwrap();
        let (code, run_stderr, _) =
            output(&["run", "--provider", "scripted", "--script", "none.yaml", "--out", out_arg]);
        assert_eq!(code, Some(2), "{name}: {run_stderr}");
        assert_eq!(run_stderr, stderr, "{name}: run and validate disagree");
        assert!(!out.exists(), "{name}: an invalid workflow made a run directory");
        let stem = path.file_stem().unwrap().to_str().unwrap();
        insta::assert_snapshot!(format!("invalid_{stem}"), stderr);
    }
}

#[test]
fn plan_shows_a_dynamic_fan_out_as_a_placeholder_naming_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fan-out.yaml");
    std::fs::write(&path, FAN_OUT).unwrap();
    let out = orch().arg("plan").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    assert_in_order(
        &text,
        &[
            "stage 1",
            "agent survey",
            "stage 2",
            "agent fix  <placeholder: one agent per item of agents.survey.output.files, as `file`>",
            "Fix {{ file }}.",
        ],
    );

    let out = orch().args(["plan", "--format", "json"]).arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let plan: Value = serde_json::from_slice(&out.stdout).expect("orch plan --format json prints JSON");
    assert_eq!(plan["name"], "fan-out");
    assert_eq!(plan["concurrency"], 2);
    let stages = plan["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 2);
    let survey = &stages[0]["agents"][0];
    assert_eq!((survey["kind"].as_str(), survey["id"].as_str()), (Some("agent"), Some("survey")));
    assert_eq!(survey["prompt"]["text"], "List the files to fix.");
    assert_eq!(survey["tools"], json!(["Read", "Bash"]));
    let fix = &stages[1]["agents"][0];
    assert_eq!(fix["kind"], "dynamic_fan_out");
    assert_eq!(fix["source"], "agents.survey.output.files");
    assert_eq!(fix["source_agent"], "survey");
    assert_eq!(fix["as"], "file");
    assert_eq!(fix["template"]["tools"], json!(["Bash"]));
    assert_eq!(fix["template"]["limits"]["max_turns"], 4);
}

// ---------------------------------------------------------------------------------------
// Git safety

const SECRET: &str = "c2VjcmV0LXRva2VuLTQ3MTE=";

/// Checks that `secret` is nowhere under `dir`.
#[track_caller]
fn assert_nowhere_under(dir: &Path, secret: &str) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            assert_nowhere_under(&path, secret);
        } else if let Ok(bytes) = std::fs::read(&path) {
            assert!(!String::from_utf8_lossy(&bytes).contains(secret), "the secret is in {}", path.display());
        }
    }
}

#[test]
fn a_credential_in_the_users_git_config_is_never_visible_to_agents() {
    let fx = Fixture::new("t-cred", &[("a.txt", "a\n")]);
    git(&fx.repo, &["config", "http.https://github.com/.extraheader", &format!("AUTHORIZATION: basic {SECRET}")]);
    git(&fx.repo, &["remote", "add", "origin", &format!("https://x-access-token:{SECRET}@github.com/o/r.git")]);
    let user_config = fx.repo.join(".git/config");
    let clone_config = fx.out.join("repo.git/config");
    let workflow = r#"
version: 1
name: snoop
agents:
  snoop:
    prompt: Look for credentials.
    tools: [Bash, Read, Grep]
    limits: { max_turns: 12 }
"#;
    // One call per turn: a failing `Bash` would cancel its parallel siblings.
    let calls = [
        json!({"name": "Bash", "input": {"command": "git config --list --show-origin"}}),
        json!({"name": "Bash", "input": {"command": "cat .git \"$(git rev-parse --git-common-dir)/config\""}}),
        json!({"name": "Bash", "input": {"command": format!("cat {}", clone_config.display())}}),
        json!({"name": "Bash", "input": {"command": "env"}}),
        json!({"name": "Bash", "input": {"command": "tr '\\0' '\\n' < /proc/$PPID/cmdline; tr '\\0' '\\n' < /proc/$PPID/environ"}}),
        json!({"name": "Bash", "input": {"command": "git remote -v; git ls-remote origin; git config --get-regexp 'http.*'"}}),
        json!({"name": "Bash", "input": {"command": format!("cat {}", user_config.display())}}),
        json!({"name": "Read", "input": {"file_path": user_config}}),
        json!({"name": "Grep", "input": {"pattern": "extraheader", "path": fx.repo.join(".git"), "output_mode": "content"}}),
    ];
    let mut script = String::from("version: 1\nagents:\n  snoop:\n");
    for call in &calls {
        script.push_str(&format!("    - tool_calls: [{call}]\n"));
    }
    script.push_str("    - text: found nothing\n");
    let out =
        fx.command(workflow, &script).env("ANTHROPIC_API_KEY", SECRET).env("GITHUB_TOKEN", SECRET).output().unwrap();
    let run = Run::from_output(&fx.out, out);
    run.expect_code(0);
    let results = run.tool_results("snoop");
    assert_eq!(results.len(), calls.len(), "{results:#?}");
    // The commands ran, and saw the run clone's clean config.
    assert!(!results[0].1 && results[0].2.contains("core.bare=true"), "{:?}", results[0]);
    assert!(results[1].2.contains("gitdir: ") && results[1].2.contains("[core]"), "{:?}", results[1]);
    // The run clone holds every agent's branch: no agent may read it (its own repository
    // is the one above).
    assert!(results[2].1 && results[2].2.contains("Permission denied"), "{:?}", results[2]);
    assert!(!results[3].1 && results[3].2.contains("PATH="), "{:?}", results[3]);
    assert!(!results[5].2.contains("github.com"), "the run clone has a remote: {:?}", results[5]);
    // The user's git directory is out of reach.
    for (name, is_error, output) in &results[6..9] {
        assert!(*is_error || !output.contains("extraheader"), "{name} read the user's config: {output}");
    }
    for (name, _, output) in &results {
        assert!(!output.contains(SECRET), "{name} saw the secret:\n{output}");
    }
    assert!(!run.stdout.contains(SECRET) && !run.stderr.contains(SECRET));
    assert_nowhere_under(&run.out, SECRET);
    // Still there for the user.
    assert!(std::fs::read_to_string(&user_config).unwrap().contains(SECRET));
}

#[test]
fn agents_cannot_write_refs_config_or_hooks() {
    let fx = Fixture::new("t-vandal", &[("a.txt", "a\n")]);
    let before = fx.snapshot_user_repo();
    let refs_before = fx.refs();
    let victim = fx.branch("victim");
    let user_git = fx.repo.join(".git");
    let workflow = r#"
version: 1
name: vandal
agents:
  victim:
    prompt: Write v.txt.
    tools: [Write]
  vandal:
    needs: [victim]
    prompt: Break things.
    tools: [Bash]
    limits: { max_turns: 20 }
"#;
    let common = "$(git rev-parse --git-common-dir)";
    let attempts = [
        "git branch x".to_owned(),
        "git tag v1".to_owned(),
        format!("git update-ref refs/heads/{victim} HEAD"),
        format!("git branch -f {victim} HEAD~0"),
        format!("echo 0000000000000000000000000000000000000000 > {common}/refs/heads/{victim}"),
        "git commit --allow-empty -m sneaky".to_owned(),
        "echo hi | git hash-object -w --stdin".to_owned(),
        "git config user.name evil".to_owned(),
        format!("git config --file {common}/config core.hooksPath /tmp"),
        format!("mkdir -p {common}/hooks && printf '#!/bin/sh\\necho owned\\n' > {common}/hooks/post-commit"),
        "echo 'ref: refs/heads/main' > \"$(git rev-parse --git-dir)/HEAD\"".to_owned(),
        format!("echo '[include]' >> {}/config", user_git.display()),
        format!("printf '#!/bin/sh\\n' > {}/hooks/pre-commit", user_git.display()),
        format!("git --git-dir={} update-ref refs/heads/evil HEAD", user_git.display()),
        format!("git -C {} branch evil", fx.repo.display()),
        format!("echo pwned > {}/a.txt", fx.repo.display()),
    ];
    let mut script = String::from(
        "version: 1\nagents:\n  victim:\n    - tool_calls: [{name: Write, input: {file_path: v.txt, content: \"victim\\n\"}}]\n    - text: wrote it\n  vandal:\n",
    );
    for command in &attempts {
        script.push_str(&format!("    - tool_calls: [{}]\n", json!({"name": "Bash", "input": {"command": command}})));
    }
    script.push_str("    - text: tried everything\n  synthesis:\n    - text: ok\n");
    let run = fx.run(workflow, &script, &[]);
    run.expect_code(0);
    let results = run.tool_results("vandal");
    assert_eq!(results.len(), attempts.len());
    for (command, (_, is_error, output)) in attempts.iter().zip(&results) {
        assert!(is_error, "`{command}` succeeded:\n{output}");
    }
    // The victim's work is intact on its branch; the vandal left nothing to commit.
    assert_eq!(fx.show(&victim, "v.txt"), "victim\n");
    assert_eq!(git(&fx.repo, &["rev-parse", &format!("{victim}^")]), refs_before["refs/heads/main"].clone() + "\n");
    assert!(run.agent("vandal")["commit"].is_null(), "{:#}", run.agent("vandal"));
    // The user's repository has the victim's branch and nothing else new.
    let mut refs_after = fx.refs();
    assert!(refs_after.remove(&format!("refs/heads/{victim}")).is_some());
    assert_eq!(refs_after, refs_before);
    assert_eq!(fx.snapshot_user_repo(), before);
}

#[test]
fn a_dirty_checkout_is_left_exactly_as_it_was() {
    let fx = Fixture::new("t-dirty", &[("a.txt", "A1\n"), ("b.txt", "B1\n"), ("c.txt", "C1\n")]);
    std::fs::write(fx.repo.join("a.txt"), "A-modified\n").unwrap();
    std::fs::write(fx.repo.join("b.txt"), "B-staged\n").unwrap();
    git(&fx.repo, &["add", "b.txt"]);
    std::fs::write(fx.repo.join("b.txt"), "B-staged-then-modified\n").unwrap();
    std::fs::write(fx.repo.join("s.txt"), "new and staged\n").unwrap();
    git(&fx.repo, &["add", "s.txt"]);
    std::fs::write(fx.repo.join("u.txt"), "untracked\n").unwrap();
    std::fs::remove_file(fx.repo.join("c.txt")).unwrap();
    let before = fx.snapshot_user_repo();
    assert_eq!(before.status, " M a.txt\nMM b.txt\n D c.txt\nA  s.txt\n?? u.txt\n");
    let refs_before = fx.refs();
    let workflow = r#"
version: 1
name: dirty
agents:
  editor:
    prompt: Edit the same files.
    tools: [Bash]
"#;
    let script = r#"
version: 1
agents:
  editor:
    - tool_calls: [{name: Bash, input: {command: "cat a.txt b.txt c.txt; ls; git status --porcelain"}}]
    - expect: {contains: "A1\nB1\nC1\na.txt\nb.txt\nc.txt\n"}
      tool_calls: [{name: Bash, input: {command: "echo agent > a.txt; echo agent > u.txt; rm b.txt; git status --porcelain"}}]
    - text: done
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    // The agent started from the commit, not from the dirty files, and its work landed.
    let branch = fx.branch("editor");
    assert_eq!(fx.show(&branch, "a.txt"), "agent\n");
    assert_eq!(fx.show(&branch, "u.txt"), "agent\n");
    assert_eq!(fx.show(&branch, "c.txt"), "C1\n");
    // The user's checkout: same status, same bytes, same index, same HEAD.
    assert_eq!(fx.snapshot_user_repo(), before);
    let mut refs_after = fx.refs();
    assert!(refs_after.remove(&format!("refs/heads/{branch}")).is_some());
    assert_eq!(refs_after, refs_before);
}

#[test]
fn bash_keeps_its_directory_and_claude_codes_environment_in_the_sandbox() {
    let fx = Fixture::new("t-cwd", &[("src/deep/a.txt", "A\n")]);
    let workflow = r#"
version: 1
name: cwd
agents:
  walker:
    prompt: Walk around.
    tools: [Bash]
"#;
    // One call per turn: each starts where the one before ended.
    let script = r#"
version: 1
agents:
  walker:
    - tool_calls: [{name: Bash, input: {command: "cd src/deep"}}]
    - tool_calls: [{name: Bash, input: {command: "pwd; cat a.txt; echo \"$CLAUDECODE|$CLAUDE_CODE_ENTRYPOINT|$GIT_EDITOR\"; cd ..; exit 3"}}]
    - tool_calls: [{name: Bash, input: {command: "pwd; cd /"}}]
    - tool_calls: [{name: Bash, input: {command: "pwd"}}]
    - text: done
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    let results = run.tool_results("walker");
    assert_eq!(results.len(), 4, "{results:?}");
    let (_, is_error, second) = &results[1];
    assert!(is_error, "exit 3 stays the command's: {second}");
    assert!(second.starts_with("Command failed with exit code 3\n"), "{second}");
    let mut lines = second.lines().skip(1);
    let deep = lines.next().unwrap();
    assert!(deep.ends_with("/src/deep"), "{second}");
    assert_eq!(lines.next(), Some("A"), "{second}");
    assert_eq!(lines.next(), Some("1|sdk-cli|true"), "{second}");
    let root = deep.strip_suffix("/src/deep").unwrap();
    let (_, is_error, third) = &results[2];
    assert!(!is_error, "{third}");
    let (pwd, note) = third.split_once('\n').unwrap();
    assert_eq!(pwd, format!("{root}/src"));
    assert!(note.contains("outside the worktree") && note.ends_with(&format!("root {root}.)")), "{note}");
    assert_eq!(results[3].2, root);
}

// ---------------------------------------------------------------------------------------
// setup:

#[test]
fn setup_fills_a_cache_that_offline_agents_read() {
    let fx = Fixture::new("t-setup", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: setup
setup:
  - mkdir -p "$ORCH_CACHE_DIR/pkgs" && echo cached-payload > "$ORCH_CACHE_DIR/pkgs/data.txt"
  - mkdir -p "$XDG_CACHE_HOME/tool" && echo xdg-payload > "$XDG_CACHE_HOME/tool/index"
agents:
  offline:
    prompt: Build offline.
    tools: [Bash]
    sandbox: { network: none }
"#;
    let script = r#"
version: 1
agents:
  offline:
    - tool_calls: [{name: Bash, input: {command: "cat \"$ORCH_CACHE_DIR/pkgs/data.txt\" \"$XDG_CACHE_HOME/tool/index\""}}]
    - expect: {contains: "cached-payload\nxdg-payload"}
      tool_calls: [{name: Bash, input: {command: "echo tampered > \"$ORCH_CACHE_DIR/pkgs/data.txt\""}}]
    - text: built
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    let setup = &run.report["setup"];
    let commands = setup["commands"].as_array().unwrap();
    assert_eq!(commands.len(), 2);
    assert!(commands.iter().all(|c| c["exit_code"] == 0), "{setup:#}");
    let log = std::fs::read_to_string(run.out.join(setup["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("$ mkdir -p \"$ORCH_CACHE_DIR/pkgs\""), "{log}");
    let results = run.tool_results("offline");
    assert!(!results[0].1, "{:?}", results[0]);
    assert!(results[1].1, "an agent wrote into the shared cache: {:?}", results[1]);
    let cache = Path::new(setup["cache"].as_str().unwrap());
    assert_eq!(std::fs::read_to_string(cache.join("pkgs/data.txt")).unwrap(), "cached-payload\n");
    // The setup worktree's branch stays in the run clone.
    assert!(fx.orch_branches().is_empty(), "{:?}", fx.orch_branches());
}

#[test]
fn a_failing_setup_command_fails_the_run_before_any_agent() {
    let fx = Fixture::new("t-setup-fail", &[("a.txt", "a\n")]);
    let workflow = "version: 1\nsetup: [\"echo fetching; exit 7\"]\nagents:\n  a:\n    prompt: Go.\n";
    let run = fx.run(workflow, "version: 1\nagents: {}\n", &[]);
    run.expect_code(1);
    assert_eq!(run.report["setup"]["commands"][0]["exit_code"], 7);
    assert_eq!(run.agent("a")["status"], "skipped");
    assert!(run.stderr.contains("fetching"), "{}", run.stderr);
}

// ---------------------------------------------------------------------------------------
// Nothing leaks

const TWO_WRITERS: &str = r#"
version: 1
name: writers
concurrency: 2
agents:
  one:
    prompt: Write one.txt.
    tools: [Write, Bash]
  two:
    prompt: Write two.txt.
    tools: [Write, Bash]
"#;

const TWO_WRITERS_SCRIPT: &str = r#"
version: 1
agents:
  one:
    - tool_calls: [{name: Write, input: {file_path: one.txt, content: "1\n"}}]
    - tool_calls: [{name: Bash, input: {command: "sleep 0.2 & sleep 0.1; echo started"}}]
    - text: wrote one
  two:
    - tool_calls: [{name: Write, input: {file_path: two.txt, content: "2\n"}}]
    - text: wrote two
  synthesis:
    - text: both written
"#;

#[test]
fn a_run_leaves_no_worktrees_branches_or_processes_behind() {
    let fx = Fixture::new("t-clean", &[("a.txt", "a\n")]);
    let worktrees_before = git(&fx.repo, &["worktree", "list", "--porcelain"]);
    let run = fx.run(TWO_WRITERS, TWO_WRITERS_SCRIPT, &[]);
    run.expect_code(0);
    assert_eq!(git(&fx.repo, &["worktree", "list", "--porcelain"]), worktrees_before);
    assert_eq!(fx.orch_branches(), [fx.branch("one"), fx.branch("two")]);
    for gone in ["repo.git", "repos", "worktrees", "sandbox"] {
        assert!(!run.out.join(gone).exists(), "{gone} is still in the run directory");
    }
    for id in ["one", "two"] {
        assert!(run.agent(id)["worktree"].is_null(), "{:#}", run.agent(id));
    }
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn keep_worktrees_keeps_them_committed_and_usable() {
    let fx = Fixture::new("t-keep", &[("a.txt", "a\n")]);
    let run = fx.run(TWO_WRITERS, TWO_WRITERS_SCRIPT, &["--keep-worktrees"]);
    run.expect_code(0);
    for (id, file) in [("one", "one.txt"), ("two", "two.txt")] {
        let a = run.agent(id);
        let worktree = Path::new(a["worktree"].as_str().unwrap_or_else(|| panic!("no worktree for {id}: {a:#}")));
        assert!(worktree.join(file).is_file());
        // A real worktree of the kept run clone, on the agent's branch, with its work committed.
        assert_eq!(git(worktree, &["rev-parse", "--abbrev-ref", "HEAD"]).trim(), fx.branch(id));
        assert_eq!(git(worktree, &["status", "--porcelain"]), "");
        assert_eq!(git(worktree, &["rev-parse", "HEAD"]).trim(), a["commit"].as_str().unwrap());
    }
    assert!(run.out.join("repo.git").is_dir());
    // Each a linked worktree of the agent's own repository, which the run clone keeps.
    for id in ["one", "two"] {
        let listed = git(&run.out.join(format!("repos/{id}.git")), &["worktree", "list", "--porcelain"]);
        assert_eq!(listed.matches(&format!("\nbranch refs/heads/{}\n", fx.branch(id))).count(), 1, "{listed}");
    }
    // Kept worktrees keep no processes.
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn a_failed_agent_keeps_its_worktree_and_the_report_says_where() {
    let fx = Fixture::new("t-failed", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: failing
concurrency: 2
agents:
  ok:
    prompt: Succeed.
    tools: [Write]
  broken:
    prompt: Fail.
    tools: [Write]
"#;
    // `broken` runs out of scripted turns after its first: a model error.
    let script = r#"
version: 1
agents:
  ok:
    - tool_calls: [{name: Write, input: {file_path: ok.txt, content: "ok\n"}}]
    - text: fine
  broken:
    - tool_calls: [{name: Write, input: {file_path: wip.txt, content: "work in progress\n"}}]
  synthesis:
    - text: one failed
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(1);
    assert_eq!(run.report["status"], "failed");
    let broken = run.agent("broken");
    assert_eq!(broken["status"], "failed");
    assert!(broken["reason"].as_str().unwrap().contains("scripts only 1"), "{broken:#}");
    let worktree = Path::new(broken["worktree"].as_str().expect("the failed agent's worktree is reported"));
    assert_eq!(std::fs::read_to_string(worktree.join("wip.txt")).unwrap(), "work in progress\n");
    // Its partial work is committed and fetched all the same.
    assert_eq!(fx.show(&fx.branch("broken"), "wip.txt"), "work in progress\n");
    assert!(run.agent("ok")["worktree"].is_null());
    assert!(!run.out.join("worktrees/ok").exists());
    let md = std::fs::read_to_string(run.out.join("report.md")).unwrap();
    assert!(md.contains(&format!("Worktree kept at `{}`", worktree.display())), "{md}");
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

// ---------------------------------------------------------------------------------------
// Exit codes and interrupts

#[test]
fn usage_errors_exit_2() {
    let fx = Fixture::new("t-usage", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: inputs
inputs:
  focus: { description: What to look at }
agents:
  look:
    prompt: "Look at {{ inputs.focus }}."
    tools: []
"#;
    let script = "version: 1\nagents:\n  look:\n    - expect: {contains: \"Look at security.\"}\n      text: looked\n";
    let run = fx.run(workflow, script, &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("focus"), "{}", run.stderr);
    assert!(!fx.out.exists(), "a run directory was made for an invalid run");
    // With the input, the same workflow runs.
    let run = fx.run(workflow, script, &["--input", "focus=security"]);
    run.expect_code(0);
    assert_eq!(run.stdout.trim(), "looked");

    // A run directory in use, an unknown base, not a repository.
    let run_again = |extra: &[&str]| {
        let out = fx.command(workflow, script).args(["--input", "focus=x"]).args(extra).output().unwrap();
        Run::from_output(&fx.dir.path().join("none"), out)
    };
    let run = run_again(&[]);
    run.expect_code(2);
    assert!(run.stderr.contains("is not empty"), "{}", run.stderr);
    std::fs::remove_dir_all(&fx.out).unwrap();
    let run = run_again(&["--base", "no-such-branch"]);
    run.expect_code(2);
    assert!(run.stderr.contains("no-such-branch"), "{}", run.stderr);
    let elsewhere = tempfile::tempdir().unwrap();
    let out = orch()
        .arg("run")
        .arg(fx.dir.path().join("workflow.yaml"))
        .args(["--provider", "scripted", "--input", "focus=x", "--script"])
        .arg(fx.dir.path().join("script.yaml"))
        .arg("--repo")
        .arg(elsewhere.path())
        .arg("--out")
        .arg(elsewhere.path().join("out"))
        .output()
        .unwrap();
    let run = Run::from_output(elsewhere.path(), out);
    run.expect_code(2);
    assert!(run.stderr.contains("cannot open the git repository"), "{}", run.stderr);
}

/// Starts a run whose agent `stuck` sits in `sleep 30`, sends `signal` once the command
/// runs, and checks what every interrupt must give: the exit code within 5 s, an
/// `interrupted` report naming the signal, the finished agent's result, the stuck agent
/// cancelled with its work kept, no synthesis, and no process left.
fn interrupt_a_stuck_agent(run_id: &str, signal: nix::sys::signal::Signal, code: i32, name: &str) {
    let fx = Fixture::new(run_id, &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: stuck
concurrency: 2
agents:
  quick:
    prompt: Finish at once.
    tools: []
  stuck:
    prompt: Wait.
    tools: [Bash]
"#;
    let script = r#"
version: 1
agents:
  quick:
    - text: done quickly
  stuck:
    - tool_calls: [{name: Bash, input: {command: "echo x > wip.txt; echo $$ > sleeper.pid; sleep 30"}}]
    - text: never
"#;
    let mut child = fx.command(workflow, script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid_file = fx.out.join("worktrees/stuck/sleeper.pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    let quick_done = || {
        std::fs::read_to_string(fx.out.join("transcripts/quick.jsonl"))
            .is_ok_and(|t| t.contains(r#""type":"terminal""#))
    };
    let sleeper: i32 = loop {
        let pid = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok());
        if let Some(pid) = pid.filter(|_| quick_done()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the agents never got there");
        std::thread::sleep(Duration::from_millis(20));
    };
    let signalled = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    let elapsed = signalled.elapsed();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert_eq!(status.code(), Some(code), "{stderr}");
    assert!(elapsed < Duration::from_secs(5), "took {elapsed:?} to stop");
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() });
    assert_eq!(run.report["status"], "interrupted", "{:#}", run.report);
    assert_eq!(run.report["exit_code"], code);
    assert!(run.report["stopped"].as_str().unwrap().contains(name), "{:#}", run.report);
    assert_eq!(run.agent("quick")["status"], "succeeded");
    let stuck = run.agent("stuck");
    assert_eq!(stuck["status"], "cancelled", "{stuck:#}");
    assert!(run.report["synthesis"].is_null(), "synthesis ran after an interrupt");
    // What it did before the signal is committed and fetched.
    assert_eq!(fx.show(&fx.branch("stuck"), "wip.txt"), "x\n");
    // The command is dead, and nothing of the run is left running.
    assert!(nix::sys::signal::kill(nix::unistd::Pid::from_raw(sleeper), None).is_err(), "the sleep outlived orch");
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn sigint_during_a_tool_exits_130_with_an_interrupted_report() {
    interrupt_a_stuck_agent("t-sigint", nix::sys::signal::Signal::SIGINT, 130, "SIGINT");
}

#[test]
fn sigterm_during_a_tool_exits_143_with_an_interrupted_report() {
    interrupt_a_stuck_agent("t-sigterm", nix::sys::signal::Signal::SIGTERM, 143, "SIGTERM");
}

#[test]
fn sigint_during_setup_exits_130_and_starts_no_agent() {
    let fx = Fixture::new("t-setup-int", &[("a.txt", "a\n")]);
    let workflow = "version: 1\nsetup: [\"echo $$ > $ORCH_CACHE_DIR/pid; sleep 30\"]\nagents:\n  a:\n    prompt: Go.\n";
    let mut child = fx.command(workflow, "version: 1\nagents: {}\n").stderr(Stdio::piped()).spawn().unwrap();
    let pid_file = fx.out.join("cache/pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pid_file.exists() {
        assert!(Instant::now() < deadline, "setup never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let signalled = Instant::now();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(signalled.elapsed() < Duration::from_secs(5));
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: Vec::new() });
    assert_eq!(run.report["status"], "interrupted");
    assert_eq!(run.agent("a")["status"], "skipped");
    assert_eq!(run.agent("a")["turns"], 0);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn fail_fast_cancels_the_others_and_exits_1() {
    let fx = Fixture::new("t-failfast", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: fail-fast
concurrency: 2
fail_fast: true
agents:
  bad:
    prompt: Fail.
    tools: [Bash]
  slow:
    prompt: Take long.
    tools: [Bash]
  later:
    needs: [slow]
    prompt: After slow.
    tools: []
"#;
    // `bad` runs out of turns (a model error) while `slow` sleeps.
    let script = r#"
version: 1
agents:
  bad:
    - tool_calls: [{name: Bash, input: {command: "sleep 1"}}]
  slow:
    - tool_calls: [{name: Bash, input: {command: "echo wip > wip.txt; sleep 20"}}]
    - text: slow done
  later:
    - text: never
"#;
    let started = Instant::now();
    let run = fx.run(workflow, script, &[]);
    run.expect_code(1);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(run.report["status"], "failed");
    assert!(run.report["stopped"].as_str().unwrap().contains("`bad` failed (fail_fast)"), "{:#}", run.report);
    assert_eq!(run.agent("bad")["status"], "failed");
    assert_eq!(run.agent("slow")["status"], "cancelled");
    assert_eq!(fx.show(&fx.branch("slow"), "wip.txt"), "wip\n");
    assert_eq!(run.agent("later")["status"], "skipped");
    assert!(run.report["synthesis"].is_null());
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn json_streams_events_and_ends_with_the_report() {
    let fx = Fixture::new("t-json", &[("a.txt", "a\n")]);
    let run = fx.run(TWO_WRITERS, TWO_WRITERS_SCRIPT, &["--json"]);
    run.expect_code(0);
    let lines: Vec<Value> = run.stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let last = lines.last().unwrap();
    assert_eq!(last["event"]["type"], "run_finished");
    assert_eq!(last["event"]["report"]["run_id"], "t-json");
    assert_eq!(last["event"]["report"]["agents"], run.report["agents"]);
    for agent in ["one", "two", "synthesis"] {
        let terminal = lines.iter().any(|l| l["agent"] == agent && l["event"]["type"] == "terminal");
        assert!(terminal, "no terminal event for {agent}");
    }
}

#[test]
fn a_run_turn_limit_allows_exactly_that_many_turns_and_keeps_the_work() {
    let fx = Fixture::new("t-runlimit", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: run-limit
concurrency: 1
limits: { max_turns: 3 }
defaults:
  tools: [Write]
agents:
  first:
    prompt: Work.
  second:
    prompt: Work more.
  third:
    prompt: Never starts.
"#;
    let script = r#"
version: 1
agents:
  first:
    - tool_calls: [{name: Write, input: {file_path: f1.txt, content: "1\n"}}]
    - text: first done
  second:
    - tool_calls: [{name: Write, input: {file_path: f2.txt, content: "2\n"}}]
    - tool_calls: [{name: Write, input: {file_path: f3.txt, content: "3\n"}}]
    - text: second done
  third:
    - text: third done
  synthesis:
    - text: synth
"#;
    let run = fx.run(workflow, script, &[]);
    run.expect_code(4);
    assert_eq!(run.report["status"], "partial");
    assert!(run.report["stopped"].as_str().unwrap().contains("turn limit of 3"), "{:#}", run.report);
    assert_eq!(run.report["totals"]["turns"], 3, "{:#}", run.report["totals"]);
    assert_eq!(run.agent("first")["status"], "succeeded");
    let second = run.agent("second");
    assert_eq!(second["status"], "partial", "{second:#}");
    assert_eq!(second["turns"], 1, "{second:#}");
    assert!(second["reason"].as_str().unwrap().contains("run's turn limit of 3"), "{second:#}");
    // The third turn of the run was answered and its work kept.
    assert_eq!(fx.show(&fx.branch("second"), "f2.txt"), "2\n");
    let third = run.agent("third");
    assert_eq!(third["status"], "skipped", "{third:#}");
    assert_eq!(third["turns"], 0);
    assert!(run.report["synthesis"].is_null());
}

#[test]
fn concurrency_and_needs_order_the_agents() {
    let fx = Fixture::new("t-conc", &[("a.txt", "a\n")]);
    let workflow = r#"
version: 1
name: order
concurrency: 4
defaults:
  tools: [Bash]
agents:
  w1: { prompt: Work 1. }
  w2: { prompt: Work 2. }
  w3: { prompt: Work 3. }
  w4: { prompt: Work 4. }
  last:
    needs: [w1, w4]
    tools: []
    prompt: "Combine {{ agents.w1.text }} and {{ agents.w4.text }}."
integrate: none
"#;
    let mut script = String::from("version: 1\nagents:\n");
    for n in 1..=4 {
        script.push_str(&format!(
            "  w{n}:\n    - tool_calls: [{{name: Bash, input: {{command: \"sleep 0.3\"}}}}]\n    - text: result-{n}\n"
        ));
    }
    script.push_str("  last:\n    - expect: {contains: \"Combine result-1 and result-4.\"}\n      text: combined\n");
    script.push_str("  synthesis:\n    - text: synth\n");
    // The command line's --concurrency beats the workflow's.
    let run = fx.run(workflow, &script, &["--concurrency", "2"]);
    run.expect_code(0);
    let (mut running, mut finished): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    let mut most = 0;
    for line in run.stderr.lines().filter_map(|l| l.strip_prefix("orch: ")) {
        if let Some(id) = line.strip_suffix(" started") {
            running.push(id);
            most = most.max(running.len());
            if id == "last" {
                assert!(
                    finished.contains(&"w1") && finished.contains(&"w4"),
                    "`last` started too early:\n{}",
                    run.stderr
                );
            }
        } else if let Some((id, _)) = line.split_once(" succeeded (") {
            running.retain(|r| *r != id);
            finished.push(id);
        }
    }
    assert_eq!(most, 2, "at most 2 at once, and 2 did run together:\n{}", run.stderr);
    assert_eq!(run.agent_ids(), ["w1", "w2", "w3", "w4", "last"]);
    assert_eq!(run.agent("last")["text"], "combined");
}

#[test]
fn a_planted_dot_git_is_neither_committed_nor_trusted() {
    let fx = Fixture::new("t-plant", &[("a.txt", "a\n")]);
    let workflow = "version: 1\nname: plant\nagents:\n  planter:\n    prompt: Plant.\n    tools: [Bash]\n";
    let script = r#"
version: 1
agents:
  planter:
    - tool_calls: [{name: Bash, input: {command: "rm .git && mkdir -p .git/hooks && printf '[core]\\n\\thooksPath = /tmp\\n' > .git/config && echo new > n.txt"}}]
    - text: planted
"#;
    let run = fx.run(workflow, script, &["--keep-worktrees"]);
    run.expect_code(0);
    let a = run.agent("planter");
    assert_eq!(a["changed_files"], json!([{"path": "n.txt", "kind": "added"}]));
    let worktree = Path::new(a["worktree"].as_str().unwrap());
    let dotgit = std::fs::read_to_string(worktree.join(".git")).expect(".git is a file again");
    assert_eq!(dotgit, format!("gitdir: {}\n", run.out.join("repos/planter.git/worktrees/planter").display()));
    assert_eq!(git(worktree, &["status", "--porcelain"]), "");
}
