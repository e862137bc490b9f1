//! The swaps that callers queue while they wait for a connection, sent several to a
//! statement.
//!
//! Under load, operations on names this client wrote last (see [`crate::swap`]) wait
//! for the pool. The caller that gets a connection sends every queued swap it may, up
//! to [`MOST_COMBINED`], as one `UPDATE` of their rows. Each row keeps its own guards
//! (its bytes and its window for the server's clock) inside the statement; the serving
//! server and its quarantine are checked once, so only swaps placed under the same
//! serving share a statement. A statement's network, parsing and commit are the
//! server's cost of a swap, and they are paid once for all of its rows.
//!
//! A combined statement applies to all of its rows or to none:
//!
//! - a row whose guards fail is set to `NULL`, which its `NOT NULL` column refuses in
//!   the connection's strict `sql_mode`, so the server rolls the statement back, and
//!   every swap of it takes its transaction, as a swap alone does when its row changed;
//! - a serving server that is not the one the swaps were placed under matches no row;
//! - only a row deleted by hand makes a statement change fewer rows than it names, and
//!   then which swaps applied is unknown: each caller gets an error, as for a statement
//!   that went unanswered.
//!
//! A swap that waited so long that its window for the server's clock may have passed is
//! not sent (it would fail the statement for all): its caller steps the operation again
//! on the row and queues it at the front, a few times at most, then takes the
//! transaction. Where statements are slow (a distant server), queueing would make most
//! swaps stale: after a statement slower than [`SLOW`], operations take a connection
//! first and step their machines once they have it, each alone, until a statement is
//! quick again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::Error;
use tokio::sync::oneshot;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::time::Instant;

use crate::error::{Silent, code, failed, worth_another_run};
use crate::pool::{Pooled, discard};
use crate::state::State;
use crate::store::Store;
use crate::swap::{Change, MOST_COMBINED, Sighting, Statement, Swap};

/// How long a swap may wait before it is no longer sent: half its window (50 ms), the
/// other half left for the statement's way to the server.
const STALE: Duration = Duration::from_millis(25);

/// While statements take longer than this (a moving average of the last few), the client
/// stops queueing swaps: a queued swap that waits behind two such statements goes
/// stale. Each operation then takes a connection first and steps its machine once it has
/// it, as it would alone, which no waiting can make stale.
const SLOW: Duration = Duration::from_millis(10);

/// What became of a queued swap.
#[derive(Debug)]
enum Outcome {
    /// The server changed its row.
    Applied,
    /// The server left its row as it was: the operation takes its transaction.
    NotApplied,
    /// Whether the server changed its row is unknown, or the statement failed.
    Failed(Error),
    /// It waited so long that its window for the server's clock may have passed, and
    /// was not sent: it is to be stepped again on its row (see [`Swapped::Stale`]).
    Stale(Change),
}

/// A swap waiting for a statement.
#[derive(Debug)]
struct Queued {
    id: u64,
    change: Change,
    during: &'static str,
    /// When it was queued.
    since: Instant,
    outcome: oneshot::Sender<Outcome>,
}

impl Queued {
    fn answer(self, outcome: Outcome) {
        // A caller that went away runs no transaction and keeps no row: nothing is lost.
        if self.outcome.send(outcome).is_err() {
            tracing::debug!(
                target: lock_core::TRACING_TARGET,
                "a swap's caller went away before its outcome"
            );
        }
    }
}

/// The swaps waiting for a statement, in the order they were queued.
#[derive(Debug, Default)]
pub(crate) struct Swaps {
    queue: Mutex<VecDeque<Queued>>,
    next_id: AtomicU64,
    /// How long statements take, in microseconds: a moving average that gives the latest
    /// statement an eighth of its weight.
    round_trip: AtomicU64,
}

impl Swaps {
    /// Whether operations should take a connection before they step their machines
    /// rather than queue their swaps: statements are slow now (see [`SLOW`]).
    pub(crate) fn slow(&self) -> bool {
        u128::from(self.round_trip.load(Ordering::Relaxed)) > SLOW.as_micros()
    }

    /// Counts a statement that took `took` into the moving average. Two callers that
    /// count at once may each miss the other's statement, which an average can afford.
    fn took(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let average = self.round_trip.load(Ordering::Relaxed);
        let average = average - average / 8 + took / 8;
        self.round_trip.store(average, Ordering::Relaxed);
    }

    /// Queues a swap at the back, or at the front when it comes again after it went
    /// stale (so that waiting again does not make it stale again).
    fn push(
        &self,
        change: Change,
        during: &'static str,
        again: bool,
    ) -> (u64, oneshot::Receiver<Outcome>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (outcome, answered) = oneshot::channel();
        let queued = Queued {
            id,
            change,
            during,
            since: Instant::now(),
            outcome,
        };
        let mut queue = self.lock();
        if again {
            queue.push_front(queued);
        } else {
            queue.push_back(queued);
        }
        (id, answered)
    }

    /// Takes the swap `id` out of the queue: `false` when a statement already took it.
    fn withdraw(&self, id: u64) -> bool {
        let mut queue = self.lock();
        let before = queue.len();
        queue.retain(|queued| queued.id != id);
        queue.len() < before
    }

    /// The swaps of the next statement: from the front, at most [`MOST_COMBINED`], all
    /// placed under the first one's serving, on distinct rows. Swaps whose callers went
    /// away are dropped; swaps that waited too long take their transactions.
    fn next_statement(&self) -> Vec<Queued> {
        let mut queue = self.lock();
        let mut statement: Vec<Queued> = Vec::with_capacity(MOST_COMBINED);
        let mut index = 0;
        while statement.len() < MOST_COMBINED && index < queue.len() {
            let candidate = &queue[index];
            if candidate.outcome.is_closed() {
                queue.remove(index);
            } else if candidate.since.elapsed() > STALE {
                if let Some(Queued {
                    change, outcome, ..
                }) = queue.remove(index)
                    && outcome.send(Outcome::Stale(change)).is_err()
                {
                    tracing::debug!(
                        target: lock_core::TRACING_TARGET,
                        "a stale swap's caller went away"
                    );
                }
            } else if statement.first().is_some_and(|first| {
                first.change.serving != candidate.change.serving
                    || statement
                        .iter()
                        .any(|taken| taken.change.key == candidate.change.key)
            }) {
                index += 1;
            } else if let Some(taken) = queue.remove(index) {
                statement.push(taken);
            }
        }
        statement
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Queued>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a swap came to: its answer and the row as committed when the server applied
/// it, else a connection for the operation's transaction when the caller holds one.
#[allow(
    clippy::large_enum_variant,
    reason = "made once per operation and moved once: a box would cost an allocation a swap"
)]
pub(crate) enum Swapped<R> {
    Applied(R, Sighting),
    NotApplied(Option<Pooled>),
    /// Not sent, as it waited too long: the row as the swap found it, to step the
    /// operation on again (decoded from its bytes, as a transaction would read it).
    Stale(Sighting),
}

/// Sends `swap` in a statement, alone or with the swaps other callers queue meanwhile.
///
/// # Cancel safety
///
/// Not cancel-safe: a caller that goes away once its swap was sent leaves its outcome
/// unknown. The store runs every operation to its end.
pub(crate) async fn send<R>(
    store: &Store,
    (swaps, statement): (&Swaps, &Statement),
    swap: Swap<R>,
    during: &'static str,
    again: bool,
) -> Result<Swapped<R>, Error> {
    let Swap {
        answer,
        after,
        change,
    } = swap;
    let (id, mut outcome) = swaps.push(change, during, again);

    let bound = store.response_timeout();
    let mut held: Option<Pooled> = None;
    loop {
        match outcome.try_recv() {
            Ok(came) => return finish(came, (answer, after), held),
            // Only a sender dropped unanswered: a statement whose caller went away.
            Err(TryRecvError::Closed) => return Err(in_doubt(during)),
            Err(TryRecvError::Empty) => {}
        }
        let conn = match held.take() {
            Some(conn) => conn,
            // Whichever comes first: the outcome of a statement another caller sent, or
            // a connection to send one on.
            None => tokio::select! {
                biased;
                came = &mut outcome => {
                    let came = came.map_err(|_| in_doubt(during))?;
                    return finish(came, (answer, after), None);
                }
                conn = store.connection(during) => match conn {
                    Ok(conn) => conn,
                    Err(err) if swaps.withdraw(id) => return Err(err),
                    // A statement took the swap meanwhile: its outcome comes.
                    Err(_) => {
                        let came = (&mut outcome).await.map_err(|_| in_doubt(during))?;
                        return finish(came, (answer, after), None);
                    }
                },
            },
        };
        let statement_swaps = swaps.next_statement();
        if statement_swaps.is_empty() {
            // Another caller's statement carries this swap: the connection goes back.
            drop(conn);
            let came = (&mut outcome).await.map_err(|_| in_doubt(during))?;
            return finish(came, (answer, after), None);
        }
        held = send_statement(conn, statement_swaps, (swaps, statement), bound).await;
    }
}

/// Sends `swap` alone on `conn`, taken before the swap was stepped (see [`SLOW`]).
///
/// # Cancel safety
///
/// Not cancel-safe, as [`send`].
pub(crate) async fn send_alone<R>(
    conn: Pooled,
    (swaps, statement): (&Swaps, &Statement),
    swap: Swap<R>,
    (during, bound): (&'static str, Duration),
) -> Result<Swapped<R>, Error> {
    let Swap {
        answer,
        after,
        change,
    } = swap;
    let (outcome, mut answered) = oneshot::channel();
    let alone = Queued {
        id: 0,
        change,
        during,
        since: Instant::now(),
        outcome,
    };
    let held = send_statement(conn, vec![alone], (swaps, statement), bound).await;
    let came = answered.try_recv().map_err(|_| in_doubt(during))?;
    finish(came, (answer, after), held)
}

/// Sends `swap` alone on `conn`, as the text that statements logging replicates (see
/// [`crate::swap`]).
///
/// # Cancel safety
///
/// Not cancel-safe, as [`send`].
pub(crate) async fn send_logged<R>(
    mut conn: Pooled,
    (_, statement): (&Swaps, &Statement),
    swap: Swap<R>,
    (during, bound): (&'static str, Duration),
) -> Result<Swapped<R>, Error> {
    match tokio::time::timeout(bound, swap.send_logged(&mut conn, statement)).await {
        Ok(Ok(Some((answer, seen)))) => Ok(Swapped::Applied(answer, seen)),
        Ok(Ok(None)) => Ok(Swapped::NotApplied(Some(conn))),
        Ok(Err(err)) => {
            discard(conn);
            // A statement the server refused (a deadlock's victim) changed nothing: the
            // transaction runs.
            if worth_another_run(&err) {
                Ok(Swapped::NotApplied(None))
            } else {
                Err(failed(err, during))
            }
        }
        Err(_) => {
            discard(conn);
            Err(Error::connection(during, Silent { bound }))
        }
    }
}

/// The caller's result of its swap's outcome.
fn finish<R>(
    outcome: Outcome,
    (answer, after): (R, Sighting),
    conn: Option<Pooled>,
) -> Result<Swapped<R>, Error> {
    match outcome {
        Outcome::Applied => Ok(Swapped::Applied(answer, after)),
        Outcome::NotApplied => Ok(Swapped::NotApplied(conn)),
        Outcome::Failed(err) => Err(err),
        Outcome::Stale(change) => Ok(match State::decode(&change.before) {
            Some(state) => Swapped::Stale(Sighting {
                stored: change.before,
                state,
                serving: change.serving,
                clock: after.clock,
                at: after.at,
            }),
            None => Swapped::NotApplied(conn),
        }),
    }
}

/// Sends `swaps` as one statement on `conn`, answers each, and gives the connection
/// back unless it is in doubt.
async fn send_statement(
    mut conn: Pooled,
    swaps: Vec<Queued>,
    (queue, statement): (&Swaps, &Statement),
    bound: Duration,
) -> Option<Pooled> {
    let changes: Vec<&Change> = swaps.iter().map(|queued| &queued.change).collect();
    let Some((text, params)) = statement.prepared(&changes) else {
        for queued in swaps {
            queued.answer(Outcome::NotApplied);
        }
        return Some(conn);
    };
    let named = changes.len() as u64;
    let started = Instant::now();
    let sent = tokio::time::timeout(
        bound,
        mysql_async::prelude::Queryable::exec_drop(&mut *conn, text, params),
    )
    .await;
    queue.took(started.elapsed());
    match sent {
        Ok(Ok(())) => {
            // The rows it changed are the rows it matched: each writes bytes other
            // than those it compares.
            let rows_changed = conn.affected_rows();
            for queued in swaps {
                let outcome = if rows_changed == named {
                    Outcome::Applied
                } else if rows_changed == 0 {
                    Outcome::NotApplied
                } else {
                    Outcome::Failed(Error::backend(queued.during, PartlyApplied))
                };
                queued.answer(outcome);
            }
            Some(conn)
        }
        // Rolled back whole: a row's guards failed, or a deadlock's victim.
        Ok(Err(err)) if refused_whole(&err) => {
            for queued in swaps {
                queued.answer(Outcome::NotApplied);
            }
            Some(conn)
        }
        Ok(Err(err)) => {
            discard(conn);
            let mut swaps = swaps;
            if swaps.len() == 1
                && let Some(only) = swaps.pop()
            {
                let during = only.during;
                only.answer(Outcome::Failed(failed(err, during)));
                return None;
            }
            let err = Arc::new(err);
            for queued in swaps {
                let during = queued.during;
                queued.answer(Outcome::Failed(Error::connection(during, Arc::clone(&err))));
            }
            None
        }
        Err(_) => {
            discard(conn);
            for queued in swaps {
                let during = queued.during;
                queued.answer(Outcome::Failed(Error::connection(during, Silent { bound })));
            }
            None
        }
    }
}

/// Whether the server refused the whole statement, having changed nothing: a row set
/// to `NULL` by its failed guards, or a deadlock's victim or a lock wait, rolled back.
fn refused_whole(err: &mysql_async::Error) -> bool {
    worth_another_run(err)
        || matches!(err, mysql_async::Error::Server(server) if server.code == code::BAD_NULL)
}

fn in_doubt(during: &'static str) -> Error {
    Error::connection(during, Unanswered)
}

/// A combined statement changed fewer rows than it named.
#[derive(Debug, thiserror::Error)]
#[error(
    "a statement of several swaps changed only some of their rows (a row was deleted by \
     hand?): which of them applied is unknown"
)]
struct PartlyApplied;

/// A swap's statement went away before it was answered.
#[derive(Debug, thiserror::Error)]
#[error("the statement that carried the swap was cut off")]
struct Unanswered;

#[cfg(test)]
mod tests;
