//! Analytics: a catch-up projector folds the log into the analytic tables (its position
//! stored in the same transaction as its rows), and the read side lists the views with their
//! lag and serves their rows as JSON or CSV. Never `GenericQuery`: see ADR 0002.

use serde::Serialize;
use serde_json::Value;

use super::journeys::decode_event;
use super::App;
use crate::error::AppError;
use crate::store::projector::Checkpoint;
use crate::store::projector::ColumnKind::{self, Integer, Real, Text};
use crate::store::StoreError;

/// The projector's name in `projector_checkpoints`.
pub(crate) const PROJECTOR: &str = "analytics";
/// The replay projector, which folds the whole log into the shadow tables.
pub(crate) const REPLAY_PROJECTOR: &str = "analytics-replay";

/// How long an instance holds the background projector without renewing it: the longest the
/// projector pauses when its instance dies (the next instance's tick takes it over then).
pub(crate) const PROJECTOR_LEASE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a read waits for transactions elsewhere to end before it answers with a lag.
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A published analyst view: its API name, SQL view and columns.
pub(crate) struct ViewDef {
    /// Name in `/v1/analytics/<name>`.
    pub name: &'static str,
    /// The read-only SQL view.
    pub view: &'static str,
    /// Whether it is fed by the event projector (else it reads the audit directly).
    pub projected: bool,
    /// Columns and types.
    pub columns: &'static [(&'static str, ColumnKind)],
}

/// Every analyst view.
/// The names of every analyst view, for messages that list them.
pub(crate) fn view_names() -> Vec<&'static str> {
    VIEWS.iter().map(|v| v.name).collect()
}

pub(crate) const VIEWS: &[ViewDef] = &[
    ViewDef {
        name: "goal-mastery",
        view: "analyst_goal_mastery",
        projected: true,
        columns: &[
            ("journey_id", Text),
            ("goal_id", Text),
            ("mastery", Real),
            ("mastered", Integer),
            ("completions", Integer),
            ("updated_at", Text),
        ],
    },
    ViewDef {
        name: "recall-outcomes",
        view: "analyst_recall_outcomes",
        projected: true,
        columns: &[("card_id", Text), ("goal_id", Text), ("passed", Integer), ("failed", Integer)],
    },
    ViewDef {
        name: "exam-results",
        view: "analyst_exam_results",
        projected: true,
        columns: &[
            ("journey_id", Text),
            ("instance", Integer),
            ("total_points", Real),
            ("max_points", Integer),
            ("passed", Integer),
            ("scored_at", Text),
        ],
    },
    ViewDef {
        name: "daily-activity",
        view: "analyst_daily_activity",
        projected: true,
        columns: &[
            ("day", Text),
            ("events", Integer),
            ("goals_completed", Integer),
            ("recall_results", Integer),
            ("exams_scored", Integer),
        ],
    },
    ViewDef {
        name: "tool-usage",
        view: "analyst_tool_usage",
        projected: false,
        columns: &[
            ("tool", Text),
            ("delivered", Integer),
            ("processed", Integer),
            ("completed", Integer),
            ("clarification", Integer),
            ("rejected", Integer),
            ("error", Integer),
        ],
    },
];

/// A view's entry in the list, with the projector's lag.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ViewStatus {
    pub name: &'static str,
    /// SQL view for direct queries.
    pub sql_view: &'static str,
    /// Events folded into it.
    pub position: i64,
    /// Events not yet folded (0 for views read straight from the audit).
    pub lag: i64,
}

/// The analyst views with their lag, and the replica they are read from.
#[derive(Clone, Debug, Serialize)]
pub struct AnalyticsOverview {
    pub views: Vec<ViewStatus>,
    /// The read replica, when `analytics_db` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica: Option<crate::store::projector::ReplicaState>,
}

/// A view's rows.
#[derive(Clone, Debug, Serialize)]
pub struct Table {
    pub columns: Vec<&'static str>,
    /// Rows, one JSON value per column.
    pub rows: Vec<Vec<Value>>,
}

impl Table {
    /// RFC 4180 CSV with a header line.
    pub fn to_csv(&self) -> String {
        fn cell(v: &Value) -> String {
            let raw = match v {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            if raw.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", raw.replace('"', "\"\""))
            } else {
                raw
            }
        }
        let mut out = self.columns.join(",");
        out.push_str("\r\n");
        for row in &self.rows {
            out.push_str(&row.iter().map(cell).collect::<Vec<_>>().join(","));
            out.push_str("\r\n");
        }
        out
    }
}

impl App {
    /// Folds every event not yet projected into the analytic tables; returns how many.
    pub async fn catch_up_analytics(&self) -> Result<usize, AppError> {
        // One projector per process; across processes PostgreSQL's row lock on the checkpoint
        // serializes them.
        let _guard = self.projector_lock.lock().await;
        self.catch_up_locked().await
    }

    /// The server's background tick: takes or renews this instance's lease on the projector and,
    /// holding it, folds whatever is projectable now; returns whether it held the lease. Of
    /// several instances on one database one follows the log; when it dies another takes over
    /// once its lease ran out. (A view read still catches up on whichever instance serves it;
    /// the checkpoint's row lock keeps those runs from folding an event twice.)
    pub async fn project_as_leader(&self) -> Result<bool, AppError> {
        let now = self.clock.now().timestamp_millis();
        let ttl = i64::try_from(PROJECTOR_LEASE.as_millis()).unwrap_or(i64::MAX);
        if !self.store.hold_lease(PROJECTOR, &self.instance_id, now, ttl).await? {
            return Ok(false);
        }
        self.project_pending().await?;
        Ok(true)
    }

    /// Whether this instance holds the background projector's lease now.
    pub async fn is_projector_leader(&self) -> Result<bool, AppError> {
        let now = self.clock.now().timestamp_millis();
        Ok(self.store.lease_holder(PROJECTOR).await?.is_some_and(|(holder, until)| holder == self.instance_id && until >= now))
    }

    /// Folds whatever is projectable now and returns at once (the leader's background tick;
    /// readers that must see everything use `catch_up_analytics`).
    pub async fn project_pending(&self) -> Result<usize, AppError> {
        let _guard = self.projector_lock.lock().await;
        self.run_projector().await
    }

    /// Catches up with every event committed when it was called. PostgreSQL's projector may
    /// not pass a transaction still in flight anywhere in the cluster (its snapshot horizon is
    /// cluster-wide), so it waits a bounded time for such a transaction to end rather than
    /// answering with a lag that a concurrent writer elsewhere caused.
    async fn catch_up_locked(&self) -> Result<usize, AppError> {
        let (_, committed) = self.store.projector_lag(PROJECTOR).await?;
        let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
        let mut total = 0;
        loop {
            total += self.run_projector().await?;
            let (projected, _) = self.store.projector_lag(PROJECTOR).await?;
            if projected >= committed || tokio::time::Instant::now() >= deadline {
                return Ok(total);
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Waits a bounded time until the replica has replayed the projector's position on the
    /// primary; past the bound it answers with what the replica has (the lag says how much).
    async fn wait_for_replica(&self) -> Result<(), AppError> {
        let Some(replica) = &self.analytics_store else { return Ok(()) };
        let (target, _) = self.store.projector_lag(PROJECTOR).await?;
        let deadline = tokio::time::Instant::now() + CATCH_UP_WAIT;
        while replica.projector_lag(PROJECTOR).await?.0 < target && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Rebuilds the analytics from the log into the shadow tables, up to exactly the event the
    /// live projector stands at, and returns the tables whose live rows differ.
    pub async fn replay_analytics(&self) -> Result<Vec<String>, AppError> {
        // The live projector is not caught up first: the rebuild stops where it stands, so the
        // comparison is exact whatever its lag (which `analytics_status` reports).
        let _guard = self.projector_lock.lock().await;
        let live = self.store.projector_checkpoint(PROJECTOR).await?;
        // Folded in memory and written once: row by row upserts made the rebuild 20× slower
        // than a scan of the log.
        let mut tables = projections::analytics::Tables::default();
        let mut at = Checkpoint::default();
        loop {
            let batch = self.store.projectable_events(at, live, 2000).await?;
            let Some((_, last)) = batch.last() else { break };
            at = *last;
            for (stored, _) in &batch {
                let event = decode_event(stored)?;
                for change in projections::analytics::changes(&stored.aggregate_id, &event) {
                    tables.apply(change);
                }
            }
        }
        self.store.write_shadow(REPLAY_PROJECTOR, &tables, at).await?;
        Ok(self.store.differing_analytics().await?)
    }

    /// Puts the rebuilt analytics live.
    pub async fn swap_in_replayed_analytics(&self) -> Result<(), AppError> {
        let _guard = self.projector_lock.lock().await;
        Ok(self.store.swap_in_shadow_analytics(PROJECTOR, REPLAY_PROJECTOR).await?)
    }

    async fn run_projector(&self) -> Result<usize, AppError> {
        let mut total = 0;
        loop {
            let n = self
                .store
                .project_batch(PROJECTOR, 500, |stored| {
                    let event = decode_event(stored)
                        .map_err(|_| StoreError::Corrupt(format!("event {} of {}", stored.sequence, stored.aggregate_id)))?;
                    Ok(projections::analytics::changes(&stored.aggregate_id, &event))
                })
                .await?;
            total += n;
            if n == 0 {
                return Ok(total);
            }
        }
    }

    /// The store analysts read from: the replica when configured.
    fn analytics_reader(&self) -> &crate::store::Store {
        self.analytics_store.as_deref().unwrap_or(&self.store)
    }

    /// The views with their lag as the analysts see it (on the replica: what it has replayed,
    /// so its replay lag is included), and the replica's own state.
    pub async fn analytics_overview(&self) -> Result<AnalyticsOverview, AppError> {
        let replica = match &self.analytics_store {
            Some(replica) => Some(replica.replica_state(&self.store).await?),
            None => None,
        };
        Ok(AnalyticsOverview { views: self.analytics_status().await?, replica })
    }

    /// The analyst views with their lag.
    pub async fn analytics_status(&self) -> Result<Vec<ViewStatus>, AppError> {
        let (primary, total) = self.store.projector_lag(PROJECTOR).await?;
        // On a replica the analysts see what it has replayed; its own count would lag with it.
        let position = match &self.analytics_store {
            Some(replica) => replica.projector_checkpoint(PROJECTOR).await?.events,
            None => primary,
        };
        Ok(VIEWS
            .iter()
            .map(|v| ViewStatus {
                name: v.name,
                sql_view: v.view,
                position: if v.projected { position } else { 0 },
                lag: if v.projected { total - position } else { 0 },
            })
            .collect())
    }

    /// The rows of one view, caught up first; `NotFound` for a name not in [`view_names`].
    pub async fn analytics_table(&self, name: &str) -> Result<Table, AppError> {
        let def = VIEWS.iter().find(|v| v.name == name).ok_or(AppError::NotFound { what: "analytics view" })?;
        if def.projected {
            self.catch_up_analytics().await?;
            self.wait_for_replica().await?;
        }
        let rows = self.analytics_reader().analyst_view(def.view, def.columns).await?;
        Ok(Table { columns: def.columns.iter().map(|(n, _)| *n).collect(), rows })
    }
}
