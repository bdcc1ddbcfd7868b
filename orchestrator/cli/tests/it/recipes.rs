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
    for check in [
        "one reviewer per changed file",
        "the shards pushed one branch per fixed file",
        "the issue's body was not run by the shell",
    ] {
        assert!(stdout.contains(&format!("ok: {check}")), "{check} was not checked:\n{stdout}");
    }
    assert!(stdout.contains("every recipe ran green"), "{stdout}");
}

mod changed_files {
    //! `{{ pr.changed_files }}` through the binary: a repository with a base and a head
    //! commit, the base named by `--diff-base` or by a pull-request event.

    use crate::support::{Fixture, git, orch};

    const WORKFLOW: &str = r#"
version: 1
agents:
  review:
    for_each: "{{ pr.changed_files }}"
    as: file
    tools: [Read]
    prompt: "Review {{ file }}. {{ pr.diffs[file] }}"
"#;

    /// Each reviewer checks that its own file's diff reached its prompt.
    const SCRIPT: &str = r#"
version: 1
agents:
  review/app-py:
    - expect: { contains: "+print(2)" }
      text: app.py looks fine.
  review/lib-new-py:
    - expect: { contains: "+def new():" }
      text: lib/new.py looks fine.
  synthesis:
    - text: Both files look fine.
"#;

    /// `main`: app.py, util.py, notes.txt. `feature` (checked out): app.py edited,
    /// lib/new.py added, notes.txt deleted; util.py unchanged. `main` then moves on
    /// (util.py edited), which is not the head's change.
    fn fixture(run_id: &str) -> (Fixture, String, String) {
        let fx = Fixture::new(run_id, &[("app.py", "print(1)\n"), ("util.py", "x = 1\n"), ("notes.txt", "notes\n")]);
        git(&fx.repo, &["checkout", "-q", "-b", "feature"]);
        std::fs::write(fx.repo.join("app.py"), "print(2)\n").unwrap();
        std::fs::create_dir(fx.repo.join("lib")).unwrap();
        std::fs::write(fx.repo.join("lib/new.py"), "def new():\n    return 1\n").unwrap();
        git(&fx.repo, &["rm", "-q", "notes.txt"]);
        git(&fx.repo, &["add", "-A"]);
        git(&fx.repo, &["commit", "-q", "-m", "head"]);
        let head = git(&fx.repo, &["rev-parse", "HEAD"]).trim().to_string();
        git(&fx.repo, &["checkout", "-q", "main"]);
        std::fs::write(fx.repo.join("util.py"), "x = 2\n").unwrap();
        git(&fx.repo, &["commit", "-q", "-am", "base moves on"]);
        let base = git(&fx.repo, &["rev-parse", "HEAD"]).trim().to_string();
        git(&fx.repo, &["checkout", "-q", "feature"]);
        (fx, base, head)
    }

    fn sorted_ids(run: &crate::support::Run) -> Vec<String> {
        let mut ids = run.agent_ids();
        ids.sort();
        ids
    }

    #[test]
    fn diff_base_gives_one_agent_per_changed_file() {
        let (fx, _, _) = fixture("pr-diff-base");
        let run = fx.run(WORKFLOW, SCRIPT, &["--diff-base", "main"]);
        run.expect_code(0);
        assert_eq!(sorted_ids(&run), ["review/app-py", "review/lib-new-py"], "none for util.py or notes.txt");
    }

    #[test]
    fn a_pull_request_event_gives_the_base_and_head() {
        let (fx, base, head) = fixture("pr-event");
        let event = fx.write(
            "event.json",
            &serde_json::json!({ "pull_request": { "number": 4, "base": { "sha": base }, "head": { "sha": head } } })
                .to_string(),
        );
        // Checked out on `main`: the head comes from the event, not from HEAD.
        git(&fx.repo, &["checkout", "-q", "main"]);
        let run = fx
            .command(WORKFLOW, SCRIPT)
            .args(["--trust-repo-config", "--base", &head])
            .env("GITHUB_EVENT_NAME", "pull_request")
            .env("GITHUB_EVENT_PATH", &event)
            .output()
            .unwrap();
        let run = crate::support::Run::from_output(&fx.out, run);
        run.expect_code(0);
        assert_eq!(sorted_ids(&run), ["review/app-py", "review/lib-new-py"]);
    }

    #[test]
    fn orch_plan_shows_the_changed_files_and_says_when_there_are_none() {
        let (fx, _, _) = fixture("pr-plan");
        let workflow = fx.write("workflow.yaml", WORKFLOW);
        let out = orch()
            .current_dir(&fx.repo)
            .env_remove("GITHUB_EVENT_PATH")
            .arg("plan")
            .arg(&workflow)
            .args(["--diff-base", "main"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.contains("changed_files (2): app.py, lib/new.py"), "{stdout}");
        assert!(stdout.contains("deleted_files (1): notes.txt"), "{stdout}");
        assert!(stdout.contains("agent review/lib-new-py"), "{stdout}");
        assert!(!stdout.contains("review/util-py"), "{stdout}");

        let out =
            orch().current_dir(&fx.repo).env_remove("GITHUB_EVENT_PATH").arg("plan").arg(&workflow).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--diff-base REV"), "{stderr}");

        let out = orch()
            .current_dir(&fx.repo)
            .arg("plan")
            .arg(&workflow)
            .args(["--diff-base", "no-such-branch"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("no-such-branch") && stderr.contains("fetch-depth: 0"), "{stderr}");
    }
}
