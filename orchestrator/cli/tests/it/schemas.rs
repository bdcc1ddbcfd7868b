//! `orch schema NAME` prints the committed schemas of `workflows/schemas/`, and what
//! orch writes follows them: a run's report.json and every `--json` line (a run with
//! tool calls, an edit, a denied call and synthesis), and a failed run's report. `orch completions SHELL` too.

use std::path::Path;

use serde_json::Value;

use super::support::{Fixture, orch};

fn schema(name: &str) -> Value {
    let out = orch().args(["schema", name]).output().unwrap();
    assert!(out.status.success(), "orch schema {name}: {}", String::from_utf8_lossy(&out.stderr));
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../../workflows/schemas/{name}.schema.json"));
    let committed: Value = serde_json::from_str(&std::fs::read_to_string(committed).unwrap()).unwrap();
    assert_eq!(printed, committed, "orch schema {name} differs from the committed file");
    printed
}

fn errors(schema: &Value, value: &Value) -> Vec<String> {
    let validator = jsonschema::validator_for(schema).unwrap();
    validator.iter_errors(value).map(|e| format!("{e} at {}", e.instance_path())).collect()
}

#[test]
fn orch_schema_prints_each_committed_schema() {
    for name in ["workflow", "report", "events", "finding"] {
        let s = schema(name);
        assert!(s["$schema"].as_str().is_some_and(|u| u.contains("json-schema.org")), "{name}: {s}");
    }
    let out = orch().args(["schema", "reprot"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("report"));
}

#[test]
fn reports_and_event_lines_follow_their_schemas() {
    let (report, events) = (schema("report"), schema("events"));
    let fx = Fixture::new("t-schemas", &[("src/a.rs", "fn a() {}\n")]);
    let workflow = "version: 1\nname: s\nagents:\n  editor:\n    prompt: Edit it.\n    tools: [Read, Edit, Bash]\n    permissions: { deny: ['Bash(rm:*)'] }\n  reader:\n    prompt: Read it.\n    tools: [Read]\nsynthesis:\n  prompt: Combine.\n";
    let script = r#"
version: 1
agents:
  editor:
    - tool_calls: [{name: Read, input: {file_path: src/a.rs}}]
    - tool_calls: [{name: Edit, input: {file_path: src/a.rs, old_string: "fn a() {}", new_string: "fn a() -> u8 { 1 }"}}, {name: Bash, input: {command: rm src/a.rs}}]
    - text: Edited.
  reader:
    - tool_calls: [{name: Read, input: {file_path: src/nope.rs}}]
    - text: Nothing there.
  synthesis:
    - text: Both done.
"#;
    let run = fx.run(workflow, script, &["--json"]);
    run.expect_code(0);
    let problems = errors(&report, &run.report);
    assert!(problems.is_empty(), "report.json breaks its schema:\n{}", problems.join("\n"));
    let mut kinds = std::collections::BTreeSet::new();
    for line in run.stdout.lines() {
        let value: Value = serde_json::from_str(line).unwrap();
        kinds.insert(value["event"]["type"].as_str().unwrap_or("").to_string());
        let problems = errors(&events, &value);
        assert!(problems.is_empty(), "an event line breaks its schema:\n{line}\n{}", problems.join("\n"));
    }
    assert!(kinds.contains("tool_use_finished") && kinds.contains("run_finished"), "{kinds:?}");
    // A failed run's report too (a model answer the script does not have).
    let failed = Fixture::new("t-schemas-failed", &[("a.txt", "a\n")]);
    let run = failed.run("version: 1\nagents:\n  a:\n    prompt: Hi.\n", "version: 1\nagents: {}\n", &[]);
    assert_ne!(run.code, 0);
    let problems = errors(&report, &run.report);
    assert!(problems.is_empty(), "a failed run's report.json breaks its schema:\n{}", problems.join("\n"));
    // And the schema is not a blank check: a report with a wrong status fails it.
    let mut wrong = run.report.clone();
    wrong["status"] = Value::from("exploded");
    assert!(!errors(&report, &wrong).is_empty());
}

#[test]
fn completions_name_the_subcommands_for_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = orch().args(["completions", shell]).output().unwrap();
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        let script = String::from_utf8_lossy(&out.stdout);
        for word in ["run", "exec", "recover", "schema"] {
            assert!(script.contains(word), "{shell}: no `{word}` in the script");
        }
        assert!(!script.contains("__tool-host"), "{shell}: a hidden command is offered");
    }
    let out = orch().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}
