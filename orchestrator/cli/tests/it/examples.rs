//! Every example under `examples/` runs offline with its scripted turns, through the
//! real binary, in a scratch copy of the repository (so the branches it fetches do not
//! land in this checkout), and does what its comments say.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").current_dir(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into()
}

/// A git repository holding a copy of `examples/` and the README, committed.
fn scratch_repo() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp").arg("-r").arg(root().join("examples")).arg(dir.path()).status().unwrap();
    assert!(status.success());
    for file in ["README.md", "Cargo.toml"] {
        std::fs::copy(root().join(file), dir.path().join(file)).unwrap();
    }
    git(dir.path(), &["init", "-q", "-b", "main"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "fixture"]);
    dir
}

/// Runs `orch run examples/<name>/workflow.yaml` with its script; returns the exit code,
/// stdout and the report.
fn run_example(repo: &Path, name: &str) -> (i32, String, Value) {
    let out_dir = tempfile::tempdir().unwrap();
    let out = out_dir.path().join("run");
    let output = Command::cargo_bin("orch")
        .unwrap()
        .current_dir(repo)
        .env_remove("ORCH_PROVIDER")
        .env_remove("ORCH_MODEL")
        .env_remove("ANTHROPIC_API_KEY")
        .args(["run", &format!("examples/{name}/workflow.yaml"), "--provider", "scripted"])
        .args(["--script", &format!("examples/{name}/script.yaml"), "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let report: Value = serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap_or_else(|e| {
        panic!("no report.json ({e}); stderr:\n{stderr}");
    }))
    .unwrap();
    (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stdout).into(), report)
}

fn statuses(report: &Value) -> Vec<(String, String)> {
    report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["id"].as_str().unwrap().to_string(), a["status"].as_str().unwrap().to_string()))
        .collect()
}

#[test]
fn quickstart() {
    let repo = scratch_repo();
    let (code, stdout, report) = run_example(repo.path(), "quickstart");
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(statuses(&report), [("readme".into(), "succeeded".into()), ("manifest".into(), "succeeded".into())]);
    assert!(stdout.contains("five crates"), "{stdout}");
    assert_eq!(report["synthesis"]["status"], "succeeded");
    // Read-only agents with `integrate: none` leave the repository as it was.
    assert_eq!(git(repo.path(), &["branch", "--list", "orch/*"]), "");
}

#[test]
fn refactor_fans_out_and_merges() {
    let repo = scratch_repo();
    let (code, _, report) = run_example(repo.path(), "refactor");
    assert_eq!(code, 0, "{report:#}");
    let ids: Vec<String> = statuses(&report).into_iter().map(|(id, _)| id).collect();
    assert_eq!(ids, ["port/greet-py", "port/sums-py", "port/report-py"]);
    let merge = &report["integration"]["merge"];
    let branch = merge["branch"].as_str().unwrap();
    assert!(merge["merges"].as_array().unwrap().iter().all(|m| m["merged"] == true), "{merge:#}");
    for (file, line) in [("greet.py", "print(\"hello, %s\" % name)"), ("sums.py", "print(\"total:\", result)")] {
        let text = git(repo.path(), &["show", &format!("{branch}:examples/refactor/fixture/{file}")]);
        assert!(text.contains(line), "{file} on {branch}:\n{text}");
    }
    // The checkout itself is untouched.
    assert_eq!(git(repo.path(), &["status", "--porcelain"]), "");
}

#[test]
fn review_uses_structured_output_dynamic_fan_out_and_synthesis() {
    let repo = scratch_repo();
    let (code, stdout, report) = run_example(repo.path(), "review");
    assert_eq!(code, 0, "{report:#}");
    let agents = report["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 3);
    assert_eq!(agents[0]["output"]["files"].as_array().unwrap().len(), 2);
    let sums = &agents[2];
    assert_eq!(sums["id"], "review/examples-refactor-fixture-sums-py");
    // Its first answer broke the schema; the retry fixed it.
    assert_eq!(sums["turns"], 3);
    assert_eq!(sums["output"]["findings"][0]["severity"], "error");
    assert!(stdout.contains("Verdict"), "{stdout}");
}
