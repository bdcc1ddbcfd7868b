//! The `orch` binary: thin glue over the library crates. It parses the command line,
//! wires providers, tools and reporters together, and maps outcomes to exit codes.

mod cli;
mod exec;
mod exit;
mod host;
mod logging;
mod provider;
mod signals;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = cli::Cli::parse();
    logging::init(cli.verbose);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return exit::Code::Infrastructure.into();
        }
    };
    let code = runtime.block_on(async {
        match cli.command {
            cli::Command::Exec(args) => exec::run(*args).await,
            cli::Command::ToolHost(args) => host::serve(args).await.map(|()| exit::Code::Success),
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
