//! The per-agent cgroup, when orch runs as root or has a delegated cgroup: it caps
//! processes (`pids.max`) and memory (`memory.max` with no swap, or the v1
//! equivalents) of the whole sandbox, and lets the coordinator kill the whole tree at
//! once, `setsid` escapees included.
//!
//! Where it lives, for a sandbox named `<name>`, under `<base>` (`orch` as root,
//! `orch-u<uid>` for a normal user, see [`delegate`]):
//! - cgroup v2 with the `pids` or `memory` controller: `<v2 mount>/<base>/<name>`, at
//!   the top of the hierarchy (a v2 cgroup holding processes cannot have children with
//!   controllers, so it cannot go under orch's own cgroup);
//! - otherwise cgroup v1: `<controller mount><orch's own cgroup>/<base>/<name>` in each
//!   of the `pids` and `memory` hierarchies, nested under orch's own cgroups so the
//!   limits orch runs under still apply.
//!
//! A normal user gets `<base>` from root once: [`delegate`] finds it already made and
//! writable, or makes it through passwordless `sudo -n` (as GitHub's hosted runners
//! allow) and hands it to the user (`chown`); on v2 it also moves the coordinator into
//! a leaf of it, since moving a process between two cgroups needs write access to
//! their common ancestor. Without it, memory is limited per process (rlimits) and the
//! tool host watches its agent's total ([`crate::memwatch`]).
//!
//! Anything not writable is skipped (debug log): the sandbox then relies on rlimits.
//! The path is a function of the name and of orch's own cgroup, so the coordinator finds
//! the cgroup its tool host created with [`Cgroup::find`].

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::policy::Limits;

/// One sandbox's cgroup: a directory per hierarchy (one in v2, up to two in v1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
    memory: bool,
}

/// Where the cgroup hierarchies are mounted and where this process sits in them.
#[derive(Debug, Default)]
struct Layout {
    /// The cgroup2 mount, if it has the pids or memory controller.
    v2: Option<PathBuf>,
    /// v1 (controller, directory of this process's cgroup) for pids and memory.
    v1: Vec<(&'static str, PathBuf)>,
}

/// The cgroup hierarchies of this machine, as [`layout_at`] finds them under
/// `/sys/fs/cgroup` for this process: looked up once per process (see [`locate`]).
fn layout() -> &'static Layout {
    static LAYOUT: OnceLock<Layout> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        layout_at(Path::new(SYS_CGROUP), &own, || std::fs::read_to_string("/proc/self/mounts").unwrap_or_default())
    })
}

/// Looks the cgroup hierarchies up now, once for this process (they are cached, and
/// always found where this process sits at its first look). A process that forks a
/// child to confine itself ([`crate::confine_on_exec`]) calls this first: the child then
/// inherits the answer, and the parent's later [`kill_and_remove`] reuses it, so the
/// lookup is done once per `orch sandbox run` instead of twice.
pub fn locate() {
    let _ = layout();
}

/// Where cgroup file systems are usually mounted.
const SYS_CGROUP: &str = "/sys/fs/cgroup";

/// The cgroup hierarchies, looked up at their usual mount points under `sys` first
/// (cheap: `sys` itself for v2, `sys/pids` and `sys/memory` for v1), and through the
/// mount table `mounts` returns only when they are not there. `own` is this process's
/// `/proc/self/cgroup`. Taking these as arguments lets tests point it at a fake tree.
fn layout_at(sys: &Path, own: &str, mounts: impl FnOnce() -> String) -> Layout {
    let mut usual = Vec::new();
    if sys.join("cgroup.controllers").exists() {
        usual.push(format!("cgroup2 {} cgroup2 rw 0 0", sys.display()));
    }
    for controller in ["pids", "memory"] {
        let dir = sys.join(controller);
        if dir.join("tasks").exists() {
            usual.push(format!("cgroup {} cgroup rw,{controller} 0 0", dir.display()));
        }
    }
    let mounts = if usual.is_empty() { mounts() } else { usual.join("\n") };
    layout_from(&mounts, own)
}

fn layout_from(mounts: &str, own: &str) -> Layout {
    let mut layout = Layout::default();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, dir, fstype, options, ..] = fields[..] else { continue };
        let dir = PathBuf::from(dir);
        if fstype == "cgroup2" {
            let controllers = std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            if controllers.split_whitespace().any(|c| c == "pids" || c == "memory") {
                layout.v2 = Some(dir);
            }
        } else if fstype == "cgroup" {
            for controller in ["pids", "memory"] {
                if options.split(',').any(|o| o == controller) {
                    // "N:pids:/path" in /proc/self/cgroup.
                    let current = own
                        .lines()
                        .filter_map(|l| {
                            let mut parts = l.splitn(3, ':').skip(1);
                            parts.next().zip(parts.next())
                        })
                        .find(|(list, _)| list.split(',').any(|c| c == controller))
                        .map(|(_, path)| path.trim_start_matches('/').to_string())
                        .unwrap_or_default();
                    let here = dir.join(&current);
                    layout.v1.push((controller, if here.is_dir() { here } else { dir.clone() }));
                }
            }
        }
    }
    layout
}

fn dirs_for(name: &str, layout: &Layout) -> (Vec<(&'static str, PathBuf)>, bool) {
    let (bases, v2) = bases(layout);
    (bases.into_iter().map(|(c, dir)| (c, dir.join(name))).collect(), v2)
}

/// The directory of this user's sandbox cgroups in each hierarchy, and whether it is v2.
fn bases(layout: &Layout) -> (Vec<(&'static str, PathBuf)>, bool) {
    let base = base_name();
    match &layout.v2 {
        Some(root) => (vec![("v2", root.join(&base))], true),
        None => (layout.v1.iter().map(|(c, dir)| (*c, dir.join(&base))).collect(), false),
    }
}

/// `orch` as root, `orch-u<uid>` for a normal user.
fn base_name() -> String {
    let uid = nix::unistd::getuid();
    if uid.is_root() { "orch".into() } else { format!("orch-u{uid}") }
}

/// Makes sure a normal user has a delegated cgroup for its agents (see the module
/// doc). `Ok` when the base exists and is the user's (made now or earlier); `Err` says
/// what is missing. As root: `Ok` (root makes its own). Blocking (it may run `sudo`).
pub fn delegate() -> Result<(), String> {
    if nix::unistd::getuid().is_root() {
        return Ok(());
    }
    let layout = layout();
    let (bases, v2) = bases(layout);
    if bases.is_empty() {
        return Err("no cgroup hierarchy with the memory or pids controller is mounted".into());
    }
    let coordinator_inside = || {
        !v2 || std::fs::read_to_string("/proc/self/cgroup").is_ok_and(|own| {
            own.lines().any(|l| l.starts_with("0::/") && l[3..].starts_with(&format!("/{}/", base_name())))
        })
    };
    let writable = |dir: &Path| nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok();
    if bases.iter().all(|(_, dir)| writable(dir)) && coordinator_inside() {
        return Ok(());
    }
    let dirs: Vec<String> = bases.iter().map(|(_, d)| d.display().to_string()).collect();
    let sudo_works = std::process::Command::new("sudo")
        .args(["-n", "true"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !sudo_works {
        return Err(format!(
            "no delegated cgroup ({} is not writable by this user) and no passwordless sudo (`sudo -n true` failed) \
             to make one",
            dirs.join(", ")
        ));
    }
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    // v2: controllers on down to the base, the base and its control files the user's,
    // and this process moved into a leaf of it. v1: each base the user's.
    let script = if v2 {
        "set -e; d=$1; u=$2; p=$3; r=$(dirname \"$d\"); echo '+pids +memory' > \"$r/cgroup.subtree_control\" || true; \
         mkdir -p \"$d/coordinator-$p\"; echo '+pids +memory' > \"$d/cgroup.subtree_control\"; \
         chown \"$u\" \"$d\" \"$d/cgroup.procs\" \"$d/cgroup.subtree_control\" \"$d/cgroup.threads\"; \
         chown -R \"$u\" \"$d/coordinator-$p\"; echo \"$p\" > \"$d/coordinator-$p/cgroup.procs\""
    } else {
        "set -e; u=$2; shift 3; for d in \"$@\"; do mkdir -p \"$d\"; chown -R \"$u\" \"$d\"; done"
    };
    let mut args: Vec<String> = vec!["-n".into(), "sh".into(), "-c".into(), script.into(), "orch-cgroup".into()];
    if v2 {
        args.extend([dirs[0].clone(), format!("{uid}:{gid}"), std::process::id().to_string()]);
    } else {
        args.extend(["".into(), format!("{uid}:{gid}"), std::process::id().to_string()]);
        args.extend(dirs.iter().cloned());
    }
    let out = std::process::Command::new("sudo")
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run sudo to make a delegated cgroup: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "`sudo -n` could not make a delegated cgroup at {}: {}",
            dirs.join(", "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if bases.iter().all(|(_, dir)| writable(dir)) && coordinator_inside() {
        tracing::debug!(dirs = ?dirs, "cgroup: delegated to this user through sudo");
        Ok(())
    } else {
        Err(format!("sudo made {} but it is still not this user's to use", dirs.join(", ")))
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 200
        && name.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        && !name.starts_with('.')
}

impl Cgroup {
    /// Creates the cgroup for `name` with `limits` and returns it, or `None` where no
    /// hierarchy is writable (or `name` is not a plain file name). Does not move any
    /// process in; see [`Cgroup::enter`].
    pub fn create(name: &str, limits: &Limits) -> Option<Cgroup> {
        if !valid_name(name) {
            tracing::debug!(name, "cgroup: not a usable cgroup name; skipping the cgroup");
            return None;
        }
        Self::create_in(layout(), name, limits)
    }

    fn create_in(layout: &Layout, name: &str, limits: &Limits) -> Option<Cgroup> {
        let (dirs, v2) = dirs_for(name, layout);
        if v2
            && nix::unistd::getuid().is_root()
            && let Some(root) = &layout.v2
        {
            // Delegate the controllers down to orch/ (errors: already on, or not allowed).
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+pids +memory");
            let _ = std::fs::create_dir(root.join("orch"));
            let _ = std::fs::write(root.join("orch/cgroup.subtree_control"), "+pids +memory");
        }
        let mut made = Vec::new();
        let mut memory = false;
        for (controller, dir) in dirs {
            if let Err(e) = std::fs::create_dir_all(&dir) {
                tracing::debug!(dir = %dir.display(), "cgroup: cannot create ({e}); skipping it");
                continue;
            }
            // Each v1 directory has only its own controller's files.
            if let Some(n) = limits.processes
                && controller != "memory"
            {
                write_if_present(&dir, "pids.max", &n.to_string());
            }
            if let Some(bytes) = limits.memory_bytes {
                let bytes = bytes.to_string();
                if controller == "v2" {
                    memory |= write_if_present(&dir, "memory.max", &bytes);
                    write_if_present(&dir, "memory.swap.max", "0");
                } else if controller == "memory" && write_if_present(&dir, "memory.limit_in_bytes", &bytes) {
                    memory = true;
                    write_if_present(&dir, "memory.memsw.limit_in_bytes", &bytes);
                }
            }
            tracing::debug!(controller, dir = %dir.display(), "cgroup: created");
            made.push(dir);
        }
        if made.is_empty() { None } else { Some(Cgroup { dirs: made, v2, memory }) }
    }

    /// The cgroup a tool host created for `name`, if its directories exist.
    pub fn find(name: &str) -> Option<Cgroup> {
        if !valid_name(name) {
            return None;
        }
        Self::find_in(layout(), name)
    }

    fn find_in(layout: &Layout, name: &str) -> Option<Cgroup> {
        let (dirs, v2) = dirs_for(name, layout);
        let dirs: Vec<PathBuf> = dirs.into_iter().map(|(_, d)| d).filter(|d| d.is_dir()).collect();
        let memory = dirs.iter().any(|d| d.join("memory.max").exists() || d.join("memory.limit_in_bytes").exists());
        if dirs.is_empty() { None } else { Some(Cgroup { dirs, v2, memory }) }
    }

    /// Moves process `pid` into the cgroup, in every hierarchy.
    pub fn enter(&self, pid: u32) -> std::io::Result<()> {
        for dir in &self.dirs {
            std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
        }
        Ok(())
    }

    /// Moves the calling process, which must have a single thread, into the cgroup.
    ///
    /// In v1 this writes `0` (the calling thread) to `tasks`: the kernel then skips the
    /// global thread-group lock that a `cgroup.procs` write takes, whose RCU grace period
    /// costs 5 to 15 ms; with one thread, moving the thread moves the process. v2 only
    /// takes whole processes through `cgroup.procs`.
    pub fn enter_self(&self) -> std::io::Result<()> {
        for dir in &self.dirs {
            if self.v2 {
                std::fs::write(dir.join("cgroup.procs"), "0")?;
            } else {
                std::fs::write(dir.join("tasks"), "0")?;
            }
        }
        Ok(())
    }

    /// Whether the cgroup limits memory (so `RLIMIT_DATA` is not needed).
    pub fn limits_memory(&self) -> bool {
        self.memory
    }

    /// The cgroup's directories.
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Kills every process in the cgroup: `cgroup.kill` in v2 (Linux 5.14+), otherwise
    /// SIGKILL to each listed process until none is left (bounded: about a second).
    pub fn kill(&self) {
        if self.v2
            && let Some(dir) = self.dirs.first()
            && std::fs::write(dir.join("cgroup.kill"), "1").is_ok()
        {
            return;
        }
        for _ in 0..200 {
            let pids: Vec<i32> = self
                .dirs
                .iter()
                .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
                .flat_map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
                .collect();
            if pids.is_empty() {
                return;
            }
            for pid in pids {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Removes the cgroup's directories once they are empty (retries briefly while the
    /// killed processes exit). Failures are logged: this runs during teardown.
    pub fn remove(&self) {
        for dir in &self.dirs {
            let mut last = None;
            for attempt in 0..100 {
                match std::fs::remove_dir(dir) {
                    Ok(()) => {
                        last = None;
                        break;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        last = None;
                        break;
                    }
                    Err(e) => last = Some(e),
                }
                std::thread::sleep(Duration::from_millis(if attempt < 10 { 1 } else { 10 }));
            }
            if let Some(e) = last {
                tracing::warn!(dir = %dir.display(), "could not remove the sandbox cgroup: {e}");
            }
        }
    }
}

/// The names of the sandbox cgroups that start with `prefix`.
pub fn names_with_prefix(prefix: &str) -> Vec<String> {
    let layout = layout();
    let roots: Vec<PathBuf> = bases(layout).0.into_iter().map(|(_, dir)| dir).collect();
    let mut names: Vec<String> = roots
        .iter()
        .filter_map(|root| std::fs::read_dir(root).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Kills and removes the cgroup of sandbox `name`, if there is one.
pub fn kill_and_remove(name: &str) {
    if let Some(cgroup) = Cgroup::find(name) {
        cgroup.kill();
        cgroup.remove();
    }
}

fn write_if_present(dir: &Path, file: &str, value: &str) -> bool {
    use std::io::Write;
    let path = dir.join(file);
    // No O_CREAT: a file the controller does not have is simply not there.
    match std::fs::OpenOptions::new().write(true).open(&path).and_then(|mut f| f.write_all(value.as_bytes())) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            tracing::debug!(path = %path.display(), "cgroup: cannot set {value} ({e})");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names() {
        assert!(valid_name("exec-123-main") && valid_name("run_1.fix-2"));
        for bad in ["", "..", ".hidden", "a/b", "../../etc", "a b"] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        assert!(Cgroup::create("../escape", &Limits::default()).is_none());
    }

    #[test]
    fn v2_goes_to_the_top_v1_nests_under_our_own() {
        let layout = Layout {
            v2: None,
            v1: vec![("pids", "/sys/fs/cgroup/pids".into()), ("memory", "/sys/fs/cgroup/memory/job/1".into())],
        };
        let (dirs, v2) = dirs_for("a", &layout);
        assert!(!v2);
        assert_eq!(dirs[1].1, Path::new(&format!("/sys/fs/cgroup/memory/job/1/{}/a", base_name())));
        let layout = Layout { v2: Some("/sys/fs/cgroup".into()), v1: vec![] };
        assert_eq!(dirs_for("a", &layout).0[0].1, Path::new(&format!("/sys/fs/cgroup/{}/a", base_name())));
    }

    /// A fake cgroup2 mount in a tempdir: `cgroup.controllers` listing `controllers`,
    /// and the interface files the kernel would create in `orch/<name>`.
    fn fake_v2(controllers: &str, name: &str) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("cgroup.controllers"), controllers).unwrap();
        std::fs::write(root.path().join("cgroup.subtree_control"), "").unwrap();
        let dir = root.path().join(base_name()).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(root.path().join(base_name()).join("cgroup.subtree_control"), "").unwrap();
        for file in ["pids.max", "memory.max", "memory.swap.max", "cgroup.procs", "cgroup.kill"] {
            std::fs::write(dir.join(file), "").unwrap();
        }
        root
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn v2_is_found_at_the_usual_place_without_reading_the_mount_table() {
        let root = fake_v2("cpuset cpu io memory hugetlb pids rdma misc", "a");
        let layout = layout_at(root.path(), "0::/init.scope\n", || panic!("the mount table was read"));
        assert_eq!(layout.v2.as_deref(), Some(root.path()));
        assert!(layout.v1.is_empty());
        let (dirs, v2) = dirs_for("a", &layout);
        assert!(v2);
        // At the top of the hierarchy, not under orch's own cgroup (init.scope).
        assert_eq!(dirs, vec![("v2", root.path().join(base_name()).join("a"))]);
    }

    #[test]
    fn v2_without_pids_or_memory_is_not_used() {
        let root = fake_v2("cpu io", "a");
        let layout = layout_at(root.path(), "0::/\n", String::new);
        assert!(layout.v2.is_none() && layout.v1.is_empty(), "{layout:?}");
        assert!(Cgroup::create_in(&layout, "a", &Limits::default()).is_none());
    }

    #[test]
    fn v2_elsewhere_is_found_through_the_mount_table() {
        let root = fake_v2("memory pids", "a");
        let empty = tempfile::tempdir().unwrap();
        let mounts = format!(
            "proc /proc proc rw 0 0\ncgroup2 {} cgroup2 rw,nosuid,nodev,noexec,relatime 0 0\n",
            root.path().display()
        );
        let layout = layout_at(empty.path(), "0::/\n", || mounts);
        assert_eq!(layout.v2.as_deref(), Some(root.path()));
    }

    #[test]
    fn v2_create_delegates_sets_limits_enters_kills_and_finds() {
        let root = fake_v2("cpu memory pids", "agent-1");
        let layout = layout_at(root.path(), "0::/\n", String::new);
        let limits = Limits { processes: Some(64), memory_bytes: Some(1 << 30), ..Limits::default() };
        let cgroup = Cgroup::create_in(&layout, "agent-1", &limits).expect("a v2 cgroup");
        let dir = root.path().join(base_name()).join("agent-1");
        assert_eq!(cgroup.dirs(), std::slice::from_ref(&dir));
        assert!(cgroup.v2 && cgroup.limits_memory());
        // As root, the controllers are delegated down to orch/ and to its children (a
        // normal user's base was delegated to it already, see `delegate`).
        if nix::unistd::getuid().is_root() {
            assert_eq!(read(&root.path().join("cgroup.subtree_control")), "+pids +memory");
            assert_eq!(read(&root.path().join(base_name()).join("cgroup.subtree_control")), "+pids +memory");
        }
        assert_eq!(read(&dir.join("pids.max")), "64");
        assert_eq!(read(&dir.join("memory.max")), (1u64 << 30).to_string());
        assert_eq!(read(&dir.join("memory.swap.max")), "0");
        // v2 moves whole processes, through cgroup.procs (never `tasks`).
        cgroup.enter_self().unwrap();
        assert_eq!(read(&dir.join("cgroup.procs")), "0");
        assert!(!dir.join("tasks").exists());
        cgroup.enter(42).unwrap();
        assert_eq!(read(&dir.join("cgroup.procs")), "42");
        // Killing uses cgroup.kill where it exists, and reads no process list.
        std::fs::write(dir.join("cgroup.procs"), "").unwrap();
        cgroup.kill();
        assert_eq!(read(&dir.join("cgroup.kill")), "1");
        assert_eq!(Cgroup::find_in(&layout, "agent-1"), Some(cgroup));
        assert_eq!(Cgroup::find_in(&layout, "other"), None);
    }

    #[test]
    fn v2_without_the_memory_files_does_not_claim_a_memory_limit() {
        let root = fake_v2("pids", "a");
        let dir = root.path().join(base_name()).join("a");
        std::fs::remove_file(dir.join("memory.max")).unwrap();
        std::fs::remove_file(dir.join("memory.swap.max")).unwrap();
        let layout = layout_at(root.path(), "0::/\n", String::new);
        let cgroup = Cgroup::create_in(&layout, "a", &Limits::default()).unwrap();
        assert!(cgroup.v2 && !cgroup.limits_memory());
        assert_eq!(read(&dir.join("pids.max")), "512");
    }

    #[test]
    fn v1_nests_under_our_own_cgroup_per_controller() {
        let sys = tempfile::tempdir().unwrap();
        for c in ["pids", "memory"] {
            std::fs::create_dir_all(sys.path().join(c).join("job/1")).unwrap();
            std::fs::write(sys.path().join(c).join("tasks"), "").unwrap();
        }
        let own = "9:name=systemd:/\n8:pids:/job/1\n4:memory:/job/1\n1:cpu,cpuacct:/\n0::/\n";
        let layout = layout_at(sys.path(), own, || panic!("the mount table was read"));
        assert!(layout.v2.is_none());
        let (dirs, v2) = dirs_for("a", &layout);
        assert!(!v2);
        assert_eq!(
            dirs,
            vec![
                ("pids", sys.path().join("pids/job/1").join(base_name()).join("a")),
                ("memory", sys.path().join("memory/job/1").join(base_name()).join("a"))
            ]
        );
        // Each controller's directory gets its own limit files only.
        let pids = sys.path().join("pids/job/1").join(base_name()).join("a");
        let memory = sys.path().join("memory/job/1").join(base_name()).join("a");
        std::fs::create_dir_all(&pids).unwrap();
        std::fs::create_dir_all(&memory).unwrap();
        std::fs::write(pids.join("pids.max"), "").unwrap();
        for file in ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "tasks"] {
            std::fs::write(memory.join(file), "").unwrap();
        }
        std::fs::write(pids.join("tasks"), "").unwrap();
        let cgroup = Cgroup::create_in(&layout, "a", &Limits::default()).unwrap();
        assert!(!cgroup.v2 && cgroup.limits_memory());
        assert_eq!(read(&pids.join("pids.max")), "512");
        assert_eq!(read(&memory.join("memory.limit_in_bytes")), (4u64 << 30).to_string());
        assert_eq!(read(&memory.join("memory.memsw.limit_in_bytes")), (4u64 << 30).to_string());
        // v1 moves the calling thread through `tasks` (see enter_self).
        cgroup.enter_self().unwrap();
        assert_eq!((read(&pids.join("tasks")), read(&memory.join("tasks"))), ("0".into(), "0".into()));
    }
}
