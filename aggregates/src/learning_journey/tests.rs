//! Given/when/then tests of the LearningJourney aggregate on the shipped pack, plus property
//! tests over random command sequences.

use std::path::Path;
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;

use cqrs_es::Aggregate;

use super::*;
use crate::curriculum::Pack;

fn shipped_pack() -> Arc<Pack> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../content/fractions");
    let json = std::fs::read_to_string(dir.join("pack.json")).unwrap();
    Arc::new(Pack::from_json("pack.json", &json, |a| std::fs::read_to_string(dir.join("assets").join(a)).ok()).unwrap())
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z").unwrap().with_timezone(&Utc)
}

struct Given {
    pack: Arc<Pack>,
    state: LearningJourney,
    now: DateTime<Utc>,
}

impl Given {
    /// Started, before the learner's wish to begin.
    fn fresh() -> Self {
        let mut g = Given { pack: shipped_pack(), state: LearningJourney::default(), now: t0() };
        g.ok(JourneyCommand::StartJourney { locale: "de".into() });
        g
    }

    /// Started and begun: the first goal is being taught.
    fn started() -> Self {
        let mut g = Self::fresh();
        g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Continue });
        g
    }

    #[track_caller]
    fn when(&self, cmd: JourneyCommand) -> Result<Vec<JourneyEvent>, JourneyError> {
        self.state.decide(cmd, &JourneyServices::new(self.pack.clone(), self.now))
    }

    #[track_caller]
    fn ok(&mut self, cmd: JourneyCommand) -> Vec<JourneyEvent> {
        let events = self.when(cmd).unwrap();
        for e in events.clone() {
            self.state.apply(e);
        }
        events
    }

    fn complete(&mut self, consent: Consent) -> Vec<JourneyEvent> {
        self.ok(JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent })
    }

    fn active(&self) -> Option<&str> {
        self.state.active_goal.as_deref()
    }
}

#[test]
fn a_begun_journey_teaches_the_only_goal_on_the_frontier() {
    let g = Given::started();
    assert_eq!(g.active(), Some("part-of-whole"));
    assert_eq!(g.state.next, NextStep::Teach);
    assert_eq!(g.state.version, 3, "started, waiting for the wish to begin, begun");
    assert_eq!(g.state.locale, "de");
}

#[test]
fn starting_twice_is_refused() {
    let g = Given::started();
    assert_eq!(g.when(JourneyCommand::StartJourney { locale: "de".into() }), Err(JourneyError::AlreadyStarted));
}

#[test]
fn completing_with_independent_evidence_masters_the_goal_at_point_eight() {
    let mut g = Given::started();
    let events = g.complete(Consent::CloseOnly);
    assert!(matches!(&events[0], JourneyEvent::GoalCompleted { mastery, .. } if *mastery == 0.8));
    assert_eq!(g.state.goals["part-of-whole"].mastery, 0.8);
    assert!(g.state.is_mastered("part-of-whole"));
}

#[test]
fn guided_evidence_gives_point_six() {
    let mut g = Given::started();
    g.ok(JourneyCommand::CompleteGoal { evidence: Evidence::Guided, consent: Consent::CloseOnly });
    assert_eq!(g.state.goals["part-of-whole"].mastery, 0.6);
}

#[test]
fn close_only_waits_for_the_learner_before_presenting_a_successor() {
    let mut g = Given::started();
    g.complete(Consent::CloseOnly);
    assert_eq!(g.state.next, NextStep::AwaitContinuation);
    assert_eq!(g.active(), None);
    assert_eq!(g.state.decision_options(), vec![OptionChoice::Continue]);
}

#[test]
fn the_cards_of_a_just_mastered_goal_are_due_at_once() {
    let mut g = Given::started();
    g.complete(Consent::CloseOnly);
    assert_eq!(g.state.due_cards(&g.pack, g.now), vec!["pow-1", "pow-2", "pow-3"]);
}

#[test]
fn due_recall_and_next_goals_become_a_mode_choice_without_autopilot() {
    let mut g = Given::started();
    g.complete(Consent::CloseAndContinue);
    assert_eq!(g.state.next, NextStep::ChooseMode);
    assert_eq!(g.active(), None);
}

#[test]
fn with_autopilot_recall_comes_first() {
    let mut g = Given::started();
    g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Autopilot { autopilot: true } });
    g.complete(Consent::CloseAndContinue);
    assert_eq!(g.state.next, NextStep::OfferRecall);
}

#[test]
fn choosing_learn_with_several_next_goals_offers_a_goal_choice_in_curriculum_order() {
    let mut g = Given::started();
    g.complete(Consent::CloseAndContinue);
    g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::Learn } });
    assert_eq!(g.state.next, NextStep::ChooseGoal { goals: vec!["number-line".into(), "equivalent".into()] });
    g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Goal { goal_id: "equivalent".into() } });
    assert_eq!(g.active(), Some("equivalent"));
}

#[test]
fn an_option_that_is_not_published_is_refused() {
    let g = Given::started();
    let invented = OptionChoice::Goal { goal_id: "divide".into() };
    assert_eq!(g.when(JourneyCommand::ChooseOption { choice: invented }), Err(JourneyError::OptionInvalid));
    let same_locale = OptionChoice::Locale { locale: "de".into() };
    assert_eq!(g.when(JourneyCommand::ChooseOption { choice: same_locale }), Err(JourneyError::OptionInvalid));
}

#[test]
fn the_locale_option_changes_the_locale_but_not_the_step() {
    let mut g = Given::started();
    g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Locale { locale: "en".into() } });
    assert_eq!(g.state.locale, "en");
    assert_eq!(g.state.next, NextStep::Teach);
}

#[test]
fn completing_without_an_active_goal_is_not_allowed() {
    let mut g = Given::started();
    g.complete(Consent::CloseOnly);
    assert_eq!(
        g.when(JourneyCommand::CompleteGoal { evidence: Evidence::Guided, consent: Consent::CloseOnly }),
        Err(JourneyError::NotAllowed)
    );
}

#[test]
fn verified_recall_runs_start_release_record_and_moves_mastery() {
    let mut g = Given::started();
    g.complete(Consent::CloseAndContinue);
    let events = g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::VerifiedRecall } });
    let instance = match &events[0] {
        JourneyEvent::RecallBatchStarted { instance, cards, .. } => {
            assert_eq!(cards.len(), 3);
            *instance
        }
        other => panic!("unexpected {other:?}"),
    };
    // Start again while open: the same batch, no event.
    assert_eq!(g.when(JourneyCommand::StartRecall), Ok(vec![]));
    // Recording before release uses a capability of the wrong step.
    assert_eq!(g.when(JourneyCommand::RecordRecallResults { instance, passed: vec![true; 3] }), Err(JourneyError::CapabilityUsed));
    g.ok(JourneyCommand::ReleaseRecallAnswers { instance });
    assert_eq!(
        g.when(JourneyCommand::RecordRecallResults { instance, passed: vec![true; 2] }),
        Err(JourneyError::IncompleteAssessments { expected: 3, got: 2 })
    );
    g.ok(JourneyCommand::RecordRecallResults { instance, passed: vec![true, true, false] });
    // 0.8 + 0.1 + 0.1 - 0.2
    assert_eq!(g.state.goals["part-of-whole"].mastery, 0.8);
    assert!(g.state.workflow.is_none());
    assert!(g.state.due_cards(&g.pack, g.now).is_empty());
    // No more due cards: go on as if the learner consented — several next goals → goal choice.
    assert!(matches!(g.state.next, NextStep::ChooseGoal { .. }));
    assert_eq!(g.when(JourneyCommand::ReleaseRecallAnswers { instance }), Err(JourneyError::CapabilityUsed));
    assert_eq!(g.when(JourneyCommand::ReleaseRecallAnswers { instance: 999 }), Err(JourneyError::CapabilityExpired));
}

#[test]
fn failed_recall_below_the_threshold_reopens_the_goal_for_teaching() {
    let mut g = Given::started();
    g.ok(JourneyCommand::CompleteGoal { evidence: Evidence::Guided, consent: Consent::CloseAndContinue });
    let events = g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::VerifiedRecall } });
    let JourneyEvent::RecallBatchStarted { instance, .. } = events[0] else { panic!() };
    g.ok(JourneyCommand::ReleaseRecallAnswers { instance });
    g.ok(JourneyCommand::RecordRecallResults { instance, passed: vec![false, false, false] });
    assert_eq!(g.state.goals["part-of-whole"].mastery, 0.0);
    assert!(!g.state.is_mastered("part-of-whole"));
    assert_eq!(g.state.frontier(&g.pack), vec!["part-of-whole"]);
    // The only frontier goal is activated again.
    assert_eq!(g.active(), Some("part-of-whole"));
}

#[test]
fn the_exam_is_not_released_before_its_scope_is_mastered() {
    let mut g = Given::started();
    g.complete(Consent::CloseOnly);
    assert_eq!(g.when(JourneyCommand::StartExam), Err(JourneyError::NotEligible { missing_goals: 12 }));
}

/// Masters every goal by always continuing and recalling everything as passed.
fn master_everything(g: &mut Given) {
    for _ in 0..200 {
        if let Some(Workflow::VerifiedRecall { instance, cards, step }) = g.state.workflow.clone() {
            match step {
                RecallStep::AwaitingAnswers => g.ok(JourneyCommand::ReleaseRecallAnswers { instance }),
                RecallStep::AnswersReleased => g.ok(JourneyCommand::RecordRecallResults { instance, passed: vec![true; cards.len()] }),
            };
            continue;
        }
        match g.state.next.clone() {
            NextStep::Teach => g.complete(Consent::CloseAndContinue),
            NextStep::ChooseGoal { goals } => {
                g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Goal { goal_id: goals[0].clone() } })
            }
            NextStep::ChooseMode => g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::Learn } }),
            NextStep::OfferRecall | NextStep::OfferNextRecallBatch => g.ok(JourneyCommand::StartRecall),
            NextStep::AwaitContinuation => g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Continue }),
            NextStep::OfferExam | NextStep::ConfirmCompletion | NextStep::None => return,
        };
    }
    panic!("did not finish");
}

#[test]
fn an_exam_after_everything_is_mastered_is_scored_by_the_backend() {
    let mut g = Given::started();
    master_everything(&mut g);
    assert_eq!(g.state.next, NextStep::OfferExam);
    let events = g.ok(JourneyCommand::StartExam);
    let JourneyEvent::ExamStarted { instance, .. } = events[0] else { panic!() };
    g.ok(JourneyCommand::ReleaseExamSolutions { instance });
    assert_eq!(
        g.when(JourneyCommand::RecordExamScores { instance, points: vec![4.0, 4.0, 4.0, 4.0, 5.0] }),
        Err(JourneyError::PointsOutOfRange { position: 5 })
    );
    assert_eq!(
        g.when(JourneyCommand::RecordExamScores { instance, points: vec![4.0] }),
        Err(JourneyError::IncompleteAssessments { expected: 5, got: 1 })
    );
    let events = g.ok(JourneyCommand::RecordExamScores { instance, points: vec![1.0, 2.0, 3.0, 2.0, 1.0] });
    assert!(matches!(&events[0], JourneyEvent::ExamScored { total_points, passed: false, max_points: 20, .. } if *total_points == 9.0));
    // A failed attempt may be retaken.
    assert_eq!(g.state.next, NextStep::OfferExam);
    let events = g.ok(JourneyCommand::StartExam);
    let JourneyEvent::ExamStarted { instance, .. } = events[0] else { panic!() };
    g.ok(JourneyCommand::ReleaseExamSolutions { instance });
    g.ok(JourneyCommand::RecordExamScores { instance, points: vec![4.0, 3.0, 2.5, 4.0, 0.5] });
    assert!(g.state.exam_passed());
    assert_eq!(g.state.exam_attempts.len(), 2);
    assert_eq!(g.state.next, NextStep::ConfirmCompletion);
}

#[test]
fn the_plan_counts_completions_in_the_learners_day() {
    let mut g = Given::started();
    g.complete(Consent::CloseOnly);
    let counts = crate::plan::plan_counts(&g.state, g.now, chrono_tz::Tz::Europe__Berlin);
    assert_eq!((counts.today_done, counts.today_target, counts.week_done, counts.week_target), (1, 2, 1, 8));
    let tomorrow = crate::plan::plan_counts(&g.state, g.now + Duration::days(1), chrono_tz::Tz::Europe__Berlin);
    assert_eq!((tomorrow.today_done, tomorrow.week_done), (0, 1));
}

/// A command picked by index from what a coach could send, with random judgements.
#[derive(Clone, Debug)]
enum Pick {
    Complete(bool, bool),
    Choose(usize),
    StartRecall,
    Release,
    Record(Vec<bool>),
    StartExam,
    ReleaseExam,
    Score(Vec<u8>),
    Wait(u32),
}

fn pick() -> impl Strategy<Value = Pick> {
    prop_oneof![
        4 => (any::<bool>(), any::<bool>()).prop_map(|(a, b)| Pick::Complete(a, b)),
        3 => (0usize..8).prop_map(Pick::Choose),
        1 => Just(Pick::StartRecall),
        1 => Just(Pick::Release),
        1 => proptest::collection::vec(any::<bool>(), 0..6).prop_map(Pick::Record),
        1 => Just(Pick::StartExam),
        1 => Just(Pick::ReleaseExam),
        1 => proptest::collection::vec(0u8..6, 0..6).prop_map(Pick::Score),
        1 => (0u32..200).prop_map(Pick::Wait),
    ]
}

fn to_command(state: &LearningJourney, pack: &Pack, p: &Pick) -> Option<JourneyCommand> {
    let instance = state.workflow.as_ref().map(Workflow::instance).unwrap_or(1);
    Some(match p {
        Pick::Complete(ind, cont) => JourneyCommand::CompleteGoal {
            evidence: if *ind { Evidence::Independent } else { Evidence::Guided },
            consent: if *cont { Consent::CloseAndContinue } else { Consent::CloseOnly },
        },
        Pick::Choose(i) => {
            let mut all = state.decision_options();
            all.extend(state.setting_options(pack));
            JourneyCommand::ChooseOption { choice: all.get(*i % all.len().max(1))?.clone() }
        }
        Pick::StartRecall => JourneyCommand::StartRecall,
        Pick::Release => JourneyCommand::ReleaseRecallAnswers { instance },
        Pick::Record(v) => JourneyCommand::RecordRecallResults { instance, passed: v.clone() },
        Pick::StartExam => JourneyCommand::StartExam,
        Pick::ReleaseExam => JourneyCommand::ReleaseExamSolutions { instance },
        Pick::Score(v) => JourneyCommand::RecordExamScores { instance, points: v.iter().map(|x| f64::from(*x)).collect() },
        Pick::Wait(_) => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_command_sequence_keeps_the_invariants_and_replays_to_the_same_state(picks in proptest::collection::vec(pick(), 1..120)) {
        let mut g = Given::fresh();
        let mut log: Vec<JourneyEvent> = Vec::new();
        // The start events belong to the log too.
        let mut fresh = LearningJourney::default();
        let start = fresh.decide(JourneyCommand::StartJourney { locale: "de".into() }, &JourneyServices::new(g.pack.clone(), t0())).unwrap();
        for e in &start { fresh.apply(e.clone()); }
        log.extend(start);
        prop_assert_eq!(&fresh, &g.state);

        for p in &picks {
            if let Pick::Wait(hours) = p {
                g.now += Duration::hours(i64::from(*hours));
                continue;
            }
            let Some(cmd) = to_command(&g.state, &g.pack, p) else { continue };
            let before = g.state.clone();
            match g.when(cmd) {
                Ok(events) => {
                    for e in &events { g.state.apply(e.clone()); }
                    log.extend(events);
                }
                Err(_) => prop_assert_eq!(&before, &g.state),
            }
            for (id, progress) in &g.state.goals {
                prop_assert!((0.0..=1.0).contains(&progress.mastery), "mastery of {} is {}", id, progress.mastery);
            }
            for goal in g.state.frontier(&g.pack) {
                for pre in g.pack.prerequisite_leaves(goal) {
                    prop_assert!(g.state.is_mastered(pre), "{} on the frontier before {}", goal, pre);
                }
            }
            prop_assert_eq!(g.state.version as usize, log.len());
        }
        let mut replayed = LearningJourney::default();
        for e in log.clone() {
            // Through JSON, as the store does.
            let json = serde_json::to_value(&e).unwrap();
            replayed.apply(serde_json::from_value(json).unwrap());
        }
        prop_assert_eq!(replayed, g.state);
    }
}

#[test]
fn without_reachable_recall_the_policy_never_offers_it() {
    let mut g = Given::started();
    let svc = JourneyServices { pack: g.pack.clone(), now: g.now, features: Features { recall: false, exam: true, picture: true } };
    let events =
        g.state.decide(JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseAndContinue }, &svc).unwrap();
    for e in events {
        g.state.apply(e);
    }
    // Due cards exist, but recall is unreachable: straight to the goal choice, no mode choice.
    assert!(matches!(g.state.next, NextStep::ChooseGoal { .. }), "{:?}", g.state.next);
    assert_eq!(g.state.decide(JourneyCommand::StartRecall, &svc), Err(JourneyError::NotAllowed));
}

fn focus_on(area: Option<&str>) -> JourneyCommand {
    JourneyCommand::ChooseOption { choice: OptionChoice::Focus { goal_id: area.map(str::to_owned) } }
}

/// Run the recall the journey offers, every card passed, until it offers something else.
fn run_recall(g: &mut Given) {
    for _ in 0..50 {
        match g.state.workflow.clone() {
            Some(Workflow::VerifiedRecall { instance, step: RecallStep::AwaitingAnswers, .. }) => {
                g.ok(JourneyCommand::ReleaseRecallAnswers { instance });
            }
            Some(Workflow::VerifiedRecall { instance, cards, step: RecallStep::AnswersReleased }) => {
                g.ok(JourneyCommand::RecordRecallResults { instance, passed: vec![true; cards.len()] });
            }
            _ if matches!(g.state.next, NextStep::OfferRecall | NextStep::OfferNextRecallBatch) => {
                g.ok(JourneyCommand::StartRecall);
            }
            _ => return,
        }
    }
}

/// Master the active goal and every goal after it (autopilot: first in curriculum order, recall
/// passed) until `n` goals are mastered; the last completion waits for the learner.
fn master_in_order(g: &mut Given, n: usize) {
    if !g.state.autopilot {
        g.ok(JourneyCommand::ChooseOption { choice: OptionChoice::Autopilot { autopilot: true } });
    }
    for _ in 0..200 {
        let mastered = g.state.goals.values().filter(|p| p.mastered).count();
        run_recall(g);
        if g.state.next == NextStep::Teach {
            g.complete(if mastered + 1 == n { Consent::CloseOnly } else { Consent::CloseAndContinue });
        } else {
            break;
        }
    }
    assert_eq!(g.state.goals.values().filter(|p| p.mastered).count(), n);
}

#[test]
fn focus_choices_are_published_per_area_only_while_nothing_is_taught_or_checked() {
    let mut g = Given::started();
    let focus = |g: &Given| g.state.setting_options(&g.pack).into_iter().filter(|c| matches!(c, OptionChoice::Focus { .. })).count();
    assert_eq!(g.state.next, NextStep::Teach);
    assert_eq!(focus(&g), 0, "not while a goal is taught");
    assert_eq!(g.when(focus_on(Some("comparing"))), Err(JourneyError::OptionInvalid));
    g.complete(Consent::CloseOnly);
    // Three top-level areas, no focus yet: one choice each, no "whole curriculum".
    let areas: Vec<_> = g.state.setting_options(&g.pack).into_iter().filter(|c| matches!(c, OptionChoice::Focus { .. })).collect();
    assert_eq!(
        areas,
        ["basics", "comparing", "operations"].map(|a| OptionChoice::Focus { goal_id: Some(a.into()) }).to_vec(),
        "one per top-level area"
    );
    g.ok(focus_on(Some("comparing")));
    let after = g.state.setting_options(&g.pack);
    assert!(after.contains(&OptionChoice::Focus { goal_id: None }), "the whole curriculum comes back as a choice");
    assert!(!after.contains(&OptionChoice::Focus { goal_id: Some("comparing".into()) }), "not the focus it has");
    // A goal of another area is no focus area; the tokens are checked against what is published.
    assert_eq!(g.when(focus_on(Some("number-line"))), Err(JourneyError::OptionInvalid));
}

#[test]
fn a_focus_limits_the_frontier_to_its_area_and_what_the_area_builds_on() {
    let mut g = Given::started();
    master_in_order(&mut g, 5); // part-of-whole, number-line, equivalent, simplify, compare-same-denominator
    let unfocused = g.state.frontier(&g.pack).into_iter().map(str::to_owned).collect::<Vec<_>>();
    assert!(
        unfocused.contains(&"add-same-denominator".to_owned()) && unfocused.contains(&"common-denominator".to_owned()),
        "{unfocused:?}"
    );
    let events = g.ok(focus_on(Some("comparing")));
    assert!(matches!(events[0], JourneyEvent::FocusChanged { goal_id: Some(ref a), .. } if a == "comparing"));
    assert_eq!(g.state.focus.as_deref(), Some("comparing"));
    assert_eq!(g.state.frontier(&g.pack), vec!["common-denominator"], "operations' goals are out of the comparing focus");
    assert_eq!(g.state.focus_progress(&g.pack), Some((5, 7)), "comparing's three goals and the four basics they build on");
    // The choice is a wish to go on there: compare-same-denominator's cards are due (it was just
    // mastered) and autopilot is on, so recall comes first; then the one goal of the focus.
    assert_eq!(g.state.next, NextStep::OfferRecall);
    run_recall(&mut g);
    assert_eq!(g.active(), Some("common-denominator"));
    // A focus on a later area teaches what it builds on first.
    let mut h = Given::started();
    h.complete(Consent::CloseOnly);
    h.ok(focus_on(Some("operations")));
    let frontier = h.state.frontier(&h.pack);
    assert!(frontier.iter().all(|goal| h.state.focus_scope(&h.pack).unwrap().contains(goal)));
    assert!(frontier.contains(&"number-line"), "operations builds on the number line: {frontier:?}");
}

#[test]
fn a_focus_limits_recall_to_its_cards_and_ends_in_completion_of_the_focus() {
    let mut g = Given::started();
    master_in_order(&mut g, 5);
    g.now += Duration::days(90);
    assert_eq!(g.state.due_cards(&g.pack, g.now).len(), 15, "every card of the five goals fell due");
    g.ok(focus_on(Some("basics")));
    let due = g.state.due_cards(&g.pack, g.now);
    assert_eq!(due.len(), 12, "only the basics' cards: {due:?}");
    assert!(due.iter().all(|c| g.pack.card(c).is_some_and(|(goal, _)| g.pack.is_within(&goal.id, "basics"))));
    // Nothing left to learn in the focus, cards due: the recall is offered, and holds basics only.
    assert_eq!(g.state.next, NextStep::OfferRecall);
    run_recall(&mut g);
    assert!(g.state.due_cards(&g.pack, g.now).is_empty());
    // The focus is done and the exam (scope: all three areas) is not released: completion of the
    // focus is confirmed, not the exam offered.
    assert_eq!(g.state.next, NextStep::ConfirmCompletion);
    assert!(!g.state.exam_released(&g.pack));
    // The whole curriculum again: compare-same-denominator's cards are due once more and next
    // goals exist; autopilot puts recall first.
    g.ok(focus_on(None));
    assert_eq!(g.state.focus, None);
    assert_eq!(g.state.due_cards(&g.pack, g.now).len(), 3);
    assert_eq!(g.state.next, NextStep::OfferRecall);
    assert!(!g.state.frontier(&g.pack).is_empty());
}

#[test]
fn a_first_goal_with_a_picture_waits_for_the_wish_to_begin_and_one_without_is_taught_at_once() {
    let g = Given::fresh();
    assert_eq!(g.state.next, NextStep::AwaitContinuation, "part-of-whole has a picture");
    assert_eq!(g.state.active_goal, None, "nothing is presented before the learner wants to begin");
    assert_eq!(g.state.decision_options(), vec![OptionChoice::Continue]);
    let begun = g.when(JourneyCommand::ChooseOption { choice: OptionChoice::Continue }).unwrap();
    assert!(matches!(&begun[..], [JourneyEvent::GoalActivated { goal_id, .. }] if goal_id == "part-of-whole"), "{begun:?}");
    // Without the renderer there is no picture to offer: the first goal is taught at once.
    let svc = JourneyServices { pack: g.pack.clone(), now: g.now, features: Features { picture: false, ..Features::default() } };
    let events = LearningJourney::default().decide(JourneyCommand::StartJourney { locale: "de".into() }, &svc).unwrap();
    assert!(matches!(&events[1], JourneyEvent::GoalActivated { goal_id, .. } if goal_id == "part-of-whole"), "{events:?}");
    // Nor when the first goal has no picture.
    let mut pack = (*g.pack).clone();
    pack.goals.iter_mut().for_each(|goal| goal.visualization = None);
    let svc = JourneyServices::new(Arc::new(pack), g.now);
    let events = LearningJourney::default().decide(JourneyCommand::StartJourney { locale: "de".into() }, &svc).unwrap();
    assert!(matches!(&events[1], JourneyEvent::GoalActivated { .. }), "{events:?}");
}
