//! Acquires and releases that callers queue while they wait for a pooled connection,
//! sent several to a statement.
//!
//! Under load, callers wait for the pool. The caller that gets a connection sends every
//! queued call it may, up to [`MOST_COMBINED`], as the columns of one `SELECT`
//! (`SELECT s.acquire(...), s.release(...)`), and each caller gets its column. A
//! statement outside a transaction block is a transaction of its own, so the server's
//! work per statement (its network, its transaction and its commit) is paid once for all
//! of its calls; at the SQL level four calls to a statement ran about twice the pairs a
//! second of one call to a statement. A caller alone sends its call alone, as before.
//!
//! What keeps it exact:
//!
//! - Two calls on one name never share a statement: the order in which the server
//!   evaluates a `SELECT`'s columns is not a documented promise, and two operations on
//!   one name must run in the order they were asked.
//! - The calls of a statement are ordered by name. Each entry point takes its name's
//!   advisory lock until the transaction ends, so two statements that took two names in
//!   opposite orders could each wait for the other.
//! - A statement the server refused rolled back whole: none of its calls took effect.
//!   Each then runs again alone, so that one call's refusal (a lease longer than the
//!   database allows) or a deadlock the server broke (with a caller's own transaction
//!   that checks holds) is its own call's answer and no other's.
//! - A statement that goes unanswered leaves each of its calls in doubt, as it would
//!   leave one call alone: each caller gets the connection error it would have got.
//! - A call whose caller went away is not sent. A statement that carries other callers'
//!   calls runs in a task of its own, so that a caller that goes away cannot cut off
//!   the others' answers.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use deadpool_postgres::Object;
use lock_core::Error;
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::time::Instant;
use tokio_postgres::Row;

use crate::calls::{self, Arg, Param};
use crate::error::failed;
use crate::schema::SchemaName;
use crate::statements::{Failure, Statements};

/// The most calls one statement carries: enough for the queue of a busy pool (64
/// callers on 16 connections), few enough that a statement's advisory locks are not
/// held long.
pub(crate) const MOST_COMBINED: usize = 4;

/// The arguments of an entry point's call, owned, so that the call can wait in the
/// queue.
pub(crate) trait Arguments: Send + Sync + 'static {
    /// The arguments, always for the same parameters in the same order.
    fn args(&self) -> Vec<Arg<'_>>;
}

/// A call of an entry point that returns `bigint[]`.
pub(crate) struct Call {
    /// The entry point.
    pub(crate) function: &'static str,
    /// The lock name it is on.
    pub(crate) name: String,
    pub(crate) during: &'static str,
    pub(crate) arguments: Box<dyn Arguments>,
}

/// A call's reply, or why there is none.
type Reply = Result<Vec<i64>, Error>;

/// A call waiting for a statement.
struct Queued {
    id: u64,
    call: Call,
    reply: oneshot::Sender<Reply>,
}

impl Queued {
    fn answer(self, reply: Reply) {
        if self.reply.send(reply).is_err() {
            tracing::debug!(
                target: lock_core::TRACING_TARGET,
                during = self.call.during,
                "a combined call's caller went away before its reply"
            );
        }
    }
}

/// The calls waiting for a statement, in the order they were queued, and the text of
/// each statement shape sent so far.
#[derive(Default)]
pub(crate) struct Combiner {
    queue: Mutex<VecDeque<Queued>>,
    next_id: AtomicU64,
    /// Statement texts by the entry points of their columns, in order (`""` past the
    /// last).
    texts: Mutex<HashMap<[&'static str; MOST_COMBINED], Arc<str>>>,
}

impl std::fmt::Debug for Combiner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Combiner")
            .field("queued", &lock(&self.queue).len())
            .finish_non_exhaustive()
    }
}

impl Combiner {
    /// Sends `call` in a statement, alone or with the calls other callers queue
    /// meanwhile, and returns its reply.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe, as a statement alone is not: a caller that goes away once its
    /// call was sent leaves its outcome unknown. A call not yet sent is not sent.
    pub(crate) async fn call(&self, statements: &Statements, call: Call) -> Reply {
        let during = call.during;
        let deadline = Instant::now() + statements.response_timeout;
        let (id, mut reply) = self.push(call);
        loop {
            match reply.try_recv() {
                Ok(replied) => return replied,
                Err(TryRecvError::Closed) => return Err(cut_off(during)),
                Err(TryRecvError::Empty) => {}
            }
            // Whichever comes first: the reply from a statement another caller sent, or
            // a connection to send one on.
            let mut getting = Box::pin(statements.getting(deadline));
            let conn = tokio::select! {
                biased;
                replied = &mut reply => {
                    // The pool may be opening a connection for this wait: it finishes,
                    // and the connection joins the pool.
                    tokio::spawn(getting);
                    return replied.unwrap_or_else(|_| Err(cut_off(during)));
                }
                got = &mut getting => statements.got(during, got),
            };
            let conn = match conn {
                Ok(conn) => conn,
                Err(err) if self.withdraw(id) => return Err(err),
                // A statement took the call meanwhile: its reply comes.
                Err(_) => return wait(reply, deadline, statements, during).await,
            };
            let queued = self.next_statement();
            if queued.is_empty() {
                // Another caller's statement carries this call: the connection goes back.
                drop(conn);
                return wait(reply, deadline, statements, during).await;
            }
            let text = self.text(&queued, &statements.schema);
            if let [only] = queued.as_slice()
                && only.id == id
            {
                send(statements, conn, &text, queued).await;
            } else {
                let statements = statements.clone();
                tokio::spawn(async move { send(&statements, conn, &text, queued).await });
            }
        }
    }

    fn push(&self, call: Call) -> (u64, oneshot::Receiver<Reply>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, replied) = oneshot::channel();
        lock(&self.queue).push_back(Queued { id, call, reply });
        (id, replied)
    }

    /// Takes call `id` out of the queue: `false` when a statement already took it.
    fn withdraw(&self, id: u64) -> bool {
        let mut queue = lock(&self.queue);
        let before = queue.len();
        queue.retain(|queued| queued.id != id);
        queue.len() < before
    }

    /// The calls of the next statement: from the front, at most [`MOST_COMBINED`], on
    /// distinct names, ordered by name. Calls whose callers went away are dropped.
    fn next_statement(&self) -> Vec<Queued> {
        let mut queue = lock(&self.queue);
        let mut statement: Vec<Queued> = Vec::with_capacity(MOST_COMBINED);
        let mut index = 0;
        while statement.len() < MOST_COMBINED && index < queue.len() {
            let candidate = &queue[index];
            if candidate.reply.is_closed() {
                queue.remove(index);
            } else if statement
                .iter()
                .any(|taken| taken.call.name == candidate.call.name)
            {
                index += 1;
            } else if let Some(taken) = queue.remove(index) {
                statement.push(taken);
            }
        }
        drop(queue);
        statement.sort_by(|a, b| a.call.name.cmp(&b.call.name));
        statement
    }

    /// The text of a statement of `queued`'s calls, made once per shape.
    fn text(&self, queued: &[Queued], schema: &SchemaName) -> Arc<str> {
        let mut shape = [""; MOST_COMBINED];
        for (slot, queued) in shape.iter_mut().zip(queued) {
            *slot = queued.call.function;
        }
        Arc::clone(
            lock(&self.texts)
                .entry(shape)
                .or_insert_with(|| statement_text(queued, schema).into()),
        )
    }
}

/// `SELECT s.f(...), s.g(...)`: `queued`'s calls as the columns of one statement, their
/// placeholders numbered on from one call to the next.
fn statement_text(queued: &[Queued], schema: &SchemaName) -> String {
    let mut text = String::from("SELECT ");
    let mut first = 1;
    for (i, queued) in queued.iter().enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        let args = queued.call.arguments.args();
        let (call, _) = calls::named_from(queued.call.function, &args, first);
        first += args.len();
        text.push_str(schema.as_str());
        text.push('.');
        text.push_str(&call);
    }
    text
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The reply of a call a statement carries, by `deadline`.
async fn wait(
    reply: oneshot::Receiver<Reply>,
    deadline: Instant,
    statements: &Statements,
    during: &'static str,
) -> Reply {
    match tokio::time::timeout_at(deadline, reply).await {
        Ok(replied) => replied.unwrap_or_else(|_| Err(cut_off(during))),
        Err(_) => Err(statements.silent(during)),
    }
}

/// Sends `queued` as one statement on `conn` and answers each call; a statement the
/// server refused runs each of its calls again alone.
async fn send(statements: &Statements, conn: Object, text: &str, queued: Vec<Queued>) {
    let deadline = Instant::now() + statements.response_timeout;
    let failure = {
        let arguments: Vec<Vec<Arg<'_>>> = queued.iter().map(|q| q.call.arguments.args()).collect();
        let params: Vec<Param<'_>> = arguments
            .iter()
            .flat_map(|args| calls::params(args))
            .collect();
        match statements.query_on(conn, (text, &params), deadline).await {
            Ok((rows, _)) => {
                for (column, queued) in queued.into_iter().enumerate() {
                    let during = queued.call.during;
                    queued.answer(column_of(&rows, column, during));
                }
                return;
            }
            Err(failure) => failure,
        }
    };
    match failure {
        Failure::Refused(err, conn) if queued.len() > 1 && err.as_db_error().is_some() => {
            tracing::debug!(
                target: lock_core::TRACING_TARGET,
                calls = queued.len(),
                error = %err,
                "the server refused a statement of several calls; each runs alone"
            );
            alone(statements, conn, queued).await;
        }
        failure => answer_all(queued, failure, &statements.schema),
    }
}

/// Runs each of `queued` alone on `conn`, one after the other.
async fn alone(statements: &Statements, mut conn: Object, queued: Vec<Queued>) {
    let mut queued = queued.into_iter();
    while let Some(next) = queued.next() {
        let (during, schema) = (next.call.during, &statements.schema);
        let deadline = Instant::now() + statements.response_timeout;
        let outcome = {
            let text = statement_text(std::slice::from_ref(&next), schema);
            let args = next.call.arguments.args();
            statements
                .query_on(conn, (&text, &calls::params(&args)), deadline)
                .await
        };
        match outcome {
            Ok((rows, back)) => {
                next.answer(column_of(&rows, 0, during));
                conn = back;
            }
            Err(Failure::Refused(err, back)) if err.as_db_error().is_some() => {
                next.answer(Err(failed(err, during, schema)));
                conn = back;
            }
            Err(failure) => {
                let rest: Vec<Queued> = std::iter::once(next).chain(queued).collect();
                answer_all(rest, failure, schema);
                return;
            }
        }
    }
}

/// Answers every call of a statement that failed: a call alone with its own error, the
/// calls of a statement whose connection broke or went silent each with a connection
/// error.
fn answer_all(mut queued: Vec<Queued>, failure: Failure, schema: &SchemaName) {
    if queued.len() == 1
        && let Some(only) = queued.pop()
    {
        let during = only.call.during;
        only.answer(Err(failure.into_error(during, schema)));
        return;
    }
    match failure {
        Failure::Refused(err, conn) => {
            // The pool checks whether the connection is still usable when it recycles it.
            drop(conn);
            let err = Arc::new(err);
            for queued in queued {
                let during = queued.call.during;
                queued.answer(Err(Error::connection(
                    during,
                    SharedError(Arc::clone(&err)),
                )));
            }
        }
        Failure::Silent(bound) => {
            for queued in queued {
                let during = queued.call.during;
                queued.answer(Err(Failure::Silent(bound).into_error(during, schema)));
            }
        }
    }
}

/// Column `column` of the statement's one row: a call's reply.
fn column_of(rows: &[Row], column: usize, during: &'static str) -> Reply {
    let row = rows
        .first()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
    row.try_get(column)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))
}

fn cut_off(during: &'static str) -> Error {
    Error::connection(during, CutOff)
}

/// The statement that carried a call ended without its reply.
#[derive(Debug, thiserror::Error)]
#[error("the statement that carried the call ended without its reply")]
struct CutOff;

/// A driver error that failed every call of one statement.
#[derive(Debug, thiserror::Error)]
#[error("the statement that carried the call failed")]
struct SharedError(#[source] Arc<tokio_postgres::Error>);
