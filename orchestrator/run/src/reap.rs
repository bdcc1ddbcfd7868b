//! Nothing outlives its agent, even when its tool host dies. The coordinator is a child
//! subreaper ([`become_subreaper`]): a process whose tool host died (crash, OOM kill, a
//! command that killed it) is re-parented to the coordinator, not to init. Each tool
//! host starts its own session ([`crate::host::confine_self`]), so what it leaves
//! behind can never join the coordinator's session: a child of the coordinator outside
//! its session that is not a live tool host ([`register`]) is an orphan of a dead host.
//!
//! [`kill_orphans`] kills such orphans with everything below them and reaps them. An
//! agent runs it after its tool host stopped and before the coordinator touches its
//! worktree; [`spawn_reaper`] runs it on every `SIGCHLD` and once a second for the
//! rest of the run. While a tool host starts (its pid is not known until it is ready)
//! no pass runs: [`starting`] holds passes off.
//!
//! Reaping waits on the orphans' own pids, never on `-1`, so tokio keeps the exit
//! statuses of the children it spawned.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;
use tokio::sync::{OwnedRwLockReadGuard, RwLock};
use tokio_util::sync::CancellationToken;

/// How long one pass keeps killing a fork-and-exit chain before it gives up.
const PASS_BUDGET: Duration = Duration::from_secs(2);

/// The pids of the live tool hosts this coordinator started.
static HOSTS: LazyLock<Mutex<BTreeSet<i32>>> = LazyLock::new(|| Mutex::new(BTreeSet::new()));
/// How many processes passes killed, by the session (the dead tool host's pid) of the
/// orphan they were found under; taken by [`kill_orphans`].
static KILLED: LazyLock<Mutex<BTreeMap<i32, usize>>> = LazyLock::new(|| Mutex::new(BTreeMap::new()));
/// Held shared while a tool host starts, exclusively by a pass.
static STARTING: LazyLock<Arc<RwLock<()>>> = LazyLock::new(|| Arc::new(RwLock::new(())));

fn hosts() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    HOSTS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Makes this process a child subreaper, so orphans of its tool hosts come to it.
pub fn become_subreaper() -> std::io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)
}

/// Holds kill passes off while a tool host starts; drop it once the host is
/// [`register`]ed (or failed to start).
pub async fn starting() -> OwnedRwLockReadGuard<()> {
    STARTING.clone().read_owned().await
}

/// A live tool host: its pid stays known to the reaper until this is dropped (after the
/// host has exited and been reaped).
#[derive(Debug)]
pub struct Registered(Option<i32>);

impl Drop for Registered {
    fn drop(&mut self) {
        if let Some(pid) = self.0 {
            hosts().remove(&pid);
        }
    }
}

/// Marks `pid` (a tool host this process spawned; `None` for one that is not its child)
/// as a live tool host.
pub fn register(pid: Option<u32>) -> Registered {
    let pid = pid.and_then(|p| i32::try_from(p).ok());
    if let Some(pid) = pid {
        hosts().insert(pid);
    }
    Registered(pid)
}

/// `(pid, session)` of a process, from `/proc/<pid>/stat`.
fn session_of(pid: i32) -> Option<i32> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    // state ppid pgrp session ...
    rest.split_whitespace().nth(3)?.parse().ok()
}

/// The direct children of this process.
fn own_children() -> Vec<i32> {
    let me = std::process::id();
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{me}/task")) else { return Vec::new() };
    let mut found = BTreeSet::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(text.split_whitespace().filter_map(|p| p.parse::<i32>().ok()));
        }
    }
    found.into_iter().collect()
}

/// This process's children that are orphans of a dead tool host: outside its session
/// and not a live tool host.
fn orphans() -> Vec<i32> {
    let Some(mine) = session_of(std::process::id() as i32) else { return Vec::new() };
    let live = hosts().clone();
    own_children()
        .into_iter()
        .filter(|pid| !live.contains(pid) && session_of(*pid).is_some_and(|s| s != mine))
        .collect()
}

/// Kills every orphan of a dead tool host, with all its descendants, and reaps it.
/// Waits for tool hosts that are starting. Returns how many processes this pass or an
/// earlier one killed in the session of the tool host `host` (all of them but those
/// that started a session of their own).
pub async fn kill_orphans(host: Option<u32>) -> usize {
    {
        let _pass = STARTING.write().await;
        let _ = tokio::task::spawn_blocking(kill_orphans_now).await;
    }
    let host = host.and_then(|p| i32::try_from(p).ok());
    host.and_then(|h| KILLED.lock().unwrap_or_else(PoisonError::into_inner).remove(&h)).unwrap_or(0)
}

/// One pass, if no tool host is starting; for the periodic reaper.
fn try_kill_orphans() -> usize {
    match STARTING.try_write() {
        Ok(_pass) => kill_orphans_now(),
        Err(_) => 0,
    }
}

fn kill_orphans_now() -> usize {
    let started = Instant::now();
    let mut killed = 0;
    loop {
        let found = orphans();
        if found.is_empty() || started.elapsed() > PASS_BUDGET {
            break;
        }
        for pid in found {
            let session = session_of(pid).unwrap_or(pid);
            let mut here = orch_sandbox::reaper::kill_tree(pid, &[]);
            if kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
                here += 1;
            }
            killed += here;
            *KILLED.lock().unwrap_or_else(PoisonError::into_inner).entry(session).or_default() += here;
            // It is our child: reap it (SIGKILL ends it at once; do not block on one
            // stuck in the kernel).
            for _ in 0..50 {
                match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                    Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(1)),
                    _ => break,
                }
            }
        }
    }
    if killed > 0 {
        tracing::info!(killed, "killed the processes a dead tool host left behind");
    }
    killed
}

/// The coordinator's last step before it exits: stops the tool host zygote and waits
/// for it, then kills and reaps whatever a dead tool host left. No process of orch's
/// outlives it, so none is re-parented out of its tree (to a subreaper above it, or
/// init).
pub fn at_exit() {
    crate::zygote::stop();
    kill_orphans_now();
}

/// Runs kill passes on every `SIGCHLD` and every second until `stop` is cancelled.
pub fn spawn_reaper(stop: CancellationToken) {
    let mut child = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()).ok();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = tick.tick() => {}
                Some(()) = async { match child.as_mut() { Some(c) => c.recv().await, None => None } } => {}
            }
            let _ = tokio::task::spawn_blocking(try_kill_orphans).await;
        }
    });
}

/// The prefix of the reason of an agent whose tool host died.
const DIED: &str = "its tool host died";

/// Marks the agent of `report` failed because its tool host died (`how`, e.g. "the
/// tool host exited (signal 9, SIGKILL)"): whatever its loop concluded, it was cut
/// short.
pub fn host_died(report: &mut crate::run::report::AgentReport, how: String) {
    let killed = match report.killed_processes {
        0 => String::new(),
        n => format!("; {n} processes it left behind were killed"),
    };
    let before =
        report.reason.take().filter(|r| !r.is_empty()).map(|r| format!(" (the loop: {r})")).unwrap_or_default();
    report.status = crate::run::report::AgentStatus::Failed;
    report.reason = Some(format!("{DIED}: {how}{killed}; the agent ended{before}"));
}

/// An agent whose tool host died but whose work was committed is `partial`.
pub fn partial_if_work(report: &mut crate::run::report::AgentReport) {
    if report.status == crate::run::report::AgentStatus::Failed
        && report.commit.is_some()
        && report.reason.as_deref().is_some_and(|r| r.starts_with(DIED))
    {
        report.status = crate::run::report::AgentStatus::Partial;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_host_fails_its_agent_or_makes_it_partial_when_it_committed() {
        use crate::run::report::{AgentReport, AgentStatus};
        let mut report = AgentReport::empty("a", "a", None, AgentStatus::Succeeded, String::new());
        report.killed_processes = 3;
        host_died(&mut report, "the tool host exited (signal 9, SIGKILL)".into());
        assert_eq!(report.status, AgentStatus::Failed);
        let reason = report.reason.clone().unwrap();
        assert!(reason.starts_with("its tool host died: the tool host exited (signal 9"), "{reason}");
        assert!(reason.contains("3 processes"), "{reason}");
        partial_if_work(&mut report);
        assert_eq!(report.status, AgentStatus::Failed, "no commit, no work");
        report.commit = Some("abc".into());
        partial_if_work(&mut report);
        assert_eq!(report.status, AgentStatus::Partial);
        // Another failure with a commit stays failed.
        let mut other = AgentReport::empty("b", "b", None, AgentStatus::Failed, "cannot commit".into());
        other.commit = Some("abc".into());
        partial_if_work(&mut other);
        assert_eq!(other.status, AgentStatus::Failed);
    }

    #[test]
    fn reads_its_own_session() {
        let mine = session_of(std::process::id() as i32).unwrap();
        assert_eq!(mine, nix::unistd::getsid(None).unwrap().as_raw());
    }

    #[test]
    fn a_child_in_this_session_is_not_an_orphan() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(own_children().contains(&pid));
        assert!(!orphans().contains(&pid));
        let _ = child.kill();
        let _ = child.wait();
    }
}
