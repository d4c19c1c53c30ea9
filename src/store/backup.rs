//! Online backup of the embedded store: `VACUUM INTO` writes a consistent snapshot of the
//! database (one read transaction, so concurrent writers are neither blocked for long nor seen
//! half-way) into a new file; `integrity_check` proves a copy readable before it is restored.

use std::path::Path;
use std::str::FromStr;

use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

use super::StoreError;

async fn open(path: &Path, read_only: bool) -> Result<sqlx::SqliteConnection, StoreError> {
    let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
        .read_only(read_only)
        .create_if_missing(false)
        .busy_timeout(std::time::Duration::from_secs(10));
    Ok(options.connect().await?)
}

/// Copies the SQLite database `db` into the new file `to` (which must not exist).
pub(crate) async fn sqlite_backup(db: &Path, to: &Path) -> Result<(), StoreError> {
    let mut conn = open(db, false).await?;
    sqlx::query("VACUUM INTO $1").bind(to.display().to_string()).execute(&mut conn).await?;
    conn.close().await?;
    Ok(())
}

/// `PRAGMA integrity_check` of a SQLite file: `Ok(())` when it answers `ok`, else what it found.
pub(crate) async fn sqlite_integrity(path: &Path) -> Result<(), StoreError> {
    let mut conn = open(path, true).await?;
    let found: Vec<String> = sqlx::query_scalar("PRAGMA integrity_check").fetch_all(&mut conn).await?;
    conn.close().await?;
    match found.as_slice() {
        [ok] if ok == "ok" => Ok(()),
        problems => Err(StoreError::Corrupt(problems.join("; "))),
    }
}
