//! Prompt caching across a run (issue 29): every agent of a run sends the same stable
//! prefix (the tool definitions and the system prompt's first, cached block) byte for
//! byte, so the model provider's cache serves it to all of them; what differs per
//! agent (its environment, its task) comes after the cache breakpoint.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use orch_testkit::mock::{MockServer, Step};
use serde_json::Value;

use crate::support::Fixture;

const WORKFLOW: &str = r#"
version: 1
name: cache
concurrency: 2
defaults:
  tools: [Read, Grep, Glob]
  limits: { max_turns: 2, timeout: 1m }
agents:
  one: { prompt: Look at a.txt. }
  two: { prompt: Look at b.txt. }
  three:
    prompt: Look at {{ item }}.
    for_each: ["c.txt", "d.txt"]
integrate: none
synthesis: { prompt: Combine. }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_agent_of_a_run_sends_the_same_stable_prefix() {
    let fx = Fixture::new("t-cache", &[("a.txt", "a\n"), ("b.txt", "b\n")]);
    let mock = MockServer::start().await;
    mock.set_default(Some(Step::text("done")));
    let run = fx.run_off_runtime(fx.mock_command(WORKFLOW, &mock.url())).await;
    run.expect_code(0);
    // Each agent's first request: one message, with tools.
    let firsts: Vec<Value> = mock
        .requests()
        .iter()
        .filter(|r| r.messages().len() == 1 && !r.tools().is_empty())
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(firsts.len(), 4, "one first request per agent");
    let prefix = |body: &Value| {
        let first_block = &body["system"][0];
        assert!(first_block["cache_control"].is_object(), "the first system block is cached: {first_block}");
        (serde_json::to_string(&body["tools"]).unwrap(), serde_json::to_string(first_block).unwrap())
    };
    let expected = prefix(&firsts[0]);
    for body in &firsts[1..] {
        let (tools, system) = prefix(body);
        assert!(tools == expected.0, "the tool definitions differ between agents");
        assert!(system == expected.1, "the cached system block differs between agents:\n{system}\n{}", expected.1);
    }
}
