//! Tidy tests: checks that the lists and tables kept by hand, here and in the README,
//! agree with the code, and that the `--json` form of every event is pinned.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::event::{Budget, CompactionReason, Event, Phase, Terminal};
use crate::message::Message;
use crate::tools::{CORE_TOOL_NAMES, core_tools};
use crate::usage::Usage;
use orch_types::HookEvent;
use orch_types::tools::{CATALOG, lookup};

/// The smallest input that parses: every required property with a plain value of its
/// type. (A read-only tool whose sample does not parse reads as not read-only, so the
/// comparison below still fails.)
fn sample_input(schema: &Value) -> Value {
    let mut input = serde_json::Map::new();
    let properties = schema.get("properties").and_then(Value::as_object);
    for name in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = name.as_str() else { continue };
        let kind = properties.and_then(|p| p.get(name)).and_then(|p| p.get("type")).and_then(Value::as_str);
        let value = match kind {
            Some("array") => json!([]),
            Some("integer" | "number") => json!(1),
            Some("boolean") => json!(false),
            Some("object") => json!({}),
            _ => json!(name),
        };
        input.insert(name.to_string(), value);
    }
    Value::Object(input)
}

#[test]
fn core_tools_are_the_catalogs_core_entries_with_the_same_flags() {
    let implemented: BTreeSet<&str> = core_tools().iter().map(|t| t.name()).collect();
    let catalog: BTreeSet<&str> = CATALOG.iter().filter(|t| t.core).map(|t| t.name).collect();
    assert_eq!(implemented, catalog);
    assert_eq!(CORE_TOOL_NAMES.iter().copied().collect::<BTreeSet<_>>(), catalog);
    let not_core: Vec<&str> = CATALOG.iter().filter(|t| !t.core).map(|t| t.name).collect();
    assert_eq!(
        not_core,
        [crate::subagent::AGENT_TOOL, crate::tools::skill::SKILL_TOOL, crate::tools::web_search::WEB_SEARCH_TOOL]
    );
    for tool in core_tools() {
        let Some(info) = lookup(tool.name()) else { continue };
        let input = sample_input(&tool.input_schema());
        assert_eq!(tool.is_read_only(&input), info.read_only, "{}: read_only differs from the catalog", tool.name());
        if !tool.writes(&input).is_empty() {
            assert!(info.writes, "{} writes files but the catalog says it does not", tool.name());
        }
    }
}

/// One value of every terminal reason. The match fails to compile when a reason is
/// added, and [`TERMINAL_COUNT`] with it makes the test below fail until it is listed.
fn terminal_index(t: &Terminal) -> usize {
    match t {
        Terminal::Completed => 0,
        Terminal::MaxTurns { .. } => 1,
        Terminal::BudgetExceeded { .. } => 2,
        Terminal::Timeout { .. } => 3,
        Terminal::Aborted { .. } => 4,
        Terminal::PromptTooLong { .. } => 5,
        Terminal::ModelError { .. } => 6,
        Terminal::HookStopped { .. } => 7,
        Terminal::CompactionFailed { .. } => 8,
        Terminal::MaxOutputTokens { .. } => 9,
    }
}

const TERMINAL_COUNT: usize = 10;

fn terminals() -> Vec<Terminal> {
    vec![
        Terminal::Completed,
        Terminal::MaxTurns { limit: 40 },
        Terminal::BudgetExceeded { budget: Budget::CostUsd, limit: 3.0, used: 3.02 },
        Terminal::Timeout { after_ms: 600_000 },
        Terminal::Aborted { during: Phase::Tools },
        Terminal::PromptTooLong { message: "prompt is too long: 210000 tokens > 200000 maximum".into() },
        Terminal::ModelError { kind: crate::model::ModelErrorKind::Auth, message: "invalid x-api-key".into() },
        Terminal::HookStopped { message: "a Stop hook asked to stop".into() },
        Terminal::CompactionFailed { failures: 3, message: "the summary request failed".into() },
        Terminal::MaxOutputTokens { continuations: 3 },
    ]
}

#[test]
fn the_readme_terminal_table_lists_every_terminal_reason() {
    let covered: BTreeSet<usize> = terminals().iter().map(terminal_index).collect();
    assert_eq!(covered, (0..TERMINAL_COUNT).collect(), "terminals() misses a reason");
    let readme = include_str!("../../README.md");
    let table = readme
        .split_once("| reason | when | `orch exec` exit |")
        .map(|(_, rest)| rest.split("\n\n").next().unwrap_or_default())
        .expect("the README has a terminal reason table under `## The query loop`");
    let listed: BTreeSet<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split_once('`').map(|(name, _)| name))
        .collect();
    let names: BTreeSet<&str> = terminals().iter().map(Terminal::name).collect();
    assert_eq!(listed, names, "the README's terminal table and `Terminal` differ");
}

/// The same guard for events.
fn event_index(e: &Event) -> usize {
    match e {
        Event::TurnStarted { .. } => 0,
        Event::TextDelta { .. } => 1,
        Event::AssistantMessage { .. } => 2,
        Event::ToolUseStarted { .. } => 3,
        Event::ToolUseFinished { .. } => 4,
        Event::Usage { .. } => 5,
        Event::Retry { .. } => 6,
        Event::Fallback { .. } => 7,
        Event::Compaction { .. } => 8,
        Event::Terminal { .. } => 9,
        Event::Subagent { .. } => 10,
        Event::Hook { .. } => 11,
        Event::McpServer { .. } => 12,
    }
}

const EVENT_COUNT: usize = 13;

fn events() -> Vec<(&'static str, Event)> {
    let usage =
        Usage { input_tokens: 1200, output_tokens: 80, cache_creation_input_tokens: 0, cache_read_input_tokens: 900 };
    vec![
        ("turn_started", Event::TurnStarted { turn: 1, model: "claude-sonnet-4-5".into() }),
        ("text_delta", Event::TextDelta { text: "Looking at".into() }),
        ("assistant_message", Event::AssistantMessage { turn: 1, message: Message::assistant("Done.") }),
        (
            "tool_use_started",
            Event::ToolUseStarted {
                id: "toolu_1".into(),
                name: "Read".into(),
                input: json!({"file_path": "src/lib.rs"}),
            },
        ),
        (
            "tool_use_finished",
            Event::ToolUseFinished {
                id: "toolu_1".into(),
                name: "Read".into(),
                is_error: false,
                duration_ms: 3,
                output: "1\tfn main() {}".into(),
            },
        ),
        (
            "usage",
            Event::Usage {
                turn: 1,
                model: "claude-sonnet-4-5".into(),
                usage,
                total: usage,
                cost_usd: 0.0052,
                total_cost_usd: 0.0052,
            },
        ),
        ("retry", Event::Retry { attempt: 1, delay_ms: 2000, error: "overloaded".into() }),
        (
            "fallback",
            Event::Fallback {
                from: "claude-opus-4-1".into(),
                to: "claude-sonnet-4-5".into(),
                error: "overloaded".into(),
            },
        ),
        (
            "compaction",
            Event::Compaction { before_tokens: 150_000, after_tokens: 20_000, reason: CompactionReason::Autocompact },
        ),
        ("terminal", Event::Terminal { reason: Terminal::MaxTurns { limit: 40 }, turns: 40 }),
        (
            "subagent",
            Event::Subagent {
                agent: "review/sub-1".into(),
                event: Box::new(Event::Terminal { reason: Terminal::Completed, turns: 3 }),
            },
        ),
        (
            "hook",
            Event::Hook {
                event: HookEvent::PreToolUse,
                command: "./ci/check-push.sh".into(),
                outcome: "ok".into(),
                is_error: false,
                duration_ms: 12,
            },
        ),
        (
            "mcp_server",
            Event::McpServer {
                server: "docs".into(),
                error: Some("`npx` did not start as an MCP server".into()),
                stderr: "npm error code ENOTCACHED\n".into(),
            },
        ),
    ]
}

#[test]
fn every_event_has_a_json_snapshot() {
    let events = events();
    let covered: BTreeSet<usize> = events.iter().map(|(_, e)| event_index(e)).collect();
    assert_eq!(covered, (0..EVENT_COUNT).collect(), "events() misses a variant");
    for (name, event) in events {
        insta::assert_json_snapshot!(format!("event_{name}"), event);
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["type"], name);
        assert_eq!(serde_json::from_value::<Event>(json).unwrap(), event, "{name} does not read back");
    }
}

#[test]
fn compaction_reasons_keep_their_strings() {
    let names: Vec<String> =
        [CompactionReason::Microcompact, CompactionReason::Autocompact, CompactionReason::PromptTooLong]
            .iter()
            .map(|r| serde_json::to_value(r).unwrap().as_str().unwrap_or_default().to_string())
            .collect();
    assert_eq!(names, ["microcompact", "autocompact", "prompt_too_long"]);
    assert_eq!(CompactionReason::PromptTooLong.to_string(), "prompt_too_long");
}
