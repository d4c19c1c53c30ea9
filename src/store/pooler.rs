//! PostgreSQL behind a connection pooler in transaction mode (pgbouncer `pool_mode =
//! transaction`): the pooler lends a server connection to a client for one transaction and
//! hands it to another client afterwards. Two things sqlx does by default break that (ADR 0008):
//!
//! - it prepares a statement with Parse/Describe and a Sync of its own, and then binds and runs
//!   it after a second Sync; outside a transaction each Sync ends a transaction for the pooler, so
//!   the two halves may land on different server connections;
//! - it names its prepared statements per client connection (`sqlx_s_1`, …) and keeps them on the
//!   server, where another client's statement of the same name then collides.
//!
//! So with `db_pooler = transaction` every statement runs inside an explicit transaction (a single
//! statement in one of its own), and every statement is unnamed: an unnamed statement lives only
//! until the next Parse on its connection, so nothing is left behind on a server connection. The
//! price is two more round trips per statement outside a transaction; a command's commit is one
//! statement either way.

use std::ops::{Deref, DerefMut};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use sqlx::postgres::{PgPool, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Execute, Executor, Postgres, Transaction};

/// How the service reaches PostgreSQL.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Pooler {
    /// Directly, or through a pooler in session mode: statements are prepared once per
    /// connection and cached.
    #[default]
    None,
    /// Through a pooler in transaction mode (pgbouncer `pool_mode = transaction`).
    Transaction,
}

/// A statement that is never named on the server.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<sqlx::postgres::PgArguments>, sqlx::error::BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

/// The answer to `prepare`/`describe`: a statement prepared by name would stay on a server
/// connection the pooler hands to other clients.
fn unsupported<'e, T: 'e>() -> BoxFuture<'e, Result<T, sqlx::Error>> {
    Box::pin(async { Err(sqlx::Error::Protocol("a prepared statement cannot outlive its transaction behind a transaction pooler".into())) })
}

/// The pool, used as an executor that runs each statement in a transaction of its own.
#[derive(Debug)]
pub(crate) struct TxPool(pub(crate) PgPool);

impl TxPool {
    /// A transaction whose statements are unnamed.
    pub(crate) async fn begin(&self) -> Result<PooledTx, sqlx::Error> {
        Ok(PooledTx(TxConn(self.0.begin().await?)))
    }
}

/// The pool's own figures and shutdown (`size`, `num_idle`, `close`); statements go through the
/// executor above, which takes precedence over the pool's.
impl Deref for TxPool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.0
    }
}

impl<'p> Executor<'p> for &'p TxPool {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        // The rows are read to the end before the commit: the transaction must end before its
        // connection goes back, and the service's statements are bounded (no streamed scans).
        futures_util::stream::once(async move {
            let mut tx = self.0.begin().await?;
            let items: Vec<_> = (&mut *tx).fetch_many(Unnamed(query)).try_collect().await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(futures_util::stream::iter(items.into_iter().map(Ok)))
        })
        .try_flatten()
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        Box::pin(async move {
            let mut tx = self.0.begin().await?;
            let row = (&mut *tx).fetch_optional(Unnamed(query)).await?;
            tx.commit().await?;
            Ok(row)
        })
    }

    fn prepare_with<'e, 'q: 'e>(self, _sql: &'q str, _parameters: &'e [PgTypeInfo]) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'p: 'e,
    {
        unsupported()
    }

    fn describe<'e, 'q: 'e>(self, _sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        unsupported()
    }
}

/// A transaction behind the pooler; `&mut *tx` is its executor, as with sqlx's own.
#[derive(Debug)]
pub(crate) struct PooledTx(TxConn);

/// The connection of a [`PooledTx`], running unnamed statements.
#[derive(Debug)]
pub(crate) struct TxConn(Transaction<'static, Postgres>);

impl PooledTx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.0 .0.commit().await
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        self.0 .0.rollback().await
    }
}

impl Deref for PooledTx {
    type Target = TxConn;

    fn deref(&self) -> &TxConn {
        &self.0
    }
}

impl DerefMut for PooledTx {
    fn deref_mut(&mut self) -> &mut TxConn {
        &mut self.0
    }
}

impl<'c> Executor<'c> for &'c mut TxConn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(self, query: E) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        (&mut *self.0).fetch_many(Unnamed(query))
    }

    fn fetch_optional<'e, 'q: 'e, E>(self, query: E) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        (&mut *self.0).fetch_optional(Unnamed(query))
    }

    fn prepare_with<'e, 'q: 'e>(self, _sql: &'q str, _parameters: &'e [PgTypeInfo]) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        unsupported()
    }

    fn describe<'e, 'q: 'e>(self, _sql: &'q str) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        unsupported()
    }
}
