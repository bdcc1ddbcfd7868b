//! `orch init` and `orch runs` through the binary: each recipe written into a fresh
//! repository passes `orch validate` (and actionlint, when it is installed), an
//! existing file is never overwritten without `--force`; runs under a state directory
//! of the test's own are listed with their state and cleaned by age, never a running one.

use std::path::{Path, PathBuf};

use crate::support::{git, orch};

const RECIPES: [(&str, [&str; 2]); 3] = [
    ("pr-review", [".github/orch/review.yaml", ".github/workflows/orch-review.yml"]),
    ("nightly-refactor", [".github/orch/nightly.yaml", ".github/workflows/orch-nightly.yml"]),
    ("issue-triage", [".github/orch/triage.yaml", ".github/workflows/orch-triage.yml"]),
];

fn repo() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("main.go"), "package main\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "start"]);
    (dir, repo)
}

fn init(dir: &Path, args: &[&str]) -> std::process::Output {
    orch().current_dir(dir).arg("init").args(args).output().unwrap()
}

#[test]
fn every_recipe_writes_files_that_validate() {
    for (recipe, files) in RECIPES {
        let (_dir, repo) = repo();
        // From a subdirectory: the files go to the repository's root.
        let sub = repo.join("cmd");
        std::fs::create_dir(&sub).unwrap();
        let out = init(&sub, &[recipe]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "orch init {recipe}: {stderr}");
        assert!(out.stdout.is_empty(), "orch init writes nothing on stdout: {}", String::from_utf8_lossy(&out.stdout));
        for file in files {
            assert!(repo.join(file).is_file(), "{recipe}: {file} was not written");
        }
        assert!(stderr.contains("is valid"), "{recipe}: not validated: {stderr}");
        assert!(stderr.contains("the secret ANTHROPIC_API_KEY"), "{recipe}: {stderr}");
        assert!(stderr.contains("permissions (workflow): contents: "), "{recipe}: {stderr}");
        let actions = std::fs::read_to_string(repo.join(files[1])).unwrap();
        assert!(actions.contains("uses: orch-ci/orch@v1"), "{recipe}: the Action is not pinned:\n{actions}");
        assert!(!actions.contains("<owner>") && !actions.contains("orch@main"), "{recipe}: a placeholder is left");
        // `orch validate` accepts the orch workflow on its own too.
        let validate = orch().current_dir(&repo).arg("validate").arg(files[0]).output().unwrap();
        assert!(validate.status.success(), "{recipe}: {}", String::from_utf8_lossy(&validate.stderr));
        if crate::github_workflows::actionlint_installed() {
            let (clean, problems) = crate::github_workflows::lint(&[repo.join(files[1])]);
            assert!(clean, "{recipe}: actionlint found problems:\n{problems}");
        }
    }
}

#[test]
fn existing_files_are_kept_unless_forced() {
    let (_dir, repo) = repo();
    std::fs::create_dir_all(repo.join(".github/orch")).unwrap();
    std::fs::write(repo.join(".github/orch/review.yaml"), "mine\n").unwrap();
    let out = init(&repo, &["pr-review"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(".github/orch/review.yaml") && stderr.contains("--force"), "{stderr}");
    assert_eq!(std::fs::read_to_string(repo.join(".github/orch/review.yaml")).unwrap(), "mine\n");
    assert!(!repo.join(".github/workflows/orch-review.yml").exists(), "a file was written after a refusal");

    let out = init(&repo, &["pr-review", "--force"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let review = std::fs::read_to_string(repo.join(".github/orch/review.yaml")).unwrap();
    assert!(review.contains("name: pr-review"), "{review}");

    // A link in a file's place, even a dangling one, counts as a file; --force replaces
    // the link and never writes through it.
    let (dir, repo) = self::repo();
    let elsewhere = dir.path().join("elsewhere.yml");
    std::fs::create_dir_all(repo.join(".github/workflows")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, repo.join(".github/workflows/orch-triage.yml")).unwrap();
    let out = init(&repo, &["issue-triage"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(".github/workflows/orch-triage.yml"), "{stderr}");
    let out = init(&repo, &["issue-triage", "--force"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!elsewhere.exists(), "--force wrote through a link");
    let meta = std::fs::symlink_metadata(repo.join(".github/workflows/orch-triage.yml")).unwrap();
    assert!(meta.file_type().is_file());
}

#[test]
fn mistakes_are_usage_errors() {
    let (dir, repo) = repo();
    let out = init(&repo, &["pr-reveiw"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("did you mean `pr-review`?") && stderr.contains("issue-triage"), "{stderr}");

    let outside = dir.path().join("plain");
    std::fs::create_dir(&outside).unwrap();
    let out = orch()
        .current_dir(&outside)
        .env("GIT_CEILING_DIRECTORIES", dir.path())
        .args(["init", "pr-review"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not in a git repository"), "{stderr}");
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "something was written outside a repository");
}

#[test]
fn list_shows_every_recipe() {
    let (_dir, repo) = repo();
    let out = init(&repo, &["--list"]);
    assert!(out.status.success());
    insta::assert_snapshot!("init_list", String::from_utf8(out.stdout).unwrap());
}

mod runs {
    use std::path::Path;

    use serde_json::Value;

    use crate::support::orch;

    fn run_dir(state: &Path, id: &str, status: &str, started_at: &str) -> std::path::PathBuf {
        let dir = state.join("orch/runs").join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let report =
            serde_json::json!({ "schema_version": 1, "run_id": id, "status": status, "started_at": started_at });
        std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
        std::fs::write(dir.join("transcript.jsonl"), vec![b'x'; 64 * 1024]).unwrap();
        dir
    }

    fn runs(state: &Path, args: &[&str]) -> std::process::Output {
        orch().env("XDG_STATE_HOME", state).env("HOME", state.join("home")).arg("runs").args(args).output().unwrap()
    }

    /// Holds `dir`'s run lock from another process (as a coordinator does) until killed.
    fn hold(dir: &Path) -> std::process::Child {
        // One process holds it (no child of `flock` keeps it after a kill).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exec 9>\"$1\" && flock 9 && exec sleep 60", "sh"])
            .arg(dir.join("run.lock"))
            .spawn()
            .unwrap();
        for _ in 0..100 {
            let busy = std::process::Command::new("flock")
                .args(["-n", "-E", "9"])
                .arg(dir.join("run.lock"))
                .arg("true")
                .status()
                .unwrap();
            if busy.code() == Some(9) {
                return child;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("flock did not take the lock");
    }

    #[test]
    fn list_and_clean() {
        let state = tempfile::tempdir().unwrap();
        let s = state.path();
        let old = run_dir(s, "20200101-000000-aaaaaa", "succeeded", "2020-01-01T00:00:00.000Z");
        let live = run_dir(s, "20200102-000000-bbbbbb", "running", "2020-01-02T00:00:00.000Z");
        let killed = run_dir(s, "20200103-000000-cccccc", "running", "2020-01-03T00:00:00.000Z");
        let now = orch_now();
        let young = run_dir(s, "young", "failed", &now);
        let mut holder = hold(&live);

        let out = runs(s, &["list", "--json"]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list: Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows: Vec<(&str, &str)> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].as_str().unwrap(), r["status"].as_str().unwrap()))
            .collect();
        assert_eq!(
            rows,
            [
                ("20200101-000000-aaaaaa", "succeeded"),
                ("20200102-000000-bbbbbb", "running"),
                ("20200103-000000-cccccc", "incomplete"),
                ("young", "failed"),
            ]
        );
        assert!(list[0]["size_bytes"].as_u64().unwrap() >= 64 * 1024, "{list}");
        assert_eq!(list[0]["started_at"], "2020-01-01T00:00:00.000Z");

        let table = runs(s, &["list"]);
        let table = String::from_utf8(table.stdout).unwrap();
        assert!(table.starts_with("ID") && table.contains("incomplete") && table.contains("KiB"), "{table}");

        let dry = runs(s, &["clean", "--older-than", "7d", "--dry-run"]);
        let stderr = String::from_utf8_lossy(&dry.stderr);
        assert!(dry.status.success(), "{stderr}");
        assert!(stderr.contains("would remove 20200101-000000-aaaaaa") && stderr.contains("would free"), "{stderr}");
        assert!(old.exists() && killed.exists(), "a dry run removed something");

        let clean = runs(s, &["clean", "--older-than", "7d"]);
        let stderr = String::from_utf8_lossy(&clean.stderr);
        assert!(clean.status.success(), "{stderr}");
        assert!(!old.exists() && !killed.exists(), "{stderr}");
        assert!(live.exists(), "a running run was removed: {stderr}");
        assert!(young.exists(), "a young run was removed: {stderr}");
        assert!(stderr.contains("kept 20200102-000000-bbbbbb: it is still running"), "{stderr}");
        assert!(stderr.contains("freed ") && stderr.contains("(2 runs removed"), "{stderr}");

        holder.kill().unwrap();
        holder.wait().unwrap();
        let clean = runs(s, &["clean", "--older-than", "7d"]);
        assert!(clean.status.success());
        assert!(!live.exists(), "{}", String::from_utf8_lossy(&clean.stderr));

        let bad = runs(s, &["clean", "--older-than", "soon"]);
        assert_eq!(bad.status.code(), Some(2));
        let none = runs(&s.join("empty"), &["list", "--json"]);
        assert_eq!(String::from_utf8(none.stdout).unwrap().trim(), "[]");
    }

    /// Now, as report.json writes it.
    fn orch_now() -> String {
        let out = std::process::Command::new("date").args(["-u", "+%Y-%m-%dT%H:%M:%S.000Z"]).output().unwrap();
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    }
}
