//! The injected clock (docs/domain.md): the domain never reads the wall clock; the application
//! asks this, and tests drive a manual one.

use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

/// A source of "now".
pub trait Clock: Send + Sync {
    /// The current time.
    fn now(&self) -> DateTime<Utc>;
}

/// The wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that moves only when told to (tests, benchmarks).
pub struct ManualClock(Mutex<DateTime<Utc>>);

impl ManualClock {
    /// A clock standing at `at`.
    pub fn at(at: DateTime<Utc>) -> Self {
        Self(Mutex::new(at))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        if let Ok(mut t) = self.0.lock() {
            *t += by;
        }
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        self.0.lock().map(|t| *t).unwrap_or_else(|p| *p.into_inner())
    }
}
