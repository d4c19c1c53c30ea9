//! The `skillpilot` binary: read the optional config file, parse the command line, set up
//! logging, run. Precedence: flags, then environment, then the config file, then defaults.

use clap::Parser;

use skillpilot::cli::{run, Cli};
use skillpilot::config::apply_config_file;

/// mimalloc, not glibc's allocator: under 16 coaches a fifth of the server's CPU was in
/// glibc's `malloc`/`free` (chunk consolidation included) for the many short-lived JSON values
/// and strings of a call (docs/performance.md, "The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Before any thread exists: the file only fills environment variables that are unset.
    if let Err(e) = apply_config_file() {
        eprintln!("skillpilot: {e:#}");
        return std::process::ExitCode::FAILURE;
    }
    let cli = Cli::parse();
    skillpilot::telemetry::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("skillpilot: cannot start the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => std::process::ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("skillpilot: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
