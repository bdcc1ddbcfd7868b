//! The report on disk while agents run. `report.json` and `report.md` are rewritten
//! (each through a temporary file and a rename) when dispatch starts and after agents
//! end, with every agent of the plan: finished ones as they ended, running ones
//! `running`, the others `pending`; the run's status is `running` and its exit code
//! 137, what a caller saw if the process was killed. So a run killed at any moment
//! leaves a report that `orch recover` and `--resume` start from.
//!
//! Rewriting the whole report costs in proportion to the number of agents, so it
//! happens at most once a second; in between, each agent that ends is appended to the
//! journal (`agents.jsonl`), which [`report::read`] lays over the report. A crash
//! loses no ended agent either way.
//!
//! Both go to the disk from a thread of their own ([`DiskWriter`]), in the order they
//! were made: the dispatcher never waits for an `fsync`, and journal lines waiting
//! together share one. The writer is dropped, and so joined (everything sent is on
//! disk), when dispatch ends; the interrupted report is waited for.
//!
//! On the first interrupt the report is written once more, before teardown: status
//! `interrupted`, the real exit code (130 for SIGINT, 143 for SIGTERM), the `stopped`
//! reason, running agents `cancelled`, and `partial: true` until the final report
//! replaces it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread::JoinHandle;
use std::time::SystemTime;

use orch_workflows::PlanNode;

use super::StopReason;
use super::github;
use super::recover::KILLED;
use super::report::{self, AgentReport, AgentStatus, RunReport, RunStatus, Totals};
use crate::clock;
use crate::exit::Code;
use crate::signals::Interrupts;

/// The report of a run in progress.
pub struct LiveReport {
    base: RunReport,
    github: Option<github::Actions>,
    interrupts: Interrupts,
    interrupted: bool,
    writer: DiskWriter,
}

/// What the dispatcher knows at one moment.
pub struct Snapshot<'a> {
    pub done: &'a [AgentReport],
    /// `(id, key)` of each running agent.
    pub running: Vec<(&'a str, &'a str)>,
    pub pending: &'a [PlanNode],
    /// Agent ids in plan order.
    pub order: &'a [String],
}

impl LiveReport {
    /// The report of a run whose report and journal `writer` writes; `base` is the run's
    /// report as dispatch starts.
    pub fn new(base: RunReport, github: Option<github::Actions>, interrupts: Interrupts, writer: DiskWriter) -> Self {
        LiveReport { base, github, interrupts, interrupted: false, writer }
    }

    /// Rewrites the report with where the agents stand now (not after an interrupt:
    /// the interrupted report stays until the final one).
    pub fn progress(&self, now: Snapshot<'_>) {
        if self.interrupted {
            return;
        }
        let mut r = self.base.clone();
        r.agents = agents(now, AgentStatus::Running, "running");
        r.status = RunStatus::Running;
        r.exit_code = KILLED;
        r.partial = true;
        r.totals = Totals::of(&r.agents, None);
        r.finished_at = clock::rfc3339(SystemTime::now());
        self.writer.report(r, "rewrite the report");
    }

    /// Appends `report`, an agent's final report, to the run's journal
    /// ([`report::JOURNAL`]), which [`report::read`] lays over a report still in
    /// progress: an ended agent is on disk at once (as soon as the writer has flushed
    /// it), whenever the whole report is next rewritten.
    pub fn finished(&self, report: &AgentReport) {
        match report::journal_line(report) {
            Ok(line) => self.writer.line(line),
            Err(e) => tracing::warn!("cannot add {} to the run's journal: {e}", report.id),
        }
    }

    /// Writes the report of an interrupted run, once, before teardown.
    pub fn interrupted(&mut self, now: Snapshot<'_>, stop: Option<StopReason>) {
        if std::mem::replace(&mut self.interrupted, true) {
            return;
        }
        let code = self.interrupts.code().unwrap_or(Code::Interrupted);
        let stop = stop.or_else(|| self.interrupts.reason());
        let mut r = self.base.clone();
        r.agents = agents(now, AgentStatus::Cancelled, "interrupted while running");
        r.totals = Totals::of(&r.agents, None);
        r.status = RunStatus::Interrupted;
        r.exit_code = code as u8;
        r.partial = true;
        r.stopped = Some(match stop {
            Some(s) => format!("{s} (this report was written before teardown; the final one replaces it)"),
            None => "the run was stopped (this report was written before teardown; the final one replaces it)".into(),
        });
        r.finished_at = clock::rfc3339(SystemTime::now());
        // On disk before teardown starts: wait for it (and for everything before it).
        self.writer.report(r.clone(), "write the partial report");
        self.writer.flush();
        if let Some(g) = &self.github
            && let Err(e) = g.write_summary(&r)
        {
            tracing::warn!("cannot write the partial GitHub step summary: {e}");
        }
    }
}

/// What the writer's thread is given.
enum Write {
    /// A journal line.
    Line(Vec<u8>),
    /// The report waiting in the writer's slot is due.
    Report,
    /// Answered once everything sent before is on disk.
    Flush(mpsc::SyncSender<()>),
}

/// The newest report not yet written, with what its failure is called in the warning.
type Slot = Arc<Mutex<Option<(Box<RunReport>, &'static str)>>>;

/// Writes a run's report and journal from a thread of its own, in the order they were
/// sent: each time it wakes it takes everything waiting and writes the journal lines
/// in one write with one `fdatasync`. Reports wait in a slot of one: a newer report
/// replaces one not yet written (it holds all the older one held), so a disk that
/// stalls never piles up copies of a large report. Without a thread (it could not
/// start) each write happens in the caller. Dropping the writer waits until everything
/// sent is on disk.
pub struct DiskWriter {
    dir: PathBuf,
    slot: Slot,
    queue: Option<mpsc::Sender<Write>>,
    thread: Option<JoinHandle<()>>,
}

impl DiskWriter {
    /// The writer of the run in `run_dir`.
    pub fn start(run_dir: &Path) -> DiskWriter {
        let dir = run_dir.to_path_buf();
        let slot: Slot = Arc::default();
        let (tx, rx) = mpsc::channel::<Write>();
        let (thread_dir, thread_slot) = (dir.clone(), slot.clone());
        let thread = std::thread::Builder::new()
            .name("orch-report".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    batch.extend(rx.try_iter());
                    write_batch(&thread_dir, &thread_slot, batch);
                }
            })
            .map_err(|e| tracing::warn!("cannot start the report's writer thread ({e}); reports are written in turn"))
            .ok();
        let queue = thread.is_some().then_some(tx);
        DiskWriter { dir, slot, queue, thread }
    }

    /// Appends a journal line.
    pub fn line(&self, line: Vec<u8>) {
        self.send(Write::Line(line));
    }

    /// Writes `report` as the run's report (`what` names a failure in the warning).
    pub fn report(&self, report: RunReport, what: &'static str) {
        let waiting = self.slot.lock().unwrap_or_else(PoisonError::into_inner).replace((Box::new(report), what));
        // A report already waiting is due already: it is now this one.
        if waiting.is_none() {
            self.send(Write::Report);
        }
    }

    /// Waits until everything sent so far is on disk.
    pub fn flush(&self) {
        let (tx, rx) = mpsc::sync_channel(1);
        self.send(Write::Flush(tx));
        let _ = rx.recv();
    }

    fn send(&self, write: Write) {
        let write = match &self.queue {
            Some(queue) => match queue.send(write) {
                Ok(()) => return,
                Err(e) => e.0,
            },
            None => write,
        };
        // No thread to take it: write it here.
        write_batch(&self.dir, &self.slot, vec![write]);
    }
}

impl Drop for DiskWriter {
    fn drop(&mut self) {
        drop(self.queue.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Writes what was sent, in order: journal lines next to each other in one append, the
/// slot's report where it fell due, and a flush answered once all before it is.
fn write_batch(dir: &Path, slot: &Slot, batch: Vec<Write>) {
    let mut lines: Vec<u8> = Vec::new();
    let put_lines = |lines: &mut Vec<u8>| {
        if !lines.is_empty()
            && let Err(e) = report::append_journal(dir, lines)
        {
            tracing::warn!("cannot append to the run's journal: {e}");
        }
        lines.clear();
    };
    for write in batch {
        match write {
            Write::Line(line) => lines.extend_from_slice(&line),
            Write::Report => {
                put_lines(&mut lines);
                let due = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                if let Some((r, what)) = due
                    && let Err(e) = report::write(dir, &r)
                {
                    tracing::warn!("cannot {what}: {e}");
                }
            }
            Write::Flush(done) => {
                put_lines(&mut lines);
                let _ = done.send(());
            }
        }
    }
    put_lines(&mut lines);
}

/// Every agent of the plan, in plan order: finished, then running ones as `running`
/// (with `why`), then those not started as `pending`.
fn agents(now: Snapshot<'_>, running: AgentStatus, why: &str) -> Vec<AgentReport> {
    // Sized once: a report is large, and growing a vector of a thousand copies them all.
    let mut all: Vec<AgentReport> = Vec::with_capacity(now.done.len() + now.running.len() + now.pending.len());
    all.extend_from_slice(now.done);
    all.extend(now.running.iter().map(|(id, key)| AgentReport::empty(id, key, None, running, why.into())));
    for node in now.pending {
        let (id, key, item) = match node {
            PlanNode::Agent(spec) => (&spec.id, &spec.agent, spec.fan_out.as_ref().map(|f| f.item.clone())),
            PlanNode::DynamicFanOut(d) => (&d.id, &d.id, None),
        };
        let mut r = AgentReport::empty(id, key, item, AgentStatus::Pending, "not started yet".into());
        if let PlanNode::Agent(spec) = node {
            r.continue_on_failure = spec.continue_on_failure;
        }
        all.push(r);
    }
    super::schedule::sorted(all, now.order)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code

    use super::*;

    /// Lines sent from many threads at once all reach the journal, whole, once each,
    /// and every one is on disk when the writer is dropped.
    #[test]
    fn the_writer_loses_no_journal_line_and_flushes_before_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let writer = std::sync::Arc::new(DiskWriter::start(dir.path()));
        let senders: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for n in 0..250 {
                        writer.line(format!("{{\"t\":{t},\"n\":{n}}}\n").into_bytes());
                    }
                })
            })
            .collect();
        for s in senders {
            s.join().unwrap();
        }
        drop(std::sync::Arc::into_inner(writer).unwrap());
        let text = std::fs::read_to_string(dir.path().join(report::JOURNAL)).unwrap();
        let mut seen: Vec<(u64, u64)> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["t"].as_u64().unwrap(), v["n"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(seen.len(), 1000);
        // Each sender's lines in the order it sent them.
        for t in 0..4 {
            let ns: Vec<u64> = seen.iter().filter(|(s, _)| *s == t).map(|(_, n)| *n).collect();
            assert_eq!(ns, (0..250).collect::<Vec<_>>());
        }
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 1000);
    }

    /// Reports land in the order they were sent (the last one stays), and a flush
    /// returns once what came before it is on disk.
    #[test]
    fn reports_land_in_order_and_a_flush_waits_for_them() {
        let dir = tempfile::tempdir().unwrap();
        let base: RunReport = serde_json::from_str(include_str!("testdata/report.json")).unwrap();
        let writer = DiskWriter::start(dir.path());
        for n in 0..50 {
            let mut r = base.clone();
            r.duration_ms = n;
            writer.report(r, "write a report");
        }
        writer.flush();
        let on_disk: RunReport =
            serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
        assert_eq!(on_disk.duration_ms, 49);
        assert!(std::fs::read_to_string(dir.path().join("report.md")).unwrap().starts_with("# orch run "));
        drop(writer);
    }
}
