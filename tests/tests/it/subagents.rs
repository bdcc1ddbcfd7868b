//! Nested sub-agents (the `Agent` tool) through the real loop and tool pool: parallel
//! calls against the mock server with latency, usage roll-up and budgets, the depth,
//! concurrency and total limits, cancellation down the tree but not up, and background
//! sub-agents (`run_in_background`): the call returns first, the report reaches the
//! caller's next request, the caller waits for it before finishing, and the caller's
//! end or abort stops it.
//!
//! Sub-agent ids are deterministic (`<caller>/sub-<n>`, the n-th `Agent` call of the
//! caller), so the scripted provider can give each one its own turns.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::{Collect, anthropic};
use orch_agents::model::scripted::ScriptedProvider;
use orch_agents::model::{ModelError, ModelProvider, ModelRequest, ModelResponse, StreamSink};
use orch_agents::permissions::Permissions;
use orch_agents::pipeline::ToolPool;
use orch_agents::subagent::{AgentDefinition, AgentTool, SubagentLimits, SubagentRecord, SubagentRun};
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{ContentBlock, Event, EventSink, Message, QueryConfig, QueryOutcome, Role, Terminal, Usage, query};
use orch_testkit::mock::{MockServer, MockUsage, Step, ToolCall, Turn};
use serde_json::json;
use tokio_util::sync::CancellationToken;

struct Tree {
    _dir: tempfile::TempDir,
    run: Arc<SubagentRun>,
    records: Arc<Mutex<Vec<SubagentRecord>>>,
    events: Collect,
}

impl Tree {
    fn records(&self) -> Vec<SubagentRecord> {
        let mut r = self.records.lock().unwrap().clone();
        r.sort_by(|a, b| a.id.cmp(&b.id));
        r
    }

    fn record(&self, id: &str) -> SubagentRecord {
        self.records()
            .into_iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no record {id}: {:?}", self.records()))
    }
}

/// Runs `root` with the core tools and `Agent`, in-process, through `provider`.
async fn run_tree(
    provider: Arc<dyn ModelProvider>,
    limits: SubagentLimits,
    definitions: Vec<AgentDefinition>,
    config: QueryConfig,
    cancel: &CancellationToken,
) -> (QueryOutcome, Tree) {
    run_tree_in(provider, SubagentRun::new(limits, definitions), config, cancel).await
}

/// [`run_tree`] with a prepared [`SubagentRun`].
async fn run_tree_in(
    provider: Arc<dyn ModelProvider>,
    run: SubagentRun,
    config: QueryConfig,
    cancel: &CancellationToken,
) -> (QueryOutcome, Tree) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let host = HostTools::new(core_tools(), Arc::new(Session::new(&cwd)));
    let pool = ToolPool::new("root", core_tools(), Arc::new(InProcess(host)), Permissions::allow_all(&cwd)).unwrap();
    let run = Arc::new(run);
    let records = Arc::new(Mutex::new(Vec::new()));
    let events = Collect::default();
    let sink: Arc<dyn EventSink> = Arc::new(events.clone());
    let pool = AgentTool::new(run.clone(), provider.clone(), config.clone(), sink.clone(), records.clone())
        .install(pool)
        .unwrap();
    let outcome = query(provider.as_ref(), &pool, &config, vec![Message::user("go")], &sink, cancel).await;
    (outcome, Tree { _dir: dir, run, records, events })
}

fn config() -> QueryConfig {
    QueryConfig::new("root", "claude-sonnet-4-5")
}

fn scripted(yaml: &str) -> Arc<dyn ModelProvider> {
    let script = orch_workflows::yaml::load_as("test.yaml", yaml.as_bytes()).unwrap();
    Arc::new(ScriptedProvider::new(script, "test.yaml").unwrap())
}

/// The tool results the root got, in order.
fn root_results(outcome: &QueryOutcome) -> Vec<(String, bool)> {
    outcome
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::ToolResult { content, is_error, .. } => Some((content.clone(), *is_error)),
            _ => None,
        })
        .collect()
}

fn agent_call(prompt: &str) -> ToolCall {
    ToolCall::new("Agent", json!({ "prompt": prompt, "description": "a piece of work" }))
}

#[tokio::test]
async fn parallel_agent_calls_overlap_and_return_only_their_reports() {
    let mock = MockServer::start().await;
    let latency = Duration::from_millis(400);
    mock.set_latency(latency);
    // The root's first turn: three sub-agents in one answer. Each sub-agent answers in
    // one turn; then the root's final answer. The queue serves whichever asks first.
    mock.push(Step::Reply(Turn::tools(vec![agent_call("count a"), agent_call("count b"), agent_call("count c")])));
    for _ in 0..3 {
        mock.push(Step::text("REPORT: three files"));
    }
    mock.push(Step::text("all three reported"));
    let provider: Arc<dyn ModelProvider> = Arc::new(anthropic(&mock.url()));
    let started = Instant::now();
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    let elapsed = started.elapsed();
    assert_eq!(outcome.terminal, Terminal::Completed, "{:?}", outcome.final_text);
    // Sequential sub-agents would take 5 latencies; parallel ones take 3.
    assert!(elapsed < latency * 4, "took {elapsed:?}: the sub-agents did not overlap");
    assert_eq!(tree.run.peak_concurrent(), 3);
    let ids: Vec<String> = tree.records().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["root/sub-1", "root/sub-2", "root/sub-3"]);
    let results = root_results(&outcome);
    assert_eq!(results.len(), 3);
    for (text, is_error) in &results {
        assert!(!is_error, "{text}");
        assert!(text.starts_with("REPORT: three files"), "{text}");
    }
    // The sub-agents' conversations are their own: a fresh history with the task.
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    let sub_requests: Vec<_> = requests.iter().filter(|r| r.messages().len() == 1).collect();
    assert_eq!(sub_requests.len(), 4, "the root's first request and three sub-agents start fresh");
    mock.assert_tool_pairing();
    // Their events reach the caller's sink, wrapped with their ids.
    let nested: Vec<String> = tree
        .events
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Subagent { agent, event, .. } if matches!(**event, Event::Terminal { .. }) => Some(agent.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(nested.len(), 3, "{nested:?}");
}

#[tokio::test]
async fn usage_rolls_up_into_the_caller_and_counts_against_its_budget() {
    let mock = MockServer::start().await;
    let usage = |input, output| MockUsage { input_tokens: input, output_tokens: output, ..MockUsage::default() };
    mock.push(Step::Reply(Turn::tools(vec![agent_call("a"), agent_call("b")]).with_usage(usage(100, 10))));
    for _ in 0..2 {
        mock.push(Step::Reply(Turn::text("done").with_usage(usage(1000, 50))));
    }
    mock.push(Step::Reply(Turn::text("summary").with_usage(usage(200, 20))));
    let provider: Arc<dyn ModelProvider> = Arc::new(anthropic(&mock.url()));
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed);
    let expected = Usage { input_tokens: 100 + 2000 + 200, output_tokens: 10 + 100 + 20, ..Usage::default() };
    assert_eq!(outcome.usage, expected);
    let records = tree.records();
    assert_eq!(records.iter().map(|r| r.usage.total()).sum::<u64>(), 2100);
    let sub_cost: f64 = records.iter().map(|r| r.cost_usd).sum();
    let own_cost: f64 = tree
        .events
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::Usage { cost_usd, .. } => Some(*cost_usd),
            _ => None,
        })
        .sum();
    assert!(sub_cost > 0.0 && own_cost > 0.0);
    assert!((outcome.cost_usd - (own_cost + sub_cost)).abs() < 1e-9, "{} vs {own_cost} + {sub_cost}", outcome.cost_usd);

    // The same tree under a token budget the root alone stays within (its first call's
    // worst case, prompt plus a shrunk output cap, fits), but not with its sub-agents
    // (5,050 tokens each): it stops before its next turn.
    let mock = MockServer::start().await;
    mock.push(Step::Reply(Turn::tools(vec![agent_call("a"), agent_call("b")]).with_usage(usage(100, 10))));
    for _ in 0..2 {
        mock.push(Step::Reply(Turn::text("done").with_usage(usage(5000, 50))));
    }
    mock.push(Step::Reply(Turn::text("summary").with_usage(usage(200, 20))));
    let mut limited = config();
    limited.limits.max_tokens = Some(8000);
    let provider: Arc<dyn ModelProvider> = Arc::new(anthropic(&mock.url()));
    let (outcome, _tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), limited, &CancellationToken::new()).await;
    assert!(matches!(outcome.terminal, Terminal::BudgetExceeded { .. }), "{:?}", outcome.terminal);
    assert_eq!(outcome.turns, 1, "{:?}", outcome.terminal);
    assert_eq!(mock.remaining(), 1, "the root's second turn never ran");
}

#[tokio::test]
async fn the_depth_limit_withholds_the_agent_tool_and_says_why() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "level one" } }]
    - text: root done
  root/sub-1:
    - tool_calls: [{ name: Agent, input: { prompt: "level two" } }]
    - text: one done
  root/sub-1/sub-1:
    - tool_calls: [{ name: Agent, input: { prompt: "level three" } }]
    - text: two done
      expect: { contains: "subagents.max_depth: 2" }
"#,
    );
    let limits = SubagentLimits { max_depth: 2, ..SubagentLimits::default() };
    let (outcome, tree) = run_tree(provider, limits, Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let records = tree.records();
    let ids: Vec<&str> = records.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["root/sub-1", "root/sub-1/sub-1"]);
    assert!(records.iter().all(|r| r.status == "completed"), "{records:?}");
    assert_eq!(tree.run.started(), 2);
}

#[tokio::test]
async fn the_total_limit_is_a_clear_tool_error() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "first" } }]
    - tool_calls: [{ name: Agent, input: { prompt: "second" } }]
    - tool_calls: [{ name: Agent, input: { prompt: "third" } }]
    - text: stopped delegating
      expect: { contains: "subagents.max_total" }
  "root/sub-*":
    - text: done
"#,
    );
    let limits = SubagentLimits { max_total: 2, ..SubagentLimits::default() };
    let (outcome, tree) = run_tree(provider, limits, Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(tree.records().len(), 2);
    let results = root_results(&outcome);
    assert!(results[2].1 && results[2].0.contains("root/sub-3 was not started"), "{:?}", results[2]);
}

#[tokio::test]
async fn calls_beyond_the_concurrency_limit_wait_for_a_slot() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls:
        - { name: Agent, input: { prompt: "one" } }
        - { name: Agent, input: { prompt: "two" } }
        - { name: Agent, input: { prompt: "three" } }
    - text: all three ran
  "root/sub-*":
    - text: done
"#,
    );
    let slow = ["root/sub-1", "root/sub-2", "root/sub-3"].map(String::from).to_vec();
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow { inner: provider, slow, delay: Duration::from_millis(200) });
    let limits = SubagentLimits { max_concurrent: 2, ..SubagentLimits::default() };
    let (outcome, tree) = run_tree(provider, limits, Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let results = root_results(&outcome);
    assert_eq!(results.iter().filter(|(_, e)| *e).count(), 0, "{results:?}");
    assert_eq!(tree.records().len(), 3);
    assert_eq!(tree.run.peak_concurrent(), 2);
}

#[tokio::test]
async fn a_queued_call_that_waits_too_long_is_a_clear_tool_error() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls:
        - { name: Agent, input: { prompt: "one" } }
        - { name: Agent, input: { prompt: "two" } }
        - { name: Agent, input: { prompt: "three" } }
    - text: two of three ran
      expect: { contains: "subagents.max_concurrent" }
  "root/sub-*":
    - text: done
"#,
    );
    let slow = ["root/sub-1", "root/sub-2", "root/sub-3"].map(String::from).to_vec();
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow { inner: provider, slow, delay: Duration::from_millis(2000) });
    let limits = SubagentLimits { max_concurrent: 2, ..SubagentLimits::default() };
    let run = SubagentRun::new(limits, Vec::new()).with_queue_wait(Duration::from_millis(100));
    let (outcome, tree) = run_tree_in(provider, run, config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let results = root_results(&outcome);
    assert_eq!(results.iter().filter(|(_, e)| *e).count(), 1, "{results:?}");
    assert_eq!(tree.records().len(), 2);
    assert_eq!(tree.run.peak_concurrent(), 2);
}

#[tokio::test]
async fn task_is_agent_and_the_built_in_types_exist() {
    // The inputs Claude Code's model sends to Task: description, prompt, subagent_type.
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls:
        - { name: Task, input: { description: "Find the notes", prompt: "look for notes", subagent_type: Explore } }
    - tool_calls:
        - { name: Task, input: { description: "Plan it", prompt: "plan a change", subagent_type: Plan } }
    - tool_calls:
        - { name: Task, input: { description: "Do it", prompt: "change notes.txt", subagent_type: general-purpose } }
    - text: done
  root/sub-1:
    - tool_calls: [{ name: Write, input: { file_path: "notes.txt", content: "changed" } }]
    - text: could not write
      expect: { contains: "no tool named `Write`" }
  root/sub-2:
    - tool_calls: [{ name: Bash, input: { command: "touch made-by-plan" } }]
    - text: could not run
      expect: { contains: "no tool named `Bash`" }
  root/sub-3:
    - tool_calls: [{ name: Bash, input: { command: "echo general > general.txt" } }]
    - text: wrote it
"#,
    );
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let results = root_results(&outcome);
    assert!(results.iter().all(|(_, e)| !e), "{results:?}");
    assert_eq!(tree.record("root/sub-1").subagent_type.as_deref(), Some("Explore"));
    let dir = tree._dir.path();
    assert_eq!(std::fs::read_to_string(dir.join("notes.txt")).unwrap(), "alpha\n");
    assert!(!dir.join("made-by-plan").exists());
    assert_eq!(std::fs::read_to_string(dir.join("general.txt")).unwrap(), "general\n");
}

#[tokio::test]
async fn a_sub_agent_cannot_edit_a_file_only_its_caller_read() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Read, input: { file_path: "notes.txt" } }]
    - tool_calls: [{ name: Task, input: { description: "Edit", prompt: "edit notes.txt", subagent_type: general-purpose } }]
    - tool_calls: [{ name: Edit, input: { file_path: "notes.txt", old_string: "alpha", new_string: "root" } }]
    - text: done
  root/sub-1:
    - tool_calls: [{ name: Edit, input: { file_path: "notes.txt", old_string: "alpha", new_string: "beta" } }]
    - text: refused
      expect: { contains: "you have not read it" }
"#,
    );
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let results = root_results(&outcome);
    assert!(results.iter().all(|(_, e)| !e), "{results:?}");
    // The sub-agent's edit did not happen; the caller's own edit did.
    assert_eq!(std::fs::read_to_string(tree._dir.path().join("notes.txt")).unwrap(), "root\n");
}

/// A provider that answers the agents in `slow` only after `delay` (the scripted
/// provider itself answers at once).
struct Slow {
    inner: Arc<dyn ModelProvider>,
    slow: Vec<String>,
    delay: Duration,
}

#[async_trait]
impl ModelProvider for Slow {
    fn name(&self) -> &str {
        "slow"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        if self.slow.iter().any(|s| s == request.agent_id) {
            tokio::time::sleep(self.delay).await;
        }
        self.inner.send(request, sink).await
    }
}

const TWO_LEVELS: &str = r#"
version: 1
agents:
  root:
    - tool_calls:
        - { name: Agent, input: { prompt: "slow branch" } }
        - { name: Agent, input: { prompt: "quick branch" } }
    - text: root carried on
      expect: { contains: "did not finish" }
  root/sub-1:
    - tool_calls: [{ name: Agent, input: { prompt: "deep work" } }]
    - text: never
  root/sub-1/sub-1:
    - text: never
  root/sub-2:
    - text: quick done
"#;

#[tokio::test]
async fn cancelling_the_caller_cancels_the_whole_tree_at_once() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(TWO_LEVELS),
        slow: vec!["root/sub-1/sub-1".into()],
        delay: Duration::from_secs(30),
    });
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let (outcome, tree) = run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &cancel).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(matches!(outcome.terminal, Terminal::Aborted { .. }), "{:?}", outcome.terminal);
    assert_eq!(tree.record("root/sub-1").status, "aborted");
    assert_eq!(tree.record("root/sub-1/sub-1").status, "aborted");
    assert_eq!(tree.record("root/sub-2").status, "completed");
    assert!(tree.run.running().is_empty(), "{:?}", tree.run.running());
}

#[tokio::test]
async fn cancelling_a_sub_agent_cancels_its_subtree_but_not_its_caller() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(TWO_LEVELS),
        slow: vec!["root/sub-1/sub-1".into()],
        delay: Duration::from_secs(30),
    });
    let limits = SubagentLimits::default();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let host = HostTools::new(core_tools(), Arc::new(Session::new(&cwd)));
    let pool = ToolPool::new("root", core_tools(), Arc::new(InProcess(host)), Permissions::allow_all(&cwd)).unwrap();
    let run = Arc::new(SubagentRun::new(limits, Vec::new()));
    let records = Arc::new(Mutex::new(Vec::<SubagentRecord>::new()));
    let sink: Arc<dyn EventSink> = Arc::new(Collect::default());
    let pool =
        AgentTool::new(run.clone(), provider.clone(), config(), sink.clone(), records.clone()).install(pool).unwrap();
    let watcher = run.clone();
    tokio::spawn(async move {
        // Once the deep sub-agent is running, cancel its parent, `root/sub-1`.
        loop {
            if watcher.running().iter().any(|id| id == "root/sub-1/sub-1") {
                assert!(watcher.cancel("root/sub-1"));
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let started = Instant::now();
    let outcome =
        query(provider.as_ref(), &pool, &config(), vec![Message::user("go")], &sink, &CancellationToken::new()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.final_text, "root carried on");
    let records = records.lock().unwrap().clone();
    let status = |id: &str| records.iter().find(|r| r.id == id).map(|r| r.status.clone()).unwrap();
    assert_eq!(status("root/sub-1"), "aborted");
    assert_eq!(status("root/sub-1/sub-1"), "aborted");
    assert_eq!(status("root/sub-2"), "completed");
    let results = root_results(&outcome);
    assert!(results[0].1 && results[0].0.contains("did not finish"), "{:?}", results[0]);
    assert!(!results[1].1 && results[1].0.starts_with("quick done"), "{:?}", results[1]);
}

#[tokio::test]
async fn a_named_agent_type_gets_its_prompt_tools_and_turn_limit() {
    let provider = scripted(
        r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "review notes.txt", subagent_type: reviewer } }]
    - tool_calls: [{ name: Agent, input: { prompt: "x", subagent_type: nobody } }]
    - tool_calls: [{ name: Agent, input: { prompt: "x", tools: [Read, WebSearch] } }]
    - text: done
  root/sub-1:
    - tool_calls: [{ name: Bash, input: { command: "echo hi" } }]
    - text: looked
      expect: { contains: "no tool named `Bash`" }
"#,
    );
    let reviewer = AgentDefinition {
        name: "reviewer".into(),
        description: "Reviews files for mistakes.".into(),
        tools: Some(vec!["Read".into(), "Grep".into(), "WebFetch".into()]),
        max_turns: Some(2),
        system_prompt: "You review files.".into(),
        ..AgentDefinition::default()
    };
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), vec![reviewer], config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let record = tree.record("root/sub-1");
    assert_eq!((record.status.as_str(), record.turns), ("completed", 2));
    assert_eq!(record.subagent_type.as_deref(), Some("reviewer"));
    let results = root_results(&outcome);
    assert!(
        results[1].1
            && results[1]
                .0
                .contains("no agent type `nobody`; the agent types are: reviewer, general-purpose, Explore, Plan")
    );
    assert!(results[2].1 && results[2].0.contains("you asked for the tool `WebSearch`"), "{:?}", results[2]);
    // The tool description offers the definitions by name and description.
    let spec = {
        let cwd = tree._dir.path().canonicalize().unwrap();
        let host = HostTools::new(core_tools(), Arc::new(Session::new(&cwd)));
        let pool = ToolPool::new("x", core_tools(), Arc::new(InProcess(host)), Permissions::allow_all(&cwd)).unwrap();
        let sink: Arc<dyn EventSink> = Arc::new(Collect::default());
        let pool = AgentTool::new(
            tree.run.clone(),
            scripted("version: 1\nagents: {}\n"),
            config(),
            sink,
            tree.records.clone(),
        )
        .install(pool)
        .unwrap();
        orch_agents::ToolRunner::specs(&pool).into_iter().find(|s| s.name == "Agent").unwrap()
    };
    assert!(spec.description.contains("- reviewer: Reviews files for mistakes."), "{}", spec.description);
}

/// A provider that notes the model each agent asked for.
struct Models {
    inner: Arc<dyn ModelProvider>,
    seen: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl ModelProvider for Models {
    fn name(&self) -> &str {
        "models"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        self.seen.lock().unwrap().push((request.agent_id.to_string(), request.model.to_string()));
        self.inner.send(request, sink).await
    }
}

#[tokio::test]
async fn the_agent_tool_takes_a_model_alias_or_id() {
    let provider = Arc::new(Models {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "a", model: haiku } }]
    - tool_calls: [{ name: Agent, input: { prompt: "b", model: claude-opus-4-1-20250805 } }]
    - tool_calls: [{ name: Agent, input: { prompt: "c", model: inherit, subagent_type: quick } }]
    - tool_calls: [{ name: Agent, input: { prompt: "d", subagent_type: quick } }]
    - tool_calls: [{ name: Agent, input: { prompt: "e", model: "" } }]
    - text: done
  root/sub-1:
    - text: a done
  root/sub-2:
    - text: b done
  root/sub-3:
    - text: c done
  root/sub-4:
    - text: d done
"#,
        ),
        seen: Mutex::new(Vec::new()),
    });
    let quick = AgentDefinition {
        name: "quick".into(),
        description: "Answers quickly.".into(),
        model: Some("claude-haiku-4-5".into()),
        system_prompt: "Be quick.".into(),
        ..AgentDefinition::default()
    };
    let (outcome, _tree) =
        run_tree(provider.clone(), SubagentLimits::default(), vec![quick], config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let seen = provider.seen.lock().unwrap().clone();
    let model_of = |id: &str| seen.iter().find(|(a, _)| a == id).map(|(_, m)| m.clone()).unwrap();
    assert_eq!(model_of("root"), "claude-sonnet-4-5");
    // An alias is its model id; a full id is used as it is.
    assert_eq!(model_of("root/sub-1"), "claude-haiku-4-5");
    assert_eq!(model_of("root/sub-2"), "claude-opus-4-1-20250805");
    // `inherit` is the caller's model, over the definition's; without `model`, the definition's.
    assert_eq!(model_of("root/sub-3"), "claude-sonnet-4-5");
    assert_eq!(model_of("root/sub-4"), "claude-haiku-4-5");
    let results = root_results(&outcome);
    assert!(!results[1].1 && results[1].0.starts_with("b done"), "{:?}", results[1]);
    assert!(results[4].1 && results[4].0.contains("`model` is empty"), "{:?}", results[4]);
}

/// The `Agent` calls of the root that finished (not those of its sub-agents), with how
/// long each took.
fn root_agent_calls(tree: &Tree) -> Vec<(bool, u64, String)> {
    tree.events
        .events()
        .iter()
        .filter_map(|e| match e {
            Event::ToolUseFinished { name, is_error, duration_ms, output, .. } if name == "Agent" => {
                Some((*is_error, *duration_ms, output.clone()))
            }
            _ => None,
        })
        .collect()
}

/// The text the root's conversation gave it in user messages, apart from tool results.
fn root_notes(outcome: &QueryOutcome) -> Vec<String> {
    outcome
        .messages
        .iter()
        .filter(|m| m.role == Role::User)
        .flat_map(|m| m.content.iter())
        .filter_map(|b| match b {
            ContentBlock::Text { text } if text.contains("<task-notification>") => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_background_agent_returns_at_once_and_its_report_reaches_the_caller_that_waits_for_it() {
    let delay = Duration::from_millis(800);
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "survey the notes", description: "a survey", run_in_background: true } }]
      usage: { input_tokens: 100, output_tokens: 10 }
    # It ends its answer while the sub-agent runs: the loop waits, then hands it the report.
    - text: waiting for the survey
      expect: { contains: "running in the background" }
      usage: { input_tokens: 100, output_tokens: 10 }
    - text: the survey says alpha
      expect: { contains: "SURVEY: alpha" }
      usage: { input_tokens: 100, output_tokens: 10 }
  root/sub-1:
    - text: "SURVEY: alpha"
      usage: { input_tokens: 1000, output_tokens: 50 }
"#,
        ),
        slow: vec!["root/sub-1".into()],
        delay,
    });
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.final_text, "the survey says alpha");
    assert_eq!(outcome.turns, 3);
    // The call came back before the sub-agent had its first answer.
    let calls = root_agent_calls(&tree);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let (is_error, took, text) = &calls[0];
    assert!(!is_error && text.contains("root/sub-1"), "{text}");
    assert!(Duration::from_millis(*took) < delay / 2, "the call took {took} ms");
    let record = tree.record("root/sub-1");
    assert_eq!(record.status, "completed");
    assert!(Duration::from_millis(record.duration_ms) >= delay, "{record:?}");
    // The report came as one notification, after the answer that ended while it ran.
    let notes = root_notes(&outcome);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("root/sub-1 (a survey) finished") && notes[0].contains("SURVEY: alpha"), "{}", notes[0]);
    // Its spend is the caller's.
    assert_eq!(outcome.usage, Usage { input_tokens: 1300, output_tokens: 80, ..Usage::default() });
    assert!(tree.run.running().is_empty());
}

#[tokio::test]
async fn a_background_report_joins_the_next_request_while_the_caller_works_on() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "survey", run_in_background: true } }]
    - tool_calls: [{ name: Bash, input: { command: "sleep 1; echo slept" } }]
      expect: { contains: "running in the background" }
    # The newest user message holds the Bash result and, beside it, the report.
    - text: both in
      expect: { contains: "SURVEY: beta" }
  root/sub-1:
    - text: "SURVEY: beta"
"#,
        ),
        slow: vec!["root/sub-1".into()],
        delay: Duration::from_millis(200),
    });
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.turns, 3);
    let last_user = outcome.messages.iter().rev().find(|m| m.role == Role::User).unwrap();
    assert!(matches!(last_user.content.first(), Some(ContentBlock::ToolResult { .. })), "{last_user:?}");
    assert!(last_user.text().contains("SURVEY: beta"), "{last_user:?}");
    assert_eq!(tree.record("root/sub-1").status, "completed");
}

const BACKGROUND_NEVER_ENDS: &str = r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "long work", run_in_background: true } }]
    # Long enough for the sub-agent to start its own.
    - tool_calls: [{ name: Bash, input: { command: "sleep 0.5" } }]
    - text: waiting
  root/sub-1:
    - tool_calls: [{ name: Agent, input: { prompt: "deeper", run_in_background: true } }]
    - text: never
  root/sub-1/sub-1:
    - text: never
"#;

#[tokio::test]
async fn aborting_the_caller_stops_its_background_agents_and_theirs() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(BACKGROUND_NEVER_ENDS),
        slow: vec!["root/sub-1/sub-1".into()],
        delay: Duration::from_secs(30),
    });
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        canceller.cancel();
    });
    let started = Instant::now();
    let (outcome, tree) = run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &cancel).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    // The root waited at its last answer, and was aborted there.
    assert!(matches!(outcome.terminal, Terminal::Aborted { .. }), "{:?}", outcome.terminal);
    assert_eq!(outcome.turns, 3);
    assert_eq!(tree.record("root/sub-1").status, "aborted");
    assert_eq!(tree.record("root/sub-1/sub-1").status, "aborted");
    assert!(tree.run.running().is_empty(), "{:?}", tree.run.running());
}

#[tokio::test]
async fn a_caller_ending_at_a_limit_stops_its_background_agents() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(BACKGROUND_NEVER_ENDS),
        slow: vec!["root/sub-1/sub-1".into()],
        delay: Duration::from_secs(30),
    });
    let mut limited = config();
    limited.limits.max_turns = Some(2);
    let started = Instant::now();
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), limited, &CancellationToken::new()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(outcome.terminal, Terminal::MaxTurns { limit: 2 });
    assert_eq!(tree.record("root/sub-1").status, "aborted");
    assert_eq!(tree.record("root/sub-1/sub-1").status, "aborted");
    assert!(tree.run.running().is_empty(), "{:?}", tree.run.running());
}

#[tokio::test]
async fn background_agents_wait_for_a_slot_in_their_own_task() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls:
        - { name: Agent, input: { prompt: "one", run_in_background: true } }
        - { name: Agent, input: { prompt: "two", run_in_background: true } }
    - text: waiting
      expect: { contains: "running in the background" }
    - text: one is in
      expect: { contains: "ONE" }
    - text: both are in
      expect: { contains: "TWO" }
  root/sub-1:
    - text: ONE
  root/sub-2:
    - text: TWO
"#,
        ),
        slow: vec!["root/sub-1".into(), "root/sub-2".into()],
        delay: Duration::from_millis(400),
    });
    let limits = SubagentLimits { max_concurrent: 1, ..SubagentLimits::default() };
    let (outcome, tree) = run_tree(provider, limits, Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.final_text, "both are in");
    // Both calls came back at once; the sub-agents ran one after the other.
    for (is_error, took, text) in root_agent_calls(&tree) {
        assert!(!is_error && took < 200, "{took} ms: {text}");
    }
    assert_eq!(tree.run.peak_concurrent(), 1);
    assert_eq!(root_notes(&outcome).len(), 2);
}

#[tokio::test]
async fn task_output_waits_for_a_background_report_which_is_then_not_delivered_again() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "survey", run_in_background: true } }]
    - tool_calls: [{ name: TaskOutput, input: { task_id: root/sub-1 } }]
      expect: { contains: "running in the background" }
    - text: read it
      expect: { contains: "SURVEY: gamma" }
  root/sub-1:
    - text: "SURVEY: gamma"
"#,
        ),
        slow: vec!["root/sub-1".into()],
        delay: Duration::from_millis(300),
    });
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.turns, 3);
    let results = root_results(&outcome);
    assert!(!results[1].1 && results[1].0.contains("SURVEY: gamma"), "{:?}", results[1]);
    assert!(root_notes(&outcome).is_empty(), "delivered twice: {:?}", root_notes(&outcome));
    assert_eq!(tree.record("root/sub-1").status, "completed");
}

#[tokio::test]
async fn a_background_agent_against_the_mock_server_overlaps_its_caller_and_spends_into_its_totals() {
    let mock = MockServer::start().await;
    let latency = Duration::from_millis(400);
    mock.set_latency(latency);
    let usage = |input, output| MockUsage { input_tokens: input, output_tokens: output, ..MockUsage::default() };
    let background = ToolCall::new("Agent", json!({ "prompt": "count", "run_in_background": true }));
    mock.push(Step::Reply(Turn::tools(vec![background]).with_usage(usage(100, 10))));
    // The root's second turn and the sub-agent's only one are asked at the same time;
    // whichever gets which, both end their agent's answer.
    mock.push(Step::Reply(Turn::text("first").with_usage(usage(1000, 50))));
    mock.push(Step::Reply(Turn::text("second").with_usage(usage(2000, 60))));
    mock.push(Step::Reply(Turn::text("all in").with_usage(usage(300, 30))));
    let provider: Arc<dyn ModelProvider> = Arc::new(anthropic(&mock.url()));
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    assert_eq!(outcome.final_text, "all in");
    assert_eq!(outcome.turns, 3);
    assert_eq!(mock.remaining(), 0);
    let calls = root_agent_calls(&tree);
    assert!(calls.len() == 1 && Duration::from_millis(calls[0].1) < latency, "{calls:?}");
    assert_eq!(root_notes(&outcome).len(), 1);
    assert_eq!(outcome.usage, Usage { input_tokens: 3400, output_tokens: 150, ..Usage::default() });
    let record = tree.record("root/sub-1");
    assert_eq!(record.status, "completed");
    assert!(record.cost_usd > 0.0 && outcome.cost_usd > record.cost_usd);
}

#[tokio::test]
async fn task_stop_stops_a_background_agent_and_its_subtree_and_returns_its_result() {
    let provider: Arc<dyn ModelProvider> = Arc::new(Slow {
        inner: scripted(
            r#"
version: 1
agents:
  root:
    - tool_calls: [{ name: Agent, input: { prompt: "long work", run_in_background: true } }]
    # Long enough for the sub-agent to start its own.
    - tool_calls: [{ name: Bash, input: { command: "sleep 0.5" } }]
      expect: { contains: "running in the background" }
    - tool_calls: [{ name: TaskStop, input: { task_id: root/sub-1 } }]
    - text: stopped it
      expect: { contains: "Stopped root/sub-1" }
  root/sub-1:
    - tool_calls: [{ name: Agent, input: { prompt: "deeper" } }]
    - text: never
  root/sub-1/sub-1:
    - text: never
"#,
        ),
        slow: vec!["root/sub-1/sub-1".into()],
        delay: Duration::from_secs(30),
    });
    let started = Instant::now();
    let (outcome, tree) =
        run_tree(provider, SubagentLimits::default(), Vec::new(), config(), &CancellationToken::new()).await;
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    assert_eq!(outcome.terminal, Terminal::Completed, "{}", outcome.final_text);
    let results = root_results(&outcome);
    assert!(!results[2].1 && results[2].0.contains("ended with an error"), "{:?}", results[2]);
    assert!(root_notes(&outcome).is_empty(), "delivered twice: {:?}", root_notes(&outcome));
    assert_eq!(tree.record("root/sub-1").status, "aborted");
    assert_eq!(tree.record("root/sub-1/sub-1").status, "aborted");
}
