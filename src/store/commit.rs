//! A command's commit: its events (which carry the idempotency record and the chain link in
//! their metadata), the full-context view row of the state they reach, a snapshot when one is
//! due, and the tool call's audit rows — one transaction, one flush (ADR 0006). On PostgreSQL
//! it is one statement (data-modifying CTEs over one JSON parameter): one round trip, and
//! concurrent commands share flushes through the server's group commit. On SQLite the writer
//! task hands a batch of concurrent commits to [`Store::commit_batch`], one transaction with a
//! savepoint per command, so one failure rejects only its own command.
//!
//! The event rows keep the shape the store crates write and read (`get_last_events` still reads
//! them); a sequence number another writer took first is [`StoreError::Conflict`].

use serde_json::{json, Value};

use super::audit::insert_audit_rows;
use super::{i64_of, Snapshot, Store, StoreError, StoredEvent, ToolCallRow, SNAPSHOT_SCHEMA};

/// Everything one command writes.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The request id the events carry: a stream that already holds it refuses the commit as
    /// a [`StoreError::Conflict`] (the caller then answers with the original result).
    pub request_id: Option<String>,
    /// The events, in sequence order, with their metadata.
    pub events: Vec<StoredEvent>,
    /// The journey's full-context view row at the state the events reach.
    pub view: Option<(String, u64, Value)>,
    /// A snapshot of the journey, when one is due.
    pub snapshot: Option<(String, Snapshot)>,
    /// The tool call's `started` and exit rows.
    pub audit: Vec<ToolCallRow>,
}

const PG_COMMIT: &str = "
WITH ev AS (
    INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
    SELECT e.aggregate_type, e.aggregate_id, e.sequence, e.event_type, e.event_version, e.payload, e.metadata
    FROM json_to_recordset(CAST($1 AS json) -> 'events')
        AS e(aggregate_type text, aggregate_id text, sequence bigint, event_type text, event_version text, payload json, metadata json)
    WHERE NOT EXISTS (
        SELECT 1 FROM events x
        WHERE x.aggregate_type = e.aggregate_type AND x.aggregate_id = e.aggregate_id
          AND (x.metadata ->> 'requestId') = CAST($1 AS json) ->> 'request_id')
    RETURNING 1
), view_row AS (
    INSERT INTO journey_context_view (view_id, version, payload)
    SELECT v.view_id, v.version, CAST(v.payload AS text)
    FROM json_to_recordset(CAST($1 AS json) -> 'view') AS v(view_id text, version bigint, payload json)
    WHERE EXISTS (SELECT 1 FROM ev)
    ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
    WHERE journey_context_view.version < excluded.version
), snapshot_row AS (
    INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state)
    SELECT s.journey_id, s.schema, s.version, s.chain_hash, CAST(s.state AS text)
    FROM json_to_recordset(CAST($1 AS json) -> 'snapshot') AS s(journey_id text, schema bigint, version bigint, chain_hash text, state json)
    WHERE EXISTS (SELECT 1 FROM ev)
    ON CONFLICT (journey_id) DO UPDATE SET schema = excluded.schema, version = excluded.version, chain_hash = excluded.chain_hash, state = excluded.state
    WHERE journey_snapshots.version < excluded.version OR journey_snapshots.schema <> excluded.schema
), audit_rows AS (
    INSERT INTO tool_calls (call_id, phase, writer, tool, journey_id, code, events_appended, duration_ms, at_ms)
    SELECT a.call_id, a.phase, a.writer, a.tool, a.journey_id, a.code, a.events_appended, a.duration_ms, a.at_ms
    FROM json_to_recordset(CAST($1 AS json) -> 'audit')
        AS a(call_id text, phase text, writer text, tool text, journey_id text, code text, events_appended bigint, duration_ms bigint, at_ms bigint)
    WHERE EXISTS (SELECT 1 FROM ev)
    ON CONFLICT DO NOTHING
)
SELECT COUNT(*) AS appended FROM ev";

const SQLITE_HOLDS_REQUEST: &str =
    "SELECT 1 FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND (metadata ->> 'requestId') = $3 LIMIT 1";
const SQLITE_EVENT: &str = "INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata) VALUES ($1, $2, $3, $4, $5, $6, $7)";
const VIEW_UPSERT: &str = "INSERT INTO journey_context_view (view_id, version, payload) VALUES ($1, $2, $3)
     ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
     WHERE journey_context_view.version < excluded.version";
const SNAPSHOT_UPSERT: &str = "INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT (journey_id) DO UPDATE SET schema = excluded.schema, version = excluded.version, chain_hash = excluded.chain_hash, state = excluded.state
     WHERE journey_snapshots.version < excluded.version OR journey_snapshots.schema <> excluded.schema";
/// Whether a database error is a taken key (PostgreSQL 23505; SQLite's primary-key or unique
/// constraint, extended codes 1555 and 2067).
fn is_taken_key(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().is_some_and(|c| c == "23505" || c == "1555" || c == "2067"))
}

fn commit_error(err: sqlx::Error) -> StoreError {
    if is_taken_key(&err) {
        StoreError::Conflict
    } else {
        StoreError::from(err)
    }
}

/// The audit row as the JSON the PostgreSQL statement reads.
fn audit_json(a: &ToolCallRow) -> Value {
    json!({
        "call_id": a.call_id, "phase": a.phase, "writer": a.writer, "tool": a.tool, "journey_id": a.journey_id,
        "code": a.code, "events_appended": a.events_appended, "duration_ms": a.duration_ms, "at_ms": a.at_ms,
    })
}

impl Store {
    /// Commits one command on PostgreSQL: one statement, one transaction, one flush.
    pub(crate) async fn commit_pg(&self, commit: &Commit) -> Result<(), StoreError> {
        let Self::Postgres(s) = self else { return Err(StoreError::Database("commit_pg on a SQLite store".into())) };
        let body = json!({
            "request_id": commit.request_id,
            "events": commit.events.iter().map(|e| json!({
                "aggregate_type": e.aggregate_type, "aggregate_id": e.aggregate_id, "sequence": e.sequence,
                "event_type": e.event_type, "event_version": e.event_version, "payload": e.payload, "metadata": e.metadata,
            })).collect::<Vec<_>>(),
            "view": commit.view.iter().map(|(id, version, payload)| json!({"view_id": id, "version": version, "payload": payload})).collect::<Vec<_>>(),
            "snapshot": commit.snapshot.iter().map(|(id, snap)| json!({
                "journey_id": id, "schema": SNAPSHOT_SCHEMA, "version": snap.version, "chain_hash": snap.chain_hash, "state": snap.state,
            })).collect::<Vec<_>>(),
            "audit": commit.audit.iter().map(audit_json).collect::<Vec<_>>(),
        });
        let body = body.to_string();
        let row = super::on_pg!(s, pool => sqlx::query(PG_COMMIT).bind(&body).fetch_one(pool).await).map_err(commit_error)?;
        let appended: i64 = sqlx::Row::try_get(&row, "appended")?;
        // Nothing inserted: the stream already holds the request id.
        if appended == 0 {
            return Err(StoreError::Conflict);
        }
        Ok(())
    }

    /// Commits a batch of concurrent commands on SQLite, plus audit rows that ride along, in
    /// one transaction (one flush): a savepoint per command, so a command whose sequence number
    /// is taken is rolled back alone.
    /// Returns each command's outcome; `Err` when the transaction itself failed.
    pub(crate) async fn commit_batch(&self, commits: &[&Commit], rows: &[ToolCallRow]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let Self::Sqlite(s) = self else { return Err(StoreError::Database("commit_batch on a PostgreSQL store".into())) };
        // The write turn, as every SQLite write takes it: without it a projector or identity write
        // can commit between this transaction's first read (the request-id guard) and its first
        // insert, and SQLite refuses the upgrade at once (SQLITE_BUSY_SNAPSHOT) instead of waiting.
        let _turn = s.writer.lock().await;
        let mut tx = s.pool.begin().await?;
        let mut outcomes = Vec::with_capacity(commits.len());
        for commit in commits {
            let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
            let written: Result<bool, sqlx::Error> = async {
                if let (Some(request_id), Some(first)) = (&commit.request_id, commit.events.first()) {
                    let held = sqlx::query(SQLITE_HOLDS_REQUEST)
                        .bind(&first.aggregate_type)
                        .bind(&first.aggregate_id)
                        .bind(request_id)
                        .fetch_optional(&mut *savepoint)
                        .await?;
                    if held.is_some() {
                        return Ok(false);
                    }
                }
                for e in &commit.events {
                    sqlx::query(SQLITE_EVENT)
                        .bind(&e.aggregate_type)
                        .bind(&e.aggregate_id)
                        .bind(i64_of(e.sequence as u64))
                        .bind(&e.event_type)
                        .bind(&e.event_version)
                        .bind(e.payload.to_string())
                        .bind(e.metadata.to_string())
                        .execute(&mut *savepoint)
                        .await?;
                }
                if let Some((id, version, payload)) = &commit.view {
                    sqlx::query(VIEW_UPSERT).bind(id).bind(i64_of(*version)).bind(payload.to_string()).execute(&mut *savepoint).await?;
                }
                if let Some((id, snap)) = &commit.snapshot {
                    sqlx::query(SNAPSHOT_UPSERT)
                        .bind(id)
                        .bind(SNAPSHOT_SCHEMA)
                        .bind(i64_of(snap.version))
                        .bind(&snap.chain_hash)
                        .bind(snap.state.to_string())
                        .execute(&mut *savepoint)
                        .await?;
                }
                if !commit.audit.is_empty() {
                    insert_audit_rows!(&commit.audit).build().execute(&mut *savepoint).await?;
                }
                Ok(true)
            }
            .await;
            match written {
                Ok(true) => {
                    savepoint.commit().await?;
                    outcomes.push(Ok(()));
                }
                // The stream already holds the request id: nothing written.
                Ok(false) => {
                    savepoint.rollback().await?;
                    outcomes.push(Err(StoreError::Conflict));
                }
                Err(e) => {
                    savepoint.rollback().await?;
                    outcomes.push(Err(commit_error(e)));
                }
            }
        }
        if !rows.is_empty() {
            insert_audit_rows!(rows).build().execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(outcomes)
    }
}
