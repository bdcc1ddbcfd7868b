//! The coordinator's runtime (`ORCH_RUNTIME`): a run behaves the same on either flavor,
//! and a flavor orch does not know is a usage error before anything runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use crate::support::Fixture;

const WORKFLOW: &str =
    "version: 1\nname: rt\nagents:\n  main: { prompt: Look around., tools: [Read, Bash] }\nintegrate: branches\n";
const SCRIPT: &str = "\
version: 1
agents:
  main:
    - tool_calls: [{name: Read, input: {file_path: a.txt}}, {name: Bash, input: {command: 'cat a.txt; echo more >> a.txt'}}]
    - text: done
";

#[test]
fn a_run_ends_the_same_on_either_runtime() {
    for flavor in ["current-thread", "multi-thread"] {
        let fx = Fixture::new("rt", &[("a.txt", "hello\n")]);
        let mut cmd = fx.command(WORKFLOW, SCRIPT);
        let out = cmd.env("ORCH_RUNTIME", flavor).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{flavor}: {stderr}");
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fx.out.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["agents"][0]["status"], "succeeded", "{flavor}: {report}");
        // The Bash call's change is on the agent's branch.
        assert_eq!(fx.show(&fx.branch("main"), "a.txt"), "hello\nmore\n", "{flavor}");
    }
}

#[test]
fn an_unknown_runtime_is_a_usage_error_and_nothing_runs() {
    let fx = Fixture::new("rt", &[("a.txt", "hello\n")]);
    let out = fx.command(WORKFLOW, SCRIPT).env("ORCH_RUNTIME", "green-threads").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("ORCH_RUNTIME is \"green-threads\"") && stderr.contains("current-thread"), "{stderr}");
    assert!(!fx.out.exists(), "a run directory was made");
}
