//! The published workflow schema (`workflows/schemas/workflow.schema.json`) against files: it is
//! current (generated from the types; `ORCH_UPDATE_SCHEMAS=1` rewrites it), every
//! workflow file in the repository that orch loads (the examples, the recipes, the
//! test fixtures) is valid under it, and files with structural mistakes are not.

use std::path::{Path, PathBuf};

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn the_committed_workflow_schema_is_current() {
    let path = workspace().join("workflows/schemas/workflow.schema.json");
    let current = serde_json::to_string_pretty(&orch_workflows::workflow_schema()).unwrap() + "\n";
    if std::env::var_os("ORCH_UPDATE_SCHEMAS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &current).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "{} is stale: run `ORCH_UPDATE_SCHEMAS=1 cargo test -p orch-workflows schema` and commit it",
        path.display()
    );
}

/// Every `.yaml`/`.yml` file under `dir`, recursively.
fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            yaml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            out.push(path);
        }
    }
}

#[test]
fn every_workflow_orch_loads_is_valid_under_the_schema() {
    let validator = jsonschema::validator_for(&orch_workflows::workflow_schema()).unwrap();
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["examples", "workflows/tests", "orchestrator/cli/tests"] {
        yaml_files(&root.join(dir), &mut files);
    }
    let mut loaded = 0;
    for file in &files {
        // Scripts, cases and GitHub workflows are not orch workflows: orch must load it.
        if orch_workflows::load(file).is_err() {
            continue;
        }
        loaded += 1;
        let value: Value = orch_workflows::yaml::load_value_file(file).unwrap();
        let errors: Vec<String> =
            validator.iter_errors(&value).map(|e| format!("{} at {}", e, e.instance_path())).collect();
        assert!(errors.is_empty(), "{} loads but the schema rejects it:\n{}", file.display(), errors.join("\n"));
    }
    assert!(loaded >= 12, "only {loaded} workflow files were found in {files:?}");
}

#[test]
fn structural_mistakes_fail_the_schema_too() {
    let validator = jsonschema::validator_for(&orch_workflows::workflow_schema()).unwrap();
    let dir = workspace().join("workflows/tests/invalid");
    for name in [
        "unknown_top_key",
        "unknown_agent_key",
        "unknown_nested_key",
        "missing_version",
        "no_agents",
        "wrong_type_number",
        "wrong_type_mapping",
        "subagents_unknown_key",
        "hooks_unknown_event",
        "instructions_not_bool",
        "bad_network",
    ] {
        let file = dir.join(format!("{name}.yaml"));
        let value: Value = orch_workflows::yaml::load_value_file(&file).unwrap();
        assert!(!validator.is_valid(&value), "{name}.yaml: orch rejects it, the schema accepts it");
    }
}
