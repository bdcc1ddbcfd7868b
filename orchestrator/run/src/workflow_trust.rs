//! The trust rule applied to the workflow file itself (see [`crate::repo_config`]).
//!
//! When the checked-out commit is not the trusted ref (and without
//! `--trust-repo-config`), a workflow file that lives in the repository is read from the
//! trusted ref, as blobs from the object database, never from the checkout; one that
//! exists only in the checkout is refused. A workflow file outside the repository is not
//! the checkout's to change and is used as it is. Such an untrusted run also refuses the
//! settings that take the sandbox away: `backend: none` and `network: full`.

use std::path::{Path, PathBuf};

use orch_agents::permissions::normalize;
use orch_workflows::{Backend, NetworkSetting, Plan, PlanNode, Workflow};

use crate::exit::{Code, UsageError};
use crate::repo_config::Trust;

/// A workflow loaded under the trust rule.
#[derive(Debug)]
pub struct Loaded {
    pub workflow: Workflow,
    /// Whether this run is untrusted: the checkout is not the trusted ref.
    pub untrusted: bool,
    /// Where the workflow came from, for `orch plan`.
    pub from: String,
}

/// Loads the workflow at `path` for a run on `repo` (`None`: the current directory),
/// checked against that repository's configuration (see
/// [`crate::workflow::load_checked`]), read under `trust`. `Ok(Err(code))` when its diagnostics were printed; `Err` for a refused
/// workflow.
pub fn load(path: &Path, repo: Option<&Path>, trust: &Trust) -> Result<Result<Loaded, Code>, UsageError> {
    let config = crate::workflow::repo_config(repo, trust)?;
    let untrusted = config.is_trusted_ref();
    let as_given = |from: String| {
        let loaded = move |workflow| Loaded { workflow, untrusted, from };
        Ok(crate::workflow::load_checked(path, &config)?.map(loaded))
    };
    if !untrusted {
        return as_given(format!("{} as given ({})", path.display(), config.why()));
    }
    let Some(rel) = inside(path, config.root()) else {
        return as_given(format!(
            "{} as given (outside the repository, so not the checkout's to change)",
            path.display()
        ));
    };
    let rel = rel.to_string_lossy().into_owned();
    let text = config.read(&rel).map_err(|e| UsageError(e.to_string()))?.ok_or_else(|| {
        UsageError(format!(
            "the checked-out commit is not the trusted ref, and the workflow `{rel}` does not exist in {}, so it \
             exists only in the checkout and is not trusted; add it to the default branch first, or pass \
             --trust-repo-config to run the checked-out file",
            config.describe()
        ))
    })?;
    crate::notice::note(format_args!("the workflow `{rel}` comes from {}", config.describe()));
    let name = format!("{rel} (from {})", config.describe());
    let from = format!("{rel} from {}", config.describe());
    Ok(crate::workflow::load_str_checked(&text, &name, &config)?.map(|workflow| Loaded { workflow, untrusted, from }))
}

/// `path` relative to the repository root `root`, when it is inside it: as written
/// (made absolute), or with its directory's links resolved.
fn inside(path: &Path, root: &Path) -> Option<PathBuf> {
    let absolute = std::path::absolute(path).ok()?;
    let lexical = normalize(&absolute);
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    if let Ok(rel) = lexical.strip_prefix(&root) {
        return Some(rel.to_path_buf());
    }
    let dir = std::fs::canonicalize(lexical.parent()?).ok()?;
    dir.join(lexical.file_name()?).strip_prefix(&root).ok().map(Path::to_path_buf)
}

/// In an untrusted run, refuses an agent (or the setup that runs with the first
/// agent's backend) without a sandbox or with the full network, naming the YAML key.
pub fn check_plan(workflow: &Workflow, plan: &Plan, untrusted: bool) -> Result<(), UsageError> {
    if !untrusted {
        return Ok(());
    }
    let specs = plan.nodes().map(|n| match n {
        PlanNode::Agent(spec) => spec,
        PlanNode::DynamicFanOut(d) => &d.template,
    });
    for spec in specs {
        let own = workflow.agents.iter().find(|a| a.id == spec.agent).map(|a| &a.sandbox);
        let key = |field: &str, set: bool| {
            if set { format!("agents.{}.sandbox.{field}", spec.agent) } else { format!("defaults.sandbox.{field}") }
        };
        let refuse = |key: String, value: &str, why: &str| {
            UsageError(format!(
                "`{key}: {value}` is refused when the checked-out commit is not the trusted ref: {why}; remove it, \
                 or pass --trust-repo-config if the checkout is trusted"
            ))
        };
        if spec.sandbox.backend == Backend::None {
            let set = own.is_some_and(|s| s.backend.is_some());
            return Err(refuse(
                key("backend", set),
                "none",
                "agents (and setup, which uses the first agent's backend) run without a sandbox",
            ));
        }
        if spec.sandbox.network == NetworkSetting::Full {
            let set = own.is_some_and(|s| s.network.is_some());
            return Err(refuse(key("network", set), "full", "it gives agents the unrestricted network"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_inside_the_repository_are_found_by_name_or_through_links() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("repo");
        std::fs::create_dir_all(root.join(".github/orch")).unwrap();
        std::os::unix::fs::symlink(root.join(".github"), dir.path().join("link")).unwrap();
        let got = inside(&root.join(".github/orch/../orch/review.yaml"), &root);
        assert_eq!(got.as_deref(), Some(Path::new(".github/orch/review.yaml")));
        let got = inside(&dir.path().join("link/orch/review.yaml"), &root);
        assert_eq!(got.as_deref(), Some(Path::new(".github/orch/review.yaml")));
        assert_eq!(inside(&dir.path().join("elsewhere.yaml"), &root), None);
    }

    fn plan_of(text: &str) -> (Workflow, Plan) {
        let workflow = orch_workflows::load_str(text, "w.yaml").unwrap();
        let plan = orch_workflows::plan(&workflow, &orch_workflows::Inputs::default()).unwrap();
        (workflow, plan)
    }

    #[test]
    fn an_untrusted_run_refuses_no_sandbox_and_the_full_network() {
        let (w, p) = plan_of("version: 1\nname: t\nagents:\n  a:\n    prompt: x\n    sandbox: { backend: none }\n");
        let err = check_plan(&w, &p, true).unwrap_err().0;
        assert!(err.contains("`agents.a.sandbox.backend: none`"), "{err}");
        assert!(check_plan(&w, &p, false).is_ok());
        let (w, p) =
            plan_of("version: 1\nname: t\ndefaults:\n  sandbox: { network: full }\nagents:\n  a:\n    prompt: x\n");
        let err = check_plan(&w, &p, true).unwrap_err().0;
        assert!(err.contains("`defaults.sandbox.network: full`"), "{err}");
        let (w, p) = plan_of("version: 1\nname: t\nagents:\n  a:\n    prompt: x\n");
        assert!(check_plan(&w, &p, true).is_ok());
    }

    #[test]
    fn an_untrusted_run_accepts_an_allowlist_but_not_a_full_network_override() {
        let text =
            "version: 1\nname: t\nagents:\n  a:\n    prompt: x\n    sandbox: { network: { allow: [preset:rust] } }\n";
        let (w, p) = plan_of(text);
        assert!(check_plan(&w, &p, true).is_ok());
        // `orch run --network full` replaces the allowlist, and is refused like the key.
        let mut w = orch_workflows::load_str(text, "w.yaml").unwrap();
        let flags = crate::options::SandboxOverride { network: Some(orch_types::Network::Full), ..Default::default() };
        flags.apply(&mut w);
        let p = orch_workflows::plan(&w, &orch_workflows::Inputs::default()).unwrap();
        let err = check_plan(&w, &p, true).unwrap_err().0;
        assert!(err.contains("`agents.a.sandbox.network: full`"), "{err}");
        // `--network none` replaces it too, and is accepted.
        let mut w = orch_workflows::load_str(text, "w.yaml").unwrap();
        let flags = crate::options::SandboxOverride { network: Some(orch_types::Network::None), ..Default::default() };
        flags.apply(&mut w);
        assert_eq!(w.agents[0].sandbox.network, Some(orch_types::NetworkSetting::None));
    }
}
