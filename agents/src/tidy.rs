//! Tidy tests: checks that the lists and tables kept by hand, here and in the book (docs/src),
//! agree with the code, and that the `--json` form of every event is pinned.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::event::{Budget, CompactionReason, Event, Phase, Terminal};
use crate::message::Message;
use crate::tools::{CORE_TOOL_NAMES, core_tools};
use crate::usage::Usage;
use orch_types::HookEvent;
use orch_types::tools::{CATALOG, Runs, lookup};

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
fn core_tools_are_the_catalogs_host_entries_with_the_same_flags() {
    let implemented: BTreeSet<&str> = core_tools().iter().map(|t| t.name()).collect();
    let catalog: BTreeSet<&str> = CATALOG.iter().filter(|t| t.runs == Runs::Host).map(|t| t.name).collect();
    assert_eq!(implemented, catalog);
    assert_eq!(CORE_TOOL_NAMES.iter().copied().collect::<BTreeSet<_>>(), catalog);
    let in_coordinator: Vec<&str> = CATALOG.iter().filter(|t| t.runs == Runs::Coordinator).map(|t| t.name).collect();
    assert_eq!(
        in_coordinator,
        [
            crate::subagent::AGENT_TOOL,
            crate::tools::task_output::TASK_OUTPUT_TOOL,
            crate::tools::task_stop::TASK_STOP_TOOL,
            crate::tools::skill::SKILL_TOOL,
            crate::tools::web_search::WEB_SEARCH_TOOL
        ]
    );
    for tool in core_tools() {
        let Some(info) = lookup(tool.name()) else { continue };
        let input = sample_input(&tool.input_schema());
        assert_eq!(tool.is_read_only(&input), info.read_only, "{}: read_only differs from the catalog", tool.name());
        assert_eq!(
            tool.is_concurrency_safe(&input),
            info.concurrency_safe,
            "{}: concurrency_safe differs from the catalog",
            tool.name()
        );
        if !tool.writes(&input).is_empty() {
            assert!(info.writes, "{} writes files but the catalog says it does not", tool.name());
        }
        // A file tool's subject is the path in the field the catalog names.
        if let Some(field) = info.path_field {
            let mut input = input.clone();
            input[field] = json!("some/file");
            assert_eq!(tool.permission_subject(&input).as_deref(), Some("some/file"), "{}", tool.name());
        }
    }
}

/// Where the tool table of the book's Tools page starts and ends; between them is
/// [`orch_types::tools::markdown_table`].
const TABLE_START: &str = "<!-- the tool table: made from orchestrator/types/src/tools.rs by `UPDATE_DOCS=1 cargo nextest run -p orch-agents docs_tool_table` -->\n";
const TABLE_END: &str = "<!-- end of the tool table -->";

#[test]
fn the_docs_tool_table_is_made_from_the_catalog() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/concepts/tools.md");
    let page = std::fs::read_to_string(&path).expect("the Tools page is readable");
    let (before, rest) = page.split_once(TABLE_START).expect("the Tools page has the tool table's start marker");
    let (table, after) = rest.split_once(TABLE_END).expect("the Tools page has the tool table's end marker");
    let made = orch_types::tools::markdown_table();
    if table != made {
        if std::env::var_os("UPDATE_DOCS").is_some() {
            std::fs::write(&path, format!("{before}{TABLE_START}{made}{TABLE_END}{after}"))
                .expect("the Tools page is writable");
        } else {
            panic!(
                "the Tools page's tool table differs from the catalog; rerun this test with UPDATE_DOCS=1 to remake it"
            );
        }
    }
}

/// The places in `text` that keep tool names by hand: a `const` or `static` that names
/// two catalog tools or more, a match pattern of two (`"Agent" | "Task"`), or a literal
/// list of more than half the catalog.
fn hand_kept_lists(text: &str) -> Vec<String> {
    let is_tool = |s: &str| lookup(s).is_some();
    // The string literals of `span`, without their quotes (escapes are rare enough here).
    let literals = |span: &str| -> Vec<String> { span.split('"').skip(1).step_by(2).map(str::to_string).collect() };
    let mut found = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("//") {
            continue;
        }
        let item = line.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        if item.starts_with("const ") || item.starts_with("static ") {
            let end = lines[i..].iter().position(|l| l.trim_end().ends_with(';')).map_or(lines.len(), |n| i + n + 1);
            let names = literals(&lines[i..end].join("\n")).into_iter().filter(|s| is_tool(s)).count();
            if names >= 2 {
                found.push(format!("line {}: a constant that lists tools", i + 1));
            }
        }
        let parts: Vec<&str> = line.split('|').map(str::trim).collect();
        let quoted_tool = |p: &str| p.strip_prefix('"').and_then(|p| p.split('"').next()).is_some_and(is_tool);
        let ends_quoted_tool = |p: &str| p.strip_suffix('"').and_then(|p| p.rsplit('"').next()).is_some_and(is_tool);
        if parts.windows(2).any(|w| ends_quoted_tool(w[0]) && quoted_tool(w[1])) {
            found.push(format!("line {}: a pattern of tool names", i + 1));
        }
    }
    let bytes = text.as_bytes();
    let mut opens = Vec::new();
    let mut in_string = false;
    for (at, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if at == 0 || bytes[at - 1] != b'\\' => in_string = !in_string,
            b'[' if !in_string => opens.push(at),
            b']' if !in_string => {
                let Some(open) = opens.pop() else { continue };
                let names: BTreeSet<String> = literals(&text[open..at]).into_iter().filter(|s| is_tool(s)).collect();
                if names.len() * 2 > CATALOG.len() {
                    let line = text[..open].lines().count();
                    found.push(format!("line {line}: a list of most tools"));
                }
            }
            _ => {}
        }
    }
    found
}

#[test]
fn the_scan_for_hand_kept_lists_finds_them() {
    let kept =
        "const PLAIN: &[&str] =\n    &[\"TodoWrite\", \"KillShell\"];\nif matches!(t, \"Agent\" | \"Task\") {}\n";
    assert_eq!(hand_kept_lists(kept).len(), 2, "{:?}", hand_kept_lists(kept));
    let all: Vec<String> = CATALOG.iter().map(|t| format!("\"{}\"", t.name)).collect();
    assert_eq!(hand_kept_lists(&format!("let x = [{}];", all.join(", "))).len(), 1);
    let fine = "const NAME: &str = \"Read\";\nlet input = [\"Read\", \"Bash\"];\nlet x = a | b;\n";
    assert!(hand_kept_lists(fine).is_empty(), "{:?}", hand_kept_lists(fine));
}

#[test]
fn no_list_of_tool_names_is_kept_outside_the_catalog() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let catalog = root.join("orchestrator/types/src/tools.rs");
    let mut dirs: Vec<std::path::PathBuf> =
        ["agents", "orchestrator", "workflows", "sandbox", "tests"].iter().map(|d| root.join(d)).collect();
    let mut offenders = Vec::new();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() {
                if name != "target" && name != "fixtures" && name != "node_modules" {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") && path != catalog {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for place in hand_kept_lists(&text) {
                    offenders.push(format!("{}: {place}", path.strip_prefix(&root).unwrap_or(&path).display()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "tool names kept by hand outside orchestrator/types/src/tools.rs; derive them from the catalog:\n{}",
        offenders.join("\n")
    );
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
fn the_docs_terminal_table_lists_every_terminal_reason() {
    let covered: BTreeSet<usize> = terminals().iter().map(terminal_index).collect();
    assert_eq!(covered, (0..TERMINAL_COUNT).collect(), "terminals() misses a reason");
    let page = include_str!("../../docs/src/concepts/agent-loop.md");
    let table = page
        .split_once("| reason | when | `orch exec` exit |")
        .map(|(_, rest)| rest.split("\n\n").next().unwrap_or_default())
        .expect("docs/src/concepts/agent-loop.md has the terminal reason table");
    let listed: BTreeSet<&str> = table
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|line| line.split_once('`').map(|(name, _)| name))
        .collect();
    let names: BTreeSet<&str> = terminals().iter().map(Terminal::name).collect();
    assert_eq!(listed, names, "the agent loop page's terminal table and `Terminal` differ");
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
                denied: false,
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
                tool_use_id: None,
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

/// Every built-in tool's input schema: the host tools and the coordinator's.
fn tool_schemas() -> Vec<(&'static str, Value)> {
    use crate::tools::DynTool;
    let mut all: Vec<(&'static str, Value)> = core_tools().iter().map(|t| (t.name(), t.input_schema())).collect();
    for tool in [
        &crate::subagent::AgentToolSpec as &dyn DynTool,
        &crate::tools::task_output::TaskOutputSpec,
        &crate::tools::task_stop::TaskStopSpec,
        &crate::tools::skill::SkillToolSpec,
        &crate::tools::web_search::WebSearchSpec,
    ] {
        all.push((tool.name(), tool.input_schema()));
    }
    all
}

#[test]
fn tool_schemas_have_claude_codes_shapes() {
    for (name, schema) in tool_schemas() {
        let text = schema.to_string();
        // Optional fields are plain types left out of `required`, never unions with null.
        assert!(!text.contains("\"null\""), "{name}: a null in the schema: {text}");
        assert!(!text.contains("anyOf") && !text.contains("oneOf"), "{name}: {text}");
        assert!(!text.contains("$ref") && schema.get("$defs").is_none(), "{name}: not written in place: {text}");
        assert_eq!(schema["type"], "object", "{name}");
        insta::assert_json_snapshot!(format!("schema_{name}"), schema);
    }
    let notebook = tool_schemas().into_iter().find(|(n, _)| *n == "NotebookEdit").unwrap().1;
    assert_eq!(notebook["properties"]["cell_type"]["enum"], json!(["code", "markdown"]));
    assert_eq!(notebook["properties"]["cell_type"]["type"], "string");
    assert_eq!(notebook["properties"]["edit_mode"]["enum"], json!(["replace", "insert", "delete"]));
    assert_eq!(notebook["required"], json!(["notebook_path", "new_source"]));
}

#[test]
fn claude_code_shape_rewrites_unions_refs_and_null_enums() {
    let mut schema = json!({
        "type": "object",
        "properties": {
            "type": {"type": ["string", "null"], "default": null},
            "mode": {"anyOf": [{"$ref": "#/$defs/Mode"}, {"type": "null"}], "description": "how"},
            "inline": {"type": ["string", "null"], "enum": ["a", "b", null]},
            "list": {"type": "array", "items": {"$ref": "#/$defs/Mode"}}
        },
        "required": [],
        "$defs": {"Mode": {"type": "string", "enum": ["x", "y"]}}
    });
    crate::tools::claude_code_shape(&mut schema);
    assert_eq!(
        schema,
        json!({
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "mode": {"type": "string", "enum": ["x", "y"], "description": "how"},
                "inline": {"type": "string", "enum": ["a", "b"]},
                "list": {"type": "array", "items": {"type": "string", "enum": ["x", "y"]}}
            },
            "required": []
        })
    );
    // A recursive definition keeps its `$ref` and its definitions.
    let mut recursive = json!({
        "type": "object",
        "properties": {"node": {"$ref": "#/$defs/Node"}},
        "$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}}
    });
    crate::tools::claude_code_shape(&mut recursive);
    assert!(recursive.get("$defs").is_some(), "{recursive}");
}
