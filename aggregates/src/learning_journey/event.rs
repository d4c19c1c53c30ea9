//! Events of the LearningJourney aggregate. Names are frozen: a change is a new version with an
//! upcaster (see `docs/events.md`). Every event carries the numbers the domain computed, so a
//! replay never re-runs a rule (a changed scheduler cannot rewrite history).

use chrono::{DateTime, Utc};
use cqrs_es::DomainEvent;
use serde::{Deserialize, Serialize};

use super::{CardMemory, Evidence, NextStep};
use crate::curriculum::Rules;

/// The schema version every event of this module is written with.
pub const EVENT_VERSION: &str = "1";

/// Something that happened to a learning journey.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all_fields = "camelCase")]
pub enum JourneyEvent {
    /// The journey began on a pack version, in a communication locale.
    JourneyStarted {
        /// The curriculum the journey follows.
        curriculum_id: String,
        /// The pack version the journey keeps.
        pack_version: u32,
        /// The language the coach speaks with the learner (a BCP 47 tag).
        locale: String,
        /// The rule numbers in force for this journey.
        rules: Rules,
        /// The leaf goals, in curriculum order.
        goals: Vec<String>,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// A goal became the active goal; it is taught next.
    GoalActivated {
        /// The goal's id in the journey's pack.
        goal_id: String,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The active goal was completed and mastered.
    GoalCompleted {
        /// The goal's id in the journey's pack.
        goal_id: String,
        /// The evidence the coach reported.
        evidence: Evidence,
        /// The mastery the backend computed.
        mastery: f64,
        /// The goal's recall cards, due for their first verified recall at once.
        cards: Vec<String>,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The next step after a decision point was decided.
    NextStepDecided {
        /// The step the policy decided on.
        step: NextStep,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The communication locale changed.
    LocaleChanged {
        /// The new locale.
        locale: String,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// Autopilot was switched.
    AutopilotChanged {
        /// On or off.
        enabled: bool,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The learner focused on one top-level area, or on the whole curriculum again.
    FocusChanged {
        /// The area's goal id; `None` is the whole curriculum.
        goal_id: Option<String>,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// A verified-recall batch was chosen and shown.
    RecallBatchStarted {
        /// The workflow instance (the sequence number of this event).
        instance: u64,
        /// The cards, in the order shown.
        cards: Vec<String>,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The reference answers of the open batch were released.
    RecallAnswersReleased {
        /// The workflow instance.
        instance: u64,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The assessments of a batch were stored, with the computed memory and mastery.
    RecallResultsRecorded {
        /// The workflow instance.
        instance: u64,
        /// One outcome per card, in the order shown.
        results: Vec<RecallOutcome>,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// An exam attempt began.
    ExamStarted {
        /// The workflow instance.
        instance: u64,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The reference solutions of the open exam were released.
    ExamSolutionsReleased {
        /// The workflow instance.
        instance: u64,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
    /// The exam was scored.
    ExamScored {
        /// The workflow instance.
        instance: u64,
        /// Points per task, in the order shown.
        points: Vec<f64>,
        /// The points reached, summed by the backend.
        total_points: f64,
        /// The largest possible total.
        max_points: u32,
        /// Whether the pass mark was reached.
        passed: bool,
        /// When it happened, by the injected clock.
        at: DateTime<Utc>,
    },
}

/// What one assessed card did to its memory and its goal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecallOutcome {
    /// The recall card's id in the pack.
    pub card_id: String,
    /// The goal the card belongs to.
    pub goal_id: String,
    /// The coach's judgement.
    pub passed: bool,
    /// The card's memory after the review.
    pub memory: CardMemory,
    /// The goal's mastery after this card.
    pub mastery: f64,
    /// Whether the goal is still mastered after this card.
    pub mastered: bool,
}

impl JourneyEvent {
    /// The time the event records.
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::JourneyStarted { at, .. }
            | Self::GoalActivated { at, .. }
            | Self::GoalCompleted { at, .. }
            | Self::NextStepDecided { at, .. }
            | Self::LocaleChanged { at, .. }
            | Self::AutopilotChanged { at, .. }
            | Self::FocusChanged { at, .. }
            | Self::RecallBatchStarted { at, .. }
            | Self::RecallAnswersReleased { at, .. }
            | Self::RecallResultsRecorded { at, .. }
            | Self::ExamStarted { at, .. }
            | Self::ExamSolutionsReleased { at, .. }
            | Self::ExamScored { at, .. } => *at,
        }
    }
}

impl DomainEvent for JourneyEvent {
    fn event_type(&self) -> String {
        match self {
            Self::JourneyStarted { .. } => "JourneyStarted",
            Self::GoalActivated { .. } => "GoalActivated",
            Self::GoalCompleted { .. } => "GoalCompleted",
            Self::NextStepDecided { .. } => "NextStepDecided",
            Self::LocaleChanged { .. } => "LocaleChanged",
            Self::AutopilotChanged { .. } => "AutopilotChanged",
            Self::FocusChanged { .. } => "FocusChanged",
            Self::RecallBatchStarted { .. } => "RecallBatchStarted",
            Self::RecallAnswersReleased { .. } => "RecallAnswersReleased",
            Self::RecallResultsRecorded { .. } => "RecallResultsRecorded",
            Self::ExamStarted { .. } => "ExamStarted",
            Self::ExamSolutionsReleased { .. } => "ExamSolutionsReleased",
            Self::ExamScored { .. } => "ExamScored",
        }
        .to_owned()
    }

    fn event_version(&self) -> String {
        EVENT_VERSION.to_owned()
    }
}
