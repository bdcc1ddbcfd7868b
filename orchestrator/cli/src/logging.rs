//! `tracing` logs on stderr, set by `RUST_LOG` or `-v`, in the prefix scheme of
//! STYLE.md (`error:`, `warning:`, `orch:`), without colour when `NO_COLOR` is set or
//! stderr is not a terminal. While the live view is on screen, each line is written
//! with the view suspended, so a log line never lands inside a progress line. The
//! library's notes and verbatim text (targets [`orch_run::notice::NOTE`] and
//! [`orch_run::notice::TEXT`]) are shown at every verbosity. A closed stderr is not an
//! error: lines are dropped, nothing panics.

use std::fmt;
use std::io::{IsTerminal, Write};
use std::sync::OnceLock;

use indicatif::MultiProgress;

use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

pub fn init(verbose: u8) {
    // rmcp logs what orch reports itself (a server that fails, a closed connection) as
    // its own warnings and errors: off by default, and at most `orch:` lines with `-v`.
    let default = match verbose {
        0 => "warn,rmcp=off",
        1 => "info,orch=debug,orch_agents=debug,rmcp=debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let filter = [orch_run::notice::NOTE, orch_run::notice::TEXT]
        .iter()
        .filter_map(|target| format!("{target}=info").parse().ok())
        .fold(filter, EnvFilter::add_directive);
    let colour = std::env::var_os("NO_COLOR").is_none() && std::io::stderr().is_terminal();
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(|| Line(Vec::new()))
        .with_ansi(colour)
        .event_format(Prefixed)
        // Its own report of a failed write is an `eprintln!`, which panics on a closed stderr.
        .log_internal_errors(false);
    let _ = tracing_subscriber::registry().with(filter).with(layer).try_init();
}

/// The live view, once it is on screen: log lines are written with it suspended.
static LIVE: OnceLock<MultiProgress> = OnceLock::new();

/// Makes log lines go around `multi` from now on.
pub fn around(multi: &MultiProgress) {
    let _ = LIVE.set(multi.clone());
}

/// One log line, buffered, then written to stderr in one piece when dropped (around
/// the live view when there is one). A closed stderr loses the line, never panics.
struct Line(Vec<u8>);

impl Write for Line {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        let write = || {
            let _ = std::io::stderr().lock().write_all(&self.0);
        };
        match LIVE.get() {
            Some(multi) => multi.suspend(write),
            None => write(),
        }
    }
}

/// One line per event: `error: …`, `warning: …`, or `orch: …` for the rest (which only
/// `-v` shows; debug and trace lines also name their module).
struct Prefixed;

impl<S, N> FormatEvent<S, N> for Prefixed
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut writer: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        match event.metadata().target() {
            orch_run::notice::TEXT => return ctx.field_format().format_fields(writer.by_ref(), event),
            orch_run::notice::NOTE => {
                write!(writer, "orch: ")?;
                ctx.field_format().format_fields(writer.by_ref(), event)?;
                return writeln!(writer);
            }
            _ => {}
        }
        let mut level = *event.metadata().level();
        if is_library(event.metadata().target()) {
            // Only orch says `error:` or `warning:`; a library's line is detail (`-v`).
            level = level.max(Level::DEBUG);
        }
        let (prefix, colour) = match level {
            Level::ERROR => ("error", "1;31"),
            Level::WARN => ("warning", "1;33"),
            _ => ("orch", "2"),
        };
        if writer.has_ansi_escapes() {
            write!(writer, "\x1b[{colour}m{prefix}\x1b[0m: ")?;
        } else {
            write!(writer, "{prefix}: ")?;
        }
        if level > Level::INFO {
            write!(writer, "[{}] ", event.metadata().target())?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

/// Whether `target` is a library's whose warnings orch reports in its own words (rmcp:
/// MCP servers; a failure reaches the run's output as orch's `warning:` line).
fn is_library(target: &str) -> bool {
    target == "rmcp" || target.starts_with("rmcp::")
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn log_lines_use_the_prefix_scheme() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("debug"))
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .event_format(Prefixed)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!("cannot remove the run clone");
            tracing::warn!(kept = 2, "the run clone stays");
            tracing::info!("setup: npm ci");
            tracing::debug!("a detail");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "error: cannot remove the run clone");
        assert_eq!(lines[1], "warning: the run clone stays kept=2");
        assert_eq!(lines[2], "orch: setup: npm ci");
        assert!(lines[3].starts_with("orch: [") && lines[3].ends_with("] a detail"), "{}", lines[3]);
    }

    #[test]
    fn notes_and_text_of_the_library_show_as_they_are_at_every_verbosity() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let filter = [orch_run::notice::NOTE, orch_run::notice::TEXT]
            .iter()
            .filter_map(|target| format!("{target}=info").parse().ok())
            .fold(EnvFilter::new("error"), EnvFilter::add_directive);
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(move || sink.clone())
            .with_ansi(true)
            .event_format(Prefixed)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            orch_run::notice::note("run r1 of `w`: /tmp/r1");
            orch_run::notice::text("error: bad key\n  --> w.yaml:1:1\n");
            tracing::info!("hidden at this verbosity");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text, "orch: run r1 of `w`: /tmp/r1\nerror: bad key\n  --> w.yaml:1:1\n");
    }

    #[test]
    fn a_library_never_prints_error_lines() {
        let buffer = Buffer::default();
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(EnvFilter::new("debug"))
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .event_format(Prefixed)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::error!(target: "rmcp::transport::worker", "worker quit with fatal: Transport channel closed");
            tracing::warn!(target: "rmcp", "unexpected message");
        });
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "orch: [rmcp::transport::worker] worker quit with fatal: Transport channel closed");
        assert_eq!(lines[1], "orch: [rmcp] unexpected message");
        // And by default they are not shown at all.
        let filter = EnvFilter::new("warn,rmcp=off");
        let subscriber = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::sink).finish();
        tracing::subscriber::with_default(subscriber, || {
            assert!(!tracing::enabled!(target: "rmcp::transport", tracing::Level::ERROR));
            assert!(tracing::enabled!(target: "orch", tracing::Level::WARN));
        });
    }
}
