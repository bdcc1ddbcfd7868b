//! [`confine`]: the tool host confining itself at start, before any thread exists.
//!
//! First, in every backend, the host closes every descriptor above 2 ([`crate::fds`]).
//!
//! Landlock backend, in this order:
//! 1. the per-agent cgroup (pids and memory; see [`crate::cgroup`]; a normal user's
//!    only where one was delegated to it), entered at once; root only: the private mount namespace that keeps the roots reachable for the
//!    sandbox uid, holds the policy's private tmpfs (see [`crate::traverse`]) and
//!    covers the masked paths with empty mounts (see [`crate::mask`]); then a `/proc`
//!    that shows only the sandbox uid's processes ([`crate::procfs`]);
//! 2. child subreaper, so escaped processes stay the host's to kill ([`crate::reaper`]);
//! 3. rlimits ([`crate::rlimits`]);
//! 4. root only: drop to the policy's uid with no groups and no capabilities
//!    ([`crate::identity`]);
//! 5. non-dumpable, so its commands (same uid as a normal user) can neither `ptrace`
//!    the host nor open its `/proc/<pid>` files; `exec` makes commands dumpable again;
//! 6. Landlock, which also sets no_new_privs and scopes signals ([`crate::landlock`]);
//!    as a normal user with masked paths, the Landlock ruleset of its commands is
//!    prepared first ([`crate::mask::command_rules`]);
//! 7. seccomp ([`crate::seccomp`]).
//!
//! Each command the host forks then enters a nested domain of its own
//! ([`crate::scope::enter_command_domain`], in the spawn's `pre_exec`), so it cannot
//! signal the host either.
//!
//! Backend `none`: only the subreaper (the caller warns that nothing is confined).
//! Backend `container`: the container is the confinement; inside it, the subreaper,
//! rlimits, orch's own seccomp filters ([`crate::seccomp`], on top of Docker's default
//! profile, which allows `ptrace` and `process_vm_*` between processes of the same uid)
//! and a non-dumpable host. The tool host and its commands share the container's uid,
//! so without these a command could `ptrace` its own tool host or open its
//! `/proc/<pid>/mem`; with them, `ptrace`, `process_vm_*` and `pidfd_getfd` fail with
//! EPERM for every process in the container (the filters are inherited), and the host's
//! `/proc/<pid>` files belong to root. Commands are dumpable again after their `exec`.

use std::path::PathBuf;

use crate::cgroup::Cgroup;
use crate::error::SandboxError;
use crate::policy::{Backend, Policy};
use crate::{identity, landlock, mask, rlimits, seccomp, traverse};

/// What [`confine`] put in place.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Confinement {
    /// The uid the process now runs as, if it dropped root.
    pub uid: Option<u32>,
    /// The cgroup directories the process moved into.
    pub cgroup: Vec<PathBuf>,
    /// Directories covered so roots stay reachable after the uid drop.
    pub covered: usize,
    /// The Landlock ABI enforced, if Landlock was applied.
    pub landlock_abi: Option<i32>,
    /// Whether seccomp filters were installed.
    pub seccomp: bool,
    /// Whether `/proc` shows only the sandbox uid's processes (root; see `procfs.rs`).
    pub proc_hidden: bool,
    /// Whether a cgroup limits the memory of the whole sandbox (else only rlimits do,
    /// per process).
    pub memory_in_cgroup: bool,
}

/// Confines the calling process according to `policy`. Must run while the process has a
/// single thread (Landlock and seccomp bind the calling thread and what it starts);
/// fails with [`SandboxError::Threads`] otherwise.
pub fn confine(policy: &Policy) -> Result<Confinement, SandboxError> {
    // The host needs only 0-2: nothing its parent left open may reach it or what it
    // starts (see `fds.rs`).
    crate::fds::close_all_but(&[]).map_err(|e| SandboxError::io("cannot close inherited descriptors", e))?;
    confine_with(policy, true)
}

/// [`confine`], optionally without counting threads: a child between `fork` and `exec`
/// has exactly one.
pub(crate) fn confine_with(policy: &Policy, check_threads: bool) -> Result<Confinement, SandboxError> {
    let mut done = Confinement::default();
    match policy.backend {
        Backend::None => {
            subreaper()?;
            return Ok(done);
        }
        Backend::Container => {
            egress(policy)?;
            subreaper()?;
            rlimits::apply(&rlimits::plan(&policy.limits, false, rlimits::Nproc::Unset))?;
            not_dumpable()?;
            seccomp::apply(policy.network)?;
            done.seccomp = true;
            return Ok(done);
        }
        Backend::Landlock => {}
    }
    validate(policy)?;
    if check_threads {
        let threads = thread_count();
        if threads != 1 {
            return Err(SandboxError::Threads(threads));
        }
    }
    let root = identity::is_root();
    // First: the network namespace (a user namespace too as a normal user) is made
    // while nothing else has changed, and the listener handed over before seccomp
    // denies Unix sockets.
    egress(policy)?;
    let uid = if root { Some(policy.uid.ok_or(SandboxError::NoSandboxUid)?) } else { None };

    let mut memory_in_cgroup = false;
    // As root, or as a normal user's tool host with a delegated cgroup (see
    // `cgroup::delegate`; `orch sandbox run`, which confines a fork child, keeps its
    // one command to rlimits and skips the lookup).
    let name = policy.name.clone().unwrap_or_else(|| format!("host-{}", std::process::id()));
    if uid.is_none()
        && check_threads
        && let Some(cgroup) = Cgroup::create(&name, &policy.limits)
    {
        match cgroup.enter_self() {
            Ok(()) => {
                memory_in_cgroup = cgroup.limits_memory();
                done.cgroup = cgroup.dirs().to_vec();
            }
            Err(e) => {
                tracing::debug!("cgroup: cannot move in ({e}); relying on rlimits");
                cgroup.remove();
            }
        }
    }
    done.memory_in_cgroup = memory_in_cgroup;
    if let Some(uid) = uid {
        if let Some(cgroup) = Cgroup::create(&name, &policy.limits) {
            match cgroup.enter_self() {
                Ok(()) => {
                    memory_in_cgroup = cgroup.limits_memory();
                    done.memory_in_cgroup = memory_in_cgroup;
                    done.cgroup = cgroup.dirs().to_vec();
                }
                Err(e) => {
                    tracing::debug!("cgroup: cannot move in ({e}); relying on rlimits");
                    cgroup.remove();
                }
            }
        }
        let roots: Vec<PathBuf> = policy.read.iter().chain(&policy.write).cloned().collect();
        let tmpfs = policy.private_tmpfs.as_deref().map(|path| traverse::PrivateTmpfs {
            path,
            uid,
            gid: uid,
            size_bytes: policy.limits.memory_bytes.unwrap_or(1 << 30),
        });
        done.covered = match traverse::expose(&roots, uid, uid, tmpfs, &policy.masked) {
            Ok(n) => n,
            // Without its private tmp and home the sandbox would write to the shared
            // mount point, and without its masks it would read denied files: fail
            // closed.
            Err(e) if tmpfs.is_some() || !policy.masked.is_empty() => return Err(e),
            Err(e) => {
                tracing::warn!("sandbox: some roots may be unreachable for the sandbox uid: {e}");
                0
            }
        };
        if done.covered > 0 || tmpfs.is_some() || !policy.masked.is_empty() {
            // Re-enter the working directory through the new mounts.
            std::env::set_current_dir(&policy.cwd).map_err(|e| {
                SandboxError::io(format!("cannot enter the working directory {}", policy.cwd.display()), e)
            })?;
        }
    }
    if uid.is_some() {
        // Other agents' command lines (and the coordinator's) out of sight; see procfs.rs.
        match crate::procfs::hide_other_uids() {
            Ok(()) => done.proc_hidden = true,
            Err(e) => tracing::warn!("sandbox: other processes stay visible in /proc: {e}"),
        }
    }
    subreaper()?;
    let nproc = if uid.is_some() { rlimits::Nproc::OwnUid } else { rlimits::Nproc::SharedUid(rlimits::user_tasks()) };
    rlimits::apply(&rlimits::plan(&policy.limits, memory_in_cgroup, nproc))?;
    if let Some(uid) = uid {
        identity::drop_to(uid)?;
        done.uid = Some(uid);
    }
    // After the uid drop, which would reset it: the host's commands share its uid as a
    // normal user, and must not ptrace it or open its `/proc/<pid>/fd`, `mem` or
    // `environ` (a forged tool result through `/proc/$PPID/fd/1`).
    not_dumpable()?;
    if uid.is_none() && !policy.masked.is_empty() {
        command_domain(policy)?;
    }
    let proxy_port = policy.egress.as_ref().map(|e| e.port);
    let applied = landlock::restrict(&policy.read, &policy.write, policy.network, proxy_port)?;
    done.landlock_abi = Some(applied.abi);
    seccomp::apply(policy.network)?;
    done.seccomp = true;
    Ok(done)
}

/// A normal user cannot mount: the commands the host forks get a Landlock domain that
/// leaves the masked paths out ([`crate::mask::command_rules`]), prepared here and
/// entered by [`crate::scope::enter_command_domain`]. The host itself keeps the whole
/// worktree (its file tools hide denied paths by rule). When the rules cannot be built
/// (too many entries), the coordinator has already said that the denies are not enforced
/// on Bash; the host logs it and goes on.
fn command_domain(policy: &Policy) -> Result<(), SandboxError> {
    match mask::command_rules(&policy.read, &policy.write, &policy.masked) {
        Ok(Some(rules)) => crate::scope::set_command_ruleset(landlock::command_ruleset(&rules)?),
        Ok(None) => {}
        Err(e) => tracing::warn!("sandbox: denied paths stay readable to commands: {e}"),
    }
    Ok(())
}

/// Under `Network::Proxy`: the sandbox's own network namespace and its listener, handed
/// to the coordinator ([`crate::egress`]). Other networks: nothing.
fn egress(policy: &Policy) -> Result<(), SandboxError> {
    match (policy.network, &policy.egress) {
        (crate::policy::Network::Proxy, Some(egress)) => {
            crate::egress::enter(egress, policy.backend, identity::is_root())
        }
        (crate::policy::Network::Proxy, None) => Err(SandboxError::InvalidPolicy(
            "network proxy without an egress socket; the coordinator must give one".into(),
        )),
        _ => Ok(()),
    }
}

fn subreaper() -> Result<(), SandboxError> {
    nix::sys::prctl::set_child_subreaper(true)
        .map_err(|e| SandboxError::io("cannot become a child subreaper", std::io::Error::from(e)))
}

/// Makes the calling process non-dumpable: processes of the same uid can then neither
/// `ptrace` it nor open its `/proc/<pid>` files (`mem`, `environ`, `fd`). `exec` resets
/// it for the commands the process starts.
fn not_dumpable() -> Result<(), SandboxError> {
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| SandboxError::io("cannot make the tool host non-dumpable", std::io::Error::from(e)))
}

/// Checks what the kernel would otherwise reject obscurely.
pub fn validate(policy: &Policy) -> Result<(), SandboxError> {
    for path in policy.read.iter().chain(&policy.write).chain(std::iter::once(&policy.cwd)) {
        if !path.is_absolute() {
            return Err(SandboxError::InvalidPolicy(format!("{} is not an absolute path", path.display())));
        }
    }
    if policy.write.is_empty() {
        return Err(SandboxError::InvalidPolicy("no writable root; give at least a private tmp".into()));
    }
    Ok(())
}

/// Threads of this process, from `/proc/self/task` (0 if unreadable).
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|dir| dir.count()).unwrap_or(0)
}
