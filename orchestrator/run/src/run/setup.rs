//! `setup:`: commands run once, before any agent, in their own worktree of the run
//! clone (`<run_dir>/worktrees/setup`, branch `orch/<run>/setup`, never fetched),
//! through a tool host of their own: confined for the filesystem like an agent, but with
//! the network allowed, so `npm ci` or `pip download` can fetch (`full` by default; with
//! `setup: { commands, network: { allow: [...] } }` only the listed hosts, through the
//! run's egress proxy).
//!
//! The caches they fill live in `<run_dir>/cache`, which setup may write and every
//! agent may read. The same variables point both at it: `ORCH_CACHE_DIR`,
//! `XDG_CACHE_HOME`, `npm_config_cache`, `PIP_CACHE_DIR` and `GOMODCACHE`. Each command
//! may run for at most 10 minutes (the `Bash` tool's limit); the first that fails stops
//! the run.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::error::Context as _;
use orch_agents::protocol::HostRequest;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::report::{SetupCommand, SetupReport};
use crate::git::RunClone;
use crate::options::{SandboxSpec, SettingSource};
use crate::session::{AgentSession, SessionSpec};
use orch_agents::NullSink;
use orch_agents::permissions::{Permissions, RuleSet};
use orch_sandbox::policy::Backend;

/// The longest a setup command may run, in milliseconds (the `Bash` tool's maximum).
const COMMAND_TIMEOUT_MS: u64 = 600_000;

/// The shared cache directory and the variables that point at it.
pub fn cache_env(cache: &Path) -> Vec<(String, String)> {
    let at = |sub: &str| cache.join(sub).display().to_string();
    vec![
        ("ORCH_CACHE_DIR".into(), cache.display().to_string()),
        ("XDG_CACHE_HOME".into(), at("xdg")),
        ("npm_config_cache".into(), at("npm")),
        ("PIP_CACHE_DIR".into(), at("pip")),
        ("GOMODCACHE".into(), at("go-mod")),
    ]
}

/// Where setup's commands run: the agents' backend (landlock unless `none`), and the
/// network of `setup:` with the run's egress proxy for an allowlist.
pub struct SetupSandbox<'a> {
    pub backend: orch_workflows::Backend,
    pub network: &'a orch_types::NetworkSetting,
    pub proxy: Option<&'a Arc<crate::proxy::run::RunProxy>>,
}

/// Runs `commands`. `Ok(report)` also when a command failed: then `failed` says which.
pub async fn run(
    clone: &RunClone,
    run_dir: &Path,
    run_id: &str,
    commands: &[String],
    sandbox: SetupSandbox<'_>,
    cancel: &CancellationToken,
) -> crate::error::Result<(SetupReport, Option<String>)> {
    let SetupSandbox { backend, network, proxy } = sandbox;
    let cache = run_dir.join("cache");
    std::fs::create_dir_all(&cache).context("cannot create the setup cache directory")?;
    let log_rel = PathBuf::from("setup.log");
    let mut log = std::fs::File::create(run_dir.join(&log_rel)).context("cannot create setup.log")?;
    let worktree = clone.add_worktree("setup").await.context("cannot create the setup worktree")?;
    let cwd = worktree.path().to_path_buf();
    let git = worktree.git_paths();
    let args = SandboxSpec {
        // Containers have no network; setup needs it, so it runs under landlock there.
        backend: match backend {
            orch_workflows::Backend::None => Backend::None,
            _ => Backend::Landlock,
        },
        network: network.mode(),
        read: git.read_only.clone(),
        write: vec![cache.clone()],
        image: None,
        source: SettingSource::Workflow,
    };
    // The pool is not used (commands go straight to the tool host), but every session
    // has one.
    let permissions = Permissions::new(&RuleSet::default(), &cwd, None, vec![cwd.clone()])
        .map_err(|e| crate::error::Error::Message(format!("cannot set up the setup session: {e}")))?;
    let spec = SessionSpec {
        run: run_id.to_string(),
        agent: "setup".into(),
        cwd: cwd.clone(),
        sandbox: args,
        writes: true,
        read: vec![],
        private: run_dir.join("sandbox").join("setup"),
        env: git.env.iter().cloned().chain(cache_env(&cache)).collect(),
        tools: vec!["Bash".to_string()],
        permissions,
        results_dir: None,
        hooks: Vec::new(),
        model: String::new(),
        mcp_servers: Default::default(),
        session_id: format!("{run_id}/setup"),
        transcript: None,
        file_size_limit: None,
        // Setup sends no model request; its worktree is fresh anyway.
        git: worktree.fresh_snapshot().await.ok(),
        egress: match (network.allowlist(), proxy) {
            (Some(list), Some(proxy)) => Some(
                proxy
                    .grant(
                        "setup",
                        list,
                        Arc::new(
                            |e| tracing::info!(host = %e.host, port = e.port, denied = ?e.denied, "setup network"),
                        ),
                    )
                    .map_err(|e| {
                        crate::error::Error::Message(format!("the network allowlist of `setup` is invalid: {e}"))
                    })?,
            ),
            (Some(_), None) => {
                return Err(crate::error::Error::Message(
                    "`setup` has a network allowlist but the run has no proxy".into(),
                ));
            }
            _ => None,
        },
    };
    let session = AgentSession::start(spec, Arc::new(NullSink), cancel).await?;
    let mut report = SetupReport { commands: Vec::new(), log: log_rel, cache, network: None };
    let mut failed = None;
    for command in commands {
        let at = Instant::now();
        let _ = writeln!(log, "$ {command}");
        tracing::info!("setup: {command}");
        let request = HostRequest::tool(
            "Bash",
            json!({ "command": command, "timeout": COMMAND_TIMEOUT_MS, "description": "setup" }),
        );
        let result = match session.host() {
            Some(host) => host.execute(request, cancel.clone()).await,
            None => Err("the tool host is gone".to_string()),
        };
        let (exit_code, output, ok) = match result {
            Ok(out) if !out.is_error => (Some(0), out.content, true),
            Ok(out) => (exit_code_of(&out.content), out.content, false),
            Err(e) => (None, format!("the setup tool host failed: {e}"), false),
        };
        let _ = writeln!(log, "{}", output.trim_end());
        report.commands.push(SetupCommand {
            command: command.clone(),
            exit_code,
            duration_ms: at.elapsed().as_millis() as u64,
        });
        if !ok {
            let tail: Vec<&str> = output.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            failed = Some(format!("the setup command `{command}` failed:\n{}", tail.join("\n")));
            break;
        }
        if cancel.is_cancelled() {
            failed = Some("setup was interrupted".into());
            break;
        }
    }
    report.network = session.network();
    session.stop().await;
    if let Err(e) = worktree.remove().await {
        tracing::warn!("cannot remove the setup worktree: {e}");
    }
    Ok((report, failed))
}

/// The exit code in a `Bash` error result (`Command failed with exit code N`).
fn exit_code_of(content: &str) -> Option<i32> {
    let rest = content.split("exit code ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit() && c != '-').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn exit_codes_from_bash_errors() {
        assert_eq!(super::exit_code_of("Command failed with exit code 3\nboom"), Some(3));
        assert_eq!(super::exit_code_of("timed out"), None);
    }
}
