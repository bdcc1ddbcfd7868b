//! `orch validate` and `orch run` give every workflow the same verdict (issue 18): each
//! file of `tests/fixtures/reliability/` goes through both commands, through the real
//! binary, on a fixture repository whose `.mcp.json` configures the MCP server `github`.
//!
//! A file named `valid_*.yaml` must be accepted by both: `orch validate` exits 0 and
//! `orch run` (the scripted provider, every agent answering "Done.") exits 0. Any other
//! file must be rejected by both with exit code 2 (an invalid workflow) and the same
//! stderr, diagnostics with their `file:line:col`; the snapshot
//! `it__reliability__<name>.snap` pins that text. Adding a case is adding a file (and
//! accepting its snapshot). A file whose first line is `# pad to N bytes` is padded with
//! comment lines to N bytes before the test uses it, so an over-size case needs no
//! megabyte in the repository.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::{Fixture, orch};

/// The repository's MCP configuration: `github` is configured outside the workflows.
const MCP_JSON: &str = r#"{ "mcpServers": { "github": { "command": "github-mcp" } } }"#;

/// Every agent, synthesis included, answers once.
const SCRIPT: &str = "version: 1\nagents:\n  \"*\":\n    - text: Done.\n";

/// The fixtures, sorted by name.
fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reliability");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    paths.sort();
    paths
}

/// The bytes of a fixture, padded as its first line asks.
fn contents(path: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(path).unwrap();
    let first = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let target = std::str::from_utf8(first)
        .ok()
        .and_then(|l| l.strip_prefix("# pad to ")?.strip_suffix(" bytes")?.parse::<usize>().ok());
    if let Some(target) = target {
        let line = format!("#{}\n", "-".repeat(78));
        while bytes.len() + line.len() <= target {
            bytes.extend_from_slice(line.as_bytes());
        }
        bytes.resize(target - 1, b'-');
        bytes.push(b'\n');
        assert_eq!(bytes.len(), target);
    }
    bytes
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// Stderr with the test's temporary directory written `[DIR]`.
fn stderr(out: &Output, dir: &Path) -> String {
    String::from_utf8_lossy(&out.stderr).replace(&dir.display().to_string(), "[DIR]")
}

#[test]
fn validate_and_run_give_every_reliability_fixture_the_same_verdict() {
    let paths = fixtures();
    assert!(paths.len() >= 12, "the reliability fixtures are missing: {paths:?}");
    for (i, path) in paths.iter().enumerate() {
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        let fx = Fixture::new(&format!("rel-{i}"), &[(".mcp.json", MCP_JSON), ("README.md", "fixture\n")]);
        let workflow = fx.dir.path().join(path.file_name().unwrap());
        std::fs::write(&workflow, contents(path)).unwrap();
        let script = fx.write("script.yaml", SCRIPT);
        let validate = orch().current_dir(&fx.repo).arg("validate").arg(&workflow).output().unwrap();
        let run = orch()
            .current_dir(&fx.repo)
            .arg("run")
            .arg(&workflow)
            .args(["--provider", "scripted", "--script"])
            .arg(&script)
            .arg("--out")
            .arg(&fx.out)
            .args(["--run-id", &fx.run_id])
            .output()
            .unwrap();
        let (validate_err, run_err) = (stderr(&validate, fx.dir.path()), stderr(&run, fx.dir.path()));
        let both = format!("`orch validate`:\n{validate_err}\n`orch run`:\n{run_err}");
        if name.starts_with("valid_") {
            assert_eq!((code(&validate), code(&run)), (0, 0), "{name}: both must accept it\n{both}");
            continue;
        }
        assert_eq!((code(&validate), code(&run)), (2, 2), "{name}: both must reject it with exit 2\n{both}");
        assert_eq!(validate_err, run_err, "{name}: the two commands disagree\n{both}");
        assert!(validate_err.contains("[DIR]/"), "{name}: no diagnostic names the file\n{both}");
        assert!(!fx.out.join("report.json").exists(), "{name}: `orch run` started a run");
        insta::assert_snapshot!(name.as_str(), validate_err);
    }
}
