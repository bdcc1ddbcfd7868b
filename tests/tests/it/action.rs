//! The GitHub Action's shell steps (`.github/action/install.sh` and `run.sh`), run as the
//! Action runs them, against a local HTTP server that serves a release layout.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A tiny HTTP/1.1 server for GET requests: a path in `files` gets 200 and its bytes,
/// anything else 404. It records the paths asked for.
struct ReleaseServer {
    base: String,
    asked: Arc<Mutex<Vec<String>>>,
}

impl ReleaseServer {
    fn start(files: HashMap<String, Vec<u8>>) -> ReleaseServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                if reader.read_line(&mut request).is_err() {
                    continue;
                }
                // Skip the headers.
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                }
                let path = request.split_whitespace().nth(1).unwrap_or("").to_string();
                log.lock().unwrap().push(path.clone());
                let (status, body) = match files.get(&path) {
                    Some(body) => ("200 OK", body.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let head = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        ReleaseServer { base, asked }
    }
}

/// A release tarball holding `orch-<target>/orch`, a script that prints a version.
fn tarball(dir: &Path) -> Vec<u8> {
    let target = "orch-x86_64-unknown-linux-musl";
    let inner = dir.join(target);
    std::fs::create_dir_all(&inner).unwrap();
    std::fs::write(inner.join("orch"), "#!/bin/sh\necho 'orch 9.9.9 (test release)'\n").unwrap();
    let status = Command::new("tar")
        .args(["-czf", "release.tar.gz", target])
        .current_dir(dir)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(dir.join("release.tar.gz")).unwrap()
}

fn sha256(bytes: &[u8], dir: &Path) -> String {
    let path = dir.join("sum-input");
    std::fs::write(&path, bytes).unwrap();
    let out = Command::new("sha256sum").arg(&path).output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

fn install(server: &ReleaseServer, reference: &str, dest: &Path, out: &Path) -> Output {
    Command::new("bash")
        .arg(repo_root().join(".github/action/install.sh"))
        .env("ORCH_REF", reference)
        .env("ORCH_DEST", dest)
        .env("ORCH_RELEASE_URL", &server.base)
        .env("ORCH_ARCH", "x86_64")
        .env("GITHUB_OUTPUT", out)
        .output()
        .unwrap()
}

fn release_files(tar: &[u8], sum_line: String) -> HashMap<String, Vec<u8>> {
    let name = "orch-x86_64-unknown-linux-musl.tar.gz";
    HashMap::from([
        (format!("/v1.2.3/{name}"), tar.to_vec()),
        (format!("/v1.2.3/{name}.sha256"), sum_line.into_bytes()),
    ])
}

#[test]
fn a_matching_release_is_installed_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let tar = tarball(dir.path());
    let sum = format!("{}  orch-x86_64-unknown-linux-musl.tar.gz\n", sha256(&tar, dir.path()));
    let server = ReleaseServer::start(release_files(&tar, sum));
    let dest = dir.path().join("dest");
    let out = dir.path().join("github-output");

    let started = std::time::Instant::now();
    let result = install(&server, "v1.2.3", &dest, &out);
    let took = started.elapsed();
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "found=true\n");
    let version = Command::new(dest.join("bin/orch")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&version.stdout), "orch 9.9.9 (test release)\n");
    // Generous (10x the target): the benchmark, not this test, tracks the real time.
    assert!(took.as_secs() < 150, "install took {took:?}");
}

#[test]
fn a_checksum_mismatch_fails_and_installs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tar = tarball(dir.path());
    let wrong = format!("{}  orch-x86_64-unknown-linux-musl.tar.gz\n", "0".repeat(64));
    let server = ReleaseServer::start(release_files(&tar, wrong));
    let dest = dir.path().join("dest");
    let out = dir.path().join("github-output");

    let result = install(&server, "v1.2.3", &dest, &out);
    assert!(!result.status.success());
    assert!(String::from_utf8_lossy(&result.stderr).contains("checksum mismatch"));
    assert!(!dest.join("bin/orch").exists(), "a tarball with a wrong sum must not be installed");
    // Never a silent fallback to building.
    assert!(!std::fs::read_to_string(&out).unwrap_or_default().contains("found=false"));
}

#[test]
fn a_tampered_tarball_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let tar = tarball(dir.path());
    let sum = format!("{}  orch-x86_64-unknown-linux-musl.tar.gz\n", sha256(&tar, dir.path()));
    let mut tampered = tar.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0xff;
    let server = ReleaseServer::start(release_files(&tampered, sum));
    let dest = dir.path().join("dest");
    let result = install(&server, "v1.2.3", &dest, &dir.path().join("o"));
    assert!(!result.status.success());
    assert!(!dest.join("bin/orch").exists());
}

#[test]
fn no_release_for_the_ref_falls_back_to_building() {
    let dir = tempfile::tempdir().unwrap();
    let server = ReleaseServer::start(HashMap::new());
    let dest = dir.path().join("dest");
    let out = dir.path().join("github-output");

    let result = install(&server, "main", &dest, &out);
    assert!(result.status.success(), "{}", String::from_utf8_lossy(&result.stderr));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "found=false\n");
    assert!(!dest.join("bin/orch").exists());
    assert_eq!(
        server.asked.lock().unwrap().as_slice(),
        ["/main/orch-x86_64-unknown-linux-musl.tar.gz.sha256"]
    );

    // A commit SHA is never a release: nothing is asked for.
    let sha = "0123456789abcdef0123456789abcdef01234567";
    let out2 = dir.path().join("github-output-2");
    let result = install(&server, sha, &dest, &out2);
    assert!(result.status.success());
    assert_eq!(std::fs::read_to_string(&out2).unwrap(), "found=false\n");
    assert_eq!(server.asked.lock().unwrap().len(), 1);
}

fn run_args(inputs: &str, extra: &str, cwd: &Path) -> Vec<String> {
    let out = Command::new("bash")
        .arg(repo_root().join(".github/action/run.sh"))
        .current_dir(cwd)
        .env("ORCH_WORKFLOW", "wf.yaml")
        .env("ORCH_PROVIDER_INPUT", "scripted")
        .env("ORCH_INPUTS", inputs)
        .env("ORCH_EXTRA_ARGS", extra)
        .env("ORCH_OUT", "/tmp/out")
        .env("ORCH_PRINT_ARGS", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().split_terminator('\0').map(str::to_string).collect()
}

#[test]
fn args_are_split_without_globbing_or_expansion() {
    let dir = tempfile::tempdir().unwrap();
    // Files a glob would match if the words were globbed.
    std::fs::create_dir(dir.path().join("fix")).unwrap();
    std::fs::write(dir.path().join("fix/a"), "").unwrap();
    std::fs::write(dir.path().join("fix/b"), "").unwrap();
    let args = run_args("", "--only fix/* --only 'two words' $(touch pwned) $HOME", dir.path());
    let tail: Vec<&str> = args.iter().map(String::as_str).skip_while(|a| *a != "/tmp/out").skip(1).collect();
    assert_eq!(tail, ["--only", "fix/*", "--only", "two words", "$(touch", "pwned)", "$HOME"]);
    assert!(!dir.path().join("pwned").exists(), "args must never run a command");
}

#[test]
fn inputs_take_newline_separated_values() {
    let dir = tempfile::tempdir().unwrap();
    let args = run_args("base=abc\nfiles=src/a.rs\nsrc/b c.rs\nmode=fast", "", dir.path());
    let inputs: Vec<&str> = args
        .iter()
        .zip(args.iter().skip(1))
        .filter(|(flag, _)| *flag == "--input")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(inputs, ["base=abc", "files=src/a.rs\nsrc/b c.rs", "mode=fast"]);
}
