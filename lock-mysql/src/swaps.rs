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
//! not sent (it would fail the statement for all): it takes its transaction.

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
use crate::store::Store;
use crate::swap::{Change, MOST_COMBINED, Sighting, Statement, Swap};

/// How long a swap may wait before it is no longer sent: half its window (50 ms), the
/// other half left for the statement's way to the server.
const STALE: Duration = Duration::from_millis(25);

/// What became of a queued swap.
#[derive(Debug)]
enum Outcome {
    /// The server changed its row.
    Applied,
    /// The server left its row as it was: the operation takes its transaction.
    NotApplied,
    /// Whether the server changed its row is unknown, or the statement failed.
    Failed(Error),
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
}

impl Swaps {
    fn push(&self, change: Change, during: &'static str) -> (u64, oneshot::Receiver<Outcome>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (outcome, answered) = oneshot::channel();
        self.lock().push_back(Queued {
            id,
            change,
            during,
            since: Instant::now(),
            outcome,
        });
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
                if let Some(stale) = queue.remove(index) {
                    stale.answer(Outcome::NotApplied);
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
) -> Result<Swapped<R>, Error> {
    let Swap {
        answer,
        after,
        change,
    } = swap;
    let (id, mut outcome) = swaps.push(change, during);

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
        held = send_statement(conn, statement_swaps, statement, bound).await;
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
    }
}

/// Sends `swaps` as one statement on `conn`, answers each, and gives the connection
/// back unless it is in doubt.
async fn send_statement(
    mut conn: Pooled,
    swaps: Vec<Queued>,
    statement: &Statement,
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
    let sent = tokio::time::timeout(
        bound,
        mysql_async::prelude::Queryable::exec_drop(&mut *conn, text, params),
    )
    .await;
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
mod tests {
    use tokio::time::Instant;

    use super::{Outcome, STALE, Swaps};
    use crate::store::Serving;
    use crate::swap::{Change, MOST_COMBINED};

    fn change(key: &str, server: u32) -> Change {
        Change {
            key: key.as_bytes().to_vec(),
            before: vec![1],
            written: vec![2],
            held_until: 0,
            window: (0, 0),
            serving: Serving {
                server,
                quarantine_until: 0,
            },
        }
    }

    fn keys(swaps: &[super::Queued]) -> Vec<String> {
        swaps
            .iter()
            .map(|queued| String::from_utf8_lossy(&queued.change.key).into_owned())
            .collect()
    }

    /// A statement takes swaps under one serving, on distinct rows, at most
    /// `MOST_COMBINED`, and leaves the rest queued in order. Fails if two servings or
    /// one row twice could share a statement.
    #[test]
    fn a_statement_takes_one_servings_distinct_rows() {
        let swaps = Swaps::default();
        let mut waiting = Vec::new();
        for (key, server) in [("a", 1), ("b", 2), ("a", 1), ("c", 1)] {
            waiting.push(swaps.push(change(key, server), "test").1);
        }
        assert_eq!(keys(&swaps.next_statement()), ["a", "c"]);
        assert_eq!(keys(&swaps.next_statement()), ["b"]);
        assert_eq!(keys(&swaps.next_statement()), ["a"]);
        assert!(swaps.next_statement().is_empty());
        for n in 0..=MOST_COMBINED {
            waiting.push(swaps.push(change(&n.to_string(), 1), "test").1);
        }
        assert_eq!(swaps.next_statement().len(), MOST_COMBINED);
        assert_eq!(swaps.next_statement().len(), 1);
    }

    /// A swap whose caller went away is not sent; one that waited past `STALE` takes
    /// its transaction; a withdrawn one is gone, and only once.
    #[test]
    fn gone_stale_and_withdrawn_swaps_are_not_sent() {
        let swaps = Swaps::default();
        let (_, gone) = swaps.push(change("gone", 1), "test");
        drop(gone);
        let (_, mut stale) = swaps.push(change("stale", 1), "test");
        if let Some(queued) = swaps.lock().back_mut() {
            queued.since = Instant::now()
                .checked_sub(STALE * 2)
                .expect("a clock past STALE");
        }
        let (withdrawn, _kept) = swaps.push(change("withdrawn", 1), "test");
        let (_, _fresh) = swaps.push(change("fresh", 1), "test");
        assert!(swaps.withdraw(withdrawn));
        assert!(!swaps.withdraw(withdrawn));
        assert_eq!(keys(&swaps.next_statement()), ["fresh"]);
        assert!(matches!(stale.try_recv(), Ok(Outcome::NotApplied)));
    }
}

/// The statement on a real server, whose global `sql_mode` is lax: the connection's own
/// strict mode is what rolls a failed row's statement back.
#[cfg(test)]
mod on_a_server {
    // reason: a test reports failures by panicking.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use lock_testkit::MariaDbServer;
    use mysql_async::Opts;
    use mysql_async::prelude::Queryable;
    use tokio::sync::oneshot;

    use super::{Outcome, Swaps, send_statement};
    use crate::pool::{Manager, Pool};
    use crate::schema::Tables;
    use crate::store::Serving;
    use crate::swap::{Change, Logging, Statement};

    fn change(key: &str, before: &[u8], written: &[u8], serving: Serving) -> Change {
        Change {
            key: key.as_bytes().to_vec(),
            before: before.to_vec(),
            written: written.to_vec(),
            held_until: 0,
            window: (0, u64::MAX),
            serving,
        }
    }

    /// Sends `changes` as one statement and answers what became of each.
    async fn send(pool: &Pool, statement: &Statement, changes: Vec<Change>) -> Vec<Outcome> {
        let swaps = Swaps::default();
        let answered: Vec<oneshot::Receiver<Outcome>> = changes
            .into_iter()
            .map(|change| swaps.push(change, "test").1)
            .collect();
        let queued = swaps.next_statement();
        assert_eq!(queued.len(), answered.len(), "one statement");
        let conn = pool.get().await.unwrap();
        assert!(
            send_statement(conn, queued, statement, Duration::from_secs(5))
                .await
                .is_some()
        );
        let mut outcomes = Vec::new();
        for outcome in answered {
            outcomes.push(outcome.await.unwrap());
        }
        outcomes
    }

    fn states(server: &MariaDbServer) -> String {
        server.sql("SELECT lock_key, HEX(state) FROM distlock_names ORDER BY lock_key")
    }

    /// Would fail if a statement with a failed row kept its other rows' changes (as a
    /// lax `sql_mode` does, storing an empty state), or if one serving another server
    /// changed anything.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_combined_statement_applies_to_all_its_rows_or_none() {
        let server = MariaDbServer::start().await;
        let said = server.sql("SET GLOBAL sql_mode = ''");
        assert!(said.trim().is_empty(), "{said}");
        let manager = Manager::new(
            (Opts::from_url(&server.url()).unwrap(), false),
            Duration::from_secs(5),
            Duration::from_secs(5),
        );
        let pool = Pool::builder(manager).max_size(1).build().unwrap();
        let tables = Tables::default();
        {
            let mut conn = pool.get().await.unwrap();
            conn.query_drop(tables.create_sql()).await.unwrap();
            conn.query_drop(
                "INSERT INTO distlock_names (lock_key, name, state) \
                 VALUES ('k1', 'k1', x'A1'), ('k2', 'k2', x'A2')",
            )
            .await
            .unwrap();
        }
        let statement = Statement::new(&tables, Logging::Rows);
        let serving = Serving {
            server: server.sql("SELECT @@server_id").trim().parse().unwrap(),
            quarantine_until: 0,
        };

        let one_row_moved = vec![
            change("k1", &[0xA1], &[0xB1], serving),
            change("k2", &[0xEE], &[0xB2], serving),
        ];
        let outcomes = send(&pool, &statement, one_row_moved).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::NotApplied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tA1\nk2\tA2\n");

        let elsewhere = Serving {
            server: serving.server + 1,
            ..serving
        };
        let another_server = vec![
            change("k1", &[0xA1], &[0xB1], elsewhere),
            change("k2", &[0xA2], &[0xB2], elsewhere),
        ];
        let outcomes = send(&pool, &statement, another_server).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::NotApplied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tA1\nk2\tA2\n");

        let both = vec![
            change("k1", &[0xA1], &[0xB1], serving),
            change("k2", &[0xA2], &[0xB2], serving),
        ];
        let outcomes = send(&pool, &statement, both).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::Applied)),
            "{outcomes:?}"
        );
        assert_eq!(states(&server), "k1\tB1\nk2\tB2\n");

        let a_row_deleted = vec![
            change("k1", &[0xB1], &[0xC1], serving),
            change("gone", &[0xB3], &[0xC3], serving),
        ];
        let outcomes = send(&pool, &statement, a_row_deleted).await;
        assert!(
            outcomes.iter().all(|o| matches!(o, Outcome::Failed(_))),
            "in doubt: {outcomes:?}"
        );
    }
}
