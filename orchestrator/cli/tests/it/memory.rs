//! An agent's memory limit (4 GiB, the default) holds for the agent, not per process:
//! three processes of one agent, each well under the limit, grow until together they
//! would hold 4.9 GiB. From outside, the test samples the resident memory of those
//! processes and checks their sum never went far past the limit (root: the agent's
//! cgroup; a normal user: a delegated cgroup where `sudo -n` can make one, else the
//! tool host's watch of the total, which says once why). `.ci/as-user.sh` runs it as a
//! normal user with and without passwordless sudo.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::Fixture;

const LIMIT: u64 = 4 << 30;
/// What a bound checked every 100 ms may overshoot by (three processes adding 128 MiB
/// every 50 ms), plus the sampling here.
const SLACK: u64 = 768 << 20;
const MARKER: &str = "memhog-5531";

const WORKFLOW: &str = r#"
version: 1
name: memory
defaults:
  tools: [Bash]
  sandbox: { backend: landlock }
  limits: { max_turns: 3, timeout: 2m }
agents:
  a: { prompt: Work. }
integrate: branches
"#;

/// Resident bytes of the processes whose command line holds [`MARKER`].
fn held() -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains(MARKER) {
            continue;
        }
        let statm = std::fs::read_to_string(entry.path().join("statm")).unwrap_or_default();
        let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
        total += pages * 4096;
    }
    total
}

#[test]
fn several_processes_of_one_agent_stay_within_its_memory_limit() {
    let fx = Fixture::new("t-memory", &[("a.txt", "a\n")]);
    let hog = format!(
        "python3 -c 'import time\nl = []\nfor _ in range(13):\n    l.append(bytearray(128 << 20)); time.sleep(0.05)\ntime.sleep(4)' {MARKER}"
    );
    let command = format!("for i in 1 2 3; do {hog} & done; wait; echo hogs-done");
    let script = format!(
        "version: 1\nagents:\n  a:\n    - tool_calls: [{{name: Bash, input: {{command: {command:?}}}}}]\n    - text: done\n  synthesis:\n    - text: done\n"
    );
    let peak = Arc::new(Mutex::new(0u64));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::SeqCst) {
                let now = held();
                let mut peak = peak.lock().unwrap();
                *peak = (*peak).max(now);
                drop(peak);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let run = fx.run(WORKFLOW, &script, &[]);
    done.store(true, Ordering::SeqCst);
    sampler.join().unwrap();
    let peak = *peak.lock().unwrap();
    assert_eq!(run.tool_results("a").len(), 1, "{}", run.stderr);
    // They did get going (a sandbox that kills them at once proves nothing).
    assert!(peak > 2 << 30, "the processes never held much ({} MiB):\n{}", peak >> 20, run.stderr);
    assert!(
        peak <= LIMIT + SLACK,
        "the agent's processes held {} MiB together under a limit of {} MiB:\n{}",
        peak >> 20,
        LIMIT >> 20,
        run.stderr
    );
    // Root has its cgroup; a normal user with passwordless sudo gets a delegated one;
    // without it, orch says so exactly once.
    let warnings = run.stderr.matches("memory limits hold per process").count();
    let sudo = std::process::Command::new("sudo")
        .args(["-n", "true"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let expected = usize::from(!nix::unistd::geteuid().is_root() && !sudo);
    assert_eq!(warnings, expected, "sudo: {sudo}\n{}", run.stderr);
}
