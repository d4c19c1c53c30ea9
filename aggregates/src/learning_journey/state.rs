//! The journey's state and how each event changes it (`evolve`): the types the rest of the
//! service reads — goals and their mastery, recall memory, the open workflow, the decided next
//! step — and nothing that decides.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::JourneyEvent;
use crate::curriculum::{Pack, Rules};

/// How the learner showed understanding (a semantic judgement only the coach can make).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Evidence {
    /// Understanding shown without help.
    Independent,
    /// Sufficient understanding reached with help.
    Guided,
}

/// What the learner agreed to when closing a goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Consent {
    /// Close the goal; present nothing new yet.
    CloseOnly,
    /// Close the goal and go on.
    CloseAndContinue,
}

/// A learning mode offered at a mode choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// Learn the next goal.
    Learn,
    /// Check mastered goals by verified recall.
    VerifiedRecall,
}

/// A choice the journey publishes and the learner makes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum OptionChoice {
    /// Which goal next.
    Goal {
        /// The goal's id in the journey's pack.
        #[serde(rename = "goalId")]
        goal_id: String,
    },
    /// Which mode next.
    Mode {
        /// Learn a new goal, or check the due cards first.
        mode: Mode,
    },
    /// Present the pre-selected successor.
    Continue,
    /// Finish without taking the released exam (it stays available).
    DeclineExam,
    /// Switch the communication locale.
    Locale {
        /// The language to switch the conversation to.
        locale: String,
    },
    /// Turn the learner's delegation of choices on or off.
    Autopilot {
        /// On or off.
        autopilot: bool,
    },
    /// Focus on one top-level area of the curriculum, or (without a goal) on all of it.
    Focus {
        /// The area's goal id; `None` is the whole curriculum.
        #[serde(rename = "goalId")]
        goal_id: Option<String>,
    },
}

/// What the journey waits for when no workflow is open.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "camelCase")]
pub enum NextStep {
    /// Not taught yet.
    #[default]
    None,
    /// Teach the active goal.
    Teach,
    /// Several goals are sensible: the learner picks one (≤ 5, curriculum order).
    ChooseGoal {
        /// The goals offered.
        goals: Vec<String>,
    },
    /// Recall and a next goal are both sensible: the learner picks the mode.
    ChooseMode,
    /// Due cards exist: offer verified recall.
    OfferRecall,
    /// A successor exists but must wait for the learner's wish to go on.
    AwaitContinuation,
    /// A recall batch was stored and more cards are due: offer the next batch.
    OfferNextRecallBatch,
    /// Nothing left to learn and the exam is released: offer it.
    OfferExam,
    /// Nothing left in the focus: confirm the real completion.
    ConfirmCompletion,
}

/// Status of a leaf goal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum GoalStatus {
    /// A prerequisite is not mastered.
    Locked,
    /// On the frontier.
    Available,
    /// Activated and being taught now.
    Active,
    /// Completed, with mastery at or above the threshold.
    Mastered,
}

/// Progress of one leaf goal.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GoalProgress {
    /// Mastery in [0, 1].
    pub mastery: f64,
    /// Whether the goal counts as mastered.
    pub mastered: bool,
}

/// FSRS memory of one recall card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CardMemory {
    /// FSRS stability (days); `None` before the first review.
    pub stability: Option<f32>,
    /// FSRS difficulty; `None` before the first review.
    pub difficulty: Option<f32>,
    /// When the card is due.
    pub due: DateTime<Utc>,
    /// When it was last reviewed.
    pub last_review: Option<DateTime<Utc>>,
    /// Reviews so far.
    pub reviews: u32,
}

/// Step of an open verified-recall batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RecallStep {
    /// Questions shown; waiting for the learner's answers.
    AwaitingAnswers,
    /// Reference answers released; waiting for feedback, consent and the results.
    AnswersReleased,
}

/// Step of an open exam.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ExamStep {
    /// Tasks shown; waiting for the learner's work.
    AwaitingWork,
    /// Solutions released; waiting for feedback, consent and the scores.
    SolutionsReleased,
}

/// A workflow that spans several turns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", rename_all_fields = "camelCase")]
pub enum Workflow {
    /// A verified-recall batch.
    VerifiedRecall {
        /// Instance id: the sequence number of the event that opened it.
        instance: u64,
        /// Cards in the shown order.
        cards: Vec<String>,
        /// The step of the workflow that comes next.
        step: RecallStep,
    },
    /// An exam attempt.
    Exam {
        /// Instance id: the sequence number of the event that opened it.
        instance: u64,
        /// The step of the workflow that comes next.
        step: ExamStep,
    },
}

impl Workflow {
    /// The instance id.
    pub fn instance(&self) -> u64 {
        match self {
            Self::VerifiedRecall { instance, .. } | Self::Exam { instance, .. } => *instance,
        }
    }
}

/// One recorded exam attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExamAttempt {
    /// Points per task.
    pub points: Vec<f64>,
    /// The points reached, summed by the backend.
    pub total_points: f64,
    /// Largest possible total.
    pub max_points: u32,
    /// Whether it passed.
    pub passed: bool,
    /// When it was scored.
    pub at: DateTime<Utc>,
}

/// The pack version and rules a journey runs on.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JourneyInfo {
    /// The curriculum the journey follows.
    pub curriculum_id: String,
    /// Pack version the journey keeps.
    pub pack_version: u32,
    /// Rule numbers in force.
    pub rules: Rules,
}

/// The aggregate state. `version` is the sequence number of the last applied event: the
/// `stateVersion` the coach sees.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LearningJourney {
    /// Sequence number of the last applied event.
    pub version: u64,
    /// Set once started.
    pub info: Option<JourneyInfo>,
    /// The language the coach speaks with the learner (a BCP 47 tag).
    pub locale: String,
    /// Whether the learner delegated the choice between sensible next steps.
    pub autopilot: bool,
    /// Focus: a top-level area limiting the frontier, recall and progress; `None` is the whole
    /// curriculum.
    pub focus: Option<String>,
    /// The goal being taught.
    pub active_goal: Option<String>,
    /// Progress per leaf goal.
    pub goals: BTreeMap<String, GoalProgress>,
    /// Memory per card of goals mastered at least once.
    pub cards: BTreeMap<String, CardMemory>,
    /// The open workflow.
    pub workflow: Option<Workflow>,
    /// Finished workflow instances (a capability naming one is used, not expired).
    pub finished_workflows: BTreeSet<u64>,
    /// What the journey waits for when no workflow is open.
    pub next: NextStep,
    /// When goals were completed (for the plan status).
    pub completions: Vec<DateTime<Utc>>,
    /// Every exam attempt, scored or open, oldest first.
    pub exam_attempts: Vec<ExamAttempt>,
    /// Time of the last event.
    pub last_event_at: Option<DateTime<Utc>>,
}

/// Which workflows the coach can reach now: a workflow whose tools are refused at the tool
/// handshake is never offered as a next step (the domain does not pretend it exists).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Features {
    /// Verified recall can be run.
    pub recall: bool,
    /// The exam can be run.
    pub exam: bool,
    /// A goal's picture can be shown.
    pub picture: bool,
}

impl Default for Features {
    fn default() -> Self {
        Self { recall: true, exam: true, picture: true }
    }
}

/// What `handle` needs from outside: the journey's pack, the injected clock and which
/// workflows are reachable.
#[derive(Clone, Debug)]
pub struct JourneyServices {
    /// The pack version the journey runs on (for a start: the one to start on).
    pub pack: Arc<Pack>,
    /// Now, from the injected clock.
    pub now: DateTime<Utc>,
    /// Which workflows the registered tools can run now.
    pub features: Features,
}

impl JourneyServices {
    /// Services with every workflow reachable.
    pub fn new(pack: Arc<Pack>, now: DateTime<Utc>) -> Self {
        Self { pack, now, features: Features::default() }
    }
}

/// Keep mastery on two decimals so repeated additions never drift (0.6 + 0.1 is 0.7).
pub(super) fn round2(x: f64) -> f64 {
    ((x * 100.0).round() / 100.0).clamp(0.0, 1.0)
}

impl LearningJourney {
    /// The rules in force (defaults before the start).
    pub fn rules(&self) -> Rules {
        self.info.as_ref().map(|i| i.rules.clone()).unwrap_or_default()
    }

    /// Whether a leaf goal is mastered.
    pub fn is_mastered(&self, goal: &str) -> bool {
        self.goals.get(goal).is_some_and(|g| g.mastered)
    }

    /// Whether a goal (leaf or parent) is mastered: a parent is when all its leaves are.
    pub fn is_goal_mastered(&self, pack: &Pack, goal: &str) -> bool {
        let leaves = pack.leaves_under(goal);
        !leaves.is_empty() && leaves.iter().all(|l| self.is_mastered(&l.id))
    }

    /// Status of a leaf goal.
    pub fn status(&self, pack: &Pack, goal: &str) -> GoalStatus {
        if self.active_goal.as_deref() == Some(goal) {
            GoalStatus::Active
        } else if self.is_mastered(goal) {
            GoalStatus::Mastered
        } else if pack.prerequisite_leaves(goal).iter().all(|p| self.is_mastered(p)) {
            GoalStatus::Available
        } else {
            GoalStatus::Locked
        }
    }

    /// The leaves the focus covers: the leaves of the focus area and, transitively, the leaves
    /// they build on (a focus on a later area teaches what it needs first). `None` without a
    /// focus: every leaf.
    pub fn focus_scope<'a>(&self, pack: &'a Pack) -> Option<BTreeSet<&'a str>> {
        // The pack's own id: the scope borrows from the pack, not from the state.
        let focus = pack.goal(self.focus.as_deref()?)?.id.as_str();
        let mut scope: BTreeSet<&'a str> = BTreeSet::new();
        let mut todo: Vec<&'a str> = pack.leaves_under(focus).into_iter().map(|g| g.id.as_str()).collect();
        while let Some(leaf) = todo.pop() {
            if scope.insert(leaf) {
                todo.extend(pack.prerequisite_leaves(leaf));
            }
        }
        Some(scope)
    }

    /// The frontier (R-3a): unmastered leaves of the focus whose prerequisites are all mastered,
    /// in curriculum order. The active goal is on it while it is taught.
    pub fn frontier<'a>(&self, pack: &'a Pack) -> Vec<&'a str> {
        let scope = self.focus_scope(pack);
        pack.leaves()
            .filter(|g| scope.as_ref().is_none_or(|s| s.contains(g.id.as_str())))
            .filter(|g| !self.is_mastered(&g.id))
            .filter(|g| pack.prerequisite_leaves(&g.id).iter().all(|p| self.is_mastered(p)))
            .map(|g| g.id.as_str())
            .collect()
    }

    /// Mastered and all leaves of the focus; `None` without a focus.
    pub fn focus_progress(&self, pack: &Pack) -> Option<(usize, usize)> {
        let scope = self.focus_scope(pack)?;
        Some((scope.iter().filter(|g| self.is_mastered(g)).count(), scope.len()))
    }

    /// Cards due at `now` of mastered goals in the focus, most overdue first.
    pub fn due_cards(&self, pack: &Pack, now: DateTime<Utc>) -> Vec<String> {
        let scope = self.focus_scope(pack);
        let mut due: Vec<(DateTime<Utc>, usize, &str)> = Vec::new();
        let mut order = 0usize;
        for goal in pack.leaves() {
            if !self.is_mastered(&goal.id) || scope.as_ref().is_some_and(|s| !s.contains(goal.id.as_str())) {
                order += goal.cards.len();
                continue;
            }
            for card in &goal.cards {
                order += 1;
                if let Some(mem) = self.cards.get(&card.id) {
                    if mem.due <= now {
                        due.push((mem.due, order, card.id.as_str()));
                    }
                }
            }
        }
        due.sort();
        due.into_iter().map(|(_, _, id)| id.to_owned()).collect()
    }

    /// Leaves of the exam scope that are not mastered.
    pub fn exam_missing_goals(&self, pack: &Pack) -> usize {
        let mut missing = BTreeSet::new();
        for scope in &pack.exam.scope {
            for leaf in pack.leaves_under(scope) {
                if !self.is_mastered(&leaf.id) {
                    missing.insert(leaf.id.as_str());
                }
            }
        }
        missing.len()
    }

    /// Whether the exam is released (every goal in its scope mastered).
    pub fn exam_released(&self, pack: &Pack) -> bool {
        self.exam_missing_goals(pack) == 0
    }

    /// Whether an exam attempt passed.
    pub fn exam_passed(&self) -> bool {
        self.exam_attempts.iter().any(|a| a.passed)
    }

    pub(super) fn exam_offerable(&self, pack: &Pack) -> bool {
        self.exam_released(pack) && !self.exam_passed()
    }

    /// The decision-point options the state publishes (settings aside), in display order.
    pub fn decision_options(&self) -> Vec<OptionChoice> {
        if self.workflow.is_some() {
            return Vec::new();
        }
        match &self.next {
            NextStep::ChooseGoal { goals } => goals.iter().map(|g| OptionChoice::Goal { goal_id: g.clone() }).collect(),
            NextStep::ChooseMode => vec![OptionChoice::Mode { mode: Mode::Learn }, OptionChoice::Mode { mode: Mode::VerifiedRecall }],
            NextStep::AwaitContinuation => vec![OptionChoice::Continue],
            // Contract: completion is confirmed only when nothing is left — the exam taken, or
            // declined by the learner through this option.
            NextStep::OfferExam => vec![OptionChoice::DeclineExam],
            _ => Vec::new(),
        }
    }

    /// The standing preferences: every other locale and the autopilot toggle, always; the focus
    /// choices whenever nothing is being taught or checked (a goal in teaching or an open
    /// workflow is finished first).
    pub fn setting_options(&self, pack: &Pack) -> Vec<OptionChoice> {
        let mut out: Vec<OptionChoice> =
            pack.locales.iter().filter(|l| **l != self.locale).map(|l| OptionChoice::Locale { locale: l.clone() }).collect();
        out.push(OptionChoice::Autopilot { autopilot: !self.autopilot });
        if self.workflow.is_none() && self.next != NextStep::Teach {
            out.extend(self.focus_options(pack));
        }
        out
    }

    /// One focus choice per top-level area of the pack that is not the focus now (a mastered area
    /// too: focusing there reviews its due cards), then the whole curriculum when a focus is set.
    /// A pack with fewer than two areas has nothing to focus on.
    fn focus_options(&self, pack: &Pack) -> Vec<OptionChoice> {
        let areas: Vec<&str> = pack.goals.iter().filter(|g| g.parent.is_none() && pack.is_parent(&g.id)).map(|g| g.id.as_str()).collect();
        if areas.len() < 2 {
            return Vec::new();
        }
        let mut out: Vec<OptionChoice> = areas
            .into_iter()
            .filter(|a| self.focus.as_deref() != Some(*a))
            .map(|a| OptionChoice::Focus { goal_id: Some(a.to_owned()) })
            .collect();
        if self.focus.is_some() {
            out.push(OptionChoice::Focus { goal_id: None });
        }
        out
    }

    /// The decision-point options at `now`. A finished curriculum (completion to confirm, or the
    /// exam on offer) also offers the cards that fell due since as a recall option, when verified
    /// recall can run: a returning learner gets their due recall.
    pub fn options_at(&self, pack: &Pack, now: DateTime<Utc>, recall: bool) -> Vec<OptionChoice> {
        let mut options = self.decision_options();
        let finished = matches!(self.next, NextStep::ConfirmCompletion | NextStep::OfferExam | NextStep::None);
        if finished && self.workflow.is_none() && recall && !self.due_cards(pack, now).is_empty() {
            options.push(OptionChoice::Mode { mode: Mode::VerifiedRecall });
        }
        options
    }

    /// Whether a choice is published for the current state at `now`.
    pub fn is_published(&self, pack: &Pack, choice: &OptionChoice, now: DateTime<Utc>, recall: bool) -> bool {
        self.options_at(pack, now, recall).contains(choice) || self.setting_options(pack).contains(choice)
    }
}

impl LearningJourney {
    /// Applies one event: the only way the state changes.
    pub(super) fn evolve(&mut self, event: JourneyEvent) {
        self.version += 1;
        self.last_event_at = Some(event.at());
        match event {
            JourneyEvent::JourneyStarted { curriculum_id, pack_version, locale, rules, goals, .. } => {
                self.info = Some(JourneyInfo { curriculum_id, pack_version, rules });
                self.locale = locale;
                self.goals = goals.into_iter().map(|g| (g, GoalProgress::default())).collect();
            }
            JourneyEvent::GoalActivated { goal_id, .. } => {
                self.active_goal = Some(goal_id);
                self.next = NextStep::Teach;
            }
            JourneyEvent::GoalCompleted { goal_id, mastery, cards, at, .. } => {
                if self.active_goal.as_deref() == Some(goal_id.as_str()) {
                    self.active_goal = None;
                }
                let progress = self.goals.entry(goal_id).or_default();
                progress.mastery = mastery;
                progress.mastered = true;
                for card in cards {
                    let mem = self.cards.entry(card).or_insert_with(|| CardMemory {
                        stability: None,
                        difficulty: None,
                        due: at,
                        last_review: None,
                        reviews: 0,
                    });
                    mem.due = at;
                }
                self.completions.push(at);
            }
            JourneyEvent::NextStepDecided { step, .. } => self.next = step,
            JourneyEvent::LocaleChanged { locale, .. } => self.locale = locale,
            JourneyEvent::AutopilotChanged { enabled, .. } => self.autopilot = enabled,
            JourneyEvent::FocusChanged { goal_id, .. } => self.focus = goal_id,
            JourneyEvent::RecallBatchStarted { instance, cards, .. } => {
                self.workflow = Some(Workflow::VerifiedRecall { instance, cards, step: RecallStep::AwaitingAnswers });
            }
            JourneyEvent::RecallAnswersReleased { .. } => {
                if let Some(Workflow::VerifiedRecall { step, .. }) = self.workflow.as_mut() {
                    *step = RecallStep::AnswersReleased;
                }
            }
            JourneyEvent::RecallResultsRecorded { instance, results, .. } => {
                for r in results {
                    self.cards.insert(r.card_id, r.memory);
                    let progress = self.goals.entry(r.goal_id).or_default();
                    progress.mastery = r.mastery;
                    progress.mastered = r.mastered;
                }
                self.workflow = None;
                self.finished_workflows.insert(instance);
            }
            JourneyEvent::ExamStarted { instance, .. } => {
                self.workflow = Some(Workflow::Exam { instance, step: ExamStep::AwaitingWork });
            }
            JourneyEvent::ExamSolutionsReleased { .. } => {
                if let Some(Workflow::Exam { step, .. }) = self.workflow.as_mut() {
                    *step = ExamStep::SolutionsReleased;
                }
            }
            JourneyEvent::ExamScored { instance, points, total_points, max_points, passed, at } => {
                self.exam_attempts.push(ExamAttempt { points, total_points, max_points, passed, at });
                self.workflow = None;
                self.finished_workflows.insert(instance);
            }
        }
    }
}
