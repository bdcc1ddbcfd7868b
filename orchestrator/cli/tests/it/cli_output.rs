//! What the binary prints about itself and its settings: `--help` of every subcommand
//! (snapshots, so a changed flag shows in review) and the warning of an unconfined run,
//! which names the setting the user actually wrote.

use crate::support::{Fixture, orch};

fn help(args: &[&str]) -> String {
    let out = orch().args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn help_of_every_subcommand() {
    for (name, args) in [
        ("orch", &[][..]),
        ("run", &["run"][..]),
        ("validate", &["validate"][..]),
        ("plan", &["plan"][..]),
        ("merge", &["merge"][..]),
        ("exec", &["exec"][..]),
        ("recover", &["recover"][..]),
        ("init", &["init"][..]),
        ("runs_list", &["runs", "list"][..]),
        ("runs_clean", &["runs", "clean"][..]),
        ("sandbox", &["sandbox"][..]),
        ("sandbox_run", &["sandbox", "run"][..]),
    ] {
        insta::assert_snapshot!(format!("help_{name}"), help(args));
    }
}

const UNCONFINED: &str = r#"
version: 1
name: unconfined
description: One agent without a sandbox.
agents:
  solo:
    prompt: Say hello.
    tools: [Read]
    sandbox: { backend: none }
"#;

const UNCONFINED_SCRIPT: &str = r#"
version: 1
agents:
  solo:
    - text: Hello.
"#;

#[test]
fn a_workflow_without_a_sandbox_warns_about_its_own_key_not_a_flag() {
    let fixture = Fixture::new("t-unconfined", &[("a.txt", "A\n")]);
    let run = fixture.run(UNCONFINED, UNCONFINED_SCRIPT, &[]);
    run.expect_code(0);
    assert!(run.stderr.contains("sandbox.backend: none"), "{}", run.stderr);
    assert!(run.stderr.contains("UNCONFINED"), "{}", run.stderr);
    assert!(!run.stderr.contains("--backend none"), "warned about a flag nobody passed:\n{}", run.stderr);
}
