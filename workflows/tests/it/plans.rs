//! Every workflow under `tests/valid/` loads, and its plan (text and JSON) matches the
//! snapshot: what `orch plan` shows.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

use orch_workflows::{Inputs, Plan, load_str, plan, render_diagnostics, render_text};

fn plan_of(path: &Path) -> Plan {
    let text = std::fs::read_to_string(path).unwrap();
    let name = format!("valid/{}", path.file_name().unwrap().to_string_lossy());
    let workflow = load_str(&text, &name).unwrap_or_else(|d| panic!("{name}:\n{}", render_diagnostics(&d)));
    let mut inputs = Inputs::new();
    // `review.yaml` has a required input.
    if workflow.inputs.iter().any(|i| i.name == "focus") {
        inputs.insert("focus".into(), "the sandbox".into());
    }
    plan(&workflow, &inputs).unwrap_or_else(|d| panic!("{name}:\n{}", render_diagnostics(&d)))
}

#[test]
fn plan_text() {
    insta::glob!("../valid", "*.yaml", |path| {
        insta::assert_snapshot!(render_text(&plan_of(path)));
    });
}

#[test]
fn plan_json() {
    insta::glob!("../valid", "*.yaml", |path| {
        insta::assert_json_snapshot!(plan_of(path));
    });
}
