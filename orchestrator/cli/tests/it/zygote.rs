//! Tool hosts forked from the zygote, through the real binary, checked in the process
//! table while a run works: each landlock host of `orch run` is a child of the
//! coordinator forked from one `orch __tool-host-zygote` (its command line is the
//! zygote's), the zygote is gone when the run is, and `ORCH_TOOL_HOST_ZYGOTE=0` execs
//! every host instead.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Fixture, Run};

const TWO_AGENTS: &str = r#"
version: 1
name: zygote
defaults:
  tools: [Bash]
  sandbox: { backend: landlock }
  limits: { max_turns: 3, timeout: 1m }
agents:
  a: { prompt: Work. }
  b: { prompt: Work. }
integrate: branches
"#;

const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "echo $PPID > host.pid; sleep 2"}}]
    - text: done
  b:
    - tool_calls: [{name: Bash, input: {command: "echo $PPID > host.pid; sleep 2"}}]
    - text: done
  synthesis:
    - text: both done
"#;

/// `(parent pid, command line)` of process `pid`.
fn process(pid: u32) -> Option<(u32, String)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let parent = status.lines().find_map(|l| l.strip_prefix("PPid:"))?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    Some((parent, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end().to_owned()))
}

/// The children of `parent` whose command line ends with `suffix`.
fn children_running(parent: u32, suffix: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| process(*pid).is_some_and(|(p, cmd)| p == parent && cmd.ends_with(suffix)))
        .collect()
}

/// Runs the two agents; while both sleep, returns the run's pid, the hosts' pids and
/// the run's outcome.
fn run_and_look(fx: &Fixture, zygote: bool) -> (u32, Vec<u32>, Vec<u32>, Run) {
    let mut command = fx.command(TWO_AGENTS, SCRIPT);
    if !zygote {
        command.env("ORCH_TOOL_HOST_ZYGOTE", "0");
    }
    let mut child = command.stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let orch = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let hosts: Vec<u32> = loop {
        let pids: Vec<u32> = ["a", "b"]
            .iter()
            .filter_map(|a| std::fs::read_to_string(fx.out.join(format!("worktrees/{a}/host.pid"))).ok())
            .filter_map(|t| t.trim().parse().ok())
            .collect();
        if pids.len() == 2 {
            break pids;
        }
        assert!(Instant::now() < deadline, "the agents never started their commands");
        std::thread::sleep(Duration::from_millis(20));
    };
    let zygotes = children_running(orch, "__tool-host-zygote");
    let host_lines: Vec<(u32, String)> = hosts.iter().map(|h| process(*h).expect("the host is running")).collect();
    for (parent, _) in &host_lines {
        assert_eq!(*parent, orch, "a tool host is not the coordinator's child: {host_lines:?}");
    }
    if zygote {
        assert!(host_lines.iter().all(|(_, cmd)| cmd.ends_with("__tool-host-zygote")), "{host_lines:?}");
    } else {
        assert!(host_lines.iter().all(|(_, cmd)| cmd.contains("__tool-host --cwd")), "{host_lines:?}");
    }
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() });
    let zygotes = zygotes.into_iter().filter(|z| !hosts.contains(z)).collect();
    (orch, hosts, zygotes, run)
}

#[test]
fn the_hosts_of_a_run_are_forked_from_one_zygote_that_ends_with_the_run() {
    let fx = Fixture::new("t-zygote", &[("a.txt", "a\n")]);
    let (_, hosts, zygotes, run) = run_and_look(&fx, true);
    run.expect_code(0);
    assert_eq!(zygotes.len(), 1, "one zygote, besides the hosts: {zygotes:?} (hosts {hosts:?})");
    for a in ["a", "b"] {
        assert_eq!(run.agent(a)["status"], "succeeded", "{:#}", run.agent(a));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while process(zygotes[0]).is_some_and(|(_, cmd)| cmd.ends_with("__tool-host-zygote")) {
        assert!(Instant::now() < deadline, "the zygote {} outlived its run", zygotes[0]);
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn orch_tool_host_zygote_0_execs_every_host() {
    let fx = Fixture::new("t-zygote-off", &[("a.txt", "a\n")]);
    let (_, _, zygotes, run) = run_and_look(&fx, false);
    run.expect_code(0);
    assert_eq!(zygotes, Vec::<u32>::new());
}

#[test]
fn a_zygote_killed_mid_run_leaves_later_hosts_to_exec() {
    let fx = Fixture::new("t-zygote-dead", &[("a.txt", "a\n")]);
    let workflow = TWO_AGENTS.replace("name: zygote\n", "name: zygote\nconcurrency: 1\n");
    let script = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "echo $PPID > host.pid; sleep 2"}}]
    - text: done
  b:
    - tool_calls: [{name: Bash, input: {command: "echo $PPID > host.pid; sleep 1"}}]
    - text: done
  synthesis:
    - text: both done
"#;
    let mut child = fx.command(&workflow, script).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let orch = child.id();
    let deadline = Instant::now() + Duration::from_secs(30);
    let host: u32 = loop {
        if let Some(pid) =
            std::fs::read_to_string(fx.out.join("worktrees/a/host.pid")).ok().and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "agent a never started its command");
        std::thread::sleep(Duration::from_millis(20));
    };
    let zygotes: Vec<u32> = children_running(orch, "__tool-host-zygote").into_iter().filter(|z| *z != host).collect();
    assert_eq!(zygotes.len(), 1, "{zygotes:?}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(zygotes[0] as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    // `b` starts after the zygote died: its host is exec'd.
    let b_host: u32 = loop {
        if let Some(pid) =
            std::fs::read_to_string(fx.out.join("worktrees/b/host.pid")).ok().and_then(|t| t.trim().parse().ok())
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "agent b never started its command");
        std::thread::sleep(Duration::from_millis(20));
    };
    let (parent, cmdline) = process(b_host).expect("b's host runs");
    assert_eq!(parent, orch);
    assert!(cmdline.contains("__tool-host --cwd"), "{cmdline}");
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    let run = Run::from_output(&fx.out, std::process::Output { status, stdout: Vec::new(), stderr: stderr.into() });
    run.expect_code(0);
    for a in ["a", "b"] {
        assert_eq!(run.agent(a)["status"], "succeeded", "{:#}", run.agent(a));
    }
}
