//! Resource limits (setrlimit) from a policy's [`Limits`]. Limits are only ever lowered,
//! soft and hard together, so nothing inside can raise them again.
//!
//! - `RLIMIT_CPU`: CPU seconds of each process;
//! - `RLIMIT_FSIZE`: the largest file a process may write;
//! - `RLIMIT_NPROC`: processes and threads of the real uid. With a uid of its own (orch
//!   runs as root) the sandbox gets the policy's budget; as a normal user, whose other
//!   processes count too, it gets the tasks the user runs when the sandbox starts plus
//!   the budget ([`user_tasks`]), so a fork bomb stops after about that many forks. The
//!   limit is still the user's: agents of one run share it, so one agent's fork bomb
//!   can make forks fail in agents started before it (never in the coordinator, which
//!   has no such limit);
//! - `RLIMIT_DATA`: the memory fallback when no cgroup limits memory. It counts private
//!   writable mappings, not reserved address space, so V8 and Go still start;
//!   `RLIMIT_AS` is never used, because those runtimes reserve huge address spaces;
//! - `RLIMIT_CORE`: 0, so no core file lands in the worktree.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::error::SandboxError;
use crate::policy::Limits;

/// Who the processes of the sandbox count against, for `RLIMIT_NPROC`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nproc {
    /// No process limit (container backend: the container's pids limit applies).
    Unset,
    /// A uid of the sandbox's own: the budget alone.
    OwnUid,
    /// The user's uid, which already runs this many tasks: those plus the budget.
    SharedUid(u64),
}

/// The limits to set, as (resource, value).
pub fn plan(limits: &Limits, memory_in_cgroup: bool, nproc: Nproc) -> Vec<(Resource, u64)> {
    let mut plan = vec![(Resource::RLIMIT_CORE, 0)];
    if let Some(cpu) = limits.cpu_seconds {
        plan.push((Resource::RLIMIT_CPU, cpu));
    }
    if let Some(size) = limits.file_size_bytes {
        plan.push((Resource::RLIMIT_FSIZE, size));
    }
    match (limits.processes, nproc) {
        (Some(n), Nproc::OwnUid) => plan.push((Resource::RLIMIT_NPROC, n)),
        (Some(n), Nproc::SharedUid(running)) => plan.push((Resource::RLIMIT_NPROC, running.saturating_add(n))),
        (None, _) | (_, Nproc::Unset) => {}
    }
    if let (Some(bytes), false) = (limits.memory_bytes, memory_in_cgroup) {
        plan.push((Resource::RLIMIT_DATA, bytes));
    }
    plan
}

/// Sets each limit of `plan` (soft and hard), never above the current hard limit.
pub fn apply(plan: &[(Resource, u64)]) -> Result<(), SandboxError> {
    for (resource, want) in plan {
        let err = |e: nix::Error| SandboxError::Rlimit { resource: name(*resource), message: e.desc().to_string() };
        let (_, hard) = getrlimit(*resource).map_err(err)?;
        let value = (*want).min(hard);
        setrlimit(*resource, value, value).map_err(err)?;
    }
    Ok(())
}

/// Tasks (processes and threads) whose real uid is this process's, from the `Uid:` and
/// `Threads:` lines of every `/proc/<pid>/status`: what `RLIMIT_NPROC` counts.
pub fn user_tasks() -> u64 {
    let me = nix::unistd::getuid().as_raw().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    let mut tasks = 0u64;
    for entry in dir.flatten() {
        if !entry.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else { continue };
        let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
        let real_uid = field("Uid:").and_then(|v| v.split_whitespace().next());
        if real_uid == Some(me.as_str()) {
            tasks += field("Threads:").and_then(|v| v.parse().ok()).unwrap_or(1);
        }
    }
    tasks
}

fn name(resource: Resource) -> &'static str {
    match resource {
        Resource::RLIMIT_CPU => "RLIMIT_CPU",
        Resource::RLIMIT_FSIZE => "RLIMIT_FSIZE",
        Resource::RLIMIT_NPROC => "RLIMIT_NPROC",
        Resource::RLIMIT_DATA => "RLIMIT_DATA",
        Resource::RLIMIT_CORE => "RLIMIT_CORE",
        _ => "a resource limit",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_tasks_counts_this_process_and_its_threads() {
        let before = user_tasks();
        assert!(before >= 1, "this test process runs as its own uid");
        let stop = std::sync::Arc::new(std::sync::Barrier::new(5));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || stop.wait())
            })
            .collect();
        // Other tests of this binary start and end threads too: only a lower bound.
        assert!(user_tasks() >= 5, "four more threads are running");
        stop.wait();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn never_address_space_and_nproc_only_with_an_own_uid() {
        let limits = Limits::default();
        let root = plan(&limits, false, Nproc::OwnUid);
        let user = plan(&limits, false, Nproc::SharedUid(40));
        let container = plan(&limits, false, Nproc::Unset);
        let with_cgroup = plan(&limits, true, Nproc::OwnUid);
        for p in [&root, &user, &container, &with_cgroup] {
            assert!(!p.iter().any(|(r, _)| *r == Resource::RLIMIT_AS), "RLIMIT_AS breaks V8 and Go");
            assert!(p.contains(&(Resource::RLIMIT_CORE, 0)));
            assert!(p.contains(&(Resource::RLIMIT_CPU, 3_600)));
            assert!(p.contains(&(Resource::RLIMIT_FSIZE, 1 << 30)));
        }
        assert!(root.contains(&(Resource::RLIMIT_NPROC, 512)));
        assert!(user.contains(&(Resource::RLIMIT_NPROC, 552)), "the user's 40 tasks plus the budget");
        assert!(!container.iter().any(|(r, _)| *r == Resource::RLIMIT_NPROC));
        assert!(root.contains(&(Resource::RLIMIT_DATA, 4 << 30)));
        assert!(!with_cgroup.iter().any(|(r, _)| *r == Resource::RLIMIT_DATA), "the cgroup limits memory");
        let none = Limits {
            cpu_seconds: None,
            memory_bytes: None,
            processes: None,
            file_size_bytes: None,
            wall_time: None,
            output_bytes: None,
        };
        assert_eq!(plan(&none, false, Nproc::SharedUid(9)), vec![(Resource::RLIMIT_CORE, 0)]);
    }
}
