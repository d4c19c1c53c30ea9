//! SkillPilot's service: adapters and wiring around the pure `aggregates` and `projections`
//! crates — configuration, the stores, the application services, HTTP and the CLI.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![warn(unreachable_pub)]

pub mod app;
#[cfg(feature = "bench")]
pub(crate) mod bench;
pub mod canonical;
pub(crate) mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod mcp;
pub(crate) mod metrics;
pub mod registry;
pub mod startup;
pub mod store;
pub mod telemetry;
pub(crate) mod web;

/// The version `--version`, `/metrics` and the start-up line report: the package version and
/// the git commit it was built from (`unknown` outside a git checkout).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SKILLPILOT_GIT_COMMIT"), ")");

/// The git commit alone.
pub const GIT_COMMIT: &str = env!("SKILLPILOT_GIT_COMMIT");
