//! Crashes at every stage of a run (issue 26): the run kills itself with SIGKILL at a
//! named point (`ORCH_FAIL_POINT`, see `orch_run::fail_point`), or its report is cut
//! short afterwards, and `orch recover` or `orch run --resume` must finish it. Each case
//! checks from outside: the exit codes, `report.json` (never left `running`), the
//! agents' branches in the user's repository, and what is left of the run clone.

use std::path::Path;

use serde_json::Value;

use crate::support::{Fixture, Run, orch};

const WORKFLOW: &str = r#"
version: 1
name: crash
defaults:
  tools: [Bash]
agents:
  a: { prompt: Work. }
  b: { prompt: Work. }
"#;

/// Each agent writes `<id>.txt` and finishes.
const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "echo a > a.txt"}}]
    - text: a done
  b:
    - tool_calls: [{name: Bash, input: {command: "echo b > b.txt"}}]
    - text: b done
  synthesis:
    - text: both done
"#;

/// Runs the workflow killed at `point`; asserts it was killed.
fn killed_at(fx: &Fixture, point: &str) {
    let out = fx.command(WORKFLOW, SCRIPT).env("ORCH_FAIL_POINT", point).output().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&out.status),
        Some(9),
        "the run was not killed at {point}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `orch run --resume from` of the workflow, as run `run_id` into `out`.
fn resume(fx: &Fixture, run_id: &str, out: &Path, from: &Path) -> Run {
    let workflow = fx.write("workflow.yaml", WORKFLOW);
    let script = fx.write("script.yaml", SCRIPT);
    let output = orch()
        .current_dir(fx.dir.path())
        .arg("run")
        .arg(&workflow)
        .args(["--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(out)
        .args(["--run-id", run_id, "--resume"])
        .arg(from)
        .output()
        .unwrap();
    Run::from_output(out, output)
}

fn report(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

fn recover(fx: &Fixture) -> Run {
    Run::from_output(&fx.out, orch().arg("recover").arg(&fx.out).output().unwrap())
}

/// Nothing of the run clone, the teardown record or the journal is left.
#[track_caller]
fn cleaned(out: &Path) {
    for left in ["repo.git", "repos", "worktrees", "teardown.json", "agents.jsonl"] {
        assert!(!out.join(left).exists(), "{left} is left in {}", out.display());
    }
}

/// Both agents' work is on their branches in the user's repository.
#[track_caller]
fn work_on_branches(fx: &Fixture) {
    assert_eq!(fx.show(&fx.branch("a"), "a.txt"), "a\n");
    assert_eq!(fx.show(&fx.branch("b"), "b.txt"), "b\n");
}

#[test]
fn a_crash_at_any_stage_is_recovered_and_the_report_completed() {
    for point in ["creating-clone", "clone-created", "integrated", "removing-clone", "removed-clone"] {
        let fx = Fixture::new(&format!("t-crash-{point}"), &[("x.txt", "x\n")]);
        killed_at(&fx, point);
        let left = std::fs::read(fx.out.join("report.json")).ok().map(|b| serde_json::from_slice::<Value>(&b).unwrap());
        if let Some(left) = &left {
            assert_eq!(left["status"], "running", "{point}: {left:#}");
        }
        let run = recover(&fx);
        run.expect_code(0);
        assert_eq!(run.report["status"], "interrupted", "{point}: {:#}", run.report);
        assert_eq!(run.report["exit_code"], 137, "{point}");
        assert!(run.report.get("partial").is_none_or(|p| p == false), "{point}: {:#}", run.report);
        cleaned(&fx.out);
        let stopped = run.report["stopped"].as_str().unwrap_or_default();
        if point == "creating-clone" {
            assert!(stopped.contains("before its run clone was ready"), "{stopped}");
        }
        if matches!(point, "creating-clone" | "clone-created") {
            assert_eq!(run.report["agents"], Value::Array(Vec::new()));
            assert!(fx.orch_branches().is_empty(), "{:?}", fx.orch_branches());
        } else {
            for id in ["a", "b"] {
                assert_eq!(run.agent(id)["status"], "succeeded", "{point}: {:#}", run.agent(id));
                assert_eq!(run.agent(id)["branch"], fx.branch(id), "{point}");
            }
            work_on_branches(&fx);
        }
        if point.starts_with("remov") {
            assert!(stopped.contains("killed in teardown"), "{point}: {stopped}");
        }
        // Recovered once: a second recover has nothing to do, and says so.
        let again = recover(&fx);
        again.expect_code(2);
        assert!(again.stderr.contains("nothing to recover"), "{}", again.stderr);
    }
}

/// The case of the issue: killed while the run clone was being removed, then
/// `--resume`. It used to exit 2 with the report `running` for ever.
#[test]
fn resume_finishes_a_run_killed_while_its_clone_was_removed() {
    let fx = Fixture::new("t-crash-resume", &[("x.txt", "x\n")]);
    killed_at(&fx, "removing-clone");
    assert!(!fx.out.join("repo.git").exists() && fx.out.join("repos").exists(), "not half removed");
    let resumed = fx.dir.path().join("out2");
    let run = resume(&fx, "t-crash-resume2", &resumed, &fx.out);
    run.expect_code(0);
    let first = report(&fx.out);
    assert_eq!(first["status"], "interrupted", "{first:#}");
    cleaned(&fx.out);
    for id in ["a", "b"] {
        assert_eq!(run.agent(id)["carried_over"], true, "{:#}", run.agent(id));
        assert_eq!(run.agent(id)["branch"], fx.branch(id));
    }
    work_on_branches(&fx);
}

/// `report.json` cut short (a crash in the middle of an older orch's write, a full
/// disk): rebuilt from `agents.jsonl` and the run clone; with neither the journal nor
/// the clone's branches, recovery fails naming the file instead of dropping agents.
#[test]
fn a_torn_report_is_rebuilt_or_recovery_fails_naming_it() {
    let cut = |out: &Path| {
        let path = out.join("report.json");
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    };

    // The journal has both agents.
    let fx = Fixture::new("t-torn-journal", &[("x.txt", "x\n")]);
    killed_at(&fx, "integrated");
    cut(&fx.out);
    let run = recover(&fx);
    run.expect_code(0);
    for id in ["a", "b"] {
        assert_eq!(run.agent(id)["status"], "succeeded", "{:#}", run.agent(id));
    }
    assert!(run.report["stopped"].as_str().unwrap_or_default().contains("rebuilt from agents.jsonl"));
    work_on_branches(&fx);
    cleaned(&fx.out);
    // A resumed run carries both over: nothing is done twice.
    let resumed = fx.dir.path().join("out2");
    let resumed = resume(&fx, "t-torn-journal2", &resumed, &fx.out);
    resumed.expect_code(0);
    for id in ["a", "b"] {
        assert_eq!(resumed.agent(id)["carried_over"], true, "{:#}", resumed.agent(id));
    }

    // No journal either: the agents come back from their branches in the run clone.
    let fx = Fixture::new("t-torn-branches", &[("x.txt", "x\n")]);
    killed_at(&fx, "integrated");
    cut(&fx.out);
    std::fs::remove_file(fx.out.join("agents.jsonl")).unwrap();
    let run = recover(&fx);
    run.expect_code(0);
    for id in ["a", "b"] {
        assert_eq!(run.agent(id)["status"], "cancelled", "{:#}", run.agent(id));
        assert_eq!(run.agent(id)["branch"], fx.branch(id));
    }
    work_on_branches(&fx);

    // Nor the run clone: exit 3, naming the report; nothing is written over it.
    let fx = Fixture::new("t-torn-gone", &[("x.txt", "x\n")]);
    killed_at(&fx, "integrated");
    cut(&fx.out);
    std::fs::remove_dir_all(fx.out.join("repo.git")).unwrap();
    let torn = std::fs::read(fx.out.join("report.json")).unwrap();
    let out = orch().arg("recover").arg(&fx.out).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("{}", fx.out.join("report.json").display())), "{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    assert_eq!(std::fs::read(fx.out.join("report.json")).unwrap(), torn);
}

/// Crash-and-resume cycles leave one branch per agent: after a resumed run fetched its
/// branches, the earlier attempts' branches it holds are pruned from the repository
/// (through a killed run in the middle of the chain), and those its report points to
/// stay.
#[test]
fn a_resumed_run_prunes_the_branches_it_superseded() {
    const WORKFLOW: &str = r#"
version: 1
name: prune
defaults:
  tools: [Bash]
agents:
  a: { prompt: Work. }
  b: { prompt: Work., limits: { max_turns: 1 } }
"#;
    // `b` stops at its turn limit every time: partial, so every resume reruns it.
    const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "echo a > a.txt"}}]
    - text: a done
  b:
    - tool_calls: [{name: Bash, input: {command: "echo b >> b.txt"}}]
    - text: never
  synthesis:
    - text: combined
"#;
    let fx = Fixture::new("t-prune-1", &[("x.txt", "x\n")]);
    let workflow = fx.write("workflow.yaml", WORKFLOW);
    let script = fx.write("script.yaml", SCRIPT);
    let run = |id: &str, resume: Option<&Path>, fail: Option<&str>| {
        let out = fx.dir.path().join(id);
        let mut cmd = orch();
        cmd.current_dir(fx.dir.path())
            .arg("run")
            .arg(&workflow)
            .args(["--provider", "scripted", "--script"])
            .arg(&script)
            .arg("--repo")
            .arg(&fx.repo)
            .arg("--out")
            .arg(&out)
            .args(["--run-id", id]);
        if let Some(dir) = resume {
            cmd.arg("--resume").arg(dir);
        }
        if let Some(point) = fail {
            cmd.env("ORCH_FAIL_POINT", point);
        }
        let output = cmd.output().unwrap();
        (out.clone(), output)
    };
    let (first, out) = run("t-prune-1", None, None);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
    let (second, out) = run("t-prune-2", Some(&first), Some("integrated"));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&out.status), Some(9));
    let (third, out) = run("t-prune-3", Some(&second), None);
    let last = Run::from_output(&third, out);
    last.expect_code(4);

    let mut branches = fx.orch_branches();
    branches.sort();
    assert_eq!(branches, ["orch/t-prune-1/a", "orch/t-prune-3/b"], "{:#}", last.report);
    assert_eq!(fx.show("orch/t-prune-3/b", "b.txt"), "b\nb\nb\n", "the last attempt holds the earlier ones");
    assert_eq!(last.agent("a")["branch"], "orch/t-prune-1/a");
    let mut pruned: Vec<&str> =
        last.report["integration"]["pruned"].as_array().unwrap().iter().filter_map(|b| b.as_str()).collect();
    pruned.sort();
    assert_eq!(pruned, ["orch/t-prune-1/b", "orch/t-prune-2/b"]);
    assert_eq!(report(&second)["status"], "interrupted");
}
