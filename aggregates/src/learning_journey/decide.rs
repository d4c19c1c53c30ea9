//! How the journey decides: `Aggregate::handle` and one decision per command, each returning
//! the events it produces. Decisions apply their events to a scratch copy as they go, so later
//! rules see earlier effects; nothing here reads a clock or does I/O.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use cqrs_es::event_sink::EventSink;
use cqrs_es::Aggregate;

use super::*;
use crate::curriculum::Pack;
use crate::scheduling;

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
        self.evolve(event);
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
        let pictured = |goal: &str| self.features.picture && pack.goal(goal).is_some_and(|g| g.visualization.is_some());
        match frontier.as_slice() {
            [] => self.emit(JourneyEvent::NextStepDecided { step: NextStep::ConfirmCompletion, at: now }),
            // Contract: the first goal's picture is offered like every successor's — the learner's
            // wish to begin (the `continue` option) activates the goal, and that result carries
            // the render call. Without a picture the first goal is taught at once.
            [only] if pictured(only) => self.emit(JourneyEvent::NextStepDecided { step: NextStep::AwaitContinuation, at: now }),
            [only] => self.emit(JourneyEvent::GoalActivated { goal_id: only.clone(), at: now }),
            many => self.emit(JourneyEvent::NextStepDecided {
                step: NextStep::ChooseGoal { goals: many.iter().take(5).cloned().collect() },
                at: now,
            }),
        }
        Ok(())
    }

    fn choose(&mut self, pack: &Pack, choice: OptionChoice, now: DateTime<Utc>) -> Result<(), JourneyError> {
        if !self.state.is_published(pack, &choice, now, self.features.recall) {
            return Err(JourneyError::OptionInvalid);
        }
        match choice {
            OptionChoice::Locale { locale } => self.emit(JourneyEvent::LocaleChanged { locale, at: now }),
            OptionChoice::Autopilot { autopilot } => self.emit(JourneyEvent::AutopilotChanged { enabled: autopilot, at: now }),
            OptionChoice::Goal { goal_id } => self.emit(JourneyEvent::GoalActivated { goal_id, at: now }),
            OptionChoice::Mode { mode: Mode::Learn } => self.next_goal(pack, now),
            OptionChoice::Mode { mode: Mode::VerifiedRecall } => return self.start_recall(pack, now),
            OptionChoice::Continue => self.advance(pack, now),
            // Choosing a focus is a wish to learn there: the next step is decided inside it.
            OptionChoice::Focus { goal_id } => {
                self.emit(JourneyEvent::FocusChanged { goal_id, at: now });
                self.advance(pack, now);
            }
            OptionChoice::DeclineExam => self.emit(JourneyEvent::NextStepDecided { step: NextStep::ConfirmCompletion, at: now }),
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
