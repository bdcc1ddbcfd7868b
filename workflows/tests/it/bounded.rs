//! Bounded input and the checks `orch run` used to make alone: the size cap on a file
//! that never ends, the alias bomb (time and memory), `load_value` for other YAML
//! files, exact positions for bad bytes, control characters and out-of-range numbers,
//! default limits, MCP servers from outside the workflow, template filters.

use std::time::{Duration, Instant};

use orch_workflows::yaml::{load_value, load_value_file};
use orch_workflows::{
    DEFAULT_MAX_TURNS, DEFAULT_TIMEOUT, Inputs, LoadOptions, PlanNode, load, load_bytes, load_str, load_str_with, plan,
    render_diagnostics,
};
use serde_json::json;

use crate::alloc::peak_during;

/// The nested-alias bomb of issue 18: nine levels, nine aliases each, about 420 bytes.
pub fn alias_bomb(levels: usize, width: usize) -> String {
    let mut text = String::from("version: 1\n");
    let names: Vec<String> = (0..levels).map(|i| format!("l{i}")).collect();
    text.push_str(&format!("{}: &{} [{}]\n", names[0], names[0], vec!["\"lol\""; width].join(",")));
    for i in 1..levels {
        let alias = format!("*{}", names[i - 1]);
        text.push_str(&format!("{}: &{} [{}]\n", names[i], names[i], vec![alias.as_str(); width].join(",")));
    }
    text.push_str("agents: { a: { prompt: hi } }\n");
    text
}

#[test]
fn a_file_that_never_ends_is_read_to_the_cap_only() {
    let (result, peak) = peak_during(|| load("/dev/zero"));
    let diagnostics = result.unwrap_err();
    assert_eq!(diagnostics.len(), 1);
    assert!(diagnostics[0].message.contains("/dev/zero is larger than the cap of 1 MiB"), "{}", diagnostics[0].message);
    assert!(peak < 8 << 20, "reading /dev/zero held {peak} bytes");
    let err = load_value_file(std::path::Path::new("/dev/zero")).unwrap_err();
    assert!(err.message.contains("larger than the cap"), "{}", err.message);
}

#[test]
fn the_alias_bomb_fails_fast_at_the_alias_with_bounded_memory() {
    let bomb = alias_bomb(9, 9);
    assert!(bomb.len() < 500, "{} bytes", bomb.len());
    let started = Instant::now();
    let (result, peak) = peak_during(|| load_str(&bomb, "bomb.yaml"));
    let elapsed = started.elapsed();
    let diagnostics = result.unwrap_err();
    assert_eq!(diagnostics.len(), 1, "{}", render_diagnostics(&diagnostics));
    let d = &diagnostics[0];
    assert!(d.message.starts_with("aliases copy too much"), "{}", d.message);
    assert!(d.location.line > 2 && d.location.line <= 10, "at {}", d.location);
    assert!(d.location.source_line.contains('*'), "{}", d.location.source_line);
    // 9^9 strings would be about 30 GB; the budget keeps it to tens of MB.
    assert!(peak < 256 << 20, "the bomb held {peak} bytes");
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");
    // The same through load_value.
    let (result, peak) = peak_during(|| load_value("bomb.yaml", bomb.as_bytes()));
    assert!(result.unwrap_err().message.starts_with("aliases copy too much"));
    assert!(peak < 256 << 20, "load_value held {peak} bytes");
}

#[test]
fn modest_aliases_still_work() {
    let text = "version: 1\ndefaults:\n  tools: &tools [Read, Grep]\nagents:\n  a: { prompt: x, tools: *tools }\n  b: { prompt: y, tools: *tools }\n";
    let workflow = load_str(text, "wf.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    assert_eq!(workflow.agents[1].tools.as_deref(), Some(&["Read".to_string(), "Grep".to_string()][..]));
}

#[test]
fn load_value_reads_plain_data_with_positions() {
    let value = load_value("prices.yaml", b"models:\n  opus: { input: 15, output: 75.5 }\n  tags: [a, 'b']\n").unwrap();
    assert_eq!(value, json!({ "models": { "opus": { "input": 15, "output": 75.5 }, "tags": ["a", "b"] } }));
    assert_eq!(load_value("empty.yaml", b"").unwrap(), serde_json::Value::Null);

    let err = load_value("turns.yaml", b"- a: 1\n- b: [1, 2\n").unwrap_err();
    assert_eq!(err.location.file, "turns.yaml");
    assert!(err.location.line >= 2, "{err}");

    let err = load_value("settings.yaml", b"a: 1\nb: 2\na: 3\n").unwrap_err();
    assert_eq!((err.location.line, err.location.column), (3, 1));
    assert_eq!(err.message, "duplicate key `a`");

    let err = load_value("input.yaml", b"a: 1\nb: \"caf\xe9\"\n").unwrap_err();
    assert_eq!((err.location.line, err.location.column), (2, 8), "{err}");

    let err = load_value("input.yaml", b"x: .nan\n").unwrap_err();
    assert_eq!((err.location.line, err.location.column), (1, 4), "{err}");

    let big = vec![b'a'; (1 << 20) + 1];
    assert!(load_value("big.yaml", &big).unwrap_err().message.contains("larger than the cap of 1 MiB"));
}

#[test]
fn bad_bytes_are_placed_where_they_are() {
    let bytes = b"version: 1\nname: x\nagents:\n  a:\n    prompt: ab\xffcd\n";
    let d = &load_bytes(bytes, "wf.yaml", &LoadOptions::default()).unwrap_err()[0];
    assert_eq!((d.location.line, d.location.column), (5, 15), "{d}");
    assert!(d.message.contains("not valid UTF-8") && d.message.contains("0xFF"), "{}", d.message);

    let d = &load_str("version: 1\nagents:\n  a: { prompt: \"x\0\" }\n", "wf.yaml").unwrap_err()[0];
    assert_eq!((d.location.line, d.location.column), (3, 18), "{d}");
    assert!(d.message.contains("NUL"));
    assert!(!d.hint.contains("tab"), "{}", d.hint);
}

#[test]
fn out_of_range_numbers_say_so_where_they_are() {
    let text = "version: 1\nagents:\n  a:\n    prompt: x\n    limits: { max_turns: 5000000000 }\n";
    let d = &load_str(text, "wf.yaml").unwrap_err()[0];
    assert_eq!((d.location.line, d.location.column), (5, 26), "{d}");
    assert!(d.message.contains("out of range") && d.message.contains("4294967295"), "{}", d.message);

    let text = "version: 1\nconcurrency: 123456789012345678901234567890\nagents: { a: { prompt: x } }\n";
    let d = &load_str(text, "wf.yaml").unwrap_err()[0];
    assert_eq!((d.location.line, d.location.column), (2, 14), "{d}");
    assert!(d.message.contains("out of range"), "{}", d.message);
}

#[test]
fn prompts_must_say_something_in_plain_text() {
    let d = &load_str("version: 1\nagents:\n  a: { prompt: \"\" }\n", "wf.yaml").unwrap_err()[0];
    assert_eq!(d.message, "the prompt of `a` is empty");
    assert_eq!(d.location.line, 3);

    let d = &load_str("version: 1\nagents:\n  a: { prompt: \"ring \\x07 now\" }\n", "wf.yaml").unwrap_err()[0];
    assert!(d.message.contains("U+0007"), "{}", d.message);
    assert_eq!(d.location.line, 3);

    // Tabs and line breaks are text.
    load_str("version: 1\nagents:\n  a: { prompt: \"one\\ttwo\\nthree\" }\n", "wf.yaml").unwrap();
}

#[test]
fn every_agent_gets_default_limits_that_a_workflow_can_raise() {
    let text =
        "version: 1\nagents:\n  plain: { prompt: x }\n  long: { prompt: y, limits: { max_turns: 500, timeout: 2h } }\n";
    let workflow = load_str(text, "wf.yaml").unwrap();
    let planned = plan(&workflow, &Inputs::new()).unwrap();
    let limits = |id: &str| {
        planned
            .nodes()
            .find_map(|n| match n {
                PlanNode::Agent(spec) if spec.id == id => Some(spec.limits),
                _ => None,
            })
            .unwrap()
    };
    assert_eq!(limits("plain").max_turns, Some(DEFAULT_MAX_TURNS));
    assert_eq!(limits("plain").timeout.map(|t| t.as_std()), Some(DEFAULT_TIMEOUT));
    assert_eq!(limits("long").max_turns, Some(500));
    assert_eq!(limits("long").timeout.map(|t| t.as_std()), Some(Duration::from_secs(7200)));
    let text = orch_workflows::render_text(&planned);
    assert!(text.contains("max_turns 100, timeout 30m"), "{text}");

    // `defaults.limits` raises them for every agent.
    let workflow =
        load_str("version: 1\ndefaults: { limits: { max_turns: 300 } }\nagents: { a: { prompt: x } }\n", "wf.yaml")
            .unwrap();
    let planned = plan(&workflow, &Inputs::new()).unwrap();
    let spec = planned.agents().next().unwrap();
    assert_eq!(spec.limits.max_turns, Some(300));
    assert_eq!(spec.limits.timeout.map(|t| t.as_std()), Some(DEFAULT_TIMEOUT));
}

#[test]
fn mcp_tools_name_a_configured_server() {
    let text = "version: 1\nagents:\n  a: { prompt: x, tools: [Read, mcp__ghost__lookup] }\n";
    let d = &load_str(text, "wf.yaml").unwrap_err()[0];
    assert_eq!(d.message, "`mcp__ghost__lookup` names the MCP server `ghost`, which is not configured");
    assert_eq!((d.location.line, d.location.column), (3, 33));
    // A server from `.mcp.json`, passed by the caller, counts.
    let options = LoadOptions { mcp_servers: Some(vec!["ghost".to_string()]), ..LoadOptions::default() };
    load_str_with(text, "wf.yaml", &options).unwrap();
    // And one the workflow declares.
    let declared = "version: 1\nmcp_servers: { ghost: { command: ghost-server } }\nagents:\n  a: { prompt: x, tools: [mcp__ghost__lookup] }\n";
    load_str(declared, "wf.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
}

#[test]
fn container_agents_need_an_image() {
    let d = &load_str("version: 1\nagents:\n  a: { prompt: x, sandbox: { backend: container } }\n", "wf.yaml")
        .unwrap_err()[0];
    assert_eq!(d.message, "agent `a` uses the container backend without an image");
    let text = "version: 1\ndefaults: { sandbox: { backend: container } }\nagents:\n  a: { prompt: x }\n";
    let d = &load_str(text, "wf.yaml").unwrap_err()[0];
    assert!(d.message.contains("(from `defaults.sandbox`)"), "{}", d.message);
    assert_eq!(d.location.line, 4);
    let text = "version: 1\ndefaults: { sandbox: { image: rust:1.88 } }\nagents:\n  a: { prompt: x, sandbox: { backend: container } }\n";
    load_str(text, "wf.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
}

#[test]
fn unknown_template_filters_are_found_when_validating() {
    let text =
        "version: 1\ninputs: { x: { default: a } }\nagents:\n  a: { prompt: \"{{ inputs.x | nosuchfilter }}\" }\n";
    let d = &load_str(text, "wf.yaml").unwrap_err()[0];
    assert_eq!(d.message, "unknown filter `nosuchfilter` in the prompt of `a`");
    assert_eq!((d.location.line, d.location.column), (4, 31), "{d}");
    let known = "version: 1\ninputs: { x: { default: a } }\nagents:\n  a: { prompt: \"{{ inputs.x | upper | replace('A', '|b') }} {# x | nope #} a | b\" }\n";
    load_str(known, "wf.yaml").unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    let block = "version: 1\nagents:\n  a: { prompt: \"{% filter shout %}hi{% endfilter %}\" }\n";
    assert!(load_str(block, "wf.yaml").unwrap_err()[0].message.contains("unknown filter `shout`"));
}
