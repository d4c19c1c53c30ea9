//! Analyst projections: what each event changes in the analytic views. A pure function of
//! one event; the catch-up projector applies the changes and its position in one transaction.

use std::collections::BTreeMap;

use aggregates::learning_journey::JourneyEvent;
use serde::Serialize;

/// One change to an analytic view.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Change {
    /// A goal's mastery on a journey; `completed` counts a completion.
    GoalMastery {
        /// The journey the row belongs to.
        journey_id: String,
        /// The goal's id in its pack.
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
        /// The recall card's id.
        card_id: String,
        /// The goal the card belongs to.
        goal_id: String,
        /// Passed or not.
        passed: bool,
    },
    /// A scored exam attempt.
    ExamResult {
        /// The journey the row belongs to.
        journey_id: String,
        /// Which attempt of the journey's exam.
        instance: u64,
        /// The points reached.
        total_points: f64,
        /// The most points possible.
        max_points: u32,
        /// Whether the attempt passed.
        passed: bool,
        /// When (RFC 3339).
        at: String,
    },
    /// Activity of a UTC day.
    Daily {
        /// The day, `YYYY-MM-DD` in UTC.
        day: String,
        /// Events recorded that day.
        events: i64,
        /// Goals completed that day.
        goals_completed: i64,
        /// Recall cards assessed.
        recall_results: i64,
        /// Exams scored that day.
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

/// A goal's row in `goal_mastery`.
#[derive(Clone, Debug, PartialEq)]
pub struct GoalMasteryRow {
    /// Mastery after the last change.
    pub mastery: f64,
    /// Mastered after the last change.
    pub mastered: bool,
    /// Completions of the goal counted so far.
    pub completions: i64,
    /// Time of the last change.
    pub updated_at: String,
}

/// A card's row in `recall_outcomes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecallRow {
    /// Its goal (as first recorded).
    pub goal_id: String,
    /// Recall assessments that passed.
    pub passed: i64,
    /// Recall assessments that failed.
    pub failed: i64,
}

/// An attempt's row in `exam_results` (the first scoring of an attempt counts).
#[derive(Clone, Debug, PartialEq)]
pub struct ExamRow {
    /// The points reached.
    pub total_points: f64,
    /// The most points possible.
    pub max_points: u32,
    /// Whether the attempt passed.
    pub passed: bool,
    /// When it was scored (RFC 3339).
    pub scored_at: String,
}

/// A day's row in `daily_activity`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DailyRow {
    /// Events recorded that day.
    pub events: i64,
    /// Goals completed that day.
    pub goals_completed: i64,
    /// Recall cards assessed.
    pub recall_results: i64,
    /// Exams scored that day.
    pub exams_scored: i64,
}

/// The analytic tables folded in memory, with the same semantics as the live projector's
/// upserts: a rebuild folds the whole log here and writes each row once.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    /// (journey, goal) → row.
    pub goal_mastery: BTreeMap<(String, String), GoalMasteryRow>,
    /// card → row.
    pub recall_outcomes: BTreeMap<String, RecallRow>,
    /// (journey, attempt) → row.
    pub exam_results: BTreeMap<(String, u64), ExamRow>,
    /// day → row.
    pub daily_activity: BTreeMap<String, DailyRow>,
}

impl Tables {
    /// Applies one change.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::GoalMastery { journey_id, goal_id, mastery, mastered, completed, at } => {
                let row = self.goal_mastery.entry((journey_id, goal_id)).or_insert_with(|| GoalMasteryRow {
                    mastery,
                    mastered,
                    completions: 0,
                    updated_at: at.clone(),
                });
                *row = GoalMasteryRow { mastery, mastered, completions: row.completions + completed, updated_at: at };
            }
            Change::RecallOutcome { card_id, goal_id, passed } => {
                let row = self.recall_outcomes.entry(card_id).or_insert(RecallRow { goal_id, passed: 0, failed: 0 });
                if passed {
                    row.passed += 1;
                } else {
                    row.failed += 1;
                }
            }
            Change::ExamResult { journey_id, instance, total_points, max_points, passed, at } => {
                self.exam_results.entry((journey_id, instance)).or_insert(ExamRow { total_points, max_points, passed, scored_at: at });
            }
            Change::Daily { day, events, goals_completed, recall_results, exams_scored } => {
                let row = self.daily_activity.entry(day).or_default();
                row.events += events;
                row.goals_completed += goals_completed;
                row.recall_results += recall_results;
                row.exams_scored += exams_scored;
            }
        }
    }
}
