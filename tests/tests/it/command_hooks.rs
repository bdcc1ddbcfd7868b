//! Command hooks through the `Hooks` interface, in-process: the events the end-to-end
//! suite cannot reach cheaply (PreCompact and its block, PostCompact, StopFailure),
//! nested agents' hooks, `continue: false`, and the payloads each event gets on stdin.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use orch_agents::Event;
use orch_agents::command_hooks::{CommandHook, CommandHooks, HookEvent};
use orch_agents::hooks::Hooks;
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{ToolCall, ToolOutput};
use serde_json::{Value, json};

fn hook(event: HookEvent, matcher: Option<&str>, command: &str) -> CommandHook {
    CommandHook {
        event,
        matcher: matcher.map(str::to_string),
        condition: None,
        command: command.to_string(),
        timeout: Duration::from_secs(10),
    }
}

struct World {
    dir: tempfile::TempDir,
    events: Arc<Mutex<Vec<Event>>>,
}

impl World {
    fn new() -> World {
        World { dir: tempfile::tempdir().unwrap(), events: Arc::new(Mutex::new(Vec::new())) }
    }

    fn hooks(&self, hooks: Vec<CommandHook>) -> CommandHooks {
        let cwd = self.dir.path();
        let executor = Arc::new(InProcess(HostTools::new(core_tools(), Arc::new(Session::new(cwd)))));
        let events = self.events.clone();
        let sink = Arc::new(move |e: Event| events.lock().unwrap().push(e));
        CommandHooks::new("main", cwd, hooks, core_tools(), executor, sink).unwrap()
    }

    fn payload(&self, name: &str) -> Value {
        serde_json::from_str(&std::fs::read_to_string(self.dir.path().join(name)).unwrap()).unwrap()
    }

    fn outcomes(&self) -> Vec<(String, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter_map(|e| match e {
                Event::Hook { event, outcome, .. } => Some((event.to_string(), outcome.clone())),
                _ => None,
            })
            .collect()
    }
}

#[tokio::test]
async fn a_nested_agent_runs_subagent_stop_hooks_and_no_session_start() {
    let world = World::new();
    let hooks = world.hooks(vec![
        hook(HookEvent::SessionStart, None, "echo main context"),
        hook(HookEvent::Stop, None, "cat > stop.json"),
        hook(HookEvent::SubagentStop, None, "cat > substop.json; echo 'report your findings first' >&2; exit 2"),
    ]);
    assert_eq!(hooks.session_start().await.as_deref(), Some("main context"));
    assert_eq!(hooks.stop(false, "finished").await, None);
    let stop = world.payload("stop.json");
    assert_eq!(stop["hook_event_name"], "Stop");
    assert_eq!(stop["last_assistant_message"], "finished");
    assert!(stop.get("agent_id").is_none(), "{stop}");

    let nested = hooks.for_subagent("main/sub-1", "general-purpose", Arc::new(|_e: Event| {}));
    assert_eq!(nested.session_start().await, None);
    assert_eq!(nested.stop(true, "").await.as_deref(), Some("report your findings first"));
    let payload = world.payload("substop.json");
    assert_eq!(payload["hook_event_name"], "SubagentStop");
    assert_eq!(payload["agent_id"], "main/sub-1");
    assert_eq!(payload["agent_type"], "general-purpose");
    assert_eq!(payload["stop_hook_active"], true);
    // Through the trait, as the pool hands hooks to a nested pool.
    let via_trait = Hooks::for_subagent(&hooks, "main/sub-2", "explorer", "plan").unwrap();
    assert_eq!(via_trait.stop(false, "").await.as_deref(), Some("report your findings first"));
    assert_eq!(world.payload("substop.json")["agent_id"], "main/sub-2");
    assert_eq!(world.payload("substop.json")["agent_type"], "explorer");
    assert_eq!(world.payload("substop.json")["permission_mode"], "plan");
}

#[tokio::test]
async fn pre_compact_hooks_match_the_trigger_and_get_it_on_stdin() {
    let world = World::new();
    let hooks = world.hooks(vec![
        hook(HookEvent::PreCompact, Some("manual"), "touch manual-ran"),
        hook(HookEvent::PreCompact, Some("auto"), "cat > compact.json"),
    ]);
    assert_eq!(hooks.pre_compact("auto").await, None);
    assert_eq!(world.payload("compact.json")["trigger"], "auto");
    assert_eq!(world.payload("compact.json")["hook_event_name"], "PreCompact");
    assert_eq!(world.payload("compact.json")["custom_instructions"], Value::Null);
    assert!(!world.dir.path().join("manual-ran").exists());
    assert_eq!(world.outcomes(), [("PreCompact".to_string(), "ok".to_string())]);
}

#[tokio::test]
async fn pre_compact_can_block_and_post_compact_and_session_start_add_context() {
    let world = World::new();
    let hooks = world.hooks(vec![
        hook(HookEvent::PreCompact, None, "echo 'keep the history, it holds the plan' >&2; exit 2"),
        hook(HookEvent::PostCompact, Some("auto"), "cat > post.json"),
        hook(HookEvent::SessionStart, Some("compact"), "cat > again.json; echo 'Re-read PLAN.md.'"),
        hook(HookEvent::SessionStart, Some("startup"), "touch startup-ran"),
        hook(HookEvent::StopFailure, Some("rate_limit"), "cat > failed.json"),
        hook(HookEvent::SessionEnd, None, "echo 'cannot stop this' >&2; exit 2"),
    ]);
    assert_eq!(hooks.pre_compact("auto").await.as_deref(), Some("keep the history, it holds the plan"));
    assert_eq!(hooks.post_compact("auto", "the notes").await.as_deref(), Some("Re-read PLAN.md."));
    assert_eq!(world.payload("post.json")["compact_summary"], "the notes");
    assert_eq!(world.payload("again.json")["source"], "compact");
    assert!(!world.dir.path().join("startup-ran").exists());
    hooks.stop_failure("rate_limit", "slow down", "half an answer").await;
    let failed = world.payload("failed.json");
    assert_eq!(
        (failed["error"].as_str(), failed["last_assistant_message"].as_str()),
        (Some("rate_limit"), Some("half an answer"))
    );
    hooks.session_end("other").await;
    let outcomes = world.outcomes();
    assert!(outcomes.last().unwrap().1.contains("cannot block"), "{outcomes:?}");
}

#[tokio::test]
async fn continue_false_halts_the_agent_with_the_stop_reason() {
    let world = World::new();
    let hooks = world.hooks(vec![hook(
        HookEvent::PostToolUse,
        Some("Read"),
        r#"printf '%s' '{"continue": false, "stopReason": "the build is broken; stop here"}'"#,
    )]);
    assert_eq!(hooks.halted(), None);
    let call = ToolCall { id: "t1".into(), name: "Read".into(), input: json!({"file_path": "x"}) };
    hooks.post_tool_use(&call, &ToolOutput::ok("text")).await;
    assert_eq!(hooks.halted().as_deref(), Some("the build is broken; stop here"));
}

#[tokio::test]
async fn conditions_use_the_permission_rule_syntax() {
    let world = World::new();
    let mut guarded = hook(HookEvent::PreToolUse, Some("Bash"), "echo 'no pushing from CI' >&2; exit 2");
    guarded.condition = Some("Bash(git push *)".into());
    let hooks = world.hooks(vec![guarded]);
    let bash = |command: &str| ToolCall { id: "t".into(), name: "Bash".into(), input: json!({"command": command}) };
    let pushed = hooks.pre_tool_use(&bash("git status && git push origin main")).await;
    assert_eq!(
        pushed.decision,
        Some(orch_agents::hooks::HookDecision::Deny("no pushing from CI".into())),
        "{pushed:?}"
    );
    let status = hooks.pre_tool_use(&bash("git status")).await;
    assert_eq!(status.decision, None);
    // The hook ran once: for the push only.
    assert_eq!(world.outcomes().len(), 1);
}

mod loop_sites {
    //! Where the query loop calls the session hooks: SessionStart before the first
    //! call, PreCompact before a compaction, Stop when the model stops.

    use std::sync::Mutex;

    use async_trait::async_trait;
    use orch_agents::hooks::Hooks;
    use orch_agents::{
        ContextConfig, Message, QueryConfig, Terminal, ToolCall, ToolOutput, ToolRunner, ToolSpec, query,
    };
    use orch_testkit::mock::{MockServer, MockUsage, Step, Turn};
    use serde_json::json;
    use tokio_util::sync::CancellationToken;

    use super::common;

    #[derive(Default)]
    struct Recorder {
        calls: Mutex<Vec<String>>,
        block_compaction: bool,
    }

    #[async_trait]
    impl Hooks for Recorder {
        async fn session_start(&self) -> Option<String> {
            self.calls.lock().unwrap().push("session_start".into());
            Some("CTX-42 from the hook".into())
        }

        async fn user_prompt_submit(&self, prompt: &str) -> orch_agents::hooks::PromptSubmit {
            self.calls.lock().unwrap().push(format!("user_prompt_submit:{prompt}"));
            orch_agents::hooks::PromptSubmit { blocked: None, context: Some("PROMPT-CTX".into()) }
        }

        async fn stop(&self, active: bool, last_message: &str) -> Option<String> {
            let mut calls = self.calls.lock().unwrap();
            calls.push(format!("stop:{active}:{last_message}"));
            (!active).then(|| "not yet: run the checks".to_string())
        }

        async fn pre_compact(&self, trigger: &str) -> Option<String> {
            self.calls.lock().unwrap().push(format!("pre_compact:{trigger}"));
            self.block_compaction.then(|| "not now".to_string())
        }

        async fn stop_failure(&self, error: &str, _details: &str, last_message: &str) {
            self.calls.lock().unwrap().push(format!("stop_failure:{error}:{last_message}"));
        }

        async fn post_compact(&self, trigger: &str, _summary: &str) -> Option<String> {
            self.calls.lock().unwrap().push(format!("post_compact:{trigger}"));
            Some("AFTER-COMPACT".into())
        }
    }

    struct Runner(Recorder);

    #[async_trait]
    impl ToolRunner for Runner {
        fn specs(&self) -> Vec<ToolSpec> {
            vec![ToolSpec {
                name: "Noop".into(),
                description: "Does nothing.".into(),
                input_schema: json!({"type": "object"}),
            }]
        }

        async fn run(&self, _call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
            ToolOutput::ok("fine")
        }

        fn hooks(&self) -> Option<&dyn Hooks> {
            Some(&self.0)
        }
    }

    #[tokio::test]
    async fn the_loop_calls_session_start_pre_compact_and_stop() {
        let mock = MockServer::start().await;
        let big = MockUsage {
            input_tokens: 8_500,
            output_tokens: 10,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        };
        mock.push_all([
            Step::Reply(Turn::tool("Noop", json!({})).with_usage(big)),
            Step::text("the summary"),
            Step::text("done"),
            Step::text("done, checks run"),
        ]);
        let mut config = QueryConfig::new("main", "claude-sonnet-4-5");
        config.limits.max_turns = Some(10);
        config.context = ContextConfig {
            window: 10_000,
            reserve: 2_000,
            keep_recent_turns: 100,
            microcompact_batch_tokens: 0,
            restore_files: 0,
            ..ContextConfig::default()
        };
        let runner = Runner(Recorder::default());
        let provider = common::anthropic(&mock.url());
        let sink = common::Collect::default();
        let out = query(&provider, &runner, &config, vec![Message::user("go")], &sink, &CancellationToken::new()).await;
        assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
        assert_eq!(out.final_text, "done, checks run");
        let calls = runner.0.calls.lock().unwrap().clone();
        assert_eq!(
            calls,
            [
                "session_start",
                "user_prompt_submit:go",
                "pre_compact:auto",
                "post_compact:auto",
                "stop:false:done",
                "stop:true:done, checks run",
            ]
        );
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 4);
        let first = reqs[0].messages()[0].to_string();
        assert!(first.contains("CTX-42 from the hook") && first.contains("PROMPT-CTX"), "{first}");
        assert!(reqs[2].messages()[0].to_string().contains("AFTER-COMPACT"), "{}", reqs[2].messages()[0]);
        let last = reqs[3].messages().last().unwrap().to_string();
        assert!(last.contains("not yet: run the checks"), "{last}");
    }

    #[tokio::test]
    async fn a_pre_compact_hook_that_blocks_keeps_the_history() {
        let mock = MockServer::start().await;
        let big = MockUsage {
            input_tokens: 8_500,
            output_tokens: 10,
            cache_creation_input_tokens: 0,
            cache_read_input_tokens: 0,
        };
        mock.push_all([
            Step::Reply(Turn::tool("Noop", json!({})).with_usage(big)),
            Step::text("done"),
            Step::text("done, checks run"),
        ]);
        let mut config = QueryConfig::new("main", "claude-sonnet-4-5");
        config.limits.max_turns = Some(10);
        config.context = ContextConfig {
            window: 10_000,
            reserve: 2_000,
            keep_recent_turns: 100,
            microcompact_batch_tokens: 0,
            restore_files: 0,
            ..ContextConfig::default()
        };
        let runner = Runner(Recorder { block_compaction: true, ..Recorder::default() });
        let provider = common::anthropic(&mock.url());
        let sink = common::Collect::default();
        let out = query(&provider, &runner, &config, vec![Message::user("go")], &sink, &CancellationToken::new()).await;
        assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
        let calls = runner.0.calls.lock().unwrap().clone();
        assert!(calls.contains(&"pre_compact:auto".to_string()), "{calls:?}");
        assert!(!calls.iter().any(|c| c.starts_with("post_compact")), "{calls:?}");
        // No summary request: every request is a turn of the agent, with its whole history.
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 3);
        assert!(reqs[1].messages()[0].to_string().contains("go"), "{}", reqs[1].messages()[0]);
    }

    #[tokio::test]
    async fn a_model_failure_runs_stop_failure_with_claude_codes_error_name() {
        let mock = MockServer::start().await;
        mock.push_all([
            Step::Reply(Turn::tool("Noop", json!({}))),
            Step::Status { code: 401, retry_after: None, body: None },
        ]);
        let config = QueryConfig::new("main", "claude-sonnet-4-5");
        let runner = Runner(Recorder::default());
        let provider = common::anthropic(&mock.url());
        let sink = common::Collect::default();
        let out = query(&provider, &runner, &config, vec![Message::user("go")], &sink, &CancellationToken::new()).await;
        assert!(matches!(out.terminal, Terminal::ModelError { .. }), "{:?}", out.terminal);
        let calls = runner.0.calls.lock().unwrap().clone();
        assert_eq!(calls.last().map(String::as_str), Some("stop_failure:authentication_failed:"), "{calls:?}");
        // A loop that completes runs no StopFailure.
        assert_eq!(calls.iter().filter(|c| c.starts_with("stop_failure")).count(), 1);
    }
}
