//! Experiment: the tool host alone.
fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(2);
    let mut o = orch_run::options::HostOptions { cwd: ".".into(), tools: vec![], policy: String::new(), mcp: None };
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_default();
        match a.as_str() {
            "--cwd" => o.cwd = v.into(),
            "--tools" => o.tools = v.split(',').map(str::to_owned).collect(),
            "--policy" => o.policy = v,
            "--mcp" => o.mcp = Some(v),
            _ => {}
        }
    }
    if orch_run::host::confine_self(&o).is_err() {
        return std::process::ExitCode::from(3);
    }
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    match rt.block_on(orch_run::host::serve(o)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(_) => std::process::ExitCode::from(3),
    }
}
