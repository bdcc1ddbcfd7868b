//! The tool pipeline: lookup, schema check, validate, hooks, permissions, the call,
//! post hooks and result mapping, in that order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use orch_agents::hooks::{HookDecision, Hooks, PostToolUse, PreToolUse};
use orch_agents::permissions::{Mode, Permissions, RuleSet};
use orch_agents::pipeline::ToolPool;
use orch_agents::protocol::{HostRequest, ToolExecutor};
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{ToolCall, ToolOutput, ToolRunner};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Records what reaches each stage.
#[derive(Default)]
struct Trace(Mutex<Vec<String>>);

impl Trace {
    fn push(&self, s: impl Into<String>) {
        self.0.lock().unwrap().push(s.into());
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// An executor that records requests and runs them in-process.
struct Recording {
    inner: InProcess,
    trace: Arc<Trace>,
    fail: bool,
}

#[async_trait]
impl ToolExecutor for Recording {
    async fn execute(&self, request: HostRequest, cancel: CancellationToken) -> Result<ToolOutput, String> {
        if let HostRequest::Tool(call) = &request {
            self.trace.push(format!("call {} {}", call.tool, call.input));
        }
        if self.fail {
            return Err("the tool host exited (signal 9)".into());
        }
        self.inner.execute(request, cancel).await
    }
}

/// A scripted in-process hook.
#[derive(Default)]
struct TestHook {
    trace: Arc<Trace>,
    decision: Option<HookDecision>,
    rewrite: Option<Value>,
    context: Option<String>,
    post_context: Option<String>,
}

#[async_trait]
impl Hooks for TestHook {
    async fn pre_tool_use(&self, call: &ToolCall) -> PreToolUse {
        self.trace.push(format!("pre {}", call.name));
        PreToolUse {
            decision: self.decision.clone(),
            updated_input: self.rewrite.clone(),
            context: self.context.clone(),
        }
    }

    async fn post_tool_use(&self, call: &ToolCall, output: &ToolOutput) -> PostToolUse {
        self.trace.push(format!("post {} error={}", call.name, output.is_error));
        PostToolUse { context: self.post_context.clone(), ..PostToolUse::default() }
    }
}

struct Fixture {
    dir: tempfile::TempDir,
    trace: Arc<Trace>,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.txt"), "alpha\nbeta\n").unwrap();
        Self { dir, trace: Arc::new(Trace::default()) }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn pool(&self, rules: RuleSet, hook: TestHook, fail: bool) -> ToolPool {
        let session = Arc::new(Session::new(self.path()));
        let executor =
            Recording { inner: InProcess(HostTools::new(core_tools(), session)), trace: self.trace.clone(), fail };
        let perms = Permissions::new(&rules, self.path(), None, vec![self.path().to_path_buf()]).unwrap();
        ToolPool::new("agent-1", core_tools(), Arc::new(executor), perms)
            .unwrap()
            .with_hooks(Arc::new(TestHook { trace: self.trace.clone(), ..hook }))
            .with_results_dir(self.path().join("run/tool-results"))
    }

    fn default_pool(&self) -> ToolPool {
        self.pool(RuleSet::default(), TestHook::default(), false)
    }
}

async fn run(pool: &ToolPool, name: &str, input: Value) -> ToolOutput {
    pool.run(&ToolCall { id: "toolu_1".into(), name: name.into(), input }, CancellationToken::new()).await
}

#[tokio::test]
async fn unknown_tool_is_an_error_result_that_lists_the_tools() {
    let f = Fixture::new();
    let out = run(&f.default_pool(), "Delete", json!({})).await;
    assert!(out.is_error);
    assert!(out.content.contains("no tool named `Delete`") && out.content.contains("Read"), "{}", out.content);
    assert!(f.trace.take().is_empty(), "nothing past lookup may run");
}

#[tokio::test]
async fn schema_errors_name_the_field() {
    let f = Fixture::new();
    let pool = f.default_pool();
    let out = run(&pool, "Read", json!({"file_path": "a.txt", "offset": "ten"})).await;
    assert!(out.is_error && out.content.contains("`/offset`"), "{}", out.content);
    let out = run(&pool, "Read", json!({})).await;
    assert!(out.is_error && out.content.contains("file_path"), "{}", out.content);
    let out = run(&pool, "Edit", json!({"file_path": "a.txt", "old_string": "a", "new_string": 3})).await;
    assert!(out.is_error && out.content.contains("`/new_string`"), "{}", out.content);
    assert!(f.trace.take().is_empty(), "hooks and calls must not run after a schema error");
}

#[tokio::test]
async fn validate_runs_before_hooks() {
    let f = Fixture::new();
    let out = run(&f.default_pool(), "Bash", json!({"command": "true", "timeout": 0})).await;
    assert!(out.is_error && out.content.contains("invalid input for Bash"), "{}", out.content);
    assert!(f.trace.take().is_empty());
}

#[tokio::test]
async fn the_stages_run_in_order() {
    let f = Fixture::new();
    let hook = TestHook {
        context: Some("note from pre".into()),
        post_context: Some("note from post".into()),
        ..Default::default()
    };
    let pool = f.pool(RuleSet::default(), hook, false);
    let out = run(&pool, "Read", json!({"file_path": "a.txt"})).await;
    assert!(!out.is_error, "{}", out.content);
    assert!(out.content.contains("alpha"));
    assert!(out.content.contains("note from pre") && out.content.contains("note from post"));
    let trace = f.trace.take();
    assert_eq!(trace.len(), 3, "{trace:?}");
    assert_eq!(trace[0], "pre Read");
    assert!(trace[1].starts_with("call Read"));
    assert_eq!(trace[2], "post Read error=false");
}

#[tokio::test]
async fn a_deny_rule_beats_a_hook_allow() {
    let f = Fixture::new();
    let rules = RuleSet { deny: vec!["Read(*.txt)".into()], ..Default::default() };
    let pool = f.pool(rules, TestHook { decision: Some(HookDecision::Allow), ..Default::default() }, false);
    let out = run(&pool, "Read", json!({"file_path": "a.txt"})).await;
    assert!(out.is_error && out.content.contains("Read(*.txt)"), "{}", out.content);
    assert_eq!(f.trace.take(), ["pre Read"], "the call must not run");
}

#[tokio::test]
async fn a_hook_allow_lifts_an_ask_rule() {
    let f = Fixture::new();
    let rules = RuleSet { ask: vec!["Read".into()], ..Default::default() };
    let denied = run(&f.pool(rules.clone(), TestHook::default(), false), "Read", json!({"file_path": "a.txt"})).await;
    assert!(denied.is_error && denied.content.contains("nobody can approve"), "{}", denied.content);
    let hook = TestHook { decision: Some(HookDecision::Allow), ..Default::default() };
    let allowed = run(&f.pool(rules, hook, false), "Read", json!({"file_path": "a.txt"})).await;
    assert!(!allowed.is_error, "{}", allowed.content);
}

#[tokio::test]
async fn a_hook_deny_and_a_hook_rewrite() {
    let f = Fixture::new();
    let hook = TestHook { decision: Some(HookDecision::Deny("not today".into())), ..Default::default() };
    let out = run(&f.pool(RuleSet::default(), hook, false), "Read", json!({"file_path": "a.txt"})).await;
    assert!(out.is_error && out.content.contains("not today"));
    f.trace.take();

    std::fs::write(f.path().join("b.txt"), "bravo\n").unwrap();
    let hook = TestHook { rewrite: Some(json!({"file_path": "b.txt"})), ..Default::default() };
    let out = run(&f.pool(RuleSet::default(), hook, false), "Read", json!({"file_path": "a.txt"})).await;
    assert!(out.content.contains("bravo"), "{}", out.content);
    // A rewrite that breaks the schema is caught.
    let hook = TestHook { rewrite: Some(json!({"path": "b.txt"})), ..Default::default() };
    let out = run(&f.pool(RuleSet::default(), hook, false), "Read", json!({"file_path": "a.txt"})).await;
    assert!(out.is_error && out.content.contains("rewrote the input"), "{}", out.content);
}

#[tokio::test]
async fn hard_denials_hold_in_bypass_mode_with_a_hook_allow() {
    let f = Fixture::new();
    let rules = RuleSet { mode: Some(Mode::BypassPermissions), allow: vec!["Write".into()], ..Default::default() };
    let hook = TestHook { decision: Some(HookDecision::Allow), ..Default::default() };
    let pool = f.pool(rules, hook, false);
    let out = run(&pool, "Write", json!({"file_path": "/etc/orch-test-file", "content": "x"})).await;
    assert!(out.is_error && out.content.contains("outside this agent's writable roots"), "{}", out.content);
    let out = run(&pool, "Write", json!({"file_path": ".git/config", "content": "x"})).await;
    assert!(out.is_error && out.content.contains("git internals"), "{}", out.content);
    assert!(!Path::new("/etc/orch-test-file").exists());
    assert!(f.trace.take().iter().all(|t| !t.starts_with("call")));
}

#[tokio::test]
async fn plan_mode_allows_only_read_only_calls() {
    let f = Fixture::new();
    let pool = f.pool(RuleSet { mode: Some(Mode::Plan), ..Default::default() }, TestHook::default(), false);
    assert!(!run(&pool, "Read", json!({"file_path": "a.txt"})).await.is_error);
    let out = run(&pool, "Bash", json!({"command": "touch x"})).await;
    assert!(out.is_error && out.content.contains("plan mode"), "{}", out.content);
}

/// A tool whose result is as long as asked, to test result mapping.
struct Big;

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct BigInput {
    /// Lines to print.
    lines: usize,
}

#[async_trait]
impl orch_agents::tools::Tool for Big {
    type Input = BigInput;
    const NAME: &'static str = "Big";

    fn description(&self) -> &'static str {
        "Prints many lines."
    }

    async fn call(
        &self,
        input: BigInput,
        _ctx: &orch_agents::tools::ToolContext,
    ) -> Result<String, orch_agents::tools::ToolError> {
        let line = "x".repeat(79);
        Ok((0..input.lines).map(|i| format!("{i:04}{line}\n")).collect())
    }
}

#[tokio::test]
async fn oversized_results_are_saved_with_a_preview() {
    let f = Fixture::new();
    let tools: Vec<Arc<dyn orch_agents::tools::DynTool>> = vec![Arc::new(Big)];
    let session = Arc::new(Session::new(f.path()));
    let executor = Arc::new(InProcess(HostTools::new(tools.clone(), session)));
    let pool = ToolPool::new("agent-1", tools, executor, Permissions::allow_all(f.path()))
        .unwrap()
        .with_results_dir(f.path().join("run/tool-results"));
    let out = run(&pool, "Big", json!({"lines": 100})).await;
    assert_eq!(out.content.len(), 8_400, "a result under the limit stays whole");
    let out = run(&pool, "Big", json!({"lines": 1500})).await;
    assert!(!out.is_error);
    assert!(out.content.len() < 4_000, "preview is {} bytes", out.content.len());
    assert!(out.content.contains("0000xxx"));
    let saved = f.path().join("run/tool-results/agent-1/toolu_1.txt");
    assert!(out.content.contains(&saved.display().to_string()), "{}", out.content);
    let full = std::fs::read_to_string(saved).unwrap();
    assert!(full.len() > 50_000 && full.contains("1499xxx"));
}

#[tokio::test]
async fn a_failing_tool_host_is_a_tool_error() {
    let f = Fixture::new();
    let out = run(&f.pool(RuleSet::default(), TestHook::default(), true), "Read", json!({"file_path": "a.txt"})).await;
    assert!(out.is_error && out.content.contains("tool host failed"), "{}", out.content);
}

#[tokio::test]
async fn specs_are_sorted_and_schemas_come_from_types() {
    let f = Fixture::new();
    let specs = f.default_pool().specs();
    let names: Vec<_> = specs.iter().map(|s| s.name.as_str()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    let read = specs.iter().find(|s| s.name == "Read").unwrap();
    assert_eq!(read.input_schema["type"], "object");
    assert!(read.input_schema["required"].as_array().unwrap().contains(&json!("file_path")));
    assert!(read.input_schema["properties"]["file_path"]["description"].is_string());
}
