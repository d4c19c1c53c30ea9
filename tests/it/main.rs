//! The one integration test binary. Every scenario runs on SQLite and on PostgreSQL, each on a
//! fresh database; `scripts/test` makes sure a PostgreSQL is reachable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod analytics;
mod architecture;
mod bad_input;
mod concurrency;
mod conformance;
mod content;
pub(crate) mod faults;
mod field;
mod golden;
mod helpers;
mod http;
mod interop;
mod limits;
mod mcp_contract;
mod mcp_journeys;
mod oauth;
mod registry;
mod store;
mod web;
