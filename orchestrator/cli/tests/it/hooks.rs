//! Hook commands end to end, through the real binary and the scripted provider: every
//! event, allow / deny / rewrite, Stop hooks that block then let go or keep blocking,
//! hooks that time out or crash, a deny rule beating a hook's allow, hooks running in
//! the agent's sandbox, and the trust rule (a pull-request run ignores a hook the pull
//! request adds).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Fixture, Run, git, orch};

/// The `hook` events of an agent's transcript.
fn hook_events(run: &Run, id: &str) -> Vec<Value> {
    run.events(id).into_iter().filter(|e| e["type"] == "hook").collect()
}

const EVENTS: &str = r#"
version: 1
name: hooks
defaults:
  tools: [Bash, Read]
  limits: { max_turns: 8, timeout: 1m }
hooks:
  SessionStart:
    - hooks: [{ command: "cat > session.json; echo 'The codeword is PLUM.'" }]
  PreToolUse:
    - matcher: Bash
      if: "Bash(rm *)"
      hooks: [{ command: "echo 'no removing files here' >&2; exit 2" }]
    - matcher: Bash|Write
      if: "Bash(echo old*)"
      hooks:
        - command: >-
            printf '%s' '{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "updatedInput": {"command": "echo new"}}}'
  PostToolUse:
    - matcher: "Ba.*"
      hooks:
        - command: >-
            cat >> post.jsonl; echo >> post.jsonl;
            printf '%s' '{"hookSpecificOutput": {"additionalContext": "checked by the post hook"}}'
  Stop:
    - hooks: [{ command: "cat > stop.json" }]
agents:
  a:
    prompt: Go.
integrate: branches
"#;

const EVENTS_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - expect: { contains: "The codeword is PLUM." }
      tool_calls: [{ name: Bash, input: { command: "rm -rf ." } }]
    - expect: { contains: "no removing files here" }
      tool_calls: [{ name: Bash, input: { command: "echo old" } }]
    - expect: { contains: "checked by the post hook" }
      text: Done.
  synthesis:
    - text: Summary.
"#;

#[test]
fn each_event_runs_its_hooks_which_add_context_deny_and_rewrite() {
    let fx = Fixture::new("t-hooks", &[("keep.txt", "keep\n")]);
    let run = fx.run(EVENTS, EVENTS_SCRIPT, &[]);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results.len(), 2, "{results:?}");
    // Denied by exit 2, with stderr as the reason; nothing was removed.
    assert!(results[0].1, "{results:?}");
    assert!(results[0].2.contains("blocked by a PreToolUse hook: no removing files here"), "{}", results[0].2);
    // Rewritten, then run; the PostToolUse hook's context follows the output.
    assert!(!results[1].1, "{results:?}");
    assert!(results[1].2.starts_with("new\n\nchecked"), "{}", results[1].2);
    assert!(results[1].2.ends_with("checked by the post hook"), "{}", results[1].2);

    let branch = fx.branch("a");
    assert_eq!(fx.show(&branch, "keep.txt"), "keep\n");
    let session: Value = serde_json::from_str(&fx.show(&branch, "session.json")).unwrap();
    assert_eq!(session["hook_event_name"], "SessionStart");
    assert_eq!(session["orch_agent_id"], "a");
    assert!(session.get("agent_id").is_none(), "{session}");
    assert_eq!(session["source"], "startup");
    assert_eq!(session["session_id"], "t-hooks/a");
    // It ran in the agent's worktree (the file landed on the agent's branch).
    assert!(session["cwd"].as_str().unwrap().ends_with("/a"), "{session}");
    let post = fx.show(&branch, "post.jsonl");
    let post: Vec<Value> = post.lines().filter(|l| !l.is_empty()).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(post.len(), 1, "{post:?}");
    assert_eq!(post[0]["hook_event_name"], "PostToolUse");
    assert_eq!(post[0]["tool_name"], "Bash");
    assert_eq!(post[0]["tool_input"]["command"], "echo new");
    assert_eq!(post[0]["tool_response"]["content"], "new");
    let stop: Value = serde_json::from_str(&fx.show(&branch, "stop.json")).unwrap();
    assert_eq!((stop["hook_event_name"].as_str(), stop["stop_hook_active"].as_bool()), (Some("Stop"), Some(false)));

    // Every run is in the transcript, with its outcome.
    let hooks = hook_events(&run, "a");
    let summary: Vec<(String, String)> = hooks
        .iter()
        .map(|h| (h["event"].as_str().unwrap().to_owned(), h["outcome"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        summary,
        [
            ("SessionStart".to_owned(), "ok".to_owned()),
            ("PreToolUse".to_owned(), "blocked: no removing files here".to_owned()),
            ("PreToolUse".to_owned(), "rewrote the input".to_owned()),
            ("PostToolUse".to_owned(), "ok".to_owned()),
            ("Stop".to_owned(), "ok".to_owned()),
        ]
    );
    assert!(hooks.iter().all(|h| h["is_error"] == false), "{hooks:?}");
}

const STOP: &str = r#"
version: 1
name: stop
concurrency: 2
defaults:
  tools: [Read]
  limits: { max_turns: 10, timeout: 1m }
hooks:
  Stop:
    - hooks:
        - command: |
            input=$(cat)
            case "$input" in *'"orch_agent_id":"always"'*) echo 'not yet, keep going' >&2; exit 2;; esac
            if [ -f "$TMPDIR/stopped-once" ]; then exit 0; fi
            touch "$TMPDIR/stopped-once"
            echo 'say FINISHED before you stop' >&2
            exit 2
agents:
  once:
    prompt: Work.
  always:
    prompt: Work.
integrate: branches
"#;

const STOP_SCRIPT: &str = r#"
version: 1
agents:
  once:
    - text: Done early.
    - expect: { contains: "say FINISHED before you stop" }
      text: FINISHED
  always:
    - text: One.
    - expect: { contains: "not yet, keep going" }
      text: Two.
    - text: Three.
    - text: Four.
  synthesis:
    - text: Summary.
"#;

#[test]
fn a_stop_hook_blocks_then_lets_go_and_one_that_keeps_blocking_is_capped() {
    let fx = Fixture::new("t-stop", &[("f.txt", "f\n")]);
    let run = fx.run(STOP, STOP_SCRIPT, &[]);
    let once = run.agent("once");
    assert_eq!(once["status"], "succeeded", "{once:#}\n{}", run.stderr);
    assert_eq!(once["turns"], 2);
    assert_eq!(once["text"], "FINISHED");
    let always = run.agent("always");
    assert_eq!(always["terminal"]["reason"], "hook_stopped", "{always:#}");
    // Three blocks are honoured; the fourth ends the agent with the named reason.
    assert_eq!(always["turns"], 4);
    assert!(always["reason"].as_str().unwrap().contains("not yet, keep going"), "{always:#}");
    let outcomes: Vec<String> =
        hook_events(&run, "always").iter().map(|h| h["outcome"].as_str().unwrap().to_owned()).collect();
    assert_eq!(outcomes, vec!["blocked: not yet, keep going".to_owned(); 4]);
}

const BROKEN: &str = r#"
version: 1
name: broken
defaults:
  tools: [Bash]
  limits: { max_turns: 4, timeout: 1m }
hooks:
  PreToolUse:
    - matcher: "*"
      hooks:
        - { command: "sleep 30", timeout: 1 }
        - { command: "kill -9 $$" }
        - { command: "echo 'something broke' >&2; exit 7" }
        - { command: "echo 'this is not json {'; echo '{not json either'" }
agents:
  a:
    prompt: Go.
integrate: none
"#;

const BROKEN_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: Bash, input: { command: "echo ran" } }]
    - expect: { contains: "ran" }
      text: Done.
  synthesis:
    - text: Summary.
"#;

#[test]
fn hooks_that_time_out_crash_or_fail_are_reported_and_the_call_still_runs() {
    let fx = Fixture::new("t-broken", &[("f.txt", "f\n")]);
    let started = Instant::now();
    let run = fx.run(BROKEN, BROKEN_SCRIPT, &[]);
    run.expect_code(0);
    assert!(started.elapsed() < Duration::from_secs(25), "the timeout did not cut the sleeping hook");
    assert_eq!(run.tool_results("a"), [("Bash".to_owned(), false, "ran".to_owned())]);
    let hooks = hook_events(&run, "a");
    let seen: Vec<(bool, String)> =
        hooks.iter().map(|h| (h["is_error"].as_bool().unwrap(), h["outcome"].as_str().unwrap().to_owned())).collect();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert_eq!(seen[0], (true, "timed out after 1s and was killed".to_owned()));
    assert!(seen[0].0 && hooks[0]["duration_ms"].as_u64().unwrap() < 10_000);
    assert!(seen[1].0 && seen[1].1.starts_with("killed by a signal"), "{seen:?}");
    assert_eq!(seen[2], (true, "exit 7: something broke".to_owned()));
    // Plain text on stdout of a PreToolUse hook is fine; it says nothing.
    assert_eq!(seen[3], (false, "ok".to_owned()));
}

const ALLOW: &str = r#"
version: 1
name: allow
defaults:
  tools: [Bash]
  limits: { max_turns: 4, timeout: 1m }
  permissions:
    deny: ["Bash(curl *)"]
    ask: ["Bash(git *)"]
hooks:
  PreToolUse:
    - matcher: Bash
      hooks:
        - command: >-
            printf '%s' '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "the hook trusts every command"}}'
agents:
  a:
    prompt: Go.
integrate: none
"#;

const ALLOW_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls:
        - { name: Bash, input: { command: "curl http://example.invalid" } }
    - tool_calls:
        - { name: Bash, input: { command: "git rev-parse --is-inside-work-tree" } }
    - text: Done.
  synthesis:
    - text: Summary.
"#;

#[test]
fn a_deny_rule_beats_a_hooks_allow_which_still_lifts_an_ask() {
    let fx = Fixture::new("t-allow", &[("f.txt", "f\n")]);
    let run = fx.run(ALLOW, ALLOW_SCRIPT, &[]);
    run.expect_code(0);
    let results = run.tool_results("a");
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].1, "{results:?}");
    assert!(results[0].2.contains("denied by the permission rule `Bash(curl *)`"), "{}", results[0].2);
    // `ask` would deny in an unattended run; the hook's allow lifts it.
    assert_eq!((results[1].1, results[1].2.trim()), (false, "true"));
}

const ESCAPE: &str = r#"
version: 1
name: escape
defaults:
  tools: [Read]
  limits: { max_turns: 3, timeout: 1m }
hooks:
  SessionStart:
    - hooks: [{ command: "touch \"$ESCAPE_TARGET\" 2>&1 && echo wrote it || echo could not write" }]
agents:
  a:
    prompt: Go.
integrate: none
"#;

#[test]
fn hooks_run_in_the_agents_sandbox() {
    let fx = Fixture::new("t-escape", &[("f.txt", "f\n")]);
    let target = fx.dir.path().join("outside.txt");
    // The variable is not passed into the sandbox, so the path is spelled out.
    let workflow = ESCAPE.replace("$ESCAPE_TARGET", target.to_str().unwrap());
    let script = "version: 1\nagents:\n  a:\n    - expect: { contains: \"could not write\" }\n      text: Done.\n  synthesis:\n    - text: S.\n";
    let run = fx.run(&workflow, script, &[]);
    run.expect_code(0);
    assert!(!target.exists(), "a hook wrote outside the agent's sandbox");
}

const PR_WORKFLOW: &str = r#"
version: 1
name: pr
defaults:
  tools: [Bash]
  limits: { max_turns: 3, timeout: 1m }
agents:
  a:
    prompt: Go.
integrate: none
"#;

const PR_SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{ name: Bash, input: { command: "echo hello" } }]
    - text: Done.
  synthesis:
    - text: Summary.
"#;

/// `orch run` of the pull-request fixture into its own run directory.
fn pr_run(fx: &Fixture, name: &str, env: &[(&str, &str)], extra: &[&str]) -> Run {
    let workflow = fx.write("pr.yaml", PR_WORKFLOW);
    let script = fx.write("pr-script.yaml", PR_SCRIPT);
    let out = fx.dir.path().join(format!("out-{name}"));
    let mut cmd: Command = orch();
    cmd.current_dir(fx.dir.path())
        .env_remove("GITHUB_EVENT_NAME")
        .env_remove("GITHUB_BASE_REF")
        .envs(env.iter().copied())
        .arg("run")
        .arg(&workflow)
        .args(["--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&out)
        .args(["--run-id", name])
        .args(extra);
    Run::from_output(&out, cmd.output().unwrap())
}

fn blocked(run: &Run) -> bool {
    let results = run.tool_results("a");
    assert_eq!(results.len(), 1, "{results:?}\n{}", run.stderr);
    results[0].1 && results[0].2.contains("hook added by the pull request")
}

#[test]
fn a_pull_request_run_ignores_a_hook_the_pull_request_adds() {
    let fx = Fixture::new("t-pr", &[("f.txt", "f\n")]);
    git(&fx.repo, &["checkout", "-q", "-b", "feature"]);
    let settings = fx.repo.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(
        &settings,
        r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "echo 'hook added by the pull request' >&2; exit 2"}]}]}}"#,
    )
    .unwrap();
    git(&fx.repo, &["add", "-A"]);
    git(&fx.repo, &["commit", "-q", "-m", "add a hook"]);
    assert!(Path::new(&settings).is_file());

    // GitHub's pull_request event: the base ref's settings have no hook.
    let github = [("GITHUB_EVENT_NAME", "pull_request"), ("GITHUB_BASE_REF", "main")];
    let run = pr_run(&fx, "pr-github", &github, &[]);
    run.expect_code(0);
    assert!(!blocked(&run));
    assert!(run.stderr.contains("come from the trusted ref `main`"), "{}", run.stderr);
    // The same with the explicit flag.
    let run = pr_run(&fx, "pr-flag", &[], &["--config-ref", "main"]);
    run.expect_code(0);
    assert!(!blocked(&run));
    // Opting in to the checked-out files runs the pull request's hook.
    let run = pr_run(&fx, "pr-trusted", &github, &["--trust-repo-config"]);
    run.expect_code(0);
    assert!(blocked(&run));
    // Trust follows the checked-out commit, not the event: a push of the branch, or a
    // pull-request event that names no base, still reads the default branch's files.
    for (name, event) in [("push", "push"), ("pr-nobase", "pull_request_target")] {
        let run = pr_run(&fx, name, &[("GITHUB_EVENT_NAME", event)], &[]);
        run.expect_code(0);
        assert!(!blocked(&run), "{event}");
        assert!(run.stderr.contains("come from the trusted ref `main`"), "{event}: {}", run.stderr);
    }
    // With the default branch checked out, its files are the checkout's.
    git(&fx.repo, &["checkout", "-q", "main"]);
    git(&fx.repo, &["merge", "-q", "--ff-only", "feature"]);
    let run = pr_run(&fx, "push-main", &[("GITHUB_EVENT_NAME", "push")], &[]);
    run.expect_code(0);
    assert!(blocked(&run));
}

#[test]
fn a_pull_request_run_ignores_an_agent_file_the_pull_request_adds() {
    let fx = Fixture::new("t-pr-agent", &[("f.txt", "f\n")]);
    git(&fx.repo, &["checkout", "-q", "-b", "feature"]);
    let file = fx.repo.join(".claude/agents/helper.md");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "---\nname: helper\ndescription: Helps.\n---\nYou help.\n").unwrap();
    git(&fx.repo, &["add", "-A"]);
    git(&fx.repo, &["commit", "-q", "-m", "add an agent"]);
    let workflow = fx.write(
        "uses.yaml",
        "version: 1\nname: uses\nagents:\n  a:\n    uses: helper\n    prompt: Go.\nintegrate: none\n",
    );
    let script = fx.write("uses-script.yaml", "version: 1\nagents:\n  \"*\":\n    - text: Done.\n");
    let run = |name: &str, extra: &[&str]| {
        let out = fx.dir.path().join(format!("out-{name}"));
        let mut cmd = orch();
        cmd.current_dir(fx.dir.path())
            .arg("run")
            .arg(&workflow)
            .args(["--provider", "scripted", "--script"])
            .arg(&script)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(&out)
            .args(["--run-id", name, "--config-ref", "main"])
            .args(extra);
        Run::from_output(&out, cmd.output().unwrap())
    };
    let base = run("pr-agent-base", &[]);
    base.expect_code(2);
    assert!(base.stderr.contains("uses: helper"), "{}", base.stderr);
    let trusted = run("pr-agent-trusted", &["--trust-repo-config"]);
    trusted.expect_code(0);
}
