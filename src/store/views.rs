//! The full-context view tables (live and the replay shadow): rows record the version they
//! reflect and never move backwards; `replay --swap` makes the shadow live.

use serde_json::Value;

use sqlx::Row;

use super::{i64_of, on_pool, on_writer, Store, StoreError};

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

impl Store {
    /// Upserts a view row unless the stored one reflects a newer version.
    pub async fn save_view(&self, table: ViewTable, view_id: &str, version: u64, payload: &Value) -> Result<(), StoreError> {
        self.save_views(table, &[(view_id.to_owned(), version, payload.clone())]).await
    }

    /// Upserts many view rows in one transaction (a rebuild), each only forward.
    pub async fn save_views(&self, table: ViewTable, rows: &[(String, u64, Value)]) -> Result<(), StoreError> {
        let t = table.name();
        let sql = format!(
            "INSERT INTO {t} (view_id, version, payload) VALUES ($1, $2, $3)
             ON CONFLICT (view_id) DO UPDATE SET version = excluded.version, payload = excluded.payload
             WHERE {t}.version < excluded.version"
        );
        on_writer!(self, pool => {
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
        let sql = format!("DELETE FROM {}", table.name());
        on_writer!(self, pool => {
            sqlx::query(&sql).execute(pool).await?;
            Ok(())
        })
    }

    /// Replaces the live view table's rows with the shadow table's, in one transaction.
    pub async fn swap_in_shadow_views(&self) -> Result<u64, StoreError> {
        on_writer!(self, pool => {
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
