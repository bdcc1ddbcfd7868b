//! Exit codes, as DESIGN.md documents them, and the error that means bad usage.

use orch_agents::Terminal;

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
        match terminal.disposition().exit_code {
            0 => Code::Success,
            3 => Code::Infrastructure,
            4 => Code::Partial,
            _ => Code::Failed,
        }
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
