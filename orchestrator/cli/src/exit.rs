//! The process exit code of an error that ended a command early.

pub use orch_run::exit::{Code, UsageError};

/// The code for an error that ended the command before any agent finished.
pub fn for_error(error: &anyhow::Error) -> Code {
    match error.downcast_ref::<UsageError>() {
        Some(_) => Code::Usage,
        None => Code::Infrastructure,
    }
}
