//! The in-memory backend: every lock kind, within one process.
//!
//! It is a real backend (it passes the conformance suite), the reference model the
//! networked backends are compared with, and the worked example of the [`Backend`](crate::backend::Backend) trait
//! for someone writing a new one. Use it for tests, for single-process services, and as
//! the demo's fallback when no server is at hand. Locks are not shared between processes.
//!
//! Mutexes and fair locks are the protocol's state machine ([`crate::protocol::Name`]),
//! one per name, executed as it is written: the store adds its clock, the sleeps it
//! suggests, the channels it tells and forgetting (see the exclusive module). A
//! read-write lock is one entry per name whose fields are owners (or `owner:write` for
//! a writer) with their grants (one per acquisition not yet released, each a read hold
//! with its own expiry), its `mode` and its writers waiting to be handed it. A release
//! names the grant it ends and ends only that one, only while it is alive.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    Acquire, LockKind, LockRef, PermitAnswer, PermitReservation, Release, RequestId,
};
use crate::notify::{InProcess, Subscriptions, Wake};
use crate::{Error, LockName};

mod entry;
mod exclusive;
mod expirable;
mod handover;
mod introspect;
mod kinds;
mod latch;
mod locks;
mod replica;
mod semaphore;

use entry::{Entry, Grant};
pub use handover::{HandOvers, NoticeDelay};
pub use replica::DEFAULT_FAILOVER_QUARANTINE;

/// A read-write lock's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

#[derive(Debug, Default)]
struct Store {
    /// Mutexes and fair locks: the protocol's machine of each name that holds anything.
    names: HashMap<String, exclusive::Exclusive>,
    /// When the machines' time began (the store's first request).
    epoch: Option<Instant>,
    /// How long the machines keep an id: twice the longest retry window asked for.
    retention: Duration,
    /// Steps of the machines so far: every 256th sweeps them all (see the exclusive
    /// module).
    steps: u64,
    /// Read-write locks: each held name's entry.
    locks: HashMap<String, Entry>,
    /// Read-write locks: the writers waiting to be handed each one on release.
    waiters: HashMap<String, handover::Waiters>,
    hand_overs: HandOvers,
    tokens: HashMap<String, u64>,
    /// What became of each grant, by its id, for retries and late copies of its
    /// requests (as a networked backend's latches), until the answer expires.
    answers: HashMap<(String, RequestId), (Answer, Instant)>,
    /// Count-down latches: the count left per name (absent: open).
    latches: HashMap<String, u64>,
    /// Answers to count-downs, remembered for their retries.
    count_downs: HashMap<(String, RequestId), (u64, Instant)>,
    /// Semaphores: the available permits per name (absent: never set, 0 available).
    semaphores: HashMap<String, i64>,
    /// Answers to permit requests (granted? / available after a release / expirable
    /// permits given back?), for retries.
    permit_answers: HashMap<(String, RequestId), (i64, Instant)>,
    /// Plain permits held, by the acquisition that got them: how many.
    permit_grants: HashMap<(String, RequestId), u64>,
    /// Ends of plain-permit grants: the available count after, for retries of the
    /// release; while kept, a late copy of the acquisition takes nothing.
    permit_releases: HashMap<(String, RequestId), (i64, Instant)>,
    /// Expirable semaphores: the permits issued per name (their available count is in
    /// `semaphores`).
    issued: HashMap<String, expirable::Issued>,
    /// Semaphores of both kinds: the starving waiter a name's permits are held back
    /// for.
    reservations: HashMap<String, Reservation>,
    /// Semaphores of both kinds: the most permits seen available at once since the count
    /// last went down (see [`PermitAnswer::BeyondPeak`]).
    peaks: HashMap<String, i64>,
    /// How many answers the maps above may keep before expired ones are looked for.
    look_at: usize,
    /// A defect of the past planted back (the simulation's mutation check).
    defect: Option<crate::protocol::Defect>,
    /// The longest lease the store grants (none: any).
    max_lease: Option<Duration>,
    /// The state as the replica last caught up with it (see the replica module).
    replica: Option<Box<Store>>,
    /// Until when a failover's quarantine lasts: nothing is granted before.
    quarantine_until: Option<Instant>,
    /// What clients said about themselves, by client id, until when (introspection).
    clients: HashMap<String, (crate::ClientInfo, Instant)>,
}

/// How many answers a store keeps before it first looks for expired ones.
const FIRST_LOOK_AT: usize = 1024;

impl Store {
    /// Whether `defect` is planted back in this store (never, without the `mutants`
    /// feature, which alone can plant one).
    fn planted(&self, defect: crate::protocol::Defect) -> bool {
        self.defect == Some(defect)
    }

    /// Forgets expired answers when the kept ones have doubled since the last look, so
    /// that they take at most twice the memory of the live ones (or of `FIRST_LOOK_AT`). A look every few
    /// hundred answers instead went through every answer kept in the retry window each
    /// time, most of the memory store's time under load (62 % of a run at 60k pairs/s);
    /// a look at each doubling costs each answer a constant share.
    fn forget_expired(&mut self, now: Instant) {
        let kept = self.answers_kept();
        if kept < self.look_at {
            return;
        }
        self.answers.retain(|_, (_, until)| *until > now);
        self.count_downs.retain(|_, (_, until)| *until > now);
        self.permit_answers.retain(|_, (_, until)| *until > now);
        self.permit_releases.retain(|_, (_, until)| *until > now);
        self.look_at = (2 * self.answers_kept()).max(FIRST_LOOK_AT);
    }

    /// How many answers the store keeps for retries.
    fn answers_kept(&self) -> usize {
        self.answers.len()
            + self.count_downs.len()
            + self.permit_answers.len()
            + self.permit_releases.len()
    }

    /// The answer already given about grant `id` of `name`, if any.
    fn answered(&self, name: &str, id: RequestId, now: Instant) -> Option<Answer> {
        self.answers
            .get(&(name.to_owned(), id))
            .filter(|(_, until)| *until > now)
            .map(|(answer, _)| *answer)
    }

    /// Keeps `answer` about grant `id` of `name` for `kept_for`.
    fn remember(
        &mut self,
        name: &str,
        id: RequestId,
        answer: Answer,
        (now, kept_for): (Instant, Duration),
    ) {
        self.forget_expired(now);
        self.answers
            .insert((name.to_owned(), id), (answer, now + kept_for));
    }

    /// The live entry for `name`, dropping it first if it expired.
    fn live(&mut self, name: &str, now: Instant) -> Option<&mut Entry> {
        if self.locks.get(name).is_some_and(|e| e.expires <= now) {
            self.locks.remove(name);
        }
        self.locks.get_mut(name)
    }

    /// Whether `wanted` of the `available` permits of `name` may be taken by a caller
    /// with `reserve` (see [`PermitReservation`]): another waiter's reservation holds its
    /// number back, unless this caller has waited longer and takes it over; a starving
    /// caller that finds too few reserves them; the reserving waiter's grant ends its
    /// reservation. Nobody reserves more than the semaphore's peak, and a reservation of
    /// more than the peak holds nothing back (see [`PermitAnswer::BeyondPeak`]).
    fn may_take(
        &mut self,
        name: &str,
        (available, wanted): (i64, i64),
        reserve: Option<PermitReservation>,
        now: Instant,
    ) -> PermitAnswer {
        let peak = self.peak(name, available);
        let held = self
            .reservations
            .get(name)
            .filter(|r| r.until > now && r.permits <= peak)
            .copied();
        // When the caller began waiting; a wait too long to count back from `now` counts
        // as beginning now (it cannot overtake, and nothing panics).
        let since = reserve.map(|r| now.checked_sub(r.waited).unwrap_or(now));
        let mine = match (held, reserve) {
            (None, _) => true,
            (Some(held), Some(reserve)) => {
                held.waiter == reserve.waiter || since.is_some_and(|since| since < held.since)
            }
            (Some(_), None) => false,
        };
        if let (false, Some(held)) = (mine, held) {
            return if available.saturating_sub(wanted) >= held.permits {
                PermitAnswer::Taken
            } else {
                PermitAnswer::Unavailable
            };
        }
        if available >= wanted {
            if self.reservations.contains_key(name) {
                self.reservations.remove(name);
            }
            return PermitAnswer::Taken;
        }
        if wanted > peak {
            return PermitAnswer::BeyondPeak;
        }
        if let Some(reserve) = reserve {
            let reservation = Reservation {
                waiter: reserve.waiter,
                permits: wanted,
                since: since.unwrap_or(now),
                until: now + reserve.kept_for,
            };
            self.reservations.insert(name.to_owned(), reservation);
        }
        PermitAnswer::Unavailable
    }

    /// The peak of `name`'s semaphore, which has `available` permits now.
    fn peak(&mut self, name: &str, available: i64) -> i64 {
        match self.peaks.get_mut(name) {
            Some(peak) => {
                *peak = (*peak).max(available);
                *peak
            }
            None => {
                self.peaks.insert(name.to_owned(), available);
                available
            }
        }
    }

    /// The count of `name`'s semaphore went down to `available` other than by an
    /// acquisition: the peak starts again from there.
    fn lower_peak(&mut self, name: &str, available: i64) {
        self.peaks.insert(name.to_owned(), available.max(0));
    }

    fn token(&mut self, name: &str, fresh: bool, wanted: bool) -> Option<u64> {
        if !wanted {
            return None;
        }
        let counter = self.tokens.entry(name.to_owned()).or_insert(0);
        if fresh {
            *counter += 1;
        }
        Some(*counter).filter(|&t| t > 0)
    }
}

/// What became of a grant, kept for the retries of its requests.
#[derive(Debug, Clone, Copy)]
enum Answer {
    /// The acquire request got it: a retry gets the same answer.
    Granted(Acquire),
    /// A release handed the mutex to the waiting acquisition: its next attempt takes
    /// the hold up (see the hand-over module).
    Handed(Acquire),
    /// It was released (or undone, or found not alive): a retry of its release gets the
    /// same answer, and a late copy of its acquire request grants nothing.
    Ended(Release),
}

/// A semaphore's permits held back for a starving waiter.
#[derive(Debug, Clone, Copy)]
struct Reservation {
    waiter: RequestId,
    permits: i64,
    /// When the waiter began waiting.
    since: Instant,
    until: Instant,
}

/// The kinds of object a name can hold, one at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    /// A lock of any kind (they share a name's entry).
    Lock,
    Latch,
    Semaphore,
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Lock => "lock",
            Self::Latch => "count-down latch",
            Self::Semaphore => "semaphore",
        })
    }
}

/// Who to tell after an operation, once the store is unlocked.
type Wakeup = Option<(String, Wake)>;

/// Locks kept in this process's memory.
#[derive(Clone)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    subscriptions: Subscriptions,
    notice_delay: Arc<Mutex<Option<NoticeDelay>>>,
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("store", &self.store)
            .field("subscriptions", &self.subscriptions)
            .finish_non_exhaustive()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self {
            store: Arc::new(Mutex::new(Store::default())),
            subscriptions: Subscriptions::new(Arc::new(InProcess)),
            notice_delay: Arc::new(Mutex::new(None)),
        }
    }

    /// Makes each hand-over's notice reach its client `delay(owner handed the lock)`
    /// late, as a notification over a network may (a paused client reads it when it
    /// resumes). For simulations: the notice is then a message from the past, and the
    /// waiter must not count its hold's lease from when it reads it.
    pub fn delay_hand_over_notices(&self, delay: NoticeDelay) {
        *self
            .notice_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(delay);
    }

    /// Plants `defect` back: from now on the store breaks the rule it names, as it once
    /// did, so that a check can show it catches the defect. For the simulation's
    /// mutation check only.
    #[cfg(feature = "mutants")]
    pub fn plant_defect(&self, defect: crate::protocol::Defect) {
        self.store().plant(Some(defect));
    }

    /// Gives a hand-over's notice, now or as late as the notice delay says.
    fn tell(&self, notice: handover::Notice) {
        let delay = self
            .notice_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map_or(Duration::ZERO, |delay| {
                delay(&notice.name, &notice.owner, &notice.handed)
            });
        let handover::Notice {
            channel,
            wake,
            handed,
            ..
        } = notice;
        if delay.is_zero() {
            self.subscriptions.deliver_handed(&channel, handed, wake);
            return;
        }
        let subscriptions = self.subscriptions.downgrade();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if !subscriptions.deliver_handed(&channel, handed, wake) {
                tracing::trace!(
                    target: crate::TRACING_TARGET,
                    "a hand-over's notice outlived its store; nobody listens"
                );
            }
        });
    }

    /// Channels with waiters subscribed (for diagnostics and tests).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.subscriptions.channels()
    }

    /// Names of the locks currently held and not expired.
    #[must_use]
    pub fn held_locks(&self) -> Vec<String> {
        let now = Instant::now();
        let mut store = self.store();
        let mut names: Vec<String> = store
            .locks
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(name, _)| name.clone())
            .collect();
        names.extend(store.exclusive_names(now));
        names.sort();
        names
    }

    /// How many mutex hand-overs the store made, and what became of them.
    #[must_use]
    pub fn hand_overs(&self) -> HandOvers {
        self.store().hand_overs
    }

    /// The permits available now in the plain semaphore `name` (0 when never set).
    #[must_use]
    pub fn available_permits(&self, name: &str) -> i64 {
        self.store().semaphores.get(name).copied().unwrap_or(0)
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // Critical sections below cannot panic half-way, so a poisoned store is consistent.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wake(&self, wakeup: Wakeup) {
        if let Some((channel, wake)) = wakeup {
            self.subscriptions.deliver(&channel, wake);
        }
    }

    /// The channel a waiter of `lock` listens on.
    fn channel(lock: &LockRef) -> String {
        match lock.kind {
            LockKind::Fair => channel::fair_waiter(&lock.name, &lock.owner),
            LockKind::Read | LockKind::Write => channel::read_write(&lock.name),
            LockKind::Mutex => channel::mutex(&lock.name),
        }
    }

    /// Serves the waiters of the read-write lock `lock`, which just became free: hands
    /// it to a writer, or wakes every waiter.
    fn serve(store: &mut Store, lock: &LockRef, now: Instant) -> handover::Served {
        if let Some(notice) = store.hand_over(&lock.name, now) {
            return handover::Served::Handed(notice);
        }
        handover::Served::Woken(Some((channel::read_write(&lock.name), Wake::All)))
    }

    /// Tells a free lock's next waiter (see [`MemoryBackend::serve`]).
    fn announce(&self, served: handover::Served) {
        match served {
            handover::Served::Handed(notice) => self.tell(notice),
            handover::Served::Woken(wakeup) => self.wake(wakeup),
        }
    }
}

impl MemoryBackend {
    /// The store, for an object of kind `own` named `name`: refused when another kind
    /// of object holds the name (as a networked store refuses a name that holds another
    /// type).
    fn store_for(&self, name: &LockName, own: Object) -> Result<MutexGuard<'_, Store>, Error> {
        let mut store = self.store();
        let name = name.as_str();
        let now = Instant::now();
        let held = store.live(name, now).is_some() || store.exclusively_held(name, now).is_some();
        let taken = (own != Object::Lock && held)
            || (own != Object::Latch && store.latches.contains_key(name))
            || (own != Object::Semaphore && store.semaphores.contains_key(name));
        if taken {
            let found = format!("another kind of object holds this name, not a {own}");
            return Err(Error::incompatible(name, found));
        }
        Ok(store)
    }

    /// Tells a semaphore's listeners that permits changed.
    fn permits_changed(&self, name: &LockName) {
        self.subscriptions
            .deliver(&channel::semaphore(name), Wake::All);
    }
}

/// The channels waiters listen on. They never leave the process, so any distinct names
/// do; these say what they are for when a test lists them.
mod channel {
    use crate::{LockName, Owner};

    pub(super) fn mutex(name: &LockName) -> String {
        format!("mutex:{name}")
    }

    pub(super) fn read_write(name: &LockName) -> String {
        format!("rw:{name}")
    }

    /// A semaphore's channel: the first local waiter of each client re-checks.
    pub(super) fn semaphore(name: &LockName) -> String {
        format!("semaphore:{name}")
    }

    /// A count-down latch's channel: every waiter is woken when it opens or closes.
    pub(super) fn latch(name: &LockName) -> String {
        format!("latch:{name}")
    }

    /// One queued waiter's own channel: a fair lock wakes its next waiter only.
    pub(super) fn fair_waiter(name: &LockName, owner: &Owner) -> String {
        format!("fair:{name}:{owner}")
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{Answer, FIRST_LOOK_AT, Store};
    use crate::backend::{Release, RequestId};

    const ENDED: Answer = Answer::Ended(Release::Released);

    /// Answers that expire as fast as they come are forgotten: the store keeps at most
    /// twice the threshold's worth, however many it gave.
    #[test]
    fn expired_answers_take_bounded_memory() {
        let mut store = Store::default();
        let start = Instant::now();
        for step in 0..20_000_u32 {
            let now = start + Duration::from_millis(u64::from(step));
            store.remember("name", RequestId::random(), ENDED, (now, Duration::ZERO));
            assert!(
                store.answers_kept() <= 2 * FIRST_LOOK_AT,
                "{} answers kept after {step}",
                store.answers_kept()
            );
        }
    }

    /// Live answers are kept and given again, and the store looks through them only
    /// when they have doubled since its last look (each look costs each answer a
    /// constant share): the next look comes at twice what the last one kept.
    #[test]
    fn live_answers_are_kept_and_looked_through_at_each_doubling() {
        let mut store = Store::default();
        let now = Instant::now();
        let ids: Vec<RequestId> = (0..5_000).map(|_| RequestId::random()).collect();
        for &id in &ids {
            store.remember("name", id, ENDED, (now, Duration::from_secs(60)));
        }
        assert!(
            ids.iter()
                .all(|&id| store.answered("name", id, now).is_some()),
            "a live answer was forgotten"
        );
        assert!(
            (5_000..=2 * 5_000).contains(&store.look_at),
            "the next look comes at {} answers, with 5 000 live",
            store.look_at
        );
    }
}
