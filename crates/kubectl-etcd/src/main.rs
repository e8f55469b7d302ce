//! `kubectl-etcd`: copy it onto the PATH and run `kubectl etcd ...`.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use kubectl_etcd::args::Cli;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(kubectl_etcd::commands::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::FAILURE
        }
    }
}
