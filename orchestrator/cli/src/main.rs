//! The `orch` binary: thin glue over the library crates. It parses the command line,
//! wires providers, tools and reporters together, and maps outcomes to exit codes.

mod agent_prompt;
mod cli;
mod clock;
mod exec;
mod exit;
mod git;
mod hooks_config;
mod host;
mod logging;
mod mcp;
mod plan_cmd;
mod provider;
mod record;
mod repo_config;
mod run;
mod sandbox_cmd;
mod signals;

use clap::Parser;

fn main() -> std::process::ExitCode {
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
    let cli = cli::Cli::parse();
    logging::init(cli.verbose);
    // Both of these run while the process has a single thread: `sandbox run` never
    // builds the async runtime, and the tool host confines itself before it does.
    let command = match cli.command {
        cli::Command::Sandbox(cli::SandboxCommand::Run(args)) => return sandbox_cmd::run(args),
        cli::Command::Validate(args) => return plan_cmd::validate(&args).into(),
        other => other,
    };
    if let cli::Command::ToolHost(args) = &command
        && let Err(e) = host::confine_self(args)
    {
        eprintln!("error: the tool host could not confine itself: {e:#}");
        return exit::Code::Infrastructure.into();
    }
    // A tool host serves one agent: one thread is plenty (blocking work such as a search
    // walk still goes to tokio's blocking pool), and 64 agents mean 64 hosts.
    let mut builder = match command {
        cli::Command::ToolHost(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::Code::Infrastructure.into();
        }
    };
    let code = runtime.block_on(async {
        match command {
            cli::Command::Run(args) => run::run(*args).await,
            cli::Command::Merge(args) => run::merge(*args).await,
            cli::Command::Plan(args) => plan_cmd::show(&args),
            cli::Command::Validate(args) => Ok(plan_cmd::validate(&args)),
            cli::Command::Exec(args) => exec::run(*args).await,
            cli::Command::ToolHost(args) => host::serve(args).await.map(|()| exit::Code::Success),
            cli::Command::Sandbox(_) => Ok(exit::Code::Usage),
        }
    });
    match code {
        Ok(code) => code.into(),
        Err(e) => {
            eprintln!("error: {e:#}");
            exit::Code::for_error(&e).into()
        }
    }
}
