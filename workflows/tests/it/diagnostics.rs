//! Every validation error, snapshot-tested: each file under `tests/invalid/` is loaded
//! (as bytes, the way `orch` reads it) and its rendered diagnostics are compared with
//! `tests/it/snapshots/`. A fixture whose first line is `# max_bytes: N` is loaded with
//! that size cap, so the cap is tested without a megabyte of fixture.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use orch_workflows::{LoadOptions, load, load_bytes, load_str, render_diagnostics};

/// The options a fixture asks for in its first line.
fn options_of(bytes: &[u8]) -> LoadOptions {
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or_default();
    let max_bytes = std::str::from_utf8(first)
        .ok()
        .and_then(|line| line.strip_prefix("# max_bytes: "))
        .map(|n| n.trim().parse().unwrap());
    LoadOptions { max_bytes: max_bytes.unwrap_or(LoadOptions::default().max_bytes), ..LoadOptions::default() }
}

/// Loads `path` (named relative to `tests/`, so snapshots do not hold absolute paths).
fn diagnostics_of(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap();
    let name = format!("invalid/{}", path.file_name().unwrap().to_string_lossy());
    match load_bytes(&bytes, &name, &options_of(&bytes)) {
        Ok(_) => panic!("{name} loaded without errors"),
        Err(diagnostics) => {
            assert!(!diagnostics.is_empty());
            for d in &diagnostics {
                assert!(!d.hint.is_empty(), "{name}: no hint for {}", d.message);
                assert!(d.location.line >= 1 && d.location.column >= 1, "{name}: no position for {}", d.message);
                assert!(!d.location.source_line.is_empty(), "{name}: no source line for {}", d.message);
            }
            render_diagnostics(&diagnostics)
        }
    }
}

#[test]
fn invalid_workflows() {
    insta::glob!("../invalid", "*.yaml", |path| {
        insta::assert_snapshot!(diagnostics_of(path));
    });
}

#[test]
fn several_errors_are_collected() {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/invalid/many_errors.yaml")).unwrap();
    let diagnostics = load_str(&text, "many_errors.yaml").unwrap_err();
    assert!(diagnostics.len() >= 5, "{}", render_diagnostics(&diagnostics));
    let lines: Vec<usize> = diagnostics.iter().map(|d| d.location.line).collect();
    let mut sorted = lines.clone();
    sorted.sort();
    assert_eq!(lines, sorted, "diagnostics come sorted by position");
}

#[test]
fn a_missing_file_is_a_diagnostic() {
    let diagnostics = load("/nonexistent/orch/workflow.yaml").unwrap_err();
    assert_eq!(diagnostics.len(), 1);
    assert!(diagnostics[0].message.starts_with("cannot read the workflow file"));
    assert_eq!(diagnostics[0].location.file, "/nonexistent/orch/workflow.yaml");
}

#[test]
fn diagnostics_serialize_to_json() {
    let diagnostics = load_str("version: 1\nagents:\n  a:\n    prompt: x\n    tools: [Nope]\n", "wf.yaml").unwrap_err();
    let json = serde_json::to_value(&diagnostics).unwrap();
    assert_eq!(
        json,
        serde_json::json!([{
            "message": "unknown tool `Nope`",
            "location": { "file": "wf.yaml", "line": 5, "column": 13 },
            "hint": "the known tools are `Read`, `Write`, `Edit`, `MultiEdit`, `NotebookEdit`, `Glob`, `Grep`, `LS`, `Bash`, `BashOutput`, `KillShell`, `TodoWrite`, `Agent`, `TaskOutput`, `TaskStop`, `Skill`, `WebFetch`, `WebSearch`, and MCP tools written `mcp__<server>__<tool>`"
        }])
    );
}
