//! Journey snapshots: the newest state of a journey at a version, with the chain hash there,
//! under a schema number so a changed state shape ignores old rows. They are written with the
//! command whose commit makes one due ([`super::commit`]).

use serde_json::Value;

use sqlx::Row;

use super::{on_pool, Store, StoreError};

/// A snapshot row.
#[derive(Clone, Debug)]
pub struct Snapshot {
    /// Version the state reflects.
    pub version: u64,
    /// Chain hash of the event at that version.
    pub chain_hash: String,
    /// The serialized state.
    pub state: Value,
}

/// Bumped whenever `LearningJourney`'s serialized shape changes: older snapshots are ignored.
pub const SNAPSHOT_SCHEMA: i64 = 1;

impl Store {
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
}
