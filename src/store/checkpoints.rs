//! Chain checkpoints and the view versions `audit verify` compares the log with: a journey's
//! events can be deleted from its end without breaking its own hash chain, but not without
//! falling behind the version its view row and the newest checkpoint recorded.

use std::collections::BTreeMap;

use sqlx::Row;

use super::{on_pool, on_writer, Store, StoreError, ViewTable};
use crate::canonical::canonical;
use crate::store::chain::GENESIS;

/// Every journey's head: version and `chainHash` of its newest event.
pub(crate) type Heads = BTreeMap<String, (u64, String)>;

/// One recorded checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Its number (1, 2, …).
    pub seq: i64,
    /// When, epoch ms.
    pub at_ms: i64,
    /// The heads it recorded.
    pub heads: Heads,
    /// The previous checkpoint's hash (GENESIS for the first).
    pub prev_hash: String,
    /// blake3 over the previous hash, the time and the canonical heads.
    pub hash: String,
}

/// The hash of a checkpoint's content.
pub(crate) fn checkpoint_hash(prev_hash: &str, at_ms: i64, heads: &Heads) -> String {
    let heads = serde_json::to_value(heads).unwrap_or_default();
    blake3::hash(format!("{prev_hash}\n{at_ms}\n{}", canonical(&heads)).as_bytes()).to_hex().to_string()
}

fn checkpoint_of(seq: i64, at_ms: i64, heads: &str, prev_hash: String, hash: String) -> Result<Checkpoint, StoreError> {
    let heads: Heads = serde_json::from_str(heads).map_err(|e| StoreError::Corrupt(format!("checkpoint {seq}: {e}")))?;
    Ok(Checkpoint { seq, at_ms, heads, prev_hash, hash })
}

impl Store {
    /// `(journey, version)` of every row of a view, without the payloads.
    pub async fn view_versions(&self, table: ViewTable) -> Result<BTreeMap<String, u64>, StoreError> {
        let sql = format!("SELECT view_id, version FROM {}", table.name());
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).fetch_all(pool).await?;
            rows.iter()
                .map(|r| {
                    let version: i64 = r.try_get("version")?;
                    Ok((r.try_get::<String, _>("view_id")?, u64::try_from(version).unwrap_or(0)))
                })
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// The links of every checkpoint, oldest first: `(seq, prev_hash, hash)` — without their
    /// heads, which grow with the journeys; only the newest checkpoint's heads are ever compared.
    pub async fn checkpoint_links(&self) -> Result<Vec<(i64, String, String)>, StoreError> {
        on_pool!(self, pool => {
            let rows = sqlx::query("SELECT seq, prev_hash, hash FROM chain_checkpoints ORDER BY seq").fetch_all(pool).await?;
            rows.iter()
                .map(|r| Ok((r.try_get("seq")?, r.try_get("prev_hash")?, r.try_get("hash")?)))
                .collect::<Result<_, sqlx::Error>>()
                .map_err(StoreError::from)
        })
    }

    /// The newest checkpoint, heads included.
    pub async fn latest_checkpoint(&self) -> Result<Option<Checkpoint>, StoreError> {
        on_pool!(self, pool => {
            let row = sqlx::query("SELECT seq, at_ms, heads, prev_hash, hash FROM chain_checkpoints ORDER BY seq DESC LIMIT 1")
                .fetch_optional(pool)
                .await?;
            let Some(r) = row else { return Ok(None) };
            let heads: String = r.try_get("heads")?;
            checkpoint_of(r.try_get("seq")?, r.try_get("at_ms")?, &heads, r.try_get("prev_hash")?, r.try_get("hash")?).map(Some)
        })
    }

    /// Appends a checkpoint of `heads`, chained to the newest one.
    pub async fn record_checkpoint(&self, at_ms: i64, heads: &Heads) -> Result<Checkpoint, StoreError> {
        let text = serde_json::to_string(heads).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let last = sqlx::query("SELECT seq, hash FROM chain_checkpoints ORDER BY seq DESC LIMIT 1").fetch_optional(&mut *tx).await?;
            let (seq, prev_hash) = match last {
                Some(r) => (r.try_get::<i64, _>("seq")? + 1, r.try_get::<String, _>("hash")?),
                None => (1, GENESIS.to_owned()),
            };
            let hash = checkpoint_hash(&prev_hash, at_ms, heads);
            sqlx::query("INSERT INTO chain_checkpoints (seq, at_ms, heads, prev_hash, hash) VALUES ($1, $2, $3, $4, $5)")
                .bind(seq).bind(at_ms).bind(&text).bind(&prev_hash).bind(&hash)
                .execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(Checkpoint { seq, at_ms, heads: heads.clone(), prev_hash, hash })
        })
    }
}
