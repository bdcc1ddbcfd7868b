//! Killing what commands leave behind. A tool host is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`, set by [`crate::confine`]), so every process its commands
//! start stays its descendant, even one that called `setsid` and whose parent exited:
//! orphans are re-parented to the host, not to init. That makes "everything the
//! sandbox started" the host's descendants, which this module finds through
//! `/proc/<pid>/task/<tid>/children` (falling back to a scan of `/proc`), kills with
//! SIGKILL, and reaps.
//!
//! Reaping waits on the specific pids killed (`waitpid(pid)`), never `waitpid(-1)`,
//! which would steal the exit statuses of children tokio is waiting for. Adopted
//! processes that exit while a command still runs (a fork-and-exit chain) are reaped
//! continuously by [`reap_adopted`], which the tool host runs on every `SIGCHLD`
//! ([`crate::host::serve_stdio`]): it reaps only zombies that cannot be a child the
//! host spawned itself (those lead their own process group, or share the host's).
//! When the host stops, [`kill_descendants`] kills and reaps everything until the host
//! has no child left at all, so nothing it adopted survives it.
//!
//! The common case costs one system call: a process without children has no
//! descendants at all, and [`has_children`] asks the kernel that directly (`waitid`
//! with `WNOWAIT`, which reaps nothing), so a tool host whose command ended cleanly
//! does not walk `/proc` after it. Likewise [`reap_adopted`], on each `SIGCHLD`, first
//! asks whether any child is a zombie at all: usually the command's shell, whose exit
//! sent the signal, has been reaped by then.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{Id, WaitPidFlag, waitid, waitpid};
use nix::unistd::Pid;

/// How long a kill pass may keep finding and reaping processes.
const PASS_BUDGET: Duration = Duration::from_millis(500);

/// One process, as `/proc/<pid>/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proc {
    pub pid: i32,
    pub ppid: i32,
    pub pgid: i32,
    /// Exited and not yet reaped.
    pub zombie: bool,
}

fn stat(pid: i32) -> Option<Proc> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ..."; comm may hold spaces and parentheses.
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(Proc { pid, ppid, pgid, zombie: state == "Z" || state == "X" })
}

/// The direct children of `pid`, from each of its threads' `children` file.
fn children(pid: i32) -> Option<Vec<i32>> {
    let mut found = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let path = task.ok()?.path().join("children");
        let text = std::fs::read_to_string(path).ok()?;
        found.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
    }
    Some(found)
}

/// Whether this process has any child, running or exited and not yet reaped. Reaps
/// nothing (`WNOWAIT`), so exit statuses others wait for stay theirs. Answers `true`
/// when the kernel does not say (an error other than ECHILD).
pub fn has_children() -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(waitid(Id::All, flags), Err(Errno::ECHILD))
}

/// Whether some child of this process has exited and is not yet reaped. Reaps nothing
/// (`WNOWAIT`); answers `true` when the kernel does not say.
fn has_zombie() -> bool {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(waitid(Id::All, flags), Err(Errno::ECHILD) | Ok(nix::sys::wait::WaitStatus::StillAlive))
}

/// Every descendant of `root`, parents before their children.
pub fn descendants(root: i32) -> Vec<Proc> {
    match descendants_by_children(root) {
        Some(found) => found,
        None => descendants_by_scan(root),
    }
}

fn descendants_by_children(root: i32) -> Option<Vec<Proc>> {
    let mut found = Vec::new();
    let mut queue = vec![root];
    let mut seen = BTreeSet::new();
    while let Some(pid) = queue.pop() {
        for child in children(pid)? {
            if seen.insert(child)
                && let Some(p) = stat(child)
            {
                found.push(p);
                queue.push(child);
            }
        }
    }
    Some(found)
}

fn descendants_by_scan(root: i32) -> Vec<Proc> {
    let all: Vec<Proc> = std::fs::read_dir("/proc")
        .map(|dir| dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()).filter_map(stat).collect())
        .unwrap_or_default();
    let mut found = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for p in all.iter().filter(|p| p.ppid == parent) {
            found.push(*p);
            parents.push(p.pid);
        }
    }
    found
}

/// Kills every descendant of this process that is not in one of `exclude_pgids` (the
/// process groups of commands still running), and reaps the ones that are its direct
/// children. Repeats until none is left (bounded), since a dying parent hands its
/// children to this process. Returns how many processes were killed.
pub fn kill_orphans(exclude_pgids: &[i32]) -> usize {
    kill_tree(std::process::id() as i32, exclude_pgids)
}

/// How long [`kill_descendants`] keeps killing before it gives up.
const SHUTDOWN_BUDGET: Duration = Duration::from_secs(3);

/// For host shutdown: kills every descendant of this process and reaps every child,
/// until the kernel says there is no child left (ECHILD): since the host is a child
/// subreaper, a process it started that still lives has the host as an ancestor, so no
/// child means no survivor. Kills each generation of a fork-and-exit chain as it is
/// handed over, without sleeping between passes. Uses `waitpid(-1)`: nothing is waited
/// for elsewhere any more. Returns how many processes were killed.
pub fn kill_descendants() -> usize {
    let me = std::process::id() as i32;
    let started = Instant::now();
    let mut killed = BTreeSet::new();
    loop {
        reap_all_exited();
        if !has_children() || started.elapsed() > SHUTDOWN_BUDGET {
            break;
        }
        for p in descendants(me) {
            if !p.zombie && kill(Pid::from_raw(p.pid), Signal::SIGKILL).is_ok() {
                killed.insert(p.pid);
            }
        }
        std::thread::yield_now();
    }
    killed.len()
}

/// Reaps every exited child of this process, whoever started it.
fn reap_all_exited() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == nix::sys::wait::WaitStatus::StillAlive {
            break;
        }
    }
}

/// Reaps the exited children of this process that it adopted (the subreaper) rather
/// than spawned: zombies in another process group than this process's, that do not
/// lead their group. Commands the host spawns lead their own group (`process_group(0)`)
/// and other helpers stay in the host's group, so their exit statuses stay for the code
/// that waits on them. An adopted process that made itself a group leader (`setsid`)
/// is left to the next [`kill_orphans`] pass; until then it counts against the
/// sandbox's process limit. Returns how many it reaped.
pub fn reap_adopted() -> usize {
    if !has_zombie() {
        // The common case on a command's SIGCHLD: its shell was reaped already.
        return 0;
    }
    let me = std::process::id() as i32;
    let my_group = nix::unistd::getpgrp().as_raw();
    let Some(kids) = children(me) else { return 0 };
    let mut reaped = 0;
    for p in kids.into_iter().filter_map(stat) {
        if p.zombie
            && p.pid != p.pgid
            && p.pgid != my_group
            && matches!(waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG)), Ok(s) if s != nix::sys::wait::WaitStatus::StillAlive)
        {
            reaped += 1;
        }
    }
    reaped
}

/// Kills every descendant of `root` outside `exclude_pgids`; reaps those that are this
/// process's children.
pub fn kill_tree(root: i32, exclude_pgids: &[i32]) -> usize {
    let me = std::process::id() as i32;
    if root == me && !has_children() {
        return 0;
    }
    let started = Instant::now();
    let mut killed = BTreeSet::new();
    loop {
        let targets: Vec<Proc> = descendants(root).into_iter().filter(|p| !exclude_pgids.contains(&p.pgid)).collect();
        if targets.is_empty() || started.elapsed() > PASS_BUDGET {
            break;
        }
        for p in &targets {
            if !p.zombie {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
                killed.insert(p.pid);
            }
        }
        for p in targets.iter().filter(|p| p.ppid == me) {
            // A SIGKILLed child exits at once; do not block on one stuck in the kernel.
            let _ = waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    killed.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_lines_with_odd_names() {
        let me = stat(std::process::id() as i32).unwrap();
        assert_eq!(me.pid, std::process::id() as i32);
        assert!(!me.zombie && me.ppid > 0);
    }

    #[test]
    fn has_children_sees_running_and_unreaped_children_and_reaps_nothing() {
        // Other tests of this binary may run children concurrently (one thread each):
        // check through a forked process of our own, which starts without any.
        let probe = |script: &str| {
            std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "reaper::tests::has_children_child", "--nocapture", "--include-ignored"])
                .env("HAS_CHILDREN_SCRIPT", script)
                .output()
                .unwrap()
        };
        let out = probe("run");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("checked: none, running, exited, reaped"), "{text}");
    }

    #[test]
    #[ignore = "run by has_children_sees_running_and_unreaped_children_and_reaps_nothing in a fresh process"]
    fn has_children_child() {
        if std::env::var_os("HAS_CHILDREN_SCRIPT").is_none() {
            return;
        }
        assert!(!has_children(), "a fresh test process has no children");
        assert!(!has_zombie());
        assert_eq!(kill_orphans(&[]), 0);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        assert!(has_children());
        assert!(!has_zombie(), "a running child is no zombie");
        let _ = child.kill();
        // Exited but not reaped: still a child, and WNOWAIT leaves its status to us.
        std::thread::sleep(Duration::from_millis(100));
        assert!(has_children());
        assert!(has_children());
        assert!(has_zombie() && has_zombie());
        let status = child.wait().unwrap();
        assert!(!status.success());
        assert!(!has_children());
        assert!(!has_zombie());
        println!("checked: none, running, exited, reaped");
    }

    #[test]
    fn finds_grandchildren_both_ways() {
        let mut child = std::process::Command::new("sh").args(["-c", "sleep 30 & sleep 30; :"]).spawn().unwrap();
        let pid = child.id() as i32;
        let mut found = Vec::new();
        for _ in 0..200 {
            found = descendants(pid);
            if found.len() >= 2 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(found.len() >= 2, "{found:?}");
        assert_eq!(descendants_by_scan(pid).len(), found.len());
        let mine: Vec<i32> = descendants(std::process::id() as i32).iter().map(|p| p.pid).collect();
        assert!(mine.contains(&pid));
        assert_eq!(kill_tree(pid, &[]), 2);
        let _ = child.kill();
        let _ = child.wait();
        assert!(descendants(pid).is_empty());
    }
}
