//! Crash injection for the recovery tests: with `ORCH_FAIL_POINT=<name>` in its
//! environment, orch kills itself with SIGKILL when it reaches the point of that name,
//! the way an out-of-memory kill or a power cut would stop it there. Without the
//! variable (as in every real run) a point costs one environment lookup and does
//! nothing.
//!
//! The points, in the order a run reaches them:
//!
//! - `creating-clone`: the run directory and its lock exist, the run clone does not.
//! - `clone-created`: the run clone is made, no report is written yet.
//! - `integrated`: every agent ended and their branches are integrated and fetched; a
//!   resumed run's superseded branches are not pruned and the teardown record is not
//!   written yet.
//! - `removing-clone`: the teardown record is written and the run clone's repository is
//!   half removed (`repo.git` gone, the agents' repositories and checkouts still there).
//! - `removed-clone`: the run clone is gone, the final report is not written yet.

/// The environment variable that names the point to crash at.
pub const VAR: &str = "ORCH_FAIL_POINT";

/// Kills the process with SIGKILL when `ORCH_FAIL_POINT` is `name`.
pub fn hit(name: &str) {
    if std::env::var_os(VAR).is_some_and(|v| v == name) {
        tracing::warn!("{VAR}={name}: killing this process here, as a crash would");
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
