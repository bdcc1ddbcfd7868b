//! Loading and planning a workflow for a command: diagnostics go to stderr with their
//! positions, and the caller gets the exit code to stop with.

use std::path::Path;

use orch_workflows::{Diagnostic, Inputs, Plan, Workflow, render_diagnostics};

use crate::exit::Code;

/// Loads `path`, or prints its diagnostics on stderr.
pub fn load(path: &Path) -> Result<Workflow, Code> {
    orch_workflows::load(path).map_err(|diagnostics| report(&diagnostics))
}

/// Loads a workflow from `text` (read from a commit; `name` for diagnostics), or
/// prints its diagnostics on stderr.
pub fn load_str(text: &str, name: &str) -> Result<Workflow, Code> {
    orch_workflows::load_str(text, name).map_err(|diagnostics| report(&diagnostics))
}

/// Plans `workflow` with `inputs`, or prints the diagnostics on stderr.
pub fn plan(workflow: &Workflow, inputs: &[(String, serde_json::Value)]) -> Result<Plan, Code> {
    let inputs: Inputs = inputs.iter().cloned().collect();
    orch_workflows::plan(workflow, &inputs).map_err(|diagnostics| report(&diagnostics))
}

fn report(diagnostics: &[Diagnostic]) -> Code {
    eprint!("{}", render_diagnostics(diagnostics));
    let n = diagnostics.len();
    eprintln!("orch: the workflow is invalid ({n} error{})", if n == 1 { "" } else { "s" });
    Code::Usage
}
