//! The tool-call audit (a `started` row and exactly one exit per call; rows of no command's
//! commit are written here) and the record of `audit verify` runs.

use aggregates::learning_journey::LearningJourney;
use cqrs_es::Aggregate;
use std::collections::HashSet;

use sqlx::Row;

use super::{on_pool, on_writer, HeldConnection, Store, StoreError};

/// An audit row as read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    pub call_id: String,
    /// `started` or the exit.
    pub phase: String,
    pub tool: String,
    /// Journey, when known.
    pub journey_id: Option<String>,
    /// Error code of an exit.
    pub code: Option<String>,
    pub at_ms: i64,
}

/// One row of the tool-call audit.
#[derive(Clone, Debug)]
pub struct ToolCallRow {
    /// Call id (one per tool call).
    pub call_id: String,
    /// `started`, or the exit.
    pub phase: &'static str,
    /// `handler` or `dispatcher`.
    pub writer: &'static str,
    /// Tool name (or `unknown`).
    pub tool: String,
    /// The journey, once known.
    pub journey_id: Option<String>,
    /// The error code of an exit.
    pub code: Option<&'static str>,
    /// Events the call appended.
    pub events_appended: i64,
    /// Duration of the call.
    pub duration_ms: Option<i64>,
    pub at_ms: i64,
}

/// One recorded `audit verify` run.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditRun {
    /// When it finished, epoch milliseconds.
    pub finished_ms: i64,
    pub streams: i64,
    pub events: i64,
    /// Whether every chain was intact.
    pub intact: bool,
    /// The first broken link (`journey sequence: problem`).
    pub broken_at: Option<String>,
}

/// The columns of an audit row, in the order the inserts take them.
macro_rules! audit_columns {
    () => {
        "call_id, phase, writer, tool, journey_id, code, events_appended, duration_ms, at_ms"
    };
}

/// An audit row as SQLite's batch statement reads it (one element of its JSON array): the
/// columns in `audit_columns!` order, then the journey and version its check needs (ADR 0011).
pub(crate) type AuditJson<'a> =
    (&'a str, &'a str, &'a str, &'a str, Option<&'a str>, Option<&'a str>, i64, Option<i64>, i64, Option<&'a str>, Option<i64>);

/// An audit row as SQLite's batch statement reads it, with its check, if any.
pub(crate) fn audit_row<'a>(a: &'a ToolCallRow, check: Option<&'a IfCurrent>) -> AuditJson<'a> {
    (
        &a.call_id,
        a.phase,
        a.writer,
        &a.tool,
        a.journey_id.as_deref(),
        a.code,
        a.events_appended,
        a.duration_ms,
        a.at_ms,
        check.map(|c| c.journey_id.as_str()),
        check.map(|c| super::i64_of(c.version)),
    )
}

/// A batch's audit rows on PostgreSQL with their checks (ADR 0011) judged, the body of a
/// `judged` CTE: `current` is whether the row's journey log ends at the row's version (a row
/// without a check is current), read off the events' primary key. `$arrays` is the `unnest` of
/// the nine columns in `audit_columns!` order and then the check's journey and version;
/// `$aggregate_type` the parameter that holds the journey's aggregate type.
macro_rules! judged_audit_rows {
    ($arrays:expr, $aggregate_type:literal) => {
        concat!(
            "SELECT v.*, (v.check_journey IS NULL OR v.check_version = COALESCE(
        (SELECT MAX(e.sequence) FROM events e WHERE e.aggregate_type = ",
            $aggregate_type,
            " AND e.aggregate_id = v.check_journey), 0)) AS current
    FROM ",
            $arrays,
            "
        AS v (",
            audit_columns!(),
            ", check_journey, check_version)"
        )
    };
}

/// The audit rows of `write_audit` on PostgreSQL as one statement: its own transaction does not
/// wait for its flush (`set_config(…, true)` is the statement's `SET LOCAL`; the function is
/// volatile, so the CTE is evaluated, once, as the join's one row). One statement text for any
/// number of rows: the arrays, not the text, vary.
const PG_RELAXED_AUDIT: &str = concat!(
    "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO tool_calls (",
    audit_columns!(),
    ")
SELECT v.* FROM relaxed, unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[]), CAST($4 AS text[]), CAST($5 AS text[]),
    CAST($6 AS text[]), CAST($7 AS bigint[]), CAST($8 AS bigint[]), CAST($9 AS bigint[])) AS v (",
    audit_columns!(),
    ")
ON CONFLICT DO NOTHING"
);

/// `PG_RELAXED_AUDIT` for a batch with checked reads (ADR 0011): a row with a journey and a
/// version to check (`$10`, `$11`) is written only while that journey's log ends at that
/// version; the statement returns the calls whose check failed. Only such batches read the
/// event table, so the exits the dispatcher writes while a commit hangs never wait on it.
const PG_RELAXED_CHECKED_AUDIT: &str = concat!(
    "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)), judged AS (
    ",
    judged_audit_rows!(
        "unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[]), CAST($4 AS text[]), CAST($5 AS text[]),
        CAST($6 AS text[]), CAST($7 AS bigint[]), CAST($8 AS bigint[]), CAST($9 AS bigint[]), CAST($10 AS text[]), CAST($11 AS bigint[]))",
        "$12"
    ),
    "
), written AS (
    INSERT INTO tool_calls (",
    audit_columns!(),
    ")
    SELECT ",
    audit_columns!(),
    " FROM relaxed, judged WHERE current
    ON CONFLICT DO NOTHING
)
SELECT DISTINCT call_id FROM judged WHERE NOT current"
);

pub(crate) use {audit_columns, judged_audit_rows};

/// Binds the nine audit columns of `rows` as arrays, in `audit_columns!` order, after the
/// parameters already bound (PostgreSQL's multi-row statements take rows as `unnest` arrays).
pub(crate) fn bind_audit_arrays<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    rows: &'q [ToolCallRow],
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query
        .bind(rows.iter().map(|a| a.call_id.as_str()).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.phase).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.writer).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.tool.as_str()).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.journey_id.as_deref()).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.code).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.events_appended).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.duration_ms).collect::<Vec<_>>())
        .bind(rows.iter().map(|a| a.at_ms).collect::<Vec<_>>())
}

/// A read answered from this process's copy of a journey (ADR 0011): its audit rows stand, and
/// so does its answer, only if the journey's log still ends at the version the copy has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IfCurrent {
    pub journey_id: String,
    pub version: u64,
}

/// One call's audit rows of no commit, with the check its answer depends on, if any.
#[derive(Clone, Debug)]
pub struct AuditCall {
    pub rows: Vec<ToolCallRow>,
    pub if_current: Option<IfCurrent>,
}

impl Store {
    /// The most recent audit rows (at most `limit`), oldest first, for the quota reconciliation.
    pub async fn tool_call_log(&self, limit: i64) -> Result<Vec<AuditRow>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query(
                "SELECT call_id, phase, tool, journey_id, code, at_ms FROM (SELECT * FROM tool_calls ORDER BY at_ms DESC LIMIT $1) recent ORDER BY at_ms, call_id",
            )
            .bind(limit)
            .fetch_all(pool)
            .await?;
            rows.iter()
                .map(|r| {
                    Ok(AuditRow {
                        call_id: r.try_get("call_id")?,
                        phase: r.try_get("phase")?,
                        tool: r.try_get("tool")?,
                        journey_id: r.try_get("journey_id")?,
                        code: r.try_get("code")?,
                        at_ms: r.try_get("at_ms")?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// Audit rows as (tool, phase, writer, code), oldest first (for tests and reports).
    pub async fn tool_calls(&self) -> Result<Vec<(String, String, String, Option<String>)>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query("SELECT tool, phase, writer, code FROM tool_calls ORDER BY at_ms, call_id, phase DESC").fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get("tool")?, r.try_get("phase")?, r.try_get("writer")?, r.try_get("code")?)))
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// Records an audit run.
    pub async fn record_audit_run(&self, run: &AuditRun) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO audit_runs (run_id, finished_ms, streams, events, intact, broken_at) VALUES ($1, $2, $3, $4, $5, $6)")
                .bind(uuid::Uuid::new_v4().to_string())
                .bind(run.finished_ms)
                .bind(run.streams)
                .bind(run.events)
                .bind(i64::from(run.intact))
                .bind(run.broken_at.as_deref())
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The latest audit run.
    pub async fn last_audit_run(&self) -> Result<Option<AuditRun>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT finished_ms, streams, events, intact, broken_at FROM audit_runs ORDER BY finished_ms DESC LIMIT 1").fetch_optional(pool).await?;
            row.map(|r| -> Result<AuditRun, sqlx::Error> {
                Ok(AuditRun {
                    finished_ms: r.try_get("finished_ms")?,
                    streams: r.try_get("streams")?,
                    events: r.try_get("events")?,
                    intact: r.try_get::<i64, _>("intact")? != 0,
                    broken_at: r.try_get("broken_at")?,
                })
            })
            .transpose()
            .map_err(StoreError::from)
        })
    }

    /// Writes audit rows that ride in no command's commit (reads, refusals, the dispatcher's
    /// exits) in one transaction that does not wait for its flush (ADR 0006): on PostgreSQL
    /// `synchronous_commit = off`, on SQLite a write turn with `synchronous=NORMAL`. They are
    /// visible at once and durable with the next flushed commit or within the WAL writer's delay;
    /// a process crash loses none of them, only a crash of the machine can lose the last moment.
    ///
    /// A call with [`IfCurrent`] is written only if its journey's log still ends at that version
    /// (ADR 0011), judged in the same statement (PostgreSQL) or write turn (SQLite) that writes
    /// the rows. Returns, per call, whether its rows were written.
    pub async fn write_audit(&self, held: &mut HeldConnection, calls: &[AuditCall]) -> Result<Vec<bool>, StoreError> {
        if calls.iter().all(|c| c.rows.is_empty()) {
            return Ok(vec![true; calls.len()]);
        }
        match self {
            Self::Sqlite(s) => {
                let _turn = s.writer.lock().await;
                // One call: an immediate transaction holds the database's write lock from its
                // first read, so no writer — of this process or another — moves a head between
                // its check and the rows written against it.
                let refused = super::commit::write_turn(&s.turns, super::commit::Flush::Relaxed, &[], calls).await?;
                Ok(written_of(calls, &refused))
            }
            Self::Postgres(s) => {
                let rows: Vec<ToolCallRow> = calls.iter().flat_map(|c| c.rows.iter().cloned()).collect();
                if calls.iter().all(|c| c.if_current.is_none()) {
                    let query = bind_audit_arrays(sqlx::query(PG_RELAXED_AUDIT), &rows);
                    super::on_held!(s, held, conn => query.execute(conn).await)?;
                    return Ok(vec![true; calls.len()]);
                }
                let checks: Vec<Option<&IfCurrent>> = calls.iter().flat_map(|c| c.rows.iter().map(|_| c.if_current.as_ref())).collect();
                let query = bind_audit_arrays(sqlx::query(PG_RELAXED_CHECKED_AUDIT), &rows)
                    .bind(checks.iter().map(|c| c.map(|i| i.journey_id.as_str())).collect::<Vec<_>>())
                    .bind(checks.iter().map(|c| c.map(|i| super::i64_of(i.version))).collect::<Vec<_>>())
                    .bind(LearningJourney::TYPE);
                let refused = super::on_held!(s, held, conn => query.fetch_all(conn).await)?;
                let refused: HashSet<String> = refused.iter().map(|r| r.try_get::<String, _>("call_id")).collect::<Result<_, _>>()?;
                Ok(written_of(calls, &refused))
            }
        }
    }
}

/// Per call, whether its rows were written: all but the calls whose check refused them.
pub(crate) fn written_of(calls: &[AuditCall], refused: &HashSet<String>) -> Vec<bool> {
    calls.iter().map(|c| c.if_current.is_none() || c.rows.first().is_none_or(|r| !refused.contains(&r.call_id))).collect()
}
