//! Tool scheduling in the loop: parallel runs of concurrency-safe calls, serial runs of
//! the rest in order, sibling cancellation by a failing Bash, and early start of
//! read-only calls while the answer still streams.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::anthropic;
use orch_agents::model::{ModelError, ModelProvider, ModelRequest, ModelResponse, StopReason, StreamEvent, StreamSink};
use orch_agents::permissions::Permissions;
use orch_agents::pipeline::ToolPool;
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{
    ContentBlock, Message, NullSink, QueryConfig, Terminal, ToolCall, ToolOutput, ToolRunner, ToolSpec, Usage, query,
};
use orch_testkit::mock::{MockServer, Step, ToolCall as MockCall, Turn};
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

fn real_pool(dir: &std::path::Path) -> ToolPool {
    let session = Arc::new(Session::new(dir));
    let executor = Arc::new(InProcess(HostTools::new(core_tools(), session)));
    ToolPool::new("main", core_tools(), executor, Permissions::allow_all(dir)).unwrap()
}

fn results(out: &orch_agents::QueryOutcome, index: usize) -> Vec<(String, bool)> {
    out.messages[index]
        .content
        .iter()
        .map(|b| match b {
            ContentBlock::ToolResult { content, is_error, .. } => (content.clone(), *is_error),
            other => panic!("not a tool result: {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn three_parallel_reads_then_an_edit_keep_their_order() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [("a.txt", "one\n"), ("b.txt", "two\n"), ("c.txt", "three\n")] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let p = |n: &str| dir.path().join(n).display().to_string();
    let mock = MockServer::start().await;
    mock.push_all([
        Step::Reply(Turn::tools(vec![
            MockCall::new("Read", json!({"file_path": p("a.txt")})),
            MockCall::new("Read", json!({"file_path": p("b.txt")})),
            MockCall::new("Read", json!({"file_path": p("c.txt")})),
            MockCall::new("Edit", json!({"file_path": p("c.txt"), "old_string": "three", "new_string": "THREE"})),
        ])),
        Step::text("done"),
    ]);
    let pool = real_pool(dir.path());
    let out = query(
        &anthropic(&mock.url()),
        &pool,
        &QueryConfig::new("main", "m"),
        vec![Message::user("go")],
        &NullSink,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed);
    let r = results(&out, 2);
    assert!(r[0].0.contains("one") && r[1].0.contains("two") && r[2].0.contains("three"), "{r:?}");
    assert!(!r[3].1, "the edit ran before its read: {}", r[3].0);
    assert_eq!(std::fs::read_to_string(dir.path().join("c.txt")).unwrap(), "THREE\n");
    mock.assert_tool_pairing();
}

/// Records when each call starts and ends.
#[derive(Default)]
struct Timeline {
    spans: Mutex<Vec<(String, Instant, Instant)>>,
    started: Notify,
    effects: Mutex<u32>,
}

#[async_trait]
impl ToolRunner for Timeline {
    fn specs(&self) -> Vec<ToolSpec> {
        ["Look", "Change"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: n.to_string(),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    fn is_concurrency_safe(&self, call: &ToolCall) -> bool {
        call.name == "Look"
    }

    fn can_start_early(&self, call: &ToolCall) -> bool {
        call.name == "Look"
    }

    async fn run(&self, call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
        let start = Instant::now();
        self.started.notify_waiters();
        if call.name == "Change" {
            *self.effects.lock().unwrap() += 1;
        }
        tokio::time::sleep(Duration::from_millis(call.input["ms"].as_u64().unwrap_or(0))).await;
        self.spans.lock().unwrap().push((call.id.clone(), start, Instant::now()));
        ToolOutput::ok(format!("{} done", call.id))
    }
}

#[tokio::test]
async fn safe_calls_overlap_and_unsafe_calls_wait_their_turn() {
    let mock = MockServer::start().await;
    mock.push_all([
        Step::Reply(Turn::tools(vec![
            MockCall::new("Look", json!({"ms": 200})).with_id("l1"),
            MockCall::new("Look", json!({"ms": 200})).with_id("l2"),
            MockCall::new("Look", json!({"ms": 200})).with_id("l3"),
            MockCall::new("Change", json!({"ms": 10})).with_id("c1"),
            MockCall::new("Look", json!({"ms": 10})).with_id("l4"),
        ])),
        Step::text("done"),
    ]);
    let tools = Timeline::default();
    let out = query(
        &anthropic(&mock.url()),
        &tools,
        &QueryConfig::new("main", "m"),
        vec![Message::user("go")],
        &NullSink,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed);
    let spans = tools.spans.lock().unwrap().clone();
    let span = |id: &str| spans.iter().find(|s| s.0 == id).map(|s| (s.1, s.2)).unwrap();
    let (l1, l2, l3, c1, l4) = (span("l1"), span("l2"), span("l3"), span("c1"), span("l4"));
    // The three looks overlap: each starts before any of them ends.
    let first_end = [l1.1, l2.1, l3.1].into_iter().min().unwrap();
    assert!(l1.0 < first_end && l2.0 < first_end && l3.0 < first_end, "the looks did not run in parallel");
    // The change starts after every look before it ended; the last look after the change.
    let last_end = [l1.1, l2.1, l3.1].into_iter().max().unwrap();
    assert!(c1.0 >= last_end, "the change overtook a look");
    assert!(l4.0 >= c1.1, "a look overtook the change before it");
    let ids: Vec<String> = results(&out, 2).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, ["l1 done", "l2 done", "l3 done", "c1 done", "l4 done"]);
}

#[tokio::test]
async fn a_failing_bash_cancels_its_running_siblings() {
    let dir = tempfile::tempdir().unwrap();
    let mock = MockServer::start().await;
    mock.push_all([
        Step::Reply(Turn::tools(vec![
            MockCall::new("Bash", json!({"command": "tail -f /dev/null"})),
            MockCall::new("Bash", json!({"command": "ls /definitely/not/here"})),
            MockCall::new("Bash", json!({"command": "tail -f /dev/null"})),
        ])),
        Step::text("done"),
    ]);
    let pool = real_pool(dir.path());
    let started = Instant::now();
    let out = query(
        &anthropic(&mock.url()),
        &pool,
        &QueryConfig::new("main", "m"),
        vec![Message::user("go")],
        &NullSink,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert!(started.elapsed() < Duration::from_secs(20), "the siblings were not cancelled");
    let r = results(&out, 2);
    assert!(r[1].1 && r[1].0.contains("exit code"), "{r:?}");
    for k in [0, 2] {
        assert!(r[k].1 && r[k].0.contains("failed first"), "sibling {k}: {:?}", r[k]);
    }
}

/// A provider that streams one answer by hand: it completes the first tool block, waits
/// until a tool has started (or a timeout), and only then finishes the message. On its
/// first attempt it can fail after the first block, to test retries.
struct Handmade {
    blocks: Vec<ContentBlock>,
    started: Arc<Timeline>,
    fail_first_attempt: bool,
    attempts: Mutex<u32>,
    calls: Mutex<u32>,
}

#[async_trait]
impl ModelProvider for Handmade {
    fn name(&self) -> &str {
        "handmade"
    }

    async fn send(&self, request: &ModelRequest<'_>, sink: StreamSink<'_>) -> Result<ModelResponse, ModelError> {
        let done = |content: Vec<ContentBlock>, stop| ModelResponse {
            content,
            stop_reason: stop,
            usage: Usage::default(),
            model: request.model.into(),
        };
        let call = {
            let mut c = self.calls.lock().unwrap();
            *c += 1;
            *c
        };
        if call > 1 {
            return Ok(done(vec![ContentBlock::text("finished")], StopReason::EndTurn));
        }
        loop {
            let attempt = {
                let mut a = self.attempts.lock().unwrap();
                *a += 1;
                *a
            };
            sink(StreamEvent::AttemptStarted { attempt });
            let waiter = self.started.started.notified();
            sink(StreamEvent::BlockComplete { index: 0, block: self.blocks[0].clone() });
            if self.fail_first_attempt && attempt == 1 {
                sink(StreamEvent::Retrying { attempt, delay: Duration::ZERO, error: "cut".into() });
                continue;
            }
            let early = tokio::time::timeout(Duration::from_millis(500), waiter).await.is_ok();
            for (i, b) in self.blocks.iter().enumerate().skip(1) {
                sink(StreamEvent::BlockComplete { index: i, block: b.clone() });
            }
            let text = if early { "started early" } else { "did not start early" };
            let mut content = self.blocks.clone();
            content.insert(0, ContentBlock::text(text));
            return Ok(done(content, StopReason::ToolUse));
        }
    }
}

fn tool_use(id: &str, name: &str) -> ContentBlock {
    ContentBlock::ToolUse { id: id.into(), name: name.into(), input: json!({"ms": 1}) }
}

#[tokio::test]
async fn read_only_calls_start_while_the_answer_streams() {
    let tools = Arc::new(Timeline::default());
    let provider = Handmade {
        blocks: vec![tool_use("l1", "Look"), tool_use("c1", "Change")],
        started: tools.clone(),
        fail_first_attempt: false,
        attempts: Mutex::new(0),
        calls: Mutex::new(0),
    };
    let out = query(
        &provider,
        tools.as_ref(),
        &QueryConfig::new("main", "m"),
        vec![Message::user("go")],
        &NullSink,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed);
    assert_eq!(out.messages[1].content[0], ContentBlock::text("started early"));
    assert_eq!(*tools.effects.lock().unwrap(), 1);
}

#[tokio::test]
async fn calls_with_effects_wait_for_the_whole_answer_and_run_once_across_a_retry() {
    let tools = Arc::new(Timeline::default());
    let provider = Handmade {
        blocks: vec![tool_use("c1", "Change"), tool_use("l1", "Look")],
        started: tools.clone(),
        fail_first_attempt: true,
        attempts: Mutex::new(0),
        calls: Mutex::new(0),
    };
    let out = query(
        &provider,
        tools.as_ref(),
        &QueryConfig::new("main", "m"),
        vec![Message::user("go")],
        &NullSink,
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(out.terminal, Terminal::Completed);
    // The change came first, so nothing may start before the answer is whole.
    assert_eq!(out.messages[1].content[0], ContentBlock::text("did not start early"));
    assert_eq!(*tools.effects.lock().unwrap(), 1, "the effect ran more than once");
    let ids: Vec<String> = results(&out, 2).into_iter().map(|r| r.0).collect();
    assert_eq!(ids, ["c1 done", "l1 done"]);
}
