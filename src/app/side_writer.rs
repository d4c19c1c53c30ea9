//! Group commit of the rows that follow a call (the tool-call audit and the full-context view):
//! one writer task takes every row queued while its previous transaction was committing and
//! writes them in one transaction, then acknowledges each. A caller still waits for its own
//! rows to be durable; under concurrency many calls share one commit instead of paying one
//! each. Events never go through here: they are committed by the store crate before any of
//! this runs, so no write is acknowledged before its own events are durable.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

pub(crate) use crate::store::SideRow;
use crate::store::{Store, StoreError};

struct Item {
    row: SideRow,
    ack: oneshot::Sender<Result<(), String>>,
}

/// The handle to the writer task; dropping the last handle ends the task.
pub struct SideWriter {
    tx: mpsc::Sender<Item>,
}

const MAX_BATCH: usize = 512;

impl SideWriter {
    /// Starts the writer task on a store.
    pub fn start(store: Arc<Store>) -> Self {
        let (tx, mut rx) = mpsc::channel::<Item>(4096);
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                while batch.len() < MAX_BATCH {
                    match rx.try_recv() {
                        Ok(item) => batch.push(item),
                        Err(_) => break,
                    }
                }
                let rows: Vec<SideRow> = batch.iter().map(|i| i.row.clone()).collect();
                let result = store.write_side_rows(&rows).await.map_err(|e| e.to_string());
                for item in batch {
                    let _ = item.ack.send(result.clone());
                }
            }
        });
        Self { tx }
    }

    /// Queues a row without waiting for its commit: a later awaited row (the same call's exit)
    /// is committed in the same or a later batch, never before it.
    pub async fn enqueue(&self, row: SideRow) -> Result<(), StoreError> {
        let (ack, _ignored) = oneshot::channel();
        self.tx.send(Item { row, ack }).await.map_err(|_| StoreError::Unavailable("the side writer stopped".into()))
    }

    /// Queues a row and waits until its batch is committed.
    pub async fn write(&self, row: SideRow) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.tx.send(Item { row, ack }).await.map_err(|_| StoreError::Unavailable("the side writer stopped".into()))?;
        match done.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(e)),
            Err(_) => Err(StoreError::Unavailable("the side writer stopped".into())),
        }
    }
}
