//! Room kept on the run directory's file system for the run's last writes. A run that
//! fills its disk (an agent's output, a big checkout) would otherwise end with nowhere
//! to write `teardown.json` and the final report, leaving `report.json` `running`.
//!
//! When the run starts, `.report-reserve` is allocated in the run directory (an eighth
//! of the free space, at most [`MAX`]); it is deleted just before teardown, so what
//! the run writes last has that much room even on a full disk. A run killed before
//! that leaves the file behind: `orch recover` deletes it first.

use std::path::{Path, PathBuf};

/// The reserve's file in the run directory.
pub const FILE: &str = ".report-reserve";

/// The most the reserve takes.
pub const MAX: u64 = 4 << 20;

/// The space held for the last writes of the run in one directory.
pub struct Reserve {
    path: PathBuf,
}

impl Reserve {
    /// Allocates the reserve in `run_dir`; on a file system that cannot allocate it, the
    /// run goes on without one (said at debug level).
    pub fn take(run_dir: &Path) -> Reserve {
        let path = run_dir.join(FILE);
        let free = free_bytes(run_dir).unwrap_or(0);
        let size = (free / 8).min(MAX);
        let allocated = std::fs::File::create(&path).map_err(|e| e.to_string()).and_then(|f| {
            if size == 0 {
                return Ok(());
            }
            nix::fcntl::posix_fallocate(&f, 0, size as libc::off_t).map_err(|e| e.to_string())
        });
        if let Err(e) = allocated {
            tracing::debug!("no space reserved for the final report in {}: {e}", run_dir.display());
            let _ = std::fs::remove_file(&path);
        }
        Reserve { path }
    }

    /// Frees the reserve for the writes that follow.
    pub fn release(&self) {
        release(self.path.parent().unwrap_or(Path::new(".")));
    }
}

/// Deletes the reserve of the run in `run_dir`, if there is one.
pub fn release(run_dir: &Path) {
    match std::fs::remove_file(run_dir.join(FILE)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!("cannot remove {}: {e}", run_dir.join(FILE).display()),
    }
}

/// The bytes an unprivileged writer can still use on the file system of `path`.
pub fn free_bytes(path: &Path) -> Option<u64> {
    let stat = nix::sys::statvfs::statvfs(path).ok()?;
    Some((stat.blocks_available() as u64).saturating_mul(stat.fragment_size() as u64))
}

/// A note for an error that may come from a full disk: when the file system of `path`
/// has less than 1 MiB left, says so and what to do.
pub fn full_note(path: &Path) -> Option<String> {
    let free = free_bytes(path)?;
    (free < 1 << 20).then(|| {
        format!(
            "the file system holding {} is full ({} KiB left); free space there (or use --out on a larger disk)",
            path.display(),
            free >> 10
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_is_allocated_then_released() {
        let dir = tempfile::tempdir().unwrap();
        let reserve = Reserve::take(dir.path());
        let size = std::fs::metadata(dir.path().join(FILE)).unwrap().len();
        assert!(size > 0 && size <= MAX, "{size}");
        reserve.release();
        assert!(!dir.path().join(FILE).exists());
        assert_eq!(full_note(dir.path()), None, "a temporary directory with room is not full");
    }
}
