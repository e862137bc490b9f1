//! The dedicated connections advisory locks live on, and the statements sent on them.
//!
//! A session-level advisory lock belongs to the server session that took it, so these
//! connections are never pooled by anything that could reset them or hand them to
//! someone else. A few carrier sessions hold the locks the client takes without waiting
//! (a name always on the same one); a waiter that must wait inside the server does so on
//! a session of its own that holds nothing else (a statement that waits holds up every
//! statement behind it on its connection), which then keeps the lock it waited for.
//! Each session prepares its statements once: it is the client's alone.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Error;
use lock_core::backend::session::{LockSession, Taken};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, Row, Statement};

use super::key;
use crate::error::{ends_the_session, failed};
use crate::schema::SchemaName;
use crate::timeouts::silent;

/// One dedicated server session of advisory locks.
pub struct AdvisorySession {
    client: Client,
    /// The server process of the session (`pg_backend_pid()`): every lock statement
    /// checks that it ran there, which a transaction-mode pooler would not promise.
    pid: i32,
    /// Set once a statement failed or went unanswered: the session and its locks are
    /// gone (its connection is closed, so the server ends them too).
    broken: AtomicBool,
    /// The task that drives the connection: stopping it closes the socket.
    connection: tokio::task::AbortHandle,
    /// The statements prepared on this session, by their text.
    statements: Mutex<HashMap<String, Statement>>,
    /// The session's `lock_timeout`, in milliseconds (0: the server's default).
    lock_timeout_ms: AtomicU64,
    /// How long a statement may go unanswered.
    bound: Duration,
    /// The schema of the fencing counter.
    schema: SchemaName,
}

impl Drop for AdvisorySession {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl fmt::Debug for AdvisorySession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisorySession")
            .field("pid", &self.pid)
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

impl AdvisorySession {
    /// A session on `client`, whose server process is `pid` and whose connection is
    /// driven by the task `connection`; its statements go unanswered for at most
    /// `bound`, and its fencing counter is in `schema`.
    pub(super) fn new(
        client: Client,
        pid: i32,
        connection: tokio::task::AbortHandle,
        (bound, schema): (Duration, SchemaName),
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            pid,
            broken: AtomicBool::new(false),
            connection,
            statements: Mutex::default(),
            lock_timeout_ms: AtomicU64::new(0),
            bound,
            schema,
        })
    }

    /// The server process of the session (`pg_terminate_backend` of it loses every
    /// lock on it).
    #[must_use]
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Gives the session up: its locks are to be counted lost. Its connection closes at
    /// once, so the server ends the session and frees its locks as soon as it reads the
    /// close (a paused server, when it runs again), whoever still refers to it.
    pub(super) fn break_off(&self) {
        self.broken.store(true, Ordering::Release);
        self.connection.abort();
    }

    /// Runs `statement` within `bound`; a failure the session cannot be trusted after
    /// (a broken connection, no answer) breaks it.
    async fn query(
        &self,
        during: &'static str,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>, Error> {
        self.send(statement, params, self.bound)
            .await
            .map_err(|failure| failure.into_error(during, self.bound, &self.schema))
    }

    /// As [`Self::query`], with the driver's error kept for the caller to read.
    async fn send(
        &self,
        statement: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
        bound: Duration,
    ) -> Result<Vec<Row>, Unanswered> {
        let run = async {
            let prepared = self.prepared(statement, params).await?;
            let values: Vec<&(dyn ToSql + Sync)> = params.iter().map(|(value, _)| *value).collect();
            self.client.query(&prepared, &values).await
        };
        let sent = tokio::time::timeout(bound, run).await;
        match sent {
            Ok(Ok(rows)) => Ok(rows),
            Ok(Err(err)) => {
                // A broken connection, or the server ending the session (a terminated
                // backend says so before the connection closes): its locks are gone now.
                if err.as_db_error().is_none_or(ends_the_session) || err.is_closed() {
                    self.break_off();
                }
                Err(Unanswered::Failed(err))
            }
            Err(_) => {
                self.break_off();
                Err(Unanswered::Silent)
            }
        }
    }

    /// `text` as a statement prepared on this session, prepared on first use: a session is
    /// the client's alone, so its named statements stay, and the server parses and plans
    /// each kind of statement once instead of at every call.
    async fn prepared(
        &self,
        text: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Statement, tokio_postgres::Error> {
        let known = self
            .statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(text)
            .cloned();
        if let Some(statement) = known {
            return Ok(statement);
        }
        let types: Vec<Type> = params.iter().map(|(_, ty)| ty.clone()).collect();
        let statement = self.client.prepare_typed(text, &types).await?;
        self.statements
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(text.to_owned(), statement.clone());
        Ok(statement)
    }

    /// Asks the server process's id again, in one unnamed statement: an error (the
    /// session broken) when another process answers, as behind a transaction-mode
    /// pooler.
    pub(super) async fn still_own_process(&self, bound: Duration) -> Result<(), Error> {
        let during = "checking an advisory session's server process";
        let rows = tokio::time::timeout(
            bound,
            self.client
                .query_typed("SELECT pg_catalog.pg_backend_pid() AS pid", &[]),
        )
        .await
        .map_err(|_| Error::connection(during, silent("response timeout", bound)))?
        .map_err(|err| Error::connection(during, err))?;
        self.same_process(first(&rows, during)?, during)
    }

    /// Checks that `row`'s `pid` column came from this session's server process.
    fn same_process(&self, row: &Row, during: &'static str) -> Result<(), Error> {
        let pid: i32 = row
            .try_get("pid")
            .map_err(|err| Error::protocol(format!("{during}: {err}")))?;
        if pid == self.pid {
            return Ok(());
        }
        self.break_off();
        Err(pooled_error())
    }

    /// Runs `statement`, made around [`HOLDERS`], for `key`'s lock, `shared` or not.
    async fn about_holders(
        &self,
        during: &'static str,
        statement: &str,
        (key, shared): (i64, bool),
    ) -> Result<Vec<Row>, Error> {
        let (high, low) = key::halves(key);
        let params: [(&(dyn ToSql + Sync), Type); 3] = [
            (&high, Type::INT8),
            (&low, Type::INT8),
            (&shared, Type::BOOL),
        ];
        self.query(during, statement, &params).await
    }
}

#[async_trait]
impl LockSession for AdvisorySession {
    type Key = i64;

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire) || self.client.is_closed()
    }

    /// One statement, which also issues the fencing token when asked.
    async fn try_lock(
        &self,
        key: &i64,
        shared: bool,
        fencing: Option<&str>,
    ) -> Result<Taken, Error> {
        let during = "taking an advisory lock";
        let function = if shared {
            "pg_try_advisory_lock_shared"
        } else {
            "pg_try_advisory_lock"
        };
        let schema = &self.schema;
        let statement = format!(
            "SELECT t.pid, CASE WHEN t.got AND $2 THEN {schema}.advisory_token($3) END AS token, \
             t.got FROM (SELECT pg_catalog.{function}($1) AS got, \
             pg_catalog.pg_backend_pid() AS pid) AS t"
        );
        let name = fencing.unwrap_or_default();
        let rows = self
            .query(
                during,
                &statement,
                &[
                    (key, Type::INT8),
                    (&fencing.is_some(), Type::BOOL),
                    (&name, Type::TEXT),
                ],
            )
            .await?;
        let row = first(&rows, during)?;
        self.same_process(row, during)?;
        let got: bool = column(row, "got", during)?;
        if !got {
            return Ok(Taken::Busy);
        }
        Ok(Taken::Granted(token(row, during)?))
    }

    /// Under the session's `lock_timeout`, set to `wait` when it differs.
    async fn lock(
        &self,
        key: &i64,
        shared: bool,
        fencing: Option<&str>,
        wait: Duration,
    ) -> Result<Taken, Error> {
        let during = "waiting for an advisory lock";
        let function = if shared {
            "pg_advisory_lock_shared"
        } else {
            "pg_advisory_lock"
        };
        let millis = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1);
        // The session keeps its setting: an unbounded waiter's slices (always the same)
        // set it once.
        if self.lock_timeout_ms.load(Ordering::Acquire) != millis {
            let timeout = format!("{millis}ms");
            let set = "SELECT pg_catalog.set_config('lock_timeout', $1, false)";
            self.query(during, set, &[(&timeout, Type::TEXT)]).await?;
            self.lock_timeout_ms.store(millis, Ordering::Release);
        }
        let statement = format!(
            "SELECT pg_catalog.pg_backend_pid() AS pid FROM (SELECT pg_catalog.{function}($1)) AS t"
        );
        let bound = wait + self.bound;
        let waited = self.send(&statement, &[(key, Type::INT8)], bound).await;
        let rows = match waited {
            Ok(rows) => rows,
            Err(Unanswered::Failed(err))
                if err
                    .code()
                    .is_some_and(|code| *code == SqlState::LOCK_NOT_AVAILABLE) =>
            {
                return Ok(Taken::Busy);
            }
            Err(failure) => return Err(failure.into_error(during, bound, &self.schema)),
        };
        self.same_process(first(&rows, during)?, during)?;
        let Some(name) = fencing else {
            return Ok(Taken::Granted(None));
        };
        match self.token(name).await {
            Ok(token) => Ok(Taken::Granted(Some(token))),
            Err(err) => {
                // The lock is this session's, but the caller cannot have it without its
                // token: it is given back, or the session with it.
                if let Err(unlock) = self.unlock(key, shared).await {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        error = %unlock,
                        "an advisory lock granted without its fencing token could not be \
                         given back; its session is given up"
                    );
                    self.break_off();
                }
                Err(err)
            }
        }
    }

    async fn token(&self, name: &str) -> Result<u64, Error> {
        let during = "issuing a fencing token";
        let statement = format!("SELECT {}.advisory_token($1) AS token", self.schema);
        let rows = self
            .query(during, &statement, &[(&name, Type::TEXT)])
            .await?;
        token(first(&rows, during)?, during)?
            .ok_or_else(|| Error::protocol(format!("{during}: no token")))
    }

    async fn unlock(&self, key: &i64, shared: bool) -> Result<(), Error> {
        let during = "giving back an advisory lock";
        let function = if shared {
            "pg_advisory_unlock_shared"
        } else {
            "pg_advisory_unlock"
        };
        let statement =
            format!("SELECT pg_catalog.{function}($1) AS held, pg_catalog.pg_backend_pid() AS pid");
        let rows = self.query(during, &statement, &[(key, Type::INT8)]).await?;
        let row = first(&rows, during)?;
        self.same_process(row, during)?;
        let held: bool = column(row, "held", during)?;
        if !held {
            // The record said this session held it; the server says not. Only a lost
            // session could do that, so the session is not trusted any further.
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                key,
                shared,
                "the server says this session did not hold an advisory lock it recorded; \
                 the session is given up"
            );
            self.break_off();
        }
        Ok(())
    }

    /// Read from `pg_locks`.
    async fn held_elsewhere(&self, key: &i64, shared: bool) -> Result<bool, Error> {
        let during = "reading the advisory locks";
        let statement = format!("SELECT EXISTS ({HOLDERS}) AS held");
        let rows = self
            .about_holders(during, &statement, (*key, shared))
            .await?;
        column(first(&rows, during)?, "held", during)
    }

    /// By `pg_terminate_backend`, which needs the right to signal the session (the same
    /// role, or `pg_signal_backend`).
    async fn end_holders(&self, key: &i64, shared: bool) -> Result<bool, Error> {
        let during = "ending the sessions that hold an advisory lock";
        let statement = format!(
            "SELECT count(*) FILTER (WHERE pg_catalog.pg_terminate_backend(h.pid)) AS ended \
             FROM ({HOLDERS}) AS h"
        );
        let rows = self
            .about_holders(during, &statement, (*key, shared))
            .await?;
        let ended: i64 = column(first(&rows, during)?, "ended", during)?;
        if ended == 0 {
            return Ok(false);
        }
        // A terminated session ends a moment later: the lock is free once it has.
        let deadline = tokio::time::Instant::now() + self.bound;
        while self.held_elsewhere(key, shared).await? {
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::connection(
                    during,
                    silent("response timeout", self.bound),
                ));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(true)
    }

    /// Also checks that it is still the same server process.
    async fn ping(&self) -> Result<(), Error> {
        let during = "checking an advisory session";
        let rows = self
            .query(during, "SELECT pg_catalog.pg_backend_pid() AS pid", &[])
            .await?;
        self.same_process(first(&rows, during)?, during)
    }
}

/// The other sessions that hold a 64-bit advisory key, `$3` (true: shared) deciding
/// the mode: `pg_locks` shows the key's high half in `classid`, its low half in `objid`.
const HOLDERS: &str = "SELECT pid FROM pg_catalog.pg_locks \
     WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
     AND classid::bigint = $1 AND objid::bigint = $2 \
     AND mode = CASE WHEN $3 THEN 'ShareLock' ELSE 'ExclusiveLock' END \
     AND pid <> pg_catalog.pg_backend_pid()";

/// A statement without its answer: the driver's error, or none within the bound.
enum Unanswered {
    Failed(tokio_postgres::Error),
    Silent,
}

impl Unanswered {
    fn into_error(self, during: &'static str, bound: Duration, schema: &SchemaName) -> Error {
        match self {
            Self::Failed(err) => failed(err, during, schema),
            Self::Silent => Error::connection(during, silent("response timeout", bound)),
        }
    }
}

fn first<'a>(rows: &'a [Row], during: &'static str) -> Result<&'a Row, Error> {
    rows.first()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))
}

fn column<'a, T: tokio_postgres::types::FromSql<'a>>(
    row: &'a Row,
    name: &str,
    during: &'static str,
) -> Result<T, Error> {
    row.try_get(name)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))
}

fn token(row: &Row, during: &'static str) -> Result<Option<u64>, Error> {
    let token: Option<i64> = column(row, "token", during)?;
    Ok(token.and_then(|token| u64::try_from(token).ok()))
}

/// The error of a statement that ran on another server process than its session's.
pub(super) fn pooled_error() -> Error {
    Error::invalid_config(
        "advisory locks need a connection that is one server session: a statement ran in \
         another server process than its session's, as behind a transaction-mode pooler \
         (PgBouncer's pool_mode=transaction). Point the URL at the server or at a \
         session-mode pool",
        None,
    )
}
