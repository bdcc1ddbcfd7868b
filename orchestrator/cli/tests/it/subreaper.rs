//! Every process of orch's stays in orch's tree and is waited for: the test process
//! makes itself a child subreaper (as CI runners and `tini` are), runs `orch run` with
//! agents that kill their own process group, try to kill their tool host, and have
//! their host killed from outside, and checks that it adopted no process of orch's
//! (the tool host zygote included) while the run went on or after it ended.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::Fixture;

const WORKFLOW: &str = r#"
version: 1
name: subreaper
defaults:
  tools: [Bash]
  sandbox: { backend: landlock }
  limits: { max_turns: 3, timeout: 1m }
agents:
  group: { prompt: Work. }
  host: { prompt: Work. }
  outside: { prompt: Work. }
integrate: branches
"#;

const SCRIPT: &str = r#"
version: 1
agents:
  group:
    - tool_calls: [{name: Bash, input: {command: "sleep 6181 & sleep 0.5; kill -9 0"}}]
    - text: done
  host:
    - tool_calls: [{name: Bash, input: {command: "sleep 6182 & sleep 0.5; kill -9 $PPID; kill -9 -$PPID; sleep 0.5"}}]
    - text: done
  outside:
    - tool_calls: [{name: Bash, input: {command: "setsid sleep 6183 >/dev/null 2>&1 & echo $PPID > host.pid; sleep 20"}}]
    - text: never
  synthesis:
    - text: all done
"#;

/// The children of this process (all threads), with their command lines.
fn my_children() -> BTreeMap<i32, String> {
    let mut found = BTreeMap::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        for pid in text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.insert(pid, String::from_utf8_lossy(&cmdline).replace('\0', " ").trim_end().to_owned());
        }
    }
    found
}

#[test]
fn no_process_of_orch_is_adopted_by_a_subreaper_above_it() {
    let fx = Fixture::new("t-subreaper", &[("a.txt", "a\n")]);
    // After the fixture: its own git may leave a detached `git maintenance` behind.
    nix::sys::prctl::set_child_subreaper(true).unwrap();
    let mut child = fx.command(WORKFLOW, SCRIPT).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let orch = child.id() as i32;

    // Watch this process's children while the run goes on: orch is the only one.
    let adopted: Arc<Mutex<BTreeMap<i32, String>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (adopted, done) = (Arc::clone(&adopted), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                for (pid, cmd) in my_children() {
                    if pid != orch {
                        adopted.lock().unwrap().entry(pid).or_insert(cmd);
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };

    // Kill the `outside` agent's tool host once its command runs.
    let pid_file = fx.out.join("worktrees/outside/host.pid");
    let deadline = Instant::now() + Duration::from_secs(30);
    let host: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok()) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the outside agent's command never started");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(200));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(host), nix::sys::signal::Signal::SIGKILL).unwrap();

    let status = child.wait().unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    // A process re-parented to us just before orch ended shows up a moment later.
    std::thread::sleep(Duration::from_millis(500));
    done.store(true, Ordering::SeqCst);
    watcher.join().unwrap();
    let mut adopted = adopted.lock().unwrap().clone();
    adopted.extend(my_children());
    // And whatever was adopted and died since: a zombie of ours.
    loop {
        match nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
            Ok(nix::sys::wait::WaitStatus::StillAlive) | Err(_) => break,
            Ok(status) => {
                if let Some(pid) = status.pid() {
                    adopted.entry(pid.as_raw()).or_insert_with(|| "(exited)".into());
                }
            }
        }
    }
    assert_eq!(adopted, BTreeMap::new(), "processes of orch were re-parented to the test:\n{stderr}");
    assert!(status.code().is_some(), "orch itself was killed: {status:?}\n{stderr}");
    assert!(stderr.contains("outside"), "{stderr}");
}
