//! The permission rules, case by case from a table (`permissions/cases.yaml`): Claude
//! Code's documented rule forms, the modes, and every bypass of issue 15; and the
//! search tools hiding what a `Read` deny covers, through the whole pipeline.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use orch_agents::permissions::{Decision, Mode, Permissions, RuleSet, RuleSource, SourcedRule, Verdict};
use orch_agents::pipeline::ToolPool;
use orch_agents::tools::host::{HostTools, InProcess};
use orch_agents::tools::{DynTool, Session, Tool, ToolContext, ToolError, core_tools};
use orch_agents::{ToolCall, ToolOutput, ToolRunner};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
    #[serde(default)]
    ask: Vec<String>,
    /// The working directory (default `/repo`).
    #[serde(default)]
    cwd: Option<PathBuf>,
    /// The settings file's directory (`/path` rules); default the working directory.
    #[serde(default)]
    settings_dir: Option<PathBuf>,
    tool: String,
    /// Bash: the command line.
    #[serde(default)]
    command: Option<String>,
    /// File tools: the path.
    #[serde(default)]
    path: Option<String>,
    /// Any other input, as JSON.
    #[serde(default)]
    input: Option<Value>,
    /// `allow`, `deny`, or `error` (a rule is rejected).
    expect: String,
    /// Text the denial or error must contain.
    #[serde(default)]
    reason: Option<String>,
}

/// An MCP tool for the table: its name is what rules see.
macro_rules! fake_tool {
    ($ty:ident, $name:literal) => {
        struct $ty;
        #[async_trait]
        impl Tool for $ty {
            type Input = Value;
            const NAME: &'static str = $name;
            fn description(&self) -> &'static str {
                "a stand-in"
            }
            fn permission_subject(&self, input: &Value) -> Option<String> {
                input.get("subagent_type").and_then(Value::as_str).map(str::to_string)
            }
            async fn call(&self, _input: Value, _ctx: &ToolContext) -> Result<String, ToolError> {
                Ok(String::new())
            }
        }
    };
}

fake_tool!(McpGetIssue, "mcp__github__get_issue");
fake_tool!(McpListPrs, "mcp__github__list_prs");
fake_tool!(McpGitlab, "mcp__gitlab__get_issue");
fake_tool!(AgentTool, "Agent");

fn tool(name: &str) -> Arc<dyn DynTool> {
    let mut all = core_tools();
    all.push(Arc::new(McpGetIssue));
    all.push(Arc::new(McpListPrs));
    all.push(Arc::new(McpGitlab));
    all.push(Arc::new(AgentTool));
    all.into_iter().find(|t| t.name() == name).unwrap_or_else(|| panic!("no tool {name} for the table"))
}

fn input(case: &Case) -> Value {
    if let Some(input) = &case.input {
        return input.clone();
    }
    let path = case.path.clone().unwrap_or_default();
    match case.tool.as_str() {
        "Bash" => json!({ "command": case.command.clone().unwrap_or_default() }),
        "Read" => json!({ "file_path": path }),
        "Write" => json!({ "file_path": path, "content": "x" }),
        "Edit" => json!({ "file_path": path, "old_string": "a", "new_string": "b" }),
        "Grep" => json!({ "pattern": "TOKEN", "path": path }),
        "Glob" => json!({ "pattern": "**/*", "path": path }),
        "LS" => json!({ "path": path }),
        _ => json!({}),
    }
}

/// The verdict and message for one case, as the pipeline would decide it.
fn run_case(case: &Case) -> (String, String) {
    let cwd = case.cwd.clone().unwrap_or_else(|| PathBuf::from("/repo"));
    let source = RuleSource {
        file: "/repo/.claude/settings.json".into(),
        line: Some(1),
        settings_dir: case.settings_dir.clone(),
    };
    let mut rules = Vec::new();
    for (verdict, list) in [(Verdict::Deny, &case.deny), (Verdict::Ask, &case.ask), (Verdict::Allow, &case.allow)] {
        rules.extend(list.iter().map(|r| SourcedRule { verdict, rule: r.clone(), source: source.clone() }));
    }
    let mode = case.mode.as_deref().map(|m| Mode::parse(m).unwrap_or_else(|| panic!("bad mode {m}")));
    let permissions = match Permissions::from_rules(
        mode,
        &rules,
        &cwd,
        Some(Path::new("/home/user")),
        vec![PathBuf::from("/repo")],
    ) {
        Ok(p) => p,
        Err(e) => return ("error".into(), e.to_string()),
    };
    let tool = tool(&case.tool);
    let input = input(case);
    assert!(tool.validate(&input).is_ok(), "{}: the input does not validate: {input}", case.name);
    if let Some(reason) = permissions.hard_denial(tool.as_ref(), &input) {
        return ("deny".into(), reason);
    }
    match permissions.decide(tool.as_ref(), &input, false) {
        Decision::Allow => ("allow".into(), String::new()),
        Decision::Deny(reason) => ("deny".into(), reason),
    }
}

#[test]
fn the_table_of_rules_modes_and_bypasses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/permissions/cases.yaml");
    let cases: Vec<Case> = orch_workflows::yaml::load_file_as(&path).unwrap_or_else(|e| panic!("{}", e.render()));
    assert!(cases.len() >= 80, "the table has only {} cases", cases.len());
    let mut failures = Vec::new();
    for case in &cases {
        let (verdict, message) = run_case(case);
        let reason_ok = case.reason.as_deref().is_none_or(|r| message.contains(r));
        if verdict != case.expect || !reason_ok {
            failures.push(format!("{}: expected {}, got {verdict} ({message})", case.name, case.expect));
        }
    }
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), cases.len(), failures.join("\n"));
}

// --- The search tools through the pipeline: results never show a denied path. ---

struct Repo {
    dir: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        for (path, text) in [
            ("src/main.rs", "fn main() {} // TOKEN=public\n"),
            ("secrets/key.txt", "TOKEN=hunter2\n"),
            ("deploy/prod.secret", "TOKEN=prod-password\n"),
            (".env", "TOKEN=dotenv-value\n"),
            ("notes.md", "nothing here\n"),
        ] {
            std::fs::create_dir_all(root.join(path).parent().unwrap()).unwrap();
            std::fs::write(root.join(path), text).unwrap();
        }
        Repo { dir }
    }

    fn pool(&self, deny: &[&str]) -> ToolPool {
        let root = self.dir.path().canonicalize().unwrap();
        let session = Arc::new(Session::new(&root));
        let host = InProcess(HostTools::new(core_tools(), session));
        let rules = RuleSet { deny: deny.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        let permissions = Permissions::new(&rules, &root, None, vec![root.clone()]).unwrap();
        ToolPool::new("agent", core_tools(), Arc::new(host), permissions).unwrap()
    }
}

async fn call(pool: &ToolPool, name: &str, input: Value) -> ToolOutput {
    pool.run(&ToolCall { id: "t1".into(), name: name.into(), input }, CancellationToken::new()).await
}

const DENY: &[&str] = &["Read(./secrets/**)", "Read(*.secret)", "Read(.env*)"];

fn assert_hidden(out: &ToolOutput) {
    for leak in ["hunter2", "prod-password", "dotenv-value", "key.txt", "prod.secret", ".env", "secrets"] {
        assert!(!out.content.contains(leak), "`{leak}` leaked: {}", out.content);
    }
}

#[tokio::test]
async fn grep_without_a_path_never_shows_a_denied_file() {
    let repo = Repo::new();
    let pool = repo.pool(DENY);
    for mode in ["content", "files_with_matches", "count"] {
        let out = call(&pool, "Grep", json!({"pattern": "TOKEN", "output_mode": mode, "-n": true})).await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("main.rs"), "the allowed file is still found: {}", out.content);
        assert_hidden(&out);
    }
    // The same search with no rules finds them: the test can fail.
    let open = call(&repo.pool(&[]), "Grep", json!({"pattern": "TOKEN", "output_mode": "content"})).await;
    assert!(open.content.contains("hunter2") && open.content.contains("prod-password"), "{}", open.content);
}

#[tokio::test]
async fn glob_and_ls_never_name_a_denied_file() {
    let repo = Repo::new();
    let pool = repo.pool(DENY);
    let out = call(&pool, "Glob", json!({"pattern": "**/*"})).await;
    assert!(out.content.contains("main.rs"), "{}", out.content);
    assert_hidden(&out);
    let out = call(&pool, "LS", json!({"path": "."})).await;
    assert!(out.content.contains("main.rs") && out.content.contains("deploy/"), "{}", out.content);
    assert_hidden(&out);
    let open = call(&repo.pool(&[]), "LS", json!({"path": "."})).await;
    assert!(open.content.contains(".env") && open.content.contains("prod.secret"), "{}", open.content);
}

#[tokio::test]
async fn calls_naming_a_denied_path_are_denied_before_they_run() {
    let repo = Repo::new();
    let pool = repo.pool(DENY);
    for (tool, input) in [
        ("Read", json!({"file_path": ".env"})),
        ("Read", json!({"file_path": "secrets/key.txt"})),
        ("Grep", json!({"pattern": "TOKEN", "path": "secrets", "output_mode": "content"})),
        ("Grep", json!({"pattern": "TOKEN", "path": "deploy/prod.secret", "output_mode": "content"})),
        ("Glob", json!({"pattern": "*", "path": "secrets"})),
        ("LS", json!({"path": "secrets"})),
        ("Bash", json!({"command": "cat .env"})),
        ("Bash", json!({"command": "grep -r TOKEN secrets"})),
        ("Write", json!({"file_path": "secrets/key.txt", "content": "overwritten"})),
        ("Edit", json!({"file_path": ".env", "old_string": "TOKEN", "new_string": "X"})),
    ] {
        let out = call(&pool, tool, input.clone()).await;
        assert!(out.is_error && out.content.contains("permission denied"), "{tool} {input}: {}", out.content);
        for leak in ["hunter2", "prod-password", "dotenv-value"] {
            assert!(!out.content.contains(leak), "{tool} {input}: {}", out.content);
        }
    }
    // The victims are untouched.
    let root = repo.dir.path();
    assert_eq!(std::fs::read_to_string(root.join("secrets/key.txt")).unwrap(), "TOKEN=hunter2\n");
    assert_eq!(std::fs::read_to_string(root.join(".env")).unwrap(), "TOKEN=dotenv-value\n");
}
