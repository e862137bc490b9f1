//! The store: each operation is one transaction that locks the rows of the names it is
//! about, steps their machines in the client, and writes back what changed, in two round
//! trips.
//!
//! 1. `START TRANSACTION`, the rows `SELECT ... FOR UPDATE`, and the server's clock read
//!    after the row locks were granted.
//! 2. The changed rows written, the waiters' notices put in their mailboxes, `COMMIT`,
//!    and then the waiters' listening statements interrupted (see [`crate::notify`]).
//!
//! A name whose row this client wrote last changes in one statement instead, a
//! compare-and-set that falls back to this transaction (see [`crate::swap`]).
//!
//! The first round trip also reads which server answers (`@@server_id`) and the epoch
//! row. A server other than the one the epoch names took over from it (a replica
//! promoted after its primary died, which may lack the last grants): the first
//! transaction to see it starts the failover quarantine, in which nothing is granted for
//! the longest lease any hold may have (the same rule as PostgreSQL's, third review R4),
//! and each name's fencing tokens jump past the server's clock when its row is first
//! touched on the new server (a name's tokens begin at its creation's microseconds and
//! grow by one a grant, so none issued before can be that high).
//!
//! Values go into the statements as hexadecimal literals, so one round trip carries
//! several statements without any text escaping. Each operation runs to its end
//! ([`to_the_end`]): a caller that gives up does not leave a transaction half-sent, and
//! a transaction that fails or runs out of time closes its connection, which rolls it
//! back.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use lock_core::Error;
use lock_core::runtime::to_the_end;
use mysql_async::Row;
use mysql_async::prelude::Queryable;

use crate::batch::{Batches, Op};
use crate::error::{Silent, Unreadable, failed, worth_another_run};
use crate::mailbox::Notice;
use crate::pool::{Pool, Pooled, discard};
use crate::schema::{Tables, hex, key};
pub(crate) use crate::serving::Serving;
use crate::serving::serving;
use crate::state::State;
use crate::swap::{self, Logging, Seen, Sighting};
use crate::swaps::{self, Swapped, Swaps};

/// The server's clock in microseconds since the epoch (the machines' time), read when
/// the statement runs.
pub(crate) const NOW: &str = "SELECT CAST(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000 AS UNSIGNED)";

/// The server's clock in microseconds when the statement began: the same on a replica
/// that applies the statement as on the server that ran it.
pub(crate) const NOW_STARTED: &str = "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS UNSIGNED)";

/// The longest state written as a literal in the commit's round trip; a longer one is
/// sent as a bound parameter of its own statement first.
const INLINE: usize = 2048;

/// How often a transaction runs before its failure is returned: a deadlock's victim, a
/// row-lock wait that ran out, or the loser of two first writes of a name runs again.
const RUNS: usize = 3;

/// One name in a transaction: its state as the row holds it (`None`: no row yet).
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) name: String,
    key: Vec<u8>,
    pub(crate) state: Option<State>,
    /// The row's bytes as read (`None`: no row).
    stored: Option<Vec<u8>>,
    /// The server the transaction runs on, and its quarantine.
    pub(crate) serving: Serving,
}

impl Slot {
    /// A name whose row this client committed last, as it committed it.
    pub(crate) fn kept(
        name: &str,
        key: Vec<u8>,
        state: State,
        stored: Vec<u8>,
        serving: Serving,
    ) -> Self {
        Self {
            name: name.to_owned(),
            key,
            state: Some(state),
            stored: Some(stored),
            serving,
        }
    }

    /// The state as stepped and the row's bytes as read, when the name had a row and
    /// still has a state.
    pub(crate) fn kept_state(self) -> Option<(State, Vec<u8>)> {
        self.state.zip(self.stored)
    }
}

/// How many times an operation is stepped on a kept row when its swap waited too long
/// for a statement (see [`crate::swaps`]), before it takes the transaction.
const SWAP_ROUNDS: usize = 3;

/// The store: the pool, the tables, and the bound of every transaction.
#[derive(Debug, Clone)]
pub(crate) struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    pool: Pool,
    batches: Batches,
    seen: Seen,
    /// The swaps waiting for a statement.
    swaps: Swaps,
    tables: Tables,
    /// The swap's statement.
    swap: swap::Statement,
    response_timeout: Duration,
    quarantine: Duration,
}

impl Store {
    /// A store over `pool` and `tables`, whose transactions take at most
    /// `response_timeout`, and whose failover quarantine (the longest lease a name it
    /// creates grants) is `quarantine`.
    pub(crate) fn new(
        pool: Pool,
        (tables, logging): (Tables, Logging),
        (response_timeout, quarantine): (Duration, Duration),
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                pool,
                batches: Batches::default(),
                seen: Seen::default(),
                swaps: Swaps::default(),
                swap: swap::Statement::new(&tables, logging),
                tables,
                response_timeout,
                quarantine,
            }),
        }
    }

    /// The failover quarantine, and the longest lease of the names this client creates.
    pub(crate) fn quarantine(&self) -> Duration {
        self.inner.quarantine
    }

    pub(crate) fn tables(&self) -> &Tables {
        &self.inner.tables
    }

    pub(crate) fn batches(&self) -> &Batches {
        &self.inner.batches
    }

    /// Runs `step` on the machine of `name` in the name's next transaction (see
    /// [`crate::batch`]) and returns its answer once committed.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the transaction runs in a task of its own, to its end.
    pub(crate) async fn transact_one<R, F>(
        &self,
        name: &str,
        during: &'static str,
        step: F,
    ) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&mut Slot, u64) -> (R, Vec<Notice>) + Send + Sync + 'static,
    {
        let answer = Arc::new(Mutex::new(None));
        let kept = Arc::clone(&answer);
        let op: Op = Arc::new(move |slot, clock| {
            let (reply, notices) = step(slot, clock);
            *kept.lock().unwrap_or_else(PoisonError::into_inner) = Some(reply);
            notices
        });
        self.inner.batches.run(self, name, during, op).await?;
        let answer = answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        answer.ok_or_else(|| Error::backend(during, std::io::Error::other("no answer")))
    }

    /// Runs `step` on the machines of `names` (each name once) in one transaction, at
    /// the server's clock, and commits what it changed with the notices it returns.
    /// `step` may run more than once (a deadlock's victim runs again), each time on
    /// the rows as then read.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the transaction runs to its end, in a task of its own once its caller goes away.
    pub(crate) async fn transact<R, F>(
        &self,
        names: Vec<String>,
        during: &'static str,
        step: F,
    ) -> Result<R, Error>
    where
        R: Send + 'static,
        F: Fn(&mut [Slot], u64) -> (R, Vec<Notice>) + Send + Sync + 'static,
    {
        let store = self.clone();
        to_the_end(async move { store.run(names, during, step).await }).await
    }

    pub(crate) async fn run<R, F>(
        &self,
        mut names: Vec<String>,
        during: &'static str,
        step: F,
    ) -> Result<R, Error>
    where
        F: Fn(&mut [Slot], u64) -> (R, Vec<Notice>),
    {
        // One order for every transaction's row locks.
        names.sort();
        names.dedup();
        // A connection the swap leaves to the transaction.
        let mut left = None;
        // A name this client wrote last: one statement (see [`crate::swap`]).
        if let [name] = names.as_slice()
            && let Some(mut seen) = self.inner.seen.take(name)
        {
            for round in 0..SWAP_ROUNDS {
                let queues = (&self.inner.swaps, &self.inner.swap);
                let combines = self.inner.swap.combines();
                // Alone, the connection first: the window for the server's clock starts
                // when the statement can be sent, not before a wait for the pool.
                let alone = !combines || self.inner.swaps.slow();
                let conn = if alone {
                    Some(self.connection(during).await?)
                } else {
                    None
                };
                let Some(swap) = swap::prepare(name, seen, &step) else {
                    return self.transaction(names, during, step, conn).await;
                };
                let bound = self.inner.response_timeout;
                let swapped = match conn {
                    None => swaps::send(self, queues, swap, during, round > 0).await?,
                    Some(conn) if combines => {
                        swaps::send_alone(conn, queues, swap, (during, bound)).await?
                    }
                    Some(conn) => swaps::send_logged(conn, queues, swap, (during, bound)).await?,
                };
                match swapped {
                    Swapped::Applied(answer, seen) => {
                        self.inner.seen.keep(name, seen);
                        return Ok(answer);
                    }
                    // The row changed, or the server or its clock is not the one the
                    // swap assumed: the transaction reads them afresh.
                    Swapped::NotApplied(conn) => {
                        left = conn;
                        break;
                    }
                    Swapped::Stale(row) => seen = row,
                }
            }
        }
        self.transaction(names, during, step, left).await
    }

    /// The operation as a transaction (see the module's docs), run again after a
    /// deadlock or a lost race for a first write; on `left`, a connection of the pool,
    /// first, if given.
    async fn transaction<R, F>(
        &self,
        names: Vec<String>,
        during: &'static str,
        step: F,
        mut left: Option<Pooled>,
    ) -> Result<R, Error>
    where
        F: Fn(&mut [Slot], u64) -> (R, Vec<Notice>),
    {
        let bound = self.inner.response_timeout;
        let mut last = None;
        for _ in 0..RUNS {
            let mut conn = match left.take() {
                Some(conn) => conn,
                None => self.connection(during).await?,
            };
            match tokio::time::timeout(bound, self.once(&mut conn, &names, &step)).await {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(Failure::Driver(err))) => {
                    discard(conn);
                    if !worth_another_run(&err) {
                        return Err(failed(err, during));
                    }
                    last = Some(failed(err, during));
                }
                Ok(Err(Failure::Unreadable)) => {
                    discard(conn);
                    return Err(Error::incompatible(names.join(", "), Unreadable));
                }
                Err(_) => {
                    discard(conn);
                    return Err(Error::connection(during, Silent { bound }));
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::connection(during, Silent { bound })))
    }

    /// The machine of `name` as committed now, and the server's clock, without locking
    /// its row (`None`: the name has no row).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads, to its end (see [`to_the_end`]).
    pub(crate) async fn read(
        &self,
        name: &str,
        during: &'static str,
    ) -> Result<Option<(State, u64)>, Error> {
        let read = format!(
            "SELECT state, ({NOW}) FROM (SELECT 1) AS one LEFT JOIN {} ON lock_key = {}",
            self.inner.tables.names(),
            hex(&key(name))
        );
        let unreadable = || Error::incompatible(name, Unreadable);
        let mut rows = self.rows(read, during).await?;
        let Some(row) = rows.first_mut() else {
            return Err(unreadable());
        };
        let state = row
            .take_opt::<Option<Vec<u8>>, usize>(0)
            .and_then(Result::ok)
            .ok_or_else(unreadable)?;
        let clock = row
            .take_opt::<u64, usize>(1)
            .and_then(Result::ok)
            .ok_or_else(unreadable)?;
        let Some(state) = state else {
            return Ok(None);
        };
        let mut state = State::decode(&state).ok_or_else(unreadable)?;
        let elapsed = clock.saturating_sub(state.machine.now());
        state
            .machine
            .step(lock_core::protocol::Event::Elapse(elapsed));
        Ok(Some((state, clock)))
    }

    /// The rows `sql` (one statement, outside any transaction of ours) returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it runs to its end (see [`to_the_end`]).
    pub(crate) async fn rows(&self, sql: String, during: &'static str) -> Result<Vec<Row>, Error> {
        let store = self.clone();
        to_the_end(async move {
            let bound = store.inner.response_timeout;
            let mut conn = store.connection(during).await?;
            match tokio::time::timeout(bound, conn.query::<Row, _>(sql)).await {
                Ok(Ok(rows)) => Ok(rows),
                Ok(Err(err)) => {
                    discard(conn);
                    Err(failed(err, during))
                }
                Err(_) => {
                    discard(conn);
                    Err(Error::connection(during, Silent { bound }))
                }
            }
        })
        .await
    }

    /// How long a statement may go unanswered.
    pub(crate) fn response_timeout(&self) -> Duration {
        self.inner.response_timeout
    }

    /// A connection of the pool, within the response timeout.
    pub(crate) async fn connection(&self, during: &'static str) -> Result<Pooled, Error> {
        let bound = self.inner.response_timeout;
        match tokio::time::timeout(bound, self.inner.pool.get()).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(deadpool::managed::PoolError::Backend(err))) => Err(err),
            Ok(Err(err)) => Err(Error::connection(
                during,
                std::io::Error::other(err.to_string()),
            )),
            Err(_) => Err(Error::connection(during, Silent { bound })),
        }
    }

    /// One run of a transaction, up to its commit.
    async fn once<R, F>(&self, conn: &mut Pooled, names: &[String], step: &F) -> Result<R, Failure>
    where
        F: Fn(&mut [Slot], u64) -> (R, Vec<Notice>),
    {
        let (mut slots, clock) = self.lock_rows(conn, names).await?;
        let read_at = Instant::now();
        let (answer, notices) = step(&mut slots, clock);
        let states: Vec<Option<Vec<u8>>> = slots
            .iter()
            .map(|slot| slot.state.as_ref().map(State::encode))
            .collect();
        self.commit(conn, &slots, &states, &notices).await?;
        for (slot, written) in slots.into_iter().zip(states) {
            if let (Some(state), Some(stored)) = (slot.state, written) {
                let seen = Sighting {
                    stored,
                    state,
                    serving: slot.serving,
                    clock,
                    at: read_at,
                };
                self.inner.seen.keep(&slot.name, seen);
            }
        }
        Ok(answer)
    }

    /// The first round trip: begins the transaction, locks the rows of `names` and reads
    /// them with the server's clock.
    async fn lock_rows(
        &self,
        conn: &mut Pooled,
        names: &[String],
    ) -> Result<(Vec<Slot>, u64), Failure> {
        let mut slots: Vec<Slot> = names
            .iter()
            .map(|name| Slot {
                name: name.clone(),
                key: key(name),
                state: None,
                stored: None,
                serving: Serving::default(),
            })
            .collect();
        let keys: Vec<String> = slots.iter().map(|slot| hex(&slot.key)).collect();
        let tables = &self.inner.tables;
        // The serving server and the epoch, read without a lock (every transaction
        // reads them); then one statement for the rows and the clock: a row of the clock
        // alone when no name has a row yet. The clock is read as the result is made,
        // after the row locks were granted.
        let read = format!(
            "START TRANSACTION; \
             SELECT @@server_id, (SELECT server_id FROM {epoch} WHERE id = 1), \
             (SELECT quarantine_until FROM {epoch} WHERE id = 1); \
             SELECT named.lock_key, named.state, ({NOW}) FROM (SELECT 1) AS one \
             LEFT JOIN {} AS named ON named.lock_key IN ({}) FOR UPDATE",
            tables.names(),
            keys.join(", "),
            epoch = tables.epoch(),
        );
        let mut result = conn.query_iter(read).await?;
        result.map(drop).await?;
        let epoch: Vec<Row> = result.map(|row| row).await?;
        let rows: Vec<Row> = result.map(|row| row).await?;
        drop(result);
        let (server, epoch) = match epoch.into_iter().next() {
            Some(mut row) => (
                row.take_opt::<u32, usize>(0).and_then(Result::ok),
                (
                    row.take_opt::<Option<u32>, usize>(1)
                        .and_then(Result::ok)
                        .flatten(),
                    row.take_opt::<Option<u64>, usize>(2)
                        .and_then(Result::ok)
                        .flatten(),
                ),
            ),
            None => (None, (None, None)),
        };
        let server = server.ok_or(Failure::Unreadable)?;
        let mut clock = None;
        for mut row in rows {
            clock = row.take_opt::<u64, usize>(2).and_then(Result::ok);
            let (Some(Ok(key)), Some(Ok(state))) = (
                row.take_opt::<Option<Vec<u8>>, usize>(0),
                row.take_opt::<Option<Vec<u8>>, usize>(1),
            ) else {
                return Err(Failure::Unreadable);
            };
            let (Some(key), Some(state)) = (key, state) else {
                continue;
            };
            let slot = slots.iter_mut().find(|slot| slot.key == key);
            let Some(slot) = slot else { continue };
            slot.state = Some(State::decode(&state).ok_or(Failure::Unreadable)?);
            slot.stored = Some(state);
        }
        let clock = clock.ok_or(Failure::Unreadable)?;
        let serving = serving(
            conn,
            (&self.inner.tables, self.inner.quarantine),
            server,
            epoch,
            clock,
        )
        .await?;
        let quarantine = lock_core::backend::machine::ticks(self.inner.quarantine);
        for slot in &mut slots {
            slot.serving = serving;
            if let Some(state) = slot.state.as_mut() {
                state.serve_on(serving, clock.saturating_add(quarantine));
            }
        }
        Ok((slots, clock))
    }

    /// The second round trip: writes the rows whose state changed and the notices,
    /// commits, and then wakes the notices' clients (see [`wake`]). (A long state goes
    /// first, in a statement of its own.)
    async fn commit(
        &self,
        conn: &mut Pooled,
        slots: &[Slot],
        states: &[Option<Vec<u8>>],
        notices: &[Notice],
    ) -> Result<(), Failure> {
        let tables = &self.inner.tables;
        let mut statements = Vec::new();
        for (slot, state) in slots.iter().zip(states) {
            let (Some(kept), Some(state)) = (&slot.state, state) else {
                continue;
            };
            if slot.stored.as_ref() == Some(state) {
                continue;
            }
            let held_until = kept.machine.held_until().unwrap_or(0);
            if slot.stored.is_some() && state.len() > INLINE {
                // A long value as a hexadecimal literal costs the server more to parse
                // than a round trip: at 37 kB (500 waiters) the literal took 3.3 ms, the
                // bound parameter 0.7 ms.
                let update = format!(
                    "UPDATE {} SET state = ?, held_until = ? WHERE lock_key = ?",
                    tables.names()
                );
                conn.exec_drop(update, (state, held_until, slot.key.as_slice()))
                    .await?;
            } else if slot.stored.is_some() {
                statements.push(format!(
                    "UPDATE {} SET state = {}, held_until = {held_until} WHERE lock_key = {}",
                    tables.names(),
                    hex(state),
                    hex(&slot.key)
                ));
            } else {
                statements.push(format!(
                    "INSERT INTO {} (lock_key, name, state, held_until) VALUES ({}, {}, {}, {held_until})",
                    tables.names(),
                    hex(&slot.key),
                    hex(slot.name.as_bytes()),
                    hex(state)
                ));
            }
        }
        statements.extend(notices.iter().map(|notice| notice.insert(tables)));
        statements.push("COMMIT".to_owned());
        let committing = statements.len();
        statements.extend(notices.iter().flat_map(Notice::wake));
        let mut result = conn.query_iter(statements.join("; ")).await?;
        for _ in 0..committing {
            result.map(drop).await?;
        }
        // Committed: a wake-up that fails costs its waiter a wait for its next attempt,
        // not the operation.
        for _ in committing..statements.len() {
            if let Err(err) = result.map(drop).await {
                tracing::debug!(
                    target: lock_core::TRACING_TARGET,
                    error = %err,
                    "waking a waiter's client failed; it asks again when its wait says"
                );
                break;
            }
        }
        Ok(())
    }
}

/// Why one run of a transaction failed.
#[derive(Debug)]
pub(crate) enum Failure {
    Driver(mysql_async::Error),
    /// A row this version cannot read.
    Unreadable,
}

impl From<mysql_async::Error> for Failure {
    fn from(err: mysql_async::Error) -> Self {
        Self::Driver(err)
    }
}
