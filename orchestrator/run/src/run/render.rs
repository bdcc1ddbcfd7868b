//! The Markdown that `report.md` and the GitHub step summary share: the agent table
//! (one row function for both, each output picking its columns), status words, figures
//! (seconds, tokens, cost), reasons, the synthesis heading and the list of likely
//! conflicts, and the escaping that keeps text from models, tools and file names inside
//! its cell or code span (no `|` that ends a cell, no HTML, no fence it can close).
//! `report.rs` and `github.rs` add what only they show.

use std::fmt::Write as _;

use super::report::{AgentReport, AgentStatus, RunReport, RunStatus, SynthesisReport};

/// A column of the agent table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Agent,
    Status,
    Turns,
    Tokens,
    Cost,
    /// How many files the agent changed.
    FileCount,
    /// The first ten changed files by name.
    FileList,
    /// The agent's branch when it committed, linked when it was fetched and a
    /// repository URL is known.
    Branch,
}

impl Column {
    fn header(self) -> (&'static str, &'static str) {
        match self {
            Column::Agent => ("agent", "---"),
            Column::Status => ("status", "---"),
            Column::Turns => ("turns", "---:"),
            Column::Tokens => ("tokens", "---:"),
            Column::Cost => ("cost", "---:"),
            Column::FileCount => ("files", "---:"),
            Column::FileList => ("changed files", "---"),
            Column::Branch => ("branch", "---"),
        }
    }
}

/// Past this many agents, the tables fold the agents that need no attention
/// (succeeded, cancelled, skipped) into `<details>` blocks, one per status, with counts.
pub(crate) const FOLD_AFTER: usize = 50;

/// Where a status comes in the reports: failures first, then partial agents, then
/// successes, then what did not run to its end.
pub(crate) fn status_rank(s: AgentStatus) -> u8 {
    match s {
        AgentStatus::Failed => 0,
        AgentStatus::Partial => 1,
        AgentStatus::Succeeded => 2,
        AgentStatus::Cancelled => 3,
        AgentStatus::Skipped => 4,
        AgentStatus::Running => 5,
        AgentStatus::Pending => 6,
    }
}

/// The agents in report order: by [`status_rank`], in agent order within a status.
pub(crate) fn by_status(agents: &[AgentReport]) -> Vec<&AgentReport> {
    let mut ordered: Vec<&AgentReport> = agents.iter().collect();
    ordered.sort_by_key(|a| status_rank(a.status));
    ordered
}

/// The agent tables of `r` with `columns`, in report order (see [`by_status`]); past
/// [`FOLD_AFTER`] agents, failed and partial agents stay in the open and every other
/// status folds into a `<details>` block with its count. The rows stop at
/// `max_bytes` (the tables closed, the rest counted in a note that points to
/// `report.md`). `repo_url` (`https://github.com/o/r`) links fetched branches.
pub(crate) fn agent_table(r: &RunReport, columns: &[Column], repo_url: Option<&str>, max_bytes: usize) -> String {
    let headers: Vec<&str> = columns.iter().map(|c| c.header().0).collect();
    let rules: Vec<&str> = columns.iter().map(|c| c.header().1).collect();
    let head = format!("| {} |\n|{}|\n", headers.join(" | "), rules.join("|"));
    let ordered = by_status(&r.agents);
    let fold = r.agents.len() > FOLD_AFTER;
    // Runs of agents that share a table: all of them, or (folding) the open run of
    // failed and partial agents, then one run per other status.
    let mut runs: Vec<(Option<AgentStatus>, Vec<&AgentReport>)> = Vec::new();
    for a in ordered {
        let key = (fold && !matches!(a.status, AgentStatus::Failed | AgentStatus::Partial)).then_some(a.status);
        match runs.last_mut() {
            Some((k, run)) if *k == key => run.push(a),
            _ => runs.push((key, vec![a])),
        }
    }
    let mut md = String::new();
    let mut left: Vec<(AgentStatus, usize)> = Vec::new();
    for (folded, run) in runs {
        let mut rows = String::new();
        let mut shown = 0;
        for a in &run {
            let cells: Vec<String> = columns.iter().map(|c| agent_cell(r, a, *c, repo_url)).collect();
            let row = format!("| {} |\n", cells.join(" | "));
            if md.len() + head.len() + rows.len() + row.len() + 200 > max_bytes {
                break;
            }
            rows.push_str(&row);
            shown += 1;
        }
        for a in &run[shown..] {
            match left.iter_mut().find(|(s, _)| *s == a.status) {
                Some((_, n)) => *n += 1,
                None => left.push((a.status, 1)),
            }
        }
        if shown == 0 {
            continue;
        }
        match folded {
            None => {
                md.push_str(&head);
                md.push_str(&rows);
            }
            Some(status) => {
                let turns: u32 = run.iter().map(|a| a.turns).sum();
                let spent: f64 = run.iter().map(|a| a.cost_usd).sum();
                let _ = write!(
                    md,
                    "\n<details><summary>{} {} ({turns} turns, {})</summary>\n\n{head}{rows}\n</details>\n",
                    run.len(),
                    status.as_str(),
                    cost(spent)
                );
            }
        }
    }
    if !left.is_empty() {
        let counts: Vec<String> = left.iter().map(|(s, n)| format!("{n} {}", s.as_str())).collect();
        let _ = writeln!(
            md,
            "\n*Not listed here, to stay within the size limit: {} agents ({}). report.md in the run directory \
             (the run's artifact in CI) lists every agent.*",
            left.iter().map(|(_, n)| n).sum::<usize>(),
            counts.join(", ")
        );
    }
    md
}

fn agent_cell(r: &RunReport, a: &AgentReport, column: Column, repo_url: Option<&str>) -> String {
    match column {
        Column::Agent => code(&a.id),
        Column::Status => status_cell(a),
        Column::Turns => a.turns.to_string(),
        Column::Tokens => a.usage.total().to_string(),
        Column::Cost => cost(a.cost_usd),
        Column::FileCount => a.changed_files.len().to_string(),
        Column::FileList => {
            let files: Vec<String> = a.changed_files.iter().take(10).map(|f| code(&f.path.to_string_lossy())).collect();
            match a.changed_files.len().saturating_sub(10) {
                0 => files.join(", "),
                more => format!("{} and {more} more", files.join(", ")),
            }
        }
        Column::Branch => {
            let fetched = r.integration.fetched.iter().any(|f| Some(&f.branch) == a.branch.as_ref());
            match (&a.branch, repo_url, a.commit.is_some()) {
                (Some(b), Some(url), true) if fetched => format!("[{}]({url}/tree/{b})", code(b)),
                (Some(b), _, true) => code(b),
                _ => String::new(),
            }
        }
    }
}

/// An agent's status for a table cell: the word, whether `--resume` carried it over or
/// ran it again, and the first line of its reason.
pub(crate) fn status_cell(a: &AgentReport) -> String {
    let word = match (a.carried_over, &a.resumed_from) {
        (true, _) => format!("{} (carried over)", a.status.as_str()),
        (false, Some(_)) => format!("{} (rerun)", a.status.as_str()),
        _ => a.status.as_str().to_owned(),
    };
    match &a.reason {
        Some(reason) => format!("{word}: {}", one_line(reason)),
        None => word,
    }
}

/// The run's status as one lowercase word (the step output `status` too).
pub(crate) fn run_status(s: RunStatus) -> &'static str {
    match s {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed",
        RunStatus::Partial => "partial",
        RunStatus::Interrupted => "interrupted",
        RunStatus::Running => "running",
    }
}

/// Seconds with one decimal, from milliseconds.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// A cost in dollars, to a hundredth of a cent.
pub(crate) fn cost(usd: f64) -> String {
    format!("${usd:.4}")
}

/// The synthesis heading (with its status) and its reason as a line of Markdown.
pub(crate) fn synthesis_head(s: &SynthesisReport, level: &str) -> String {
    let mut md = format!("\n{level} Synthesis ({})\n\n", s.status.as_str());
    if let Some(reason) = &s.reason {
        let _ = writeln!(md, "{}\n", cell(reason));
    }
    if let Some(tree) = s.tree.as_ref().filter(|t| !t.levels.is_empty()) {
        let sizes: Vec<String> = tree.levels.iter().map(|l| l.groups.len().to_string()).collect();
        let _ = writeln!(
            md,
            "Synthesized as a tree: {} level{} of groups ({} groups), then one request over their answers (a budget of \
             {} tokens a request).\n",
            tree.levels.len(),
            if tree.levels.len() == 1 { "" } else { "s" },
            sizes.join(", then "),
            s.budget_tokens.unwrap_or_default(),
        );
    }
    md
}

/// The "Likely conflicts" section (empty without overlaps).
pub(crate) fn overlaps(r: &RunReport, level: &str) -> String {
    if r.overlaps.is_empty() {
        return String::new();
    }
    let mut md = format!("\n{level} Likely conflicts\n\n");
    for o in &r.overlaps {
        let agents: Vec<String> = o.agents.iter().map(|a| code(a)).collect();
        let _ = writeln!(md, "- {}: {}", code(&o.path.to_string_lossy()), agents.join(", "));
    }
    md
}

/// The first line of `text`, at most 120 characters, fit for a table cell.
pub(crate) fn one_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let line = if line.chars().count() > 120 {
        format!("{}…", line.chars().take(120).collect::<String>())
    } else {
        line.into()
    };
    cell(&line)
}

/// Text for a table cell or a line of Markdown: one line, no `|` that ends the cell,
/// no HTML (`<`, `>`, `&` as entities).
pub(crate) fn cell(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// `text` as an inline code span that nothing in it can close, fit for a table cell:
/// delimited by one backtick more than its longest backtick run, `|` escaped.
pub(crate) fn code(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ").replace('|', "\\|");
    let ticks = "`".repeat(longest_run(&text, '`') + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

/// `text` in a fenced code block whose fence is longer than any backtick run in it, so
/// model text shows as it is and cannot close the block, open HTML or end a table.
pub(crate) fn code_block(text: &str) -> String {
    let fence = "`".repeat((longest_run(text, '`') + 1).max(3));
    format!("{fence}text\n{text}\n{fence}")
}

/// The length of the longest run of `c` in `text`.
fn longest_run(text: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in text.chars() {
        run = if ch == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_spans_and_cells_hold_any_text() {
        assert_eq!(code("a`b|c"), "``a`b\\|c``");
        assert_eq!(code("`x"), "`` `x ``");
        assert_eq!(cell("a | <b> & c\nd"), "a \\| &lt;b&gt; &amp; c d");
        assert_eq!(code_block("```\nx"), "````text\n```\nx\n````");
    }

    #[test]
    fn the_status_cell_says_how_resume_treated_the_agent() {
        let mut a = AgentReport::empty("a", "a", None, AgentStatus::Failed, "no <luck> | at all\nmore".into());
        assert_eq!(status_cell(&a), "failed: no &lt;luck&gt; \\| at all");
        a.carried_over = true;
        assert!(status_cell(&a).starts_with("failed (carried over): "), "{}", status_cell(&a));
        a.carried_over = false;
        a.resumed_from = Some("abc".into());
        assert!(status_cell(&a).starts_with("failed (rerun): "), "{}", status_cell(&a));
        let long = "x".repeat(300);
        a.reason = Some(long);
        assert_eq!(status_cell(&a).chars().count(), "failed (rerun): ".len() + 121);
    }
}
