//! Plan status (R-3e): goals completed today and this week against the targets. "Today" and
//! "this week" (ISO, Monday first) are the learner's, in the time zone given at session start.

use chrono::{DateTime, Datelike, Utc};
use chrono_tz::Tz;

use crate::learning_journey::LearningJourney;

/// Counts behind the plan status line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlanCounts {
    /// Goals completed today.
    pub today_done: u32,
    /// Goals to complete per day.
    pub today_target: u32,
    /// Goals completed this week.
    pub week_done: u32,
    /// Goals to complete per week.
    pub week_target: u32,
}

/// The plan counts of a journey at `now` in `tz`.
pub fn plan_counts(journey: &LearningJourney, now: DateTime<Utc>, tz: Tz) -> PlanCounts {
    let rules = journey.rules();
    let local_now = now.with_timezone(&tz);
    let today = local_now.date_naive();
    let week = local_now.iso_week();
    let mut today_done = 0;
    let mut week_done = 0;
    for at in &journey.completions {
        let local = at.with_timezone(&tz);
        if local.date_naive() == today {
            today_done += 1;
        }
        if local.iso_week() == week {
            week_done += 1;
        }
    }
    PlanCounts { today_done, today_target: rules.daily_target, week_done, week_target: rules.weekly_target }
}
