//! The write path's commits (ADR 0006). A command's events, view row, snapshot and tool-call
//! audit rows are one commit: on PostgreSQL one statement from the caller's task (concurrent
//! commands share flushes through the server's group commit); on SQLite, whose single writer
//! serializes commits anyway, one writer task takes every commit queued while its previous
//! transaction was committing and writes them in one transaction with a savepoint each — one
//! flush for the batch, one failure rejects only its own command. Audit rows that belong to no
//! commit (reads, refusals, the dispatcher's exits) ride along, or are written without waiting
//! for their flush when no commit is queued; the rows of a read answered from the cached journey
//! are written only if its log still ends there, judged after the batch's commits (ADR 0011).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use crate::store::{AuditCall, Commit, IfCurrent, Store, StoreError, ToolCallRow};

enum Item {
    Commit { commit: Commit, ack: oneshot::Sender<Result<(), StoreError>> },
    Audit { call: AuditCall, ack: oneshot::Sender<Result<bool, StoreError>> },
}

/// The handle to the writer task; dropping the last handle ends the task.
pub struct Writer {
    tx: mpsc::Sender<Item>,
    store: Arc<Store>,
}

const MAX_BATCH: usize = 256;

fn stopped() -> StoreError {
    StoreError::Unavailable("the writer stopped".into())
}

impl Writer {
    /// Starts the writer task on a store.
    pub fn start(store: Arc<Store>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Item>(4096);
        let writer_store = store.clone();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(item) => batch.push(item),
                        Err(_) => break,
                    }
                }
                write_batch(&writer_store, batch).await;
            }
        });
        Self { tx, store }
    }

    /// Commits one command's writes; returns once they are durable.
    pub async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        if matches!(*self.store, Store::Postgres(_)) {
            return self.store.commit_pg(&commit).await;
        }
        let (ack, done) = oneshot::channel();
        self.tx.send(Item::Commit { commit, ack }).await.map_err(|_| stopped())?;
        done.await.unwrap_or_else(|_| Err(stopped()))
    }

    /// Writes audit rows of no commit; returns once they are visible (ADR 0006: not waiting
    /// for their flush).
    pub async fn audit(&self, rows: Vec<ToolCallRow>) -> Result<(), StoreError> {
        self.audit_call(AuditCall { rows, if_current: None }).await.map(|_| ())
    }

    /// Writes a read's audit rows only if its journey's log still ends at the version its
    /// answer was built on (ADR 0011); `Ok(false)` when the log had moved on: nothing was written.
    pub async fn audit_if_current(&self, rows: Vec<ToolCallRow>, if_current: IfCurrent) -> Result<bool, StoreError> {
        self.audit_call(AuditCall { rows, if_current: Some(if_current) }).await
    }

    async fn audit_call(&self, call: AuditCall) -> Result<bool, StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Item::Audit { call, ack }).await.map_err(|_| stopped())?;
        done.await.unwrap_or_else(|_| Err(stopped()))
    }
}

async fn write_batch(store: &Store, batch: Vec<Item>) {
    let (mut commits, mut audits) = (Vec::new(), Vec::new());
    for item in batch {
        match item {
            Item::Commit { commit, ack } => commits.push((commit, ack)),
            Item::Audit { call, ack } => audits.push((call, ack)),
        }
    }
    if !commits.is_empty() {
        // Unchecked rows ride in the batch's transaction; a checked read's rows are judged after
        // it, against the heads the batch's commits leave.
        let (checked, riding): (Vec<_>, Vec<_>) = audits.into_iter().partition(|(call, _)| call.if_current.is_some());
        let rows: Vec<ToolCallRow> = riding.iter().flat_map(|(call, _)| call.rows.iter().cloned()).collect();
        let units: Vec<&Commit> = commits.iter().map(|(c, _)| c).collect();
        let written = match store.commit_batch(&units, &rows).await {
            Ok(outcomes) => {
                for ((_, ack), outcome) in commits.into_iter().zip(outcomes) {
                    let _ = ack.send(outcome);
                }
                Ok(true)
            }
            Err(e) => {
                tracing::warn!(error = %e, commits = units.len(), "a batched commit failed");
                for (_, ack) in commits {
                    let _ = ack.send(Err(e.clone()));
                }
                Err(e)
            }
        };
        for (_, ack) in riding {
            let _ = ack.send(written.clone());
        }
        audits = checked;
        if audits.is_empty() {
            return;
        }
    }
    let (calls, acks): (Vec<AuditCall>, Vec<_>) = audits.into_iter().unzip();
    match store.write_audit(&calls).await {
        Ok(written) => {
            for (ack, written) in acks.into_iter().zip(written) {
                let _ = ack.send(Ok(written));
            }
        }
        Err(e) => {
            for ack in acks {
                let _ = ack.send(Err(e.clone()));
            }
        }
    }
}
