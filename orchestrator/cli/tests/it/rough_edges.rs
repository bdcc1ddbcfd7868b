//! The rough edges a first user met (issue 14), each through the real binary: a closed
//! pipe after `orch plan`, the sandbox flags of `orch run`, the reason of a failed
//! synthesis, the Docker socket's permission hint, and the terminal after Ctrl-C.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::{Fixture, orch};

/// A plan long enough that it cannot fit in a pipe's buffer.
fn long_workflow(dir: &Path) -> std::path::PathBuf {
    let items: Vec<String> = (0..3000).map(|i| format!("\"file-{i:05}.txt\"")).collect();
    let text = format!(
        "version: 1\nname: long\nagents:\n  fix:\n    for_each: [{}]\n    prompt: \"Fix {{{{ item }}}}.\"\n",
        items.join(", ")
    );
    let path = dir.join("long.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn plan_into_a_reader_that_went_away_exits_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let workflow = long_workflow(dir.path());
    // The whole plan is far larger than a pipe holds, so orch is still writing when the
    // reader goes away, whichever comes first.
    let full = orch().args(["plan"]).arg(&workflow).output().unwrap();
    assert!(full.status.success(), "{}", String::from_utf8_lossy(&full.stderr));
    assert!(full.stdout.len() > 256 * 1024, "the plan is only {} bytes", full.stdout.len());

    let mut child = orch().args(["plan"]).arg(&workflow).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr: {stderr}");
    assert!(!stderr.to_lowercase().contains("broken pipe"), "stderr: {stderr}");
    assert!(stderr.is_empty(), "stderr: {stderr}");
}

#[test]
fn input_text_of_several_lines_fans_out_one_agent_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let workflow = dir.path().join("lines.yaml");
    std::fs::write(
        &workflow,
        "version: 1\nname: lines\ninputs:\n  files: { description: Files }\nagents:\n  fix:\n    for_each: \"{{ inputs.files }}\"\n    \
         prompt: \"Fix {{ item }}.\"\n",
    )
    .unwrap();
    let out = orch()
        .args(["plan", "--format", "json"])
        .arg(&workflow)
        .arg("--input")
        .arg("files=src/a.rs\nsrc/b.rs\n\nsrc/c d.rs\n")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let items: Vec<String> = plan["stages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|stage| stage["agents"].as_array().unwrap().iter())
        .map(|a| a["fan_out"]["item"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(items, ["src/a.rs", "src/b.rs", "src/c d.rs"], "{plan}");
}

const ESCAPE: &str = r#"
version: 1
name: escape
defaults:
  tools: [Bash]
  sandbox: { backend: landlock }
  limits: { max_turns: 3, timeout: 1m }
agents:
  writer:
    prompt: Write outside the worktree.
"#;

/// A Bash call that writes `victim`, outside the worktree.
fn escape_script(victim: &Path) -> String {
    format!(
        r#"
version: 1
agents:
  writer:
    - tool_calls: [{{name: Bash, input: {{command: "echo escaped > {} ; echo done"}}}}]
    - text: Tried.
"#,
        victim.display()
    )
}

#[test]
fn run_backend_flag_replaces_the_workflows_sandbox() {
    // The workflow's landlock sandbox keeps the write out.
    let fx = Fixture::new("t-flag", &[("a.txt", "a\n")]);
    let victim = fx.dir.path().join("outside.txt");
    let run = fx.run(ESCAPE, &escape_script(&victim), &[]);
    run.expect_code(0);
    assert!(!victim.exists(), "the landlock sandbox let a write out of the worktree");

    // `--backend none` on the command line replaces it: the same write lands.
    let fx = Fixture::new("t-flag2", &[("a.txt", "a\n")]);
    let victim = fx.dir.path().join("outside.txt");
    let run = fx.run(ESCAPE, &escape_script(&victim), &["--backend", "none"]);
    run.expect_code(0);
    assert_eq!(std::fs::read_to_string(&victim).unwrap_or_default(), "escaped\n", "stderr: {}", run.stderr);

    // An unknown backend is a usage error that names the flag.
    let fx = Fixture::new("t-flag3", &[("a.txt", "a\n")]);
    let run = fx.run(ESCAPE, &escape_script(&victim), &["--backend", "chroot"]);
    run.expect_code(2);
    assert!(run.stderr.contains("--backend"), "{}", run.stderr);
}

const TWO: &str = r#"
version: 1
name: two
defaults:
  tools: [Read]
  limits: { max_turns: 3, timeout: 1m }
agents:
  one:
    prompt: Say one.
  two:
    prompt: Say two.
"#;

#[test]
fn a_failed_synthesis_says_why_on_stderr() {
    let fx = Fixture::new("t-synth", &[("a.txt", "a\n")]);
    // The script has no turns for synthesis: its one call fails, with a reason.
    let script = "version: 1\nagents:\n  one:\n    - text: One.\n  two:\n    - text: Two.\n";
    let run = fx.run(TWO, script, &[]);
    assert_ne!(run.code, 0);
    let reason = run.report["synthesis"]["reason"].as_str().unwrap_or_default().to_owned();
    assert!(!reason.is_empty(), "the report has no synthesis reason: {}", run.report["synthesis"]);
    let line = run.stderr.lines().find(|l| l.contains("synthesis failed")).unwrap_or_default();
    assert!(line.contains(reason.lines().next().unwrap()), "no reason in `{line}`; stderr:\n{}", run.stderr);
}

/// Whether `uid` may reach and run `path` (every directory on the way searchable by
/// others, the file executable by others).
fn others_may_run(path: &Path) -> bool {
    path.ancestors().skip(1).all(|d| std::fs::metadata(d).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
        && std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o005 == 0o005)
}

#[test]
fn a_docker_socket_that_refuses_this_user_names_the_docker_group() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("docker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    // No one but root may open it: not even its owner.
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o000)).unwrap();
    let mut cmd = orch();
    cmd.args(["sandbox", "run", "--backend", "container", "--image", "orch-test:busybox", "--", "true"])
        .env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .current_dir(dir.path());
    if nix::unistd::geteuid().is_root() {
        // Root may open any socket: the refusal is seen by another user, as on a runner
        // outside the `docker` group.
        let bin = assert_cmd::cargo::cargo_bin("orch");
        if !others_may_run(&bin) {
            eprintln!("skipped as root: {} is not reachable by other users", bin.display());
            return;
        }
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        cmd.uid(65534).gid(65534).env("HOME", dir.path());
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("permission denied"), "{stderr}");
    assert!(stderr.contains("`docker` group"), "{stderr}");
}

const SLOW: &str = r#"
version: 1
name: slow
defaults:
  tools: [Bash]
  limits: { max_turns: 3, timeout: 5m }
agents:
  sleeper:
    prompt: Sleep.
"#;

const SLOW_SCRIPT: &str = r#"
version: 1
agents:
  sleeper:
    - tool_calls: [{name: Bash, input: {command: "sleep 60"}}]
    - text: Slept.
"#;

/// The size of the terminals the tests give orch (`stty` sets it in the terminal
/// `script` makes): the live view fills its lines to the width and counts on the
/// terminal to wrap, so the screen is read at the same size.
const ROWS: u16 = 50;
const COLS: u16 = 120;

/// The shell command that runs `run` in a terminal of [`ROWS`] by [`COLS`].
fn sized(run: &std::process::Command) -> String {
    let argv: Vec<String> =
        std::iter::once(run.get_program()).chain(run.get_args()).map(|a| shell_quote(&a.to_string_lossy())).collect();
    format!("stty rows {ROWS} cols {COLS}; exec {}", argv.join(" "))
}

/// The screen a terminal shows after `bytes`, one string per row, trailing blanks cut.
fn screen(bytes: &[u8]) -> Vec<String> {
    let mut parser = vt100::Parser::new(ROWS, COLS, 0);
    parser.process(bytes);
    parser.screen().rows(0, COLS).map(|r| r.trim_end().to_owned()).collect()
}

#[test]
fn ctrl_c_leaves_no_frozen_progress_lines_on_the_terminal() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        panic!("`script` (util-linux) is needed to give orch a terminal");
    }
    let fx = Fixture::new("t-tty", &[("a.txt", "a\n")]);
    let run = fx.command(SLOW, SLOW_SCRIPT);
    // The command line `script` runs in a terminal of its own.
    let typescript = fx.dir.path().join("typescript");
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-q", "-f", "-e", "-c", &sized(&run)])
        .arg(&typescript)
        .current_dir(fx.dir.path())
        .env("TERM", "xterm-256color")
        .env("NO_COLOR", "1")
        .env_remove("CI")
        .env_remove("GITHUB_ACTIONS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in run.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut script = cmd.spawn().unwrap();
    // Wait until the live view shows the agent at work.
    let deadline = Instant::now() + Duration::from_secs(60);
    let orch_pid = loop {
        let seen = std::fs::read(&typescript).unwrap_or_default();
        if String::from_utf8_lossy(&seen).contains("Bash sleep 60")
            && let Some(pid) = find_orch_pid(&fx.out)
        {
            break pid;
        }
        assert!(Instant::now() < deadline, "the live view never showed the agent:\n{}", String::from_utf8_lossy(&seen));
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(500));
    // Ctrl-C, twice, as a terminal sends it: to the foreground process group.
    let group = nix::unistd::getpgid(Some(nix::unistd::Pid::from_raw(orch_pid))).unwrap();
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGINT);
    let status = script.wait().unwrap();
    let bytes = std::fs::read(&typescript).unwrap();
    let rows = screen(&bytes);
    let text = rows.join("\n");
    assert_eq!(status.code(), Some(130), "screen:\n{text}");
    // What stays on the screen: the finished agent's line and orch's messages, but no
    // spinner row of the live view (the overall line or a running agent's line).
    for row in &rows {
        assert!(!row.contains(" running · "), "a frozen overall line is left:\n{text}");
        assert!(!row.contains("sleeper · turn"), "a frozen agent line is left:\n{text}");
    }
    assert!(text.contains("sleeper"), "the agent's end is not on the screen:\n{text}");
}

const THREE: &str = r#"
version: 1
name: three
concurrency: 1
defaults:
  tools: [Bash]
  limits: { max_turns: 3, timeout: 5m }
agents:
  first:
    prompt: Nap.
  second:
    prompt: Nap.
  third:
    prompt: Nap.
"#;

const THREE_SCRIPT: &str = r#"
version: 1
agents:
  first:
    - tool_calls: [{name: Bash, input: {command: "sleep 1"}}]
    - text: Napped.
  second:
    - tool_calls: [{name: Bash, input: {command: "sleep 1"}}]
    - text: Napped.
  third:
    - tool_calls: [{name: Bash, input: {command: "sleep 1"}}]
    - text: Napped.
  synthesis:
    - text: All three napped.
"#;

/// Runs `run` to its end in a terminal of its own (`script`), with `TERM` set and `CI`
/// unset unless `env` sets it; its exit code and everything it wrote to the terminal.
fn in_terminal(fx: &Fixture, run: &std::process::Command, env: &[(&str, &str)]) -> (Option<i32>, Vec<u8>) {
    let typescript = fx.dir.path().join("typescript");
    let _ = std::fs::remove_file(&typescript);
    let mut cmd = std::process::Command::new("script");
    cmd.args(["-q", "-f", "-e", "-c", &sized(run)])
        .arg(&typescript)
        .current_dir(fx.dir.path())
        .env("TERM", "xterm-256color")
        .env("NO_COLOR", "1")
        .env_remove("CI")
        .env_remove("GITHUB_ACTIONS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in run.get_envs() {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let status = cmd.status().expect("`script` (util-linux) is needed to give orch a terminal");
    (status.code(), std::fs::read(&typescript).unwrap())
}

#[test]
fn the_live_view_counts_agents_and_leaves_only_lines_that_stay() {
    let fx = Fixture::new("t-live", &[("a.txt", "a\n")]);
    let (code, bytes) = in_terminal(&fx, &fx.command(THREE, THREE_SCRIPT), &[]);
    let seen = String::from_utf8_lossy(&bytes);
    let rows = screen(&bytes);
    let text = rows.join("\n");
    assert_eq!(code, Some(0), "screen:\n{text}");
    // While it ran: the count, what runs and waits, and the totals so far.
    for frame in ["0/3 finished · 1 running · 2 pending", "1/3 finished · 1 running · 1 pending"] {
        assert!(seen.contains(frame), "the live view never showed `{frame}`:\n{seen}");
    }
    assert!(seen.contains(" turns · ") && seen.contains(" tokens · $"), "no totals in the live view:\n{seen}");
    // At the end: each agent's line and the summary stay; no live line does.
    for row in &rows {
        assert!(!row.contains(" running · ") && !row.contains(" pending"), "a live line is left:\n{text}");
        assert!(!row.contains("· turn "), "an agent's live line is left:\n{text}");
    }
    for agent in ["first", "second", "third"] {
        assert!(rows.iter().any(|r| r.starts_with(&format!("✓ {agent} succeeded"))), "no line for {agent}:\n{text}");
    }
    assert!(text.contains("orch: 3/3 agents finished · "), "no summary:\n{text}");

    // With `CI` set the same terminal gets plain lines and no live view.
    let fx = Fixture::new("t-live-ci", &[("a.txt", "a\n")]);
    let (code, bytes) = in_terminal(&fx, &fx.command(THREE, THREE_SCRIPT), &[("CI", "true")]);
    let seen = String::from_utf8_lossy(&bytes);
    assert_eq!(code, Some(0), "{seen}");
    assert!(seen.contains("orch: first started") && seen.contains("orch: third succeeded"), "{seen}");
    assert!(!seen.contains(" finished · "), "a live view under CI:\n{seen}");
}

#[test]
fn a_run_that_fails_before_any_agent_starts_draws_no_live_line() {
    let fx = Fixture::new("t-live-early", &[("a.txt", "a\n")]);
    std::fs::remove_dir_all(fx.repo.join(".git")).unwrap();
    let (code, bytes) = in_terminal(&fx, &fx.command(THREE, THREE_SCRIPT), &[]);
    let text = screen(&bytes).join("\n");
    assert_eq!(code, Some(2), "screen:\n{text}");
    assert!(text.contains("error: "), "no error on the screen:\n{text}");
    assert!(!String::from_utf8_lossy(&bytes).contains(" finished · "), "a live line was drawn:\n{text}");
}

/// The pid of the `orch run` process writing into `out` (found by its arguments).
fn find_orch_pid(out: &Path) -> Option<i32> {
    let needle = out.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<String> = cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.get(1).is_some_and(|a| a == "run") && args.contains(&needle) {
            return Some(pid);
        }
    }
    None
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

const MIXED: &str = r#"
version: 1
name: mixed
defaults:
  tools: [Read]
  limits: { max_turns: 3, timeout: 1m }
agents:
  ok:
    prompt: Answer.
  bad:
    prompt: Fail.
  short:
    prompt: Read forever.
    limits: { max_turns: 1 }
  after:
    needs: [bad]
    prompt: Never runs.
synthesis:
  prompt: Combine.
"#;

const MIXED_SCRIPT: &str = r#"
version: 1
agents:
  ok:
    - text: "Done: <b>&amp; ]]> \"quoted\" ::error::x"
  short:
    - tool_calls: [{name: Read, input: {file_path: a.txt}}]
    - text: Never reached.
  synthesis:
    - text: Combined.
"#;

#[test]
fn the_junit_report_validates_against_junit_10_xsd() {
    let fx = Fixture::new("t-junit", &[("a.txt", "a\n")]);
    let junit = fx.dir.path().join("junit.xml");
    let run = fx.run(MIXED, MIXED_SCRIPT, &["--junit", junit.to_str().unwrap()]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    let statuses: Vec<String> = ["ok", "bad", "short", "after"]
        .iter()
        .map(|id| run.agent(id)["status"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(statuses, ["succeeded", "failed", "partial", "skipped"], "{}", run.stderr);
    let xsd = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/junit/junit-10.xsd");
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&xsd)
        .arg(&junit)
        .output()
        .expect("xmllint (libxml2-utils; .ci/setup.sh installs it) is needed to check the JUnit schema");
    assert!(
        out.status.success(),
        "junit.xml fails junit-10.xsd: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&junit).unwrap()
    );
}

const PEEK: &str = r#"
version: 1
name: peek
defaults:
  tools: [Read]
  limits: { max_turns: 3, timeout: 1m }
agents:
  peek:
    prompt: Read notes.txt.
"#;

const PEEK_SCRIPT: &str = r#"
version: 1
agents:
  peek:
    - tool_calls: [{name: Read, input: {file_path: notes.txt}}]
    - text: Read it.
"#;

#[test]
fn a_dirty_checkout_is_named_and_base_worktree_uses_it() {
    let fx = Fixture::new("t-dirty", &[("notes.txt", "committed\n")]);
    std::fs::write(fx.repo.join("notes.txt"), "uncommitted edit\n").unwrap();
    std::fs::write(fx.repo.join("new.txt"), "new\n").unwrap();

    // The default base is HEAD: the agent sees the commit, and orch says what it misses.
    let run = fx.run(PEEK, PEEK_SCRIPT, &[]);
    run.expect_code(0);
    let read = run.tool_results("peek");
    assert!(read[0].2.contains("committed") && !read[0].2.contains("uncommitted"), "{read:?}");
    assert!(
        run.stderr.contains("warning: the checkout has 2 uncommitted changes")
            && run.stderr.contains("--base WORKTREE"),
        "{}",
        run.stderr
    );

    // --base WORKTREE: the agent sees the edit; the user's checkout is untouched.
    let fx2 = Fixture { run_id: "t-dirty2".into(), out: fx.dir.path().join("out2"), ..fx };
    let before = fx2.snapshot_user_repo();
    let run = fx2.run(PEEK, PEEK_SCRIPT, &["--base", "WORKTREE"]);
    run.expect_code(0);
    let read = run.tool_results("peek");
    assert!(read[0].2.contains("uncommitted edit"), "{read:?}");
    assert!(!run.stderr.contains("warning: the checkout has"), "{}", run.stderr);
    assert_eq!(fx2.snapshot_user_repo(), before, "the run changed the user's checkout");
}

/// Out-of-range `--concurrency` and a misspelt `--tools` name are usage errors (exit 2)
/// that say what is allowed, with the closest tool name.
#[test]
fn flag_values_out_of_range_and_unknown_tools_are_refused() {
    for value in ["0", "100000"] {
        let out = orch().args(["run", "w.yaml", "--concurrency", value]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "--concurrency {value}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("1..=1024"), "--concurrency {value}");
    }
    let out = orch().args(["exec", "--tools", "Glob,Raed", "hello"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown tool `Raed`; did you mean `Read`?"), "{stderr}");
}

/// `orch exec --limit` goes through the `limits:` parser: an unknown key or a value of the
/// wrong kind is a usage error (exit 2) naming the flag.
#[test]
fn exec_limit_flags_are_checked_by_the_limits_parser() {
    for (flag, expect) in
        [("max_turn=3", "unknown field `max_turn`"), ("max_disk=lots", "--limit"), ("max_turns", "KEY=VALUE")]
    {
        let out = orch().args(["exec", "--limit", flag, "hello"]).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "--limit {flag}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expect), "--limit {flag}: {stderr}");
    }
}

/// A start that fails leaves no run directory behind: not in a directory that is no git
/// repository, not with a base that does not exist, not for a workflow naming a skill the
/// repository lacks; neither under `--out` nor under the default runs directory.
#[test]
fn a_failed_start_leaves_no_run_directory() {
    let script = "version: 1\nagents:\n  peek:\n    - text: Read it.\n";
    let skill = "version: 1\nname: skill\nagents:\n  peek:\n    prompt: Read notes.txt.\n    skills: [missing]\n";
    for name in ["not-git", "bad-base", "no-skill"] {
        let fx = Fixture::new(&format!("t-left-{name}"), &[("notes.txt", "notes\n")]);
        let (workflow, extra): (&str, &[&str]) = match name {
            "not-git" => {
                std::fs::remove_dir_all(fx.repo.join(".git")).unwrap();
                (PEEK, &[])
            }
            "bad-base" => (PEEK, &["--base", "no-such-ref"]),
            _ => (skill, &[]),
        };
        // --out, a directory orch makes.
        let run = fx.run(workflow, script, extra);
        assert_eq!(run.code, 2, "{name}: {}", run.stderr);
        assert!(!fx.out.exists(), "{name}: the run directory was left: {:?}", std::fs::read_dir(&fx.out).ok());
        // --out, an empty directory the user made: it stays, empty.
        std::fs::create_dir(&fx.out).unwrap();
        let run = fx.run(workflow, script, extra);
        assert_eq!(run.code, 2, "{name}: {}", run.stderr);
        let left: Vec<_> = std::fs::read_dir(&fx.out).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{name}: orch left {left:?} in the user's directory");
        std::fs::remove_dir(&fx.out).unwrap();
        // The default runs directory.
        let runs = fx.dir.path().join("runs");
        let out = orch()
            .current_dir(fx.dir.path())
            .arg("run")
            .arg(fx.write("workflow.yaml", workflow))
            .args(["--provider", "scripted", "--script"])
            .arg(fx.write("script.yaml", script))
            .arg("--repo")
            .arg(&fx.repo)
            .args(["--run-id", &fx.run_id])
            .args(extra)
            .env("ORCH_RUNS_DIR", &runs)
            .env("XDG_STATE_HOME", fx.dir.path().join("state"))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{name}: {}", String::from_utf8_lossy(&out.stderr));
        let left: Vec<_> = std::fs::read_dir(&runs).into_iter().flatten().flatten().map(|e| e.path()).collect();
        assert!(left.is_empty(), "{name}: left in the runs directory: {left:?}");
    }
}
