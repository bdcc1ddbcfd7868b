//! Sandbox settings turned into a policy: roots made canonical, settings from the
//! workflow named as the workflow spells them, private directories removed afterwards.

use std::path::PathBuf;

use orch_run::host::AgentSandbox;
use orch_run::options::{SandboxSpec, SettingSource};
use orch_run::sandbox::{PolicyInput, PrivateDirs, build_policy};
use orch_sandbox::policy::{Backend, Network};

fn spec(backend: Backend, source: SettingSource) -> SandboxSpec {
    SandboxSpec { backend, network: Network::None, read: vec![], write: vec![], image: None, source }
}

#[test]
fn a_policy_has_canonical_roots_and_the_spec_s_settings() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::create_dir(cwd.join("data")).unwrap();
    let dirs = PrivateDirs::create(cwd.join("private")).unwrap();
    let mut spec = spec(Backend::Landlock, SettingSource::Flags);
    spec.read = vec![PathBuf::from("data/../data")];
    spec.network = Network::Full;
    spec.image = Some("img".into());
    let input = PolicyInput { cwd: &cwd, write: vec![], read: vec![], dirs: &dirs, name: "t".into(), wall_time: None };
    let policy = build_policy(&spec, input).unwrap();
    assert!(policy.read.contains(&cwd.join("data")), "{:?}", policy.read);
    assert!(policy.write.contains(&dirs.tmp) && policy.write.contains(&dirs.home), "{:?}", policy.write);
    assert_eq!(
        (policy.backend, policy.network, policy.image.as_deref()),
        (Backend::Landlock, Network::Full, Some("img"))
    );

    spec.read = vec![PathBuf::from("missing")];
    let input = PolicyInput { cwd: &cwd, write: vec![], read: vec![], dirs: &dirs, name: "t".into(), wall_time: None };
    let error = build_policy(&spec, input).unwrap_err().to_string();
    assert!(error.contains("missing") && error.contains("existing path"), "{error}");
    dirs.remove();
    assert!(!cwd.join("private").exists());
}

#[test]
fn a_workflow_container_without_an_image_names_the_workflow_key() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("sandbox");
    for (source, wanted) in [(SettingSource::Workflow, "sandbox.image"), (SettingSource::Flags, "--image NAME")] {
        let error =
            AgentSandbox::prepare(&spec(Backend::Container, source), dir.path(), true, vec![], "t", base.clone())
                .unwrap_err();
        assert!(error.is_usage(), "{error}");
        assert!(error.to_string().contains(wanted), "{error}");
        // Refused before anything was created.
        assert!(!base.exists());
    }
}

#[test]
fn teardown_removes_the_private_directories() {
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    let base = cwd.join("sandbox");
    let sandbox = AgentSandbox::prepare(
        &spec(Backend::Landlock, SettingSource::Workflow),
        &cwd,
        false,
        vec![],
        "t",
        base.clone(),
    )
    .unwrap();
    assert!(base.join("tmp").is_dir() && base.join("home").is_dir());
    assert!(sandbox.policy.read.contains(&cwd), "a read-only agent reads its directory");
    assert!(!sandbox.policy.write.contains(&cwd), "and does not write it");
    sandbox.teardown();
    assert!(!base.exists());
}
