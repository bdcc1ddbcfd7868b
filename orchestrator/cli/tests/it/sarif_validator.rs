//! The SARIF log orch uploads, checked by Microsoft's SARIF multitool (npm
//! `@microsoft/sarif-multitool`, pinned in `.ci/setup.sh`) with the SARIF rules and
//! GitHub's ingestion rules (`--rule-kind Gh;Sarif`): no error and no warning.
//!
//! `.ci/setup.sh` installs the multitool into `target/sarif-multitool` (or
//! `$ORCH_SARIF_MULTITOOL` names its executable). Without it this test fails under
//! `CI=true` and is skipped with a printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use super::publish::sarif_log_of_a_run;

fn multitool() -> Option<PathBuf> {
    let path = std::env::var_os("ORCH_SARIF_MULTITOOL").map(PathBuf::from).unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .unwrap()
            .join("target/sarif-multitool/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool")
    });
    path.is_file().then_some(path)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_uploaded_sarif_passes_githubs_ingestion_rules() {
    let Some(tool) = multitool() else {
        assert!(std::env::var_os("CI").is_none(), "the SARIF multitool is missing: run .ci/setup.sh");
        eprintln!("skipped: the SARIF multitool is not installed (run .ci/setup.sh)");
        return;
    };
    let findings = json!([
        {"path": "src/lib.rs", "line": 1, "severity": "error", "message": "an error"},
        {"path": "src/lib.rs", "line": 2, "end_line": 3, "severity": "warning", "message": "a warning"},
        {"path": "src/lib.rs", "line": 4, "severity": "note", "message": "a note"},
    ]);
    let log = sarif_log_of_a_run(findings).await;
    let problems = validate(&tool, &log);
    assert!(problems.is_empty(), "the SARIF multitool found problems:\n{}", problems.join("\n"));
    // The GitHub rules did run: the same log without the rules' help fails them.
    let mut bare = log.clone();
    for rule in bare["runs"][0]["tool"]["driver"]["rules"].as_array_mut().unwrap() {
        rule.as_object_mut().unwrap().remove("help");
    }
    let problems = validate(&tool, &bare);
    assert!(problems.iter().any(|p| p.contains("GH2012")), "the GitHub ingestion rules did not run: {problems:?}");
}

/// The errors and warnings of the multitool on `log`, one line each.
fn validate(tool: &Path, log: &Value) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("orch.sarif");
    let output = dir.path().join("validation.sarif");
    std::fs::write(&input, serde_json::to_vec_pretty(log).unwrap()).unwrap();
    let out = Command::new(tool)
        .arg("validate")
        .arg(&input)
        .args(["--rule-kind", "Gh;Sarif", "--log", "ForceOverwrite", "-o"])
        .arg(&output)
        .env("DOTNET_CLI_TELEMETRY_OPTOUT", "1")
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "the multitool failed: {printed}{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&std::fs::read(&output).unwrap()).unwrap();
    report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|run| run["results"].as_array().cloned().unwrap_or_default())
        .filter(|r| matches!(r["level"].as_str(), Some("error" | "warning") | None))
        .map(|r| format!("{} {}", r["ruleId"], r["message"]))
        .collect()
}
