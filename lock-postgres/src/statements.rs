//! [`Statements`]: one statement at a time on the query pool's connections, each bounded
//! by the response timeout.

use std::time::Duration;

use deadpool_postgres::{Object, Pool, PoolError};
use lock_core::Error;
use tokio::time::Instant;
use tokio::time::error::Elapsed;
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::calls::Param;
use crate::direct::Preparing;
use crate::error::{failed, pool_failed};
use crate::schema::SchemaName;
use crate::timeouts::silent;

/// The query pool and how its statements are sent: cheap to clone, so that a statement
/// that carries several callers' calls can run in a task of its own (see
/// [`crate::combine`]).
#[derive(Clone)]
pub(crate) struct Statements {
    pub(crate) pool: Pool,
    pub(crate) schema: SchemaName,
    /// Whether statements are prepared (only on connections proved to be the server's
    /// own sessions, see [`crate::direct`]).
    pub(crate) preparing: Preparing,
    pub(crate) response_timeout: Duration,
}

impl std::fmt::Debug for Statements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Statements")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .field("preparing", &self.preparing.allowed())
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl Statements {
    /// The error of a wait the response timeout cut short.
    pub(crate) fn silent(&self, during: &'static str) -> Error {
        Error::connection(during, silent("response timeout", self.response_timeout))
    }

    /// A pooled connection, by `deadline`.
    pub(crate) async fn connection(
        &self,
        during: &'static str,
        deadline: Instant,
    ) -> Result<Object, Error> {
        let got = self.getting(deadline).await;
        self.got(during, got)
    }

    /// The wait for a pooled connection by `deadline`, as a future that owns what it
    /// needs: one that is no longer wanted can be left to finish in a task of its own,
    /// since dropping it while the pool opens a connection would close the connection
    /// as soon as the server had forked a process for it (see [`crate::combine`]).
    pub(crate) fn getting(
        &self,
        deadline: Instant,
    ) -> impl Future<Output = Result<Result<Object, PoolError>, Elapsed>> + Send + 'static {
        let pool = self.pool.clone();
        async move { tokio::time::timeout_at(deadline, pool.get()).await }
    }

    /// The connection [`Self::getting`] got, or the crate's error.
    pub(crate) fn got(
        &self,
        during: &'static str,
        got: Result<Result<Object, PoolError>, Elapsed>,
    ) -> Result<Object, Error> {
        got.map_err(|_| self.silent(during))?
            .map_err(|err| pool_failed(err, during, &self.schema))
    }

    /// Runs `statement` with typed parameters on a pooled connection: prepared once per
    /// connection where every connection is the server's own session, else as one
    /// unnamed statement, one round trip that leaves nothing a transaction-mode pooler
    /// could lose between statements (see [`crate::direct`]).
    pub(crate) async fn query(
        &self,
        during: &'static str,
        statement: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<Row>, Error> {
        let deadline = Instant::now() + self.response_timeout;
        let client = self.connection(during, deadline).await?;
        self.query_on(client, (statement, params), deadline)
            .await
            .map(|(rows, _)| rows)
            .map_err(|err| err.into_error(during, &self.schema))
    }

    /// Runs `statement` on `client`, by `deadline`; gives the connection back with the
    /// rows. A connection whose statement went unanswered leaves the pool.
    pub(crate) async fn query_on(
        &self,
        client: Object,
        (statement, params): (&str, &[Param<'_>]),
        deadline: Instant,
    ) -> Result<(Vec<Row>, Object), Failure> {
        let outcome = if self.preparing.allowed() {
            let prepared = async {
                let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
                let values: Vec<&(dyn ToSql + Sync)> =
                    params.iter().map(|(value, _)| *value).collect();
                let statement = client.prepare_typed_cached(statement, &types).await?;
                client.query(&statement, &values).await
            };
            tokio::time::timeout_at(deadline, prepared).await
        } else {
            tokio::time::timeout_at(deadline, client.query_typed(statement, params)).await
        };
        match outcome {
            Ok(Ok(rows)) => Ok((rows, client)),
            Ok(Err(err)) => Err(Failure::Refused(err, client)),
            Err(_) => {
                // The statement may still be on its way: its connection leaves the pool
                // (closed when dropped), so that no later statement queues behind it.
                drop(Object::take(client));
                Err(Failure::Silent(self.response_timeout))
            }
        }
    }
}

/// A statement that failed: the driver's error (with the connection, usable again
/// unless the error broke it), or no answer within the bound.
#[allow(
    clippy::large_enum_variant,
    reason = "made only when a statement fails, and moved once: a box would cost an allocation"
)]
pub(crate) enum Failure {
    Refused(tokio_postgres::Error, Object),
    Silent(Duration),
}

impl Failure {
    /// The crate's error for a failure while `during`.
    pub(crate) fn into_error(self, during: &'static str, schema: &SchemaName) -> Error {
        match self {
            Self::Refused(err, _) => failed(err, during, schema),
            Self::Silent(bound) => Error::connection(during, silent("response timeout", bound)),
        }
    }
}
