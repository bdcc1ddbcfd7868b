//! Validation and planning are linear: a generated workflow of many agents (a long
//! `needs` chain with templates that read earlier agents, which once made the checks
//! quadratic and the cycle search recursive) loads and plans.
//!
//! The 100,000-agent timing is `#[ignore]`d (see BENCHMARKS.md for the command); the
//! 10,000-agent run is always on, as a guard against a stack overflow or a quadratic
//! step sneaking back.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use orch_workflows::{Inputs, LoadOptions, load_str_with, plan, render_diagnostics};

/// A workflow of `n` agents: each needs the one before it and one half-way back, and
/// its prompt reads the one before it.
pub fn many_agents(n: usize) -> String {
    let mut text = String::from("version: 1\nname: many\ninputs: { topic: { default: scale } }\nagents:\n");
    for i in 0..n {
        let _ = write!(text, "  a{i}:\n    prompt: \"Step {i} of {{{{ inputs.topic }}}}");
        if i > 0 {
            let _ = write!(text, " after {{{{ agents.a{}.text }}}}", i - 1);
        }
        text.push_str("\"\n");
        match i {
            0 => {}
            1 | 2 => {
                let _ = writeln!(text, "    needs: [a{}]", i - 1);
            }
            _ => {
                let _ = writeln!(text, "    needs: [a{}, a{}]", i - 1, i / 2);
            }
        }
    }
    text
}

/// The CPU time this thread has used (Linux `schedstat`), to time work on a busy machine.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok().map(Duration::from_nanos)
}

/// Loads and plans `n` agents; returns the time to load (parse and validate) and to plan.
fn load_and_plan(n: usize) -> (Duration, Duration) {
    let text = many_agents(n);
    let options = LoadOptions { max_bytes: text.len(), ..LoadOptions::default() };
    let cpu = thread_cpu();
    let started = Instant::now();
    let workflow = load_str_with(&text, "many.yaml", &options)
        .unwrap_or_else(|d| panic!("{}", render_diagnostics(&d[..3.min(d.len())])));
    let loaded = started.elapsed();
    let cpu_loaded = thread_cpu().zip(cpu).map(|(now, before)| now.saturating_sub(before));
    let cpu = thread_cpu();
    let started = Instant::now();
    let planned = plan(&workflow, &Inputs::new()).unwrap_or_else(|d| panic!("{}", render_diagnostics(&d)));
    let planned_in = started.elapsed();
    let cpu_planned = thread_cpu().zip(cpu).map(|(now, before)| now.saturating_sub(before));
    println!(
        "{n} agents: load and validate {loaded:?} (CPU {cpu_loaded:?}), plan {planned_in:?} (CPU {cpu_planned:?})"
    );
    assert_eq!(planned.agents().count(), n);
    assert_eq!(planned.stages.len(), n);
    (loaded, planned_in)
}

#[test]
fn ten_thousand_agents_in_a_chain_validate() {
    load_and_plan(10_000);
}

#[test]
#[ignore = "timing; run in release: see BENCHMARKS.md"]
fn hundred_thousand_agents_validate_in_linear_time() {
    let (loaded, _) = load_and_plan(100_000);
    // The target is 2 s in release; this only catches a return to quadratic time.
    assert!(loaded < Duration::from_secs(20), "load and validate took {loaded:?}");
}
