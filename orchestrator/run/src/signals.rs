//! Turns SIGINT and SIGTERM into cancellation of the run's token, and remembers which
//! signal came so the exit code can say so.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::Code;

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
            15 => Some(Code::Terminated),
            _ => None,
        }
    }
}

/// Cancels `token` on the first SIGINT or SIGTERM. A second signal exits at once.
pub fn watch(token: CancellationToken) -> std::io::Result<Interrupts> {
    let interrupts = Interrupts::default();
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    let seen = interrupts.seen.clone();
    tokio::spawn(async move {
        let mut count = 0;
        loop {
            let number = tokio::select! {
                _ = int.recv() => 2u8,
                _ = term.recv() => 15u8,
            };
            count += 1;
            if count == 1 {
                seen.store(number, Ordering::SeqCst);
                tracing::warn!("interrupted; stopping (send the signal again to exit at once)");
                token.cancel();
            } else {
                std::process::exit(128 + i32::from(number));
            }
        }
    });
    Ok(interrupts)
}
