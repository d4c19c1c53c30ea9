//! The LearningJourney aggregate: one learner on one curriculum. It owns the locale, the
//! active goal, per-goal mastery, recall memory, the open workflow with its step, the decided
//! next step (which makes the published option set a function of the state), plan progress and
//! the autopilot flag. Every business rule of docs/domain.md (the next-step policy included) lives
//! here or in the pure helpers beside it; `handle` reads no clock and does no I/O — the time
//! and the pack come in through [`JourneyServices`].

mod command;
mod decide;
mod error;
mod event;
mod state;
#[cfg(test)]
mod tests;

pub use command::JourneyCommand;
pub use error::JourneyError;
pub use event::{JourneyEvent, RecallOutcome, EVENT_VERSION};

pub use state::*;
