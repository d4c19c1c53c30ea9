//! A command's commit: its events (which carry the idempotency record and the chain link in
//! their metadata), its request id's key (ADR 0010), the full-context view row of the state they
//! reach, a snapshot when one is due, and the tool call's audit rows — one transaction, one
//! flush (ADR 0006). On PostgreSQL it is one statement (data-modifying CTEs over typed
//! parameters, arrays for the rows): one round trip, and
//! concurrent commands share flushes through the server's group commit. On SQLite the writer
//! task hands a batch of concurrent commits to [`Store::commit_batch`], one transaction with a
//! savepoint per command, so one failure rejects only its own command.
//!
//! The event rows keep the shape the store crates write and read (`get_last_events` still reads
//! them); a sequence number another writer took first, or a request id the stream already
//! holds, is [`StoreError::Conflict`].

use serde_json::Value;

use super::audit::{bind_audit_arrays, insert_audit_rows};
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

/// The commits of a batch of concurrent commands on PostgreSQL as one statement: the rows of
/// every command as `unnest` arrays, so one statement text serves any batch and a batch of one.
/// A command without a request id has no key row; one without a view row or a snapshot has none
/// of those rows.
const PG_COMMIT: &str = "
WITH request AS (
    INSERT INTO commit_requests (aggregate_type, aggregate_id, request_id, first_sequence, last_sequence)
    SELECT * FROM unnest(CAST($1 AS text[]), CAST($2 AS text[]), CAST($3 AS text[]), CAST($4 AS bigint[]), CAST($5 AS bigint[]))
), ev AS (
    INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
    SELECT e.aggregate_type, e.aggregate_id, e.sequence, e.event_type, e.event_version, CAST(e.payload AS json), CAST(e.metadata AS json)
    FROM unnest(CAST($6 AS text[]), CAST($7 AS text[]), CAST($8 AS bigint[]), CAST($9 AS text[]), CAST($10 AS text[]),
        CAST($11 AS text[]), CAST($12 AS text[]))
        AS e(aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
    RETURNING 1
), view_row AS (
    INSERT INTO journey_context_view (view_id, version, payload)
    SELECT * FROM unnest(CAST($13 AS text[]), CAST($14 AS bigint[]), CAST($15 AS text[]))
    ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
    WHERE journey_context_view.version < excluded.version
), snapshot_row AS (
    INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state)
    SELECT * FROM unnest(CAST($16 AS text[]), CAST($17 AS bigint[]), CAST($18 AS bigint[]), CAST($19 AS text[]), CAST($20 AS text[]))
    ON CONFLICT (journey_id) DO UPDATE SET schema = excluded.schema, version = excluded.version, chain_hash = excluded.chain_hash, state = excluded.state
    WHERE journey_snapshots.version < excluded.version OR journey_snapshots.schema <> excluded.schema
), audit_rows AS (
    INSERT INTO tool_calls (call_id, phase, writer, tool, journey_id, code, events_appended, duration_ms, at_ms)
    SELECT * FROM unnest(CAST($21 AS text[]), CAST($22 AS text[]), CAST($23 AS text[]), CAST($24 AS text[]), CAST($25 AS text[]),
        CAST($26 AS text[]), CAST($27 AS bigint[]), CAST($28 AS bigint[]), CAST($29 AS bigint[]))
    ON CONFLICT DO NOTHING
)
SELECT COUNT(*) AS appended FROM ev";

const SQLITE_REQUEST: &str =
    "INSERT INTO commit_requests (aggregate_type, aggregate_id, request_id, first_sequence, last_sequence) VALUES ($1, $2, $3, $4, $5)";
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

/// The stream a commit's events belong to and their sequence range; every event of a commit
/// is on one stream.
fn stream_of(commit: &Commit) -> Result<(&str, &str, i64, i64), StoreError> {
    let (Some(first), Some(last)) = (commit.events.first(), commit.events.last()) else {
        return Err(StoreError::Database("a commit without events".into()));
    };
    if commit.events.iter().any(|e| e.aggregate_type != first.aggregate_type || e.aggregate_id != first.aggregate_id) {
        return Err(StoreError::Database("a commit's events span streams".into()));
    }
    Ok((&first.aggregate_type, &first.aggregate_id, i64_of(first.sequence as u64), i64_of(last.sequence as u64)))
}

impl Store {
    /// Commits a batch of concurrent commands on PostgreSQL: one statement, one transaction,
    /// one flush for all of them; a batch of one is a single command's commit. Every value is
    /// its own typed parameter (arrays for the rows), so nothing is parsed twice and the plan has
    /// no lookup for the planner to get wrong. The statement is all or nothing: the writer hands
    /// it commands on distinct streams, and reruns each alone when a batch is refused.
    pub(crate) async fn commit_pg(&self, commits: &[&Commit]) -> Result<(), StoreError> {
        let Self::Postgres(s) = self else { return Err(StoreError::Database("commit_pg on a SQLite store".into())) };
        let streams = commits.iter().map(|c| stream_of(c)).collect::<Result<Vec<_>, _>>()?;
        // The commands with a request id: their stream and first and last sequence, and the id.
        let keyed: Vec<_> = streams.iter().zip(commits).filter_map(|(stream, c)| c.request_id.as_deref().map(|r| (stream, r))).collect();
        let events: Vec<&StoredEvent> = commits.iter().flat_map(|c| &c.events).collect();
        let views: Vec<&(String, u64, Value)> = commits.iter().filter_map(|c| c.view.as_ref()).collect();
        let snapshots: Vec<&(String, Snapshot)> = commits.iter().filter_map(|c| c.snapshot.as_ref()).collect();
        let audit: Vec<ToolCallRow> = commits.iter().flat_map(|c| c.audit.iter().cloned()).collect();
        let query = bind_audit_arrays(
            sqlx::query(PG_COMMIT)
                .bind(keyed.iter().map(|((t, _, _, _), _)| *t).collect::<Vec<_>>())
                .bind(keyed.iter().map(|((_, id, _, _), _)| *id).collect::<Vec<_>>())
                .bind(keyed.iter().map(|(_, request_id)| *request_id).collect::<Vec<_>>())
                .bind(keyed.iter().map(|((_, _, first, _), _)| *first).collect::<Vec<_>>())
                .bind(keyed.iter().map(|((_, _, _, last), _)| *last).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.aggregate_type.as_str()).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.aggregate_id.as_str()).collect::<Vec<_>>())
                .bind(events.iter().map(|e| i64_of(e.sequence as u64)).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.event_type.as_str()).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.event_version.as_str()).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.payload.to_string()).collect::<Vec<_>>())
                .bind(events.iter().map(|e| e.metadata.to_string()).collect::<Vec<_>>())
                .bind(views.iter().map(|(id, _, _)| id.as_str()).collect::<Vec<_>>())
                .bind(views.iter().map(|(_, version, _)| i64_of(*version)).collect::<Vec<_>>())
                .bind(views.iter().map(|(_, _, payload)| payload.to_string()).collect::<Vec<_>>())
                .bind(snapshots.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>())
                .bind(snapshots.iter().map(|_| SNAPSHOT_SCHEMA).collect::<Vec<_>>())
                .bind(snapshots.iter().map(|(_, snap)| i64_of(snap.version)).collect::<Vec<_>>())
                .bind(snapshots.iter().map(|(_, snap)| snap.chain_hash.as_str()).collect::<Vec<_>>())
                .bind(snapshots.iter().map(|(_, snap)| snap.state.to_string()).collect::<Vec<_>>()),
            &audit,
        );
        // A request id a stream holds (the idempotency key) or a sequence number another
        // writer took is a taken key: the whole statement is refused.
        let row = super::on_pg!(s, pool => query.fetch_one(pool).await).map_err(commit_error)?;
        let appended: i64 = sqlx::Row::try_get(&row, "appended")?;
        if usize::try_from(appended).ok() != Some(events.len()) {
            return Err(StoreError::Database(format!("a commit stored {appended} of {} events", events.len())));
        }
        Ok(())
    }

    /// Commits a batch of concurrent commands on SQLite, plus audit rows that ride along, in
    /// one transaction (one flush): a savepoint per command, so a command whose sequence number
    /// is taken is rolled back alone.
    /// Returns each command's outcome; `Err` when the transaction itself failed.
    pub(crate) async fn commit_batch(&self, commits: &[&Commit], rows: &[ToolCallRow]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let Self::Sqlite(s) = self else { return Err(StoreError::Database("commit_batch on a PostgreSQL store".into())) };
        // The write turn, as every SQLite write takes it (`on_writer!`): the batch waits here,
        // not in SQLite's busy handler, while a projector or identity write holds the database.
        let _turn = s.writer.lock().await;
        let mut tx = s.pool.begin().await?;
        let mut outcomes = Vec::with_capacity(commits.len());
        for commit in commits {
            let (aggregate_type, aggregate_id, first, last) = match stream_of(commit) {
                Ok(stream) => stream,
                Err(e) => {
                    outcomes.push(Err(e));
                    continue;
                }
            };
            let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
            let written: Result<(), sqlx::Error> = async {
                if let Some(request_id) = &commit.request_id {
                    // A request id the stream holds is refused by the key (a taken key).
                    sqlx::query(SQLITE_REQUEST)
                        .bind(aggregate_type)
                        .bind(aggregate_id)
                        .bind(request_id)
                        .bind(first)
                        .bind(last)
                        .execute(&mut *savepoint)
                        .await?;
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
                Ok(())
            }
            .await;
            match written {
                Ok(()) => {
                    savepoint.commit().await?;
                    outcomes.push(Ok(()));
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
