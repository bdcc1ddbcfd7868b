//! Sub-agents and agent definition files through the real binary: a Claude Code agent
//! file used unchanged (by `uses:` and by the `Agent` tool), nested sub-agents working
//! in their caller's worktree, their records and usage in the report, their events in
//! the caller's transcript, the workflow's `subagents:` limits, and `uses:` of a
//! definition that does not exist.
//!
//! Scripted turns select sub-agents by their ids: the n-th `Agent` call of `lead` is
//! `lead/sub-<n>`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use orch_testkit::mock::{MockServer, Step};
use serde_json::Value;
use support::{Fixture, Run, orch};

/// A Claude Code agent file as people write them, presentational keys included.
const REVIEWER: &str = "---
name: code-reviewer
description: Expert code review specialist. Proactively reviews code for quality, security, and maintainability. Use immediately after writing or modifying code.
tools: Read, Grep, Glob, WebFetch
model: inherit
color: red
---

You are a senior code reviewer ensuring high standards of code quality.

When invoked:
1. Look at the files that changed.
2. Focus on the modified code.
3. Begin the review immediately.

Provide feedback organized by priority: critical issues, warnings, suggestions.
";

const FIXER: &str = "---
name: fixer
description: Fixes small mistakes in text files.
tools: [Read, Edit]
maxTurns: 4
permissionMode: acceptEdits
---
You fix typos. Read the file first, change only the typo.
";

const WORKFLOW: &str = r#"
version: 1
name: nested
subagents: { max_depth: 2, max_concurrent: 4, max_total: 2 }
defaults:
  tools: [Read, Grep, Glob, Edit, Agent]
  limits: { max_turns: 6, timeout: 1m }
agents:
  review:
    uses: code-reviewer
  lead:
    prompt: Get the typo in notes.txt fixed, and count its lines, with helpers.
"#;

const SCRIPT: &str = r#"
version: 1
agents:
  review:
    - expect: { contains: "Expert code review specialist" }
      usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Edit, input: { file_path: notes.txt, old_string: teh, new_string: the } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      text: No critical issues.
  lead:
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls:
        - { name: Agent, input: { prompt: "Fix the typo in notes.txt.", subagent_type: fixer, description: fix typo } }
        - { name: Agent, input: { prompt: "Count the lines of notes.txt.", description: count lines } }
    - usage: { input_tokens: 100, output_tokens: 10 }
      expect: { contains: "FIXED notes.txt" }
      tool_calls: [{ name: Agent, input: { prompt: "One more." } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      expect: { contains: "subagents.max_total" }
      text: The typo is fixed and notes.txt has two lines.
  lead/sub-1:
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Read, input: { file_path: notes.txt } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Edit, input: { file_path: notes.txt, old_string: teh, new_string: the } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      text: FIXED notes.txt
  lead/sub-2:
    - usage: { input_tokens: 100, output_tokens: 10 }
      expect: { contains: "Count the lines" }
      text: two lines
  synthesis:
    - usage: { input_tokens: 100, output_tokens: 10 }
      text: Reviewed; the typo is fixed.
"#;

fn fixture(run_id: &str) -> Fixture {
    Fixture::new(
        run_id,
        &[
            ("notes.txt", "teh first line\nsecond line\n"),
            (".claude/agents/code-reviewer.md", REVIEWER),
            (".orch/agents/fixer.md", FIXER),
        ],
    )
}

fn tokens(v: &Value) -> u64 {
    ["input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"]
        .iter()
        .map(|k| v[k].as_u64().unwrap_or(0))
        .sum()
}

#[test]
fn agent_files_and_nested_sub_agents_end_to_end() {
    let fx = fixture("t-sub");
    let run: Run = fx.run(WORKFLOW, SCRIPT, &[]);
    run.expect_code(0);

    // `uses:` runs the Claude Code file unchanged: its description is the task, its
    // tool list (less what orch lacks) replaces the defaults.
    let review = run.agent("review");
    assert_eq!(review["status"], "succeeded", "{review:#}");
    assert_eq!(review["uses"], "code-reviewer");
    let (name, is_error, output) = &run.tool_results("review")[0];
    assert_eq!(name, "Edit");
    assert!(*is_error && output.contains("no tool named `Edit`"), "{output}");

    // `lead` delegated: two sub-agents in parallel, then a third over the total limit.
    let lead = run.agent("lead");
    assert_eq!(lead["status"], "succeeded", "{lead:#}");
    let subs = lead["subagents"].as_array().unwrap();
    let mut ids: Vec<&str> = subs.iter().map(|s| s["id"].as_str().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["lead/sub-1", "lead/sub-2"]);
    let fixer = subs.iter().find(|s| s["id"] == "lead/sub-1").unwrap();
    assert_eq!(fixer["subagent_type"], "fixer");
    assert_eq!(fixer["description"], "fix typo");
    assert_eq!(fixer["status"], "completed");
    assert_eq!(fixer["turns"], 3);
    let results = run.tool_results("lead");
    assert_eq!(results.len(), 3);
    // In the order they finished: the quick count may come back before the fix.
    assert!(results[..2].iter().any(|r| !r.1 && r.2.starts_with("FIXED notes.txt")), "{results:?}");
    assert!(results[..2].iter().any(|r| !r.1 && r.2.starts_with("two lines")), "{results:?}");
    assert!(results[2].1 && results[2].2.contains("lead/sub-3 was not started"), "{:?}", results[2]);

    // The fixer worked in lead's worktree: the change is on lead's branch.
    assert_eq!(fx.show(&fx.branch("lead"), "notes.txt"), "the first line\nsecond line\n");

    // Usage rolls up: lead's three turns and its sub-agents' four, 110 tokens each.
    assert_eq!(tokens(&lead["usage"]), 7 * 110);
    let sub_tokens: u64 = subs.iter().map(|s| tokens(&s["usage"])).sum();
    assert_eq!(sub_tokens, 4 * 110);
    let run_tokens = tokens(&run.report["totals"]["usage"]);
    assert_eq!(run_tokens, 7 * 110 + 2 * 110 + 110, "the run counts each token once");

    // The sub-agents' events are in lead's transcript, wrapped with their ids.
    let nested: Vec<Value> = run.events("lead").into_iter().filter(|e| e["type"] == "subagent").collect();
    assert!(nested.iter().any(|e| e["agent"] == "lead/sub-1" && e["event"]["type"] == "tool_use_finished"));
    assert!(nested.iter().any(|e| e["agent"] == "lead/sub-2" && e["event"]["type"] == "terminal"));
}

#[test]
fn uses_of_an_unknown_definition_is_a_usage_error() {
    let fx = fixture("t-sub-unknown");
    let workflow = "version: 1\nagents:\n  review:\n    uses: security-auditor\n";
    let run = fx.run(workflow, "version: 1\nagents: {}\n", &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("`uses: security-auditor`"), "{}", run.stderr);
    assert!(run.stderr.contains("are: fixer, code-reviewer"), "{}", run.stderr);
    assert!(run.stderr.contains("workflow.yaml:4:"), "the error points at the `uses:` line: {}", run.stderr);
}

/// A definition file as Claude Code rejects it: the description's continuation lines
/// are not indented, so the front matter is not YAML.
const BROKEN: &str = "---
name: security-auditor
description: Audits code. Examples:
<example>
user: check this
</example>
---

You audit code.
";

/// `orch validate`, `orch plan` and `orch run` agree on agent files: one that does not
/// parse is named with its line, and a `uses:` that names no definition is an error
/// at its line with the closest name and the names there are (exit 2), whether the
/// name is misspelt or its file was rejected.
#[test]
fn validate_plan_and_run_name_broken_files_and_unknown_uses() {
    let fx = Fixture::new(
        "t-sub-broken",
        &[
            ("notes.txt", "x\n"),
            (".claude/agents/code-reviewer.md", REVIEWER),
            (".claude/agents/security-auditor.md", BROKEN),
        ],
    );
    let typo = fx.write("typo.yaml", "version: 1\nagents:\n  review:\n    uses: code-reviewr\n");
    let broken = fx.write("broken.yaml", "version: 1\nagents:\n  audit:\n    uses: security-auditor\n");
    let fine = fx.write("fine.yaml", "version: 1\nagents:\n  review:\n    uses: code-reviewer\n");
    let cmd = |args: &[&str], file: &std::path::Path| {
        let out = orch().current_dir(&fx.repo).args(args).arg(file).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    for verb in [&["validate"][..], &["plan"][..]] {
        let (code, stderr, _) = cmd(verb, &typo);
        assert_eq!(code, Some(2), "{verb:?}: {stderr}");
        assert!(stderr.contains("typo.yaml:4:"), "{verb:?}: {stderr}");
        assert!(stderr.contains("did you mean `code-reviewer`?"), "{verb:?}: {stderr}");
        let (code, stderr, _) = cmd(verb, &broken);
        assert_eq!(code, Some(2), "{verb:?}: {stderr}");
        assert!(stderr.contains("`uses: security-auditor`"), "{verb:?}: {stderr}");
        assert!(
            stderr.contains(
                ".claude/agents/security-auditor.md is not loaded: line 3: the front matter is not valid YAML"
            ),
            "{verb:?}: {stderr}"
        );
        // The file is named even when nothing uses it.
        let (code, stderr, _) = cmd(verb, &fine);
        assert_eq!(code, Some(0), "{verb:?}: {stderr}");
        assert!(stderr.contains("warning: .claude/agents/security-auditor.md: line 3:"), "{verb:?}: {stderr}");
    }
    let run = fx.run(&std::fs::read_to_string(&typo).unwrap(), "version: 1\nagents: {}\n", &[]);
    run.expect_code(2);
    assert!(run.stderr.contains("did you mean `code-reviewer`?"), "{}", run.stderr);
}

#[tokio::test]
async fn the_definition_body_is_the_system_prompt_and_its_tools_are_offered() {
    let fx = fixture("t-sub-mock");
    let mock = MockServer::start().await;
    mock.push(Step::text("No critical issues."));
    let workflow = "version: 1\nagents:\n  review:\n    uses: code-reviewer\n";
    let run = fx.run_off_runtime(fx.mock_command(workflow, &mock.url())).await;
    run.expect_code(0);
    let request = mock.requests().into_iter().next().unwrap();
    let system = request.system().unwrap().to_string();
    assert!(system.contains("You are a senior code reviewer"), "{system}");
    assert!(!system.contains("You are a coding agent running unattended"), "{system}");
    assert_eq!(request.tool_names(), ["Glob", "Grep", "Read"]);
}

#[test]
fn orch_exec_offers_the_agent_tool() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "one\ntwo\n").unwrap();
    let script = dir.path().join("script.yaml");
    std::fs::write(
        &script,
        r#"
version: 1
agents:
  main:
    - tool_calls: [{ name: Agent, input: { prompt: "Read notes.txt and say how many lines it has.", description: count } }]
    - expect: { contains: "LINES: 2" }
      text: notes.txt has two lines.
  main/sub-1:
    - tool_calls: [{ name: Read, input: { file_path: notes.txt } }]
    - expect: { contains: "two" }
      text: "LINES: 2"
"#,
    )
    .unwrap();
    let out = orch()
        .current_dir(dir.path())
        .args(["exec", "--allow-outside-repo", "--provider", "scripted", "--tools", "Read,Agent", "--script"])
        .arg(&script)
        .arg("Count the lines of notes.txt with a helper.")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "notes.txt has two lines.");
    assert!(stderr.contains("main: main/sub-1: Read notes.txt"), "{stderr}");
    assert!(stderr.contains("main: main/sub-1 completed (2 turns)"), "{stderr}");
}

/// A background sub-agent through the real binary: the call returns at once, `lead`
/// ends its answer while the sub-agent still works, waits for it, gets the report as
/// its next message, and its branch holds the sub-agent's change.
#[test]
fn a_background_sub_agent_finishes_before_its_caller_and_lands_on_its_branch() {
    let fx = fixture("t-sub-background");
    let workflow = r#"
version: 1
name: background
defaults:
  tools: [Read, Edit, Bash, Agent]
  limits: { max_turns: 6, timeout: 1m }
agents:
  lead:
    prompt: Get the typo in notes.txt fixed in the background.
"#;
    let script = r#"
version: 1
agents:
  lead:
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Agent, input: { prompt: "Fix the typo in notes.txt.", description: fix typo, run_in_background: true } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      expect: { contains: "running in the background" }
      text: Waiting for the fix.
    - usage: { input_tokens: 100, output_tokens: 10 }
      expect: { contains: "FIXED notes.txt" }
      text: The typo is fixed.
  lead/sub-1:
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Read, input: { file_path: notes.txt } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Bash, input: { command: "sleep 2" } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      tool_calls: [{ name: Edit, input: { file_path: notes.txt, old_string: teh, new_string: the } }]
    - usage: { input_tokens: 100, output_tokens: 10 }
      text: FIXED notes.txt
"#;
    let run: Run = fx.run(workflow, script, &[]);
    run.expect_code(0);
    let lead = run.agent("lead");
    assert_eq!(lead["status"], "succeeded", "{lead:#}");
    let subs = lead["subagents"].as_array().unwrap();
    assert_eq!(subs.len(), 1, "{subs:?}");
    assert_eq!(subs[0]["id"], "lead/sub-1");
    assert_eq!(subs[0]["status"], "completed");
    let results = run.tool_results("lead");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].1 && results[0].2.contains("running in the background"), "{results:?}");
    assert_eq!(fx.show(&fx.branch("lead"), "notes.txt"), "the first line\nsecond line\n");
    // lead's three turns and the sub-agent's four, 110 tokens each.
    assert_eq!(tokens(&lead["usage"]), 7 * 110);
}
