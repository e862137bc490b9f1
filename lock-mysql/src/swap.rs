//! One round trip for a name whose row this client wrote last: a compare-and-set.
//!
//! The client keeps the rows it committed last ([`Seen`]), with the server's clock as
//! it read it then. An operation on such a name steps the machine on that copy, at the
//! end of a window in which the server's clock should lie now, and sends one autocommit
//! `UPDATE` (alone, or with the swaps other callers queue meanwhile, each row under its
//! own guards: see [`crate::swaps`]) that the server applies only if
//!
//! - the row still holds the copy's bytes (nobody else wrote it since; a row that went
//!   and came back to the same bytes is the same state, and steps the same),
//! - the same server serves (`@@server_id`) under the same epoch and quarantine (no
//!   failover since), and
//! - its clock when the statement began lies in the window.
//!
//! Otherwise the row stays as it was and the operation runs as the transaction of
//! [`crate::store`], which reads the row and the clock afresh.
//!
//! The window is placed by the clock the last transaction on the name read, and when:
//! the server's clock is at least that reading plus the time passed since its answer
//! came, and at most the wait for a statement and its way to the server more (a swap
//! that waited half the window is not sent). A swap keeps that reading rather
//! than making one (a `SELECT` more per operation, the costliest part of a statement on
//! a busy server being its round of the server's network and parsing work).
//!
//! A server that replicates by statements (`binlog_format = STATEMENT`) would have a
//! replica compare `@@server_id` with its own id and skip the change: there the
//! statement sets a user variable to it first, whose value the binary log carries. With
//! rows or mixed logging the server logs the change as rows.
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
use mysql_async::{Params, Value};
use tokio::time::Instant;

use crate::mailbox::Notice;
use crate::pool::Pooled;
use crate::schema::{Tables, hex, key};
use crate::state::State;
use crate::store::{NOW_STARTED, Serving, Slot};

/// How wide the window for the server's clock is: the uncertainty of the last reading
/// plus this round trip must fit in it. A wider one only lets a crashed holder's row
/// say it holds longer by as much.
pub(crate) const WINDOW: Duration = Duration::from_millis(50);

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

/// How a server's binary log replicates a statement that names `@@server_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Logging {
    /// As rows (row or mixed logging, or none): the statement names it as it is.
    Rows,
    /// As the statement: it names a user variable set to it.
    Statements,
}

impl Logging {
    /// How the server `conn` talks to logs, as its new sessions do.
    pub(crate) async fn of(conn: &mut mysql_async::Conn) -> Result<Self, mysql_async::Error> {
        let format: Option<String> = conn.query_first("SELECT @@binlog_format").await?;
        Ok(match format.as_deref() {
            Some(format) if format.eq_ignore_ascii_case("STATEMENT") => Self::Statements,
            _ => Self::Rows,
        })
    }
}

/// The swap's statements on one client's tables.
#[derive(Debug, Clone)]
pub(crate) struct Statement {
    logging: Logging,
    names: String,
    epoch: String,
    /// The prepared form (rows logging), its values bound as parameters: no literal of
    /// twice the state's length for the server to parse at every operation.
    prepared: String,
    /// The prepared forms that change two rows or more (see [`crate::swaps`]), by
    /// their number of rows less two.
    combined: Vec<String>,
}

impl Statement {
    pub(crate) fn new(tables: &Tables, logging: Logging) -> Self {
        let (names, epoch) = (tables.names(), tables.epoch());
        let serving = format!(
            "@@server_id = ? \
             AND (SELECT server_id = ? AND quarantine_until = ? FROM {epoch} WHERE id = 1)"
        );
        let prepared = format!(
            "UPDATE {names} SET state = ?, held_until = ? \
             WHERE lock_key = ? AND state = ? AND {NOW_STARTED} BETWEEN ? AND ? AND {serving}"
        );
        let combined = (2..=MOST_COMBINED)
            .map(|rows| combined_text(&names, &serving, rows))
            .collect();
        Self {
            logging,
            names,
            epoch,
            prepared,
            combined,
        }
    }

    /// Whether swaps may share a statement: not where the binary log replicates
    /// statements, whose text names the server by a user variable.
    pub(crate) fn combines(&self) -> bool {
        self.logging == Logging::Rows
    }

    /// The prepared statement that makes `changes`, on one serving server, and its
    /// parameters; `None` for more than [`MOST_COMBINED`] changes.
    pub(crate) fn prepared(&self, changes: &[&Change]) -> Option<(&str, Params)> {
        let first = changes.first()?;
        let Serving {
            server,
            quarantine_until,
        } = first.serving;
        let serving = [server.into(), server.into(), quarantine_until.into()];
        if let [only] = changes {
            let (earliest, latest) = only.window;
            let params: Vec<Value> = vec![
                only.written.as_slice().into(),
                only.held_until.into(),
                only.key.as_slice().into(),
                only.before.as_slice().into(),
                earliest.into(),
                latest.into(),
            ];
            let params = params.into_iter().chain(serving).collect();
            return Some((self.prepared.as_str(), Params::Positional(params)));
        }
        let text = self.combined.get(changes.len().checked_sub(2)?)?;
        let mut params: Vec<Value> = Vec::with_capacity(changes.len() * 8 + 3);
        for change in changes {
            let (earliest, latest) = change.window;
            params.extend([
                change.key.as_slice().into(),
                change.before.as_slice().into(),
                earliest.into(),
                latest.into(),
                change.written.as_slice().into(),
            ]);
        }
        for change in changes {
            params.extend([change.key.as_slice().into(), change.held_until.into()]);
        }
        params.extend(changes.iter().map(|change| change.key.as_slice().into()));
        params.extend(serving);
        Some((text.as_str(), Params::Positional(params)))
    }
}

/// The most rows one statement changes: each number of rows is a prepared statement of
/// its own in the driver's cache (32 by default).
pub(crate) const MOST_COMBINED: usize = 4;

/// The statement that changes `rows` rows, each under its own guards: a row whose
/// guards fail is set to `NULL`, which the `NOT NULL` column refuses (the connection's
/// `sql_mode` is strict), so the server rolls the whole statement back.
fn combined_text(names: &str, serving: &str, rows: usize) -> String {
    let states = format!(" WHEN ? THEN IF(state = ? AND {NOW_STARTED} BETWEEN ? AND ?, ?, NULL)")
        .repeat(rows);
    let held = " WHEN ? THEN ?".repeat(rows);
    let keys = vec!["?"; rows].join(", ");
    format!(
        "UPDATE {names} SET state = CASE lock_key{states} END, \
         held_until = CASE lock_key{held} END \
         WHERE lock_key IN ({keys}) AND {serving}"
    )
}

/// What a swap changes of one row, and the guards it changes it under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Change {
    pub(crate) key: Vec<u8>,
    /// The row's bytes it replaces.
    pub(crate) before: Vec<u8>,
    /// The bytes it writes.
    pub(crate) written: Vec<u8>,
    pub(crate) held_until: u64,
    /// The window for the server's clock.
    pub(crate) window: (u64, u64),
    pub(crate) serving: Serving,
}

/// An operation stepped on a kept row, ready to be sent.
pub(crate) struct Swap<R> {
    pub(crate) answer: R,
    /// The row once the statement applies, with the clock reading it was placed by.
    pub(crate) after: Sighting,
    pub(crate) change: Change,
}

impl<R> std::fmt::Debug for Swap<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swap")
            .field("window", &self.change.window)
            .finish_non_exhaustive()
    }
}

/// Steps `step` on `seen`, the row of `name` as this client committed it last, at the
/// end of the window for the server's clock; `None` when the operation needs the
/// transaction (see the module's docs).
pub(crate) fn prepare<R, F>(name: &str, seen: Sighting, step: &F) -> Option<Swap<R>>
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
    let (state, before) = slot.kept_state()?;
    let written = state.encode();
    if !notices.is_empty() || written == before || written.len() > LONGEST {
        return None;
    }
    let held_until = state.machine.held_until().unwrap_or(0);
    Some(Swap {
        answer,
        change: Change {
            key,
            before,
            written: written.clone(),
            held_until,
            window: (earliest, latest),
            serving,
        },
        after: Sighting {
            stored: written,
            state,
            serving,
            clock,
            at,
        },
    })
}

impl<R> Swap<R> {
    /// Sends the statement alone, as the text that names the server by a user
    /// variable (statements logging): the answer and the row as now committed if the
    /// server applied it, `None` if it left the row as it was.
    pub(crate) async fn send_logged(
        self,
        conn: &mut Pooled,
        statement: &Statement,
    ) -> Result<Option<(R, Sighting)>, mysql_async::Error> {
        let Change {
            key,
            before,
            written,
            held_until,
            window: (earliest, latest),
            serving:
                Serving {
                    server,
                    quarantine_until,
                },
        } = &self.change;
        let text = format!(
            "SET @distlock_server = @@server_id; \
             UPDATE {names} SET state = {written}, held_until = {held_until} \
             WHERE lock_key = {key} AND state = {before} \
             AND {NOW_STARTED} BETWEEN {earliest} AND {latest} \
             AND @distlock_server = {server} \
             AND (SELECT server_id = {server} AND quarantine_until = {quarantine_until} \
             FROM {epoch} WHERE id = 1)",
            names = statement.names,
            written = hex(written),
            key = hex(key),
            before = hex(before),
            epoch = statement.epoch,
        );
        conn.query_drop(text).await?;
        // The last statement's count, the `UPDATE`'s: the rows it changed, which are
        // the rows it matched (the state it writes differs from the one it compares).
        Ok((conn.affected_rows() == 1).then_some((self.answer, self.after)))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use lock_core::backend::machine::{new_machine, ticks};
    use lock_core::backend::{LockKind, Owner, RequestId};
    use lock_core::protocol::{Event, Side};
    use tokio::time::Instant;

    use super::{Sighting, WINDOW, prepare};
    use crate::mailbox::{Ask, Mailbox, Notice};
    use crate::state::State;
    use crate::store::{Serving, Slot};

    fn attempt(owner: &str, lease: u64) -> Event<RequestId, Owner, Ask> {
        Event::Attempt {
            side: Side::Write,
            id: RequestId::random(),
            owner: Owner::new("client", owner),
            lease,
            place: None,
            ask: Ask {
                mailbox: Mailbox {
                    key: RequestId::random(),
                },
                attempt: 0,
                fencing: false,
            },
        }
    }

    /// A row read at `clock` just now, with a hold of another owner for `lease`.
    fn held_for(clock: u64, lease: u64) -> Sighting {
        let machine = new_machine(
            LockKind::Fair,
            None,
            Duration::from_secs(60),
            (clock, clock, 0),
        );
        let mut state = State::new(machine);
        state.machine.step(attempt("theirs", lease));
        Sighting {
            stored: state.encode(),
            state,
            serving: Serving::default(),
            clock,
            at: Instant::now(),
        }
    }

    fn try_ours(slots: &mut [Slot], clock: u64) -> ((), Vec<Notice>) {
        if let Some(state) = slots.first_mut().and_then(|slot| slot.state.as_mut()) {
            let elapsed = clock.saturating_sub(state.machine.now());
            state.machine.step(Event::Elapse(elapsed));
            state.machine.step(attempt("ours", 1_000_000));
        }
        ((), Vec::new())
    }

    /// A hold that ends inside the window sends the operation to the transaction:
    /// stepped at the window's end, the machine would find the hold over while the
    /// server's clock may still be before its end. Would fail if the gate were left out.
    #[test]
    fn a_boundary_inside_the_window_takes_the_transaction() {
        let clock = 1_000_000_000;
        let window = ticks(WINDOW);
        assert!(prepare("name", held_for(clock, window / 2), &try_ours).is_none());
        assert!(prepare("name", held_for(clock, window * 20), &try_ours).is_some());
    }
}
