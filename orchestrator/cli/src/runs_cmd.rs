//! `orch runs list` and `orch runs clean`: the run directories under orch's state
//! directory, as `orch_run::runs` finds them, shown or removed.
//!
//! `list` is data (stdout): a table, or one JSON array with `--json`. `clean` says what
//! it removed, or would remove with `--dry-run`, on stderr, and the total freed.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::SystemTime;

use orch_run::runs::{self, RunEntry};

use crate::cli::{RunsCleanArgs, RunsCommand, RunsListArgs};
use crate::exit::Code;

/// `orch runs ...`.
pub fn run(command: &RunsCommand) -> Code {
    let Some(base) = runs::default_dir() else {
        say!("error: {}", runs::RunsError::NoStateDir);
        return Code::Usage;
    };
    match command {
        RunsCommand::List(args) => list(args, base),
        RunsCommand::Clean(args) => clean(args, base),
    }
}

/// `size` in bytes, for people: `0 B`, `512 B`, `1.5 KiB`, `20.0 MiB`.
pub fn human_size(size: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if size < 1024 {
        return format!("{size} B");
    }
    let mut value = size as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

fn list(args: &RunsListArgs, base: PathBuf) -> Code {
    let found = match runs::list(&base) {
        Ok(found) => found,
        Err(e) => {
            say!("error: {e}");
            return Code::Infrastructure;
        }
    };
    let mut text = String::new();
    if args.json {
        text = serde_json::to_string_pretty(&found).unwrap_or_else(|_| "[]".to_string());
        text.push('\n');
    } else if found.is_empty() {
        say!("orch: no runs in {}", base.display());
        return Code::Success;
    } else {
        let width = found.iter().map(|r| r.id.len()).max().unwrap_or(0).max(2);
        text.push_str(&format!("{:width$}  {:24}  {:11}  {:>10}\n", "ID", "STARTED", "STATUS", "SIZE"));
        for run in &found {
            text.push_str(&format!(
                "{:width$}  {:24}  {:11}  {:>10}\n",
                run.id,
                run.started_at,
                run.status.as_str(),
                human_size(run.size_bytes)
            ));
        }
    }
    let mut out = std::io::stdout().lock();
    // A reader that went away (`orch runs list | head`) is not an error.
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    Code::Success
}

fn clean(args: &RunsCleanArgs, base: PathBuf) -> Code {
    let cleaned = match runs::clean(&base, args.older_than, SystemTime::now(), args.dry_run) {
        Ok(cleaned) => cleaned,
        Err(e) => {
            say!("error: {e}");
            return Code::Infrastructure;
        }
    };
    let verb = if args.dry_run { "would remove" } else { "removed" };
    let line = |run: &RunEntry| {
        format!("{} ({}, started {}, {})", run.id, run.status.as_str(), run.started_at, human_size(run.size_bytes))
    };
    for run in &cleaned.removed {
        say!("orch: {verb} {}", line(run));
    }
    for run in &cleaned.running {
        say!("orch: kept {}: it is still running", run.id);
    }
    for (run, why) in &cleaned.failed {
        say!("warning: cannot remove all of {}: {why}; remove it by hand", run.dir.display());
    }
    let n = cleaned.removed.len();
    let runs = if n == 1 { "run" } else { "runs" };
    if args.dry_run {
        say!("orch: would free {} ({n} {runs}); nothing was removed", human_size(cleaned.freed_bytes));
    } else {
        say!("orch: freed {} ({n} {runs} removed from {})", human_size(cleaned.freed_bytes), base.display());
    }
    if cleaned.failed.is_empty() { Code::Success } else { Code::Infrastructure }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_for_people() {
        assert_eq!(super::human_size(0), "0 B");
        assert_eq!(super::human_size(1023), "1023 B");
        assert_eq!(super::human_size(1536), "1.5 KiB");
        assert_eq!(super::human_size(20 * 1024 * 1024), "20.0 MiB");
        assert_eq!(super::human_size(3 << 40), "3.0 TiB");
    }
}
