//! The `skillpilot` binary: parse the command line, set up logging, run.

use clap::Parser;
use tracing_subscriber::EnvFilter;

use skillpilot::cli::{run, Cli};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    match run(Cli::parse()).await {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("skillpilot: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
