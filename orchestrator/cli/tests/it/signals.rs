//! The signal suite (issue 18): whatever signals come, every agent's work ends up
//! committed on its branch in the user's repository. Agents of the scripted model
//! write a file, then sit in `sleep`; then the signals come: `timeout -s TERM` (the
//! process, then its group), SIGINT then SIGTERM 0.1 s apart, three signals, SIGHUP, and
//! SIGKILL followed by `orch recover` or `orch run --resume`. Each case checks
//! `git -C <user repo> show orch/<run>/<agent>:work.txt` for every agent, the exit
//! code, the report and that nothing is left running.

use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::support::{Fixture, Run, git, git_cmd, orch, processes_left};

const AGENTS: [&str; 4] = ["a1", "a2", "a3", "a4"];

const WORKFLOW: &str = r#"
version: 1
name: signals
concurrency: 5
defaults:
  tools: [Bash]
  limits: { checkpoint_every: 1 }
agents:
  a1: { prompt: Work. }
  a2: { prompt: Work. }
  a3: { prompt: Work. }
  a4: { prompt: Work. }
  quick: { prompt: Finish at once. }
"#;

/// Every agent writes `work.txt`, checkpoints it at its second turn, then sleeps;
/// `quick` writes `quick.txt` and finishes.
fn script() -> String {
    let mut s = String::from(
        "version: 1\nagents:\n  quick:\n    - tool_calls: [{name: Bash, input: {command: \"echo q > quick.txt\"}}]\n    \
         - text: done quickly\n",
    );
    for a in AGENTS {
        s.push_str(&format!(
            "  {a}:\n    - tool_calls: [{{name: Bash, input: {{command: \"echo {a} > work.txt\"}}}}]\n    \
             - tool_calls: [{{name: Bash, input: {{command: \"echo $$ > sleeper.pid; sleep 30\"}}}}]\n    \
             - text: never\n"
        ));
    }
    s
}

/// Starts the run in its own process group and waits until every agent sleeps.
fn start(fx: &Fixture, wrap: Option<&[&str]>) -> Child {
    let mut cmd = fx.command(WORKFLOW, &script());
    if let Some(prefix) = wrap {
        let inner = cmd;
        let mut outer = std::process::Command::new(prefix[0]);
        outer.args(&prefix[1..]).arg(inner.get_program()).args(inner.get_args());
        outer.current_dir(fx.dir.path());
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => outer.env(k, v),
                None => outer.env_remove(k),
            };
        }
        cmd = outer;
    }
    let child = cmd.process_group(0).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let quick_done = || {
        std::fs::read_to_string(fx.out.join("report.json")).is_ok_and(|r| {
            serde_json::from_str::<serde_json::Value>(&r).is_ok_and(|r| {
                r["agents"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|a| a["id"] == "quick" && a["status"] == "succeeded"))
            })
        })
    };
    while !quick_done() || !AGENTS.iter().all(|a| fx.out.join(format!("worktrees/{a}/sleeper.pid")).exists()) {
        assert!(Instant::now() < deadline, "the agents never got to their sleep");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

fn finish(fx: &Fixture, mut child: Child) -> Run {
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() })
}

/// Every agent's file is on its branch of run `run_id` in the user's repository.
#[track_caller]
fn all_work_on_branches(repo: &Path, run_id: &str) {
    assert_eq!(git(repo, &["show", &format!("orch/{run_id}/quick:quick.txt")]), "q\n");
    for a in AGENTS {
        let branch = format!("orch/{run_id}/{a}");
        assert_eq!(git(repo, &["show", &format!("{branch}:work.txt")]), format!("{a}\n"), "{branch}");
    }
}

#[track_caller]
fn interrupted_report(run: &Run, code: i32, signal: &str, group: bool) {
    run.expect_code(code);
    assert_eq!(run.report["status"], "interrupted", "{:#}", run.report);
    assert_eq!(run.report["exit_code"], code);
    assert!(run.report["stopped"].as_str().unwrap_or_default().contains(signal), "{:#}", run.report);
    assert!(run.report.get("partial").is_none_or(|p| p == false), "{:#}", run.report);
    assert_eq!(run.agent("quick")["status"], "succeeded");
    for a in AGENTS {
        // A signal to the whole group also ends the agents' `sleep`: an agent may then
        // finish its last turn before it sees the cancellation.
        let status = run.agent(a)["status"].as_str().unwrap_or_default().to_owned();
        assert!(status == "cancelled" || (group && status == "succeeded"), "{:#}", run.agent(a));
        assert!(run.agent(a)["commit"].is_string(), "{:#}", run.agent(a));
    }
}

fn signal_at(pid: u32, signal: Signal) {
    kill(Pid::from_raw(pid as i32), signal).unwrap();
}

#[test]
fn timeout_signalling_process_and_group_loses_no_commit() {
    let fx = Fixture::new("t-sig-timeout", &[("a.txt", "a\n")]);
    let child = start(&fx, None);
    let pid = child.id();
    // What coreutils' `timeout -s TERM` does: the child, then the whole group.
    signal_at(pid, Signal::SIGTERM);
    killpg(Pid::from_raw(pid as i32), Signal::SIGTERM).unwrap();
    let run = finish(&fx, child);
    interrupted_report(&run, 143, "SIGTERM", true);
    all_work_on_branches(&fx.repo, &fx.run_id);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn coreutils_timeout_loses_no_commit() {
    let fx = Fixture::new("t-sig-coreutils", &[("a.txt", "a\n")]);
    let child = start(&fx, Some(&["timeout", "-s", "TERM", "8"]));
    let run = finish(&fx, child);
    // `timeout` exits 124 when it had to signal its command.
    assert_eq!(run.code, 124, "{}", run.stderr);
    assert_eq!(run.report["exit_code"], 143, "{:#}", run.report);
    all_work_on_branches(&fx.repo, &fx.run_id);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn sigint_then_sigterm_a_tenth_of_a_second_apart_loses_no_commit() {
    let fx = Fixture::new("t-sig-int-term", &[("a.txt", "a\n")]);
    let child = start(&fx, None);
    signal_at(child.id(), Signal::SIGINT);
    std::thread::sleep(Duration::from_millis(100));
    signal_at(child.id(), Signal::SIGTERM);
    let run = finish(&fx, child);
    interrupted_report(&run, 130, "SIGINT", false);
    all_work_on_branches(&fx.repo, &fx.run_id);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn three_signals_lose_no_commit() {
    let fx = Fixture::new("t-sig-three", &[("a.txt", "a\n")]);
    let child = start(&fx, None);
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGTERM] {
        signal_at(child.id(), signal);
        std::thread::sleep(Duration::from_millis(50));
    }
    let run = finish(&fx, child);
    interrupted_report(&run, 143, "SIGTERM", false);
    all_work_on_branches(&fx.repo, &fx.run_id);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

/// A closed terminal: SIGHUP is handled as SIGTERM (grace, commits, `interrupted`, 143).
#[test]
fn sighup_is_handled_as_sigterm() {
    let fx = Fixture::new("t-sig-hup", &[("a.txt", "a\n")]);
    let child = start(&fx, None);
    signal_at(child.id(), Signal::SIGHUP);
    let run = finish(&fx, child);
    interrupted_report(&run, 143, "SIGHUP", false);
    all_work_on_branches(&fx.repo, &fx.run_id);
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

/// SIGKILL: nothing runs in orch any more. The live report says `running`, and the
/// checkpoints are on the branches of the run clone.
fn killed(fx: &Fixture) -> Run {
    let child = start(fx, None);
    // Checkpoints are committed beside the turn that starts: wait for them to land.
    let clone = fx.out.join("repo.git");
    let deadline = Instant::now() + Duration::from_secs(20);
    let checkpointed = |a: &str| {
        git_cmd(&clone)
            .args(["cat-file", "-e", &format!("orch/{}/{a}:work.txt", fx.run_id)])
            .status()
            .is_ok_and(|s| s.success())
    };
    while !AGENTS.iter().all(|a| checkpointed(a)) {
        assert!(Instant::now() < deadline, "no checkpoint was committed");
        std::thread::sleep(Duration::from_millis(20));
    }
    signal_at(child.id(), Signal::SIGKILL);
    let run = finish(fx, child);
    assert_eq!(run.code, -1, "{}", run.stderr);
    assert_eq!(run.report["status"], "running", "{:#}", run.report);
    assert_eq!(run.report["exit_code"], 137);
    assert_eq!(run.agent("quick")["status"], "succeeded");
    for a in AGENTS {
        assert_eq!(run.agent(a)["status"], "running");
        let branch = format!("orch/{}/{a}", fx.run_id);
        assert_eq!(git(&clone, &["show", &format!("{branch}:work.txt")]), format!("{a}\n"), "checkpoint of {a}");
    }
    run
}

#[test]
fn sigkill_then_recover_commits_fetches_and_cleans() {
    let fx = Fixture::new("t-sig-recover", &[("a.txt", "a\n")]);
    killed(&fx);
    // Whatever page the killed run left is stale: recover writes its own.
    let _ = std::fs::remove_file(fx.out.join("report.html"));
    // The sleeper in a1's worktree writes after the checkpoint: recover commits it.
    let out = orch().arg("recover").arg(&fx.out).output().unwrap();
    let run = Run::from_output(&fx.out, out);
    run.expect_code(0);
    assert_eq!(run.report["status"], "interrupted");
    assert_eq!(run.report["exit_code"], 137);
    for a in AGENTS {
        assert_eq!(run.agent(a)["status"], "cancelled", "{:#}", run.agent(a));
    }
    let page = std::fs::read_to_string(fx.out.join("report.html")).expect("recover writes report.html");
    assert!(page.contains("interrupted") && AGENTS.iter().all(|a| page.contains(a)), "{page}");
    all_work_on_branches(&fx.repo, &fx.run_id);
    for a in AGENTS {
        let pid = git(&fx.repo, &["show", &format!("orch/{}/{a}:sleeper.pid", fx.run_id)]);
        assert!(!pid.trim().is_empty());
    }
    assert!(!fx.out.join("worktrees").join("a1").exists(), "the worktree is left");
    assert!(!fx.out.join("repo.git").exists(), "the run clone is left");
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}

#[test]
fn sigkill_then_resume_carries_finished_agents_and_restarts_from_checkpoints() {
    let fx = Fixture::new("t-sig-resume", &[("a.txt", "a\n")]);
    killed(&fx);
    let resumed = fx.dir.path().join("out2");
    let mut script = String::from("version: 1\nagents:\n");
    for a in AGENTS {
        script.push_str(&format!(
            "  {a}:\n    - tool_calls: [{{name: Bash, input: {{command: \"cat work.txt; echo again >> work.txt\"}}}}]\n    \
             - expect: {{contains: \"{a}\"}}\n      text: resumed\n"
        ));
    }
    script.push_str("  synthesis:\n    - text: all resumed\n");
    let workflow = fx.write("workflow.yaml", WORKFLOW);
    let script = fx.write("script2.yaml", &script);
    let out = orch()
        .current_dir(fx.dir.path())
        .arg("run")
        .arg(&workflow)
        .args(["--provider", "scripted", "--script"])
        .arg(&script)
        .arg("--repo")
        .arg(&fx.repo)
        .arg("--out")
        .arg(&resumed)
        .args(["--run-id", "t-sig-resume2", "--resume"])
        .arg(&fx.out)
        .output()
        .unwrap();
    let run = Run::from_output(&resumed, out);
    run.expect_code(0);
    // The first run was recovered: its work is in the repository, `quick` on its own
    // branch, the others' in the branches of the rerun, which superseded theirs.
    assert_eq!(git(&fx.repo, &["show", &format!("orch/{}/quick:quick.txt", fx.run_id)]), "q\n");
    let pruned = run.report["integration"]["pruned"].as_array().cloned().unwrap_or_default();
    for a in AGENTS {
        let old = format!("orch/{}/{a}", fx.run_id);
        assert!(git(&fx.repo, &["branch", "--list", &old]).trim().is_empty(), "{old} was not pruned");
        assert!(pruned.iter().any(|b| *b == old), "{old} is not in integration.pruned: {pruned:?}");
    }
    // `quick` had finished: carried over with its branch, not run again.
    let quick = run.agent("quick");
    assert_eq!(quick["status"], "succeeded");
    assert_eq!(quick["carried_over"], true, "{quick:#}");
    assert_eq!(quick["branch"], format!("orch/{}/quick", fx.run_id));
    assert!(!run.transcript_text("a1").is_empty());
    assert!(git(&fx.repo, &["branch", "--list", "orch/t-sig-resume2/quick"]).trim().is_empty());
    for a in AGENTS {
        let agent = run.agent(a);
        assert_eq!(agent["status"], "succeeded", "{agent:#}");
        assert!(agent["resumed_from"].is_string(), "{agent:#}");
        let branch = format!("orch/t-sig-resume2/{a}");
        assert_eq!(git(&fx.repo, &["show", &format!("{branch}:work.txt")]), format!("{a}\nagain\n"), "{branch}");
    }
    assert_eq!(processes_left(fx.dir.path()), Vec::<String>::new());
}
