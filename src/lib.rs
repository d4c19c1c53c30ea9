//! SkillPilot's service: adapters and wiring around the pure `aggregates` and `projections`
//! crates — configuration, the stores, the application services, HTTP and the CLI.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod bench;
pub mod catalog;
pub mod cli;
pub mod clock;
pub mod config;
pub mod error;
pub mod http;
pub mod mcp;
pub mod metrics;
pub mod registry;
pub mod startup;
pub mod store;
pub mod web;
