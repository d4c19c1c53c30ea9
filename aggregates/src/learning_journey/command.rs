//! Commands of the LearningJourney aggregate: what a coach (through the application layer)
//! asks the journey to do. Values here are already validated for shape; the aggregate decides
//! whether the state allows them.

use serde::{Deserialize, Serialize};

use super::{Consent, Evidence, OptionChoice};

/// A request to change a learning journey.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum JourneyCommand {
    /// Begin the journey on the services' pack, in a communication locale.
    StartJourney {
        /// Communication locale (must be one of the pack's).
        locale: String,
    },
    /// Choose one of the currently published options.
    ChooseOption {
        /// The decoded choice.
        choice: OptionChoice,
    },
    /// Complete the active goal with the coach's structured decision.
    CompleteGoal {
        /// How understanding was shown.
        evidence: Evidence,
        /// What the learner agreed to.
        consent: Consent,
    },
    /// Start a verified-recall batch (or get the open one back).
    StartRecall,
    /// Release the reference answers of the open batch.
    ReleaseRecallAnswers {
        /// The batch the capability names.
        instance: u64,
    },
    /// Store the assessments of the released batch.
    RecordRecallResults {
        /// The batch the capability names.
        instance: u64,
        /// One judgement per question, in the shown order.
        passed: Vec<bool>,
    },
    /// Start the exam (or get the open one back).
    StartExam,
    /// Release the reference solutions of the open exam.
    ReleaseExamSolutions {
        /// The exam the capability names.
        instance: u64,
    },
    /// Store the scores of the released exam.
    RecordExamScores {
        /// The exam the capability names.
        instance: u64,
        /// Points per task, in the shown order.
        points: Vec<f64>,
    },
}

impl JourneyCommand {
    /// A stable name for metadata and audit.
    pub fn name(&self) -> &'static str {
        match self {
            Self::StartJourney { .. } => "StartJourney",
            Self::ChooseOption { .. } => "ChooseOption",
            Self::CompleteGoal { .. } => "CompleteGoal",
            Self::StartRecall => "StartRecall",
            Self::ReleaseRecallAnswers { .. } => "ReleaseRecallAnswers",
            Self::RecordRecallResults { .. } => "RecordRecallResults",
            Self::StartExam => "StartExam",
            Self::ReleaseExamSolutions { .. } => "ReleaseExamSolutions",
            Self::RecordExamScores { .. } => "RecordExamScores",
        }
    }
}
