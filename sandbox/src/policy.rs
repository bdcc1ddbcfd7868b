//! What a sandbox allows: readable and writable roots, masked paths, network, resource
//! limits and the environment. A policy is plain data; backends enforce it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use orch_types::{Backend, Network};

/// Resource limits. `None` leaves a limit unset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// CPU time of each process, in seconds (RLIMIT_CPU).
    pub cpu_seconds: Option<u64>,
    /// Memory of the whole sandbox, in bytes (cgroup `memory.max`, or per process
    /// RLIMIT_DATA where no cgroup is writable; never RLIMIT_AS, which breaks runtimes
    /// that reserve large address spaces).
    pub memory_bytes: Option<u64>,
    /// Processes (cgroup `pids.max`, and RLIMIT_NPROC for the sandbox uid).
    pub processes: Option<u64>,
    /// Largest file a process may write, in bytes (RLIMIT_FSIZE).
    pub file_size_bytes: Option<u64>,
    /// Wall-clock limit of one command.
    #[serde(with = "duration_secs")]
    pub wall_time: Option<Duration>,
    /// Output kept from one command, in bytes.
    pub output_bytes: Option<u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            cpu_seconds: Some(3_600),
            memory_bytes: Some(4 << 30),
            processes: Some(512),
            file_size_bytes: Some(1 << 30),
            wall_time: Some(Duration::from_secs(600)),
            output_bytes: Some(1 << 20),
        }
    }
}

impl Limits {
    /// The default limits, with `wall_time` as the wall-clock limit of one command.
    pub fn with_wall_time(wall_time: Option<Duration>) -> Limits {
        // Every field named: a new limit must say what a command gets.
        let Limits { cpu_seconds, memory_bytes, processes, file_size_bytes, wall_time: _, output_bytes } =
            Limits::default();
        Limits { cpu_seconds, memory_bytes, processes, file_size_bytes, wall_time, output_bytes }
    }
}

mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs = Option::<f64>::deserialize(d)?;
        match secs {
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Some(Duration::from_secs_f64(s))),
            Some(s) => Err(serde::de::Error::custom(format!("{s} is not a duration in seconds"))),
            None => Ok(None),
        }
    }
}

/// Everything a backend needs to confine one tool host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub backend: Backend,
    /// Directories and files readable (and executable), listed one by one.
    pub read: Vec<PathBuf>,
    /// Directories writable (and readable): the worktree, a private tmp and home.
    pub write: Vec<PathBuf>,
    pub network: Network,
    pub limits: Limits,
    /// The whole environment of the sandboxed processes (already filtered).
    pub env: BTreeMap<String, String>,
    /// The working directory inside the sandbox.
    pub cwd: PathBuf,
    /// The container image (container backend only).
    pub image: Option<String>,
    /// The unprivileged uid (and gid) the sandbox runs as when orch runs as root; the
    /// coordinator picks it with [`crate::sandbox_uid`] and hands the writable roots to
    /// it with [`crate::prepare_writable`]. Ignored when orch is not root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// A name unique among the sandboxes alive on this machine, such as
    /// `<run>-<agent>`: it names the per-agent cgroup `orch/<name>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Landlock backend as root only: a directory (one of `write`, owned by root and
    /// shared by every sandbox) on which the sandbox mounts a fresh tmpfs, owned by its
    /// uid and as large as its memory limit, in its own mount namespace, to serve as
    /// its private tmp and home. Nothing is created on or removed from the host's file
    /// system per sandbox, and what the sandbox writes there vanishes with it. `None`:
    /// the private tmp and home are ordinary directories the caller made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_tmpfs: Option<PathBuf>,
    /// Existing files and directories inside the roots that sandboxed commands must not
    /// read (the paths an agent's `Read` deny rules cover when it starts): covered with
    /// empty mounts as root and in containers, left out of the commands' Landlock rules
    /// as a normal user (see [`crate::mask`]). Absolute, never through a symlink.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub masked: Vec<PathBuf>,
    /// Under [`Network::Proxy`]: the port the proxy answers on inside the sandbox and
    /// the socket that receives its listener (see [`crate::egress`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<crate::egress::Egress>,
}

/// Environment variables passed into a sandbox when set outside it. Nothing that looks
/// like a credential is ever on this list.
pub const ENV_ALLOWLIST: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TERM",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "GOPATH",
    "GOROOT",
    "GOCACHE",
    "GOMODCACHE",
    "GOFLAGS",
    "NODE_PATH",
    "JAVA_HOME",
    "PYTHONPATH",
    "VIRTUAL_ENV",
    "CI",
    "NO_COLOR",
];

/// Variable names that never pass, whatever an allowlist says.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "SESSION"]
        .iter()
        .any(|w| upper.contains(w))
        || upper.starts_with("AWS_")
        || upper.starts_with("ACTIONS_")
        || upper.starts_with("BASH_FUNC_")
        || matches!(upper.as_str(), "BASH_ENV" | "ENV" | "SHELLOPTS" | "LD_PRELOAD" | "LD_LIBRARY_PATH")
}

/// The sandbox environment: allowlisted variables from `outer`, minus secrets, plus
/// `HOME` and `TMPDIR` pointing at the private directories. Since `HOME` moves, a
/// rustup toolchain under the outer home would be lost: `RUSTUP_HOME` and `CARGO_HOME`
/// are pointed at the outer `~/.rustup` and `~/.cargo` when those exist and the
/// variables are unset (both are read roots by default, see [`default_read_roots`]).
pub fn filter_env<'a>(
    outer: impl IntoIterator<Item = (&'a str, &'a str)>,
    home: &Path,
    tmp: &Path,
) -> BTreeMap<String, String> {
    let mut outer_home = None;
    let mut env: BTreeMap<String, String> = outer
        .into_iter()
        .inspect(|(k, v)| {
            if *k == "HOME" {
                outer_home = Some(PathBuf::from(v));
            }
        })
        .filter(|(k, _)| ENV_ALLOWLIST.contains(k) && !is_secret_name(k))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if let Some(outer_home) = outer_home.filter(|h| h.is_absolute()) {
        for (var, sub) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
            let dir = outer_home.join(sub);
            if !env.contains_key(var) && dir.is_dir() {
                env.insert(var.into(), dir.display().to_string());
            }
        }
    }
    env.insert("HOME".into(), home.display().to_string());
    env.insert("TMPDIR".into(), tmp.display().to_string());
    env.entry("PATH".into()).or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
    env
}

/// System and toolchain directories readable inside a sandbox, one by one: never all
/// of `$HOME`, never `$RUNNER_TEMP`. Only those that exist are returned.
///
/// All of `/proc` is readable, because Landlock rules bind inodes and `/proc/self` of
/// the tool host is not `/proc/self` of the commands it forks. Other processes' secrets
/// stay out of reach all the same: `/proc/<pid>/environ`, `mem`, `fd` and friends need
/// ptrace access, which Landlock denies across its domain boundary, and which the
/// per-agent uid denies too when orch runs as root. The character devices `/dev/null`,
/// `/dev/zero` and `/dev/full` are also writable under Landlock (see
/// `landlock::RW_DEVICES`).
pub fn default_read_roots(home: Option<&Path>) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = [
        "/usr",
        "/bin",
        "/sbin",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/etc",
        "/opt",
        "/nix/store",
        "/snap",
        "/dev/null",
        "/dev/zero",
        "/dev/random",
        "/dev/urandom",
        "/dev/full",
        "/dev/tty",
        "/proc",
        "/run/systemd/resolve",
        "/sys/devices/system/cpu",
        "/sys/fs/cgroup",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    if let Some(home) = home {
        for sub in [
            ".cargo/bin",
            ".cargo/registry",
            ".cargo/git",
            ".rustup",
            ".pyenv",
            ".nvm",
            ".npm",
            "go/pkg/mod",
            ".m2/repository",
        ] {
            roots.push(home.join(sub));
        }
    }
    roots.retain(|p| p.exists());
    roots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_pass() {
        let outer = [
            ("PATH", "/bin"),
            ("ANTHROPIC_API_KEY", "sk"),
            ("GITHUB_TOKEN", "t"),
            ("LANG", "C.UTF-8"),
            ("HOME", "/root"),
            ("BASH_ENV", "/x"),
        ];
        let env = filter_env(outer, Path::new("/sb/home"), Path::new("/sb/tmp"));
        assert_eq!(env.get("PATH").map(String::as_str), Some("/bin"));
        assert_eq!(env.get("HOME").map(String::as_str), Some("/sb/home"));
        assert_eq!(env.get("TMPDIR").map(String::as_str), Some("/sb/tmp"));
        assert!(
            !env.contains_key("ANTHROPIC_API_KEY")
                && !env.contains_key("GITHUB_TOKEN")
                && !env.contains_key("BASH_ENV")
        );
        assert!(is_secret_name("OPENAI_API_KEY") && is_secret_name("my_password") && !is_secret_name("LANG"));
    }

    #[test]
    fn read_roots_never_include_home_itself() {
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let roots = default_read_roots(home.as_deref());
        if let Some(home) = &home {
            assert!(!roots.contains(home));
        }
        assert!(roots.iter().all(|p| p.exists()));
    }

    #[test]
    fn policy_round_trips_as_json() {
        let p = Policy {
            backend: Backend::Landlock,
            read: vec!["/usr".into()],
            write: vec!["/w".into()],
            network: Network::None,
            limits: Limits::default(),
            env: BTreeMap::new(),
            cwd: "/w".into(),
            image: None,
            uid: Some(1_900_000_123),
            name: Some("run-agent".into()),
            private_tmpfs: None,
            masked: vec!["/w/.env".into()],
            egress: None,
        };
        let json = serde_json::to_string(&p).unwrap();
        assert_eq!(serde_json::from_str::<Policy>(&json).unwrap(), p);
        // The optional fields may be left out.
        let short = json.replace(",\"uid\":1900000123", "").replace(",\"name\":\"run-agent\"", "");
        assert!(!short.contains("uid") && !short.contains("run-agent"), "{short}");
        let p2: Policy = serde_json::from_str(&short).unwrap();
        assert_eq!((p2.uid, p2.name), (None, None));
    }

    #[test]
    fn toolchain_homes_follow_the_outer_home() {
        let outer = tempfile::tempdir().unwrap();
        std::fs::create_dir(outer.path().join(".rustup")).unwrap();
        let home = outer.path().display().to_string();
        let env = filter_env([("HOME", home.as_str())], Path::new("/sb/home"), Path::new("/sb/tmp"));
        assert_eq!(env.get("RUSTUP_HOME").map(PathBuf::from), Some(outer.path().join(".rustup")));
        assert!(!env.contains_key("CARGO_HOME"), "no ~/.cargo there");
        let env = filter_env([("HOME", home.as_str()), ("RUSTUP_HOME", "/x")], Path::new("/h"), Path::new("/t"));
        assert_eq!(env.get("RUSTUP_HOME").map(String::as_str), Some("/x"));
    }
}
