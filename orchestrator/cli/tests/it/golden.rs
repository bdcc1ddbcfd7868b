//! The golden differential suite: every case of tests/golden/ runs through `orch exec`
//! against the test kit's mock model server, and its outcome is compared with what the
//! real Claude Code did with the same tool calls (tests/golden/expected/*.json, recorded
//! by tests/golden/record.sh): each call's error flag, the text that must (and must not)
//! reach the model, and the files the run changed. Wording may differ.
//!
//! tests/golden/differences.yaml marks the cases where orch differs: `deliberate` ones
//! (orch's own expected outcome is given there and checked) and `known_difference` ones
//! (reported, not compared).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use orch_testkit::mock::{MockServer, parse_steps};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::{git, orch};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden")
}

/// How orch's outcome of a case may differ from Claude Code's.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Difference {
    /// Why orch differs on purpose; `calls` and `files` then give orch's outcome.
    deliberate: Option<String>,
    /// Why orch differs today without meaning to; the case is not compared.
    known_difference: Option<String>,
    /// orch's error flag for each call, in order (deliberate cases).
    calls: Option<Vec<bool>>,
    /// orch's changed files, path to content or null for deleted (deliberate cases).
    files: Option<BTreeMap<String, Option<String>>>,
}

/// One recorded case: the case itself and Claude Code's outcome.
struct Golden {
    name: String,
    case: Value,
    expected: Value,
}

fn load() -> Vec<Golden> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(golden_dir().join("expected"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    for path in paths {
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        out.push(Golden {
            name: v["case"]["name"].as_str().unwrap().to_string(),
            case: v["case"].clone(),
            expected: v["claude_code"].clone(),
        });
    }
    out
}

fn subst(value: &Value, repo: &str) -> Value {
    match value {
        Value::String(s) => Value::String(s.replace("$REPO", repo)),
        Value::Array(a) => Value::Array(a.iter().map(|v| subst(v, repo)).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), subst(v, repo))).collect()),
        other => other.clone(),
    }
}

/// A fixture file's text: a string, or `{lines: N}` for "line 1" to "line N"; with
/// `{width: W}`, each line is padded with x to about W characters and ends in "|end"
/// (as record.py writes them).
fn content(value: &Value) -> String {
    let Some(n) = value.get("lines").and_then(Value::as_u64) else {
        return value.as_str().unwrap().to_string();
    };
    let width = value.get("width").and_then(Value::as_u64).unwrap_or(0) as usize;
    let pad = "x".repeat(width.saturating_sub(10));
    let end = if pad.is_empty() { "" } else { "|end" };
    (1..=n).map(|i| format!("line {i}{pad}{end}\n")).collect()
}

/// The tool calls of the case in order, with the ids the script gives them.
fn calls(case: &Value) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for turn in case["turns"].as_array().unwrap() {
        if let Some(list) = turn.as_array() {
            for call in list {
                out.push((format!("toolu_golden_{:02}", out.len() + 1), call.clone()));
            }
        }
    }
    out
}

/// The mock server's steps, as record.py serves them to Claude Code.
fn steps(case: &Value, repo: &str) -> Value {
    let mut steps = Vec::new();
    let mut n = 0;
    for turn in case["turns"].as_array().unwrap() {
        if let Some(list) = turn.as_array() {
            let calls: Vec<Value> = list
                .iter()
                .map(|call| {
                    n += 1;
                    json!({"id": format!("toolu_golden_{n:02}"), "name": call["name"],
                           "input": subst(call.get("input").unwrap_or(&json!({})), repo)})
                })
                .collect();
            steps.push(json!({"reply": {"tool_calls": calls}}));
        } else {
            steps.push(json!({"reply": {"text": turn["text"]}}));
        }
    }
    Value::Array(steps)
}

fn tree(root: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path.strip_prefix(root).unwrap().display().to_string();
                out.insert(rel, String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn strings(value: &Value, out: &mut String) {
    match value {
        Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

fn block_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            parts.iter().filter_map(|p| p.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join("\n")
        }
        other => other.to_string(),
    }
}

/// What orch did with one case.
struct Outcome {
    /// Per tool_use id: the error flag and the text that reached the model.
    results: BTreeMap<String, (bool, String)>,
    /// Every string of every request's messages.
    everything: String,
    /// Changed files, path to content (None: deleted).
    files: BTreeMap<String, Option<String>>,
    stderr: String,
}

async fn run(case: Value) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let repo_path = dir.path().canonicalize().unwrap().join("repo");
    std::fs::create_dir_all(&repo_path).unwrap();
    let repo = repo_path.display().to_string();
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    if let Some(map) = case.get("files").and_then(Value::as_object) {
        for (rel, text) in map {
            files.insert(rel.clone(), content(&subst(text, &repo)));
        }
    }
    if let Some(settings) = case.get("settings") {
        files.insert(
            ".claude/settings.json".into(),
            serde_json::to_string_pretty(&subst(settings, &repo)).unwrap() + "\n",
        );
    }
    for (rel, text) in &files {
        let path = repo_path.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    git(&repo_path, &["init", "-q", "-b", "main"]);
    git(&repo_path, &["add", "-A"]);
    git(
        &repo_path,
        &[
            "-c",
            "user.name=golden",
            "-c",
            "user.email=golden@example.com",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "fixture",
        ],
    );
    let before = tree(&repo_path);

    let mock = MockServer::start().await;
    mock.push_all(parse_steps(&steps(&case, &repo).to_string()).unwrap());
    mock.set_default(parse_steps(r#"[{"reply": {"text": "done"}}]"#).unwrap().pop());

    let mut tools: BTreeSet<String> = calls(&case)
        .iter()
        .filter(|(_, c)| c.get("offer") != Some(&Value::Bool(false)))
        .map(|(_, c)| c["name"].as_str().unwrap().into())
        .collect();
    if let Some(extra) = case.get("orch_tools").and_then(Value::as_array) {
        tools.extend(extra.iter().map(|t| t.as_str().unwrap().to_string()));
    }
    let mut cmd = orch();
    cmd.current_dir(&repo_path)
        .env("ANTHROPIC_API_KEY", "golden")
        .env("ANTHROPIC_BASE_URL", mock.url())
        .env("HOME", dir.path())
        .args(["exec", "-p", case.get("prompt").and_then(Value::as_str).unwrap_or("Do the task.")])
        .args(["--model", "claude-sonnet-4-5", "--output-format", "stream-json", "--max-turns", "20"])
        .args(["--timeout", "60s", "--tools", &tools.into_iter().collect::<Vec<_>>().join(",")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(allowed) = case.get("allowed_tools").and_then(Value::as_array) {
        let list: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
        cmd.args(["--allowedTools", &list.join(",")]);
    }
    match case.get("mode").and_then(Value::as_str) {
        None => {
            cmd.arg("--dangerously-skip-permissions");
        }
        Some("settings") => {}
        Some(mode) => {
            cmd.args(["--permission-mode", mode]);
        }
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap()).await.unwrap();
    if let Some(settle) = case.get("settle").and_then(Value::as_f64) {
        tokio::time::sleep(Duration::from_secs_f64(settle)).await;
    }

    let mut results = BTreeMap::new();
    let mut everything = String::new();
    for req in mock.requests() {
        let messages = &req.json["messages"];
        strings(messages, &mut everything);
        for msg in messages.as_array().into_iter().flatten() {
            for block in msg["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" {
                    let id = block["tool_use_id"].as_str().unwrap_or_default().to_string();
                    let text = block_text(&block["content"]).replace(&repo, "$REPO");
                    results.entry(id).or_insert((block["is_error"].as_bool().unwrap_or(false), text));
                }
            }
        }
    }
    let after = tree(&repo_path);
    let paths: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let files = paths
        .into_iter()
        .filter(|p| before.get(*p) != after.get(*p))
        .map(|p| (p.clone(), after.get(p).map(|t| t.replace(&repo, "$REPO").trim().to_string())))
        .collect();
    Outcome {
        results,
        everything: everything.replace(&repo, "$REPO"),
        files,
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(|s| s.as_str().map(String::from)).collect()
}

/// How orch's outcome differs from what is expected of it; empty when it matches.
fn compare(golden: &Golden, diff: &Difference, got: &Outcome) -> Vec<String> {
    let mut problems = Vec::new();
    let expected_calls = golden.expected["calls"].as_array().unwrap();
    for (i, (id, call)) in calls(&golden.case).iter().enumerate() {
        let want = &expected_calls[i];
        let tool = call["name"].as_str().unwrap();
        let Some((is_error, text)) = got.results.get(id) else {
            problems.push(format!("call {} ({tool}): no tool result reached the model", i + 1));
            continue;
        };
        let want_error = match &diff.calls {
            Some(flags) => flags[i],
            None => want["is_error"].as_bool().unwrap_or(false),
        };
        if *is_error != want_error {
            let short: String = text.chars().take(200).collect();
            problems.push(format!("call {} ({tool}): is_error {is_error}, expected {want_error}: {short:?}", i + 1));
        }
        for frag in strs(&want["must_reach"]) {
            if !text.contains(&frag) {
                problems.push(format!("call {} ({tool}): result lacks {frag:?}", i + 1));
            }
        }
        for frag in strs(&want["must_not_reach"]) {
            if text.contains(&frag) {
                problems.push(format!("call {} ({tool}): result has {frag:?}", i + 1));
            }
        }
    }
    for frag in strs(&golden.expected["reach"]) {
        if !got.everything.contains(&frag) {
            problems.push(format!("no request reached the model with {frag:?}"));
        }
    }
    for frag in strs(&golden.expected["not_reach"]) {
        if got.everything.contains(&frag) {
            problems.push(format!("a request reached the model with {frag:?}"));
        }
    }
    let want_files: BTreeMap<String, Option<String>> = match &diff.files {
        Some(files) => files.clone(),
        None => serde_json::from_value(golden.expected["files"].clone()).unwrap(),
    };
    let want_files: BTreeMap<String, Option<String>> =
        want_files.into_iter().map(|(p, t)| (p, t.map(|t| t.trim().to_string()))).collect();
    if golden.case.get("loose_files").and_then(Value::as_bool).unwrap_or(false) {
        let want: BTreeSet<&String> = want_files.keys().collect();
        let have: BTreeSet<&String> = got.files.keys().collect();
        if want != have {
            problems.push(format!("changed files {have:?}, expected {want:?}"));
        }
    } else if want_files != got.files {
        problems.push(format!("changed files {:?}, expected {want_files:?}", got.files));
    }
    problems
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orch_ends_every_golden_case_as_claude_code_does() {
    let differences: BTreeMap<String, Difference> = orch_workflows::yaml::load_as(
        "differences.yaml",
        &std::fs::read(golden_dir().join("differences.yaml")).unwrap(),
    )
    .unwrap();
    let goldens = load();
    assert!(goldens.len() >= 60, "the golden suite has {} cases; it needs at least 60", goldens.len());
    let names: BTreeSet<&String> = goldens.iter().map(|g| &g.name).collect();
    for (name, diff) in &differences {
        assert!(names.contains(name), "differences.yaml names {name:?}, which has no golden file");
        assert!(
            diff.deliberate.is_some() != diff.known_difference.is_some(),
            "differences.yaml: {name} needs exactly one of deliberate and known_difference"
        );
        assert!(
            diff.deliberate.is_none() || (diff.calls.is_some() && diff.files.is_some()),
            "differences.yaml: the deliberate {name} needs orch's `calls` and `files`"
        );
    }
    let started = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(4));
    let mut tasks = Vec::new();
    for golden in &goldens {
        let permits = permits.clone();
        let case = golden.case.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = permits.acquire_owned().await.unwrap();
            run(case).await
        }));
    }
    let (mut passed, mut failed, mut known, mut now_match) = (0, Vec::new(), 0, Vec::new());
    let none = Difference::default();
    for (golden, task) in goldens.iter().zip(tasks) {
        let got = task.await.unwrap();
        let diff = differences.get(&golden.name).unwrap_or(&none);
        let problems = compare(golden, diff, &got);
        match (&diff.known_difference, problems.is_empty()) {
            (Some(_), true) => now_match.push(golden.name.clone()),
            (Some(_), false) => known += 1,
            (None, true) => passed += 1,
            (None, false) => {
                let tail: String = got.stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                failed.push(format!("{}: {}\n    orch stderr (last lines): {tail}", golden.name, problems.join("; ")));
            }
        }
    }
    eprintln!(
        "golden: {} cases, {passed} pass, {} fail, {known} known differences, {:.1} s",
        goldens.len(),
        failed.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "{} golden cases differ from Claude Code:\n{}", failed.len(), failed.join("\n"));
    // A mark that no longer holds hides the next regression of that case.
    assert!(
        now_match.is_empty(),
        "these known differences match Claude Code now; drop their marks in tests/golden/differences.yaml: {now_match:?}"
    );
}
