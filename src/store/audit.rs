//! The tool-call audit (a `started` row and exactly one exit per call; rows of no command's
//! commit are written here) and the record of `audit verify` runs.

use sqlx::Row;

use super::{on_pool, on_writer, Store, StoreError};

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

/// The columns of an audit row, in the order `insert_audit_rows!` binds them.
macro_rules! audit_columns {
    () => {
        "call_id, phase, writer, tool, journey_id, code, events_appended, duration_ms, at_ms"
    };
}

/// One multi-row insert of audit rows (never empty), dropping a second exit of a call (a late
/// handler after the dispatcher's) by the unique index; a macro because the builder is typed
/// by the backend. With a head and a tail, the rows are the `VALUES` list between them.
macro_rules! insert_audit_rows {
    ($rows:expr) => {
        $crate::store::audit::insert_audit_rows!(
            $rows,
            concat!("INSERT INTO tool_calls (", $crate::store::audit::audit_columns!(), ") "),
            ""
        )
    };
    ($rows:expr, $head:expr, $tail:expr) => {{
        let mut insert = sqlx::QueryBuilder::new($head);
        insert.push_values($rows, |mut b, a: &ToolCallRow| {
            b.push_bind(a.call_id.clone())
                .push_bind(a.phase)
                .push_bind(a.writer)
                .push_bind(a.tool.clone())
                .push_bind(a.journey_id.clone())
                .push_bind(a.code)
                .push_bind(a.events_appended)
                .push_bind(a.duration_ms)
                .push_bind(a.at_ms);
        });
        insert.push($tail);
        insert.push(" ON CONFLICT DO NOTHING");
        insert
    }};
}

/// The audit rows of `write_audit` on PostgreSQL as one statement: its own transaction does not
/// wait for its flush (`set_config(…, true)` is the statement's `SET LOCAL`; the function is
/// volatile, so the CTE is evaluated, once, as the join's one row).
const PG_RELAXED_AUDIT_HEAD: &str = concat!(
    "WITH relaxed AS (SELECT set_config('synchronous_commit', 'off', true)) INSERT INTO tool_calls (",
    audit_columns!(),
    ") SELECT v.* FROM relaxed, ("
);
const PG_RELAXED_AUDIT_TAIL: &str = concat!(") AS v (", audit_columns!(), ")");
pub(crate) use {audit_columns, insert_audit_rows};

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
    /// `synchronous_commit = off`, on SQLite a connection with `synchronous=NORMAL`. They are
    /// visible at once and durable with the next flushed commit or within the WAL writer's delay;
    /// a process crash loses none of them, only a crash of the machine can lose the last moment.
    pub async fn write_audit(&self, rows: &[ToolCallRow]) -> Result<(), StoreError> {
        if rows.is_empty() {
            return Ok(());
        }
        match self {
            Self::Sqlite(s) => {
                let _turn = s.writer.lock().await;
                insert_audit_rows!(rows).build().execute(&s.relaxed).await?;
            }
            Self::Postgres(s) => {
                let mut insert = insert_audit_rows!(rows, PG_RELAXED_AUDIT_HEAD, PG_RELAXED_AUDIT_TAIL);
                super::on_pg!(s, pool => insert.build().execute(pool).await?);
            }
        }
        Ok(())
    }
}
