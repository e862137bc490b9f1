//! Local waiting lines: per name, this client's waiters go to the backend one at a time,
//! in arrival order, and the others wait in the process.
//!
//! A line is a fair async mutex per name (tokio's mutex serves its waiters in arrival
//! order): holding it is being the one waiter of this client that asks the backend. The
//! mutex guards a slot the heads pass on to each other (a mutex line keeps its
//! notification listener there, so that a new head does not subscribe again). A line
//! exists while somebody stands in it or holds its turn, and goes with the last of them,
//! slot included, so names used once cost nothing once their waiters are gone.
//!
//! A line also has a bell: the head hangs its listener's wake handle there, so that a
//! release made by this client wakes the head at once instead of when the store's
//! message comes back. The bell counts the heads served, so that a release that rang
//! before it was answered can tell whether its ring was heard.

use foldhash::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex as StdMutex, MutexGuard, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};
use tokio::time::Instant;

use crate::notify::WakeHandle;

/// One line: its turn with the slot its heads pass on, and its bell.
struct Line<S> {
    turn: Arc<AsyncMutex<S>>,
    bell: Arc<StdMutex<Ringer>>,
}

/// What a line's bell reaches: the head's listener, and how many heads were served.
#[derive(Default)]
struct Ringer {
    listener: Option<WakeHandle>,
    served: u64,
}

fn ringer(bell: &StdMutex<Ringer>) -> MutexGuard<'_, Ringer> {
    // Each critical section is one assignment or read.
    bell.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<S> Clone for Line<S> {
    fn clone(&self) -> Self {
        Self {
            turn: Arc::clone(&self.turn),
            bell: Arc::clone(&self.bell),
        }
    }
}

impl<S: Default> Default for Line<S> {
    fn default() -> Self {
        Self {
            turn: Arc::default(),
            bell: Arc::default(),
        }
    }
}

/// The lines of one client, by key (a lock or semaphore name), each with a slot `S`.
pub(crate) struct Turns<K, S = ()> {
    lines: Arc<StdMutex<HashMap<K, Line<S>>>>,
}

impl<K, S> Clone for Turns<K, S> {
    /// Another handle on the same lines.
    fn clone(&self) -> Self {
        Self {
            lines: Arc::clone(&self.lines),
        }
    }
}

impl<K, S> Default for Turns<K, S> {
    fn default() -> Self {
        Self {
            lines: Arc::default(),
        }
    }
}

impl<K, S> fmt::Debug for Turns<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turns")
            .field("lines", &lock(&self.lines).len())
            .finish()
    }
}

fn lock<K, S>(lines: &StdMutex<HashMap<K, Line<S>>>) -> MutexGuard<'_, HashMap<K, Line<S>>> {
    // Every critical section below is a map lookup, insert or remove that cannot panic
    // half-way, so a poisoned map is still consistent.
    lines.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: Hash + Eq + Clone, S: Default> Turns<K, S> {
    /// Waits for the turn of `key` until `deadline` (as long as it takes without one);
    /// `None` when the deadline passed and the turn is still taken.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a waiter dropped before its turn leaves the line, and the line goes
    /// with its last waiter.
    pub(crate) async fn wait(&self, key: &K, deadline: Option<Instant>) -> Option<Turn<K, S>> {
        let place = self.join(key);
        let line = Arc::clone(&place.line.turn);
        let head = match deadline {
            None => line.lock_owned().await,
            Some(deadline) => {
                // Boxed: most waiters wait without a deadline and need no timer.
                let bounded = tokio::time::timeout_at(deadline, Arc::clone(&line).lock_owned());
                match Box::pin(bounded).await {
                    Ok(head) => head,
                    Err(_) => line.try_lock_owned().ok()?,
                }
            }
        };
        Some(Turn { head, place })
    }

    /// The turn of `key` if nobody of this client stands in its line; `None` otherwise.
    #[cfg(test)]
    fn try_take(&self, key: &K) -> Option<Turn<K, S>> {
        let place = self.join(key);
        let head = Arc::clone(&place.line.turn).try_lock_owned().ok()?;
        Some(Turn { head, place })
    }

    /// How many lines exist (for tests: a line must go with its last waiter).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.lines).len()
    }

    /// Wakes the head of `key`'s line, if it listens: a release this client made.
    /// Returns how many heads the line had served, for [`Turns::ring_again`]; `None`
    /// when nobody stands in the line.
    pub(crate) fn ring(&self, key: &K) -> Option<u64> {
        self.ring_if(key, |_| true)
    }

    /// Rings again unless a head was served since [`Turns::ring`] returned `served`
    /// (`None`: rings in any case): a ring before the release was answered may have
    /// woken a head too early, which then found the lock still taken and waits.
    pub(crate) fn ring_again(&self, key: &K, served: Option<u64>) {
        self.ring_if(key, |now| served.is_none_or(|then| then == now));
    }

    /// Wakes the head of `key`'s line if it listens and `due` says so of the count of
    /// heads served; returns that count.
    fn ring_if(&self, key: &K, due: impl FnOnce(u64) -> bool) -> Option<u64> {
        let bell = lock(&self.lines)
            .get(key)
            .map(|line| Arc::clone(&line.bell))?;
        let ringer = ringer(&bell);
        if due(ringer.served)
            && let Some(handle) = &ringer.listener
        {
            handle.wake_all();
        }
        Some(ringer.served)
    }

    /// A place in the line of `key`, made on first use.
    fn join(&self, key: &K) -> Place<K, S> {
        let line = lock(&self.lines).entry(key.clone()).or_default().clone();
        Place {
            lines: Arc::clone(&self.lines),
            key: key.clone(),
            line,
        }
    }
}

/// Standing in a line; the last place to go removes the line.
struct Place<K: Hash + Eq, S> {
    lines: Arc<StdMutex<HashMap<K, Line<S>>>>,
    key: K,
    line: Line<S>,
}

impl<K: Hash + Eq, S> Drop for Place<K, S> {
    fn drop(&mut self) {
        let mut lines = lock(&self.lines);
        // Two references left, the map's and this one: nobody else stands in the line
        // (new places clone it under this map lock, so none can appear meanwhile).
        if Arc::strong_count(&self.line.turn) == 2 {
            lines.remove(&self.key);
        }
    }
}

/// The turn of one line: while it lives, its holder is the one waiter of this client
/// that asks the backend. Dropping it gives the turn to the next in line.
pub(crate) struct Turn<K: Hash + Eq, S> {
    // Declared first, so dropped first: the next waiter holds the line before this
    // place counts whether anybody is left in it.
    head: OwnedMutexGuard<S>,
    place: Place<K, S>,
}

impl<K: Hash + Eq, S> Turn<K, S> {
    /// The slot the line's heads pass on to each other, and the line's bell.
    pub(crate) fn parts(&mut self) -> (&mut S, Bell<'_>) {
        (&mut self.head, Bell(&self.place.line.bell))
    }
}

/// A line's bell, as its head sees it.
pub(crate) struct Bell<'a>(&'a StdMutex<Ringer>);

impl Bell<'_> {
    /// Hangs `handle` on the bell (the head's listener), for the line's later heads too.
    pub(crate) fn hang(&self, handle: WakeHandle) {
        ringer(self.0).listener = Some(handle);
    }

    /// Counts the head as served (it got what it waited for).
    pub(crate) fn served(&self) {
        ringer(self.0).served += 1;
    }
}

impl<K: Hash + Eq, S> fmt::Debug for Turn<K, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Turn").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn waiters_take_turns_in_arrival_order_and_the_line_goes_with_the_last() {
        let turns: Arc<Turns<&'static str>> = Arc::default();
        let first = turns.wait(&"a", None).await.expect("a free line");
        let order = Arc::new(StdMutex::new(Vec::new()));
        let mut waiting = Vec::new();
        for n in 0..3 {
            let (turns, order) = (Arc::clone(&turns), Arc::clone(&order));
            waiting.push(tokio::spawn(async move {
                let turn = turns.wait(&"a", None).await.expect("no deadline");
                order.lock().expect("order").push(n);
                drop(turn);
            }));
            // Each joins before the next.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(turns.try_take(&"a").is_none(), "a turn was taken twice");
        drop(first);
        for task in waiting {
            task.await.expect("waiter");
        }
        assert_eq!(*order.lock().expect("order"), vec![0, 1, 2]);
        assert_eq!(turns.len(), 0, "an empty line was kept");
    }

    /// A waiter cancelled while it waits, after the turn was handed to it, is the last
    /// to leave: the line must go with it.
    #[tokio::test]
    async fn a_waiter_cancelled_in_line_takes_the_line_with_it() {
        let turns: Arc<Turns<&'static str>> = Arc::default();
        let held = turns.wait(&"a", None).await.expect("a free line");
        let waiter = {
            let turns = Arc::clone(&turns);
            tokio::spawn(async move { turns.wait(&"a", None).await.map(drop) })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        // The turn goes to the waiting task, which is cancelled before it runs again.
        drop(held);
        waiter.abort();
        assert!(waiter.await.is_err_and(|err| err.is_cancelled()));
        assert_eq!(turns.len(), 0, "a line outlived its cancelled waiter");
        let deadline = Instant::now() + Duration::from_millis(20);
        let bounded = {
            let turns = Arc::clone(&turns);
            let held = turns.wait(&"b", None).await.expect("a free line");
            let waiter =
                tokio::spawn(async move { turns.wait(&"b", Some(deadline)).await.map(drop) });
            tokio::time::sleep(Duration::from_millis(5)).await;
            waiter.abort();
            drop(held);
            waiter.await
        };
        assert!(bounded.is_err_and(|err| err.is_cancelled()));
        assert_eq!(
            turns.len(),
            0,
            "a line outlived its cancelled bounded waiter"
        );
    }

    #[tokio::test]
    async fn a_waiter_that_gives_up_leaves_the_line() {
        let turns: Turns<&'static str> = Turns::default();
        let held = turns.wait(&"a", None).await.expect("a free line");
        let deadline = Instant::now() + Duration::from_millis(20);
        assert!(turns.wait(&"a", Some(deadline)).await.is_none());
        let dropped = turns.wait(&"a", None);
        drop(dropped);
        drop(held);
        assert_eq!(turns.len(), 0, "a line outlived its waiters");
        assert!(turns.try_take(&"a").is_some());
    }
}
