//! The benchmark's baseline table: single-row inserts and a raw scan, the yardsticks the
//! command path is measured against.

use super::{on_writer, Store, StoreError};

impl Store {
    /// One single-row autocommit insert into the benchmark baseline table: one round trip,
    /// one commit, as PostgreSQL's own `pgbench` does it.
    pub async fn baseline_insert(&self, payload: &str) -> Result<(), StoreError> {
        // The same writer discipline as the service's own writes.
        on_writer!(self, pool => {
            sqlx::query("INSERT INTO bench_baseline (payload) VALUES ($1)").bind(payload).execute(pool).await?;
            Ok(())
        })
    }

    /// Empties the benchmark baseline table.
    pub async fn baseline_clear(&self) -> Result<(), StoreError> {
        on_writer!(self, pool => {
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
