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

    /// Copies every event of the journey `template` into the journeys `<template>-g<n>` for
    /// `from <= n < to`, with their commits' keys, in one transaction: the benchmark's way to grow
    /// the log by a million events in seconds (never used by the service; the copies' chains
    /// name the template). Returns the events copied.
    pub async fn grow_by_copying(&self, template: &str, from: i64, to: i64) -> Result<u64, StoreError> {
        // Each copy: (table, its columns, the copied columns of row `t`); the key column is
        // `aggregate_id` in both.
        const COPIES: [(&str, &str, &str); 2] = [
            (
                "events",
                "aggregate_type, aggregate_id, sequence, event_type, event_version, payload, metadata",
                "t.sequence, t.event_type, t.event_version, t.payload, t.metadata",
            ),
            (
                "commit_requests",
                "aggregate_type, aggregate_id, request_id, first_sequence, last_sequence",
                "t.request_id, t.first_sequence, t.last_sequence",
            ),
        ];
        on_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let mut copied = Vec::with_capacity(COPIES.len());
            for (table, columns, rest) in COPIES {
                let sql = format!(
                    "WITH RECURSIVE g(n) AS (SELECT CAST($2 AS BIGINT) UNION ALL SELECT n + 1 FROM g WHERE n + 1 < $3) \
                     INSERT INTO {table} ({columns}) \
                     SELECT t.aggregate_type, t.aggregate_id || '-g' || CAST(g.n AS TEXT), {rest} \
                     FROM {table} t CROSS JOIN g WHERE t.aggregate_id = $1"
                );
                copied.push(sqlx::query(&sql).bind(template).bind(from).bind(to).execute(&mut *tx).await?.rows_affected());
            }
            tx.commit().await?;
            Ok(copied.first().copied().unwrap_or(0))
        })
    }

    /// Refreshes the planner's statistics (PostgreSQL `ANALYZE`; SQLite `ANALYZE` too): after a
    /// bulk load the statistics describe the empty log until autovacuum comes round, which a
    /// log that grew over months never shows.
    pub async fn analyze(&self) -> Result<(), StoreError> {
        on_writer!(self, pool => {
            sqlx::query("ANALYZE").execute(pool).await?;
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
