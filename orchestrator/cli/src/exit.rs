//! The process exit code of an error that ended a command early.

pub use orch_run::exit::{Code, UsageError};

/// The code for an error that ended the command before any agent finished.
pub fn for_error(error: &anyhow::Error) -> Code {
    let usage = error.downcast_ref::<UsageError>().is_some()
        || error.downcast_ref::<orch_run::error::Error>().is_some_and(orch_run::error::Error::is_usage);
    if usage { Code::Usage } else { Code::Infrastructure }
}
