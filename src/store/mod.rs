//! The stores: the embedded SQLite default (sqlite-es) and PostgreSQL (postgres-es), behind
//! one [`Store`] handle so no store generic leaks into handlers. Events are written through
//! the store crates' own repositories (their transaction, their conflict mapping); everything
//! else here is plain SQL written once and run on both, since both dialects accept it.

mod audit;
pub(crate) mod backup;
mod baseline;
pub(crate) mod chain;
pub(crate) mod checkpoints;
mod commit;
pub(crate) mod content;
mod events;
pub(crate) mod identity;
pub(crate) mod oauth;
mod pooler;
pub(crate) mod projector;
mod snapshots;
mod views;

pub(crate) use audit::written_of;
pub use audit::{AuditCall, AuditRow, AuditRun, IfCurrent, ToolCallRow};
pub use commit::Commit;
pub(crate) use events::{row_to_event, EVENT_COLUMNS};
pub use events::{KeyMismatch, StoredEvent};
pub use identity::SessionRow;
pub use pooler::Pooler;
use pooler::TxPool;
pub use snapshots::{Snapshot, SNAPSHOT_SCHEMA};
pub use views::ViewTable;

use std::str::FromStr;
use std::time::Duration;

use cqrs_es::persist::PersistenceError;
use postgres_es::PostgresEventRepository;
use sqlite_es::SqliteEventRepository;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous};

/// Why a store call failed.
#[derive(Clone, Debug, thiserror::Error)]
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
    /// The one connection the command path's write turns run on: commits (`synchronous=FULL`)
    /// and the audit rows no acknowledged write depends on (reads, refusals; `synchronous=NORMAL`,
    /// ADR 0006), each turn setting its own. One connection keeps its page cache: SQLite drops
    /// a connection's whole cache whenever another connection wrote since its last transaction,
    /// so turns spread over a pool read every page they touch back from the file (ADR 0018).
    turns: SqlitePool,
    /// SQLite has one writer: the turn `on_writer!` takes (nothing else locks it).
    writer: tokio::sync::Mutex<()>,
}

/// The production store.
pub struct PgStore {
    pool: PgPool,
    repo: PostgresEventRepository,
    /// Set behind a transaction pooler: the pool as an executor that keeps every statement in
    /// a transaction and unnamed (`pooler.rs`).
    tx_pool: Option<TxPool>,
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
            Store::Postgres(s) => $crate::store::on_pg!(s, $pool => $body),
        }
    };
}

pub(crate) use on_pool_impl as on_pool;

/// Runs the body on a PostgreSQL store's pool: directly, or behind a transaction pooler through
/// the executor that keeps each statement in a transaction (the body is compiled for both).
macro_rules! on_pg_impl {
    ($s:expr, $pool:ident => $body:expr) => {
        match &$s.tx_pool {
            Some(tx_pool) => {
                let $pool = tx_pool;
                $body
            }
            None => {
                let $pool = &$s.pool;
                $body
            }
        }
    };
}

pub(crate) use on_pg_impl as on_pg;

/// A PostgreSQL connection a task keeps between its statements. sqlx's pool pings every
/// connection it takes back (a round trip to the server, its CPU and the database's), so the
/// tasks that send one statement after another under load — the commit task, the audit writer
/// — keep theirs between statements instead of returning it after each. It is returned when
/// the task has had nothing to write for a moment (so a closing pool gets it back), let go
/// after an error (a broken connection is replaced at the next statement), and never taken
/// behind a transaction pooler, whose executor lends a connection per statement.
#[derive(Default)]
pub struct HeldConnection(Option<sqlx::pool::PoolConnection<sqlx::Postgres>>);

impl HeldConnection {
    /// Returns the connection to the pool (the task has been idle: a pool that is closing waits
    /// for every connection it lent).
    pub fn release(&mut self) {
        self.0 = None;
    }

    async fn get(&mut self, pool: &PgPool) -> Result<&mut sqlx::PgConnection, sqlx::Error> {
        if self.0.is_none() {
            self.0 = Some(pool.acquire().await?);
        }
        self.0.as_deref_mut().ok_or(sqlx::Error::PoolClosed)
    }
}

/// `on_pg!` on a held connection: the body runs on `held`'s connection (taken from the pool
/// when there is none), or behind a transaction pooler through its executor; an error lets the
/// connection go.
macro_rules! on_held_impl {
    ($s:expr, $held:expr, $exec:ident => $body:expr) => {{
        let result = match &$s.tx_pool {
            Some(tx_pool) => {
                let $exec = tx_pool;
                $body
            }
            None => match $held.get(&$s.pool).await {
                Ok(conn) => {
                    let $exec = &mut *conn;
                    $body
                }
                Err(e) => Err(e),
            },
        };
        if result.is_err() {
            $held.release();
        }
        result
    }};
}

pub(crate) use on_held_impl as on_held;

/// `on_pool!` for a write: on SQLite it first waits for this process's one write turn and
/// holds it for the whole body, so a write cannot be written without its turn (PostgreSQL
/// writes concurrently). The turn is taken here rather than in SQLite's busy handler, which
/// sleeps in millisecond steps; this keeps write latency flat under concurrency.
macro_rules! on_writer_impl {
    ($store:expr, $pool:ident => $body:expr) => {
        match $store {
            Store::Sqlite(s) => {
                let _turn = s.writer.lock().await;
                let $pool = &s.pool;
                $body
            }
            Store::Postgres(s) => $crate::store::on_pg!(s, $pool => $body),
        }
    };
}

pub(crate) use on_writer_impl as on_writer;

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
    /// Whether PostgreSQL is reached through a pooler in transaction mode.
    pub pooler: Pooler,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self { max_connections: 10, acquire_timeout: Duration::from_secs(5), pooler: Pooler::None }
    }
}

/// The migrations behind a transaction pooler: sqlx's migrator holds a session-level advisory
/// lock across transactions, which a pooler cannot keep. Here they run in one transaction on one
/// server connection instead — serialized between instances by a transaction-level lock, each
/// migration a savepoint — and the statements the migrator prepared by name are dropped before
/// the connection goes back to the pooler.
///
/// They run on a blocking thread: on a transaction's connection the migrator's generic executor
/// bounds defeat the compiler's proof that the future is `Send`, which every caller needs.
async fn migrate_pooled(pool: &PgPool) -> Result<(), sqlx::migrate::MigrateError> {
    let (pool, runtime) = (pool.clone(), tokio::runtime::Handle::current());
    let run = tokio::task::spawn_blocking(move || {
        runtime.block_on(async move {
            let mut migrator = sqlx::migrate!("./migrations/postgres");
            migrator.set_locking(false);
            let mut tx = pool.begin().await?;
            // Any constant distinct from sqlx's own lock key; the value is arbitrary.
            sqlx::raw_sql("SELECT pg_advisory_xact_lock(7283950143)").execute(&mut *tx).await?;
            migrator.run(&mut *tx).await?;
            sqlx::raw_sql("DEALLOCATE ALL").execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(())
        })
    });
    run.await.map_err(|e| sqlx::migrate::MigrateError::Source(Box::new(e)))?
}

/// Rows as one JSON array (each row a JSON array of its columns), the one parameter of a
/// SQLite statement over `json_each` that writes or reads any number of rows.
pub(crate) fn json_rows<T: serde::Serialize>(rows: impl IntoIterator<Item = T>) -> Result<String, sqlx::Error> {
    serde_json::to_string(&rows.into_iter().collect::<Vec<T>>()).map_err(|e| sqlx::Error::Encode(e.into()))
}

/// A PostgreSQL connection idle for longer than this is checked (a round trip) before it is
/// lent again. sqlx's default checks every connection at every acquire: under load that is
/// one more round trip to the server — its CPU and the database's — for each statement a
/// command sends, to detect a connection that broke while it was idle for microseconds
/// (HikariCP skips the check within 500 ms for the same reason). A connection that broke within
/// the window fails its statement as `STORE_UNAVAILABLE`, which an exact retry answers, and
/// is dropped from the pool.
const CHECK_IDLE_AFTER: Duration = Duration::from_secs(1);

/// Creates an empty database named `prefix` and a fresh UUID on the PostgreSQL server of
/// `admin_url` (the bench's scratch database, a unit test's); returns its URL (the admin URL with
/// the database swapped, its query kept) and its name, for the caller to drop.
pub(crate) async fn create_scratch_postgres(admin_url: &str, prefix: &str) -> Result<(String, String), sqlx::Error> {
    use sqlx::Connection;
    let name = format!("{prefix}{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    sqlx::query(&format!("CREATE DATABASE \"{name}\"")).execute(&mut conn).await?;
    let (base, query) = admin_url.split_once('?').map(|(b, q)| (b, format!("?{q}"))).unwrap_or((admin_url, String::new()));
    let prefix = base.rsplit_once('/').map(|(p, _)| p).unwrap_or(base);
    Ok((format!("{prefix}/{name}{query}"), name))
}

pub(crate) fn i64_of(v: u64) -> i64 {
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
                // A SQLite connection is a file handle in this process: nothing can hang up on
                // it while it is idle, so it is lent without sqlx's check (a round trip to its
                // thread at every acquire).
                let pool = SqlitePoolOptions::new()
                    .test_before_acquire(false)
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options.clone())
                    .await?;
                let turns = SqlitePoolOptions::new()
                    .test_before_acquire(false)
                    .max_connections(1)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                let repo = SqliteEventRepository::new(pool.clone());
                Ok(Self::Sqlite(SqliteStore { pool, repo, turns, writer: tokio::sync::Mutex::new(()) }))
            }
            DbUrl::Postgres(url) => {
                let mut options = PgConnectOptions::from_str(url)?;
                if settings.pooler == Pooler::Transaction {
                    // Nothing cached by name on a server connection the pooler lends to others,
                    // and no startup parameter pgbouncer refuses (it passes only those it tracks).
                    options = options.statement_cache_capacity(0).extra_float_digits(None);
                }
                let pool = PgPoolOptions::new()
                    .test_before_acquire(false)
                    .before_acquire(|conn, meta| {
                        Box::pin(async move {
                            if meta.idle_for >= CHECK_IDLE_AFTER {
                                sqlx::Connection::ping(conn).await?;
                            }
                            Ok(true)
                        })
                    })
                    .max_connections(settings.max_connections)
                    .acquire_timeout(settings.acquire_timeout)
                    .connect_with(options)
                    .await?;
                let repo = PostgresEventRepository::new(pool.clone());
                let tx_pool = (settings.pooler == Pooler::Transaction).then(|| TxPool(pool.clone()));
                Ok(Self::Postgres(PgStore { pool, repo, tx_pool }))
            }
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
            Self::Postgres(s) if s.tx_pool.is_some() => migrate_pooled(&s.pool).await,
            Self::Postgres(s) => sqlx::migrate!("./migrations/postgres").run(&s.pool).await,
        };
        result.map_err(|e| match e {
            sqlx::migrate::MigrateError::Execute(err) => StoreError::from(err),
            other => StoreError::Database(other.to_string()),
        })
    }

    /// Whether statements go through a transaction pooler.
    pub fn pooled(&self) -> bool {
        matches!(self, Self::Postgres(PgStore { tx_pool: Some(_), .. }))
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

    /// Closes the pools (graceful shutdown).
    pub async fn close(&self) {
        if let Self::Sqlite(s) = self {
            s.turns.close().await;
        }
        on_pool!(self, pool => pool.close().await)
    }
}
