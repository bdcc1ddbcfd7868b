//! The async runtime a coordinator command runs on: its flavor follows the work, and
//! `ORCH_RUNTIME` overrides it.
//!
//! - `current-thread` for work that runs one agent at a time: `orch exec`, and an
//!   `orch run` whose workflow has a single agent without `for_each`, or runs with
//!   concurrency 1. Every task then runs on the main thread (blocking work still goes
//!   to the blocking pool), so a turn wakes no other thread: hyper's connection task,
//!   the query loop and the tool host's pipes hand over to each other in place. On the
//!   work-stealing scheduler those hand-overs wake parked workers, about a third of a
//!   turn's time (BENCHMARKS.md, "Harness overhead per turn").
//! - `multi-thread` (tokio's work-stealing scheduler, a worker per core) for everything
//!   else: many agents at once spread their parsing, git work and proxying over the
//!   cores.

use std::path::Path;

/// What a command will run, as far as the runtime is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// Never two agents at once.
    OneAgentAtATime,
    /// Possibly many agents at once, or not known.
    Many,
}

impl Work {
    /// The work of `orch run WORKFLOW` (with `--concurrency`, when given). A workflow
    /// that does not load counts as [`Work::Many`]; the run itself reports why.
    pub fn of_run(workflow: &Path, concurrency: Option<u32>) -> Self {
        if concurrency == Some(1) {
            return Self::OneAgentAtATime;
        }
        match orch_workflows::load(workflow) {
            Ok(w) if concurrency.is_none() && w.concurrency == Some(1) => Self::OneAgentAtATime,
            Ok(w) if w.agents.len() == 1 && w.agents.iter().all(|a| a.for_each.is_none()) => Self::OneAgentAtATime,
            _ => Self::Many,
        }
    }
}

/// Why [`build`] made no runtime.
#[derive(Debug)]
pub enum BuildError {
    /// `ORCH_RUNTIME` names no flavor (a usage error).
    Flavor(String),
    /// The runtime could not start.
    Start(std::io::Error),
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Flavor(other) => write!(
                f,
                "ORCH_RUNTIME is {other:?}; use `current-thread` or `multi-thread`, or unset it to let orch choose"
            ),
            Self::Start(e) => write!(f, "cannot start the async runtime: {e}"),
        }
    }
}

/// Builds the runtime for `work`, or the one `ORCH_RUNTIME` names.
pub fn build(work: Work) -> Result<tokio::runtime::Runtime, BuildError> {
    let flavor = std::env::var("ORCH_RUNTIME").unwrap_or_default();
    let mut builder = match (flavor.as_str(), work) {
        ("", Work::OneAgentAtATime) | ("current-thread", _) => tokio::runtime::Builder::new_current_thread(),
        ("", Work::Many) | ("multi-thread", _) => tokio::runtime::Builder::new_multi_thread(),
        (other, _) => return Err(BuildError::Flavor(other.to_string())),
    };
    builder.enable_all().build().map_err(BuildError::Start)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work_of(yaml: &str, concurrency: Option<u32>) -> Work {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.yaml");
        std::fs::write(&path, yaml).unwrap();
        Work::of_run(&path, concurrency)
    }

    const ONE: &str = "version: 1\nagents:\n  a: { prompt: p }\nintegrate: none\n";
    const TWO: &str = "version: 1\nagents:\n  a: { prompt: p }\n  b: { prompt: q }\nintegrate: none\n";
    const FAN_OUT: &str = "version: 1\nagents:\n  a: { prompt: \"{{ item }}\", for_each: [x, y] }\nintegrate: none\n";

    #[test]
    fn one_agent_at_a_time_only_when_the_workflow_says_so() {
        assert_eq!(work_of(ONE, None), Work::OneAgentAtATime);
        assert_eq!(work_of(TWO, None), Work::Many);
        assert_eq!(work_of(FAN_OUT, None), Work::Many);
        assert_eq!(work_of(TWO, Some(1)), Work::OneAgentAtATime);
        assert_eq!(work_of(&format!("concurrency: 1\n{TWO}"), None), Work::OneAgentAtATime);
        // The flag replaces the file's `concurrency:`.
        assert_eq!(work_of(&format!("concurrency: 1\n{TWO}"), Some(4)), Work::Many);
        assert_eq!(work_of("not: [a workflow", None), Work::Many);
        assert_eq!(Work::of_run(Path::new("/nonexistent/w.yaml"), None), Work::Many);
    }
}
