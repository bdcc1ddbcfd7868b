//! Smoke tests of `orch sandbox run` through the real binary: the landlock backend
//! (what is allowed, what is denied, exit codes, the uid drop as root), the container
//! backend (status, output, missing image, removal on a signal) and one `orch exec`
//! whose Bash tool tries to escape. The full containment suite, for both backends, is
//! `containment.rs`; these fail as soon as the basic confinement breaks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::{Read as _, Write as _};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use orch_testkit::mock::{MockServer, Step};
use serde_json::json;

fn orch() -> Command {
    let mut cmd = Command::cargo_bin("orch").unwrap();
    for var in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ORCH_PROVIDER", "ORCH_MODEL", "ORCH_SCRIPT", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("NO_COLOR", "1");
    cmd
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// `orch sandbox run --write <w> [flags] -- sh -c <script>` in `w`.
fn sandboxed(w: &Path, flags: &[&str], script: &str) -> (i32, String, String) {
    let out = orch()
        .current_dir(w)
        .args(["sandbox", "run", "--write"])
        .arg(w)
        .args(flags)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A writable root inside a fresh private (0700) temporary directory, as tests get them.
fn workdir() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    std::fs::create_dir(&w).unwrap();
    (dir, w)
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn writes_inside_the_write_root_and_nowhere_else() {
    let (dir, w) = workdir();
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (code, out, err) = sandboxed(&w, &[], "echo hi > a && cat a && mkdir -p sub/deeper && echo ok > sub/deeper/b");
    assert_eq!((code, out.as_str()), (0, "hi\n"), "{err}");
    assert_eq!(std::fs::read_to_string(w.join("sub/deeper/b")).unwrap(), "ok\n");
    // The files belong to the owner of the directory again afterwards.
    let meta = std::fs::metadata(w.join("a")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), nix::unistd::geteuid().as_raw());

    let attempts = [
        format!("echo x > '{}/by-path'", outside.display()),
        "echo x > ../by-dotdot".to_string(),
        "echo x > /etc/orch-escape".to_string(),
        format!("ln -s '{}' link && echo x > link/by-symlink", outside.display()),
        "ln -s /etc etc-link && echo x > etc-link/orch-escape".to_string(),
    ];
    for attempt in attempts {
        let (code, _, err) = sandboxed(&w, &[], &attempt);
        assert_ne!(code, 0, "{attempt} succeeded");
        assert!(err.contains("Permission denied"), "{attempt}: {err}");
    }
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "something was written outside");
    assert!(!dir.path().join("by-dotdot").exists());
    assert!(!Path::new("/etc/orch-escape").exists());
}

#[test]
fn secrets_outside_the_read_roots_stay_unreadable() {
    let (dir, w) = workdir();
    let ssh = dir.path().join("home/.ssh");
    std::fs::create_dir_all(&ssh).unwrap();
    std::fs::write(ssh.join("id_ed25519"), "PRIVATE KEY").unwrap();
    std::fs::set_permissions(dir.path().join("home"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(ssh.join("id_ed25519"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let me = std::process::id();
    let script = format!(
        "cat '{}/id_ed25519'; cat /proc/{me}/environ; ls /root; cat /etc/hostname >/dev/null && echo can-read-etc",
        ssh.display()
    );
    let out = orch()
        .current_dir(&w)
        .env("HOME", dir.path().join("home"))
        .env("ORCH_TEST_MARKER", "secret-marker-123")
        .args(["sandbox", "run", "--write"])
        .arg(&w)
        .args(["--", "sh", "-c", &script])
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!stdout.contains("PRIVATE KEY"), "{stdout}");
    assert!(!stdout.contains("secret-marker-123"), "the sandbox read the test's environment");
    assert!(stdout.contains("can-read-etc"), "{stdout} {stderr}");
    // Refused, or (as root, where the sandbox mounts a `/proc` that shows only its own
    // processes) not there at all.
    let refused = stderr.matches("Permission denied").count() + stderr.matches("No such file or directory").count();
    assert_eq!(refused, 3, "{stderr}");
}

#[test]
fn the_environment_is_filtered() {
    let (_dir, w) = workdir();
    let out = orch()
        .current_dir(&w)
        .env("ANTHROPIC_API_KEY", "sk-should-not-pass")
        .env("GITHUB_TOKEN", "ghp-should-not-pass")
        .args(["sandbox", "run", "--write"])
        .arg(&w)
        .args(["--", "env"])
        .output()
        .unwrap();
    let env = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(!env.contains("should-not-pass"), "{env}");
    assert!(env.lines().any(|l| l.starts_with("HOME=") && l.contains("orch-sandbox")), "{env}");
    assert!(env.lines().any(|l| l.starts_with("TMPDIR=")), "{env}");
}

#[test]
fn as_root_the_private_home_is_a_fresh_tmpfs_of_each_run() {
    if !nix::unistd::geteuid().is_root() {
        return;
    }
    let (_dir, w) = workdir();
    let run = |script: &str| {
        let out = orch()
            .current_dir(&w)
            .args(["sandbox", "run", "--write"])
            .arg(&w)
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout} {stderr}");
        stdout.into_owned()
    };
    let first = run(
        r#"echo "home=$HOME"; stat -f -c "fs=%T" "$HOME"; stat -c "owner=%u" "$HOME"; id -u; echo left > "$HOME/left-behind"; ls -A "$HOME""#,
    );
    let home = first.lines().find_map(|l| l.strip_prefix("home=")).unwrap().to_string();
    assert!(first.contains("fs=tmpfs"), "{first}");
    let uid = first.lines().nth(3).unwrap_or_default();
    assert!(first.contains(&format!("owner={uid}")), "the sandbox uid owns its home: {first}");
    assert!(first.contains("left-behind"), "{first}");
    // The next run starts empty, and nothing was written to the host's file system.
    assert_eq!(run(r#"ls -A "$HOME"; echo end"#).trim(), "end");
    let outside: Vec<_> = std::fs::read_dir(&home).unwrap().collect();
    assert!(outside.is_empty(), "{home} on the host: {outside:?}");
}

#[test]
fn tcp_to_the_host_needs_network_full() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut buf = String::new();
        stream.read_to_string(&mut buf).unwrap();
        buf
    });
    let (_dir, w) = workdir();
    let script = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo connected");
    let (code, out, err) = sandboxed(&w, &[], &format!("bash -c '{script}'"));
    assert_ne!(code, 0);
    assert!(!out.contains("connected"), "{out}");
    assert!(err.contains("Operation not permitted") || err.contains("Permission denied"), "{err}");
    let (code, out, err) = sandboxed(&w, &["--network", "full"], &format!("bash -c '{script}'"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("connected"));
    assert_eq!(accepted.join().unwrap(), "hello\n");
}

#[test]
fn socketpair_works_but_new_unix_sockets_do_not() {
    let (_dir, w) = workdir();
    let pair = r#"perl -e 'use Socket; socketpair(my $a, my $b, AF_UNIX, SOCK_STREAM, PF_UNSPEC) or die "socketpair: $!\n"; print "pair ok\n"'"#;
    let (code, out, err) = sandboxed(&w, &[], pair);
    assert_eq!((code, out.as_str()), (0, "pair ok\n"), "{err}");
    let unix =
        r#"perl -e 'use Socket; socket(my $s, AF_UNIX, SOCK_STREAM, 0) or die "socket: $!\n"; print "socket ok\n"'"#;
    let (code, out, err) = sandboxed(&w, &[], unix);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("socket: Operation not permitted"), "{err}");
}

#[test]
fn exit_codes_follow_env_and_timeout() {
    let (_dir, w) = workdir();
    assert_eq!(sandboxed(&w, &[], "exit 7").0, 7);
    assert_eq!(sandboxed(&w, &[], "kill -TERM $$").0, 143);
    let run =
        |args: &[&str]| orch().current_dir(&w).args(["sandbox", "run", "--write"]).arg(&w).args(args).output().unwrap();
    let out = run(&["--", "/nonexistent/orch-command"]);
    assert_eq!(out.status.code(), Some(127), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::write(w.join("not-executable"), "#!/bin/sh\n").unwrap();
    let out = run(&["--", "./not-executable"]);
    assert_eq!(out.status.code(), Some(126));
    // The sandbox itself failing: a bad policy, an unavailable backend.
    let out = run(&["--read", "/nonexistent/orch-root", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--read /nonexistent/orch-root"));
    let out = orch().args(["sandbox", "run", "--network", "sideways", "--", "true"]).output().unwrap();
    assert_eq!(out.status.code(), Some(125), "usage errors must not look like the command's status");
    let out = run(&["--backend", "container", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs an image: pass --image"));
    // Output streams live and stdio is inherited.
    let out = run(&["--", "sh", "-c", "echo out; echo err >&2"]);
    assert_eq!((out.stdout.as_slice(), out.stderr.as_slice()), (&b"out\n"[..], &b"err\n"[..]));
}

#[test]
fn as_root_the_command_runs_as_an_unprivileged_uid() {
    let (_dir, w) = workdir();
    let (code, out, err) =
        sandboxed(&w, &[], "id -u; id -G; grep -E '^Cap(Eff|Prm)' /proc/self/status; cat /proc/self/cgroup");
    assert_eq!(code, 0, "{err}");
    let mut lines = out.lines();
    let uid: u32 = lines.next().unwrap().parse().unwrap();
    let groups = lines.next().unwrap();
    if is_root() {
        assert!(orch_sandbox::UID_RANGE.contains(&uid), "uid {uid}");
        assert_eq!(groups, uid.to_string(), "supplementary groups remain");
        // The per-agent cgroup, where a hierarchy is writable (this machine's is).
        let writable = ["/sys/fs/cgroup/pids", "/sys/fs/cgroup/cgroup.subtree_control"]
            .iter()
            .any(|p| nix::unistd::access(*p, nix::unistd::AccessFlags::W_OK).is_ok());
        if writable {
            assert!(out.contains("/orch/sandbox-"), "not in a per-agent cgroup: {out}");
        }
    } else {
        assert_eq!(uid, nix::unistd::getuid().as_raw());
    }
    assert!(out.contains("CapEff:\t0000000000000000") && out.contains("CapPrm:\t0000000000000000"), "{out}");
}

#[test]
fn toolchains_still_work_inside() {
    let (_dir, w) = workdir();
    let (code, out, err) = sandboxed(&w, &[], "cargo --version && git --version");
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("cargo "), "{out}");
    if Command::new("node").arg("--version").output().is_ok_and(|o| o.status.success()) {
        // V8 reserves a large address space; the memory limit must not break it.
        let (code, out, err) = sandboxed(&w, &[], "node -e 'const a = new Array(5e6).fill(7); console.log(a.length)'");
        assert_eq!((code, out.as_str()), (0, "5000000\n"), "{err}");
    }
}

/// `--backend container`: the command's status, 126/127, streamed output, a missing
/// image, and no container left behind. (Timeouts, limits and escapes: containment.rs.)
/// Needs the engine and `orch-test:busybox` (`.ci/docker.sh`); fails without them unless
/// `ORCH_SKIP_DOCKER_TESTS=1`.
#[test]
fn the_container_backend_runs_the_command_in_a_container() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping a container backend test");
        return;
    }
    let (_dir, w) = workdir();
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:busybox".into());
    let flags = ["--backend", "container", "--image", image.as_str()];
    let (code, out, err) =
        sandboxed(&w, &flags, "test -e /.dockerenv && echo in-docker; id -u; echo made > f; echo err >&2; exit 7");
    assert_eq!(code, 7, "is the engine up and the image built (.ci/docker.sh)? {err}");
    let mut lines = out.lines();
    assert_eq!(lines.next(), Some("in-docker"), "{out}");
    assert_ne!(lines.next(), Some("0"), "the command ran as root in the container");
    assert_eq!(err, "err\n");
    assert_eq!(std::fs::read_to_string(w.join("f")).unwrap(), "made\n");
    let meta = std::fs::metadata(w.join("f")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), nix::unistd::geteuid().as_raw(), "not handed back");
    let run = |args: &[&str]| {
        orch().current_dir(&w).args(["sandbox", "run", "--write"]).arg(&w).args(flags).args(args).output().unwrap()
    };
    assert_eq!(run(&["--", "/nonexistent/orch-command"]).status.code(), Some(127));
    std::fs::write(w.join("not-executable"), "#!/bin/sh\n").unwrap();
    assert_eq!(run(&["--", "./not-executable"]).status.code(), Some(126));
    let out = orch()
        .current_dir(&w)
        .args(["sandbox", "run", "--backend", "container", "--image", "orch-test:no-such-image", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`orch-test:no-such-image` is not on the Docker engine"), "{err}");
    let left = Command::new("docker").args(["ps", "-aq", "--filter", "label=orch.run=sandbox"]).output().unwrap();
    let ours: Vec<_> = String::from_utf8_lossy(&left.stdout).lines().map(str::to_string).collect();
    for id in ours {
        let pid = Command::new("docker")
            .args(["inspect", "--format", "{{index .Config.Labels \"orch.pid\"}}", &id])
            .output()
            .unwrap();
        let pid: u32 = String::from_utf8_lossy(&pid.stdout).trim().parse().unwrap_or(0);
        assert!(alive(pid as i32), "container {id} of a finished orch (pid {pid}) was left behind");
    }
}

/// SIGTERM to `orch sandbox run --backend container` removes the container and exits
/// 143.
#[test]
fn a_signal_removes_the_container() {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping a container backend test");
        return;
    }
    let (_dir, w) = workdir();
    let image = std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:busybox".into());
    let mut child = orch()
        .current_dir(&w)
        .args(["sandbox", "run", "--write"])
        .arg(&w)
        .args(["--backend", "container", "--image", &image, "--", "sh", "-c", "echo up > up; sleep 600"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !w.join("up").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(w.join("up").exists(), "the command did not start");
    let filter = format!("label=orch.pid={}", child.id());
    let listed = || {
        let out = Command::new("docker").args(["ps", "-aq", "--filter", &filter]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert!(!listed().is_empty(), "no labelled container while the command runs");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    assert_eq!(listed(), "", "the container outlived orch");
}

#[test]
fn the_unconfined_backend_warns() {
    let (_dir, w) = workdir();
    let out = orch().current_dir(&w).args(["sandbox", "run", "--backend", "none", "--", "true"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("UNCONFINED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_tools_cannot_read_the_coordinator_or_write_outside() {
    let (_dir, w) = workdir();
    let mock = MockServer::start().await;
    // The shell's parent is the tool host; the host's parent is orch (the coordinator).
    // The test writes orch's pid into `orch.pid` once it has started it (as root the
    // sandbox's `/proc` does not show the coordinator, so the chain of parents cannot
    // find it).
    let snoop = "for _ in $(seq 200); do [ -s orch.pid ] && break; sleep 0.05; done; orch=$(cat orch.pid); \
                 echo coordinator=$orch; cat /proc/$orch/environ; head -c 16 /proc/$orch/mem; echo exit=$?";
    mock.push_all([
        Step::tool("Bash", json!({"command": snoop})),
        Step::tool("Bash", json!({"command": "echo x > /etc/orch-escape; id -u"})),
        Step::tool("Bash", json!({"command": "echo fine > inside.txt && cat inside.txt"})),
        // A process that leaves the command's group is killed when the command ends.
        Step::tool("Bash", json!({"command": "setsid sleep 600 > /dev/null 2>&1 & echo $! > escaped.pid"})),
        Step::tool("Bash", json!({"command": "kill -0 $(cat escaped.pid) 2>/dev/null && echo ALIVE || echo GONE"})),
        Step::text("done"),
    ]);
    let mut child = orch()
        .current_dir(&w)
        .env("ANTHROPIC_API_KEY", "k-secret-in-coordinator")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--allow-outside-repo", "--tools", "Bash", "--permission-mode", "bypass", "go"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let orch_pid = child.id();
    std::fs::write(w.join("orch.pid"), orch_pid.to_string()).unwrap();
    let status = tokio::task::spawn_blocking(move || {
        let mut err = String::new();
        child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
        (child.wait().unwrap(), err)
    })
    .await
    .unwrap();
    assert!(status.0.success(), "{}", status.1);
    let requests = mock.requests();
    let result =
        |i: usize| requests[i].messages().last().unwrap()["content"][0]["content"].as_str().unwrap().to_string();
    let snooped = result(1);
    assert!(snooped.contains(&format!("coordinator={orch_pid}")), "{snooped}");
    assert!(!snooped.contains("k-secret-in-coordinator"), "the tool read the coordinator's environment: {snooped}");
    let refused = snooped.matches("Permission denied").count() + snooped.matches("No such file or directory").count();
    assert!(refused >= 2, "{snooped}");
    let escape = result(2);
    assert!(escape.contains("Permission denied"), "{escape}");
    assert!(!Path::new("/etc/orch-escape").exists());
    if is_root() {
        let uid: u32 = escape.lines().find_map(|l| l.trim().parse().ok()).unwrap();
        assert!(orch_sandbox::UID_RANGE.contains(&uid), "{escape}");
    }
    assert!(result(3).contains("fine"), "{}", result(3));
    assert_eq!(std::fs::read_to_string(w.join("inside.txt")).unwrap(), "fine\n");
    assert_eq!(result(5), "GONE", "a setsid escapee outlived its Bash call");
    let _ = std::io::stdout().flush();
}
