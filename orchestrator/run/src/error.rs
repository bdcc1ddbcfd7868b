//! The error of `orch-run`'s commands: a mistake in how orch was called (exit 2) or a
//! failure outside the user's input, such as git, the sandbox or the file system (exit 3).

use crate::exit::UsageError;

/// What ended a command before its agents could report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad usage, an invalid workflow or configuration.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A step failed: what was being done, and why.
    #[error("{what}: {cause}")]
    Failed { what: String, cause: Box<dyn std::error::Error + Send + Sync> },
    /// A failure that is described in full by its message.
    #[error("{0}")]
    Message(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error(transparent)]
    Sandbox(#[from] orch_sandbox::SandboxError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Model(#[from] orch_agents::model::ModelError),
    #[error(transparent)]
    Container(#[from] orch_sandbox::container::ContainerError),
    #[error(transparent)]
    Host(#[from] orch_sandbox::host::HostError),
    #[error(transparent)]
    Pool(#[from] orch_agents::pipeline::PoolError),
    #[error(transparent)]
    Hooks(#[from] orch_agents::command_hooks::HookConfigError),
    #[error(transparent)]
    RepoConfig(#[from] crate::repo_config::RepoConfigError),
}

impl Error {
    /// Whether this is bad usage (exit 2) rather than a failure (exit 3).
    pub fn is_usage(&self) -> bool {
        matches!(self, Error::Usage(_))
    }
}

/// The result of a command of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Says what was being done when an error happened (as `anyhow::Context` does).
pub trait Context<T> {
    fn context(self, what: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Failed { what: what.into(), cause: Box::new(e) })
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Failed { what: what().into(), cause: Box::new(e) })
    }
}

/// A diagnostic of the positioned YAML loader on one line: `file:line:column: what is
/// wrong (how to fix it)`. Every YAML file orch reads besides workflows reports this way.
pub fn yaml_message(d: &orch_workflows::Diagnostic) -> String {
    format!("{d} ({})", d.hint)
}

/// YAML that the positioned loader must refuse: nine levels of nine aliases (9^9 copies
/// if expanded), in a few hundred bytes.
#[cfg(test)]
pub(crate) fn alias_bomb() -> String {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        text.push_str(&format!("a{i}: &a{i} [{}]\n", vec![format!("*a{}", i - 1); 9].join(", ")));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_keeps_the_cause_in_the_message() {
        let failed: std::result::Result<(), std::io::Error> = Err(std::io::Error::other("disk on fire"));
        let e = failed.context("cannot write the report").unwrap_err();
        assert_eq!(e.to_string(), "cannot write the report: disk on fire");
        assert!(!e.is_usage());
        assert!(Error::from(UsageError("bad flag".into())).is_usage());
    }
}
