//! Recall scheduling with FSRS (the `fsrs` crate, the scheduler Anki uses): a passed card is
//! rated Good, a failed one Again. Pure: the caller passes the time; days elapsed are whole days.

use chrono::{DateTime, Duration, Utc};
use fsrs::{MemoryState, DEFAULT_PARAMETERS, FSRS};

use crate::learning_journey::CardMemory;

/// The memory of a card after one review at `now`; `None` if the scheduler failed.
pub fn review(memory: &CardMemory, passed: bool, now: DateTime<Utc>, desired_retention: f64) -> Option<CardMemory> {
    let fsrs = FSRS::new(&DEFAULT_PARAMETERS).ok()?;
    let current = match (memory.stability, memory.difficulty) {
        (Some(stability), Some(difficulty)) => Some(MemoryState { stability, difficulty }),
        _ => None,
    };
    let days_elapsed = memory.last_review.map(|last| u32::try_from((now - last).num_days().max(0)).unwrap_or(u32::MAX)).unwrap_or(0);
    let next = fsrs.next_states(current, desired_retention as f32, days_elapsed).ok()?;
    let item = if passed { next.good } else { next.again };
    // Intervals are fractional days; keep them to the second.
    let seconds = (f64::from(item.interval) * 86_400.0).round().max(60.0) as i64;
    Some(CardMemory {
        stability: Some(item.memory.stability),
        difficulty: Some(item.memory.difficulty),
        due: now + Duration::seconds(seconds),
        last_review: Some(now),
        reviews: memory.reviews + 1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(now: DateTime<Utc>) -> CardMemory {
        CardMemory { stability: None, difficulty: None, due: now, last_review: None, reviews: 0 }
    }

    #[test]
    fn a_passed_first_review_is_due_later_than_a_failed_one() {
        let now = DateTime::<Utc>::UNIX_EPOCH + Duration::days(20_000);
        let good = review(&fresh(now), true, now, 0.9).unwrap();
        let again = review(&fresh(now), false, now, 0.9).unwrap();
        assert!(good.due > again.due);
        assert!(good.due - now >= Duration::days(1), "good interval {:?}", good.due - now);
        assert_eq!(good.reviews, 1);
        assert_eq!(good.last_review, Some(now));
    }
}
