//! The write path's commits (ADR 0006). A command's events, view row, snapshot and tool-call
//! audit rows are one commit, and concurrent commands share one transaction and one flush:
//! on SQLite, whose single writer serializes commits anyway, one writer task takes every
//! commit queued while its previous transaction was committing and writes them in one
//! transaction — all together in one call, or with a savepoint each when that is refused, so
//! one failure rejects only its own command (ADR 0013); on PostgreSQL a commit task writes one
//! statement at a time and sends the commits queued meanwhile as the next one (ADR 0012) — all
//! or nothing, so a refused batch is rerun command by command and each gets its own outcome.
//! Audit rows that belong to no commit (reads, refusals, the dispatcher's exits) ride along, or
//! are written without waiting for their flush when no commit is queued; the rows of a read
//! answered from the cached journey are written only if its log still ends there, judged after
//! the batch's commits (ADR 0011). On PostgreSQL those checked reads go to the commit task and
//! ride in its last statement (ADR 0016); the other rows go to a writer task of their own, whose
//! statements never wait behind a commit.

use std::sync::Arc;

use std::collections::HashSet;

use tokio::sync::{mpsc, oneshot};

use crate::metrics::CommitMetrics;
use crate::store::{written_of, AuditCall, Commit, HeldConnection, IfCurrent, Store, StoreError, ToolCallRow};

enum Item {
    Commit { commit: Commit, ack: oneshot::Sender<Result<(), StoreError>> },
    Audit { call: AuditCall, ack: oneshot::Sender<Result<bool, StoreError>> },
}

type CommitAck = oneshot::Sender<Result<(), StoreError>>;
/// Commits that go in one statement, with the keys they write.
type Round = (HashSet<String>, Vec<(Commit, CommitAck)>);

/// The handle to the writer task; dropping the last handle ends the task.
pub struct Writer {
    tx: mpsc::Sender<Item>,
    /// PostgreSQL's commit task, which takes the checked reads' audit rows too (none on SQLite,
    /// whose commits the writer task batches).
    pg_commits: Option<mpsc::Sender<Item>>,
}

const MAX_BATCH: usize = 256;

/// The next batch: waits for one item, then takes every item already queued (at most
/// `MAX_BATCH`); `None` once every handle is gone.
async fn next_batch<T>(rx: &mut mpsc::Receiver<T>) -> Option<Vec<T>> {
    let mut batch = vec![rx.recv().await?];
    while batch.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(item) => batch.push(item),
            Err(_) => break,
        }
    }
    Some(batch)
}

/// How long a task keeps its connection with nothing to write (ADR 0013).
const HOLD_IDLE: std::time::Duration = std::time::Duration::from_millis(100);

/// `next_batch` for a task that keeps its connection between statements: the connection goes
/// back to the pool once nothing has come for `HOLD_IDLE`, so a closing pool, which waits for
/// every connection it lent, gets it back.
async fn next_batch_holding<T>(rx: &mut mpsc::Receiver<T>, held: &mut HeldConnection) -> Option<Vec<T>> {
    match tokio::time::timeout(HOLD_IDLE, next_batch(rx)).await {
        Ok(batch) => batch,
        Err(_) => {
            held.release();
            next_batch(rx).await
        }
    }
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the writer stopped".into())
}

impl Writer {
    /// Starts the writer task on a store.
    pub fn start(store: Arc<Store>, metrics: CommitMetrics) -> Self {
        let (tx, mut rx) = mpsc::channel::<Item>(4096);
        let (writer_store, writer_metrics) = (store.clone(), metrics.clone());
        tokio::spawn(async move {
            let mut held = HeldConnection::default();
            while let Some(batch) = next_batch_holding(&mut rx, &mut held).await {
                write_batch(&writer_store, &writer_metrics, &mut held, batch).await;
            }
        });
        let pg_commits = matches!(*store, Store::Postgres(_)).then(|| start_pg_commits(store, metrics));
        Self { tx, pg_commits }
    }

    /// Commits one command's writes; returns once they are durable.
    pub async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let (ack, done) = oneshot::channel();
        self.pg_commits.as_ref().unwrap_or(&self.tx).send(Item::Commit { commit, ack }).await.map_err(|_| stopped())?;
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
        // On PostgreSQL a checked read's rows ride in the next commit statement (ADR 0016); the
        // rest go to the writer task, so the dispatcher's exits never queue behind a commit
        // that hangs.
        let task = match &self.pg_commits {
            Some(pg) if call.if_current.is_some() => pg,
            _ => &self.tx,
        };
        task.send(Item::Audit { call, ack }).await.map_err(|_| stopped())?;
        done.await.unwrap_or_else(|_| Err(stopped()))
    }
}

type CallAck = oneshot::Sender<Result<bool, StoreError>>;

/// A batch's commits, and its calls of no commit with their acknowledgements.
fn split(batch: Vec<Item>) -> (Vec<(Commit, CommitAck)>, Vec<AuditCall>, Vec<CallAck>) {
    let (mut commits, mut calls, mut call_acks) = (Vec::new(), Vec::new(), Vec::new());
    for item in batch {
        match item {
            Item::Commit { commit, ack } => commits.push((commit, ack)),
            Item::Audit { call, ack } => {
                calls.push(call);
                call_acks.push(ack);
            }
        }
    }
    (commits, calls, call_acks)
}

/// Tells each call whether its rows were written.
fn answer_calls(call_acks: Vec<CallAck>, written: Result<Vec<bool>, StoreError>) {
    match written {
        Ok(written) => {
            for (ack, written) in call_acks.into_iter().zip(written) {
                let _ = ack.send(Ok(written));
            }
        }
        Err(e) => {
            for ack in call_acks {
                let _ = ack.send(Err(e.clone()));
            }
        }
    }
}

async fn write_batch(store: &Store, metrics: &CommitMetrics, held: &mut HeldConnection, batch: Vec<Item>) {
    let (commits, calls, call_acks) = split(batch);
    let written = if commits.is_empty() {
        store.write_audit(held, &calls).await
    } else {
        // The calls' rows ride in the batch's transaction; a checked read's are judged after its
        // commits, against the heads they leave.
        let units: Vec<&Commit> = commits.iter().map(|(c, _)| c).collect();
        let shared = units.len() > 1;
        metrics.transaction(units.len());
        match store.commit_batch(&units, &calls).await {
            Ok((outcomes, written)) => {
                for ((_, ack), outcome) in commits.into_iter().zip(outcomes) {
                    if outcome.is_err() && shared {
                        metrics.refused_in_batch();
                    }
                    let _ = ack.send(outcome);
                }
                Ok(written)
            }
            Err(e) => {
                tracing::warn!(error = %e, commits = units.len(), "a batched commit failed");
                for (_, ack) in commits {
                    let _ = ack.send(Err(e.clone()));
                }
                Err(e)
            }
        }
    };
    answer_calls(call_acks, written);
}

/// Starts PostgreSQL's commit task: one statement at a time, each with every commit queued
/// while the one before it ran. Each statement and transaction has a fixed cost on the server,
/// most of a commit's on a busy machine, so the larger the batches the better; the price is that
/// a commit may wait one statement's time, as on SQLite's single writer. Against two and four
/// statements in flight, one cost the least CPU per command and gave the most writes/s at 16
/// coaches (docs/performance.md, ADR 0012). The checked reads' audit rows queued meanwhile ride
/// in the last statement, or are one relaxed statement when no commit is queued (ADR 0016).
fn start_pg_commits(store: Arc<Store>, metrics: CommitMetrics) -> mpsc::Sender<Item> {
    let (tx, mut rx) = mpsc::channel::<Item>(4096);
    tokio::spawn(async move {
        let mut held = HeldConnection::default();
        while let Some(batch) = next_batch_holding(&mut rx, &mut held).await {
            commit_pg_batch(&store, &metrics, &mut held, batch).await;
        }
    });
    tx
}

/// What a commit writes that no other commit of its statement may write too: its stream, its
/// view row and its snapshot (PostgreSQL refuses to upsert one row twice in a statement).
fn keys_of(commit: &Commit) -> impl Iterator<Item = String> + '_ {
    let stream = commit.events.first().map(|e| format!("stream {} {}", e.aggregate_type, e.aggregate_id));
    let view = commit.view.as_ref().map(|(id, _, _)| format!("view {id}"));
    let snapshot = commit.snapshot.as_ref().map(|(id, _)| format!("snapshot {id}"));
    stream.into_iter().chain(view).chain(snapshot)
}

/// Commits a batch on PostgreSQL in as few statements as its keys allow. Commands are sorted by
/// their keys, so concurrent statements take their row locks in one order (no deadlock between
/// them); commands that share a key (a retry racing its original) go in separate statements.
/// The batch's calls ride in the last statement, after every other round has committed, so
/// their checks are judged against the heads the whole batch leaves.
async fn commit_pg_batch(store: &Store, metrics: &CommitMetrics, held: &mut HeldConnection, batch: Vec<Item>) {
    let (mut commits, calls, call_acks) = split(batch);
    if commits.is_empty() {
        answer_calls(call_acks, store.write_audit(held, &calls).await);
        return;
    }
    commits.sort_by_cached_key(|(commit, _)| keys_of(commit).collect::<Vec<_>>());
    let mut rounds: Vec<Round> = Vec::new();
    for (commit, ack) in commits {
        let keys: Vec<String> = keys_of(&commit).collect();
        match rounds.iter_mut().find(|(taken, _)| keys.iter().all(|k| !taken.contains(k))) {
            Some((taken, round)) => {
                taken.extend(keys);
                round.push((commit, ack));
            }
            None => rounds.push((keys.into_iter().collect(), vec![(commit, ack)])),
        }
    }
    let last = rounds.len() - 1;
    // The calls' outcome once a statement wrote their rows or the database was unreachable.
    let mut written = None;
    for (i, (_, round)) in rounds.into_iter().enumerate() {
        let riding: &[AuditCall] = if i == last { &calls } else { &[] };
        let units: Vec<&Commit> = round.iter().map(|(c, _)| c).collect();
        metrics.transaction(units.len());
        match store.commit_pg(held, &units, riding).await {
            Ok(refused) => {
                for (_, ack) in round {
                    let _ = ack.send(Ok(()));
                }
                if i == last {
                    written = Some(Ok(written_of(&calls, &refused)));
                }
            }
            // The statement wrote nothing; a taken key, a refused value or any other error of
            // one command's rows is that command's alone, so each is committed on its own.
            // An unreachable database is every command's (an exact retry is safe).
            Err(e) if units.len() > 1 && !matches!(e, StoreError::Unavailable(_)) => {
                tracing::debug!(error = %e, commits = units.len(), "a batched commit was refused; committing its commands one by one");
                for (commit, ack) in round {
                    metrics.transaction(1);
                    let outcome = store.commit_pg(held, &[&commit], &[]).await.map(|_| ());
                    if outcome.is_err() {
                        metrics.refused_in_batch();
                    }
                    let _ = ack.send(outcome);
                }
            }
            Err(e) => {
                if matches!(e, StoreError::Unavailable(_)) {
                    written = Some(Err(e.clone()));
                }
                for (_, ack) in round {
                    let _ = ack.send(Err(e.clone()));
                }
            }
        }
    }
    // A refused last statement wrote none of the calls' rows: they are written on their own.
    let written = match written {
        Some(written) => written,
        None => store.write_audit(held, &calls).await,
    };
    answer_calls(call_acks, written);
}
