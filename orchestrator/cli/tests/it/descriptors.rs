//! No descriptor that orch's parent left open reaches a sandbox. The test starts the
//! orch binary with three extra descriptors, inherited without close-on-exec: a 0600
//! file holding a secret (fd 7), a writable file in a 0700 directory (fd 8) and the
//! write end of a pipe (fd 9). Inside, a `Bash` command, a hook and `orch sandbox
//! run`'s command try each of them (by number and through `/proc/self/fd`); outside,
//! the victim file is unchanged, the secret is in no output, transcript, report or
//! branch, and the pipe got nothing. For `orch run`, `orch exec` and `orch sandbox run`,
//! with the landlock and container backends (as root and, through `.ci/as-user.sh`, as
//! a normal user).

use std::io::Read as _;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::{Fixture, git, orch};

const SECRET: &str = "sk-inherited-QUINCE-4471";
const VICTIM: &str = "untouched\n";

/// The attack, in one shell command: use each inherited descriptor, then say it ran.
const ATTACK: &str = "ls -l /proc/self/fd/; cat <&7 > leak.txt; cat <&7; cat /proc/self/fd/7; echo PWNED >&8; echo PWNED > /proc/self/fd/8; \
                      echo PWNED >&9; echo PWNED > /proc/self/fd/9; echo attack-ran";

/// The three descriptors a test starts orch with, and what it checks afterwards.
struct Strays {
    _dir: tempfile::TempDir,
    victim: PathBuf,
    secret: OwnedFd,
    victim_fd: OwnedFd,
    pipe_read: OwnedFd,
    pipe_write: Option<OwnedFd>,
}

impl Strays {
    fn new() -> Strays {
        let dir = tempfile::tempdir().unwrap();
        let vault = dir.path().join("vault");
        std::fs::create_dir(&vault).unwrap();
        let secret = vault.join("secret");
        std::fs::write(&secret, SECRET).unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let victim = vault.join("victim");
        std::fs::write(&victim, VICTIM).unwrap();
        std::fs::set_permissions(&vault, std::fs::Permissions::from_mode(0o700)).unwrap();
        let secret = OwnedFd::from(std::fs::File::open(&secret).unwrap());
        let victim_fd = OwnedFd::from(std::fs::OpenOptions::new().append(true).open(&victim).unwrap());
        let (pipe_read, pipe_write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        Strays { _dir: dir, victim, secret, victim_fd, pipe_read, pipe_write: Some(pipe_write) }
    }

    /// Makes `command`'s process start with the secret on fd 7, the victim on fd 8 and
    /// the pipe on fd 9, none of them close-on-exec (as a careless parent leaves them).
    fn hand_to(&self, command: &mut Command) {
        let fds: [(RawFd, RawFd); 3] = [
            (self.secret.as_raw_fd(), 7),
            (self.victim_fd.as_raw_fd(), 8),
            (self.pipe_write.as_ref().unwrap().as_raw_fd(), 9),
        ];
        // SAFETY: dup2 only, between fork and exec; dup2 clears close-on-exec on the copy.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(move || {
                for (from, to) in fds {
                    if nix::libc::dup2(from, to) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// Runs `command` with the strays and checks, outside, that nothing used them:
    /// the victim unchanged, the pipe empty, the secret not in the output. Returns the
    /// output.
    fn run(mut self, command: &mut Command) -> Output {
        self.hand_to(command);
        let out = command.stdin(Stdio::null()).output().unwrap();
        self.pipe_write = None;
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(!text.contains("QUINCE"), "the secret reached the output:\n{text}");
        assert_eq!(std::fs::read_to_string(&self.victim).unwrap(), VICTIM, "the victim file was written:\n{text}");
        let mut pipe = std::fs::File::from(self.pipe_read);
        nix::fcntl::fcntl(&pipe, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        let mut got = Vec::new();
        let _ = pipe.read_to_end(&mut got);
        assert_eq!(String::from_utf8_lossy(&got), "", "the pipe got data:\n{text}");
        out
    }
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                stack.push(entry.path());
            } else if kind.is_file()
                && std::fs::read(entry.path()).is_ok_and(|b| String::from_utf8_lossy(&b).contains(needle))
            {
                found.push(entry.path().display().to_string());
            }
        }
    }
    found
}

fn skip_docker() -> bool {
    let skip = std::env::var("ORCH_SKIP_DOCKER_TESTS").as_deref() == Ok("1");
    if skip {
        eprintln!("ORCH_SKIP_DOCKER_TESTS=1: skipping a container case");
    }
    skip
}

fn image() -> String {
    std::env::var("ORCH_TEST_IMAGE").unwrap_or_else(|_| "orch-test:tools".into())
}

fn run_case(run_id: &str, sandbox: &str) {
    let fx = Fixture::new(run_id, &[("a.txt", "a\n")]);
    let workflow = format!(
        r#"
version: 1
name: strays
defaults:
  tools: [Bash]
  limits: {{ max_turns: 4, timeout: 2m }}
  sandbox: {sandbox}
hooks:
  SessionStart:
    - hooks: [{{ command: "echo hook-ran; echo hook > hook.txt; cat <&7 >> hook.txt; echo PWNED >&8; echo PWNED >&9; true" }}]
agents:
  a:
    prompt: Look around.
integrate: branches
"#
    );
    let script = format!(
        "version: 1\nagents:\n  a:\n    - tool_calls: [{{name: Bash, input: {{command: {ATTACK:?}}}}}]\n    - text: done\n  synthesis:\n    - text: done\n"
    );
    let mut command = fx.command(&workflow, &script);
    let out = Strays::new().run(&mut command);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let transcript = std::fs::read_to_string(fx.out.join("transcripts/a.jsonl")).unwrap();
    assert!(transcript.contains("attack-ran"), "the attack did not run:\n{transcript}");
    assert!(transcript.contains("hook-ran"), "the hook did not run:\n{transcript}");
    assert_eq!(files_containing(&fx.out, "QUINCE"), Vec::<String>::new(), "the secret is in the run directory");
    let files = git(&fx.repo, &["ls-tree", "-r", "--name-only", &fx.branch("a")]);
    for file in files.lines() {
        assert!(!fx.show(&fx.branch("a"), file).contains("QUINCE"), "the secret is in {file} on the branch");
    }
}

#[test]
fn orch_run_passes_no_inherited_descriptor_to_landlock_sandboxes() {
    run_case("t-fds-ll", "{ backend: landlock }");
}

#[test]
fn orch_run_passes_no_inherited_descriptor_to_containers() {
    if skip_docker() {
        return;
    }
    run_case("t-fds-ct", &format!("{{ backend: container, image: \"{}\" }}", image()));
}

fn exec_case(backend: &[&str]) {
    let fx = Fixture::new("t-fds-exec", &[("a.txt", "a\n")]);
    let script = fx.write(
        "script.yaml",
        &format!(
            "version: 1\nagents:\n  main:\n    - tool_calls: [{{name: Bash, input: {{command: {ATTACK:?}}}}}]\n    - text: done\n"
        ),
    );
    let mut command = orch();
    command
        .current_dir(&fx.repo)
        .args(["exec", "--provider", "scripted", "--tools", "Bash", "--json", "--script"])
        .arg(&script)
        .args(backend)
        .arg("go");
    let out = Strays::new().run(&mut command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("attack-ran"), "the attack did not run:\n{stdout}");
}

#[test]
fn orch_exec_passes_no_inherited_descriptor_to_landlock_sandboxes() {
    exec_case(&["--backend", "landlock"]);
}

#[test]
fn orch_exec_passes_no_inherited_descriptor_to_containers() {
    if skip_docker() {
        return;
    }
    exec_case(&["--backend", "container", "--image", &image()]);
}

fn sandbox_run_case(backend: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    std::fs::create_dir(&w).unwrap();
    let mut command = orch();
    command.current_dir(&w).args(["sandbox", "run", "--write"]).arg(&w).args(backend).args(["--", "sh", "-c", ATTACK]);
    let out = Strays::new().run(&mut command);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("attack-ran"), "the attack did not run:\n{stdout}");
}

#[test]
fn orch_sandbox_run_passes_no_inherited_descriptor_with_landlock() {
    sandbox_run_case(&[]);
}

#[test]
fn orch_sandbox_run_passes_no_inherited_descriptor_to_a_container() {
    if skip_docker() {
        return;
    }
    sandbox_run_case(&["--backend", "container", "--image", &image()]);
}
