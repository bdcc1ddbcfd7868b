//! Helpers of the `orch run` suite: a fixture git repository in a tempdir, the binary
//! driven with a clean environment, the run directory's report and transcripts, and
//! probes for what a run may leave behind (worktrees, branches, processes).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

/// The binary with a clean environment: no model credentials or defaults leak in from
/// the developer's shell.
pub fn orch() -> Command {
    let mut cmd = Command::cargo_bin("orch").unwrap();
    for var in [
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_AUTH_TOKEN",
        "ANTHROPIC_BASE_URL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "ORCH_PROVIDER",
        "ORCH_MODEL",
        "ORCH_SCRIPT",
        "ORCH_AUTHOR",
        "ORCH_RUNS_DIR",
        "RUST_LOG",
        // A pull-request event in the environment would read hooks from a base ref.
        "GITHUB_EVENT_NAME",
        "GITHUB_BASE_REF",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("NO_COLOR", "1");
    cmd
}

/// `git` with no user or system configuration, so the host's settings cannot change
/// what the fixtures contain.
pub fn git_cmd(dir: &Path) -> Command {
    let mut cmd = Command::new("git");
    cmd.current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "Fixture")
        .env("GIT_AUTHOR_EMAIL", "fixture@example.com")
        .env("GIT_COMMITTER_NAME", "Fixture")
        .env("GIT_COMMITTER_EMAIL", "fixture@example.com")
        .env("GIT_OPTIONAL_LOCKS", "0");
    cmd
}

/// Runs `git args` in `dir`; panics unless it succeeds; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_cmd(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One test's world: a tempdir holding the user's repository (`repo/`), the workflow
/// and script files, and the run directory (`out/`, made by orch).
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub repo: PathBuf,
    pub out: PathBuf,
    pub run_id: String,
}

impl Fixture {
    /// A repository with `files` committed on `main`. The run id is fixed per test so
    /// branch names are known in advance.
    pub fn new(run_id: &str, files: &[(&str, &str)]) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        std::fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        for (path, text) in files {
            let file = repo.join(path);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, text).unwrap();
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "fixture"]);
        let out = dir.path().join("out");
        Fixture { repo, out, run_id: run_id.to_owned(), dir }
    }

    /// Writes a file next to the repository (workflow, script) and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// `orch run` of `workflow` (YAML text, written as `workflow.yaml`) on this
    /// repository, into `out/`, with this fixture's run id, from its directory.
    fn run_command(&self, workflow: &str) -> Command {
        let workflow = self.write("workflow.yaml", workflow);
        let mut cmd = orch();
        cmd.current_dir(self.dir.path())
            .arg("run")
            .arg(&workflow)
            .arg("--repo")
            .arg(&self.repo)
            .arg("--out")
            .arg(&self.out)
            .args(["--run-id", &self.run_id])
            // Run id locks (and any other state) stay in this test's world.
            .env("XDG_STATE_HOME", self.dir.path().join("state"));
        cmd
    }

    /// `orch run` of `workflow` (YAML text) with the scripted provider and `script`
    /// (YAML text), on this repository, into `out/`.
    pub fn command(&self, workflow: &str, script: &str) -> Command {
        let script = self.write("script.yaml", script);
        let mut cmd = self.run_command(workflow);
        cmd.args(["--provider", "scripted", "--script"]).arg(&script);
        cmd
    }

    /// `orch run` of `workflow` (YAML text) against the Anthropic API at `url` (the
    /// test kit's mock server), on this repository, into `out/`.
    pub fn mock_command(&self, workflow: &str, url: &str) -> Command {
        let mut cmd = self.run_command(workflow);
        cmd.env("ANTHROPIC_API_KEY", "test").env("ANTHROPIC_BASE_URL", url);
        cmd
    }

    /// Runs `cmd` (an `orch run` into `out/`) off the async runtime, where the mock
    /// server it talks to runs, and reads what it left.
    pub async fn run_off_runtime(&self, mut cmd: Command) -> Run {
        let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
        Run::from_output(&self.out, out)
    }

    /// Runs `orch run` and reads what it left.
    pub fn run(&self, workflow: &str, script: &str, extra: &[&str]) -> Run {
        let out = self.command(workflow, script).args(extra).output().unwrap();
        Run::from_output(&self.out, out)
    }

    /// `orch/<run-id>/<name>`.
    pub fn branch(&self, name: &str) -> String {
        format!("orch/{}/{name}", self.run_id)
    }

    /// A file's content on a branch of the user's repository.
    pub fn show(&self, branch: &str, path: &str) -> String {
        git(&self.repo, &["show", &format!("{branch}:{path}")])
    }

    /// Every ref of the user's repository with its target.
    pub fn refs(&self) -> BTreeMap<String, String> {
        git(&self.repo, &["for-each-ref", "--format=%(refname) %(objectname)"])
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(r, o)| (r.to_owned(), o.to_owned())))
            .collect()
    }

    /// The `orch/...` branches of the user's repository.
    pub fn orch_branches(&self) -> Vec<String> {
        self.refs()
            .into_keys()
            .filter_map(|r| r.strip_prefix("refs/heads/").map(str::to_owned))
            .filter(|b| b.starts_with("orch/"))
            .collect()
    }

    /// Everything about the user's checkout that a run must not change: status, HEAD,
    /// refs, config, hooks, index, worktree list and the bytes of every file outside
    /// `.git/objects` and `.git/refs`.
    pub fn snapshot_user_repo(&self) -> RepoSnapshot {
        let mut files = BTreeMap::new();
        collect_files(&self.repo, &self.repo, &mut files);
        RepoSnapshot {
            status: git(&self.repo, &["status", "--porcelain=v1", "--untracked-files=all"]),
            head: git(&self.repo, &["rev-parse", "HEAD"]),
            symbolic_head: git(&self.repo, &["symbolic-ref", "HEAD"]),
            worktrees: git(&self.repo, &["worktree", "list", "--porcelain"]),
            files,
        }
    }
}

/// What a run must leave alone in the user's repository (refs are compared apart).
#[derive(Debug, PartialEq, Eq)]
pub struct RepoSnapshot {
    pub status: String,
    pub head: String,
    pub symbolic_head: String,
    pub worktrees: String,
    /// Relative path -> bytes, for the working tree and `.git` minus objects and refs.
    pub files: BTreeMap<PathBuf, Vec<u8>>,
}

fn collect_files(root: &Path, dir: &Path, files: &mut BTreeMap<PathBuf, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        if rel == Path::new(".git/objects") || rel == Path::new(".git/refs") || rel == Path::new(".git/logs") {
            continue;
        }
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            collect_files(root, &path, files);
        } else if kind.is_symlink() {
            files.insert(rel, std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes());
        } else {
            files.insert(rel, std::fs::read(&path).unwrap());
        }
    }
}

/// A finished `orch run`: exit code, output, and the run directory's report.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
    pub out: PathBuf,
    /// `report.json` (`Value::Null` when there is none).
    pub report: Value,
}

impl Run {
    pub fn from_output(out_dir: &Path, out: Output) -> Run {
        let report = std::fs::read(out_dir.join("report.json"))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or(Value::Null);
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            out: out_dir.to_path_buf(),
            report,
        }
    }

    /// Panics with the whole story unless the run exited with `code`.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code {} instead of {code}\n--- stderr\n{}\n--- stdout\n{}\n--- report\n{:#}",
            self.code, self.stderr, self.stdout, self.report
        );
        self
    }

    /// The report of agent `id`.
    #[track_caller]
    pub fn agent(&self, id: &str) -> &Value {
        self.report["agents"]
            .as_array()
            .unwrap_or_else(|| panic!("no agents in the report:\n{:#}\n{}", self.report, self.stderr))
            .iter()
            .find(|a| a["id"] == id)
            .unwrap_or_else(|| panic!("no agent `{id}` in the report:\n{:#}", self.report))
    }

    /// The ids of the agents, in report order.
    pub fn agent_ids(&self) -> Vec<String> {
        self.report["agents"].as_array().unwrap().iter().map(|a| a["id"].as_str().unwrap().to_owned()).collect()
    }

    /// The raw text of a transcript, by agent id.
    pub fn transcript_text(&self, id: &str) -> String {
        let rel = self.agent(id)["transcript"].as_str().unwrap_or_else(|| panic!("agent `{id}` has no transcript"));
        std::fs::read_to_string(self.out.join(rel)).unwrap()
    }

    /// Every event of an agent's transcript.
    pub fn events(&self, id: &str) -> Vec<Value> {
        self.transcript_text(id).lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["event"].clone()).collect()
    }

    /// The finished tool calls of an agent, in order: (name, is_error, output).
    pub fn tool_results(&self, id: &str) -> Vec<(String, bool, String)> {
        self.events(id)
            .into_iter()
            .filter(|e| e["type"] == "tool_use_finished")
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["is_error"].as_bool().unwrap(),
                    e["output"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    }
}

/// Processes that still run with `marker` (a tempdir path) in their command line or as
/// their working directory: tool hosts (`orch __tool-host --cwd <worktree>`) and the
/// commands they started.
pub fn processes_under(marker: &Path) -> Vec<String> {
    let marker = marker.to_string_lossy().into_owned();
    let me = std::process::id().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) || name == me {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let cwd = std::fs::read_link(entry.path().join("cwd")).map(|p| p.to_string_lossy().into_owned());
        if cmdline.contains(&marker) || cwd.is_ok_and(|c| c.starts_with(&marker)) {
            found.push(format!("{name}: {cmdline}"));
        }
    }
    found
}

/// Waits up to 5 s for the processes under `marker` to go (a killed process group takes
/// a moment to be reaped); returns those left.
pub fn processes_left(marker: &Path) -> Vec<String> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let left = processes_under(marker);
        if left.is_empty() || std::time::Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
