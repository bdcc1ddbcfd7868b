//! The `orch` binary: a thin layer over `orch-run`. It parses the command line,
//! converts it once into typed options, picks the terminal's reporter, and maps
//! outcomes to exit codes.

/// `eprintln!` that never panics: on a closed stderr the line is dropped (STYLE.md: a
/// reader that goes away is not an error).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics, as [`say!`].
macro_rules! say_raw {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;
mod docs_cmd;
mod exit;
mod init_cmd;
mod logging;
mod plan_cmd;
mod progress;
mod runs_cmd;
mod runtime;
mod sandbox_cmd;

use std::io::Write as _;
use std::sync::Arc;

use clap::Parser;
use orch_run::{exec, host, run};

fn main() -> std::process::ExitCode {
    // Before anything else: descriptors our parent left open never cross an `exec` of
    // ours (the zygote, tool hosts, hooks, commands; see `orch_sandbox::fds`).
    if let Err(e) = orch_sandbox::fds::cloexec_all_but(&[]) {
        // Fail closed: a sandbox could use what they open.
        say!("error: cannot mark inherited file descriptors close-on-exec: {e}");
        return exit::Code::Infrastructure.into();
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "sandbox") {
        // Like `env`, usage errors exit 125, so they never look like CMD's own status.
        let cli = match cli::SandboxCli::try_parse_from(std::env::args_os().skip(1)) {
            Ok(cli) => cli,
            Err(e) => {
                let _ = e.print();
                return std::process::ExitCode::from(if e.use_stderr() { sandbox_cmd::EXIT_SANDBOX } else { 0 });
            }
        };
        logging::init(cli.verbose);
        let cli::SandboxCommand::Run(args) = cli.command;
        return sandbox_cmd::run(args);
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == orch_run::zygote::SUBCOMMAND) {
        // The tool host zygote: single-threaded, it forks the hosts of `orch run`.
        logging::init(0);
        return std::process::ExitCode::from(orch_run::zygote::main());
    }
    let cli = cli::Cli::parse();
    logging::init(cli.verbose);
    // Still one thread: the keys leave the environment before any child or thread exists.
    let coordinator = !matches!(cli.command, cli::Command::Sandbox(_) | cli::Command::ToolHost(_));
    if coordinator {
        orch_run::secrets::protect();
        // Orphans of a dead tool host come to us, to be killed (see `orch_run::reap`).
        if let Err(e) = orch_run::reap::become_subreaper() {
            tracing::warn!("cannot become a child subreaper; processes of a crashed tool host may survive it: {e}");
        }
    }
    // These run while the process has a single thread: `sandbox run` never builds the
    // async runtime, and the tool host confines itself before it builds its own.
    let command = match cli.command {
        cli::Command::Sandbox(cli::SandboxCommand::Run(args)) => return sandbox_cmd::run(args),
        cli::Command::Validate(args) => return plan_cmd::validate(&args).into(),
        cli::Command::Schema(args) => return print_data(&args.name.schema().json()),
        cli::Command::Init(args) => return init_cmd::run(&args).into(),
        cli::Command::DocsGen(args) => {
            return match docs_cmd::write(&args.dir) {
                Ok(()) => exit::Code::Success.into(),
                Err(e) => {
                    say!("error: cannot write the reference pages into {}: {e}", args.dir.display());
                    exit::Code::Infrastructure.into()
                }
            };
        }
        cli::Command::Runs(command) => return runs_cmd::run(&command).into(),
        cli::Command::Completions(args) => {
            let full = <cli::Cli as clap::CommandFactory>::command();
            // clap_complete offers hidden subcommands too: orch's internal ones stay out.
            let mut command = clap::Command::new("orch")
                .version(env!("CARGO_PKG_VERSION"))
                .args(full.get_arguments().cloned())
                .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
            let mut script = Vec::new();
            clap_complete::generate(args.shell, &mut command, "orch", &mut script);
            return write_stdout(&script);
        }
        cli::Command::ToolHost(args) => return std::process::ExitCode::from(host::host_main(args.options())),
        other => other,
    };
    let work = match &command {
        cli::Command::Exec(_) => runtime::Work::OneAgentAtATime,
        cli::Command::Run(args) => runtime::Work::of_run(&args.workflow, args.concurrency),
        _ => runtime::Work::Many,
    };
    let runtime = match runtime::build(work) {
        Ok(rt) => rt,
        Err(e) => {
            say!("error: {e}");
            let code = if matches!(e, runtime::BuildError::Flavor(_)) {
                exit::Code::Usage
            } else {
                exit::Code::Infrastructure
            };
            return code.into();
        }
    };
    let reaper = tokio_util::sync::CancellationToken::new();
    // The terminal's reporter, made for the commands that report progress; finished
    // below whichever way the command ends, so no live line stays behind an error.
    let terminal: std::sync::OnceLock<Arc<dyn orch_run::run::Reporter>> = std::sync::OnceLock::new();
    let reporter = || terminal.get_or_init(|| Arc::from(progress::for_terminal())).clone();
    let code: anyhow::Result<exit::Code> = runtime.block_on(async {
        if coordinator {
            orch_run::reap::spawn_reaper(reaper.clone());
        }
        match command {
            cli::Command::Run(args) => Ok(run::run(args.options(reporter())).await?),
            cli::Command::Merge(args) => Ok(run::merge(args.options(reporter())).await?),
            cli::Command::Recover(args) => Ok(run::recover::command(&args.dir, args.author).await?),
            cli::Command::Plan(args) => plan_cmd::show(&args).or_else(reader_gone),
            cli::Command::Validate(args) => Ok(plan_cmd::validate(&args)),
            cli::Command::Exec(args) => Ok(exec::run(args.options(reporter())?).await?),
            cli::Command::McpClient(args) => {
                let probe = orch_run::mcp_probe::probe(&args.config, &args.calls).await?;
                let mut out = std::io::stdout().lock();
                for line in &probe.lines {
                    if writeln!(out, "{line}").is_err() {
                        break;
                    }
                }
                Ok(probe.code)
            }
            cli::Command::Sandbox(_)
            | cli::Command::ToolHost(_)
            | cli::Command::Schema(_)
            | cli::Command::Init(_)
            | cli::Command::DocsGen(_)
            | cli::Command::Runs(_)
            | cli::Command::Completions(_) => Ok(exit::Code::Usage),
        }
    });
    if let Some(reporter) = terminal.get() {
        reporter.finish();
    }
    reaper.cancel();
    if coordinator {
        orch_run::reap::at_exit();
    }
    match code {
        Ok(code) => code.into(),
        Err(e) => {
            say!("error: {e:#}");
            exit::for_error(&e).into()
        }
    }
}

/// Prints `value` as pretty JSON on stdout.
fn print_data(value: &serde_json::Value) -> std::process::ExitCode {
    let mut text = serde_json::to_vec_pretty(value).unwrap_or_default();
    text.push(b'\n');
    write_stdout(&text)
}

/// Writes `bytes` to stdout; a reader that stopped reading is not an error.
fn write_stdout(bytes: &[u8]) -> std::process::ExitCode {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => exit::Code::Success.into(),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => exit::Code::Success.into(),
        Err(e) => {
            eprintln!("error: cannot write to stdout: {e}");
            exit::Code::Infrastructure.into()
        }
    }
}

/// `orch plan | head`: a reader that stopped reading is not an error (as with `cat`).
fn reader_gone(e: anyhow::Error) -> anyhow::Result<exit::Code> {
    match e.downcast_ref::<std::io::Error>() {
        Some(io) if io.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::Code::Success),
        _ => Err(e),
    }
}
