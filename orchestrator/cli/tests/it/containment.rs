//! The containment suite: one table of escape attempts (and of what must keep working),
//! `tests/containment/cases.yaml`, run against every backend through the real binary:
//! `orch sandbox run --backend landlock` and `--backend container --image
//! orch-test:tools` (busybox, glibc, bash, git and python3; `.ci/docker.sh` builds it),
//! one test per backend and group. The tool-level cases (a planted
//! symlink read through `Read`, `Grep` and `Glob`; endless `Bash` output) go through
//! `orch exec --provider scripted`, also once per backend.
//!
//! Every case runs in a fresh fixture, and besides its own `expect` every case checks:
//! - nothing changed outside the worktree (the fixture tree is compared before and
//!   after: a world-writable `outside/`, another agent's worktree `sibling/`, a fake
//!   `home/.ssh`, a secret dir, the fixture root itself);
//! - the test's TCP, UDP and Unix listeners accepted or received nothing;
//! - the victim process outside the sandbox is still alive;
//! - no process tagged with the case's `{tag}` (`sleep {tag}`, the probe's fork bomb)
//!   survived the orch process.
//!
//! The escape attempts that need system calls use `containment/probe.c`, compiled here
//! with the system C compiler (dynamically linked against glibc, which the host and the
//! busybox test image both have). The container half needs the Docker engine and the
//! image that `.ci/docker.sh` provides and FAILS without them; `ORCH_SKIP_DOCKER_TESTS=1`
//! skips it on purpose. Run as root (as CI does) the landlock half also exercises the
//! uid drop and the cgroup; as non-root the same attempts must fail by Landlock and
//! seccomp alone.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use serde::Deserialize;

const CASES: &str = include_str!("containment/cases.yaml");
const PROBE_SOURCE: &str = include_str!("containment/probe.c");
const SECRET_ENV: &str = "coordinator-secret-4711";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Landlock,
    Container,
}

impl Backend {
    fn key(self) -> &'static str {
        match self {
            Backend::Landlock => "landlock",
            Backend::Container => "container",
        }
    }

    fn flags(self) -> Vec<String> {
        match self {
            Backend::Landlock => vec!["--backend".into(), "landlock".into()],
            Backend::Container => vec!["--backend".into(), "container".into(), "--image".into(), image()],
        }
    }
}

fn image() -> String {
    std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    group: String,
    run: String,
    #[serde(default)]
    timeout: Option<String>,
    #[serde(default)]
    skip: BTreeMap<String, String>,
    #[serde(default)]
    git: bool,
    #[serde(default)]
    needs: Option<String>,
    /// `orch sandbox run --network`: `none` (the default) or `full`.
    #[serde(default)]
    network: Option<String>,
    expect: Expect,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    code: Option<i32>,
    #[serde(default)]
    fails: bool,
    #[serde(default)]
    stdout_has: Vec<String>,
    #[serde(default)]
    stdout_lacks: Vec<String>,
    max_forks: Option<u64>,
    /// Most live processes with `{tag}` in their arguments seen at once from outside.
    max_procs: Option<usize>,
    /// Most processes (zombies included) named `c{tag}`, the probe's chain, seen at once
    /// from outside; none may be left when orch has exited.
    max_chain: Option<usize>,
    max_mib: Option<u64>,
    max_stdout: Option<usize>,
    max_secs: Option<u64>,
    file: Option<(String, String)>,
}

fn cases() -> Vec<Case> {
    orch_workflows::yaml::load_as("containment/cases.yaml", CASES.as_bytes())
        .unwrap_or_else(|e| panic!("{}", e.render()))
}

fn orch() -> Command {
    let mut cmd = Command::cargo_bin("orch").unwrap();
    for var in ["ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ORCH_PROVIDER", "ORCH_MODEL", "ORCH_SCRIPT", "RUST_LOG"] {
        cmd.env_remove(var);
    }
    cmd.env("NO_COLOR", "1").env("ORCH_TEST_SECRET", SECRET_ENV);
    cmd
}

/// Whether the container half runs: `false` only with `ORCH_SKIP_DOCKER_TESTS=1`; a
/// missing engine or image fails the test.
fn docker_ready() -> bool {
    if std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1") {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping the container half of the containment suite");
        return false;
    }
    let out = Command::new("docker").args(["image", "inspect", "--format", "{{.Id}}", &image()]).output();
    match out {
        Ok(out) if out.status.success() => true,
        Ok(out) => panic!(
            "the container backend needs the Docker engine and the image `{}`: {}. Run `.ci/docker.sh`, or set \
             ORCH_SKIP_DOCKER_TESTS=1 to skip these tests on purpose",
            image(),
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "the container backend needs the Docker engine, and the docker CLI cannot run: {e}. Run `.ci/docker.sh`, \
             or set ORCH_SKIP_DOCKER_TESTS=1 to skip these tests on purpose"
        ),
    }
}

/// The probe, compiled once per test process.
fn probe_binary() -> &'static Path {
    static PROBE: OnceLock<PathBuf> = OnceLock::new();
    PROBE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap().keep();
        let source = dir.join("probe.c");
        std::fs::write(&source, PROBE_SOURCE).unwrap();
        let out = dir.join("probe");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&cc).args(["-O2", "-Wall", "-o"]).arg(&out).arg(&source).status();
        match status {
            Ok(s) if s.success() => out,
            other => panic!("the containment suite needs a C compiler (`{cc}`, or $CC) to build its probe: {other:?}"),
        }
    })
}

fn host_ip() -> String {
    let found = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("10.255.255.255:9").and_then(|()| s.local_addr()))
        .map(|a| a.ip())
        .ok()
        .filter(|ip| !ip.is_unspecified() && !ip.is_loopback());
    found.map_or_else(|| "127.0.0.1".into(), |ip| ip.to_string())
}

fn tag() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::SeqCst);
    // `sleep` takes it as seconds: large, and unique among concurrent test processes.
    (7_000_000 + (std::process::id() % 50_000) * 20 + n).to_string()
}

/// One case's world: the worktree and everything around it that must not change.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    w: PathBuf,
    tools: PathBuf,
    tcp: TcpListener,
    udp: UdpSocket,
    unix: UnixListener,
    victim: Child,
    vars: BTreeMap<&'static str, String>,
}

impl Fixture {
    fn new(git: bool) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let mode = |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        // Open to everyone, so only the sandbox (not file modes) stands in the way.
        mode(&root, 0o755);
        let w = root.join("w");
        let outside = root.join("outside");
        let sibling = root.join("sibling");
        let home = root.join("home");
        let secret = root.join("secret");
        let tools = root.join("tools");
        for d in [&w, &outside, &sibling, &home.join(".ssh"), &secret, &tools] {
            std::fs::create_dir_all(d).unwrap();
        }
        for d in [&outside, &sibling] {
            mode(d, 0o777);
        }
        for d in [&home, &home.join(".ssh"), &secret] {
            mode(d, 0o755);
        }
        std::fs::write(sibling.join("theirs.txt"), "their work\n").unwrap();
        mode(&sibling.join("theirs.txt"), 0o666);
        std::fs::write(home.join(".ssh/id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
        mode(&home.join(".ssh/id_ed25519"), 0o644);
        std::fs::write(secret.join("secret.txt"), "TOPSECRET\n").unwrap();
        mode(&secret.join("secret.txt"), 0o644);
        let probe = tools.join("probe");
        std::fs::copy(probe_binary(), &probe).unwrap();
        mode(&probe, 0o755);
        if git {
            let git = |args: &[&str]| {
                let ok = Command::new("git").current_dir(&w).args(args).output().unwrap();
                assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
            };
            std::fs::write(w.join("README"), "hello\n").unwrap();
            git(&["init", "-q"]);
            git(&["add", "README"]);
            git(&["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "first commit"]);
        }

        let tcp = TcpListener::bind("0.0.0.0:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let sock = root.join("listener.sock");
        let unix = UnixListener::bind(&sock).unwrap();
        unix.set_nonblocking(true).unwrap();
        mode(&sock, 0o777);
        let victim =
            Command::new("sleep").arg("1000").env("ORCH_TEST_SECRET", SECRET_ENV).stdin(Stdio::null()).spawn().unwrap();

        let vars = BTreeMap::from([
            ("w", w.display().to_string()),
            ("outside", outside.display().to_string()),
            ("sibling", sibling.display().to_string()),
            ("home", home.display().to_string()),
            ("probe", probe.display().to_string()),
            ("tools", tools.display().to_string()),
            ("host_ip", host_ip()),
            ("tcp_port", tcp.local_addr().unwrap().port().to_string()),
            ("udp_port", udp.local_addr().unwrap().port().to_string()),
            ("unix_sock", sock.display().to_string()),
            ("victim", victim.id().to_string()),
            ("tag", tag()),
        ]);
        Fixture { _dir: dir, root, w, tools, tcp, udp, unix, victim, vars }
    }

    fn expand(&self, text: &str) -> String {
        let mut text = text.to_string();
        for (k, v) in &self.vars {
            text = text.replace(&format!("{{{k}}}"), v);
        }
        text
    }

    /// Every path outside the worktree and the tools, with its type, mode and content.
    fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        let mut seen = BTreeMap::new();
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path == self.w || path == self.tools {
                    continue;
                }
                let meta = std::fs::symlink_metadata(&path).unwrap();
                let what = if meta.is_dir() {
                    stack.push(path.clone());
                    "dir".to_string()
                } else if meta.file_type().is_symlink() {
                    format!("symlink {}", std::fs::read_link(&path).unwrap().display())
                } else if meta.is_file() {
                    format!("file {:?}", std::fs::read(&path).unwrap())
                } else {
                    "other".to_string()
                };
                seen.insert(path, format!("{what} mode {:o}", meta.permissions().mode()));
            }
        }
        seen
    }

    /// What the listeners and the victim saw: a list of breaches.
    fn breaches(&mut self) -> Vec<String> {
        let mut breaches = Vec::new();
        match self.tcp.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => breaches.push(format!("the TCP listener accepted: {other:?}")),
        }
        let mut buf = [0u8; 64];
        match self.udp.recv_from(&mut buf) {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => breaches.push(format!("the UDP socket received: {other:?}")),
        }
        match self.unix.accept() {
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            other => breaches.push(format!("the Unix listener accepted: {other:?}")),
        }
        if !matches!(self.victim.try_wait(), Ok(None)) {
            breaches.push("the victim process outside the sandbox died".into());
        }
        breaches
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.victim.kill();
        let _ = self.victim.wait();
    }
}

/// Live processes (not zombies) with `tag` as one of their arguments.
fn tagged_processes(tag: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let path = entry.path();
        let Ok(cmdline) = std::fs::read(path.join("cmdline")) else { continue };
        if !cmdline.split(|&b| b == 0).any(|arg| arg == tag.as_bytes()) {
            continue;
        }
        let zombie = std::fs::read_to_string(path.join("stat"))
            .is_ok_and(|s| s.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')));
        if !zombie {
            found.push(format!("{}: {}", path.display(), String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

/// Processes, zombies included, whose name (`comm`, which a zombie keeps) is `name`.
fn named_processes(name: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            stat.split_once(" (").and_then(|(_, rest)| rest.rsplit_once(')')).is_some_and(|(comm, _)| comm == name)
        })
        .count()
}

/// Watches the process table from outside while a case runs: the most tagged processes
/// and the most chain links seen at once.
struct Watch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<(usize, usize)>,
}

impl Watch {
    fn start(tag: &str) -> Watch {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tag, flag) = (tag.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            let (mut procs, mut chain) = (0, 0);
            let name = format!("c{tag}");
            while !flag.load(Ordering::SeqCst) {
                procs = procs.max(tagged_processes(&tag).len());
                chain = chain.max(named_processes(&name));
                std::thread::sleep(Duration::from_millis(20));
            }
            (procs, chain)
        });
        Watch { stop, thread }
    }

    fn stop(self) -> (usize, usize) {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.join().unwrap()
    }
}

fn last_number(stdout: &str, key: &str) -> Option<u64> {
    stdout.lines().rev().find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
}

fn installed(program: &str) -> bool {
    Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Runs one case on one backend; returns what went wrong (empty: it passed).
fn run_case(backend: Backend, case: &Case) -> Vec<String> {
    let mut fixture = Fixture::new(case.git);
    let script = fixture.expand(&case.run);
    let before = fixture.snapshot();
    let mut cmd = orch();
    cmd.current_dir(&fixture.w).args(["sandbox", "run"]).args(backend.flags());
    cmd.arg("--write").arg(&fixture.w).arg("--read").arg(&fixture.tools);
    cmd.args(["--timeout", case.timeout.as_deref().unwrap_or("30s")]);
    cmd.args(["--network", case.network.as_deref().unwrap_or("none")]);
    cmd.args(["--", "sh", "-c", &script]).stdin(Stdio::null());
    let watch = (case.expect.max_procs.is_some() || case.expect.max_chain.is_some())
        .then(|| Watch::start(&fixture.vars["tag"]));
    let started = Instant::now();
    let out = cmd.output().unwrap();
    let elapsed = started.elapsed();
    let (seen_procs, seen_chain) = watch.map(Watch::stop).unwrap_or_default();
    let code = out.status.code().unwrap_or(-1);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let excerpt = |s: &str| s.chars().take(600).collect::<String>();
    let mut problems = Vec::new();
    let e = &case.expect;
    if let Some(want) = e.code
        && code != want
    {
        problems.push(format!("exit code {code}, expected {want}"));
    }
    if e.fails && code == 0 {
        problems.push("the attempt succeeded (exit 0)".into());
    }
    if [124, 125].contains(&code) && e.code != Some(code) {
        problems.push(format!("exit {code}: the sandbox failed or timed out, so the attempt was not really made"));
    }
    for s in &e.stdout_has {
        if !stdout.contains(&fixture.expand(s)) {
            problems.push(format!("stdout lacks {s:?}"));
        }
    }
    for s in &e.stdout_lacks {
        if stdout.contains(&fixture.expand(s)) {
            problems.push(format!("stdout has {s:?}"));
        }
    }
    if let Some(most) = e.max_forks {
        match last_number(&stdout, "forks=") {
            Some(n) if n <= most => {}
            other => problems.push(format!("forks {other:?}, expected at most {most}")),
        }
    }
    if let Some(most) = e.max_procs
        && seen_procs > most
    {
        problems.push(format!("{seen_procs} tagged processes ran at once, over {most}"));
    }
    if let Some(most) = e.max_chain {
        if seen_chain > most {
            problems.push(format!("{seen_chain} links of the chain (zombies included) at once, over {most}"));
        }
        let name = format!("c{}", fixture.vars["tag"]);
        let deadline = Instant::now() + Duration::from_secs(3);
        while named_processes(&name) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let left = named_processes(&name);
        if left > 0 {
            problems.push(format!("{left} links of the chain (zombies included) outlived orch"));
        }
    }
    if let Some(most) = e.max_mib
        && let Some(n) = last_number(&stdout, "mib=").filter(|n| *n > most)
    {
        problems.push(format!("the hog got {n} MiB, over {most}"));
    }
    if let Some(most) = e.max_stdout
        && out.stdout.len() > most
    {
        problems.push(format!("{} bytes of output, over {most}", out.stdout.len()));
    }
    if let Some(secs) = e.max_secs
        && elapsed > Duration::from_secs(secs)
    {
        problems.push(format!("took {elapsed:?}, over {secs} s"));
    }
    if let Some((path, content)) = &e.file {
        match std::fs::read_to_string(fixture.w.join(path)) {
            Ok(text) if text == *content => {}
            other => problems.push(format!("{path}: {other:?}, expected {content:?}")),
        }
    }
    let after = fixture.snapshot();
    if before != after {
        let changed: Vec<_> = after
            .iter()
            .filter(|(p, v)| before.get(*p) != Some(*v))
            .map(|(p, _)| p.display().to_string())
            .chain(before.keys().filter(|p| !after.contains_key(*p)).map(|p| format!("{} (removed)", p.display())))
            .collect();
        problems.push(format!("something changed outside the worktree: {changed:?}"));
    }
    problems.extend(fixture.breaches());
    let tag = fixture.vars["tag"].clone();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut survivors = tagged_processes(&tag);
    while !survivors.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        survivors = tagged_processes(&tag);
    }
    if !survivors.is_empty() {
        problems.push(format!("processes outlived the command: {survivors:?}"));
    }
    if !problems.is_empty() {
        problems.insert(0, format!("script: {script}\nstdout: {}\nstderr: {}", excerpt(&stdout), excerpt(&stderr)));
    }
    problems
}

/// Runs every case of `group` on `backend`, then fails with all the failures at once.
fn run_group(backend: Backend, group: &str) {
    if backend == Backend::Container && !docker_ready() {
        return;
    }
    let cases: Vec<Case> = cases().into_iter().filter(|c| c.group == group).collect();
    assert!(!cases.is_empty(), "no cases in group {group}");
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in &cases {
        if let Some(reason) = case.skip.get(backend.key()) {
            eprintln!("skipped {} on {}: {reason}", case.name, backend.key());
            continue;
        }
        if let Some(program) = &case.needs
            && !installed(program)
        {
            eprintln!("skipped {} on {}: `{program}` is not installed on this machine", case.name, backend.key());
            continue;
        }
        let started = Instant::now();
        let problems = run_case(backend, case);
        ran += 1;
        eprintln!(
            "{} {} on {} ({:.1} s)",
            if problems.is_empty() { "ok  " } else { "FAIL" },
            case.name,
            backend.key(),
            started.elapsed().as_secs_f64()
        );
        if !problems.is_empty() {
            failures.push(format!("{}:\n  {}", case.name, problems.join("\n  ")));
        }
    }
    assert!(ran > 0, "every case of {group} was skipped on {}", backend.key());
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed on {}:\n{}",
        failures.len(),
        backend.key(),
        failures.join("\n")
    );
}

#[test]
fn the_case_table_is_well_formed() {
    let cases = cases();
    let groups = ["filesystem", "network", "privileged", "limits", "works"];
    let mut names = std::collections::BTreeSet::new();
    for case in &cases {
        assert!(groups.contains(&case.group.as_str()), "{}: unknown group {}", case.name, case.group);
        assert!(names.insert(case.name.clone()), "{} twice", case.name);
        for backend in case.skip.keys() {
            assert!(["landlock", "container"].contains(&backend.as_str()), "{}: skip {backend}?", case.name);
        }
        let e = &case.expect;
        assert!(e.fails || e.code.is_some(), "{}: says neither `fails` nor `code`", case.name);
    }
    // Only the explicit placeholders are used.
    let fixture = Fixture::new(false);
    for case in &cases {
        let expanded = fixture.expand(&case.run);
        assert!(!expanded.contains("{w") && !expanded.contains("{t") && !expanded.contains("{p"), "{}", case.name);
    }
}

macro_rules! groups {
    ($($name:ident: $backend:expr, $group:literal;)*) => {
        $(
            #[test]
            fn $name() {
                run_group($backend, $group);
            }
        )*
    };
}

groups! {
    landlock_filesystem_escapes_fail: Backend::Landlock, "filesystem";
    landlock_network_escapes_fail: Backend::Landlock, "network";
    landlock_privileged_calls_fail: Backend::Landlock, "privileged";
    landlock_resource_limits_hold: Backend::Landlock, "limits";
    landlock_still_works_inside: Backend::Landlock, "works";
    container_filesystem_escapes_fail: Backend::Container, "filesystem";
    container_network_escapes_fail: Backend::Container, "network";
    container_privileged_calls_fail: Backend::Container, "privileged";
    container_resource_limits_hold: Backend::Container, "limits";
    container_still_works_inside: Backend::Container, "works";
}

/// The tool-level cases: a planted symlink read through Read, Grep and Glob, endless
/// Bash output, and a Bash command that tries to ptrace its own tool host, by a scripted
/// agent in `orch exec`.
fn tools_case(backend: Backend) {
    if backend == Backend::Container && !docker_ready() {
        return;
    }
    let fixture = Fixture::new(false);
    let w = &fixture.w;
    std::os::unix::fs::symlink(fixture.root.join("secret/secret.txt"), w.join("file-link")).unwrap();
    std::os::unix::fs::symlink(fixture.root.join("secret"), w.join("dir-link")).unwrap();
    let before = fixture.snapshot();
    let script = fixture.expand(
        r#"version: 1
agents:
  main:
    - tool_calls: [{name: Read, input: {file_path: "{w}/file-link"}}]
    - tool_calls: [{name: Read, input: {file_path: "{w}/dir-link/secret.txt"}}]
    - tool_calls: [{name: Grep, input: {pattern: TOPSECRET, path: "{w}", output_mode: content}}]
    - tool_calls: [{name: Grep, input: {pattern: TOPSECRET, path: "{w}/dir-link", output_mode: content}}]
    - tool_calls: [{name: Glob, input: {pattern: "dir-link/*", path: "{w}"}}]
    - tool_calls: [{name: Glob, input: {pattern: "**/*", path: "{w}/dir-link"}}]
    - tool_calls: [{name: Bash, input: {command: "yes orch-endless-output", timeout: 3000}}]
    - tool_calls: [{name: Bash, input: {command: "{probe} ptrace $PPID"}}]
    - text: done
"#,
    );
    let script_path = fixture.root.join("tools/script.yaml");
    std::fs::write(&script_path, script).unwrap();
    let started = Instant::now();
    let out = orch()
        .current_dir(w)
        .args([
            "exec",
            "--allow-outside-repo",
            "--provider",
            "scripted",
            "--tools",
            "Read,Grep,Glob,Bash",
            "--permission-mode",
            "bypass",
        ])
        .arg("--script")
        .arg(&script_path)
        .arg("--read")
        .arg(&fixture.tools)
        .args(backend.flags())
        .args(["--json", "go"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let finished: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["event"].clone())
        .filter(|v| v["type"] == "tool_use_finished")
        .collect();
    assert_eq!(finished.len(), 8, "{stdout}");
    for event in &finished {
        let output = event["output"].as_str().unwrap();
        assert!(!output.contains("TOPSECRET"), "{} read through the planted symlink: {output}", event["name"]);
        if event["name"] == "Glob" {
            assert!(!output.contains("secret.txt"), "Glob listed through the planted symlink: {output}");
        }
    }
    let bash = finished[6]["output"].as_str().unwrap();
    assert!(bash.contains("orch-endless-output"), "{bash}");
    assert!(bash.chars().count() < 31_000, "Bash output not capped: {} chars", bash.chars().count());
    // $PPID of a Bash command is its tool host: under landlock a process of the same
    // sandbox uid, in a container of the same container uid; orch's seccomp filter
    // denies the ptrace either way.
    let parent = finished[7]["output"].as_str().unwrap();
    assert!(parent.contains("blocked: ptrace"), "{parent}");
    assert!(!parent.contains("ESCAPED"), "a command ptraced its tool host: {parent}");
    assert!(started.elapsed() < Duration::from_secs(45), "took {:?}", started.elapsed());
    assert_eq!(before, fixture.snapshot(), "something changed outside the worktree");
}

#[test]
fn landlock_tools_do_not_follow_planted_symlinks_and_cap_output() {
    tools_case(Backend::Landlock);
}

#[test]
fn container_tools_do_not_follow_planted_symlinks_and_cap_output() {
    tools_case(Backend::Container);
}

/// The tool host against its own commands, through `orch exec` and a scripted agent:
/// Bash commands try to kill their tool host (by pid, `-1`, its process group, a
/// pidfd), to ptrace it, to forge a tool result through its stdout
/// (`/proc/$PPID/fd/1`), and run a fork-and-exit chain. Checked from outside: orch
/// succeeds with every call answered by its real output, the victim lives, and no link
/// of the chain stays (alive or as a zombie) at any time or after the run.
fn tool_host_case(backend: Backend) {
    if backend == Backend::Container && !docker_ready() {
        return;
    }
    let fixture = Fixture::new(false);
    let tag = fixture.vars["tag"].clone();
    // A forged answer for every call id the run could use.
    let forge = "for i in $(seq 0 40); do printf '{\"op\":\"result\",\"id\":%s,\"payload\":\"FORGED\"}\\n' $i; done \
                 > /proc/$PPID/fd/1 || echo blocked-forge; echo real-output-forge";
    let commands = [
        ("kill -9 $PPID || echo blocked-pid; sleep 0.2; echo real-output-pid", "blocked-pid"),
        ("kill -9 -1; sleep 0.2; echo real-output-all", "real-output-all"),
        ("{probe} killpg $PPID; sleep 0.2; echo real-output-group", "blocked: "),
        ("{probe} pidfd $PPID; sleep 0.2; echo real-output-pidfd", "blocked: "),
        ("{probe} ptrace $PPID; echo real-output-ptrace", "blocked: ptrace"),
        (forge, "blocked-forge"),
        ("{probe} chain {tag} 2; sleep 3; echo real-output-chain", "real-output-chain"),
        ("echo real-output-last", "real-output-last"),
    ];
    let mut script = String::from("version: 1\nagents:\n  main:\n");
    for (command, _) in &commands {
        let command = fixture.expand(command);
        script.push_str(&format!(
            "    - tool_calls: [{{name: Bash, input: {{command: {}}}}}]\n",
            serde_json::to_string(&command).unwrap()
        ));
    }
    script.push_str("    - text: done\n");
    let script_path = fixture.root.join("tools/escapes.yaml");
    std::fs::write(&script_path, script).unwrap();
    let watch = Watch::start(&tag);
    let out = orch()
        .current_dir(&fixture.w)
        .args([
            "exec",
            "--allow-outside-repo",
            "--provider",
            "scripted",
            "--tools",
            "Bash",
            "--permission-mode",
            "bypass",
        ])
        .arg("--script")
        .arg(&script_path)
        .arg("--read")
        .arg(&fixture.tools)
        .args(backend.flags())
        .args(["--json", "go"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (_, chain) = watch.stop();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "orch exec failed (was its tool host killed?): {stderr}\n{stdout}");
    let finished: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"]["type"] == "tool_use_finished")
        .collect();
    assert_eq!(finished.len(), commands.len(), "{stdout}");
    for (event, (command, want)) in finished.iter().zip(&commands) {
        let output = event["event"]["output"].as_str().unwrap();
        assert!(output.contains("real-output"), "{command}: not the command's real output: {output}");
        assert!(output.contains(want), "{command}: {want:?} missing: {output}");
        assert!(!output.contains("ESCAPED") && !output.contains("FORGED"), "{command}: {output}");
    }
    let mut fixture = fixture;
    let breaches = fixture.breaches();
    assert!(breaches.is_empty(), "{breaches:?}");
    // The chain is bounded by the per-agent process budget (RLIMIT_NPROC: the user's
    // count plus 512 as a normal user; the cgroup's pids limit as root). How many links
    // exist at one moment depends on how busy the machine is; that none outlive the
    // run is checked below.
    assert!(chain <= 600, "{chain} links of the chain (zombies included) at once: the host does not reap them");
    let name = format!("c{tag}");
    let deadline = Instant::now() + Duration::from_secs(3);
    while named_processes(&name) > 0 {
        assert!(Instant::now() < deadline, "links of the chain outlived the run");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn landlock_commands_cannot_touch_their_tool_host() {
    tool_host_case(Backend::Landlock);
}

#[test]
fn container_commands_cannot_touch_their_tool_host() {
    tool_host_case(Backend::Container);
}

/// Peak resident memory (`VmHWM`) of process `pid` so far, in KiB.
fn peak_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Bytes on disk under `dir` (blocks, links not followed).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.path().symlink_metadata().unwrap();
        total += meta.blocks() * 512;
        if meta.is_dir() {
            total += disk_usage(&entry.path());
        }
    }
    total
}

/// `limits.max_disk` and `limits.max_file_size` through `orch run`: a scripted agent
/// writes a small file, a file over `max_file_size`, tries to write 3 GiB into one file
/// (fallocate, then dd), then writes 20 MiB files until it is stopped. Checked from
/// outside: the agent ends `partial` at `max_disk` long before its last command would
/// have finished, no file of it grew past the limit, the small file is on its branch and
/// no large one is (nor in its patch), the report lists them, the user's repository did
/// not grow, and the coordinator's peak memory stayed small.
fn disk_case(backend: Backend) {
    if backend == Backend::Container && !docker_ready() {
        return;
    }
    let fx = crate::support::Fixture::new("t-disk", &[("README.md", "disk\n")]);
    let sandbox = match backend {
        Backend::Landlock => "{ backend: landlock }".to_string(),
        Backend::Container => format!("{{ backend: container, image: \"{}\" }}", image()),
    };
    let workflow = format!(
        "version: 1\nname: disk\ndefaults:\n  tools: [Bash]\n  sandbox: {sandbox}\n  limits: {{ max_turns: 10, \
         timeout: 5m, max_disk: 50MiB, max_file_size: 1MiB }}\nagents:\n  hog:\n    prompt: Fill the disk.\n\
         integrate: branches\n"
    );
    let commands = [
        "printf 'kept\\n' > kept.txt; head -c 2097152 /dev/zero > over-file-size.bin; echo wrote-small",
        "fallocate -l 3G huge.bin; ls -l huge.bin; dd if=/dev/zero of=huge.bin bs=1M count=3072; ls -l huge.bin; \
         echo tried-huge",
        "for i in $(seq 1 40); do head -c 20971520 /dev/zero > part$i.bin; done; sleep 60; echo never-stopped",
    ];
    let mut script = String::from("version: 1\nagents:\n  hog:\n");
    for command in commands {
        let quoted = serde_json::to_string(command).unwrap();
        script
            .push_str(&format!("    - tool_calls: [{{name: Bash, input: {{command: {quoted}, timeout: 120000}}}}]\n"));
    }
    script.push_str("    - text: done\n  synthesis:\n    - text: S.\n");
    let repo_before = disk_usage(&fx.repo.join(".git"));
    let started = Instant::now();
    let mut child = fx.command(&workflow, &script).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let mut peak = 0;
    while child.try_wait().unwrap().is_none() {
        peak = peak.max(peak_kib(pid).unwrap_or(0));
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = crate::support::Run::from_output(&fx.out, child.wait_with_output().unwrap());
    let elapsed = started.elapsed();
    run.expect_code(4);
    let hog = run.agent("hog");
    assert_eq!(hog["status"], "partial", "{hog:#}");
    let reason = hog["reason"].as_str().unwrap();
    assert!(reason.contains("limits.max_disk (50MiB)"), "{reason}");
    assert!(elapsed < Duration::from_secs(55), "the agent was not stopped at its disk limit: {elapsed:?}");
    let tools = run.tool_results("hog");
    assert!(tools.len() >= 2 && tools[0].2.contains("wrote-small"), "{tools:?}");
    assert!(!tools.iter().any(|(_, _, out)| out.contains("never-stopped")), "{tools:?}");
    // No single file grew past the limit: RLIMIT_FSIZE stopped fallocate and dd.
    let huge = &tools[1].2;
    assert!(!huge.contains("3221225472"), "a 3 GiB file was written: {huge}");
    // The work is committed, minus the files over max_file_size, which the report lists.
    let branch = fx.branch("hog");
    assert_eq!(fx.show(&branch, "kept.txt"), "kept\n");
    // A file the stop cut short may be committed, but nothing over max_file_size (1 MiB).
    let tree = crate::support::git(&fx.repo, &["ls-tree", "-r", "-l", &branch]);
    for line in tree.lines() {
        let size: u64 = line.split_whitespace().nth(3).and_then(|s| s.parse().ok()).unwrap_or(0);
        assert!(size <= 1 << 20, "a file over max_file_size was committed: {line}\n{tree}");
    }
    assert!(!tree.contains("over-file-size.bin"), "{tree}");
    let listed: Vec<&str> =
        hog["too_large_files"].as_array().unwrap().iter().filter_map(|f| f["path"].as_str()).collect();
    assert!(listed.contains(&"over-file-size.bin"), "{listed:?}");
    let patch = std::fs::metadata(run.out.join(hog["patch"].as_str().unwrap())).unwrap().len();
    assert!(patch < 64 << 10, "a {patch}-byte patch");
    let grown = disk_usage(&fx.repo.join(".git")).saturating_sub(repo_before);
    assert!(grown < 4 << 20, "the user's repository grew by {grown} bytes");
    assert!(peak > 0 && peak < 200 << 10, "the coordinator's peak memory was {peak} KiB");
}

#[test]
fn landlock_agents_stop_at_their_disk_limit() {
    disk_case(Backend::Landlock);
}

#[test]
fn container_agents_stop_at_their_disk_limit() {
    disk_case(Backend::Container);
}

/// Issue 12, item 9: agents are isolated from one another. Two agents of one `orch run`:
/// `b` writes a secret file, which the coordinator commits at `b`'s second turn (a
/// checkpoint), then runs a long command with a second secret in its arguments. `a`
/// waits, then asks for `b`'s work in every way it can: `git show orch/<run>/b:secret`,
/// `git log --all`, every object its git can read, `b`'s checkout, `b`'s repository and
/// the run clone read directly, `b`'s large tool results (saved under the run
/// directory), and every process's command line; it writes whatever it
/// got into its worktree. Checked from outside: `b`'s secret is on `b`'s branch in the
/// user's repository, and neither secret is in `a`'s transcript (every tool result `a`'s
/// model was sent), `a`'s patch or `a`'s branch.
fn cross_agent_case(backend: Backend) {
    if backend == Backend::Container && !docker_ready() {
        return;
    }
    let fx = crate::support::Fixture::new("t-iso", &[("README.md", "shared\n")]);
    let tag = tag();
    let (file_secret, argv_secret) = (format!("TOPSECRET-FILE-{tag}"), format!("TOPSECRET-ARGV-{tag}"));
    let sandbox = match backend {
        Backend::Landlock => "{ backend: landlock }".to_owned(),
        Backend::Container => format!("{{ backend: container, image: \"{}\" }}", image()),
    };
    let workflow = format!(
        "version: 1\nname: isolation\nconcurrency: 2\ndefaults:\n  tools: [Bash]\n  limits: {{ checkpoint_every: 1 }}\n  \
         sandbox: {sandbox}\nagents:\n  b: {{ prompt: Keep a secret. }}\n  a: {{ prompt: Look around. }}\n"
    );
    let out = fx.out.display().to_string();
    let b_branch = fx.branch("b");
    let steal = [
        "sleep 8; echo waited".to_owned(),
        // Its own command line first: what else the machine runs may fill the inline part
        // of the result (a CI harness's command line can be tens of kilobytes).
        "{ cat /proc/self/cmdline; echo; cat /proc/[0-9]*/cmdline; } | tr '\\0' ' ' | tee stolen-cmdline; \
         ps -eo args 2>/dev/null | tee -a stolen-cmdline"
            .to_owned(),
        format!("git show {b_branch}:secret 2>&1 | tee stolen-show"),
        "git log --all --format='%H %s' 2>&1 | tee stolen-log; git for-each-ref 2>&1 | tee -a stolen-log".to_owned(),
        "git cat-file --batch-all-objects --batch 2>&1 | tee stolen-objects".to_owned(),
        format!("cat {out}/worktrees/b/secret 2>&1 | tee stolen-worktree; ls -la {out}/worktrees/b 2>&1"),
        format!(
            "for d in {out}/repos/b.git {out}/repo.git; do git --git-dir=$d show {b_branch}:secret; \
             git --git-dir=$d cat-file --batch-all-objects --batch; cat $d/refs/heads/{b_branch}; done 2>&1 \
             | tee stolen-repos"
        ),
        format!("cat {out}/tool-results/b/*/* 2>&1 | head -c 3000 | tee stolen-results; ls -R {out}/tool-results 2>&1"),
        format!("grep -r -a -l -i topsecret {out} 2>&1 | tee stolen-grep; echo searched"),
    ];
    let mut script = String::from("version: 1\nagents:\n  b:\n");
    for command in [
        format!("printf '%s\\n' {file_secret} > secret"),
        // Over the inline limit: saved in full under the run directory's tool-results/b.
        format!("for i in $(seq 4000); do echo {file_secret}-$i; done"),
        format!("bash -c 'sleep 25' {argv_secret}"),
    ] {
        script.push_str(&format!(
            "    - tool_calls: [{{name: Bash, input: {{command: {}, timeout: 60000}}}}]\n",
            serde_json::to_string(&command).unwrap()
        ));
    }
    script.push_str("    - text: kept it\n  a:\n");
    for command in &steal {
        script.push_str(&format!(
            "    - tool_calls: [{{name: Bash, input: {{command: {}, timeout: 60000}}}}]\n",
            serde_json::to_string(command).unwrap()
        ));
    }
    script.push_str("    - text: looked\n  synthesis:\n    - text: done\n");
    let run = fx.run(&workflow, &script, &[]);
    run.expect_code(0);

    // `b`'s secret was committed, early (by a checkpoint), and reached the user's repository.
    assert_eq!(fx.show(&b_branch, "secret").trim(), file_secret);
    let log = crate::support::git(&fx.repo, &["log", "--format=%s", &b_branch]);
    assert!(log.contains("checkpoint"), "{log}");
    // `a` ran every attempt (and the command-line read saw command lines at all).
    let results = run.tool_results("a");
    assert_eq!(results.len(), steal.len(), "{results:?}");
    assert!(results[1].2.contains("cat /proc/self/cmdline"), "a saw no command line at all: {}", results[1].2);
    // Command lines: hidden as root (each tool host's /proc shows its own uid only) and
    // in containers (a pid namespace each). As a normal user, agents share the uid and
    // nothing hides them (the README's threat model says so): not checked there.
    let mut secrets = vec![&file_secret];
    if backend == Backend::Container || nix::unistd::Uid::effective().is_root() {
        secrets.push(&argv_secret);
    }
    for secret in secrets {
        for (i, (_, _, output)) in results.iter().enumerate() {
            assert!(!output.contains(secret.as_str()), "a's attempt `{}` got b's secret: {output}", steal[i]);
        }
        let transcript = run.transcript_text("a");
        assert!(!transcript.contains(secret.as_str()), "b's secret in a's transcript");
        // Bytes, not text: what `a` stole may be anything (another user's process list, raw
        // git objects), and the patch carries it as it is.
        let patch = std::fs::read(run.out.join(run.agent("a")["patch"].as_str().unwrap())).unwrap();
        let patch = String::from_utf8_lossy(&patch);
        assert!(patch.contains("stolen-show") && !patch.contains(secret.as_str()), "b's secret in a's patch");
        let grep = crate::support::git_cmd(&fx.repo)
            .args(["grep", "-a", "-c", "-F", "-e", secret.as_str(), &fx.branch("a"), "--"])
            .output()
            .unwrap();
        assert!(grep.stdout.is_empty(), "b's secret on a's branch: {}", String::from_utf8_lossy(&grep.stdout));
    }
}

#[test]
fn landlock_agents_cannot_read_each_others_work() {
    cross_agent_case(Backend::Landlock);
}

#[test]
fn container_agents_cannot_read_each_others_work() {
    cross_agent_case(Backend::Container);
}
