//! Exit codes, as DESIGN.md and the README document them, and the error that means bad
//! usage. The one place that gives outcomes their numbers and decides the code of an
//! agent's ending and of a finished run; the binary only converts a [`Code`] into the
//! process's status and maps an early error to `Usage` or `Infrastructure`.

use orch_agents::Terminal;
use orch_agents::event::Status;

use crate::run::report::{AgentStatus, RunReport};

/// What the process tells its caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Every agent succeeded.
    Success = 0,
    /// The work failed.
    Failed = 1,
    /// Bad usage or an invalid workflow.
    Usage = 2,
    /// The sandbox, git or the model API (auth, network) failed.
    Infrastructure = 3,
    /// Finished, but an agent stopped at a limit with partial work.
    Partial = 4,
    /// Interrupted by SIGINT.
    Interrupted = 130,
    /// Interrupted by SIGTERM.
    Terminated = 143,
}

impl From<Code> for std::process::ExitCode {
    fn from(code: Code) -> Self {
        std::process::ExitCode::from(code as u8)
    }
}

impl Code {
    /// The code for one agent's terminal state.
    pub fn for_terminal(terminal: &Terminal) -> Code {
        let disposition = terminal.disposition();
        match disposition.status {
            _ if disposition.infrastructure => Code::Infrastructure,
            Status::Succeeded => Code::Success,
            Status::Partial => Code::Partial,
            Status::Failed | Status::Cancelled => Code::Failed,
        }
    }

    /// The code of a finished run (DESIGN.md, "CLI"): the first signal's, else the
    /// worst of its agents, synthesis, setup and integration.
    pub fn for_run(report: &RunReport, setup_failed: bool, interrupted: Option<Code>) -> Code {
        if let Some(code) = interrupted {
            return code;
        }
        let counted = || report.agents.iter().filter(|a| !a.continue_on_failure);
        let synthesis_failed = report.synthesis.as_ref().is_some_and(|s| s.status == AgentStatus::Failed);
        if counted().any(|a| a.status == AgentStatus::Failed && a.infrastructure) || report.integration.error.is_some()
        {
            return Code::Infrastructure;
        }
        if setup_failed || synthesis_failed || counted().any(|a| a.status == AgentStatus::Failed) {
            return Code::Failed;
        }
        if counted().any(|a| matches!(a.status, AgentStatus::Cancelled)) {
            return Code::Failed;
        }
        if counted().any(|a| matches!(a.status, AgentStatus::Partial | AgentStatus::Skipped))
            || report.synthesis.as_ref().is_some_and(|s| s.status == AgentStatus::Partial)
        {
            return Code::Partial;
        }
        Code::Success
    }
}

/// A mistake in how orch was called; exits with [`Code::Usage`].
#[derive(Debug)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}
