//! Tests of the full-context fold: its shape at each step and its purity.

use std::path::Path;
use std::sync::Arc;

use aggregates::curriculum::Pack;
use aggregates::learning_journey::{Consent, Evidence, JourneyCommand, JourneyServices, LearningJourney, Mode, OptionChoice};
use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use proptest::prelude::*;

use crate::full_context::{full_context, persisted_view, CapabilityStep, ContextInput, RequiredAction, Sealer};

struct Plain;
impl Sealer for Plain {
    fn seal_option(&self, v: u64, choice: &OptionChoice) -> String {
        format!("opt:{v}:{}", serde_json::to_string(choice).unwrap())
    }
    fn seal_capability(&self, instance: u64, step: CapabilityStep, v: u64) -> String {
        format!("cap:{instance}:{step:?}:{v}")
    }
}

fn pack() -> Arc<Pack> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../content/fractions");
    let json = std::fs::read_to_string(dir.join("pack.json")).unwrap();
    Arc::new(Pack::from_json("pack.json", &json, |a| std::fs::read_to_string(dir.join("assets").join(a)).ok()).unwrap())
}

fn t0() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T09:00:00Z").unwrap().with_timezone(&Utc)
}

/// Started, begun (the learner's wish to begin), then `cmds`.
fn run(pack: &Arc<Pack>, cmds: Vec<JourneyCommand>) -> LearningJourney {
    let begin = [JourneyCommand::StartJourney { locale: "de".into() }, JourneyCommand::ChooseOption { choice: OptionChoice::Continue }];
    let mut s = LearningJourney::default();
    for c in begin.into_iter().chain(cmds) {
        for e in s.decide(c, &JourneyServices::new(pack.clone(), t0())).unwrap() {
            s.apply(e);
        }
    }
    s
}

fn ctx(pack: &Pack, state: &LearningJourney) -> serde_json::Value {
    serde_json::to_value(full_context(&ContextInput { state, pack, now: t0(), tz: chrono_tz::UTC, recall: true }, &Plain)).unwrap()
}

#[test]
fn a_fresh_journey_presents_nothing_before_the_wish_to_begin() {
    let pack = pack();
    let mut s = LearningJourney::default();
    for e in s.decide(JourneyCommand::StartJourney { locale: "de".into() }, &JourneyServices::new(pack.clone(), t0())).unwrap() {
        s.apply(e);
    }
    let c = ctx(&pack, &s);
    assert_eq!(c["requiredAction"], "awaitLearnerContinuation");
    assert!(c.get("activeGoal").is_none());
    assert_eq!(c["options"][0]["kind"], "continue");
    assert_eq!(c["options"].as_array().unwrap().len(), 1);
}

#[test]
fn a_focus_shows_its_title_and_counts_but_no_goal_id() {
    let pack = pack();
    let s = run(
        &pack,
        vec![
            JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseOnly },
            JourneyCommand::ChooseOption { choice: OptionChoice::Focus { goal_id: Some("basics".into()) } },
        ],
    );
    let c = ctx(&pack, &s);
    assert_eq!(c["progress"]["focus"], serde_json::json!({"title": "Grundlagen der Brüche", "mastered": 1, "total": 4}));
    let focus: Vec<_> = c["settings"]["options"].as_array().unwrap().iter().filter(|o| o["kind"] == "focus").collect();
    assert_eq!(focus.len(), 3, "the two other areas and the whole curriculum: {c}");
    assert!(!c.to_string().contains("\"basics\""), "goal ids never reach the model: {c}");
}

#[test]
fn a_begun_journey_teaches_its_first_goal_in_german() {
    let pack = pack();
    let c = ctx(&pack, &run(&pack, vec![]));
    assert_eq!(c["requiredAction"], "teachActiveGoal");
    assert_eq!(c["communicationLocale"], "de");
    assert_eq!(c["activeGoal"]["title"], "Was ein Bruch bedeutet");
    assert_eq!(c["progress"], serde_json::json!({"mastered": 0, "total": 13}));
    assert!(c.get("options").is_none(), "no decision options while teaching");
    assert_eq!(c["settings"]["options"][0]["kind"], "locale");
    assert_eq!(c["settings"]["options"][1]["kind"], "autopilot");
    assert!(c["settings"]["options"][0]["payload"]["optionToken"].is_string());
    // Goal ids never reach the model.
    assert!(!c.to_string().contains("part-of-whole"));
}

#[test]
fn a_mode_choice_publishes_two_mode_options_and_no_successor_content() {
    let pack = pack();
    let s = run(&pack, vec![JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseAndContinue }]);
    let c = ctx(&pack, &s);
    assert_eq!(c["requiredAction"], "chooseOption");
    assert_eq!(c["options"].as_array().unwrap().len(), 2);
    assert_eq!(c["options"][1]["mode"], "verifiedRecall");
    assert!(c.get("activeGoal").is_none());
    assert_eq!(c["recall"]["dueCards"], 3);
    assert_eq!(c["planStatus"]["today"], serde_json::json!({"done": 1, "target": 2}));
}

#[test]
fn an_open_batch_republishes_its_questions_and_current_capability() {
    let pack = pack();
    let s = run(
        &pack,
        vec![
            JourneyCommand::CompleteGoal { evidence: Evidence::Independent, consent: Consent::CloseAndContinue },
            JourneyCommand::ChooseOption { choice: OptionChoice::Mode { mode: Mode::VerifiedRecall } },
        ],
    );
    let c = ctx(&pack, &s);
    assert_eq!(c["requiredAction"], "answerVerifiedRecall");
    let w = &c["openWorkflow"];
    assert_eq!(w["step"], "awaitingAnswers");
    assert_eq!(w["questions"].as_array().unwrap().len(), 3);
    assert!(w["batchCapability"].is_string());
    assert!(w.get("answers").is_none(), "answers are not released yet");
    assert!(w.get("gradingCapability").is_none());
}

#[test]
fn the_required_action_follows_the_locale_choice_into_english() {
    let pack = pack();
    let s = run(&pack, vec![JourneyCommand::ChooseOption { choice: OptionChoice::Locale { locale: "en".into() } }]);
    let c = ctx(&pack, &s);
    assert_eq!(c["communicationLocale"], "en");
    assert_eq!(c["activeGoal"]["title"], "What a fraction means");
    assert!(c["instruction"].as_str().unwrap().starts_with("Teach"));
    assert_eq!(crate::full_context::required_action(&s), RequiredAction::TeachActiveGoal);
}

#[test]
fn the_persisted_view_leaves_out_time_and_tokens() {
    let pack = pack();
    let s = run(&pack, vec![]);
    let v = persisted_view(&full_context(&ContextInput { state: &s, pack: &pack, now: t0(), tz: chrono_tz::UTC, recall: true }, &Plain));
    assert!(v.get("recall").is_none() && v.get("planStatus").is_none());
    assert!(v["settings"]["options"][0].get("payload").is_none());
    let later = persisted_view(&full_context(
        &ContextInput { state: &s, pack: &pack, now: t0() + Duration::days(9), tz: chrono_tz::Tz::Asia__Tokyo, recall: true },
        &Plain,
    ));
    assert_eq!(v, later);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]
    #[test]
    fn the_full_context_is_a_pure_function_of_its_inputs(hours in 0i64..2000, independent in any::<bool>(), tz_pick in 0usize..3) {
        let pack = pack();
        let evidence = if independent { Evidence::Independent } else { Evidence::Guided };
        let s = run(&pack, vec![JourneyCommand::CompleteGoal { evidence, consent: Consent::CloseAndContinue }]);
        let tz = [chrono_tz::UTC, chrono_tz::Tz::Europe__Berlin, chrono_tz::Tz::America__New_York][tz_pick];
        let now = t0() + Duration::hours(hours);
        let a = full_context(&ContextInput { state: &s, pack: &pack, now, tz, recall: true }, &Plain);
        let b = full_context(&ContextInput { state: &s.clone(), pack: &pack.as_ref().clone(), now, tz, recall: true }, &Plain);
        prop_assert_eq!(a, b);
    }
}
