//! `tracing` logs on stderr, set by `RUST_LOG` or `-v`, without colour when `NO_COLOR`
//! is set or stderr is not a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info,orch=debug,orch_agents=debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let colour = std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false)
        .try_init();
}
