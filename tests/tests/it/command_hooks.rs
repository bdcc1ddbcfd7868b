//! Command hooks through the `Hooks` interface, in-process: the events the end-to-end
//! suite cannot reach cheaply (SubagentStop, PreCompact), `continue: false`, and the
//! payloads each event gets on stdin.
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
    assert_eq!(hooks.stop(false).await, None);
    assert_eq!(world.payload("stop.json")["hook_event_name"], "Stop");

    let nested = hooks.for_subagent("main/sub-1", Arc::new(|_e: Event| {}));
    assert_eq!(nested.session_start().await, None);
    assert_eq!(nested.stop(true).await.as_deref(), Some("report your findings first"));
    let payload = world.payload("substop.json");
    assert_eq!(payload["hook_event_name"], "SubagentStop");
    assert_eq!(payload["agent_id"], "main/sub-1");
    assert_eq!(payload["stop_hook_active"], true);
    // Through the trait, as the pool hands hooks to a nested pool.
    let via_trait = Hooks::for_subagent(&hooks, "main/sub-2").unwrap();
    assert_eq!(via_trait.stop(false).await.as_deref(), Some("report your findings first"));
    assert_eq!(world.payload("substop.json")["agent_id"], "main/sub-2");
}

#[tokio::test]
async fn pre_compact_hooks_match_the_trigger_and_get_it_on_stdin() {
    let world = World::new();
    let hooks = world.hooks(vec![
        hook(HookEvent::PreCompact, Some("manual"), "touch manual-ran"),
        hook(HookEvent::PreCompact, Some("auto"), "cat > compact.json"),
    ]);
    hooks.pre_compact("auto").await;
    assert_eq!(world.payload("compact.json")["trigger"], "auto");
    assert_eq!(world.payload("compact.json")["hook_event_name"], "PreCompact");
    assert!(!world.dir.path().join("manual-ran").exists());
    assert_eq!(world.outcomes(), [("PreCompact".to_string(), "ok".to_string())]);
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
    }

    #[async_trait]
    impl Hooks for Recorder {
        async fn session_start(&self) -> Option<String> {
            self.calls.lock().unwrap().push("session_start".into());
            Some("CTX-42 from the hook".into())
        }

        async fn stop(&self, active: bool) -> Option<String> {
            let mut calls = self.calls.lock().unwrap();
            calls.push(format!("stop:{active}"));
            (!active).then(|| "not yet: run the checks".to_string())
        }

        async fn pre_compact(&self, trigger: &str) {
            self.calls.lock().unwrap().push(format!("pre_compact:{trigger}"));
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
        assert_eq!(calls, ["session_start", "pre_compact:auto", "stop:false", "stop:true"]);
        let reqs = mock.requests();
        assert_eq!(reqs.len(), 4);
        assert!(reqs[0].messages()[0].to_string().contains("CTX-42 from the hook"), "{}", reqs[0].messages()[0]);
        let last = reqs[3].messages().last().unwrap().to_string();
        assert!(last.contains("not yet: run the checks"), "{last}");
    }
}
