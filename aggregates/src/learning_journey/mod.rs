//! The LearningJourney aggregate: one learner on one curriculum. It owns the locale, the
//! active goal, per-goal mastery, recall memory, the open workflow with its step, the decided
//! next step (which makes the published option set a function of the state), plan progress and
//! the autopilot flag. Every business rule of docs/domain.md (the next-step policy included) lives
//! here or in the pure helpers beside it; `handle` reads no clock and does no I/O — the time
//! and the pack come in through [`JourneyServices`].

mod command;
mod error;
mod event;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;
use serde::{Deserialize, Serialize};

pub use command::JourneyCommand;
pub use error::JourneyError;
pub use event::{JourneyEvent, RecallOutcome, EVENT_VERSION};

use crate::curriculum::{Pack, Rules};
use crate::scheduling;

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
}

impl OptionChoice {
    /// Whether this is a standing preference (always published, changes no required action).
    pub fn is_setting(&self) -> bool {
        matches!(self, Self::Locale { .. } | Self::Autopilot { .. })
    }
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
    /// Focus: a parent goal limiting the frontier, or the whole curriculum.
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
}

impl Default for Features {
    fn default() -> Self {
        Self { recall: true, exam: true }
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
fn round2(x: f64) -> f64 {
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

    /// The frontier (R-3a): unmastered leaves of the focus whose prerequisites are all mastered,
    /// in curriculum order. The active goal is on it while it is taught.
    pub fn frontier<'a>(&self, pack: &'a Pack) -> Vec<&'a str> {
        pack.leaves()
            .filter(|g| self.in_focus(pack, &g.id))
            .filter(|g| !self.is_mastered(&g.id))
            .filter(|g| pack.prerequisite_leaves(&g.id).iter().all(|p| self.is_mastered(p)))
            .map(|g| g.id.as_str())
            .collect()
    }

    fn in_focus(&self, pack: &Pack, goal: &str) -> bool {
        self.focus.as_deref().is_none_or(|f| pack.is_within(goal, f))
    }

    /// Cards due at `now` of mastered goals in the focus, most overdue first.
    pub fn due_cards(&self, pack: &Pack, now: DateTime<Utc>) -> Vec<String> {
        let mut due: Vec<(DateTime<Utc>, usize, &str)> = Vec::new();
        let mut order = 0usize;
        for goal in pack.leaves() {
            for card in &goal.cards {
                order += 1;
                if !self.is_mastered(&goal.id) || !self.in_focus(pack, &goal.id) {
                    continue;
                }
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

    fn exam_offerable(&self, pack: &Pack) -> bool {
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
            _ => Vec::new(),
        }
    }

    /// The standing preferences, always published: every other locale and the autopilot toggle.
    pub fn setting_options(&self, pack: &Pack) -> Vec<OptionChoice> {
        let mut out: Vec<OptionChoice> =
            pack.locales.iter().filter(|l| **l != self.locale).map(|l| OptionChoice::Locale { locale: l.clone() }).collect();
        out.push(OptionChoice::Autopilot { autopilot: !self.autopilot });
        out
    }

    /// Whether a choice is published for the current state.
    pub fn is_published(&self, pack: &Pack, choice: &OptionChoice) -> bool {
        self.decision_options().contains(choice) || self.setting_options(pack).contains(choice)
    }
}

impl Aggregate for LearningJourney {
    const TYPE: &'static str = "LearningJourney";
    type Command = JourneyCommand;
    type Event = JourneyEvent;
    type Error = JourneyError;
    type Services = JourneyServices;

    async fn handle(&mut self, command: Self::Command, svc: &Self::Services, sink: &EventSink<Self>) -> Result<(), Self::Error> {
        let events = self.decide(command, svc)?;
        for event in events {
            sink.write(event, self).await;
        }
        Ok(())
    }

    fn apply(&mut self, event: Self::Event) {
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

/// Decisions: each returns the events a command produces, applying them to a scratch copy as
/// it goes so later rules see earlier effects (as `EventSink::write` does).
impl LearningJourney {
    /// Decide the events for a command without changing `self`.
    pub fn decide(&self, command: JourneyCommand, svc: &JourneyServices) -> Result<Vec<JourneyEvent>, JourneyError> {
        let mut scratch = Decision { state: self.clone(), events: Vec::new(), features: svc.features };
        scratch.run(command, &svc.pack, svc.now)?;
        Ok(scratch.events)
    }
}

struct Decision {
    state: LearningJourney,
    events: Vec<JourneyEvent>,
    features: Features,
}

impl Decision {
    fn emit(&mut self, event: JourneyEvent) {
        self.state.apply(event.clone());
        self.events.push(event);
    }

    fn run(&mut self, command: JourneyCommand, pack: &Pack, now: DateTime<Utc>) -> Result<(), JourneyError> {
        if self.state.info.is_none() && !matches!(command, JourneyCommand::StartJourney { .. }) {
            return Err(JourneyError::NotStarted);
        }
        match command {
            JourneyCommand::StartJourney { locale } => self.start(pack, locale, now),
            JourneyCommand::ChooseOption { choice } => self.choose(pack, choice, now),
            JourneyCommand::CompleteGoal { evidence, consent } => self.complete(pack, evidence, consent, now),
            JourneyCommand::StartRecall => self.start_recall(pack, now),
            JourneyCommand::ReleaseRecallAnswers { instance } => {
                match &self.state.workflow {
                    Some(Workflow::VerifiedRecall { instance: i, step: RecallStep::AwaitingAnswers, .. }) if *i == instance => {}
                    _ => return Err(self.stale_capability(instance)),
                }
                self.emit(JourneyEvent::RecallAnswersReleased { instance, at: now });
                Ok(())
            }
            JourneyCommand::RecordRecallResults { instance, passed } => self.record_recall(pack, instance, passed, now),
            JourneyCommand::StartExam => self.start_exam(pack, now),
            JourneyCommand::ReleaseExamSolutions { instance } => {
                match &self.state.workflow {
                    Some(Workflow::Exam { instance: i, step: ExamStep::AwaitingWork }) if *i == instance => {}
                    _ => return Err(self.stale_capability(instance)),
                }
                self.emit(JourneyEvent::ExamSolutionsReleased { instance, at: now });
                Ok(())
            }
            JourneyCommand::RecordExamScores { instance, points } => self.record_exam(pack, instance, points, now),
        }
    }

    /// A capability naming a step that is not the current one: used when its instance is
    /// still open past that step or finished, expired when the instance is unknown.
    fn stale_capability(&self, instance: u64) -> JourneyError {
        let open = self.state.workflow.as_ref().map(Workflow::instance);
        if open == Some(instance) || self.state.finished_workflows.contains(&instance) {
            JourneyError::CapabilityUsed
        } else {
            JourneyError::CapabilityExpired
        }
    }

    fn start(&mut self, pack: &Pack, locale: String, now: DateTime<Utc>) -> Result<(), JourneyError> {
        if self.state.info.is_some() {
            return Err(JourneyError::AlreadyStarted);
        }
        if !pack.locales.contains(&locale) {
            return Err(JourneyError::UnsupportedLocale);
        }
        self.emit(JourneyEvent::JourneyStarted {
            curriculum_id: pack.id.clone(),
            pack_version: pack.version,
            locale,
            rules: pack.rules.clone(),
            goals: pack.leaves().map(|g| g.id.clone()).collect(),
            at: now,
        });
        let frontier: Vec<String> = self.state.frontier(pack).into_iter().map(str::to_owned).collect();
        match frontier.as_slice() {
            [] => self.emit(JourneyEvent::NextStepDecided { step: NextStep::ConfirmCompletion, at: now }),
            [only] => self.emit(JourneyEvent::GoalActivated { goal_id: only.clone(), at: now }),
            many => self.emit(JourneyEvent::NextStepDecided {
                step: NextStep::ChooseGoal { goals: many.iter().take(5).cloned().collect() },
                at: now,
            }),
        }
        Ok(())
    }

    fn choose(&mut self, pack: &Pack, choice: OptionChoice, now: DateTime<Utc>) -> Result<(), JourneyError> {
        if !self.state.is_published(pack, &choice) {
            return Err(JourneyError::OptionInvalid);
        }
        match choice {
            OptionChoice::Locale { locale } => self.emit(JourneyEvent::LocaleChanged { locale, at: now }),
            OptionChoice::Autopilot { autopilot } => self.emit(JourneyEvent::AutopilotChanged { enabled: autopilot, at: now }),
            OptionChoice::Goal { goal_id } => self.emit(JourneyEvent::GoalActivated { goal_id, at: now }),
            OptionChoice::Mode { mode: Mode::Learn } => self.next_goal(pack, now),
            OptionChoice::Mode { mode: Mode::VerifiedRecall } => return self.start_recall(pack, now),
            OptionChoice::Continue => self.advance(pack, now),
        }
        Ok(())
    }

    fn complete(&mut self, pack: &Pack, evidence: Evidence, consent: Consent, now: DateTime<Utc>) -> Result<(), JourneyError> {
        let Some(goal_id) = self.state.active_goal.clone() else {
            return Err(JourneyError::NotAllowed);
        };
        if self.state.workflow.is_some() || self.state.next != NextStep::Teach {
            return Err(JourneyError::NotAllowed);
        }
        let rules = self.state.rules();
        let mastery = round2(match evidence {
            Evidence::Independent => rules.mastery_independent,
            Evidence::Guided => rules.mastery_guided,
        });
        let cards = pack.goal(&goal_id).map(|g| g.cards.iter().map(|c| c.id.clone()).collect()).unwrap_or_default();
        self.emit(JourneyEvent::GoalCompleted { goal_id, evidence, mastery, cards, at: now });
        match consent {
            Consent::CloseOnly => {
                let step = if self.has_successor(pack, now) { NextStep::AwaitContinuation } else { NextStep::ConfirmCompletion };
                self.emit(JourneyEvent::NextStepDecided { step, at: now });
            }
            Consent::CloseAndContinue => self.advance(pack, now),
        }
        Ok(())
    }

    fn recall_due(&self, pack: &Pack, now: DateTime<Utc>) -> bool {
        self.features.recall && !self.state.due_cards(pack, now).is_empty()
    }

    fn exam_offerable(&self, pack: &Pack) -> bool {
        self.features.exam && self.state.exam_offerable(pack)
    }

    fn has_successor(&self, pack: &Pack, now: DateTime<Utc>) -> bool {
        self.recall_due(pack, now) || !self.next_goals(pack).is_empty() || self.exam_offerable(pack)
    }

    fn next_goals(&self, pack: &Pack) -> Vec<String> {
        let active = self.state.active_goal.as_deref();
        self.state.frontier(pack).into_iter().filter(|g| Some(*g) != active).map(str::to_owned).collect()
    }

    /// docs/domain.md, next-step policy rule 2: what "go on" leads to.
    fn advance(&mut self, pack: &Pack, now: DateTime<Utc>) {
        let due = self.recall_due(pack, now);
        let goals = self.next_goals(pack);
        if due && !goals.is_empty() {
            let step = if self.state.autopilot { NextStep::OfferRecall } else { NextStep::ChooseMode };
            self.emit(JourneyEvent::NextStepDecided { step, at: now });
        } else if due {
            self.emit(JourneyEvent::NextStepDecided { step: NextStep::OfferRecall, at: now });
        } else if !goals.is_empty() {
            self.next_goal(pack, now);
        } else if self.exam_offerable(pack) {
            self.emit(JourneyEvent::NextStepDecided { step: NextStep::OfferExam, at: now });
        } else {
            self.emit(JourneyEvent::NextStepDecided { step: NextStep::ConfirmCompletion, at: now });
        }
    }

    /// Activate the only (or, with autopilot, the first) next goal; otherwise offer a goal choice.
    fn next_goal(&mut self, pack: &Pack, now: DateTime<Utc>) {
        let goals = self.next_goals(pack);
        match goals.as_slice() {
            [] => self.emit(JourneyEvent::NextStepDecided { step: NextStep::ConfirmCompletion, at: now }),
            [first, ..] if goals.len() == 1 || self.state.autopilot => {
                self.emit(JourneyEvent::GoalActivated { goal_id: first.clone(), at: now })
            }
            many => self.emit(JourneyEvent::NextStepDecided {
                step: NextStep::ChooseGoal { goals: many.iter().take(5).cloned().collect() },
                at: now,
            }),
        }
    }

    fn start_recall(&mut self, pack: &Pack, now: DateTime<Utc>) -> Result<(), JourneyError> {
        match &self.state.workflow {
            // Start while a batch is open returns that batch: no event.
            Some(Workflow::VerifiedRecall { .. }) => return Ok(()),
            Some(Workflow::Exam { .. }) => return Err(JourneyError::NotAllowed),
            None => {}
        }
        if self.state.next == NextStep::Teach || !self.features.recall {
            return Err(JourneyError::NotAllowed);
        }
        let mut due = self.state.due_cards(pack, now);
        if due.is_empty() {
            return Err(JourneyError::NothingDue);
        }
        due.truncate(self.state.rules().recall_batch_size);
        let instance = self.state.version + 1;
        self.emit(JourneyEvent::RecallBatchStarted { instance, cards: due, at: now });
        Ok(())
    }

    fn record_recall(&mut self, pack: &Pack, instance: u64, passed: Vec<bool>, now: DateTime<Utc>) -> Result<(), JourneyError> {
        let cards = match &self.state.workflow {
            Some(Workflow::VerifiedRecall { instance: i, cards, step: RecallStep::AnswersReleased }) if *i == instance => cards.clone(),
            _ => return Err(self.stale_capability(instance)),
        };
        if passed.len() != cards.len() {
            return Err(JourneyError::IncompleteAssessments { expected: cards.len(), got: passed.len() });
        }
        let rules = self.state.rules();
        let mut mastery: BTreeMap<String, (f64, bool)> = BTreeMap::new();
        let mut results = Vec::with_capacity(cards.len());
        for (card_id, ok) in cards.iter().zip(passed) {
            let Some((goal, _)) = pack.card(card_id) else {
                return Err(JourneyError::CapabilityExpired);
            };
            let memory = self.state.cards.get(card_id).cloned().unwrap_or(CardMemory {
                stability: None,
                difficulty: None,
                due: now,
                last_review: None,
                reviews: 0,
            });
            let memory = scheduling::review(&memory, ok, now, rules.desired_retention).ok_or(JourneyError::Scheduler)?;
            let entry = mastery.entry(goal.id.clone()).or_insert_with(|| {
                let p = self.state.goals.get(&goal.id).cloned().unwrap_or_default();
                (p.mastery, p.mastered)
            });
            entry.0 = round2(if ok { entry.0 + rules.recall_pass_gain } else { entry.0 - rules.recall_fail_loss });
            if entry.0 < rules.reteach_below {
                entry.1 = false;
            }
            results.push(RecallOutcome {
                card_id: card_id.clone(),
                goal_id: goal.id.clone(),
                passed: ok,
                memory,
                mastery: entry.0,
                mastered: entry.1,
            });
        }
        self.emit(JourneyEvent::RecallResultsRecorded { instance, results, at: now });
        // docs/domain.md, next-step policy rule 3.
        if self.recall_due(pack, now) {
            self.emit(JourneyEvent::NextStepDecided { step: NextStep::OfferNextRecallBatch, at: now });
        } else {
            self.advance(pack, now);
        }
        Ok(())
    }

    fn start_exam(&mut self, pack: &Pack, now: DateTime<Utc>) -> Result<(), JourneyError> {
        match &self.state.workflow {
            Some(Workflow::Exam { .. }) => return Ok(()),
            Some(Workflow::VerifiedRecall { .. }) => return Err(JourneyError::NotAllowed),
            None => {}
        }
        let missing = self.state.exam_missing_goals(pack);
        if missing > 0 {
            return Err(JourneyError::NotEligible { missing_goals: missing });
        }
        if self.state.exam_passed() || self.state.next == NextStep::Teach || !self.features.exam {
            return Err(JourneyError::NotAllowed);
        }
        let instance = self.state.version + 1;
        self.emit(JourneyEvent::ExamStarted { instance, at: now });
        Ok(())
    }

    fn record_exam(&mut self, pack: &Pack, instance: u64, points: Vec<f64>, now: DateTime<Utc>) -> Result<(), JourneyError> {
        match &self.state.workflow {
            Some(Workflow::Exam { instance: i, step: ExamStep::SolutionsReleased }) if *i == instance => {}
            _ => return Err(self.stale_capability(instance)),
        }
        let tasks = &pack.exam.tasks;
        if points.len() != tasks.len() {
            return Err(JourneyError::IncompleteAssessments { expected: tasks.len(), got: points.len() });
        }
        for (i, (p, task)) in points.iter().zip(tasks).enumerate() {
            if !p.is_finite() || *p < 0.0 || *p > f64::from(task.max_points) {
                return Err(JourneyError::PointsOutOfRange { position: i + 1 });
            }
        }
        let total_points = points.iter().sum::<f64>();
        let max_points = tasks.iter().map(|t| t.max_points).sum();
        let passed = total_points >= f64::from(pack.exam.pass_mark);
        self.emit(JourneyEvent::ExamScored { instance, points, total_points, max_points, passed, at: now });
        self.advance(pack, now);
        Ok(())
    }
}
