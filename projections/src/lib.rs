//! SkillPilot's pure read models: the full context a coach receives (R-7a) and its localized
//! texts. Folds only — no I/O, no clock, no keys.
#![deny(missing_docs)]

pub mod full_context;
pub mod text;

#[cfg(test)]
mod tests;
