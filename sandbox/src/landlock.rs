//! Landlock for the landlock backend: which paths get which access rights, and
//! restricting the calling thread (and everything it starts later) to them.
//!
//! - every filesystem access right of the kernel's Landlock ABI is handled, with
//!   `CompatLevel::HardRequirement`, so a kernel without Landlock fails closed;
//! - read roots get read and execute (`Execute | ReadFile | ReadDir`; files only the
//!   rights that apply to files), write roots get every right, and [`RW_DEVICES`] are
//!   readable and writable;
//! - under `Network::None`, TCP bind and connect are handled with no rule (denied) where
//!   the ABI has them (4+); seccomp denies `socket` as well, so older kernels are covered;
//!   under `Network::Proxy` the same, with one rule: connect to the proxy's port (the
//!   sandbox's own network namespace is the main barrier; see `egress.rs`);
//! - signal and abstract-Unix-socket scoping where the ABI has them (6+): no signal to,
//!   and no abstract socket of, any process outside the sandbox;
//! - `restrict_self` sets no_new_privs.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, NetPort, PathBeneath, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::fcntl::{OFlag, open};
use nix::sys::stat::{Mode, fstat};

use crate::error::SandboxError;
use crate::mask::{CommandRule, Grant};
use crate::policy::Network;

/// Character devices that are readable and writable in every sandbox.
pub const RW_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

/// The ABIs whose features this module knows how to use, newest first. (ABI 7 only adds
/// audit-logging flags, so probing it would be indistinguishable from 6.)
const KNOWN_ABIS: [ABI; 6] = [ABI::V6, ABI::V5, ABI::V4, ABI::V3, ABI::V2, ABI::V1];

/// What [`restrict`] enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The Landlock ABI used (1 to 6).
    pub abi: i32,
    /// Whether TCP bind and connect are denied by Landlock (network none, ABI 4+).
    pub tcp_denied: bool,
    /// Whether signals and abstract Unix sockets are scoped (ABI 6+).
    pub scoped: bool,
}

/// The newest known ABI whose features the running kernel all supports, or
/// `ABI::Unsupported`. Asks the kernel through the landlock crate's hard requirements,
/// without creating anything.
pub fn kernel_abi() -> ABI {
    KNOWN_ABIS.into_iter().find(|abi| supports(*abi)).unwrap_or(ABI::Unsupported)
}

fn supports(abi: ABI) -> bool {
    let Ok(ruleset) =
        Ruleset::default().set_compatibility(CompatLevel::HardRequirement).handle_access(AccessFs::from_all(abi))
    else {
        return false;
    };
    let net = AccessNet::from_all(abi);
    let ruleset = if net.is_empty() { Ok(ruleset) } else { ruleset.handle_access(net) };
    let scope = Scope::from_all(abi);
    match ruleset {
        Ok(_) if scope.is_empty() => true,
        Ok(r) => r.scope(scope).is_ok(),
        Err(_) => false,
    }
}

/// The rights each path gets, in order: read roots, write roots, then the devices.
/// Paths that do not exist are left out; a file gets only the rights that apply to files.
/// ([`restrict`] applies the same mapping, deciding file or directory from the
/// descriptor it opens.)
pub fn rules(read: &[PathBuf], write: &[PathBuf], abi: ABI) -> Vec<(PathBuf, BitFlags<AccessFs>)> {
    let read_access = AccessFs::from_read(abi);
    let device_access = device_access(abi);
    let read = read.iter().map(|p| (p.clone(), read_access));
    let write = write.iter().map(|p| (p.clone(), AccessFs::from_all(abi)));
    let devices = RW_DEVICES.iter().map(|p| (PathBuf::from(p), device_access));
    read.chain(write)
        .chain(devices)
        .filter_map(|(path, access)| {
            let meta = std::fs::metadata(&path).ok()?;
            let access = if meta.is_dir() { access } else { access & AccessFs::from_file(abi) };
            Some((path, access))
        })
        .collect()
}

fn device_access(abi: ABI) -> BitFlags<AccessFs> {
    (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev) & AccessFs::from_all(abi)
}

/// Restricts the calling thread, and every thread and process it starts afterwards, to
/// `read` and `write` (and the network rules of `network`). Sets no_new_privs.
/// Under `Network::Proxy` with ABI 4+, TCP is handled too, with one rule: connect to
/// `proxy_port` (the egress proxy inside the sandbox's namespace); no bind.
pub fn restrict(
    read: &[PathBuf],
    write: &[PathBuf],
    network: Network,
    proxy_port: Option<u16>,
) -> Result<Applied, SandboxError> {
    let abi = kernel_abi();
    if abi == ABI::Unsupported {
        return Err(SandboxError::LandlockUnavailable);
    }
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?;
    let net = AccessNet::from_all(abi);
    let tcp_denied = matches!(network, Network::None | Network::Proxy) && !net.is_empty();
    if tcp_denied {
        ruleset = ruleset.handle_access(net).map_err(err)?;
    }
    let scope = Scope::from_all(abi);
    let scoped = !scope.is_empty();
    if scoped {
        ruleset = ruleset.scope(scope).map_err(err)?;
    }
    let mut created = ruleset.create().map_err(err)?;
    if let (true, Network::Proxy, Some(port)) = (tcp_denied, network, proxy_port) {
        created = created.add_rule(NetPort::new(port, AccessNet::ConnectTcp)).map_err(err)?;
    }
    let read = read.iter().map(|p| (p.as_path(), AccessFs::from_read(abi)));
    let write = write.iter().map(|p| (p.as_path(), AccessFs::from_all(abi)));
    let devices = RW_DEVICES.iter().map(|p| (Path::new(*p), device_access(abi)));
    for (path, access) in read.chain(write).chain(devices) {
        // One open per root; the kind of file comes from the descriptor.
        let Ok(fd) = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) else {
            tracing::debug!(path = %path.display(), "landlock: skipping a root that does not exist");
            continue;
        };
        let is_dir = fstat(&fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
        created = created.add_rule(PathBeneath::new(fd, access)).map_err(|e| rule_error(path, e))?;
    }
    let status = created.restrict_self().map_err(err)?;
    if status.ruleset != RulesetStatus::FullyEnforced || !status.no_new_privs {
        return Err(SandboxError::Landlock(format!(
            "the kernel enforced the rules only partly ({:?}, no_new_privs {})",
            status.ruleset, status.no_new_privs
        )));
    }
    Ok(Applied { abi: abi as i32, tcp_denied, scoped })
}

/// The Landlock ruleset of the command domain (see [`crate::mask::command_rules`]),
/// created but not enforced: [`crate::scope::enter_command_domain`] enters it in each
/// forked command, nested under the host's domain. It handles file access only (the
/// host's domain already holds the network rules); a directory on the way to a masked
/// path gets its grant without reading or executing files.
pub fn command_ruleset(rules: &[CommandRule]) -> Result<OwnedFd, SandboxError> {
    let abi = kernel_abi();
    if abi == ABI::Unsupported {
        return Err(SandboxError::LandlockUnavailable);
    }
    let err = |e: landlock::RulesetError| SandboxError::Landlock(e.to_string());
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(err)?
        .create()
        .map_err(err)?;
    let grants = rules.iter().map(|r| {
        let mut access = match r.grant {
            Grant::Read => AccessFs::from_read(abi),
            Grant::Write => AccessFs::from_all(abi),
        };
        if r.on_the_way {
            access &= !(AccessFs::ReadFile | AccessFs::Execute);
        }
        (r.path.as_path(), access)
    });
    let devices = RW_DEVICES.iter().map(|p| (Path::new(*p), device_access(abi)));
    for (path, access) in grants.chain(devices) {
        let Ok(fd) = open(path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty()) else {
            continue;
        };
        let is_dir = fstat(&fd).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFDIR);
        let access = if is_dir { access } else { access & AccessFs::from_file(abi) };
        if access.is_empty() {
            continue;
        }
        created = created.add_rule(PathBeneath::new(fd, access)).map_err(|e| rule_error(path, e))?;
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| SandboxError::Landlock("the kernel gave no descriptor for the commands' ruleset".into()))
}

fn rule_error(path: &Path, e: landlock::RulesetError) -> SandboxError {
    SandboxError::Landlock(format!("cannot add a rule for {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_roots_read_write_roots_everything_files_only_file_rights() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let abi = ABI::V6;
        let rules =
            rules(&[dir.path().to_path_buf(), file.clone(), "/nonexistent/orch".into()], &[dir.path().join("w")], abi);
        let find = |p: &Path| rules.iter().find(|(q, _)| q == p).map(|(_, a)| *a);
        let read_dir = find(dir.path()).unwrap();
        assert_eq!(read_dir, AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir);
        assert!(!read_dir.intersects(AccessFs::from_write(abi)), "a read root must not be writable");
        assert_eq!(find(&file).unwrap(), AccessFs::Execute | AccessFs::ReadFile);
        assert!(find(Path::new("/nonexistent/orch")).is_none());
        // A write root that does not exist is left out too.
        assert!(find(&dir.path().join("w")).is_none());
        std::fs::create_dir(dir.path().join("w")).unwrap();
        let rules2 = super::rules(&[], &[dir.path().join("w")], abi);
        assert_eq!(rules2[0].1, AccessFs::from_all(abi));
        let null = rules2.iter().find(|(p, _)| p == Path::new("/dev/null")).unwrap().1;
        assert_eq!(null, AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::IoctlDev);
        // On an ABI 1 kernel, only ABI 1 rights are asked for.
        let old = super::rules(&[], &[dir.path().join("w")], ABI::V1);
        assert_eq!(old[0].1, AccessFs::from_all(ABI::V1));
        assert!(!old.iter().any(|(_, a)| a.contains(AccessFs::IoctlDev) || a.contains(AccessFs::Truncate)));
    }

    #[test]
    fn this_kernel_has_landlock() {
        // The CI machine has ABI 7; a kernel without Landlock makes this test fail
        // rather than letting the sandbox suites pass vacuously.
        assert!(kernel_abi() >= ABI::V1, "landlock is missing on this machine");
    }
}
