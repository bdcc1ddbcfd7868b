//! Claude Code's hook events beyond the tool calls, end to end through the real binary
//! and the scripted provider: UserPromptSubmit (context, and a refusal by exit 2 or by
//! JSON that keeps the agent from running), the common input fields (`transcript_path`,
//! `permission_mode`, no `agent_id` outside a nested agent), PostToolUse exit 2 keeping
//! the result and adding the reason, PostToolUseFailure, SubagentStart / SubagentStop,
//! Notification on an approval nobody can give, and SessionEnd. Each test checks what a
//! hook wrote in the worktree and what the model was sent (the script's `expect`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use serde_json::Value;
use support::{Fixture, Run};

/// The `hook` events of an agent's transcript: (event, outcome).
fn hook_runs(run: &Run, id: &str) -> Vec<(String, String)> {
    run.events(id)
        .into_iter()
        .filter(|e| e["type"] == "hook")
        .map(|h| (h["event"].as_str().unwrap().to_owned(), h["outcome"].as_str().unwrap().to_owned()))
        .collect()
}

fn json_on(fx: &Fixture, branch: &str, path: &str) -> Value {
    serde_json::from_str(&fx.show(branch, path)).unwrap_or_else(|e| panic!("{path} on {branch}: {e}"))
}

const LIFE: &str = r#"
version: 1
name: life
defaults:
  tools: [Bash]
  limits: { max_turns: 6, timeout: 1m }
hooks:
  UserPromptSubmit:
    - hooks: [{ command: "cat > prompt.json; echo 'Remember the word KIWI.'" }]
  PostToolUse:
    - matcher: Bash
      hooks: [{ command: "cat > post.json; echo 'style check failed: use tabs' >&2; exit 2" }]
  PostToolUseFailure:
    - matcher: Bash
      hooks: [{ command: "cat > failure.json" }]
  Stop:
    - hooks:
        - command: |
            input=$(cat)
            printf '%s' "$input" > stop.json
            transcript=$(printf '%s' "$input" | sed -n 's/.*"transcript_path":"\([^"]*\)".*/\1/p')
            head -n 1 "$transcript" > transcript-head.jsonl
  SessionEnd:
    - hooks: [{ command: "cat > end.json; echo 'not heard' >&2; exit 2" }]
agents:
  a:
    prompt: Print a greeting.
integrate: branches
"#;

const LIFE_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - expect: { contains: "Remember the word KIWI." }
      tool_calls: [{ name: Bash, input: { command: "echo hello" } }]
    - expect: { contains: "style check failed: use tabs" }
      tool_calls: [{ name: Bash, input: { command: "echo broken >&2; exit 3" } }]
    - text: All done.
  synthesis:
    - text: Summary.
"#;

#[test]
fn prompt_tool_and_end_hooks_get_claude_codes_fields_and_a_post_tool_block_keeps_the_result() {
    let fx = Fixture::new("t-life", &[("f.txt", "f\n")]);
    let run = fx.run(LIFE, LIFE_SCRIPT, &[]);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results.len(), 2, "{results:?}");
    // Exit 2 after the call: the result stands (no error) and the reason follows it.
    assert!(!results[0].1, "{results:?}");
    assert!(results[0].2.starts_with("hello"), "{}", results[0].2);
    assert!(results[0].2.contains("PostToolUse hook: style check failed: use tabs"), "{}", results[0].2);
    assert!(results[1].1, "{results:?}");

    let branch = fx.branch("a");
    let prompt = json_on(&fx, &branch, "prompt.json");
    assert_eq!(prompt["hook_event_name"], "UserPromptSubmit");
    assert!(prompt["prompt"].as_str().unwrap().contains("Print a greeting."), "{prompt}");
    assert_eq!(prompt["session_id"], "t-life/a");
    assert_eq!(prompt["permission_mode"], "default");
    assert_eq!(prompt["orch_agent_id"], "a");
    // As in Claude Code, `agent_id` is only there inside a nested agent.
    assert!(prompt.get("agent_id").is_none() && prompt.get("agent_type").is_none(), "{prompt}");
    let transcript = prompt["transcript_path"].as_str().unwrap();
    assert_eq!(std::path::Path::new(transcript), run.out.join(run.agent("a")["transcript"].as_str().unwrap()));
    assert!(std::path::Path::new(transcript).is_file());

    let post = json_on(&fx, &branch, "post.json");
    assert_eq!((post["hook_event_name"].as_str(), post["tool_name"].as_str()), (Some("PostToolUse"), Some("Bash")));
    assert_eq!(post["tool_response"]["content"], "hello");
    assert_eq!(post["transcript_path"], transcript);
    // The failed call ran PostToolUseFailure (not PostToolUse, whose file kept the first call).
    let failure = json_on(&fx, &branch, "failure.json");
    assert_eq!(failure["hook_event_name"], "PostToolUseFailure");
    assert_eq!(failure["tool_input"]["command"], "echo broken >&2; exit 3");
    assert!(failure["error"].as_str().unwrap().contains("broken"), "{failure}");
    let stop = json_on(&fx, &branch, "stop.json");
    assert_eq!(stop["last_assistant_message"], "All done.");
    // The hook could read its transcript from inside the sandbox.
    let head = json_on(&fx, &branch, "transcript-head.jsonl");
    assert_eq!((head["agent"].as_str(), head["event"]["type"].as_str()), (Some("a"), Some("prompt")));
    let end = json_on(&fx, &branch, "end.json");
    assert_eq!((end["hook_event_name"].as_str(), end["reason"].as_str()), (Some("SessionEnd"), Some("other")));

    let runs = hook_runs(&run, "a");
    let events: Vec<&str> = runs.iter().map(|(e, _)| e.as_str()).collect();
    assert_eq!(events, ["UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd"]);
    // SessionEnd cannot block: its exit 2 is only reported.
    assert!(runs[4].1.contains("cannot block"), "{runs:?}");
    assert_eq!(run.agent("a")["status"], "succeeded");
}

const REFUSE: &str = r#"
version: 1
name: refuse
defaults:
  tools: [Read]
  limits: { max_turns: 3, timeout: 1m }
hooks:
  UserPromptSubmit:
    - hooks:
        - command: |
            input=$(cat)
            case "$input" in
              *secret*) echo 'prompts must not carry secrets' >&2; exit 2;;
              *policy*) printf '%s' '{"decision": "block", "reason": "the policy hook says no"}';;
              *) printf '%s' '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "Context PEAR."}}';;
            esac
  SessionEnd:
    - hooks: [{ command: "cat > end.json" }]
agents:
  leak:
    prompt: The secret is 42; use it.
  policy:
    prompt: Break the policy.
  fine:
    prompt: Read f.txt.
integrate: branches
"#;

const REFUSE_SCRIPT: &str = r#"
version: 1
agents:
  leak:
    - text: This turn must never be asked for.
  policy:
    - text: This turn must never be asked for.
  fine:
    - expect: { contains: "Context PEAR." }
      text: Read it.
  synthesis:
    - text: Summary.
"#;

#[test]
fn a_user_prompt_submit_hook_that_refuses_the_prompt_keeps_the_agent_from_running() {
    let fx = Fixture::new("t-refuse", &[("f.txt", "f\n")]);
    let run = fx.run(REFUSE, REFUSE_SCRIPT, &[]);
    for (id, reason) in [("leak", "prompts must not carry secrets"), ("policy", "the policy hook says no")] {
        let agent = run.agent(id);
        assert_eq!(agent["terminal"]["reason"], "hook_stopped", "{agent:#}\n{}", run.stderr);
        assert_eq!(agent["turns"], 0, "{agent:#}");
        assert!(agent["reason"].as_str().unwrap().contains(reason), "{agent:#}");
        // The session still ended, with its hook.
        assert_eq!(hook_runs(&run, id).last().unwrap().0, "SessionEnd");
    }
    let fine = run.agent("fine");
    assert_eq!(fine["status"], "succeeded", "{fine:#}\n{}", run.stderr);
    assert_eq!(fine["text"], "Read it.");
}

const NESTED: &str = r#"
version: 1
name: nested-hooks
defaults:
  # Write makes the worktree writable, for the files the hooks write.
  tools: [Read, Write, Agent]
  limits: { max_turns: 6, timeout: 1m }
hooks:
  SubagentStart:
    - matcher: general-purpose
      hooks:
        - command: >-
            cat > start.json;
            printf '%s' '{"hookSpecificOutput": {"hookEventName": "SubagentStart", "additionalContext": "Sub context MANGO."}}'
    - matcher: fixer
      hooks: [{ command: "touch wrong-matcher.txt" }]
  SubagentStop:
    - hooks:
        - command: |
            cat > substop.json
            if [ -f "$TMPDIR/sub-stopped" ]; then exit 0; fi
            touch "$TMPDIR/sub-stopped"
            echo 'end with the word DONE-SUB' >&2
            exit 2
  Stop:
    - hooks: [{ command: "cat > stop.json" }]
agents:
  lead:
    prompt: Get help.
integrate: branches
"#;

const NESTED_SCRIPT: &str = r#"
version: 1
agents:
  lead:
    - tool_calls: [{ name: Agent, input: { prompt: "Help out.", description: help } }]
    - expect: { contains: "DONE-SUB" }
      text: Lead finished.
  lead/sub-1:
    - expect: { contains: "Sub context MANGO." }
      text: First try.
    - expect: { contains: "end with the word DONE-SUB" }
      text: DONE-SUB
  synthesis:
    - text: Summary.
"#;

#[test]
fn subagent_start_adds_context_and_subagent_stop_can_keep_the_nested_agent_going() {
    let fx = Fixture::new("t-nested-hooks", &[("f.txt", "f\n")]);
    let run = fx.run(NESTED, NESTED_SCRIPT, &[]);
    assert_eq!(run.code, 0, "{:?}", hook_runs(&run, "lead"));
    assert_eq!(run.agent("lead")["text"], "Lead finished.");
    let branch = fx.branch("lead");
    let start = json_on(&fx, &branch, "start.json");
    assert_eq!(start["hook_event_name"], "SubagentStart");
    assert_eq!(
        (start["agent_id"].as_str(), start["agent_type"].as_str()),
        (Some("lead/sub-1"), Some("general-purpose"))
    );
    // The second SubagentStop run (after the block) overwrote the first.
    let stop = json_on(&fx, &branch, "substop.json");
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    assert_eq!(stop["agent_id"], "lead/sub-1");
    assert_eq!(stop["stop_hook_active"], true);
    assert_eq!(stop["last_assistant_message"], "DONE-SUB");
    // The lead's own stop ran Stop, with no nested-agent fields.
    let lead_stop = json_on(&fx, &branch, "stop.json");
    assert_eq!(lead_stop["hook_event_name"], "Stop");
    assert!(lead_stop.get("agent_id").is_none(), "{lead_stop}");
    let tree = support::git(&fx.repo, &["ls-tree", "--name-only", &branch]);
    assert!(!tree.contains("wrong-matcher.txt"), "a SubagentStart hook for another agent type ran");
}

const ASK: &str = r#"
version: 1
name: ask
defaults:
  tools: [Bash]
  limits: { max_turns: 4, timeout: 1m }
  permissions:
    ask: ["Bash(git *)"]
hooks:
  Notification:
    - matcher: permission_prompt
      hooks:
        - command: >-
            cat >> notes.jsonl; echo >> notes.jsonl;
            printf '%s' '{"hookSpecificOutput": {"hookEventName": "Notification", "additionalContext": "Ask the maintainers for a rule."}}'
agents:
  a:
    prompt: Look around.
integrate: branches
"#;

const ASK_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: Bash, input: { command: "git status" } }]
    - expect: { contains: "Ask the maintainers for a rule." }
      tool_calls: [{ name: Bash, input: { command: "echo free" } }]
    - text: Done.
  synthesis:
    - text: Summary.
"#;

#[test]
fn a_call_nobody_can_approve_runs_the_notification_hooks() {
    let fx = Fixture::new("t-notify", &[("f.txt", "f\n")]);
    let run = fx.run(ASK, ASK_SCRIPT, &[]);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1 && results[0].2.contains("nobody can approve"), "{results:?}");
    assert_eq!((results[1].1, results[1].2.trim()), (false, "free"));
    let notes = fx.show(&fx.branch("a"), "notes.jsonl");
    let notes: Vec<Value> = notes.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    // Only the call that needed an approval notified.
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0]["hook_event_name"], "Notification");
    assert_eq!(notes[0]["notification_type"], "permission_prompt");
    assert!(notes[0]["message"].as_str().unwrap().contains("Bash"), "{}", notes[0]);
}
