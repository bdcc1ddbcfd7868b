//! The sandbox policy of an agent or a command: its private tmp and home, and the
//! policy built from a [`SandboxSpec`] (roots made canonical, the environment filtered,
//! a sandbox uid as root). Shared by agent sessions and `orch sandbox run`.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use orch_sandbox::policy::{Limits, Policy, default_read_roots, filter_env};
use orch_sandbox::{SandboxError, identity};

use crate::options::{SandboxSpec, SettingSource};

/// An agent's private tmp and home, under `base`.
#[derive(Debug)]
pub struct PrivateDirs {
    pub base: PathBuf,
    pub tmp: PathBuf,
    pub home: PathBuf,
    /// `base` is a shared mount point for a private tmpfs (see [`PrivateDirs::tmpfs`]),
    /// not a directory of ours: it is kept.
    pub tmpfs: bool,
}

/// The shared mount point of `orch sandbox run`'s private tmpfs, under `$TMPDIR`.
pub const TMPFS_MOUNT_POINT: &str = "orch-sandbox";

impl PrivateDirs {
    /// Root and the landlock backend only: `base` as the mount point of a private
    /// tmpfs that the sandbox mounts in its own mount namespace and that serves as its
    /// tmp and home (`Policy::private_tmpfs`). `base` is created once (mode 0755) and
    /// shared by every sandbox, each seeing only its own tmpfs there; `None` when it is
    /// not a directory owned by root that only root may write to (then use
    /// [`PrivateDirs::single`]). This saves creating, handing over and removing a
    /// directory on the host's file system per run, which on ext4 costs a millisecond
    /// when runs follow each other (the inode allocator skips recently freed inodes).
    pub fn tmpfs(base: PathBuf) -> Option<Self> {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        match std::fs::create_dir(&base) {
            Ok(()) => std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).ok()?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(_) => return None,
        }
        let meta = std::fs::symlink_metadata(&base).ok()?;
        (meta.is_dir() && meta.uid() == 0 && meta.mode() & 0o022 == 0).then(|| Self {
            tmp: base.clone(),
            home: base.clone(),
            base,
            tmpfs: true,
        })
    }

    /// One fresh directory `base` serving as both tmp and home (one `mkdir`, where
    /// start-up time matters).
    pub fn single(base: PathBuf) -> std::io::Result<Self> {
        match std::fs::create_dir(&base) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(&base)?;
                std::fs::create_dir(&base)?;
            }
            Err(e) => return Err(e),
        }
        Ok(Self { tmp: base.clone(), home: base.clone(), base, tmpfs: false })
    }

    /// Creates `base/tmp` and `base/home` (and `base`), fresh: a `base` left over from
    /// an earlier process is emptied first.
    pub fn create(base: PathBuf) -> std::io::Result<Self> {
        let dirs = Self { tmp: base.join("tmp"), home: base.join("home"), base, tmpfs: false };
        match std::fs::create_dir(&dirs.base) {
            Ok(()) => {}
            // Left over by a process that had the same pid and died.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                std::fs::remove_dir_all(&dirs.base)?;
                std::fs::create_dir(&dirs.base)?;
            }
            Err(_) => std::fs::create_dir_all(&dirs.base)?,
        }
        std::fs::create_dir(&dirs.tmp)?;
        std::fs::create_dir(&dirs.home)?;
        Ok(dirs)
    }

    /// Removes `base` and everything in it (a tmpfs mount point is kept: the tmpfs went
    /// with the sandbox's mount namespace); failures are logged.
    pub fn remove(&self) {
        if self.tmpfs {
            return;
        }
        if let Err(e) = std::fs::remove_dir_all(&self.base)
            && e.kind() != ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.base.display(), "could not remove the sandbox's private directories: {e}");
        }
    }
}

/// The loud line every unconfined run prints; `source` says where `none` was chosen.
pub fn warn_unconfined(source: SettingSource) {
    let key = match source {
        SettingSource::Flags => "--backend none",
        SettingSource::Workflow => "sandbox.backend: none (in the workflow)",
    };
    crate::notice::note(format_args!(
        "WARNING: {key}: commands run UNCONFINED, with orch's own user and privileges \
         (no landlock, seccomp, uid drop or limits)"
    ));
}

/// What goes into a policy besides the flags.
#[derive(Debug)]
pub struct PolicyInput<'a> {
    pub cwd: &'a Path,
    /// Writable roots besides `--write` and the private directories.
    pub write: Vec<PathBuf>,
    /// Readable roots besides the defaults and `--read`.
    pub read: Vec<PathBuf>,
    pub dirs: &'a PrivateDirs,
    /// Unique among live sandboxes on this machine; names the cgroup and seeds the uid.
    pub name: String,
    pub wall_time: Option<Duration>,
}

/// The policy for `spec` and `input`: paths made absolute and canonical (a `--read` or
/// `--write` that does not exist is an error), the filtered environment, and, when orch
/// runs as root, a sandbox uid.
pub fn build_policy(spec: &SandboxSpec, input: PolicyInput<'_>) -> Result<Policy, SandboxError> {
    let canonical = |flag: &str, p: &Path| {
        let abs = if p.is_absolute() { p.to_path_buf() } else { input.cwd.join(p) };
        std::fs::canonicalize(&abs).map_err(|e| {
            SandboxError::InvalidPolicy(format!("{flag} {} cannot be used: {e}; give an existing path", p.display()))
        })
    };
    let outer_home = std::env::var_os("HOME").map(PathBuf::from);
    let mut read = default_read_roots(outer_home.as_deref());
    read.extend(input.read);
    for p in &spec.read {
        read.push(canonical("--read", p)?);
    }
    let mut write = input.write;
    for p in &spec.write {
        write.push(canonical("--write", p)?);
    }
    write.push(input.dirs.tmp.clone());
    write.push(input.dirs.home.clone());
    dedup(&mut read);
    dedup(&mut write);
    let outer: Vec<(String, String)> = std::env::vars().collect();
    let env = filter_env(outer.iter().map(|(k, v)| (k.as_str(), v.as_str())), &input.dirs.home, &input.dirs.tmp);
    let uid = identity::is_root().then(|| {
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        orch_sandbox::sandbox_uid(&format!("{}/{nanos}", input.name))
    });
    Ok(Policy {
        backend: spec.backend,
        read,
        write,
        network: spec.network,
        limits: Limits::with_wall_time(input.wall_time),
        env,
        cwd: input.cwd.to_path_buf(),
        image: spec.image.clone(),
        uid,
        name: Some(input.name),
        private_tmpfs: input.dirs.tmpfs.then(|| input.dirs.base.clone()),
        masked: Vec::new(),
        egress: None,
    })
}

fn dedup(paths: &mut Vec<PathBuf>) {
    let mut seen = std::collections::BTreeSet::new();
    paths.retain(|p| seen.insert(p.clone()));
}
