//! Reading the event table: a stream's tail through the store crates' repositories, a commit by
//! its request id, every stream and the heads of all streams. Commits are written by
//! [`super::commit`].

use aggregates::learning_journey::LearningJourney;
use cqrs_es::persist::{PersistedEventRepository, SerializedEvent};
use cqrs_es::Aggregate;
use serde_json::Value;
use sqlx::Row;

use super::{i64_of, on_pool, Store, StoreError};

/// How the log and the commits' keys disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyMismatch {
    /// A commit's events carry a request id that no key names with exactly their range.
    Unkeyed,
    /// A key names a first sequence whose event does not carry its request id.
    Orphaned,
}

/// An event as stored, with its metadata.
pub type StoredEvent = SerializedEvent;

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

impl Store {
    /// Events of a journey after `after` (0 for all), in order.
    pub async fn events_after(&self, journey_id: &str, after: u64) -> Result<Vec<StoredEvent>, StoreError> {
        let events = match self {
            Self::Sqlite(s) => s.repo.get_last_events::<LearningJourney>(journey_id, after as usize).await?,
            Self::Postgres(s) if s.tx_pool.is_none() => s.repo.get_last_events::<LearningJourney>(journey_id, after as usize).await?,
            // The store crate's read names its statement; behind a transaction pooler the same
            // query runs unnamed through the pooler's executor.
            Self::Postgres(s) => {
                let sql = format!(
                    "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence > $3 ORDER BY sequence"
                );
                let rows = super::on_pg!(s, pool => sqlx::query(&sql).bind(LearningJourney::TYPE).bind(journey_id).bind(i64_of(after)).fetch_all(pool).await?);
                rows.iter().map(row_to_event).collect::<Result<_, _>>()?
            }
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

    /// The events of the commit that carried `request_id` on this journey (empty if none),
    /// found by the commit's key (ADR 0010).
    pub async fn find_commit(&self, journey_id: &str, request_id: &str) -> Result<Vec<StoredEvent>, StoreError> {
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events WHERE aggregate_type = $1 AND aggregate_id = $2 AND sequence BETWEEN \
             (SELECT r.first_sequence FROM commit_requests r WHERE r.aggregate_type = $1 AND r.aggregate_id = $2 AND r.request_id = $3) AND \
             (SELECT r.last_sequence FROM commit_requests r WHERE r.aggregate_type = $1 AND r.aggregate_id = $2 AND r.request_id = $3) \
             ORDER BY sequence"
        );
        on_pool!(self, pool => {
            let rows = sqlx::query(&sql).bind(LearningJourney::TYPE).bind(journey_id).bind(request_id).fetch_all(pool).await?;
            rows.iter().map(row_to_event).collect()
        })
    }

    /// The first disagreement between the log and the commits' keys (ADR 0010), in journey
    /// order: a commit whose events carry a request id without the key that names exactly their
    /// sequence range (a retry of it would not be recognised), or a key whose first sequence is
    /// not an event carrying its request id. Returns the journey, the sequence and which.
    pub async fn commit_key_mismatch(&self) -> Result<Option<(String, u64, KeyMismatch)>, StoreError> {
        const UNKEYED: &str = "SELECT m.aggregate_id, m.first_sequence FROM ( \
               SELECT aggregate_type, aggregate_id, metadata ->> 'requestId' AS request_id, \
                      MIN(sequence) AS first_sequence, MAX(sequence) AS last_sequence \
               FROM events WHERE (metadata ->> 'requestId') IS NOT NULL \
               GROUP BY aggregate_type, aggregate_id, metadata ->> 'requestId') m \
             LEFT JOIN commit_requests r \
               ON r.aggregate_type = m.aggregate_type AND r.aggregate_id = m.aggregate_id AND r.request_id = m.request_id \
             WHERE r.request_id IS NULL OR r.first_sequence <> m.first_sequence OR r.last_sequence <> m.last_sequence \
             ORDER BY m.aggregate_id, m.first_sequence LIMIT 1";
        const ORPHANED: &str = "SELECT r.aggregate_id, r.first_sequence FROM commit_requests r \
             WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.aggregate_type = r.aggregate_type AND e.aggregate_id = r.aggregate_id \
                               AND e.sequence = r.first_sequence AND (e.metadata ->> 'requestId') = r.request_id) \
             ORDER BY r.aggregate_id, r.first_sequence LIMIT 1";
        let mut found = Vec::new();
        for (sql, kind) in [(UNKEYED, KeyMismatch::Unkeyed), (ORPHANED, KeyMismatch::Orphaned)] {
            let first: Option<(String, i64)> = on_pool!(self, pool => {
                match sqlx::query(sql).fetch_optional(pool).await? {
                    Some(row) => Some((row.try_get(0)?, row.try_get(1)?)),
                    None => None,
                }
            });
            if let Some((id, sequence)) = first {
                found.push((id, u64::try_from(sequence).unwrap_or(0), kind));
            }
        }
        Ok(found.into_iter().min_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1))))
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
}
