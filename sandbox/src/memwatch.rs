//! A per-agent memory bound where no cgroup gives one (a normal user without a
//! delegated cgroup, see [`crate::cgroup::delegate`]): rlimits cap each process, so
//! several processes of one agent could together hold many times the limit. The tool
//! host watches the sum instead: [`over`] adds up the resident memory of every process
//! below it, and past the limit the host kills them all ([`crate::reaper`]), as the
//! cgroup's OOM killer would. It is a bound checked every [`INTERVAL`], not a hard cap:
//! an agent can overshoot for that long.

use std::time::Duration;

/// How often the host measures its processes.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// The resident bytes of the calling process's descendants, when they pass `limit`
/// (`None` while they stay within it).
pub fn over(limit: u64) -> Option<u64> {
    let page = page_size();
    let mut total = 0u64;
    let mut stack = children(std::process::id());
    while let Some(pid) = stack.pop() {
        total = total.saturating_add(resident_pages(pid).saturating_mul(page));
        stack.extend(children(pid));
    }
    (total > limit).then_some(total)
}

/// The children of every thread of `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    let mut found = Vec::new();
    for task in tasks.flatten() {
        if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
            found.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
        }
    }
    found
}

/// Field 2 of `/proc/<pid>/statm`: resident pages (0 for a process gone meanwhile).
fn resident_pages(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .ok()
        .and_then(|s| s.split_whitespace().nth(1).and_then(|p| p.parse().ok()))
        .unwrap_or(0)
}

#[allow(unsafe_code)] // sysconf takes and returns integers only.
fn page_size() -> u64 {
    // SAFETY: a plain query of a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_the_children_hold() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exec python3 -c \"import time; b = bytearray(64 << 20); time.sleep(5)\""])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while over(32 << 20).is_none() {
            assert!(std::time::Instant::now() < deadline, "64 MiB held by a child were never counted");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(over(1 << 40), None);
        let _ = child.kill();
        let _ = child.wait();
    }
}
