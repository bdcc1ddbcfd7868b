//! Branches a resumed run superseded. `orch run --resume DIR` reruns the agents that
//! did not succeed from the work they left, so each rerun agent's new branch holds its
//! old one; after many crash-and-resume cycles the user's repository would keep every
//! attempt's branch. Once a resumed run has fetched its branches, the `orch/<id>/...`
//! branches of the runs it descends from (DIR, the run DIR resumed, and so on, through
//! each report's `resume_of`) are deleted from the user's repository when a branch this
//! run's report points to holds their tip. Branches the report points to (carried-over
//! agents keep an earlier run's branch) stay, and so does any branch with work no kept
//! branch holds: nothing is lost, only duplicates go.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use git2::{BranchType, Oid, Repository};

use super::report::{self, RunReport};

/// The most earlier runs followed back from a resumed run.
const MAX_CHAIN: usize = 1000;

/// Deletes from the user's repository at `user_git_dir` the branches of the runs before
/// `report`'s (starting with the one in `resumed`) that its branches hold; returns them.
pub async fn prune(user_git_dir: PathBuf, resumed: PathBuf, report: &RunReport) -> Vec<String> {
    let keep: Vec<String> = report
        .agents
        .iter()
        .filter_map(|a| a.branch.clone())
        .chain(report.integration.merge.iter().map(|m| m.branch.clone()))
        .chain(report.integration.fetched.iter().map(|f| f.branch.clone()))
        .collect();
    let run_id = report.run_id.clone();
    let pruned = tokio::task::spawn_blocking(move || {
        let runs: Vec<String> = chain(&resumed).into_iter().filter(|id| *id != run_id).collect();
        prune_blocking(&user_git_dir, &runs, &keep)
    })
    .await;
    match pruned {
        Ok(Ok(pruned)) => pruned,
        Ok(Err(e)) => {
            tracing::warn!("cannot prune the branches this run superseded: {e}");
            Vec::new()
        }
        Err(e) => {
            tracing::warn!("cannot prune the branches this run superseded: {e}");
            Vec::new()
        }
    }
}

/// The run ids of the run in `dir` and of those it resumed, newest first.
fn chain(dir: &Path) -> Vec<String> {
    let mut ids = Vec::new();
    let mut seen = HashSet::new();
    let mut next = Some(dir.to_path_buf());
    while let Some(dir) = next.take() {
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        if ids.len() >= MAX_CHAIN || !seen.insert(dir.clone()) {
            break;
        }
        let Ok(r) = report::read(&dir) else { break };
        ids.push(r.run_id);
        next = r.resume_of;
    }
    ids
}

fn prune_blocking(user_git_dir: &Path, runs: &[String], keep: &[String]) -> Result<Vec<String>, git2::Error> {
    let repo = Repository::open(user_git_dir)?;
    let kept: Vec<Oid> =
        keep.iter().filter_map(|b| repo.find_branch(b, BranchType::Local).ok()?.get().target()).collect();
    let held = |tip: Oid| kept.iter().any(|&k| k == tip || repo.graph_descendant_of(k, tip).unwrap_or(false));
    let mut pruned = Vec::new();
    for id in runs {
        let prefix = format!("orch/{id}/");
        let mut found: Vec<(String, Oid)> = Vec::new();
        for branch in repo.branches(Some(BranchType::Local))? {
            let Ok((branch, _)) = branch else { continue };
            let (Ok(Some(name)), Some(tip)) = (branch.name(), branch.get().target()) else { continue };
            if name.starts_with(&prefix) && !keep.iter().any(|k| k == name) {
                found.push((name.to_owned(), tip));
            }
        }
        for (name, tip) in found {
            if !held(tip) {
                continue;
            }
            // Refused for a branch checked out somewhere: it stays.
            match repo.find_branch(&name, BranchType::Local).and_then(|mut b| b.delete()) {
                Ok(()) => pruned.push(name),
                Err(e) => tracing::info!("keeping the superseded branch {name}: {e}"),
            }
        }
    }
    Ok(pruned)
}
