//! `orch exec` is a one-agent `orch run`: a table of cases, each run through the real
//! binary both ways against the mock model server with the same repository, settings
//! and model turns. What reached the model (every tool result), the permission
//! decisions in them, the agent's status and the files it changed must be the same;
//! each case also checks what it is about (a denied `rm` deleted nothing, a denied
//! secret reached no request, the agent file's sub-agent ran, ...).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use orch_testkit::mock::{MockServer, RecordedRequest, Step};
use serde_json::{Value, json};

use crate::support::{self, Fixture, git};

/// A secret that must never reach the model.
const SECRET: &str = "QUINCE-SECRET-9031";

/// One case: a repository, one agent's settings (as flags and as a workflow agent), the
/// model's turns, and what must hold of the outcome besides exec and run agreeing.
struct Case {
    name: &'static str,
    files: Vec<(String, String)>,
    tools: Vec<&'static str>,
    mode: Option<&'static str>,
    allow: Vec<&'static str>,
    deny: Vec<&'static str>,
    read: Vec<PathBuf>,
    max_turns: u32,
    steps: Vec<Step>,
    expect: fn(&Outcome),
}

impl Case {
    fn new(name: &'static str, tools: &[&'static str], steps: Vec<Step>, expect: fn(&Outcome)) -> Case {
        Case {
            name,
            files: vec![("a.txt".into(), "alpha\n".into()), ("b.txt".into(), "beta\n".into())],
            tools: tools.to_vec(),
            mode: None,
            allow: Vec::new(),
            deny: Vec::new(),
            read: Vec::new(),
            max_turns: 10,
            steps,
            expect,
        }
    }

    fn file(mut self, path: &str, text: &str) -> Case {
        self.files.push((path.into(), text.into()));
        self
    }
}

/// What one way of running a case gave.
#[derive(Debug, PartialEq)]
struct Outcome {
    /// The tool results of every model request, in order: (is_error, content), with the
    /// agent's working directory written as `<cwd>`.
    results: Vec<Vec<(bool, String)>>,
    /// `succeeded`, `partial`, `failed`, ...
    status: String,
    /// (path, kind) of every file the agent changed.
    changed: BTreeSet<(String, String)>,
    /// The count of changed files orch reported on stderr.
    reported_changed: usize,
    /// Whether the secret was in any request.
    leaked: bool,
}

impl Outcome {
    /// The results of request `n` (0 is the first request, which has none).
    fn at(&self, n: usize) -> &[(bool, String)] {
        self.results.get(n).map(Vec::as_slice).unwrap_or_else(|| panic!("no request {n}: {self:#?}"))
    }

    fn denied(&self, n: usize, k: usize) -> bool {
        let (is_error, content) = &self.at(n)[k];
        *is_error && content.contains("permission denied")
    }
}

fn tool_results(requests: &[RecordedRequest], cwd: &Path) -> Vec<Vec<(bool, String)>> {
    let cwd = cwd.display().to_string();
    requests
        .iter()
        .map(|req| {
            let Some(last) = req.messages().last() else { return Vec::new() };
            let Some(blocks) = last["content"].as_array() else { return Vec::new() };
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_result")
                .map(|b| {
                    let content = match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => {
                            parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("\n")
                        }
                        other => other.to_string(),
                    };
                    (b["is_error"].as_bool().unwrap_or(false), skills_dir(&content.replace(&cwd, "<cwd>")))
                })
                .collect()
        })
        .collect()
}

/// `text` with every directory of copied skills (exec's private directory, the run
/// directory) written as `<skills>`.
fn skills_dir(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("/skills/") {
        let start = rest[..at].rfind(|c: char| c.is_whitespace() || c == '"').map_or(0, |i| i + 1);
        out.push_str(&rest[..start]);
        out.push_str("<skills>/");
        rest = &rest[at + "/skills/".len()..];
    }
    out.push_str(rest);
    out
}

fn leaked(requests: &[RecordedRequest]) -> bool {
    requests.iter().any(|r| {
        serde_json::to_string(r.messages()).unwrap().contains(SECRET)
            || r.system().is_some_and(|s| s.to_string().contains(SECRET))
    })
}

/// `N files changed` of the agent's finished line on stderr.
fn reported_changed(stderr: &str) -> usize {
    let at = stderr.rfind(" files changed)").unwrap_or_else(|| panic!("no finished line:\n{stderr}"));
    let digits: String = stderr[..at].chars().rev().take_while(char::is_ascii_digit).collect();
    digits.chars().rev().collect::<String>().parse().unwrap()
}

fn fixture(case: &Case, tag: &str) -> Fixture {
    let files: Vec<(&str, &str)> = case.files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    Fixture::new(&format!("t-eq-{tag}"), &files)
}

async fn exec_outcome(case: &Case) -> Outcome {
    let fx = fixture(case, "exec");
    let mock = MockServer::start().await;
    mock.push_all(case.steps.clone());
    let mut cmd = support::orch();
    cmd.current_dir(&fx.repo)
        .env("ANTHROPIC_API_KEY", "test")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .args(["exec", "--agent-id", "main", "--output-format", "json", "--max-turns"])
        .arg(case.max_turns.to_string())
        .arg("--tools")
        .arg(case.tools.join(","));
    if let Some(mode) = case.mode {
        cmd.args(["--permission-mode", mode]);
    }
    for rule in &case.allow {
        cmd.args(["--allow", rule]);
    }
    for rule in &case.deny {
        cmd.args(["--deny", rule]);
    }
    for path in &case.read {
        cmd.arg("--read").arg(path);
    }
    cmd.arg("Do the task.");
    let out = off_runtime(cmd).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let result: Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{}: exec printed no JSON result ({e}):\n{stdout}\n{stderr}", case.name));
    let requests = mock.requests();
    let cwd = std::fs::canonicalize(&fx.repo).unwrap();
    Outcome {
        results: tool_results(&requests, &cwd),
        status: result["status"].as_str().unwrap().to_owned(),
        changed: status_changes(&fx.repo),
        reported_changed: reported_changed(&stderr),
        leaked: leaked(&requests),
    }
}

async fn run_outcome(case: &Case) -> Outcome {
    let fx = fixture(case, "run");
    let mock = MockServer::start().await;
    mock.push_all(case.steps.clone());
    let mut permissions = serde_json::Map::new();
    if let Some(mode) = case.mode {
        permissions.insert("mode".into(), mode.into());
    }
    permissions.insert("allow".into(), json!(case.allow));
    permissions.insert("deny".into(), json!(case.deny));
    // YAML reads JSON.
    let workflow = json!({
        "version": 1,
        "name": "equivalence",
        "agents": {
            "main": {
                "prompt": "Do the task.",
                "tools": case.tools,
                "limits": { "max_turns": case.max_turns },
                "permissions": permissions,
                "sandbox": { "read": case.read },
            }
        },
        "integrate": "none",
    });
    let mut cmd = fx.mock_command(&workflow.to_string(), &mock.url());
    cmd.arg("--keep-worktrees");
    let out = off_runtime(cmd).await;
    let run = support::Run::from_output(&fx.out, out);
    let agent = run.agent("main").clone();
    let worktree = agent["worktree"].as_str().unwrap_or_else(|| panic!("{}: no worktree kept:\n{agent:#}", case.name));
    let cwd = std::fs::canonicalize(worktree).unwrap();
    let requests = mock.requests();
    let changed = agent["changed_files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["kind"].as_str().unwrap().to_owned()))
        .collect();
    Outcome {
        results: tool_results(&requests, &cwd),
        status: agent["status"].as_str().unwrap().to_owned(),
        changed,
        reported_changed: reported_changed(&run.stderr),
        leaked: leaked(&requests),
    }
}

async fn off_runtime(mut cmd: Command) -> std::process::Output {
    tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap()
}

/// The files of the checkout that differ from HEAD, as the report names their kinds.
fn status_changes(repo: &Path) -> BTreeSet<(String, String)> {
    git(repo, &["status", "--porcelain=v1", "--untracked-files=all"])
        .lines()
        .map(|line| {
            let (code, path) = line.split_at(3);
            let kind = match code.trim() {
                "??" | "A" => "added",
                "D" => "deleted",
                _ => "modified",
            };
            (path.to_owned(), kind.to_owned())
        })
        .collect()
}

async fn check(case: Case) {
    let exec = exec_outcome(&case).await;
    let run = run_outcome(&case).await;
    assert_eq!(exec, run, "{}: `orch exec` (left) and `orch run` (right) differ", case.name);
    (case.expect)(&exec);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_deny_of_rm_holds_in_both() {
    let mut case = Case::new(
        "deny Bash(rm:*) in .claude/settings.json",
        &["Bash", "Write"],
        vec![
            Step::tool("Bash", json!({"command": "rm a.txt"})),
            Step::tool("Bash", json!({"command": "rm -f b.txt"})),
            Step::tool("Write", json!({"file_path": "new.txt", "content": "fresh\n"})),
            Step::text("Done."),
        ],
        |o| {
            assert!(o.denied(1, 0) && o.denied(2, 0), "an rm was not denied: {o:#?}");
            let added = BTreeSet::from([("new.txt".to_string(), "added".to_string())]);
            assert_eq!(o.changed, added, "{o:#?}");
            assert_eq!(o.reported_changed, 1, "{o:#?}");
        },
    );
    case = case.file(".claude/settings.json", r#"{"permissions": {"deny": ["Bash(rm:*)"]}}"#);
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_deny_of_a_secret_directory_keeps_it_from_the_model() {
    let case = Case::new(
        "deny Read(./secrets/**) in .claude/settings.json",
        &["Bash", "Read"],
        vec![
            Step::tool("Bash", json!({"command": "cat secrets/key.txt"})),
            Step::tool("Read", json!({"file_path": "secrets/key.txt"})),
            Step::tool("Read", json!({"file_path": "a.txt"})),
            Step::text("Done."),
        ],
        |o| {
            assert!(!o.leaked, "the secret reached the model: {o:#?}");
            assert!(o.at(1)[0].0 && o.at(2)[0].0, "a read of the secret was not refused: {o:#?}");
            assert!(o.at(3)[0].1.contains("alpha"), "the allowed read failed: {o:#?}");
        },
    )
    .file(".claude/settings.json", r#"{"permissions": {"deny": ["Read(./secrets/**)"]}}"#)
    .file("secrets/key.txt", &format!("{SECRET}\n"));
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_from_flags_decide_alike() {
    let mut case = Case::new(
        "dontAsk with an allow list and a deny from flags",
        &["Bash", "Read"],
        vec![
            Step::tool("Bash", json!({"command": "echo hello"})),
            Step::tool("Bash", json!({"command": "touch made.txt"})),
            Step::tool("Read", json!({"file_path": "b.txt"})),
            Step::text("Done."),
        ],
        |o| {
            assert!(!o.at(1)[0].0 && o.at(1)[0].1.contains("hello"), "the allowed echo failed: {o:#?}");
            assert!(o.denied(2, 0), "touch matched no allow rule but ran: {o:#?}");
            assert!(o.denied(3, 0), "the denied Read ran: {o:#?}");
            assert!(o.changed.is_empty(), "{o:#?}");
        },
    );
    case.mode = Some("dontAsk");
    case.allow = vec!["Bash(echo:*)"];
    case.deny = vec!["Read(./b.txt)"];
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_file_serves_subagent_type() {
    let case = Case::new(
        "Agent {subagent_type: helper} from .claude/agents/helper.md",
        &["Agent", "Read"],
        vec![
            Step::tool("Agent", json!({"subagent_type": "helper", "prompt": "Read a.txt.", "description": "read"})),
            Step::tool("Read", json!({"file_path": "a.txt"})),
            Step::text("HELPER-READ-ALPHA"),
            Step::text("Done."),
        ],
        |o| {
            let (is_error, content) = &o.at(3)[0];
            assert!(!is_error && content.contains("HELPER-READ-ALPHA"), "the helper did not answer: {o:#?}");
            assert!(o.at(2)[0].1.contains("alpha"), "the helper's Read failed: {o:#?}");
        },
    )
    .file(
        ".claude/agents/helper.md",
        "---\nname: helper\ndescription: Reads files.\ntools: Read\n---\nYou read files.\n",
    );
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_skill_loads_alike() {
    let case = Case::new(
        "a skill from .claude/skills",
        &["Skill", "Read"],
        vec![Step::tool("Skill", json!({"skill": "greet"})), Step::text("Done.")],
        |o| {
            let (is_error, content) = &o.at(1)[0];
            assert!(!is_error && content.contains("WAVE-TWICE"), "the skill did not load: {o:#?}");
        },
    )
    .file(
        ".claude/skills/greet/SKILL.md",
        "---\nname: greet\ndescription: Greets people.\n---\nWAVE-TWICE, then say hi.\n",
    );
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settings_hook_blocks_alike() {
    let settings = r#"{"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": "if grep -q forbidden; then echo 'the hook refuses forbidden names' >&2; exit 2; fi"}
    ]}]}}"#;
    let case = Case::new(
        "a PreToolUse hook from .claude/settings.json",
        &["Bash"],
        vec![
            Step::tool("Bash", json!({"command": "touch forbidden.txt"})),
            Step::tool("Bash", json!({"command": "touch fine.txt && rm b.txt"})),
            Step::text("Done."),
        ],
        |o| {
            let (is_error, content) = &o.at(1)[0];
            assert!(*is_error && content.contains("refuses forbidden"), "the hook did not block: {o:#?}");
            let changed = BTreeSet::from([
                ("b.txt".to_string(), "deleted".to_string()),
                ("fine.txt".to_string(), "added".to_string()),
            ]);
            assert_eq!(o.changed, changed, "{o:#?}");
            assert_eq!(o.reported_changed, 2, "{o:#?}");
        },
    )
    .file(".claude/settings.json", settings);
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_server_of_the_repository_serves_alike() {
    let Some(python) = crate::mcp::python() else { return };
    let server = crate::mcp::server_script();
    let mcp = json!({"mcpServers": {"fx": {"command": python, "args": [server]}}});
    let mut case = Case::new(
        "a stdio MCP server from .mcp.json",
        &["mcp__fx__add"],
        vec![Step::tool("mcp__fx__add", json!({"a": 2, "b": 3})), Step::text("Done.")],
        |o| {
            let (is_error, content) = &o.at(1)[0];
            assert!(!is_error && content.contains('5'), "the MCP tool did not answer: {o:#?}");
        },
    )
    .file(".mcp.json", &mcp.to_string());
    case.read.push(server.parent().unwrap().to_path_buf());
    if let Some(venv) = python.parent().and_then(Path::parent).filter(|v| v.join("pyvenv.cfg").is_file()) {
        case.read.push(venv.to_path_buf());
    }
    check(case).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_turn_limit_stops_both_alike() {
    let mut case = Case::new(
        "max_turns 2",
        &["LS"],
        vec![
            Step::tool("LS", json!({"path": "."})),
            Step::tool("LS", json!({"path": "."})),
            Step::tool("LS", json!({"path": "."})),
            Step::text("Done."),
        ],
        |o| {
            assert_eq!(o.results.len(), 2, "more than two model calls: {o:#?}");
            assert_ne!(o.status, "succeeded", "{o:#?}");
        },
    );
    case.max_turns = 2;
    check(case).await;
}
