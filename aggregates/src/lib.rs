//! SkillPilot's pure domain: the curriculum model, the LearningJourney aggregate with its
//! commands, events and errors, and the helpers its rules use (FSRS scheduling, plan counts).
//! No I/O, no wall clock: time and content come in from the caller.
#![deny(missing_docs)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod curriculum;
pub mod learning_journey;
pub mod plan;
pub mod scheduling;
