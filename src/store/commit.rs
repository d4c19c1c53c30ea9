//! A command's commit: its events (which carry the idempotency record and the chain link in
//! their metadata), its request id's key (ADR 0010), the full-context view row of the state they
//! reach, a snapshot when one is due, and the tool call's audit rows — one transaction, one
//! flush (ADR 0006). On PostgreSQL it is one statement (data-modifying CTEs over typed
//! parameters, arrays for the rows): one round trip, and the commits queued behind it go
//! together as the next statement (ADR 0012), with the checked reads' audit rows queued
//! meanwhile (ADR 0016). On SQLite the writer
//! task hands a batch of concurrent commits to [`Store::commit_batch`], one transaction: all
//! together in one call (the transaction's begin and commit in the same statement text, ADR
//! 0014), or with a savepoint per command when that is refused, so one failure rejects only its
//! own command (ADR 0013).
//!
//! The event rows keep the shape the store crates write and read (`get_last_events` still reads
//! them); a sequence number another writer took first, or a request id the stream already
//! holds, is [`StoreError::Conflict`].

use std::collections::HashSet;

use aggregates::learning_journey::LearningJourney;
use cqrs_es::Aggregate;
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::{Sqlite, SqlitePool};

use super::audit::{audit_columns, audit_row, bind_audit_arrays, judged_audit_rows, written_of};
use super::{i64_of, json_rows, AuditCall, HeldConnection, Snapshot, Store, StoreError, StoredEvent, ToolCallRow, SNAPSHOT_SCHEMA};

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

/// A view row only moves forward (a late commit of an older state leaves it).
macro_rules! view_upsert_tail {
    () => {
        " ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
     WHERE journey_context_view.version < excluded.version"
    };
}
/// A snapshot only moves forward, or to a new schema.
macro_rules! snapshot_upsert_tail {
    () => {
        " ON CONFLICT (journey_id) DO UPDATE SET schema = excluded.schema, version = excluded.version, chain_hash = excluded.chain_hash, state = excluded.state
     WHERE journey_snapshots.version < excluded.version OR journey_snapshots.schema <> excluded.schema"
    };
}

/// The commits of a batch of concurrent commands on PostgreSQL as one statement: the rows of
/// every command as `unnest` arrays, so one statement text serves any batch and a batch of one.
/// A command without a request id has no key row; one without a view row or a snapshot has none
/// of those rows. This is the statement's head, `$1`–`$20`; its tails write the audit rows.
macro_rules! pg_commit_head {
    () => {
        concat!(
    "
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
    SELECT * FROM unnest(CAST($13 AS text[]), CAST($14 AS bigint[]), CAST($15 AS text[]))",
    view_upsert_tail!(),
    "
), snapshot_row AS (
    INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state)
    SELECT * FROM unnest(CAST($16 AS text[]), CAST($17 AS bigint[]), CAST($18 AS bigint[]), CAST($19 AS text[]), CAST($20 AS text[]))",
    snapshot_upsert_tail!()
)
    };
}

/// The audit rows, `$21`–`$29` in `audit_columns!` order, as `unnest` arrays.
macro_rules! pg_audit_arrays {
    () => {
        "unnest(CAST($21 AS text[]), CAST($22 AS text[]), CAST($23 AS text[]), CAST($24 AS text[]), CAST($25 AS text[]),
        CAST($26 AS text[]), CAST($27 AS bigint[]), CAST($28 AS bigint[]), CAST($29 AS bigint[])"
    };
}

/// A batch of commits with their own audit rows.
const PG_COMMIT: &str = concat!(
    pg_commit_head!(),
    "
), audit_rows AS (
    INSERT INTO tool_calls (",
    audit_columns!(),
    ")
    SELECT * FROM ",
    pg_audit_arrays!(),
    ")
    ON CONFLICT DO NOTHING
)
SELECT COUNT(*) AS appended FROM ev"
);

/// `PG_COMMIT` with the audit rows of concurrent reads riding along (ADR 0016), so a read's
/// rows cost no statement of their own: a row with a journey and a version to check (`$30`,
/// `$31`) is written only while that journey's log ends at that version (ADR 0011). The check
/// reads the log as it was before the statement (a statement does not see its own inserts), so
/// it is only asked of journeys the statement does not append to; for those it does,
/// [`Store::commit_pg`] judges the check against the commit's last sequence itself. Returns
/// the calls whose check failed.
const PG_COMMIT_WITH_READS: &str = concat!(
    pg_commit_head!(),
    "
), judged AS (
    ",
    judged_audit_rows!(concat!(pg_audit_arrays!(), ", CAST($30 AS text[]), CAST($31 AS bigint[]))"), "$32"),
    "
), audit_rows AS (
    INSERT INTO tool_calls (",
    audit_columns!(),
    ")
    SELECT ",
    audit_columns!(),
    " FROM judged WHERE current
    ON CONFLICT DO NOTHING
)
SELECT (SELECT COUNT(*) FROM ev) AS appended, ARRAY(SELECT DISTINCT call_id FROM judged WHERE NOT current) AS refused"
);

/// SQLite's one statement text for the commit path's writes (sqlx runs its statements one
/// after another in one call to the connection's thread, stopping at the first error): every
/// command's rows of a table as one JSON array of rows (`json_each`; a column is `->> i`, a
/// payload travels as a JSON string and comes back as its exact text), so one text serves any
/// batch, a batch of one and a batch of no commands, and a batch costs one round trip. Then the
/// audit rows: a checked call's (ADR 0011) only while its journey's log ends at its version,
/// judged after the batch's events; the last statement returns the calls whose check failed.
/// (`WHERE true` is SQLite's rule for an upsert over a `SELECT`.)
macro_rules! sqlite_batch {
    () => {
        concat!(
    "INSERT INTO commit_requests (aggregate_type, aggregate_id, request_id, first_sequence, last_sequence)
    SELECT r.value ->> 0, r.value ->> 1, r.value ->> 2, r.value ->> 3, r.value ->> 4 FROM json_each($1) AS r;
INSERT INTO events (aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata)
    SELECT e.value ->> 0, e.value ->> 1, e.value ->> 2, e.value ->> 3, e.value ->> 4, e.value ->> 5, e.value ->> 6 FROM json_each($2) AS e;
INSERT INTO journey_context_view (view_id, version, payload)
    SELECT v.value ->> 0, v.value ->> 1, v.value ->> 2 FROM json_each($3) AS v WHERE true",
    view_upsert_tail!(),
    ";
INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state)
    SELECT n.value ->> 0, n.value ->> 1, n.value ->> 2, n.value ->> 3, n.value ->> 4 FROM json_each($4) AS n WHERE true",
    snapshot_upsert_tail!(),
    ";
INSERT INTO tool_calls (",
    audit_columns!(),
    ")
    SELECT a.value ->> 0, a.value ->> 1, a.value ->> 2, a.value ->> 3, a.value ->> 4, a.value ->> 5, a.value ->> 6, a.value ->> 7, a.value ->> 8
    FROM json_each($5) AS a
    WHERE a.value ->> 9 IS NULL OR a.value ->> 10 = COALESCE(
        (SELECT MAX(e.sequence) FROM events e WHERE e.aggregate_type = $6 AND e.aggregate_id = a.value ->> 9), 0)
    ON CONFLICT DO NOTHING;
SELECT DISTINCT a.value ->> 0 AS call_id FROM json_each($5) AS a
    WHERE a.value ->> 9 IS NOT NULL AND a.value ->> 10 <> COALESCE(
        (SELECT MAX(e.sequence) FROM events e WHERE e.aggregate_type = $6 AND e.aggregate_id = a.value ->> 9), 0)"
)
    };
}
const SQLITE_BATCH: &str = sqlite_batch!();

/// A whole write turn in one call: `SQLITE_BATCH` between its transaction's begin and commit,
/// so the turn is one round trip to the connection's thread instead of three (each a thread
/// wake-up that cost more than SQLite's own work on a busy machine: ADR 0013). An immediate
/// transaction holds the write lock from the start, so no other process's write moves a head
/// under the checked rows. Each turn first sets the flush its commit waits for: the turns
/// share one connection (ADR 0018), so none may inherit what the one before it set.
const SQLITE_TURN: &str = concat!("PRAGMA synchronous = FULL;\nBEGIN IMMEDIATE;\n", sqlite_batch!(), ";\nCOMMIT");
/// `SQLITE_TURN` for rows no acknowledged write depends on: its commit does not wait for the
/// flush (ADR 0006); the next flushed commit carries it.
const SQLITE_RELAXED_TURN: &str = concat!("PRAGMA synchronous = NORMAL;\nBEGIN IMMEDIATE;\n", sqlite_batch!(), ";\nCOMMIT");

/// Whether a write turn's commit waits for its flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flush {
    /// `synchronous=FULL`: acknowledged only once on disk.
    Full,
    /// `synchronous=NORMAL`: durable with the next flushed commit.
    Relaxed,
}

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
    ///
    /// The rows of `calls` of no commit ride along (ADR 0016), a checked read's (ADR 0011)
    /// judged against the heads the statement leaves; returns the calls whose check refused
    /// their rows.
    pub(crate) async fn commit_pg(
        &self,
        held: &mut HeldConnection,
        commits: &[&Commit],
        calls: &[AuditCall],
    ) -> Result<HashSet<String>, StoreError> {
        let Self::Postgres(s) = self else { return Err(StoreError::Database("commit_pg on a SQLite store".into())) };
        let streams = commits.iter().map(|c| stream_of(c)).collect::<Result<Vec<_>, _>>()?;
        // A check on a journey the statement appends to is judged here: the statement's check
        // sees the log as it was before, and after it the log ends at the commit's last sequence.
        let heads: std::collections::HashMap<&str, i64> = streams
            .iter()
            .filter(|(aggregate_type, _, _, _)| *aggregate_type == LearningJourney::TYPE)
            .map(|(_, aggregate_id, _, last)| (*aggregate_id, *last))
            .collect();
        let mut refused = HashSet::new();
        let mut audit: Vec<ToolCallRow> = commits.iter().flat_map(|c| c.audit.iter().cloned()).collect();
        let mut checks: Vec<Option<(&str, i64)>> = vec![None; audit.len()];
        for call in calls {
            let check = call.if_current.as_ref().map(|c| (c.journey_id.as_str(), i64_of(c.version)));
            let check = match check.and_then(|(journey, version)| heads.get(journey).map(|head| *head == version)) {
                Some(true) => None,
                Some(false) => {
                    refused.extend(call.rows.first().map(|r| r.call_id.clone()));
                    continue;
                }
                None => check,
            };
            audit.extend(call.rows.iter().cloned());
            checks.extend(call.rows.iter().map(|_| check));
        }
        // The commands with a request id: their stream and first and last sequence, and the id.
        let keyed: Vec<_> = streams.iter().zip(commits).filter_map(|(stream, c)| c.request_id.as_deref().map(|r| (stream, r))).collect();
        let events: Vec<&StoredEvent> = commits.iter().flat_map(|c| &c.events).collect();
        let views: Vec<&(String, u64, Value)> = commits.iter().filter_map(|c| c.view.as_ref()).collect();
        let snapshots: Vec<&(String, Snapshot)> = commits.iter().filter_map(|c| c.snapshot.as_ref()).collect();
        let text = if calls.is_empty() { PG_COMMIT } else { PG_COMMIT_WITH_READS };
        let query = bind_audit_arrays(
            sqlx::query(text)
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
        let query = if calls.is_empty() {
            query
        } else {
            query
                .bind(checks.iter().map(|c| c.map(|(journey, _)| journey)).collect::<Vec<_>>())
                .bind(checks.iter().map(|c| c.map(|(_, version)| version)).collect::<Vec<_>>())
                .bind(LearningJourney::TYPE)
        };
        // A request id a stream holds (the idempotency key) or a sequence number another
        // writer took is a taken key: the whole statement is refused.
        let row = super::on_held!(s, held, conn => query.fetch_one(conn).await).map_err(commit_error)?;
        let appended: i64 = sqlx::Row::try_get(&row, "appended")?;
        if usize::try_from(appended).ok() != Some(events.len()) {
            return Err(StoreError::Database(format!("a commit stored {appended} of {} events", events.len())));
        }
        if !calls.is_empty() {
            refused.extend(sqlx::Row::try_get::<Vec<String>, _>(&row, "refused")?);
        }
        Ok(refused)
    }

    /// Commits a batch of concurrent commands on SQLite, with the audit rows of concurrent calls
    /// of no commit (reads, refusals, exits), in one transaction (one flush). First all together,
    /// a statement per table for the batch; when that is refused (a taken key, a refused value),
    /// the transaction is rolled back and the batch is written again with a savepoint per
    /// command, so a command whose sequence number or request id is taken is rolled back alone.
    /// The calls' rows come last: a checked read's (ADR 0011) are judged against the heads the
    /// batch's commits leave.
    /// Returns each command's outcome and, per call, whether its rows were written; `Err` when
    /// the transaction itself failed.
    pub(crate) async fn commit_batch(
        &self,
        commits: &[&Commit],
        calls: &[AuditCall],
    ) -> Result<(Vec<Result<(), StoreError>>, Vec<bool>), StoreError> {
        let Self::Sqlite(s) = self else { return Err(StoreError::Database("commit_batch on a PostgreSQL store".into())) };
        // The write turn, as every SQLite write takes it (`on_writer!`): the batch waits here,
        // not in SQLite's busy handler, while a projector or identity write holds the database.
        // An immediate transaction holds the write lock from the start, so another process's
        // write cannot move a head under the checked rows.
        let _turn = s.writer.lock().await;
        let streams: Vec<_> = commits.iter().map(|c| stream_of(c)).collect();
        if streams.iter().all(Result::is_ok) {
            match write_turn(&s.turns, Flush::Full, commits, calls).await {
                Ok(refused) => return Ok((commits.iter().map(|_| Ok(())).collect(), written_of(calls, &refused))),
                Err(e) if !matches!(e, sqlx::Error::Database(_)) => return Err(e.into()),
                // Refused and rolled back: again with a savepoint per command.
                Err(_) => {}
            }
        }
        let mut tx = s.pool.begin_with("BEGIN IMMEDIATE").await?;
        let mut outcomes = Vec::with_capacity(commits.len());
        for (commit, stream) in commits.iter().zip(streams) {
            if let Err(e) = stream {
                outcomes.push(Err(e));
                continue;
            }
            let mut savepoint = sqlx::Connection::begin(&mut *tx).await?;
            match run_batch(SQLITE_BATCH, &mut savepoint, &[commit], &[]).await {
                Ok(_) => {
                    savepoint.commit().await?;
                    outcomes.push(Ok(()));
                }
                Err(e) => {
                    savepoint.rollback().await?;
                    outcomes.push(Err(commit_error(e)));
                }
            }
        }
        let refused = run_batch(SQLITE_BATCH, &mut tx, &[], calls).await?;
        tx.commit().await?;
        Ok((outcomes, written_of(calls, &refused)))
    }
}

/// Runs a write turn, `SQLITE_TURN` or `SQLITE_RELAXED_TURN`, on a connection of `pool`: the
/// rows of `commits` (whose streams `stream_of` accepted), with their audit rows, and the rows
/// of `calls`, committed together or not at all; returns the calls whose check refused their rows.
pub(crate) async fn write_turn(
    pool: &SqlitePool,
    flush: Flush,
    commits: &[&Commit],
    calls: &[AuditCall],
) -> Result<HashSet<String>, sqlx::Error> {
    let mut turn = OpenTurn { conn: pool.acquire().await?, open: true };
    let text = match flush {
        Flush::Full => SQLITE_TURN,
        Flush::Relaxed => SQLITE_RELAXED_TURN,
    };
    let result = run_batch(text, &mut turn.conn, commits, calls).await;
    // A statement that failed left the transaction open (or never began it): it is rolled back
    // here, and a connection that cannot confirm that is closed rather than lent again.
    turn.open = result.is_err() && sqlx::query("ROLLBACK").execute(&mut *turn.conn).await.is_err();
    result
}

/// A connection inside a write turn that `SQLITE_TURN` began itself, so sqlx cannot know of
/// the transaction: should the turn stop half-way (a failed rollback, a dropped future), the
/// connection is closed, which rolls back what it held, instead of going back to the pool with
/// an open transaction.
struct OpenTurn {
    conn: PoolConnection<Sqlite>,
    open: bool,
}

impl Drop for OpenTurn {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}

/// Runs `text` — `SQLITE_BATCH` inside a transaction the caller holds, or `SQLITE_TURN` — for
/// the rows of `commits`, with their audit rows, and the rows of `calls`; returns the calls whose
/// check refused their rows. The first error stops it.
async fn run_batch(
    text: &'static str,
    conn: &mut sqlx::SqliteConnection,
    commits: &[&Commit],
    calls: &[AuditCall],
) -> Result<HashSet<String>, sqlx::Error> {
    // A request id the stream holds is refused by its key (a taken key).
    let requests = commits.iter().filter_map(|commit| match (&commit.request_id, stream_of(commit)) {
        (Some(request_id), Ok((aggregate_type, aggregate_id, first, last))) => {
            Some((aggregate_type, aggregate_id, request_id.as_str(), first, last))
        }
        _ => None,
    });
    let events = commits.iter().flat_map(|c| &c.events).map(|e| {
        let (payload, metadata) = (e.payload.to_string(), e.metadata.to_string());
        (&e.aggregate_type, &e.aggregate_id, i64_of(e.sequence as u64), &e.event_type, &e.event_version, payload, metadata)
    });
    let views = commits.iter().filter_map(|c| c.view.as_ref()).map(|(id, version, payload)| (id, i64_of(*version), payload.to_string()));
    let snapshots = commits
        .iter()
        .filter_map(|c| c.snapshot.as_ref())
        .map(|(id, snap)| (id, SNAPSHOT_SCHEMA, i64_of(snap.version), &snap.chain_hash, snap.state.to_string()));
    let audit = commits
        .iter()
        .flat_map(|c| c.audit.iter().map(|r| audit_row(r, None)))
        .chain(calls.iter().flat_map(|c| c.rows.iter().map(|r| audit_row(r, c.if_current.as_ref()))));
    let refused = sqlx::query(text)
        .bind(json_rows(requests)?)
        .bind(json_rows(events)?)
        .bind(json_rows(views)?)
        .bind(json_rows(snapshots)?)
        .bind(json_rows(audit)?)
        .bind(LearningJourney::TYPE)
        .fetch_all(&mut *conn)
        .await?;
    refused.iter().map(|r| sqlx::Row::try_get::<String, _>(r, "call_id")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{written_of, DbUrl, IfCurrent, PoolSettings};
    use sqlx::Row;

    fn event(journey: &str, sequence: usize, payload: Value) -> StoredEvent {
        StoredEvent::new(
            journey.into(),
            sequence,
            LearningJourney::TYPE.into(),
            "E".into(),
            "1".into(),
            payload,
            serde_json::json!({"requestId": "r"}),
        )
    }

    /// A migrated SQLite store in a fresh file, and the file (for `remove_scratch`).
    async fn scratch_store(settings: &PoolSettings) -> (Store, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!("skillpilot-commit-{}.db", uuid::Uuid::new_v4()));
        let store = Store::connect(&DbUrl::Sqlite(path.display().to_string()), settings).await.unwrap();
        store.migrate().await.unwrap();
        (store, path)
    }

    async fn remove_scratch(store: Store, path: std::path::PathBuf) {
        store.close().await;
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    fn commit(journey: &str, sequence: usize, payload: Value) -> Commit {
        let row = ToolCallRow {
            call_id: format!("call-{journey}-{sequence}"),
            phase: "completed",
            writer: "handler",
            tool: "tool".into(),
            journey_id: None,
            code: None,
            events_appended: 1,
            duration_ms: Some(3),
            at_ms: 1_700_000_000_000,
        };
        Commit {
            request_id: Some(format!("r-{sequence}")),
            events: vec![event(journey, sequence, payload.clone())],
            view: Some((journey.into(), sequence as u64, payload.clone())),
            snapshot: Some((journey.into(), Snapshot { version: sequence as u64, chain_hash: "h".into(), state: payload })),
            audit: vec![row],
        }
    }

    /// A migrated store in a fresh PostgreSQL database on the test server (scripts/test finds or
    /// starts it and names it in `SKILLPILOT_TEST_POSTGRES_URL`), the admin URL and the name.
    async fn scratch_postgres() -> (Store, String, String) {
        let admin = std::env::var("SKILLPILOT_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());
        let (url, name) =
            crate::store::create_scratch_postgres(&admin, "sp_test_").await.expect("PostgreSQL is required (run scripts/test)");
        let store = Store::connect(&DbUrl::Postgres(url), &PoolSettings::default()).await.unwrap();
        store.migrate().await.unwrap();
        (store, admin, name)
    }

    #[tokio::test]
    async fn reads_riding_in_a_postgresql_commit_are_judged_against_the_heads_it_leaves() {
        let (store, admin, name) = scratch_postgres().await;
        let mut held = HeldConnection::default();
        let (a1, b1) = (commit("a", 1, serde_json::json!({})), commit("b", 1, serde_json::json!({})));
        assert!(store.commit_pg(&mut held, &[&a1, &b1], &[]).await.unwrap().is_empty());

        // With `a`'s second event in the statement: a read built on version 2 is current once it
        // commits, one built on version 1 is not (though the log ends at 1 when the statement
        // starts); on `b`, which the statement leaves alone, the log decides; an unchecked row
        // rides as it is.
        let a2 = commit("a", 2, serde_json::json!({}));
        let read = |call_id: &str, check: Option<(&str, u64)>| AuditCall {
            rows: vec![ToolCallRow { call_id: call_id.into(), ..a1.audit[0].clone() }],
            if_current: check.map(|(journey, version)| IfCurrent { journey_id: journey.into(), version }),
        };
        let calls = [
            read("a-after", Some(("a", 2))),
            read("a-before", Some(("a", 1))),
            read("b-current", Some(("b", 1))),
            read("b-ahead", Some(("b", 2))),
            read("unchecked", None),
        ];
        let refused = store.commit_pg(&mut held, &[&a2], &calls).await.unwrap();
        assert_eq!(written_of(&calls, &refused), [true, false, true, false, true]);
        let Store::Postgres(s) = &store else { unreachable!() };
        let written: Vec<String> = sqlx::query_scalar("SELECT call_id FROM tool_calls WHERE call_id NOT LIKE 'call-%' ORDER BY call_id")
            .fetch_all(&s.pool)
            .await
            .unwrap();
        assert_eq!(written, ["a-after", "b-current", "unchecked"]);
        assert_eq!(sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM events").fetch_one(&s.pool).await.unwrap(), 3);

        // A refused statement writes none of the rows riding in it.
        let taken = Commit { request_id: Some("r-other".into()), ..commit("a", 2, serde_json::json!({})) };
        let refused = store.commit_pg(&mut held, &[&taken], &[read("refused-with-it", None)]).await;
        assert!(matches!(refused, Err(StoreError::Conflict)), "{refused:?}");
        let count = sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM tool_calls WHERE call_id = 'refused-with-it'");
        assert_eq!(count.fetch_one(&s.pool).await.unwrap(), 0);

        held.release();
        store.close().await;
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin).await.unwrap();
        sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)")).execute(&mut conn).await.unwrap();
    }

    #[tokio::test]
    async fn a_refused_write_turn_leaves_its_connection_without_a_transaction() {
        // One connection: the refused turn's connection is the one used next.
        let (store, path) = scratch_store(&PoolSettings { max_connections: 1, ..PoolSettings::default() }).await;
        let Store::Sqlite(s) = &store else { unreachable!() };
        let first = commit("a", 1, serde_json::json!({}));
        write_turn(&s.pool, Flush::Full, &[&first], &[]).await.unwrap();
        // The same sequence number again: refused by its key half-way through the turn.
        let taken = Commit { request_id: Some("r-other".into()), ..commit("a", 1, serde_json::json!({"n": 2})) };
        let refused = write_turn(&s.pool, Flush::Full, &[&taken], &[]).await;
        assert!(matches!(&refused, Err(sqlx::Error::Database(_))), "{refused:?}");
        // Nothing of it stayed, and the connection takes a new transaction (it would refuse one
        // inside another) whose writes are committed.
        let next = commit("b", 1, serde_json::json!({}));
        write_turn(&s.pool, Flush::Full, &[&next], &[]).await.unwrap();
        let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql).fetch_one(&s.pool);
        assert_eq!(count("SELECT COUNT(*) FROM events").await.unwrap(), 2);
        assert_eq!(count("SELECT COUNT(*) FROM commit_requests WHERE request_id = 'r-other'").await.unwrap(), 0);
        remove_scratch(store, path).await;
    }

    #[tokio::test]
    async fn every_write_turn_on_the_shared_connection_sets_its_own_flush() {
        let (store, path) = scratch_store(&PoolSettings::default()).await;
        let Store::Sqlite(s) = &store else { unreachable!() };
        let synchronous = || sqlx::query_scalar::<_, i64>("PRAGMA synchronous").fetch_one(&s.turns);
        // SQLite's numbering: NORMAL is 1, FULL is 2.
        write_turn(&s.turns, Flush::Relaxed, &[], &[]).await.unwrap();
        assert_eq!(synchronous().await.unwrap(), 1);
        // A commit after a relaxed turn on the same connection still waits for its flush.
        write_turn(&s.turns, Flush::Full, &[&commit("a", 1, serde_json::json!({}))], &[]).await.unwrap();
        assert_eq!(synchronous().await.unwrap(), 2);
        // And a commit whose turn is refused half-way has set it before anything was written.
        write_turn(&s.turns, Flush::Relaxed, &[], &[]).await.unwrap();
        let taken = Commit { request_id: Some("r-other".into()), ..commit("a", 1, serde_json::json!({})) };
        assert!(write_turn(&s.turns, Flush::Full, &[&taken], &[]).await.is_err());
        assert_eq!(synchronous().await.unwrap(), 2);
        remove_scratch(store, path).await;
    }

    #[tokio::test]
    async fn a_sqlite_batch_stores_every_value_as_its_exact_text_and_refuses_a_taken_key_alone() {
        let (store, path) = scratch_store(&PoolSettings::default()).await;
        // Text that JSON escapes (quotes, backslashes, control characters, a line separator),
        // text it does not (non-ASCII), and numbers at the edges of their types.
        let awkward = serde_json::json!({
            "text": "\"quoted\" \\ back\\slash \n\t\u{0001} \u{2028} é 漢字 🎓 \\u0041",
            "big": i64::MAX, "small": i64::MIN, "float": 0.1, "nested": [null, true, {"z": 1, "a": 2}]
        });
        let (a, b) = (commit("a", 1, awkward.clone()), commit("b", 1, serde_json::json!({"n": 1})));
        let (outcomes, _) = store.commit_batch(&[&a, &b], &[]).await.unwrap();
        assert!(outcomes.iter().all(Result::is_ok), "{outcomes:?}");

        let Store::Sqlite(s) = &store else { unreachable!() };
        let row = sqlx::query("SELECT e.payload, v.payload AS view, n.state FROM events e, journey_context_view v, journey_snapshots n WHERE e.aggregate_id = 'a' AND v.view_id = 'a' AND n.journey_id = 'a'")
            .fetch_one(&s.pool)
            .await
            .unwrap();
        for column in ["payload", "view", "state"] {
            assert_eq!(row.get::<String, _>(column), awkward.to_string(), "{column}");
        }
        let audit = sqlx::query("SELECT phase, journey_id, code, duration_ms FROM tool_calls WHERE call_id = 'call-a-1'")
            .fetch_one(&s.pool)
            .await
            .unwrap();
        assert_eq!(audit.get::<String, _>("phase"), "completed");
        assert_eq!(audit.get::<Option<String>, _>("journey_id"), None);
        assert_eq!(audit.get::<Option<String>, _>("code"), None);
        assert_eq!(audit.get::<Option<i64>, _>("duration_ms"), Some(3));

        // The same request id on `a` again, next to a fresh command: only the retry is refused,
        // and the fresh command and the riding audit row are written; of two checked reads, the
        // one on the head the batch leaves is written, the one on a version `a` never reached
        // is not.
        let retry = Commit { request_id: Some("r-1".into()), ..commit("a", 2, serde_json::json!({})) };
        let fresh = commit("c", 1, serde_json::json!({}));
        let riding = ToolCallRow { call_id: "riding".into(), ..a.audit[0].clone() };
        let read = |call_id: &str, journey: &str, version| AuditCall {
            rows: vec![ToolCallRow { call_id: call_id.into(), ..a.audit[0].clone() }],
            if_current: Some(IfCurrent { journey_id: journey.into(), version }),
        };
        let calls = [AuditCall { rows: vec![riding], if_current: None }, read("current", "c", 1), read("stale", "a", 2)];
        let (outcomes, written) = store.commit_batch(&[&retry, &fresh], &calls).await.unwrap();
        assert_eq!(written, [true, true, false]);
        assert!(matches!(outcomes[0], Err(StoreError::Conflict)), "{outcomes:?}");
        assert!(outcomes[1].is_ok(), "{outcomes:?}");
        let count = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql).fetch_one(&s.pool);
        assert_eq!(count("SELECT COUNT(*) FROM events WHERE aggregate_id = 'a'").await.unwrap(), 1);
        assert_eq!(count("SELECT COUNT(*) FROM events WHERE aggregate_id = 'c'").await.unwrap(), 1);
        assert_eq!(count("SELECT COUNT(*) FROM tool_calls WHERE call_id IN ('riding', 'current')").await.unwrap(), 2);
        assert_eq!(count("SELECT COUNT(*) FROM tool_calls WHERE call_id = 'stale'").await.unwrap(), 0);
        remove_scratch(store, path).await;
    }
}
