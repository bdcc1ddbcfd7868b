//! Loading and planning a workflow for a command: diagnostics go to stderr with their
//! positions, and the caller gets the exit code to stop with.
//!
//! `orch validate`, `orch plan` and `orch run` load through [`load_checked`] (or
//! [`load_str_checked`] for a workflow read from a commit), so every check that needs no
//! network or model (container image, `mcp__<server>__<tool>` names against the servers
//! the repository configures, template filters, empty prompts, control characters) runs
//! in one place, `orch_workflows`' validation, and gives the same diagnostics in all
//! three commands.

use std::path::Path;

use orch_workflows::{Diagnostic, Inputs, LoadOptions, Plan, Workflow, render_diagnostics};

use crate::exit::{Code, UsageError};
use crate::repo_config::RepoConfig;

/// Loads `path` with no configuration from outside the file (only the workflow's own
/// `mcp_servers` count), or prints its diagnostics on stderr.
pub fn load(path: &Path) -> Result<Workflow, Code> {
    orch_workflows::load(path).map_err(|diagnostics| report(&diagnostics))
}

/// The load options of a workflow used with the repository `config`: the MCP servers
/// of its `.mcp.json` may be named by `mcp__<server>__<tool>` tools.
pub fn load_options(config: &RepoConfig) -> Result<LoadOptions, UsageError> {
    let servers = crate::hooks_config::repo_mcp_servers(config).map_err(|e| UsageError(e.to_string()))?;
    Ok(LoadOptions {
        mcp_servers: Some(servers.into_keys().collect()),
        env_set: Some(crate::proxy::credentials::is_set),
        ..LoadOptions::default()
    })
}

/// Loads and checks `path` against the repository `config`, as `orch validate` and
/// `orch run` both do. `Ok(Err(code))` when its diagnostics were printed; `Err` when
/// the repository's configuration cannot be read.
pub fn load_checked(path: &Path, config: &RepoConfig) -> Result<Result<Workflow, Code>, UsageError> {
    let options = load_options(config)?;
    Ok(orch_workflows::load_with(path, &options).map_err(|diagnostics| report(&diagnostics)))
}

/// [`load_checked`] of a workflow read from a commit (`name` for diagnostics).
pub fn load_str_checked(text: &str, name: &str, config: &RepoConfig) -> Result<Result<Workflow, Code>, UsageError> {
    let options = load_options(config)?;
    Ok(orch_workflows::load_str_with(text, name, &options).map_err(|diagnostics| report(&diagnostics)))
}

/// The repository configuration a command reads, for the repository at `repo` (`None`:
/// the current directory) under the trust rule of the environment (see
/// [`crate::repo_config`]).
pub fn repo_config(repo: Option<&Path>, trust: &crate::repo_config::Trust) -> Result<RepoConfig, UsageError> {
    let repo = match repo {
        Some(r) => r.to_path_buf(),
        None => std::env::current_dir().map_err(|e| UsageError(format!("cannot read the current directory: {e}")))?,
    };
    let repo = std::fs::canonicalize(&repo).unwrap_or(repo);
    RepoConfig::resolve(&repo, trust).map_err(|e| UsageError(e.to_string()))
}

/// Plans `workflow` with `inputs`, or prints the diagnostics on stderr. A template that
/// reads `pr` gets the changes of the pull request of the environment, if any (see
/// [`crate::changes`]).
pub fn plan(workflow: &Workflow, inputs: &[(String, serde_json::Value)]) -> Result<Plan, Code> {
    plan_with(workflow, inputs, &crate::changes::ChangesRequest::default())
}

/// [`plan`], with the changes `pr` reads found as `changes` says (`--diff-base`, the
/// repository, the run's start).
pub fn plan_with(
    workflow: &Workflow,
    inputs: &[(String, serde_json::Value)],
    changes: &crate::changes::ChangesRequest,
) -> Result<Plan, Code> {
    let builtins = crate::changes::builtins(workflow, changes).map_err(|e| {
        tracing::error!("cannot find the changed files `pr` reads: {e}");
        Code::Usage
    })?;
    let inputs: Inputs = inputs.iter().cloned().collect();
    orch_workflows::plan_with(workflow, &inputs, &builtins).map_err(|diagnostics| report(&diagnostics))
}

fn report(diagnostics: &[Diagnostic]) -> Code {
    crate::notice::text(render_diagnostics(diagnostics));
    let n = diagnostics.len();
    crate::notice::note(format_args!("the workflow is invalid ({n} error{})", if n == 1 { "" } else { "s" }));
    Code::Usage
}
