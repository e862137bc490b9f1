//! [`GetLockSession`]: one dedicated connection whose user-level locks (`GET_LOCK`) the
//! client holds, and the statements sent on it.
//!
//! The connection is the client's alone: no pool resets it (a reset frees every lock it
//! holds) or hands it to anyone else. Its statements go one at a time: a carrier's are
//! tries and releases, which the server answers at once and which the callers that
//! queue meanwhile send together (see [`super::combined`]); a waiter's session waits in
//! one statement and holds nothing else.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Error;
use lock_core::backend::session::{LockSession, Taken};
use mysql_async::prelude::{FromRow, Queryable};
use mysql_async::{Conn, Params, Row};
use tokio::sync::Mutex as AsyncMutex;
use tokio::sync::oneshot::error::TryRecvError;

use super::combined::{Answer, Call, Queue, Queued, statement};
use crate::error::{Silent, failed};

/// The server's clock as microseconds since the epoch: the least fencing token issued
/// now, so that tokens keep growing on a promoted replica that lacks the last ones.
const MICROS_NOW: &str = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)";

/// One dedicated server session of user-level locks.
pub struct GetLockSession {
    /// `None` once the session is given up: dropping the connection closes it, and the
    /// server frees its locks.
    conn: AsyncMutex<Option<Conn>>,
    /// The tries and releases waiting for the connection.
    queue: Queue,
    /// The server's id of the session (`CONNECTION_ID()`).
    id: u64,
    broken: AtomicBool,
    /// How long a statement may go unanswered.
    bound: Duration,
    /// The table of the fencing counters, quoted.
    tokens: String,
    /// Whether `GET_LOCK` keeps a timeout's fraction of a second (MariaDB does; MySQL's
    /// documentation speaks of whole seconds).
    fractional_waits: bool,
}

impl fmt::Debug for GetLockSession {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GetLockSession")
            .field("id", &self.id)
            .field("broken", &self.is_broken())
            .finish_non_exhaustive()
    }
}

impl GetLockSession {
    /// A session on `conn`, whose server id is `id` and whose `GET_LOCK` keeps
    /// fractions of a second when `fractional_waits`; its statements go unanswered for
    /// at most `bound`, and its fencing counters are in the table `tokens`.
    pub(super) fn new(
        (conn, id, fractional_waits): (Conn, u64, bool),
        bound: Duration,
        tokens: String,
    ) -> Self {
        Self {
            conn: AsyncMutex::new(Some(conn)),
            queue: Queue::default(),
            id,
            broken: AtomicBool::new(false),
            bound,
            tokens,
            fractional_waits,
        }
    }

    /// The server's id of the session (`KILL` of it loses every lock on it).
    #[must_use]
    pub fn connection_id(&self) -> u64 {
        self.id
    }

    /// Runs `statement` within `bound` and reads its first row. A failure that leaves
    /// the session in doubt (a broken connection, no answer) gives it up; a refusal by
    /// the server does not.
    async fn first<T: FromRow + Send + 'static>(
        &self,
        during: &'static str,
        statement: &str,
        params: Params,
        bound: Duration,
    ) -> Result<Option<T>, Error> {
        let mut conn = self.conn.lock().await;
        let Some(open) = conn.as_mut() else {
            return Err(given_up(during));
        };
        let answered =
            tokio::time::timeout(bound, open.exec_first::<T, _, _>(statement, params)).await;
        self.judge(&mut conn, answered, during, bound)
    }

    /// Runs `statement` within the bound and answers the id it set
    /// (`LAST_INSERT_ID(expr)`).
    async fn insert(
        &self,
        during: &'static str,
        statement: &str,
        params: Params,
    ) -> Result<Option<u64>, Error> {
        let mut conn = self.conn.lock().await;
        let Some(open) = conn.as_mut() else {
            return Err(given_up(during));
        };
        let answered = tokio::time::timeout(self.bound, async {
            open.exec_drop(statement, params).await?;
            Ok(open.last_insert_id())
        })
        .await;
        self.judge(&mut conn, answered, during, self.bound)
    }

    /// A statement's outcome as the caller's, giving the session up when it is in doubt.
    fn judge<T>(
        &self,
        conn: &mut Option<Conn>,
        answered: Result<Result<T, mysql_async::Error>, tokio::time::error::Elapsed>,
        during: &'static str,
        bound: Duration,
    ) -> Result<T, Error> {
        match answered {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err @ mysql_async::Error::Server(_))) => Err(failed(err, during)),
            Ok(Err(err)) => {
                self.give_up(conn);
                Err(failed(err, during))
            }
            Err(_) => {
                self.give_up(conn);
                Err(Error::connection(during, Silent { bound }))
            }
        }
    }

    /// Gives the session up: its locks are to be counted lost. Dropping the connection
    /// closes its socket, so the server ends the session and frees its locks as soon as
    /// it reads the close.
    fn give_up(&self, conn: &mut Option<Conn>) {
        self.broken.store(true, Ordering::Release);
        drop(conn.take());
    }

    /// Gives the session up from outside a statement.
    async fn break_off(&self) {
        let mut conn = self.conn.lock().await;
        self.give_up(&mut conn);
    }

    /// Asks `call` of `key` together with whatever other callers queue meanwhile (see
    /// [`super::combined`]): the server's answer, 1, 0 or NULL.
    async fn call(&self, call: Call, key: &str, during: &'static str) -> Answer {
        let mut answered = self.queue.push(call, key, during);
        let mut conn = self.conn.lock().await;
        loop {
            match answered.try_recv() {
                Ok(answer) => return answer,
                // Its statement was cut off, which gave the session up.
                Err(TryRecvError::Closed) => return Err(given_up(during)),
                Err(TryRecvError::Empty) => {}
            }
            let calls = self.queue.next_statement();
            if calls.is_empty() {
                return Err(Error::protocol(format!(
                    "{during}: the call left the queue"
                )));
            }
            self.send(&mut conn, calls).await;
        }
    }

    /// Sends `calls` as one statement and answers each of them.
    async fn send(&self, conn: &mut Option<Conn>, mut calls: Vec<Queued>) {
        let Some(mut open) = conn.take() else {
            answer_all(calls, |_| None, given_up);
            return;
        };
        let (text, params) = statement(&mut calls);
        // The connection is out of the session while the statement runs: if the caller
        // sending it goes away meanwhile, the connection goes with it and the server
        // frees the session's locks, since which of them the statement took is unknown.
        let cut_off = CutOff(Some(&self.broken));
        let answered =
            tokio::time::timeout(self.bound, open.exec_first::<Row, _, _>(text, params)).await;
        cut_off.finished();
        *conn = Some(open);
        match answered {
            Ok(Ok(Some(mut row))) => {
                let columns: Vec<_> = (0..calls.len())
                    .map(|index| row.take_opt::<Option<i64>, usize>(index))
                    .collect();
                if columns.iter().all(|column| matches!(column, Some(Ok(_)))) {
                    let mut orphans = Vec::new();
                    for (queued, column) in calls.into_iter().zip(columns) {
                        let value = column.and_then(Result::ok).flatten();
                        orphans.extend(queued.answer(Ok(value)));
                    }
                    self.give_back_orphans(conn, orphans).await;
                } else {
                    self.give_up(conn);
                    answer_all(
                        calls,
                        |_| None,
                        |during| {
                            Error::protocol(format!("{during}: an answer that is not a number"))
                        },
                    );
                }
            }
            Ok(Ok(None)) => {
                self.give_up(conn);
                answer_all(
                    calls,
                    |_| None,
                    |during| Error::protocol(format!("{during}: no row")),
                );
            }
            Ok(Err(err @ mysql_async::Error::Server(_))) if calls.len() == 1 => {
                answer_all(calls, |during| Some(failed(err, during)), given_up);
            }
            Ok(Err(err)) => {
                self.give_up(conn);
                let err = std::sync::Arc::new(err);
                answer_all(
                    calls,
                    |_| None,
                    |during| Error::connection(during, std::sync::Arc::clone(&err)),
                );
            }
            Err(_) => {
                self.give_up(conn);
                let bound = self.bound;
                answer_all(
                    calls,
                    |_| None,
                    |during| Error::connection(during, Silent { bound }),
                );
            }
        }
    }

    /// Gives back the locks granted to callers that went away, or the session.
    async fn give_back_orphans(&self, conn: &mut Option<Conn>, keys: Vec<String>) {
        for key in keys {
            let Some(open) = conn.as_mut() else { return };
            let released = tokio::time::timeout(
                self.bound,
                open.exec_drop("SELECT RELEASE_LOCK(?)", (key.as_str(),)),
            )
            .await;
            if !matches!(released, Ok(Ok(()))) {
                tracing::warn!(
                    target: lock_core::TRACING_TARGET,
                    key = key.as_str(),
                    "a user-level lock granted to a caller that went away could not be \
                     given back; its session is given up"
                );
                self.give_up(conn);
            }
        }
    }

    /// The session that holds `key`'s lock, if any.
    async fn holder(&self, key: &str) -> Result<Option<u64>, Error> {
        let during = "reading who holds a user-level lock";
        let holder: Option<Option<u64>> = self
            .first(
                during,
                "SELECT IS_USED_LOCK(?)",
                Params::from((key,)),
                self.bound,
            )
            .await?;
        Ok(holder.flatten())
    }

    /// What `GET_LOCK` answered (`None`: NULL, or no row), and the token when one was
    /// asked for.
    async fn taken(
        &self,
        got: Option<i64>,
        key: &str,
        fencing: Option<&str>,
        during: &'static str,
    ) -> Result<Taken, Error> {
        match got {
            Some(1) => {}
            Some(_) => return Ok(Taken::Busy),
            None => {
                return Err(Error::backend(
                    during,
                    Refused("GET_LOCK answered NULL (the session was killed)"),
                ));
            }
        }
        let Some(name) = fencing else {
            return Ok(Taken::Granted(None));
        };
        match self.token(name).await {
            Ok(token) => Ok(Taken::Granted(Some(token))),
            Err(err) => {
                // The lock is this session's, but the caller cannot have it without its
                // token: it is given back, or the session with it.
                if let Err(unlock) = self.unlock(&key.to_owned(), false).await {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        error = %unlock,
                        "a user-level lock granted without its fencing token could not be \
                         given back; its session is given up"
                    );
                    self.break_off().await;
                }
                Err(err)
            }
        }
    }
}

/// The error of a statement on a session given up.
fn given_up(during: &'static str) -> Error {
    Error::connection(during, Refused("the session was given up"))
}

/// Answers every call of a statement that failed: the first with `first`'s error when
/// it has one, the others (and the first otherwise) with `rest`'s.
fn answer_all(
    calls: Vec<Queued>,
    first: impl FnOnce(&'static str) -> Option<Error>,
    rest: impl Fn(&'static str) -> Error,
) {
    let mut first = Some(first);
    for queued in calls {
        let during = queued.during;
        let err = first
            .take()
            .and_then(|first| first(during))
            .unwrap_or_else(|| rest(during));
        // A failed call grants nothing, so nothing comes back to give back.
        if let Some(key) = queued.answer(Err(err)) {
            tracing::error!(target: lock_core::TRACING_TARGET, key, "a failed call came back granted");
        }
    }
}

/// Gives the session up when dropped before [`CutOff::finished`]: the statement it
/// stood for was cut off.
struct CutOff<'a>(Option<&'a AtomicBool>);

impl CutOff<'_> {
    fn finished(mut self) {
        self.0 = None;
    }
}

impl Drop for CutOff<'_> {
    fn drop(&mut self) {
        if let Some(broken) = self.0 {
            broken.store(true, Ordering::Release);
        }
    }
}

/// Why the server's answer is not one the lock can use.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Refused(&'static str);

#[async_trait]
impl LockSession for GetLockSession {
    type Key = String;

    fn is_broken(&self) -> bool {
        self.broken.load(Ordering::Acquire)
    }

    /// `GET_LOCK(key, 0)`, in one statement with the calls other callers queue
    /// meanwhile; the token, when asked, in a statement of its own.
    async fn try_lock(
        &self,
        key: &String,
        _shared: bool,
        fencing: Option<&str>,
    ) -> Result<Taken, Error> {
        let during = "taking a user-level lock";
        let got = self.call(Call::Try, key, during).await?;
        self.taken(got, key, fencing, during).await
    }

    /// `GET_LOCK(key, wait)`, in seconds with microseconds where the server keeps them
    /// (MariaDB), else in whole seconds rounded up: a wait shorter than a second cut to
    /// none would come back at once, again and again until the caller's deadline.
    async fn lock(
        &self,
        key: &String,
        _shared: bool,
        fencing: Option<&str>,
        wait: Duration,
    ) -> Result<Taken, Error> {
        let during = "waiting for a user-level lock";
        let seconds = if self.fractional_waits {
            wait.as_secs_f64().max(0.000_001)
        } else {
            wait.as_secs_f64().ceil().max(1.0)
        };
        let got: Option<Option<i64>> = self
            .first(
                during,
                "SELECT GET_LOCK(?, ?)",
                Params::from((key.as_str(), seconds)),
                wait + self.bound,
            )
            .await?;
        self.taken(got.flatten(), key, fencing, during).await
    }

    /// One statement: the name's counter becomes the larger of its next value and the
    /// server's clock in microseconds, in the same autocommitted write.
    async fn token(&self, name: &str) -> Result<u64, Error> {
        let during = "issuing a fencing token";
        let statement = format!(
            "INSERT INTO {tokens} (lock_key, token) VALUES (?, LAST_INSERT_ID({MICROS_NOW})) \
             ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, {MICROS_NOW}))",
            tokens = self.tokens
        );
        let key = crate::schema::key(name);
        self.insert(during, &statement, Params::from((key,)))
            .await?
            .filter(|token| *token > 0)
            .ok_or_else(|| Error::protocol(format!("{during}: no token")))
    }

    async fn unlock(&self, key: &String, _shared: bool) -> Result<(), Error> {
        let during = "giving back a user-level lock";
        let released = self.call(Call::Release, key, during).await?;
        if released != Some(1) {
            // The record said this session held it; the server says not. Only a lost
            // session could do that, so the session is not trusted any further.
            tracing::warn!(
                target: lock_core::TRACING_TARGET,
                key = key.as_str(),
                "the server says this session did not hold a user-level lock it recorded; \
                 the session is given up"
            );
            self.break_off().await;
        }
        Ok(())
    }

    async fn held_elsewhere(&self, key: &String, _shared: bool) -> Result<bool, Error> {
        Ok(self.holder(key).await?.is_some_and(|id| id != self.id))
    }

    /// By `KILL CONNECTION`, which needs the same database user or the right to end
    /// other users' sessions (`CONNECTION_ADMIN`, or `SUPER`).
    async fn end_holders(&self, key: &String, _shared: bool) -> Result<bool, Error> {
        let during = "ending the session that holds a user-level lock";
        let Some(holder) = self.holder(key).await?.filter(|id| *id != self.id) else {
            return Ok(false);
        };
        let _: Option<u8> = self
            .first(
                during,
                &format!("KILL CONNECTION {holder}"),
                Params::Empty,
                self.bound,
            )
            .await?;
        // A killed session ends a moment later: the lock is free of it once it has.
        let deadline = tokio::time::Instant::now() + self.bound;
        while self.holder(key).await? == Some(holder) {
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::connection(during, Silent { bound: self.bound }));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Ok(true)
    }

    /// Also checks that the statement ran in this session, as a proxy that moves a
    /// connection's statements between server sessions would not promise.
    async fn ping(&self) -> Result<(), Error> {
        let during = "checking a user-level lock session";
        let id: Option<u64> = self
            .first(during, "SELECT CONNECTION_ID()", Params::Empty, self.bound)
            .await?;
        if id == Some(self.id) {
            return Ok(());
        }
        self.break_off().await;
        Err(Error::invalid_config(
            "user-level locks need a connection that is one server session: a statement \
             ran in another session than its connection's, as behind a proxy that \
             multiplexes connections. Point the URL at the server",
            None,
        ))
    }
}
