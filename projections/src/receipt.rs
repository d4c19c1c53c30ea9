//! The receipt of a mutation (docs/tool-contract.md, wire shapes): proof of what was stored, counted from the events
//! of the commit or — for the steps of a workflow — read off the step the workflow stands at.
//! The one mapping from events to what a coach may confirm to the learner.

use aggregates::curriculum::Pack;
use aggregates::learning_journey::{ExamStep, JourneyEvent, LearningJourney, RecallStep, Workflow};
use serde::Serialize;

use crate::text::Lang;

/// What a mutation stored, with the version the journey stands at afterwards.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Receipt {
    /// What was stored.
    #[serde(flatten)]
    pub stored: Stored,
    /// The journey's version after the commit.
    pub state_version: u64,
}

/// The kinds of stored facts a receipt confirms.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "stored", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Stored {
    /// A goal was closed; the mastery is the backend's.
    GoalCompleted {
        /// The goal's title in the learner's language.
        goal: String,
        /// The computed mastery.
        mastery: f64,
    },
    /// A recall batch was opened.
    RecallStarted {
        /// How many questions it holds.
        questions: usize,
    },
    /// The reference answers of the open batch were released.
    RecallAnswersReleased,
    /// The assessments of a batch were stored.
    RecallResults {
        /// How many assessments were stored.
        recorded: usize,
        /// Of which passed.
        passed: usize,
    },
    /// An exam attempt was opened.
    ExamStarted,
    /// The reference solutions of the open exam were released.
    ExamSolutionsReleased,
    /// The exam was scored; totals and the pass are the backend's.
    ExamScores {
        /// The points reached, summed by the backend.
        total_points: f64,
        /// The most points the exam allows.
        max_points: u32,
        /// Whether it passed.
        passed: bool,
    },
    /// The journey began.
    JourneyStarted,
    /// An offered option was recorded.
    OptionChosen {
        /// The chosen goal's title, when the option activated a goal.
        #[serde(skip_serializing_if = "Option::is_none")]
        label: Option<String>,
    },
    /// The call changed nothing (the state already was what it asked for).
    Nothing,
}

impl Receipt {
    /// The receipt of a commit, from its first event; `Nothing` for an empty commit.
    pub fn of_commit(first: Option<&JourneyEvent>, state: &LearningJourney, pack: &Pack) -> Self {
        let loc = state.locale.as_str();
        let title = |goal: &str| pack.goal(goal).map(|g| pack.text(&g.title, loc).to_owned()).unwrap_or_default();
        let stored = match first {
            None => Stored::Nothing,
            Some(JourneyEvent::GoalCompleted { goal_id, mastery, .. }) => Stored::GoalCompleted { goal: title(goal_id), mastery: *mastery },
            Some(JourneyEvent::RecallBatchStarted { cards, .. }) => Stored::RecallStarted { questions: cards.len() },
            Some(JourneyEvent::RecallAnswersReleased { .. }) => Stored::RecallAnswersReleased,
            Some(JourneyEvent::RecallResultsRecorded { results, .. }) => {
                Stored::RecallResults { recorded: results.len(), passed: results.iter().filter(|r| r.passed).count() }
            }
            Some(JourneyEvent::ExamStarted { .. }) => Stored::ExamStarted,
            Some(JourneyEvent::ExamSolutionsReleased { .. }) => Stored::ExamSolutionsReleased,
            Some(JourneyEvent::ExamScored { total_points, max_points, passed, .. }) => {
                Stored::ExamScores { total_points: *total_points, max_points: *max_points, passed: *passed }
            }
            Some(JourneyEvent::JourneyStarted { .. }) => Stored::JourneyStarted,
            Some(JourneyEvent::GoalActivated { goal_id, .. }) => Stored::OptionChosen { label: Some(title(goal_id)) },
            Some(JourneyEvent::FocusChanged { goal_id, .. }) => Stored::OptionChosen { label: goal_id.as_deref().map(title) },
            Some(JourneyEvent::LocaleChanged { .. } | JourneyEvent::AutopilotChanged { .. } | JourneyEvent::NextStepDecided { .. }) => {
                Stored::OptionChosen { label: None }
            }
        };
        Self { stored, state_version: state.version }
    }

    /// The receipt of the workflow step the journey stands at (the result of opening or
    /// advancing a recall batch or an exam); `None` without an open workflow.
    pub fn of_workflow(state: &LearningJourney) -> Option<Self> {
        let stored = match state.workflow.as_ref()? {
            Workflow::VerifiedRecall { step: RecallStep::AwaitingAnswers, cards, .. } => Stored::RecallStarted { questions: cards.len() },
            Workflow::VerifiedRecall { step: RecallStep::AnswersReleased, .. } => Stored::RecallAnswersReleased,
            Workflow::Exam { step: ExamStep::AwaitingWork, .. } => Stored::ExamStarted,
            Workflow::Exam { step: ExamStep::SolutionsReleased, .. } => Stored::ExamSolutionsReleased,
        };
        Some(Self { stored, state_version: state.version })
    }

    /// The one-line summary a coach shows beside the result.
    pub fn summary(&self, lang: Lang) -> &'static str {
        match (&self.stored, lang) {
            (Stored::GoalCompleted { .. }, Lang::De) => "Ziel abgeschlossen und gespeichert.",
            (Stored::GoalCompleted { .. }, Lang::En) => "Goal completed and saved.",
            (Stored::RecallStarted { .. }, Lang::De) => "Abfrage gestartet.",
            (Stored::RecallStarted { .. }, Lang::En) => "Recall check started.",
            (Stored::RecallAnswersReleased, Lang::De) => "Sollantworten freigegeben.",
            (Stored::RecallAnswersReleased, Lang::En) => "Reference answers released.",
            (Stored::RecallResults { .. }, Lang::De) => "Abfrage-Ergebnisse gespeichert.",
            (Stored::RecallResults { .. }, Lang::En) => "Recall results saved.",
            (Stored::ExamStarted, Lang::De) => "Prüfung gestartet.",
            (Stored::ExamStarted, Lang::En) => "Exam started.",
            (Stored::ExamSolutionsReleased, Lang::De) => "Lösungen freigegeben.",
            (Stored::ExamSolutionsReleased, Lang::En) => "Solutions released.",
            (Stored::ExamScores { .. }, Lang::De) => "Prüfungspunkte gespeichert.",
            (Stored::ExamScores { .. }, Lang::En) => "Exam scores saved.",
            (Stored::JourneyStarted | Stored::OptionChosen { .. } | Stored::Nothing, Lang::De) => "Auswahl gespeichert.",
            (Stored::JourneyStarted | Stored::OptionChosen { .. } | Stored::Nothing, Lang::En) => "Choice saved.",
        }
    }
}
