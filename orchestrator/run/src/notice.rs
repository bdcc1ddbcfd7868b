//! What the library tells the person in front of orch outside a run's [`Reporter`]
//! (before a run starts, in `orch plan`, in the tool host): notes (`orch: …`) and
//! verbatim text (rendered workflow diagnostics), sent as `tracing` events of their own
//! targets. The binary's logging shows both at every verbosity; warnings and errors are
//! plain `tracing::warn!`/`tracing::error!`. Nothing here writes to stdout or stderr.
//!
//! [`Reporter`]: crate::run::Reporter

use std::fmt::Display;

/// The target of a note: shown as `orch: <line>` whatever the verbosity.
pub const NOTE: &str = "orch::note";

/// The target of verbatim text: shown as it is (it carries its own prefixes and line
/// breaks).
pub const TEXT: &str = "orch::text";

/// A progress line or note for the user (`orch: ` is added by the binary).
pub fn note(line: impl Display) {
    tracing::info!(target: NOTE, "{line}");
}

/// Text shown exactly as it is, such as rendered diagnostics.
pub fn text(text: impl Display) {
    tracing::info!(target: TEXT, "{text}");
}
