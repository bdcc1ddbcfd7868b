//! Context engineering against the mock model server: microcompact, autocompact (its
//! trigger, the summary request, the head-drop retry, the circuit breaker, restored
//! files), prompt-too-long recovery, max-tokens continuation, the identical cached
//! prefix across agents, and project instructions read through the tool host.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::common;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use common::{Collect, TestTools, anthropic};
use orch_agents::context::{CLEARED_PREFIX, SUMMARY_HEADER};
use orch_agents::instructions;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_agents::pipeline::ToolPool;
use orch_agents::prompt::{Environment, GitSnapshot, system_prompt};
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{Session, core_tools};
use orch_agents::{
    ContextConfig, Event, Message, QueryConfig, QueryOutcome, Terminal, ToolCall, ToolOutput, ToolRunner, ToolSpec,
    query,
};
use orch_testkit::mock::{MockServer, MockUsage, RecordedRequest, Step, Turn};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// Read, Grep, Bash and Edit over an in-memory file map; counts reads per path.
#[derive(Default)]
struct FakeFs {
    files: HashMap<String, String>,
    reads: Mutex<Vec<String>>,
}

impl FakeFs {
    fn with(files: &[(&str, String)]) -> Self {
        Self { files: files.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(), ..Self::default() }
    }

    fn reads_of(&self, path: &str) -> usize {
        self.reads.lock().unwrap().iter().filter(|p| *p == path).count()
    }
}

#[async_trait]
impl ToolRunner for FakeFs {
    fn specs(&self) -> Vec<ToolSpec> {
        ["Read", "Grep", "Edit", "Bash"]
            .iter()
            .map(|n| ToolSpec {
                name: n.to_string(),
                description: format!("{n} things."),
                input_schema: json!({"type": "object"}),
            })
            .collect()
    }

    async fn run(&self, call: &ToolCall, _cancel: CancellationToken) -> ToolOutput {
        let path = call.input["file_path"].as_str().unwrap_or_default().to_string();
        match call.name.as_str() {
            "Read" => {
                self.reads.lock().unwrap().push(path.clone());
                match self.files.get(&path) {
                    Some(text) => ToolOutput::ok(text.clone()),
                    None => ToolOutput::error(format!("{path}: no such file")),
                }
            }
            "Grep" => ToolOutput::ok("g".repeat(2_000)),
            "Bash" => ToolOutput::ok("b".repeat(2_000)),
            "Edit" => ToolOutput::ok(format!("edited {path}; {}", "e".repeat(2_000))),
            other => ToolOutput::error(format!("no tool {other}")),
        }
    }
}

fn read(path: &str) -> Step {
    Step::tool("Read", json!({"file_path": path}))
}

fn big_usage(prompt: u64) -> MockUsage {
    MockUsage { input_tokens: prompt, output_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 }
}

fn small_window() -> QueryConfig {
    let mut c = QueryConfig::new("main", "claude-sonnet-4-5");
    c.limits.max_turns = Some(30);
    c.context = ContextConfig {
        window: 10_000,
        reserve: 2_000,
        keep_recent_turns: 100,
        microcompact_batch_tokens: 0,
        ..ContextConfig::default()
    };
    c
}

async fn run(mock: &MockServer, tools: &dyn ToolRunner, config: &QueryConfig) -> (QueryOutcome, Collect) {
    let sink = Collect::default();
    let provider = anthropic(&mock.url());
    let out = query(&provider, tools, config, vec![Message::user("go")], &sink, &CancellationToken::new()).await;
    (out, sink)
}

fn compactions(events: &Collect) -> Vec<String> {
    events
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Compaction { reason, .. } => Some(reason.to_string()),
            _ => None,
        })
        .collect()
}

/// The tool_result contents of a recorded request, by tool_use id.
fn results(req: &RecordedRequest) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for m in req.messages() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                out.insert(b["tool_use_id"].as_str().unwrap().to_string(), b["content"].as_str().unwrap().to_string());
            }
        }
    }
    out
}

/// The tool_use ids of a recorded request with their tool names, in order.
fn uses(req: &RecordedRequest) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for m in req.messages() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_use" {
                out.push((b["id"].as_str().unwrap().to_string(), b["name"].as_str().unwrap().to_string()));
            }
        }
    }
    out
}

fn is_summary_request(req: &RecordedRequest) -> bool {
    req.tools().is_empty() && req.body.windows(b"Request and intent".len()).any(|w| w == b"Request and intent")
}

#[tokio::test]
async fn microcompact_clears_old_refetchable_results_and_never_others() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(3_000)), ("b.rs", "B".repeat(3_000))]);
    mock.push_all([
        read("a.rs"),
        Step::tool("Edit", json!({"file_path": "a.rs"})),
        Step::tool("Grep", json!({"pattern": "fn"})),
        Step::tool("Bash", json!({"command": "cargo test"})),
        read("b.rs"),
        read("b.rs"),
        read("b.rs"),
        Step::text("done"),
    ]);
    let mut config = QueryConfig::new("main", "m");
    config.context.keep_recent_turns = 2;
    config.context.microcompact_batch_tokens = 0;
    let (out, events) = run(&mock, &fs, &config).await;
    assert_eq!(out.terminal, Terminal::Completed);
    mock.assert_tool_pairing();
    let last = mock.requests().last().cloned().unwrap();
    let by_id = results(&last);
    let calls = uses(&last);
    assert_eq!(calls.len(), 7);
    for (k, (id, name)) in calls.iter().enumerate() {
        let text = &by_id[id];
        let old = k < 7 - 2;
        match (name.as_str(), old) {
            ("Edit", _) => assert!(text.starts_with("edited a.rs"), "Edit results are never cleared: {text}"),
            (_, true) => assert!(text.starts_with(CLEARED_PREFIX), "{name} #{k} should be cleared: {text}"),
            (_, false) => assert!(!text.starts_with(CLEARED_PREFIX), "{name} #{k} is recent: {text}"),
        }
    }
    assert!(by_id[&calls[0].0].contains("Read a.rs"), "the placeholder names the call");
    assert!(by_id[&calls[3].0].contains("Bash cargo test"));
    assert!(compactions(&events).iter().all(|r| r == "microcompact") && !compactions(&events).is_empty());
    // A placeholder is one line.
    assert!(by_id[&calls[0].0].lines().count() == 1);
}

#[tokio::test]
async fn microcompact_waits_for_a_batch_so_the_prefix_stays_put() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(400))]);
    mock.push_all([read("a.rs"), read("a.rs"), read("a.rs"), read("a.rs"), Step::text("done")]);
    let mut config = QueryConfig::new("main", "m");
    config.context.keep_recent_turns = 1;
    config.context.microcompact_batch_tokens = 200;
    let (_, events) = run(&mock, &fs, &config).await;
    let reqs = mock.requests();
    // About 75 tokens saved per result: nothing is cleared until three can go at once.
    let cleared = |r: &RecordedRequest| results(r).values().filter(|t| t.starts_with(CLEARED_PREFIX)).count();
    let counts: Vec<usize> = reqs.iter().map(cleared).collect();
    assert_eq!(counts, vec![0, 0, 0, 0, 3], "{counts:?}");
    assert_eq!(compactions(&events), vec!["microcompact"]);
}

#[tokio::test]
async fn autocompact_at_the_threshold_summarizes_and_restores_recent_files() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(400)), ("b.rs", "B".repeat(400)), ("huge.rs", "H".repeat(4_000))]);
    mock.push_all([
        read("a.rs"),
        read("missing.rs"),
        read("huge.rs"),
        Step::Reply(Turn::tool("Read", json!({"file_path": "b.rs"})).with_usage(big_usage(8_500))),
        Step::text("## 1. Request and intent\nthe summary"),
        Step::text("done"),
    ]);
    let mut config = small_window();
    config.context.restore_file_tokens = 500;
    let (out, events) = run(&mock, &fs, &config).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    mock.assert_tool_pairing();
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6);
    // The summary request: no tools, the whole history, the sectioned prompt last.
    let summary = &reqs[4];
    assert!(is_summary_request(summary));
    assert!(summary.json.get("tools").is_none());
    let prompt = summary.messages().last().unwrap()["content"].as_array().unwrap().last().unwrap()["text"]
        .as_str()
        .unwrap()
        .to_string();
    for section in [
        "Request and intent",
        "Key technical concepts",
        "Files and code",
        "Errors and fixes",
        "Problem solving",
        "All user messages",
        "Pending tasks",
        "Current work",
        "Next step",
    ] {
        assert!(prompt.contains(section), "the summary prompt lacks {section}");
    }
    assert_eq!(summary.messages().len(), reqs[3].messages().len() + 2);
    // After: the summary, then the restored files (b then a; not the missing one, not
    // the one over the per-file budget), re-read through the tool runner.
    let after = &reqs[5];
    let m = after.messages();
    assert_eq!(m.len(), 3);
    let head = m[0]["content"][0]["text"].as_str().unwrap();
    assert!(head.starts_with(SUMMARY_HEADER) && head.contains("the summary"), "{head}");
    let restored: Vec<&str> = m[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["input"]["file_path"].as_str().unwrap())
        .collect();
    assert_eq!(restored, vec!["a.rs", "b.rs"]);
    assert_eq!(results(after).values().filter(|t| t.starts_with("BBBB")).count(), 1);
    assert_eq!(fs.reads_of("b.rs"), 2, "b.rs was read again for the restore");
    assert_eq!(fs.reads_of("huge.rs"), 2);
    assert_eq!(compactions(&events), vec!["autocompact"]);
    // The summary call counts in the usage, not in the turns.
    assert_eq!(out.turns, 5);
}

#[tokio::test]
async fn a_too_long_summary_request_drops_the_oldest_messages_and_retries() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(100))]);
    let mut steps: Vec<Step> = (0..9).map(|_| read("a.rs")).collect();
    steps.push(Step::Reply(Turn::tool("Read", json!({"file_path": "a.rs"})).with_usage(big_usage(9_000))));
    steps.extend([Step::PromptTooLong, Step::PromptTooLong, Step::text("summary after two drops"), Step::text("done")]);
    mock.push_all(steps);
    let (out, events) = run(&mock, &fs, &small_window()).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    mock.assert_tool_pairing();
    let summaries: Vec<RecordedRequest> = mock.requests().into_iter().filter(is_summary_request).collect();
    assert_eq!(summaries.len(), 3);
    let lens: Vec<usize> = summaries.iter().map(|r| r.messages().len()).collect();
    assert!(lens[0] > lens[1] && lens[1] > lens[2], "{lens:?}");
    for r in &summaries[1..] {
        assert_eq!(r.messages()[0]["role"], "user");
        assert!(r.body.windows(7).any(|w| w == b"dropped"), "a note says the head was dropped");
    }
    assert_eq!(compactions(&events), vec!["autocompact"]);
}

#[tokio::test]
async fn three_failed_compactions_in_a_row_end_the_loop() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(100))]);
    let over = || Step::Reply(Turn::tool("Read", json!({"file_path": "a.rs"})).with_usage(big_usage(9_000)));
    mock.push_all([
        over(),
        Step::status(400),
        over(),
        Step::text("  "),
        over(),
        Step::status(400),
        Step::text("never"),
    ]);
    let (out, events) = run(&mock, &fs, &small_window()).await;
    match &out.terminal {
        Terminal::CompactionFailed { failures: 3, message } => assert!(message.contains("400"), "{message}"),
        other => panic!("expected compaction_failed, got {other:?}"),
    }
    assert_eq!(out.terminal.name(), "compaction_failed");
    assert!(out.terminal.to_string().contains("3 failed attempts"));
    assert_eq!(mock.remaining(), 1, "nothing is sent after the breaker opens");
    assert!(compactions(&events).is_empty());
    mock.assert_tool_pairing();
}

#[tokio::test]
async fn prompt_too_long_compacts_and_retries_once() {
    let mock = MockServer::start().await;
    let fs = FakeFs::with(&[("a.rs", "A".repeat(100))]);
    mock.push_all([read("a.rs"), Step::PromptTooLong, Step::text("the summary"), Step::text("done")]);
    let (out, events) = run(&mock, &fs, &small_window()).await;
    assert_eq!(out.terminal, Terminal::Completed, "{:?}", out.terminal);
    assert_eq!(out.final_text, "done");
    assert_eq!(compactions(&events), vec!["prompt_too_long"]);
    let reqs = mock.requests();
    assert!(is_summary_request(&reqs[2]));
    assert!(reqs[3].messages()[0]["content"][0]["text"].as_str().unwrap().starts_with(SUMMARY_HEADER));
    mock.assert_tool_pairing();

    // Too long again after the compaction: the second error is final.
    let mock = MockServer::start().await;
    mock.push_all([read("a.rs"), Step::PromptTooLong, Step::text("the summary"), Step::PromptTooLong]);
    let (out, _) = run(&mock, &fs, &small_window()).await;
    assert!(matches!(out.terminal, Terminal::PromptTooLong { .. }), "{:?}", out.terminal);
    assert_eq!(mock.remaining(), 0);
}

#[tokio::test]
async fn a_cut_answer_raises_the_output_limit_and_continues_at_most_three_times() {
    let mock = MockServer::start().await;
    let cut = |t: &str| Step::Reply(Turn::text(t).with_stop_reason("max_tokens"));
    mock.push_all([cut("one "), cut("two "), cut("three "), cut("four"), Step::text("never")]);
    let mut config = QueryConfig::new("main", "m");
    config.max_output_ceiling = 65_536;
    let (out, _) = run(&mock, &TestTools::default(), &config).await;
    // Still cut after the last continuation: a limit, not a completed answer.
    assert_eq!(out.terminal, Terminal::MaxOutputTokens { continuations: 3 });
    assert!(out.terminal.is_limit());
    assert_eq!(out.final_text, "one two three four");
    let limits: Vec<u64> = mock.requests().iter().map(|r| r.json["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(limits, vec![8_192, 16_384, 32_768, 65_536]);
    let last = mock.last_request().unwrap();
    let m = last.messages();
    assert_eq!(m.last().unwrap()["role"], "user");
    assert!(m.last().unwrap()["content"][0]["text"].as_str().unwrap().contains("cut off"));
    assert_eq!(mock.remaining(), 1);
}

/// The cached prefix of an Anthropic request: the tool list and the system parts up to
/// and including the last one with a breakpoint, as the bytes on the wire.
fn cached_prefix(req: &RecordedRequest) -> Vec<u8> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    struct Prefix<'a> {
        #[serde(borrow)]
        tools: &'a RawValue,
        #[serde(borrow)]
        system: Vec<&'a RawValue>,
    }
    let sent: Prefix<'_> = serde_json::from_slice(&req.body).unwrap();
    let boundary = sent.system.iter().rposition(|p| p.get().contains("\"cache_control\"")).unwrap();
    let mut out = sent.tools.get().as_bytes().to_vec();
    for part in &sent.system[..=boundary] {
        out.extend_from_slice(part.get().as_bytes());
    }
    out
}

#[tokio::test]
async fn the_cached_prefix_is_identical_across_turns_and_agents() {
    let mock = MockServer::start().await;
    mock.simulate_usage(None);
    let git = GitSnapshot { branch: "orch/r/a".into(), status: vec![], commits: vec!["abc first".into()] };
    let found = instructions::Instructions::default();
    let mut outs = Vec::new();
    for (agent, cwd) in [("a", "/work/a"), ("b", "/elsewhere/b/sub")] {
        mock.push_all([
            Step::tool("Echo", json!({"text": "x"})),
            Step::tool("Echo", json!({"text": "y"})),
            Step::text("ok"),
        ]);
        let mut config = QueryConfig::new(agent, "claude-sonnet-4-5");
        config.system = system_prompt(&Environment {
            cwd: Path::new(cwd),
            is_git_repo: true,
            model: "claude-sonnet-4-5",
            date: "2026-01-02",
            git: (agent == "a").then_some(&git),
            instructions: Some(&found),
        });
        // Tools offered in any order are sent sorted.
        let (out, _) = run(&mock, &Reversed(TestTools::default()), &config).await;
        assert_eq!(out.terminal, Terminal::Completed);
        outs.push(out);
    }
    let reqs = mock.requests();
    assert_eq!(reqs.len(), 6);
    let first = cached_prefix(&reqs[0]);
    for r in &reqs {
        assert_eq!(cached_prefix(r), first, "the prefix up to the boundary differs");
        assert_eq!(r.tool_names(), vec!["Echo", "Fail", "Sleep"]);
    }
    // The dynamic parts differ, after the boundary.
    assert_ne!(reqs[0].json["system"][1], reqs[3].json["system"][1]);
    // Within one agent, each request's history extends the previous one byte for byte
    // (breakpoint markers aside).
    let strip = |v: &Value| {
        let mut v = v.clone();
        for m in v.as_array_mut().unwrap() {
            for b in m["content"].as_array_mut().unwrap() {
                b.as_object_mut().unwrap().remove("cache_control");
            }
        }
        v
    };
    for pair in [(0, 1), (1, 2), (3, 4), (4, 5)] {
        let (a, b) = (strip(&reqs[pair.0].json["messages"]), strip(&reqs[pair.1].json["messages"]));
        let (a, b) = (a.as_array().unwrap(), b.as_array().unwrap());
        assert_eq!(a[..], b[..a.len()], "requests {pair:?}");
    }
    // The simulated cache: the second agent's first request reads the prefix the first
    // agent wrote; every later turn reads the previous turn's history too.
    let usage: Vec<_> = outs.iter().map(|o| o.usage).collect();
    assert!(usage[1].cache_read_input_tokens > 0, "{usage:?}");
    let tools_and_static = orch_testkit::mock::simulated_tokens(&String::from_utf8(first.clone()).unwrap());
    assert!(usage[1].cache_read_input_tokens >= 3 * tools_and_static / 2, "{usage:?} vs {tools_and_static}");
}

/// Offers the tools of the inner runner in reverse order.
struct Reversed(TestTools);

#[async_trait]
impl ToolRunner for Reversed {
    fn specs(&self) -> Vec<ToolSpec> {
        let mut s = self.0.specs();
        s.reverse();
        s
    }

    async fn run(&self, call: &ToolCall, cancel: CancellationToken) -> ToolOutput {
        self.0.run(call, cancel).await
    }
}

#[tokio::test]
async fn instructions_come_through_the_tool_host_and_the_model_cannot_ask_for_them() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "SECRET").unwrap();
    let repo = tempfile::tempdir().unwrap();
    let root = repo.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("crates/x")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "root rules; see @docs/style.md").unwrap();
    std::fs::create_dir(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/style.md"), "style rules").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.md"), root.join("crates/CLAUDE.md")).unwrap();
    std::fs::write(root.join("crates/x/CLAUDE.md"), "leaf rules").unwrap();
    let cwd = root.join("crates/x");

    let host = HostTools::new(core_tools(), Arc::new(Session::new(&cwd)));
    let executor = Arc::new(InProcess(host));
    let found = instructions::load(executor.as_ref(), CancellationToken::new()).await.unwrap();
    let paths: Vec<&str> = found.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, vec!["AGENTS.md", "docs/style.md", "crates/x/CLAUDE.md"]);
    assert!(found.skipped.iter().any(|s| s.starts_with("crates/CLAUDE.md") && s.contains("outside")));
    let prompt = system_prompt(&Environment {
        cwd: &cwd,
        is_git_repo: true,
        model: "m",
        date: "2026-01-02",
        git: None,
        instructions: Some(&found),
    });
    assert!(!prompt[1].text.contains("SECRET"));
    assert!(prompt[1].text.find("root rules").unwrap() < prompt[1].text.find("leaf rules").unwrap());

    // The model cannot reach the host's instruction service: a call by its wire name is
    // a tool call of a tool the pool does not know.
    let permissions = Permissions::new(&RuleSet::default(), &cwd, None, vec![cwd.clone()]).unwrap();
    let pool = ToolPool::new("a", core_tools(), executor, permissions).unwrap();
    let call = ToolCall { id: "t1".into(), name: "project_instructions".into(), input: Value::Null };
    let out = pool.run(&call, CancellationToken::new()).await;
    assert!(out.is_error && out.content.contains("no tool named"), "{}", out.content);
    assert!(pool.specs().iter().all(|s| !s.name.contains("instructions")));
}
