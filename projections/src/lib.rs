//! SkillPilot's pure read models: the full context a coach receives (R-7a) and its localized
//! texts. Folds only — no I/O, no clock, no keys.
#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod analytics;
pub mod full_context;
pub mod receipt;
pub mod text;

#[cfg(test)]
mod tests;
