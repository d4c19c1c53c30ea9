//! The catch-up projector's storage side: read the events after a checkpoint in a global order
//! that never skips an in-flight transaction, and apply the analytic changes together with the
//! new checkpoint in one transaction. On SQLite the trigger-assigned position is gapless commit
//! order; on PostgreSQL rows are read in (transaction id, position) order and only from
//! transactions older than the oldest one still running.

use projections::analytics::{Change, Tables};
use sqlx::Row;

use super::{on_pool, on_writer, row_to_event, Store, StoreError, StoredEvent, EVENT_COLUMNS};

/// Where a projector stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// Transaction id of the last applied event (0 on SQLite).
    pub tx: i64,
    /// Position of the last applied event.
    pub position: i64,
    /// Events applied so far.
    pub events: i64,
}

impl Checkpoint {
    /// Past every event.
    pub const END: Self = Self { tx: i64::MAX, position: i64::MAX, events: i64::MAX };
}

/// Each analytic table's insert head and its upsert tail: a delta adds counts and keeps the
/// latest values, an exam attempt keeps its first scoring. `PREFIX` names live or shadow tables.
const GOAL_MASTERY: (&str, &str) = (
    "INSERT INTO PREFIX_goal_mastery (journey_id, goal_id, mastery, mastered, completions, updated_at) ",
    " ON CONFLICT (journey_id, goal_id) DO UPDATE SET mastery = excluded.mastery, mastered = excluded.mastered,
      completions = PREFIX_goal_mastery.completions + excluded.completions, updated_at = excluded.updated_at",
);
const RECALL_OUTCOME: (&str, &str) = (
    "INSERT INTO PREFIX_recall_outcomes (card_id, goal_id, passed, failed) ",
    " ON CONFLICT (card_id) DO UPDATE SET passed = PREFIX_recall_outcomes.passed + excluded.passed,
      failed = PREFIX_recall_outcomes.failed + excluded.failed",
);
const EXAM_RESULT: (&str, &str) = (
    "INSERT INTO PREFIX_exam_results (journey_id, instance, total_points, max_points, passed, scored_at) ",
    " ON CONFLICT (journey_id, instance) DO NOTHING",
);
const DAILY: (&str, &str) = (
    "INSERT INTO PREFIX_daily_activity (day, events, goals_completed, recall_results, exams_scored) ",
    " ON CONFLICT (day) DO UPDATE SET events = PREFIX_daily_activity.events + excluded.events,
      goals_completed = PREFIX_daily_activity.goals_completed + excluded.goals_completed,
      recall_results = PREFIX_daily_activity.recall_results + excluded.recall_results,
      exams_scored = PREFIX_daily_activity.exams_scored + excluded.exams_scored",
);

/// Upserts every row of a folded `Tables` into the tables named by `prefix`, with multi-row
/// statements (a key occurs once per `Tables`, so no statement touches a row twice). A macro
/// because the body runs on either backend's transaction type.
macro_rules! upsert_tables {
    ($tx:expr, $prefix:expr, $tables:expr) => {{
        let (prefix, tables) = ($prefix, $tables);
        let sql = |(head, tail): (&str, &str)| (head.replace("PREFIX", prefix), tail.replace("PREFIX", prefix));
        let goals: Vec<_> = tables.goal_mastery.iter().collect();
        for chunk in goals.chunks(ROWS_PER_INSERT) {
            let (head, tail) = sql(GOAL_MASTERY);
            let mut insert = sqlx::QueryBuilder::new(head);
            insert.push_values(chunk, |mut b, ((journey_id, goal_id), row)| {
                b.push_bind(journey_id)
                    .push_bind(goal_id)
                    .push_bind(row.mastery)
                    .push_bind(i64::from(row.mastered))
                    .push_bind(row.completions)
                    .push_bind(&row.updated_at);
            });
            insert.push(tail).build().execute(&mut *$tx).await?;
        }
        let cards: Vec<_> = tables.recall_outcomes.iter().collect();
        for chunk in cards.chunks(ROWS_PER_INSERT) {
            let (head, tail) = sql(RECALL_OUTCOME);
            let mut insert = sqlx::QueryBuilder::new(head);
            insert.push_values(chunk, |mut b, (card_id, row)| {
                b.push_bind(card_id).push_bind(&row.goal_id).push_bind(row.passed).push_bind(row.failed);
            });
            insert.push(tail).build().execute(&mut *$tx).await?;
        }
        let exams: Vec<_> = tables.exam_results.iter().collect();
        for chunk in exams.chunks(ROWS_PER_INSERT) {
            let (head, tail) = sql(EXAM_RESULT);
            let mut insert = sqlx::QueryBuilder::new(head);
            insert.push_values(chunk, |mut b, ((journey_id, instance), row)| {
                b.push_bind(journey_id)
                    .push_bind(i64::try_from(*instance).unwrap_or(i64::MAX))
                    .push_bind(row.total_points)
                    .push_bind(i64::from(row.max_points))
                    .push_bind(i64::from(row.passed))
                    .push_bind(&row.scored_at);
            });
            insert.push(tail).build().execute(&mut *$tx).await?;
        }
        let days: Vec<_> = tables.daily_activity.iter().collect();
        for chunk in days.chunks(ROWS_PER_INSERT) {
            let (head, tail) = sql(DAILY);
            let mut insert = sqlx::QueryBuilder::new(head);
            insert.push_values(chunk, |mut b, (day, row)| {
                b.push_bind(day)
                    .push_bind(row.events)
                    .push_bind(row.goals_completed)
                    .push_bind(row.recall_results)
                    .push_bind(row.exams_scored);
            });
            insert.push(tail).build().execute(&mut *$tx).await?;
        }
    }};
}

/// Rows per multi-row insert of a rebuild (6 columns × 500 stays far below both stores'
/// bind-parameter limits).
const ROWS_PER_INSERT: usize = 500;

/// Which analytic tables a projector writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `analytics_*`, what analysts read.
    Live,
    /// `analytics_shadow_*`, rebuilt by `skillpilot replay`.
    Shadow,
}

impl Target {
    fn prefix(self) -> &'static str {
        match self {
            Self::Live => "analytics",
            Self::Shadow => "analytics_shadow",
        }
    }
}

/// The analytic tables and their columns (for comparing and swapping).
pub(crate) const ANALYTIC_TABLES: &[(&str, &str)] = &[
    ("goal_mastery", "journey_id, goal_id, mastery, mastered, completions, updated_at"),
    ("recall_outcomes", "card_id, goal_id, passed, failed"),
    ("exam_results", "journey_id, instance, total_points, max_points, passed, scored_at"),
    ("daily_activity", "day, events, goals_completed, recall_results, exams_scored"),
];

impl Store {
    fn batch_sql(&self) -> String {
        match self {
            Store::Sqlite(_) => format!(
                "SELECT {EVENT_COLUMNS}, position, 0 AS txid FROM events WHERE position > $1 AND position <= $2 ORDER BY position LIMIT $3"
            ),
            Store::Postgres(_) => format!(
                "SELECT {EVENT_COLUMNS}, position, CAST(CAST(tx AS text) AS bigint) AS txid FROM events
                 WHERE (tx, position) > (CAST(CAST($1 AS text) AS xid8), $2)
                   AND (tx, position) <= (CAST(CAST($3 AS text) AS xid8), $4)
                   AND tx < pg_snapshot_xmin(pg_current_snapshot())
                 ORDER BY tx, position LIMIT $5"
            ),
        }
    }

    /// Where a projector stands (the start when it never ran).
    pub async fn projector_checkpoint(&self, projector: &str) -> Result<Checkpoint, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT tx, position, events FROM projector_checkpoints WHERE projector = $1")
                .bind(projector)
                .fetch_optional(pool)
                .await?;
            Ok(match row {
                Some(row) => Checkpoint { tx: row.try_get("tx")?, position: row.try_get("position")?, events: row.try_get("events")? },
                None => Checkpoint::default(),
            })
        })
    }

    /// Applies up to `limit` events after the live projector's checkpoint to the live tables;
    /// returns how many.
    pub async fn project_batch(
        &self,
        projector: &str,
        limit: i64,
        changes: impl Fn(&StoredEvent) -> Result<Vec<Change>, StoreError>,
    ) -> Result<usize, StoreError> {
        let events_sql = self.batch_sql();
        let until = Checkpoint::END;
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            if matches!(self, Store::Postgres(_)) {
                // Another process's projector holds the checkpoint row for a batch at most; one
                // that stalls longer makes this run give up (and retry later) instead of hanging.
                sqlx::query("SET LOCAL lock_timeout = '5s'").execute(&mut *tx).await?;
            }
            sqlx::query("INSERT INTO projector_checkpoints (projector, tx, position, events) VALUES ($1, 0, 0, 0) ON CONFLICT (projector) DO NOTHING")
                .bind(projector)
                .execute(&mut *tx)
                .await?;
            // Write first: SQLite then takes its write lock before reading (a read-then-write
            // transaction would fail once another writer committed), PostgreSQL locks the row.
            sqlx::query("UPDATE projector_checkpoints SET events = events WHERE projector = $1").bind(projector).execute(&mut *tx).await?;
            let row = sqlx::query("SELECT tx, position, events FROM projector_checkpoints WHERE projector = $1").bind(projector).fetch_one(&mut *tx).await?;
            let mut at = Checkpoint { tx: row.try_get("tx")?, position: row.try_get("position")?, events: row.try_get("events")? };
            let query = match self {
                Store::Sqlite(_) => sqlx::query(&events_sql).bind(at.position).bind(until.position).bind(limit),
                Store::Postgres(_) => sqlx::query(&events_sql).bind(at.tx).bind(at.position).bind(until.tx).bind(until.position).bind(limit),
            };
            let rows = query.fetch_all(&mut *tx).await?;
            // The batch is folded first and each touched row upserted once (the upserts add
            // deltas and keep the latest values, so folding is exact): far fewer statements
            // while SQLite's single writer is held.
            let mut delta = Tables::default();
            for r in &rows {
                for change in changes(&row_to_event(r)?)? {
                    delta.apply(change);
                }
                at = Checkpoint { tx: r.try_get("txid")?, position: r.try_get("position")?, events: at.events + 1 };
            }
            upsert_tables!(tx, Target::Live.prefix(), &delta);
            sqlx::query("UPDATE projector_checkpoints SET tx = $2, position = $3, events = $4 WHERE projector = $1")
                .bind(projector)
                .bind(at.tx)
                .bind(at.position)
                .bind(at.events)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(rows.len())
        })
    }

    /// Events after `after` and not past `until`, in the projector's order, each with the
    /// checkpoint it moves the projector to (for a rebuild that reads without writing).
    pub async fn projectable_events(
        &self,
        after: Checkpoint,
        until: Checkpoint,
        limit: i64,
    ) -> Result<Vec<(StoredEvent, Checkpoint)>, StoreError> {
        let sql = self.batch_sql();
        on_pool!(self, pool => {
            let query = match self {
                Store::Sqlite(_) => sqlx::query(&sql).bind(after.position).bind(until.position).bind(limit),
                Store::Postgres(_) => sqlx::query(&sql).bind(after.tx).bind(after.position).bind(until.tx).bind(until.position).bind(limit),
            };
            let rows = query.fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for (events, r) in (after.events + 1..).zip(rows.iter()) {
                out.push((row_to_event(r)?, Checkpoint { tx: r.try_get("txid")?, position: r.try_get("position")?, events }));
            }
            Ok(out)
        })
    }

    /// Replaces the shadow tables with rows folded in memory and sets the replay projector's
    /// checkpoint, in one transaction.
    pub async fn write_shadow(&self, projector: &str, tables: &Tables, at: Checkpoint) -> Result<(), StoreError> {
        let prefix = Target::Shadow.prefix();
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            for (table, _) in ANALYTIC_TABLES {
                sqlx::query(&format!("DELETE FROM analytics_shadow_{table}")).execute(&mut *tx).await?;
            }
            // Multi-row statements: one round trip per 500 rows instead of one per row.
            upsert_tables!(tx, prefix, tables);
            sqlx::query("DELETE FROM projector_checkpoints WHERE projector = $1").bind(projector).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO projector_checkpoints (projector, tx, position, events) VALUES ($1, $2, $3, $4)")
                .bind(projector)
                .bind(at.tx)
                .bind(at.position)
                .bind(at.events)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Analytic tables whose live rows differ from the shadow rows (rows missing on either side).
    pub async fn differing_analytics(&self) -> Result<Vec<String>, StoreError> {
        on_pool!(self, pool => {
            let mut out = Vec::new();
            for (table, cols) in ANALYTIC_TABLES {
                let sql = format!(
                    "SELECT (SELECT COUNT(*) FROM (SELECT {cols} FROM analytics_{table} EXCEPT SELECT {cols} FROM analytics_shadow_{table}) a)
                          + (SELECT COUNT(*) FROM (SELECT {cols} FROM analytics_shadow_{table} EXCEPT SELECT {cols} FROM analytics_{table}) b) AS n"
                );
                let n: i64 = sqlx::query(&sql).fetch_one(pool).await?.try_get("n")?;
                if n > 0 {
                    out.push((*table).to_owned());
                }
            }
            Ok(out)
        })
    }

    /// Puts the shadow analytics live, with the replay projector's position as the live one's.
    pub async fn swap_in_shadow_analytics(&self, live: &str, replay: &str) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            for (table, cols) in ANALYTIC_TABLES {
                sqlx::query(&format!("DELETE FROM analytics_{table}")).execute(&mut *tx).await?;
                sqlx::query(&format!("INSERT INTO analytics_{table} ({cols}) SELECT {cols} FROM analytics_shadow_{table}")).execute(&mut *tx).await?;
            }
            sqlx::query("DELETE FROM projector_checkpoints WHERE projector = $1").bind(live).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO projector_checkpoints (projector, tx, position, events) SELECT $1, tx, position, events FROM projector_checkpoints WHERE projector = $2")
                .bind(live)
                .bind(replay)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// `(events folded, events committed)` for a projector. The committed count is the folded
    /// count plus the events after its checkpoint — a range count on the projector's own order
    /// (an index), so it costs the lag, not the log (a `COUNT(*)` of the whole log grew with it).
    pub async fn projector_lag(&self, projector: &str) -> Result<(i64, i64), StoreError> {
        let at = self.projector_checkpoint(projector).await?;
        let after: i64 = match self {
            Store::Sqlite(s) => sqlx::query("SELECT COUNT(*) AS n FROM events WHERE position > $1")
                .bind(at.position)
                .fetch_one(&s.pool)
                .await?
                .try_get("n")?,
            Store::Postgres(s) => {
                super::on_pg!(s, pool => sqlx::query("SELECT COUNT(*) AS n FROM events WHERE (tx, position) > (CAST(CAST($1 AS text) AS xid8), $2)")
                    .bind(at.tx)
                    .bind(at.position)
                    .fetch_one(pool)
                    .await?)
                .try_get("n")?
            }
        };
        Ok((at.events, at.events + after))
    }

    /// Takes or renews the lease on running `projector` in the background for `holder` until
    /// `now_ms + ttl_ms`; returns whether `holder` holds it. One statement: the row is taken over
    /// only when its lease expired or it is already `holder`'s, so two instances never both hold
    /// it (up to clock skew between them, which the lease length covers).
    pub async fn hold_lease(&self, projector: &str, holder: &str, now_ms: i64, ttl_ms: i64) -> Result<bool, StoreError> {
        on_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO projector_leases (projector, holder, expires_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (projector) DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms \
                 WHERE projector_leases.holder = excluded.holder OR projector_leases.expires_ms < $4",
            )
            .bind(projector)
            .bind(holder)
            .bind(now_ms + ttl_ms)
            .bind(now_ms)
            .execute(pool)
            .await?;
            let row = sqlx::query("SELECT holder FROM projector_leases WHERE projector = $1").bind(projector).fetch_one(pool).await?;
            Ok(row.try_get::<String, _>("holder")? == holder)
        })
    }

    /// The current holder of a projector's lease and when it expires, if anyone ever held it.
    pub async fn lease_holder(&self, projector: &str) -> Result<Option<(String, i64)>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT holder, expires_ms FROM projector_leases WHERE projector = $1")
                .bind(projector)
                .fetch_optional(pool)
                .await?;
            match row {
                Some(r) => Ok(Some((r.try_get("holder")?, r.try_get("expires_ms")?))),
                None => Ok(None),
            }
        })
    }

    /// This store as a read replica of `primary`: whether it is a standby and how many bytes of
    /// the primary's WAL it has not replayed yet (0 when it is not a standby of it).
    pub async fn replica_state(&self, primary: &Store) -> Result<ReplicaState, StoreError> {
        let (standby, replayed): (bool, Option<String>) = on_pool!(self, pool => {
            let row = sqlx::query("SELECT pg_is_in_recovery() AS standby, pg_last_wal_replay_lsn()::text AS replayed")
                .fetch_one(pool)
                .await?;
            (row.try_get("standby")?, row.try_get("replayed")?)
        });
        let replay_lag_bytes = match replayed {
            Some(lsn) => on_pool!(primary, pool => {
                let row = sqlx::query("SELECT GREATEST(pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn), 0)::bigint AS behind")
                    .bind(lsn)
                    .fetch_one(pool)
                    .await?;
                row.try_get::<i64, _>("behind")?
            }),
            None => 0,
        };
        Ok(ReplicaState { standby, replay_lag_bytes })
    }

    /// All rows of an analyst view, as text / number / integer JSON values.
    pub async fn analyst_view(&self, view: &str, columns: &[(&str, ColumnKind)]) -> Result<Vec<Vec<serde_json::Value>>, StoreError> {
        let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
        let sql =
            format!("SELECT {} FROM {view} ORDER BY {}", names.join(", "), names.iter().take(2).copied().collect::<Vec<_>>().join(", "));
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let mut values = Vec::with_capacity(columns.len());
                for (name, kind) in columns {
                    values.push(match kind {
                        ColumnKind::Text => serde_json::Value::from(r.try_get::<String, _>(*name)?),
                        ColumnKind::Integer => serde_json::Value::from(r.try_get::<i64, _>(*name)?),
                        ColumnKind::Real => serde_json::Value::from(r.try_get::<f64, _>(*name)?),
                    });
                }
                out.push(values);
            }
            Ok(out)
        })
    }
}

/// A read replica as the analysts' reads see it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaState {
    /// Whether the replica is a standby in recovery (streaming from the primary).
    pub standby: bool,
    /// Bytes of the primary's WAL the replica has not replayed yet.
    pub replay_lag_bytes: i64,
}

/// The type of an analyst view column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ColumnKind {
    Text,
    Integer,
    Real,
}
