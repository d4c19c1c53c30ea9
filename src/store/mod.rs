//! The stores: the embedded SQLite default (sqlite-es) and PostgreSQL (postgres-es), behind
//! one [`Store`] handle so no store generic leaks into handlers. Events are written through
//! the store crates' own repositories (their transaction, their conflict mapping); everything
//! else here is plain SQL written once and run on both, since both dialects accept it.

pub mod backup;
pub mod chain;
pub mod checkpoints;
pub mod identity;
pub mod oauth;
pub mod projector;

use std::str::FromStr;
use std::time::Duration;

use aggregates::learning_journey::LearningJourney;
use cqrs_es::persist::{PersistedEventRepository, PersistenceError, SerializedEvent};
use cqrs_es::Aggregate;
use postgres_es::PostgresEventRepository;
use serde_json::Value;
use sqlite_es::SqliteEventRepository;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Row;

/// Why a store call failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be reached (down, pool exhausted, I/O). An exact retry is safe.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// Another writer committed the same sequence number first.
    #[error("optimistic concurrency conflict")]
    Conflict,
    /// The stored data cannot be read back (a defect or tampering).
    #[error("stored data is unreadable: {0}")]
    Corrupt(String),
    /// The database refused a value of the request (PostgreSQL's data exceptions, class 22: a
    /// NUL byte in a text, an invalid byte sequence, a number out of range). Bad input, not a
    /// fault: nothing was written.
    #[error("the database refused a value: {0}")]
    Rejected(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Database(String),
}

/// Whether a database error is a data exception (SQLSTATE class 22) — the input's fault.
fn is_data_exception(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("22")))
}

/// Pool acquisitions that timed out in this process (every one becomes `STORE_UNAVAILABLE`);
/// process-wide because the conversion below has no handle to a store.
static POOL_TIMEOUTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl From<sqlx::Error> for StoreError {
    fn from(err: sqlx::Error) -> Self {
        if matches!(err, sqlx::Error::PoolTimedOut) {
            POOL_TIMEOUTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        match err {
            sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                Self::Unavailable(err.to_string())
            }
            sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("08") || c == "57P01" || c == "5" || c == "6") => {
                Self::Unavailable(db.to_string())
            }
            ref e if is_data_exception(e) => Self::Rejected(err.to_string()),
            other => Self::Database(other.to_string()),
        }
    }
}

impl From<PersistenceError> for StoreError {
    fn from(err: PersistenceError) -> Self {
        match err {
            PersistenceError::OptimisticLockError => Self::Conflict,
            PersistenceError::DeserializationError(e) => Self::Corrupt(e.to_string()),
            // The store crates box sqlx's error: a data exception is still the input's fault.
            PersistenceError::ConnectionError(e) | PersistenceError::UnknownError(e) => match e.downcast_ref::<sqlx::Error>() {
                Some(inner) if is_data_exception(inner) => Self::Rejected(e.to_string()),
                _ => Self::Unavailable(e.to_string()),
            },
        }
    }
}

/// The embedded store.
pub struct SqliteStore {
    pool: SqlitePool,
    repo: SqliteEventRepository,
    /// SQLite has one writer; taking turns here instead of in SQLite's busy handler (which
    /// sleeps in millisecond steps) keeps write latency flat under concurrency.
    writer: tokio::sync::Mutex<()>,
}

/// The production store.
pub struct PgStore {
    pool: PgPool,
    repo: PostgresEventRepository,
}

/// One handle for either store.
pub enum Store {
    /// SQLite file, WAL, `synchronous=FULL`.
    Sqlite(SqliteStore),
    Postgres(PgStore),
}

/// Runs the same body against whichever pool the store has (the SQL is written once).
macro_rules! on_pool_impl {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite(s) => {
                let $pool = &s.pool;
                $body
            }
            Store::Postgres(s) => {
                let $pool = &s.pool;
                $body
            }
        }
    };
}

pub(crate) use on_pool_impl as on_pool;

/// Where a database URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DbUrl {
    /// A SQLite file path.
    Sqlite(String),
    /// A PostgreSQL URL.
    Postgres(String),
}

impl DbUrl {
    /// Reads `postgres://…`, `postgresql://…`, `sqlite://PATH`, `sqlite:PATH` or a plain path.
    pub fn parse(url: &str) -> Self {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Self::Postgres(url.to_owned())
        } else {
            let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url);
            Self::Sqlite(path.to_owned())
        }
    }
}

impl DbUrl {
    /// Checks the URL without connecting or creating anything: a known scheme, a PostgreSQL URL
    /// that parses, a SQLite file whose folder exists.
    pub fn validate(&self) -> anyhow::Result<()> {
        match self {
            Self::Postgres(url) => {
                PgConnectOptions::from_str(url).map_err(|e| anyhow::anyhow!("the database URL is not a valid PostgreSQL URL: {e}"))?;
            }
            Self::Sqlite(path) => {
                if let Some((scheme, _)) = path.split_once("://") {
                    anyhow::bail!("unknown database scheme `{scheme}://`: use a SQLite file (sqlite://PATH) or postgres://…");
                }
                anyhow::ensure!(!path.trim().is_empty(), "the SQLite database path is empty");
                let parent = std::path::Path::new(path).parent().filter(|p| !p.as_os_str().is_empty());
                if let Some(dir) = parent {
                    anyhow::ensure!(
                        dir.is_dir(),
                        "the folder of the SQLite database {path} does not exist: create {} first",
                        dir.display()
                    );
                }
            }
        }
        Ok(())
    }

    /// The SQLite file, when this is one.
    pub fn sqlite_path(&self) -> Option<&std::path::Path> {
        match self {
            Self::Sqlite(p) => Some(std::path::Path::new(p)),
            Self::Postgres(_) => None,
        }
    }
}

/// Pool sizes and timeouts.
#[derive(Clone, Debug)]
pub struct PoolSettings {
    /// Largest number of connections.
    pub max_connections: u32,
    /// How long to wait for a connection before `STORE_UNAVAILABLE`.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self { max_connections: 10, acquire_timeout: Duration::from_secs(5) }
    }
}

/// An event as stored, with its metadata.
pub type StoredEvent = SerializedEvent;

/// A snapshot row.
pub struct Snapshot {
    /// Version the state reflects.
    pub version: u64,
    /// Chain hash of the event at that version.
    pub chain_hash: String,
    /// The serialized state.
    pub state: Value,
}

/// A learner's learning session row.
#[derive(Clone, Debug)]
pub struct SessionRow {
    /// Opaque session id.
    pub session_id: String,
    pub learner_id: String,
    pub journey_id: String,
    /// IANA time zone.
    pub time_zone: String,
    /// Start, epoch milliseconds.
    pub started_ms: i64,
}

/// Bumped whenever `LearningJourney`'s serialized shape changes: older snapshots are ignored.
pub const SNAPSHOT_SCHEMA: i64 = 1;

pub(crate) const EVENT_COLUMNS: &str = "aggregate_type, aggregate_id, sequence, event_type, event_version, CAST(payload AS TEXT) AS payload, CAST(metadata AS TEXT) AS metadata";

pub(crate) fn row_to_event<R: Row>(row: &R) -> Result<StoredEvent, StoreError>
where
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    let json = |col: &str| -> Result<Value, StoreError> {
        let text: String = row.try_get(col).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
    };
    let get = |col: &str| -> Result<String, StoreError> { row.try_get(col).map_err(|e| StoreError::Corrupt(e.to_string())) };
    let sequence: i64 = row.try_get("sequence").map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(SerializedEvent {
        aggregate_id: get("aggregate_id")?,
        sequence: usize::try_from(sequence).map_err(|e| StoreError::Corrupt(e.to_string()))?,
        aggregate_type: get("aggregate_type")?,
        event_type: get("event_type")?,
        event_version: get("event_version")?,
        payload: json("payload")?,
        metadata: json("metadata")?,
    })
}

fn session_row<R: Row>(r: &R) -> Result<SessionRow, sqlx::Error>
where
    for<'r> String: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> i64: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    for<'r> &'r str: sqlx::ColumnIndex<R>,
{
    Ok(SessionRow {
        session_id: r.try_get("session_id")?,
        learner_id: r.try_get("learner_id")?,
        journey_id: r.try_get("journey_id")?,
        time_zone: r.try_get("time_zone")?,
        started_ms: r.try_get("started_ms")?,
    })
}

fn i64_of(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

impl Store {
    /// Connects (creating the SQLite file if needed). Pools are built here rather than with the
    /// store crates' helpers, which panic on failure and use `synchronous=NORMAL`.
    pub async fn connect(url: &DbUrl, settings: &PoolSettings) -> Result<Self, StoreError> {
        match url {
            DbUrl::Sqlite(path) => {
                let options = SqliteConnectOptions::from_str(&format!("sqlite://{path}"))?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .foreign_keys(true)
                    .busy_timeout(Duration::from_secs(10));
                let pool = SqlitePoolOptions::new()
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                let repo = SqliteEventRepository::new(pool.clone());
                Ok(Self::Sqlite(SqliteStore { pool, repo, writer: tokio::sync::Mutex::new(()) }))
            }
            DbUrl::Postgres(url) => {
                let options = PgConnectOptions::from_str(url)?;
                let pool = PgPoolOptions::new()
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                let repo = PostgresEventRepository::new(pool.clone());
                Ok(Self::Postgres(PgStore { pool, repo }))
            }
        }
    }

    /// Waits for this process's turn to write (SQLite only; PostgreSQL writes concurrently).
    pub async fn write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self {
            Self::Sqlite(s) => Some(s.writer.lock().await),
            Self::Postgres(_) => None,
        }
    }

    /// Which store this is, for logs and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Sqlite(_) => "sqlite",
            Self::Postgres(_) => "postgres",
        }
    }

    /// Applies the migrations of `migrations/sqlite` or `migrations/postgres`.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let result = match self {
            Self::Sqlite(s) => sqlx::migrate!("./migrations/sqlite").run(&s.pool).await,
            Self::Postgres(s) => sqlx::migrate!("./migrations/postgres").run(&s.pool).await,
        };
        result.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(err) => StoreError::from(err),
            other => StoreError::Database(other.to_string()),
        })
    }

    /// A cheap round trip, for `/readyz`.
    pub async fn ping(&self) -> Result<(), StoreError> {
        on_pool!(self, pool => sqlx::query("SELECT 1").execute(pool).await.map(|_| ()).map_err(StoreError::from))
    }

    /// The pool as a scrape reports it.
    pub fn pool_sample(&self, max: u32) -> crate::metrics::PoolSample {
        let (size, idle) = on_pool!(self, pool => (pool.size(), u32::try_from(pool.num_idle()).unwrap_or(u32::MAX)));
        crate::metrics::PoolSample { size, idle, max, timeouts: POOL_TIMEOUTS.load(std::sync::atomic::Ordering::Relaxed) }
    }

    /// Closes the pool (graceful shutdown).
    pub async fn close(&self) {
        on_pool!(self, pool => pool.close().await)
    }

    /// Appends the events of one commit in one transaction of the store crate. A sequence
    /// number another writer took first gives [`StoreError::Conflict`].
    pub async fn append(&self, events: &[StoredEvent]) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        match self {
            Self::Sqlite(s) => s.repo.persist::<LearningJourney>(events, None).await?,
            Self::Postgres(s) => s.repo.persist::<LearningJourney>(events, None).await?,
        }
        Ok(())
    }

    /// Events of a journey after `after` (0 for all), in order.
    pub async fn events_after(&self, journey_id: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let events = match self {
            Self::Sqlite(s) => s.repo.get_last_events::<LearningJourney>(journey_id, after as usize).await?,
            Self::Postgres(s) => s.repo.get_last_events::<LearningJourney>(journey_id, after as usize).await?,
        };
        Ok(events)
    }

    /// Events of a journey up to and including `upto`, in order.
    pub async fn events_upto(&self, journey_id: &str, upto: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence <= $3 ORDER BY sequence"
        );
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).bind(LearningJourney::TYPE).bind(journey_id).bind(i64_of(upto)).fetch_all(pool).await?;
            rows.iter().map(row_to_event).collect()
        })
    }

    /// The events of the commit that carried `request_id` on this journey (empty if none).
    pub async fn find_commit(&self, journey_id: &str, request_id: &str) -> Result<Vec<StoredEvent>, StoreError> {
        // No ORDER BY: with it, both planners prefer walking the primary key (the journey's whole
        // history) over the request-id index; a commit has a handful of events, sorted here.
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND (metadata ->> 'requestId') = $3"
        );
        let mut events: Vec<StoredEvent> = on_pool!(self, pool => {
            let rows = sqlx::query(&sql).bind(LearningJourney::TYPE).bind(journey_id).bind(request_id).fetch_all(pool).await?;
            rows.iter().map(row_to_event).collect::<Result<Vec<_>, StoreError>>()
        })?;
        events.sort_by_key(|e| e.sequence);
        Ok(events)
    }

    /// A page of all events in (aggregate id, sequence) order, after the given position.
    pub async fn scan_events(&self, after: Option<(&str, u64)>, limit: i64) -> Result<Vec<StoredEvent>, StoreError> {
        let (id, seq) = after.unwrap_or(("", 0));
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = $1 AND (aggregate_id > $2 OR (aggregate_id = $2 AND sequence > $3)) ORDER BY aggregate_id, sequence LIMIT $4"
        );
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).bind(LearningJourney::TYPE).bind(id).bind(i64_of(seq)).bind(limit).fetch_all(pool).await?;
            rows.iter().map(row_to_event).collect()
        })
    }

    /// The last sequence number of every journey.
    pub async fn stream_heads(&self) -> Result<Vec<(String, u64)>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query("SELECT aggregate_id, MAX(sequence) AS head FROM events WHERE aggregate_type = $1 GROUP BY aggregate_id ORDER BY aggregate_id")
                .bind(LearningJourney::TYPE)
                .fetch_all(pool)
                .await?;
            rows.iter()
                .map(|r| {
                    let id: String = r.try_get("aggregate_id")?;
                    let head: i64 = r.try_get("head")?;
                    Ok((id, u64::try_from(head).unwrap_or(0)))
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// The snapshot of a journey, if one of the current schema exists.
    pub async fn snapshot(&self, journey_id: &str) -> Result<Option<Snapshot>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT version, chain_hash, state FROM journey_snapshots WHERE journey_id = $1 AND schema = $2")
                .bind(journey_id)
                .bind(SNAPSHOT_SCHEMA)
                .fetch_optional(pool)
                .await?;
            match row {
                None => Ok(None),
                Some(r) => {
                    let version: i64 = r.try_get("version")?;
                    let state: String = r.try_get("state")?;
                    Ok(Some(Snapshot {
                        version: u64::try_from(version).unwrap_or(0),
                        chain_hash: r.try_get("chain_hash")?,
                        state: serde_json::from_str(&state).map_err(|e| StoreError::Corrupt(e.to_string()))?,
                    }))
                }
            }
        })
    }

    /// Stores a snapshot unless a newer one is there.
    pub async fn save_snapshot(&self, journey_id: &str, snapshot: &Snapshot) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let sql = "INSERT INTO journey_snapshots (journey_id, schema, version, chain_hash, state) VALUES ($1, $2, $3, $4, $5)
                   ON CONFLICT (journey_id) DO UPDATE SET schema = excluded.schema, version = excluded.version, chain_hash = excluded.chain_hash, state = excluded.state
                   WHERE journey_snapshots.version < excluded.version OR journey_snapshots.schema <> excluded.schema";
        on_pool!(self, pool => {
            sqlx::query(sql)
                .bind(journey_id)
                .bind(SNAPSHOT_SCHEMA)
                .bind(i64_of(snapshot.version))
                .bind(&snapshot.chain_hash)
                .bind(snapshot.state.to_string())
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Upserts a view row unless the stored one reflects a newer version.
    pub async fn save_view(&self, table: ViewTable, view_id: &str, version: u64, payload: &Value) -> Result<(), StoreError> {
        self.save_views(table, &[(view_id.to_owned(), version, payload.clone())]).await
    }

    /// Upserts many view rows in one transaction (a rebuild), each only forward.
    pub async fn save_views(&self, table: ViewTable, rows: &[(String, u64, Value)]) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let t = table.name();
        let sql = format!(
            "INSERT INTO {t} (view_id, version, payload) VALUES ($1, $2, $3)
             ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
             WHERE {t}.version < excluded.version"
        );
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for (view_id, version, payload) in rows {
                sqlx::query(&sql).bind(view_id).bind(i64_of(*version)).bind(payload.to_string()).execute(&mut *tx).await?;
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// Every row of a view table: id → (version, payload).
    pub async fn views(&self, table: ViewTable) -> Result<Vec<(String, u64, Value)>, StoreError> {
        let sql = format!("SELECT view_id, version, payload FROM {} ORDER BY view_id", table.name());
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).fetch_all(pool).await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                let id: String = r.try_get("view_id")?;
                let version: i64 = r.try_get("version")?;
                let payload: String = r.try_get("payload")?;
                let payload = serde_json::from_str(&payload).map_err(|e| StoreError::Corrupt(e.to_string()))?;
                out.push((id, u64::try_from(version).unwrap_or(0), payload));
            }
            Ok(out)
        })
    }

    /// Empties a view table (the shadow table before a replay).
    pub async fn clear_view(&self, table: ViewTable) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let sql = format!("DELETE FROM {}", table.name());
        on_pool!(self, pool => {
            sqlx::query(&sql).execute(pool).await?;
            Ok(())
        })
    }

    /// Creates a learner and returns its id.
    pub async fn create_learner(&self, learner_id: &str, name: &str, now_ms: i64) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO learners (learner_id, name, created_ms) VALUES ($1, $2, $3)")
                .bind(learner_id)
                .bind(name)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// Stores a bearer token's hash with its role.
    pub async fn insert_token(&self, token_hash: &str, role: &str, learner_id: Option<&str>, now_ms: i64) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO tokens (token_hash, role, learner_id, created_ms) VALUES ($1, $2, $3, $4)")
                .bind(token_hash)
                .bind(role)
                .bind(learner_id)
                .bind(now_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The role and learner of a token hash.
    pub async fn token(&self, token_hash: &str) -> Result<Option<(String, Option<String>)>, StoreError> {
        on_pool!(self, pool => {
            // A revoked token, or any token of a revoked learner, is unknown.
            let row = sqlx::query(
                "SELECT t.role, t.learner_id FROM tokens t LEFT JOIN learners l ON l.learner_id = t.learner_id \
                 WHERE t.token_hash = $1 AND t.revoked_ms IS NULL AND l.revoked_ms IS NULL",
            )
            .bind(token_hash)
            .fetch_optional(pool)
            .await?;
            match row {
                None => Ok(None),
                Some(r) => Ok(Some((r.try_get("role")?, r.try_get("learner_id")?))),
            }
        })
    }

    /// The learner's journey on a curriculum, created with `new_id` if there is none yet.
    /// Returns the id and whether it was created now.
    pub async fn journey_for(
        &self,
        learner_id: &str,
        curriculum_id: &str,
        new_id: &str,
        now_ms: i64,
    ) -> Result<(String, bool), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            let inserted = sqlx::query(
                "INSERT INTO journeys (journey_id, learner_id, curriculum_id, created_ms) VALUES ($1, $2, $3, $4) ON CONFLICT (learner_id, curriculum_id) DO NOTHING",
            )
            .bind(new_id)
            .bind(learner_id)
            .bind(curriculum_id)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected();
            let row = sqlx::query("SELECT journey_id FROM journeys WHERE learner_id = $1 AND curriculum_id = $2")
                .bind(learner_id)
                .bind(curriculum_id)
                .fetch_one(pool)
                .await?;
            Ok((row.try_get("journey_id")?, inserted == 1))
        })
    }

    /// Records a learning session.
    pub async fn insert_session(&self, s: &SessionRow) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            sqlx::query("INSERT INTO learning_sessions (session_id, learner_id, journey_id, time_zone, started_ms) VALUES ($1, $2, $3, $4, $5)")
                .bind(&s.session_id)
                .bind(&s.learner_id)
                .bind(&s.journey_id)
                .bind(&s.time_zone)
                .bind(s.started_ms)
                .execute(pool)
                .await?;
            Ok(())
        })
    }

    /// The learner's most recently started session.
    pub async fn latest_session(&self, learner_id: &str) -> Result<Option<SessionRow>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query(
                "SELECT session_id, learner_id, journey_id, time_zone, started_ms FROM learning_sessions WHERE learner_id = $1 ORDER BY started_ms DESC, session_id DESC LIMIT 1",
            )
            .bind(learner_id)
            .fetch_optional(pool)
            .await?;
            row.map(|r| session_row(&r)).transpose().map_err(StoreError::from)
        })
    }

    /// A session by id.
    pub async fn session(&self, session_id: &str) -> Result<Option<SessionRow>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT session_id, learner_id, journey_id, time_zone, started_ms FROM learning_sessions WHERE session_id = $1")
                .bind(session_id)
                .fetch_optional(pool)
                .await?;
            row.map(|r| session_row(&r)).transpose().map_err(StoreError::from)
        })
    }
}

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

/// A row written after a call.
#[derive(Clone, Debug)]
pub enum SideRow {
    /// A tool-call audit row.
    Audit(ToolCallRow),
    /// A full-context view row (never moved backwards).
    View {
        journey_id: String,
        /// Version it reflects.
        version: u64,
        /// The persisted view.
        payload: Value,
    },
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

impl Store {
    /// Records an audit run.
    pub async fn record_audit_run(&self, run: &AuditRun) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
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

    /// Replaces the live view table's rows with the shadow table's, in one transaction.
    pub async fn swap_in_shadow_views(&self) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM journey_context_view").execute(&mut *tx).await?;
            let n = sqlx::query("INSERT INTO journey_context_view (view_id, version, payload) SELECT view_id, version, payload FROM journey_context_view_shadow")
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            Ok(n)
        })
    }
}

impl Store {
    /// Writes audit and view rows in one transaction (the side writer's group commit).
    pub async fn write_side_rows(&self, rows: &[SideRow]) -> Result<(), StoreError> {
        let view_sql = "INSERT INTO journey_context_view (view_id, version, payload) VALUES ($1, $2, $3)
             ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
             WHERE journey_context_view.version < excluded.version";
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            for row in rows {
                match row {
                    SideRow::Audit(a) => {
                        sqlx::query(
                            "INSERT INTO tool_calls (call_id, phase, writer, tool, journey_id, code, events_appended, duration_ms, at_ms)
                             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
                        )
                        .bind(&a.call_id)
                        .bind(a.phase)
                        .bind(a.writer)
                        .bind(&a.tool)
                        .bind(a.journey_id.as_deref())
                        .bind(a.code)
                        .bind(a.events_appended)
                        .bind(a.duration_ms)
                        .bind(a.at_ms)
                        .execute(&mut *tx)
                        .await?;
                    }
                    SideRow::View { journey_id, version, payload } => {
                        sqlx::query(view_sql).bind(journey_id).bind(i64_of(*version)).bind(payload.to_string()).execute(&mut *tx).await?;
                    }
                }
            }
            tx.commit().await?;
            Ok(())
        })
    }

    /// One single-row insert transaction into the benchmark baseline table.
    pub async fn baseline_insert(&self, payload: &str) -> Result<(), StoreError> {
        // The same writer discipline as the service's own writes.
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("INSERT INTO bench_baseline (payload) VALUES ($1)").bind(payload).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(())
        })
    }

    /// Empties the benchmark baseline table.
    pub async fn baseline_clear(&self) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        on_pool!(self, pool => {
            sqlx::query("DELETE FROM bench_baseline").execute(pool).await?;
            Ok(())
        })
    }

    /// Reads every event row once (the raw scan replay is compared with); returns the count.
    pub async fn raw_scan(&self) -> Result<usize, StoreError> {
        let mut after: Option<(String, u64)> = None;
        let mut n = 0;
        loop {
            let page = self.scan_events(after.as_ref().map(|(id, s)| (id.as_str(), *s)), 1000).await?;
            n += page.len();
            match page.last() {
                Some(last) if page.len() == 1000 => after = Some((last.aggregate_id.clone(), last.sequence as u64)),
                _ => return Ok(n),
            }
        }
    }
}

/// The view tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewTable {
    /// The live full-context view.
    Context,
    /// Its shadow, rebuilt by `skillpilot replay`.
    ContextShadow,
}

impl ViewTable {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Context => "journey_context_view",
            Self::ContextShadow => "journey_context_view_shadow",
        }
    }
}
