//! The GitHub recipes of `examples/github/` run as a user would run them:
//! `tests/recipes/run.sh` installs each into a fresh repository that is not orch's and
//! runs its jobs offline (the Action's own `run.sh`, the scripted provider), then
//! checks what the recipe promises. This test runs that script with this build's binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::Path;
use std::process::Command;

#[test]
fn every_recipe_runs_green_in_a_fresh_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf();
    let output = Command::new("bash")
        .arg(root.join("tests/recipes/run.sh"))
        .env("ORCH_BIN", env!("CARGO_BIN_EXE_orch"))
        .env_remove("ORCH_PROVIDER")
        .env_remove("ORCH_MODEL")
        .env_remove("ORCH_SCRIPT")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("GITHUB_TOKEN")
        .env_remove("ORCH_GITHUB_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "tests/recipes/run.sh failed:\n{stdout}\n{stderr}");
    for check in ["one reviewer per changed file", "the shards pushed one branch per fixed file"] {
        assert!(stdout.contains(&format!("ok: {check}")), "{check} was not checked:\n{stdout}");
    }
    assert!(stdout.contains("every recipe ran green"), "{stdout}");
}
