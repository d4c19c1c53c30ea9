//! Analyst projections: what each event changes in the analytic views. A pure function of
//! one event; the catch-up projector applies the changes and its position in one transaction.

use aggregates::learning_journey::JourneyEvent;
use serde::Serialize;

/// One change to an analytic view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Change {
    /// A goal's mastery on a journey; `completed` counts a completion.
    GoalMastery {
        /// Journey.
        journey_id: String,
        /// Goal.
        goal_id: String,
        /// Mastery after the event.
        mastery: f64,
        /// Whether mastered after the event.
        mastered: bool,
        /// 1 for a completion, else 0.
        completed: i64,
        /// When (RFC 3339).
        at: String,
    },
    /// One assessed recall card.
    RecallOutcome {
        /// Card.
        card_id: String,
        /// Its goal.
        goal_id: String,
        /// Passed or not.
        passed: bool,
    },
    /// A scored exam attempt.
    ExamResult {
        /// Journey.
        journey_id: String,
        /// Attempt instance.
        instance: u64,
        /// Total.
        total_points: f64,
        /// Maximum.
        max_points: u32,
        /// Passed.
        passed: bool,
        /// When (RFC 3339).
        at: String,
    },
    /// Activity of a UTC day.
    Daily {
        /// `YYYY-MM-DD` (UTC).
        day: String,
        /// Events.
        events: i64,
        /// Goals completed.
        goals_completed: i64,
        /// Recall cards assessed.
        recall_results: i64,
        /// Exams scored.
        exams_scored: i64,
    },
}

/// The changes one event makes.
pub fn changes(journey_id: &str, event: &JourneyEvent) -> Vec<Change> {
    let at = event.at();
    let stamp = at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let day = at.format("%Y-%m-%d").to_string();
    let mut out = Vec::new();
    let mut daily = Change::Daily { day, events: 1, goals_completed: 0, recall_results: 0, exams_scored: 0 };
    match event {
        JourneyEvent::GoalCompleted { goal_id, mastery, .. } => {
            out.push(Change::GoalMastery {
                journey_id: journey_id.to_owned(),
                goal_id: goal_id.clone(),
                mastery: *mastery,
                mastered: true,
                completed: 1,
                at: stamp,
            });
            if let Change::Daily { goals_completed, .. } = &mut daily {
                *goals_completed = 1;
            }
        }
        JourneyEvent::RecallResultsRecorded { results, .. } => {
            for r in results {
                out.push(Change::GoalMastery {
                    journey_id: journey_id.to_owned(),
                    goal_id: r.goal_id.clone(),
                    mastery: r.mastery,
                    mastered: r.mastered,
                    completed: 0,
                    at: stamp.clone(),
                });
                out.push(Change::RecallOutcome { card_id: r.card_id.clone(), goal_id: r.goal_id.clone(), passed: r.passed });
            }
            if let Change::Daily { recall_results, .. } = &mut daily {
                *recall_results = i64::try_from(results.len()).unwrap_or(i64::MAX);
            }
        }
        JourneyEvent::ExamScored { instance, total_points, max_points, passed, .. } => {
            out.push(Change::ExamResult {
                journey_id: journey_id.to_owned(),
                instance: *instance,
                total_points: *total_points,
                max_points: *max_points,
                passed: *passed,
                at: stamp,
            });
            if let Change::Daily { exams_scored, .. } = &mut daily {
                *exams_scored = 1;
            }
        }
        _ => {}
    }
    out.push(daily);
    out
}
