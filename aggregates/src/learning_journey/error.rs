//! The ways a LearningJourney refuses a command. Each variant says how a caller handles it;
//! the application layer maps each once to a stable code (docs/tool-contract.md, errors).

/// Why the journey refused a command. Nothing was changed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JourneyError {
    /// The journey has not been started. Start it first.
    #[error("the journey has not been started")]
    NotStarted,
    /// The journey was already started; nothing to do.
    #[error("the journey has already been started")]
    AlreadyStarted,
    /// The locale is not one the curriculum supports. Offer a published locale option.
    #[error("the locale is not supported by the curriculum")]
    UnsupportedLocale,
    /// The state allows another action now. Reload the context and follow its action.
    #[error("the current state allows another action")]
    NotAllowed,
    /// The option is not among those published for this state. Reload.
    #[error("the option is not published for the current state")]
    OptionInvalid,
    /// The exam is not released: goals of its scope are not mastered yet.
    #[error("{missing_goals} goals of the exam scope are not mastered")]
    NotEligible {
        /// How many scope goals are not mastered.
        missing_goals: usize,
    },
    /// No recall card is due; recall cannot start.
    #[error("no recall card is due")]
    NothingDue,
    /// The number of assessments or scores differs from the shown questions or tasks.
    #[error("expected {expected} assessments, got {got}")]
    IncompleteAssessments {
        /// Questions or tasks shown.
        expected: usize,
        /// Assessments or scores sent.
        got: usize,
    },
    /// Points outside [0, maxPoints] of their task, or not finite.
    #[error("points of task {position} are out of range")]
    PointsOutOfRange {
        /// 1-based task position.
        position: usize,
    },
    /// The capability's step is already finished. Reload.
    #[error("the workflow step was already used")]
    CapabilityUsed,
    /// The capability names a workflow instance that no longer exists. Reload.
    #[error("the workflow no longer exists")]
    CapabilityExpired,
    /// The scheduler could not compute a memory state (a defect, not a learner error).
    #[error("recall scheduling failed")]
    Scheduler,
}
