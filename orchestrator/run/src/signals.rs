//! Turns SIGINT, SIGTERM and SIGHUP into cancellation of the run's token, and remembers
//! which signal came so the exit code and the report can say so. SIGHUP (the terminal
//! went away) is handled as SIGTERM: same grace, same commits, same exit code.
//!
//! The first signal cancels the run: agents stop, their work is committed, a partial
//! report is written at once and the final one when teardown is over. A second signal
//! (coreutils' `timeout` sends one to the process and one to its group; GitHub sends
//! SIGINT, then SIGTERM) only hurries: grace periods shrink to nothing and commits
//! come before the slow parts of clean-up. No signal skips a commit: only SIGKILL
//! stops orch before its agents' work is committed (then `orch recover` does it).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::Code;
use crate::run::StopReason;

/// Set by the second signal: the process is in a hurry.
static HURRY: AtomicBool = AtomicBool::new(false);

/// Whether a second signal came: teardown then skips its grace periods.
pub fn hurried() -> bool {
    HURRY.load(Ordering::SeqCst)
}

/// Which signal, if any, interrupted the run.
#[derive(Debug, Clone, Default)]
pub struct Interrupts {
    seen: Arc<AtomicU8>,
}

impl Interrupts {
    /// The exit code the interrupt asks for, if one came.
    pub fn code(&self) -> Option<Code> {
        match self.seen.load(Ordering::SeqCst) {
            2 => Some(Code::Interrupted),
            1 | 15 => Some(Code::Terminated),
            _ => None,
        }
    }

    /// Why the run stopped, if a signal stopped it.
    pub fn reason(&self) -> Option<StopReason> {
        let name = match self.seen.load(Ordering::SeqCst) {
            1 => "SIGHUP",
            2 => "SIGINT",
            15 => "SIGTERM",
            _ => return None,
        };
        Some(StopReason::Interrupted(name))
    }
}

/// Cancels `token` on the first SIGINT, SIGTERM or SIGHUP; a second one makes
/// [`hurried`] true.
/// Signals never end the process here: the run ends once its work is committed.
pub fn watch(token: CancellationToken) -> std::io::Result<Interrupts> {
    let interrupts = Interrupts::default();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let seen = interrupts.seen.clone();
    tokio::spawn(async move {
        let mut count = 0u32;
        loop {
            let number = tokio::select! {
                _ = int.recv() => 2u8,
                _ = term.recv() => 15u8,
                _ = hup.recv() => 1u8,
            };
            count += 1;
            if count == 1 {
                seen.store(number, Ordering::SeqCst);
                tracing::warn!("interrupted; stopping and committing the agents' work (a second signal hurries)");
                token.cancel();
            } else if !HURRY.swap(true, Ordering::SeqCst) {
                tracing::warn!(
                    "interrupted again; committing the agents' work now, without grace periods (only SIGKILL \
                     skips the commits; `orch recover DIR` finishes after one)"
                );
            }
        }
    });
    Ok(interrupts)
}
