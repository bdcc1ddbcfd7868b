//! GitHub Actions output, when `GITHUB_ACTIONS=true`: the Markdown step summary
//! (`GITHUB_STEP_SUMMARY`), step outputs (`GITHUB_OUTPUT`), `::error` / `::warning`
//! annotations for failed and partial agents, and `::add-mask::` for the secrets orch
//! reads. Workflow commands go to stderr (the runner reads commands from both streams),
//! so stdout stays data.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use rand::Rng as _;

use super::render::{self, Column, code, code_block};
use super::report::{AgentStatus, RunReport};

/// GitHub caps a step summary at 1 MiB; ours stays under this, cut at a line.
const SUMMARY_LIMIT: usize = 1000 * 1000;

/// The agent tables' share of the summary: the rest is left for the synthesis.
const TABLE_LIMIT: usize = 700 * 1000;

/// The GitHub Actions step orch runs in.
#[derive(Debug, Clone)]
pub struct Actions {
    summary: Option<PathBuf>,
    /// The summary file's length before this run wrote to it: a rewrite (the final
    /// summary after the partial one) truncates back to it, keeping earlier steps' text.
    summary_base: u64,
    output: Option<PathBuf>,
    /// `https://github.com/<owner>/<repo>`, for links to branches.
    repo_url: Option<String>,
}

impl Actions {
    /// The step's settings, when running under GitHub Actions.
    pub fn detect() -> Option<Actions> {
        if std::env::var("GITHUB_ACTIONS").ok().as_deref() != Some("true") {
            return None;
        }
        let path = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
        let summary = path("GITHUB_STEP_SUMMARY");
        let summary_base = summary.as_ref().and_then(|p| std::fs::metadata(p).ok()).map_or(0, |m| m.len());
        let server = std::env::var("GITHUB_SERVER_URL").unwrap_or_else(|_| "https://github.com".into());
        let repo_url =
            std::env::var("GITHUB_REPOSITORY").ok().filter(|r| !r.is_empty()).map(|r| format!("{server}/{r}"));
        Some(Actions { summary, summary_base, output: path("GITHUB_OUTPUT"), repo_url })
    }

    /// `::add-mask::` for every secret orch reads from the environment, so the runner
    /// hides them wherever they might appear in the log.
    pub fn mask_secrets(&self) {
        for value in crate::secrets::values() {
            crate::notice::text(format_args!("::add-mask::{}\n", escape_data(&value)));
        }
    }

    /// Writes (or rewrites) this run's step summary.
    pub fn write_summary(&self, report: &RunReport) -> std::io::Result<()> {
        let Some(path) = &self.summary else { return Ok(()) };
        let text = summary(report, self.repo_url.as_deref());
        let file = std::fs::OpenOptions::new().create(true).write(true).truncate(false).open(path)?;
        file.set_len(self.summary_base)?;
        let mut file = std::fs::OpenOptions::new().append(true).open(path)?;
        file.write_all(text.as_bytes())
    }

    /// Appends the step outputs: `status`, `exit-code`, `report`, `report-md`,
    /// `branches` (JSON list) and `summary` (multiline).
    pub fn write_outputs(&self, report: &RunReport) -> std::io::Result<()> {
        let Some(path) = &self.output else { return Ok(()) };
        let branches: Vec<&str> = report.integration.fetched.iter().map(|f| f.branch.as_str()).collect();
        let mut out = String::new();
        for (key, value) in [
            ("status", render::run_status(report.status).to_string()),
            ("exit-code", report.exit_code.to_string()),
            ("report", report.run_dir.join("report.json").display().to_string()),
            ("report-md", report.run_dir.join("report.md").display().to_string()),
            ("branches", serde_json::to_string(&branches).unwrap_or_default()),
            ("summary", summary(report, self.repo_url.as_deref())),
        ] {
            out.push_str(&output_entry(key, &value));
        }
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        file.write_all(out.as_bytes())
    }

    /// `::error` for failed agents, `::warning` for partial ones, pointing at a file and
    /// line when the agent's answer or reason names one that exists in `repo`.
    pub fn annotate(&self, report: &RunReport) {
        for line in annotations(report, &report.repo) {
            crate::notice::text(format_args!("{line}\n"));
        }
    }
}

/// One `GITHUB_OUTPUT` entry: `key=value`, or a heredoc behind a random delimiter for
/// a value with line breaks.
fn output_entry(key: &str, value: &str) -> String {
    if !value.contains('\n') && !value.contains('\r') {
        return format!("{key}={value}\n");
    }
    let delimiter = loop {
        let d = format!("ghadelimiter_{:016x}", rand::rng().random::<u64>());
        if !value.contains(&d) {
            break d;
        }
    };
    format!("{key}<<{delimiter}\n{value}\n{delimiter}\n")
}

/// The workflow-command lines for `report`.
pub fn annotations(report: &RunReport, repo: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    for a in &report.agents {
        let level = match a.status {
            AgentStatus::Failed => "error",
            AgentStatus::Partial => "warning",
            _ => continue,
        };
        let reason = a.reason.clone().unwrap_or_else(|| a.status.as_str().to_string());
        let mut props = format!("title={}", escape_property(&format!("orch: agent {} {}", a.id, a.status.as_str())));
        let located =
            std::iter::once(reason.as_str()).chain(std::iter::once(a.text.as_str())).find_map(|t| locate(t, repo));
        if let Some((file, line)) = located {
            let _ = write!(props, ",file={},line={line}", escape_property(&file));
        }
        lines.push(format!("::{level} {props}::{}", escape_data(&reason)));
    }
    if let Some(s) = &report.synthesis
        && s.status == AgentStatus::Failed
    {
        let reason = s.reason.clone().unwrap_or_default();
        lines.push(format!("::error title={}::{}", escape_property("orch: synthesis failed"), escape_data(&reason)));
    }
    lines
}

/// The first `path:line` in `text` whose path is a file of `repo`.
fn locate(text: &str, repo: &Path) -> Option<(String, u32)> {
    text.split(|c: char| c.is_whitespace() || "`'\"()[]<>,".contains(c)).find_map(|word| {
        let word = word.trim_end_matches(['.', ':', ';']);
        let (path, rest) = word.split_once(':')?;
        let line: u32 = rest.split(':').next()?.parse().ok()?;
        let path = path.trim_start_matches("./");
        let safe = !path.is_empty() && !path.starts_with('/') && !path.split('/').any(|c| c == "..");
        (safe && line > 0 && repo.join(path).is_file()).then(|| (path.to_string(), line))
    })
}

/// `::add-mask::` for a secret read after start-up (a credential's value), under GitHub
/// Actions only, once per value.
pub fn mask_value(value: &str) {
    static MASKED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    if std::env::var("GITHUB_ACTIONS").ok().as_deref() != Some("true") || value.is_empty() {
        return;
    }
    let mut masked = MASKED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !masked.iter().any(|m| m == value) {
        crate::notice::text(format_args!("::add-mask::{}\n", escape_data(value)));
        masked.push(value.to_string());
    }
}

fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

/// The columns of the step summary's agent table.
const SUMMARY_COLUMNS: &[Column] =
    &[Column::Agent, Column::Status, Column::Turns, Column::Tokens, Column::Cost, Column::FileList, Column::Branch];

/// The step summary: a table of agents, then the synthesis (fenced: model text shows as
/// it is and cannot break out), cut at a line under the limit.
pub fn summary(r: &RunReport, repo_url: Option<&str>) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "## orch: {} {}\n\nRun {} · {} · {} turns · {} tokens · {}\n",
        code(&r.workflow.name),
        render::run_status(r.status),
        code(&r.run_id),
        render::seconds(r.duration_ms),
        r.totals.turns,
        r.totals.usage.total(),
        render::cost(r.totals.cost_usd)
    );
    if let Some(why) = &r.stopped {
        let _ = writeln!(md, "Stopped early: {}\n", render::cell(why));
    }
    md.push_str(&render::agent_table(r, SUMMARY_COLUMNS, repo_url, TABLE_LIMIT));
    // A skipped synthesis with nothing to show leaves room for a single agent's answer.
    let synthesis = r.synthesis.as_ref().filter(|s| !s.text.trim().is_empty() || s.status != AgentStatus::Skipped);
    if let Some(s) = synthesis {
        md.push_str(&render::synthesis_head(s, "###"));
        if !s.text.trim().is_empty() {
            let _ = writeln!(md, "{}", code_block(s.text.trim()));
        }
    } else if let [only] = r.agents.as_slice()
        && !only.text.trim().is_empty()
    {
        let _ = writeln!(md, "\n### Answer\n\n{}", code_block(only.text.trim()));
    }
    md.push_str(&render::overlaps(r, "###"));
    md.push('\n');
    cut(md, SUMMARY_LIMIT)
}

/// `text` cut at the last line break that keeps it (and a note) within `limit` bytes.
fn cut(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let note = "\n\n*(cut here to fit GitHub's step summary limit; the whole report is in report.md)*\n";
    let budget = limit.saturating_sub(note.len());
    let mut end = budget.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').unwrap_or(end);
    format!("{}{note}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::super::report::AgentReport;
    use super::*;

    #[test]
    fn multiline_outputs_use_a_random_delimiter() {
        assert_eq!(output_entry("status", "ok"), "status=ok\n");
        let entry = output_entry("summary", "a\nb");
        let delimiter = entry.lines().next().unwrap().strip_prefix("summary<<").unwrap().to_string();
        assert!(delimiter.starts_with("ghadelimiter_"));
        assert_eq!(entry, format!("summary<<{delimiter}\na\nb\n{delimiter}\n"));
        assert_ne!(output_entry("s", "a\nb"), output_entry("s", "a\nb"));
    }

    #[test]
    fn cuts_at_a_line_under_the_limit() {
        let text: String = (0..1000).map(|i| format!("line {i}\n")).collect();
        let out = cut(text.clone(), 200);
        assert!(out.len() <= 200, "{}", out.len());
        assert!(out.ends_with("report.md)*\n"));
        let kept = out.split("\n\n*(cut").next().unwrap();
        assert!(text.starts_with(kept) && kept.ends_with(|c: char| c.is_ascii_digit()));
        assert_eq!(cut("short".into(), 200), "short");
    }

    #[test]
    fn model_text_cannot_break_the_summary() {
        let mut agent =
            AgentReport::empty("a", "a", None, AgentStatus::Failed, "bad | cell </details> <b>x</b>\nsecond".into());
        agent.text = "| forged | row |\n</details>\n```\nout of the block\n````".into();
        let report = RunReport {
            schema_version: 1,
            run_id: "r".into(),
            workflow: super::super::report::WorkflowInfo { name: "w".into(), file: "w.yaml".into(), description: None },
            status: super::super::report::RunStatus::Failed,
            exit_code: 1,
            stopped: None,
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            run_dir: PathBuf::new(),
            repo: PathBuf::new(),
            base: String::new(),
            setup: None,
            agents: vec![agent],
            synthesis: None,
            overlaps: Vec::new(),
            integration: Default::default(),
            totals: Default::default(),
            timings: Default::default(),
            partial: false,
            publish: None,
            resume_of: None,
        };
        let md = summary(&report, None);
        let row = md.lines().find(|l| l.starts_with("| `a`")).unwrap();
        // Seven cells: eight unescaped pipes.
        let pipes =
            row.match_indices('|').filter(|(i, _)| row.as_bytes().get(i.wrapping_sub(1)) != Some(&b'\\')).count();
        assert_eq!(pipes, 8, "{row}");
        assert!(!row.contains('<') && row.contains("&lt;/details&gt;"), "{row}");
        // The answer sits in a block whose fence is longer than any backtick run in it.
        let answer = md.split("### Answer\n\n").nth(1).unwrap();
        let fence = answer.lines().next().unwrap().trim_end_matches("text");
        assert_eq!(fence, "`````");
        let body: Vec<&str> = answer.lines().skip(1).take_while(|l| !l.starts_with(fence)).collect();
        assert_eq!(body.join("\n"), "| forged | row |\n</details>\n```\nout of the block\n````");
    }

    fn report_of(agents: Vec<AgentReport>) -> RunReport {
        RunReport {
            schema_version: 1,
            run_id: "r".into(),
            workflow: super::super::report::WorkflowInfo { name: "w".into(), file: "w.yaml".into(), description: None },
            status: super::super::report::RunStatus::Failed,
            exit_code: 1,
            stopped: None,
            started_at: String::new(),
            finished_at: String::new(),
            duration_ms: 0,
            run_dir: PathBuf::new(),
            repo: PathBuf::new(),
            base: String::new(),
            setup: None,
            totals: super::super::report::Totals::of(&agents, None),
            agents,
            synthesis: None,
            overlaps: Vec::new(),
            integration: Default::default(),
            timings: Default::default(),
            partial: false,
            publish: None,
            resume_of: None,
        }
    }

    /// `n` agents: every 100th from the 7th failed, from the 8th partial, from the 9th
    /// skipped; the others succeeded, each with a changed file and a branch.
    fn many(n: usize) -> Vec<AgentReport> {
        (0..n)
            .map(|i| {
                let status = match i % 100 {
                    7 => AgentStatus::Failed,
                    8 => AgentStatus::Partial,
                    9 => AgentStatus::Skipped,
                    _ => AgentStatus::Succeeded,
                };
                let id = format!("fix/file-{i:05}");
                let mut a = AgentReport::empty(&id, "fix", None, status, format!("REASON-{i}: it went wrong"));
                if status == AgentStatus::Succeeded {
                    a.reason = None;
                }
                a.turns = 3;
                a.changed_files = vec![super::super::report::ChangedFile {
                    path: format!("src/module_{i:05}/file.rs").into(),
                    kind: "modified".into(),
                }];
                a.branch = Some(format!("orch/r/{id}"));
                a.commit = Some("0123456789abcdef".into());
                a.text = format!("Fixed the file number {i}.");
                a
            })
            .collect()
    }

    /// The ids of the table rows, in order.
    fn row_ids(md: &str) -> Vec<String> {
        md.lines().filter(|l| l.starts_with("| `")).map(|l| l[3..].split('`').next().unwrap().to_string()).collect()
    }

    #[test]
    fn few_agents_are_one_table_failures_first() {
        let md = summary(&report_of(many(20)), None);
        assert!(!md.contains("<details>"), "{md}");
        let ids = row_ids(&md);
        assert_eq!(ids.len(), 20);
        assert_eq!(&ids[..3], ["fix/file-00007", "fix/file-00008", "fix/file-00000"]);
        assert_eq!(ids.last().unwrap(), "fix/file-00009", "the skipped agent comes last");
    }

    #[test]
    fn past_fifty_agents_successes_fold_with_counts() {
        let md = summary(&report_of(many(200)), None);
        let open = md.split("<details>").next().unwrap();
        assert_eq!(row_ids(open), ["fix/file-00007", "fix/file-00107", "fix/file-00008", "fix/file-00108"]);
        assert!(md.contains("<details><summary>194 succeeded (582 turns, $0.0000)</summary>\n\n| agent |"), "{md}");
        assert!(md.contains("<details><summary>2 skipped"), "{md}");
        assert_eq!(md.matches("<details>").count(), md.matches("</details>").count());
        assert_eq!(row_ids(&md).len(), 200);
        // report.md folds the same way, tables and per-agent sections.
        let report_md = super::super::report::markdown(&report_of(many(200)));
        assert!(report_md.contains("<details><summary>194 succeeded ("), "{report_md}");
        assert!(report_md.contains("<details><summary>194 succeeded agents</summary>"), "{report_md}");
        assert_eq!(report_md.matches("<details>").count(), report_md.matches("</details>").count());
        let sections = report_md.split("\n## Agents").nth(1).unwrap();
        let first = sections.find("### `fix/file-00007` (failed)").unwrap();
        assert!(first < sections.find("### `fix/file-00008` (partial)").unwrap());
        assert!(sections.find("### `fix/file-00107` (failed)").unwrap() < sections.find("(partial)").unwrap());
    }

    #[test]
    fn ten_thousand_agents_fit_the_step_summary_limit() {
        let mut r = report_of(many(10_000));
        let mut s = super::super::report::SynthesisReport::skipped("");
        s.status = AgentStatus::Succeeded;
        s.reason = None;
        s.text = "THE-FINAL-ANSWER".into();
        r.synthesis = Some(s);
        let md = summary(&r, Some("https://github.com/o/r"));
        assert!(md.len() < 1024 * 1024, "{} bytes", md.len());
        assert!(md.contains("THE-FINAL-ANSWER"), "the synthesis is not crowded out");
        let ids = row_ids(&md);
        // Every failure and partial agent is listed, first; then successes until the room ends.
        assert_eq!(ids.iter().filter(|id| id.ends_with('7') && id[9..].ends_with("07")).count(), 100);
        assert!(ids[..100].iter().all(|id| id.ends_with("07")), "{:?}", &ids[..5]);
        assert!(ids[100..200].iter().all(|id| id.ends_with("08")));
        assert!(ids.len() < 10_000);
        assert!(md.contains("*Not listed here, to stay within the size limit:"), "{}", &md[md.len() - 500..]);
        assert!(md.contains("report.md in the run directory"));
        assert_eq!(md.matches("<details>").count(), md.matches("</details>").count());
    }

    #[test]
    fn escapes_workflow_commands() {
        assert_eq!(escape_data("50%\nnext"), "50%25%0Anext");
        assert_eq!(escape_property("a:b,c"), "a%3Ab%2Cc");
    }

    #[test]
    fn locates_files_that_exist() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/lib.rs"), "").unwrap();
        assert_eq!(locate("broken at `src/lib.rs:12`.", dir.path()), Some(("src/lib.rs".into(), 12)));
        assert_eq!(locate("see src/missing.rs:3 and ./src/lib.rs:4:2", dir.path()), Some(("src/lib.rs".into(), 4)));
        assert_eq!(locate("/etc/passwd:1 ../x:2 http://x:80", dir.path()), None);
    }
}
