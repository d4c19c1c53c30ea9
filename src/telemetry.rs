//! Logging set-up: human-readable text or one JSON object per line, always to stderr, with
//! colour only when stderr is a terminal (a log file or journald never sees escape codes).
//! `RUST_LOG` overrides the default filter.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// `2026-12-03T08:35:09Z  INFO tool_call{tool=…}: message key=value`.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the event's fields at the top
    /// level, and `spans` with the fields of every enclosing span (the tool call's among them).
    Json,
}

/// The filter when `RUST_LOG` is unset: our info lines; libraries only when something is wrong.
pub const DEFAULT_FILTER: &str = "info,sqlx=error,rmcp=error,hyper=warn,h2=warn";

/// Installs the global subscriber. Called once, by `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(false).with_span_list(true).init(),
    }
}
