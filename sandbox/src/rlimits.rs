//! Resource limits (setrlimit) from a policy's [`Limits`]. Limits are only ever lowered,
//! soft and hard together, so nothing inside can raise them again.
//!
//! - `RLIMIT_CPU`: CPU seconds of each process;
//! - `RLIMIT_FSIZE`: the largest file a process may write;
//! - `RLIMIT_NPROC`: processes and threads of the real uid, so it is set only when the
//!   sandbox has a uid of its own (orch runs as root); for a normal user it would count
//!   every process of that user on the machine;
//! - `RLIMIT_DATA`: the memory fallback when no cgroup limits memory. It counts private
//!   writable mappings, not reserved address space, so V8 and Go still start;
//!   `RLIMIT_AS` is never used, because those runtimes reserve huge address spaces;
//! - `RLIMIT_CORE`: 0, so no core file lands in the worktree.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

use crate::error::SandboxError;
use crate::policy::Limits;

/// The limits to set, as (resource, value).
pub fn plan(limits: &Limits, memory_in_cgroup: bool, own_uid: bool) -> Vec<(Resource, u64)> {
    let mut plan = vec![(Resource::RLIMIT_CORE, 0)];
    if let Some(cpu) = limits.cpu_seconds {
        plan.push((Resource::RLIMIT_CPU, cpu));
    }
    if let Some(size) = limits.file_size_bytes {
        plan.push((Resource::RLIMIT_FSIZE, size));
    }
    if let (Some(n), true) = (limits.processes, own_uid) {
        plan.push((Resource::RLIMIT_NPROC, n));
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
    fn never_address_space_and_nproc_only_with_an_own_uid() {
        let limits = Limits::default();
        let root = plan(&limits, false, true);
        let user = plan(&limits, false, false);
        let with_cgroup = plan(&limits, true, true);
        for p in [&root, &user, &with_cgroup] {
            assert!(!p.iter().any(|(r, _)| *r == Resource::RLIMIT_AS), "RLIMIT_AS breaks V8 and Go");
            assert!(p.contains(&(Resource::RLIMIT_CORE, 0)));
            assert!(p.contains(&(Resource::RLIMIT_CPU, 3_600)));
            assert!(p.contains(&(Resource::RLIMIT_FSIZE, 1 << 30)));
        }
        assert!(root.contains(&(Resource::RLIMIT_NPROC, 512)));
        assert!(!user.iter().any(|(r, _)| *r == Resource::RLIMIT_NPROC));
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
        assert_eq!(plan(&none, false, true), vec![(Resource::RLIMIT_CORE, 0)]);
    }
}
