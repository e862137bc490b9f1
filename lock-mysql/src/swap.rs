//! One round trip for a name whose row this client wrote last: a compare-and-set.
//!
//! The client keeps the rows it committed last ([`Seen`]), with the server's clock as
//! it read it then. An operation on such a name steps the machine on that copy, at the
//! end of a window in which the server's clock should lie now, and sends one autocommit
//! `UPDATE` that the server applies only if
//!
//! - the row still holds the copy's bytes (nobody else wrote it since; a row that went
//!   and came back to the same bytes is the same state, and steps the same),
//! - the same server serves (`@@server_id`, through a user variable set in the same
//!   round trip, so that a statement-based replica compares the primary's value) under
//!   the same epoch and quarantine (no failover since), and
//! - its clock when the statement began lies in the window.
//!
//! Otherwise the row stays as it was and the operation runs as the transaction of
//! [`crate::store`], which reads the row and the clock afresh.
//!
//! Why stepping at the window's end is safe: the window holds no boundary of the
//! machine ([`State::steady_until`]: no lease, place, quarantine, offer or record runs
//! out inside it), so at any time within it the machine decides as at its end; the
//! statement's row change happens no earlier than the statement began, so the machine
//! never judges time ahead of the server's clock, only behind it (a hold that ended a
//! moment ago still counts, which delays, never overlaps); and a lease counted from the
//! window's end, which is no earlier than the statement began, outlasts the one the
//! client counts from its request. An operation that would wake or hand over to a
//! waiter, or write a long state, takes the transaction.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use lock_core::backend::machine::ticks;
use lock_core::protocol::Event;
use mysql_async::prelude::Queryable;
use tokio::time::Instant;

use crate::pool::Pooled;
use crate::schema::{Tables, hex, key};
use crate::state::State;
use crate::store::{Failure, NOW_STARTED, Notice, Serving, Slot};

/// How wide the window for the server's clock is: the uncertainty of the last reading
/// plus this round trip must fit in it. A wider one only lets a crashed holder's row
/// say it holds longer by as much.
const WINDOW: Duration = Duration::from_millis(50);

/// The most rows a client keeps; past it, it forgets them all and starts again (a
/// forgotten row costs its next operation the transaction, nothing else).
const MOST_KEPT: usize = 4096;

/// The longest state the statement carries (twice, as literals); a longer one takes the
/// transaction.
const LONGEST: usize = 1024;

/// A row as this client committed it last.
#[derive(Debug, Clone)]
pub(crate) struct Sighting {
    /// The row's bytes.
    pub(crate) stored: Vec<u8>,
    /// Those bytes decoded (as stepped: a machine's lazy work is not in its bytes).
    pub(crate) state: State,
    pub(crate) serving: Serving,
    /// The server's clock, at most what it was at `at`.
    pub(crate) clock: u64,
    pub(crate) at: Instant,
}

/// The rows this client committed last, by name.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    rows: Mutex<HashMap<String, Sighting>>,
}

impl Seen {
    pub(crate) fn keep(&self, name: &str, sighting: Sighting) {
        let mut rows = self.rows.lock().unwrap_or_else(PoisonError::into_inner);
        if rows.len() >= MOST_KEPT && !rows.contains_key(name) {
            rows.clear();
        }
        rows.insert(name.to_owned(), sighting);
    }

    /// The row of `name` as last committed, forgotten until the next commit.
    pub(crate) fn take(&self, name: &str) -> Option<Sighting> {
        self.rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name)
    }
}

/// An operation stepped on a kept row, ready to be sent.
pub(crate) struct Swap<R> {
    statement: String,
    answer: R,
    /// What the row holds once the statement applies, and its state.
    written: Vec<u8>,
    state: State,
    serving: Serving,
}

impl<R> std::fmt::Debug for Swap<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap")
            .field("statement", &self.statement)
            .finish_non_exhaustive()
    }
}

/// Steps `step` on `seen`, the row of `name` as this client committed it last, at the
/// end of the window for the server's clock; `None` when the operation needs the
/// transaction (see the module's docs).
pub(crate) fn prepare<R, F>(
    tables: &Tables,
    name: &str,
    seen: Sighting,
    step: &F,
) -> Option<Swap<R>>
where
    F: Fn(&mut [Slot], u64) -> (R, Vec<Notice>),
{
    let Sighting {
        stored,
        mut state,
        serving,
        clock,
        at,
    } = seen;
    let earliest = clock.saturating_add(ticks(at.elapsed()));
    let behind = earliest.saturating_sub(state.machine.now());
    state.machine.step(Event::Elapse(behind));
    let latest = earliest
        .saturating_add(ticks(WINDOW))
        .max(state.machine.now());
    if state.steady_until() <= latest {
        return None;
    }
    let key = key(name);
    let mut slots = [Slot::kept(name, key.clone(), state, stored, serving)];
    let (answer, notices) = step(&mut slots, latest);
    let [slot] = slots;
    let (state, stored) = slot.kept_state()?;
    let written = state.encode();
    if !notices.is_empty() || written == stored || written.len() > LONGEST {
        return None;
    }
    let held_until = state.machine.held_until().unwrap_or(0);
    let statement = format!(
        "SET @distlock_server = @@server_id; \
         UPDATE {names} SET state = {written}, held_until = {held_until} \
         WHERE lock_key = {key} AND state = {stored} \
         AND {now} BETWEEN {earliest} AND {latest} \
         AND @distlock_server = {server} \
         AND (SELECT server_id FROM {epoch} WHERE id = 1) = {server} \
         AND (SELECT quarantine_until FROM {epoch} WHERE id = 1) = {quarantine}; \
         SELECT ROW_COUNT(), {now}",
        names = tables.names(),
        written = hex(&written),
        key = hex(&key),
        stored = hex(&stored),
        now = NOW_STARTED,
        server = serving.server,
        epoch = tables.epoch(),
        quarantine = serving.quarantine_until,
    );
    Some(Swap {
        statement,
        answer,
        written,
        state,
        serving,
    })
}

impl<R> Swap<R> {
    /// Sends the statement: the answer and the row as now committed if the server
    /// applied it, `None` if it left the row as it was.
    pub(crate) async fn send(self, conn: &mut Pooled) -> Result<Option<(R, Sighting)>, Failure> {
        let mut result = conn.query_iter(self.statement).await?;
        result.map(drop).await?;
        result.map(drop).await?;
        let checked: Vec<(i64, u64)> = result.collect().await?;
        drop(result);
        let at = Instant::now();
        match checked.as_slice() {
            [(1, clock)] => Ok(Some((
                self.answer,
                Sighting {
                    stored: self.written,
                    state: self.state,
                    serving: self.serving,
                    clock: *clock,
                    at,
                },
            ))),
            [(0, _)] => Ok(None),
            _ => Err(Failure::Unreadable),
        }
    }
}
