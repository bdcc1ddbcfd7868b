//! Durations as workflow files write them: `500ms`, `90s`, `30m`, `1.5h`, `1d`, or
//! combined, largest unit first: `1h30m`, `2m 30s`. The grammar is orch-types' one,
//! shared with the command line.

pub use orch_types::duration::{DURATION_HINT, Duration, DurationError};
