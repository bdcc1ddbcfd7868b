//! A full disk (issue 26): the run directory is a small tmpfs and an agent fills it.
//! stderr names the reason (not only "failed"), and `report.json` is still finalised
//! (room for it was kept), not left `running`. Needs root to mount the tmpfs; skipped
//! with a message otherwise.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::Fixture;

const WORKFLOW: &str = r#"
version: 1
name: full-disk
agents:
  a: { prompt: Work., tools: [Bash] }
"#;

const SCRIPT: &str = r#"
version: 1
agents:
  a:
    - tool_calls: [{name: Bash, input: {command: "head -c 30000000 /dev/urandom > big.bin; df -k ."}}]
    - text: wrote what fitted
"#;

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path, size: &str) -> Result<Tmpfs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root".into());
        }
        std::fs::create_dir_all(at).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(at)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(Tmpfs(at.to_path_buf()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn a_full_run_directory_names_the_reason_and_still_finalises_the_report() {
    for size in ["1m", "8m"] {
        let fx = Fixture::new(&format!("t-full-disk-{size}"), &[("x.txt", "x\n")]);
        let _tmpfs = match Tmpfs::mount(&fx.out, size) {
            Ok(t) => t,
            Err(why) => {
                eprintln!("skipping the full-disk test: cannot mount a tmpfs as the run directory ({why})");
                return;
            }
        };
        let out = fx.command(WORKFLOW, SCRIPT).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{size}: {stderr}");
        assert!(
            stderr.contains(&format!("the file system holding {}", fx.out.display())) && stderr.contains("is full"),
            "{size}: stderr does not name the full disk:\n{stderr}"
        );
        let report: Value = serde_json::from_slice(&std::fs::read(fx.out.join("report.json")).unwrap()).unwrap();
        assert_eq!(report["status"], "failed", "{size}: {report:#}");
        assert!(report.get("partial").is_none_or(|p| p == false), "{size}: {report:#}");
        let reason = report["agents"][0]["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("is full"), "{size}: {reason}");
        assert!(!fx.out.join(".report-reserve").exists(), "{size}: the reserve is left");
    }
}
