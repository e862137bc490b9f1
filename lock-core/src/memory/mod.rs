//! The in-memory backend: every lock kind, within one process.
//!
//! It is a real backend (it passes the conformance suite), the reference model the
//! networked backends are compared with, and the worked example of the [`Backend`] trait
//! for someone writing a new one. Use it for tests, for single-process services, and as
//! the demo's fallback when no server is at hand. Locks are not shared between processes.
//!
//! The state is one entry per name whose fields are owners (or `owner:write` for a writer)
//! with their grants (one per acquisition not yet released, each a read hold with its own
//! expiry), an optional read-write `mode`, a fair lock's waiter queue and a fencing
//! counter. A release names the grant it ends and ends only that one, only while it is
//! alive.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LatchBackend, LatchRequest,
    LockKind, LockRef, LockState, PermitAnswer, PermitRequest, PermitReservation, Release,
    ReleaseRequest, Renewal, RequestId, SemaphoreBackend,
};
use crate::notify::{InProcess, Listener, Subscriptions, Wake};
use crate::{Error, LockName, Owner};

mod expirable;

/// A read-write lock's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// One grant of a hold: the acquire request that got it and, for a read hold, its own
/// expiry (the grants of any other hold share the entry's).
#[derive(Debug, Clone, Copy)]
struct Grant {
    id: RequestId,
    expires: Option<Instant>,
}

/// One owner's hold (a field of the entry): its grants, one per acquisition not yet
/// released, and the grant that began it.
#[derive(Debug)]
struct Field {
    origin: RequestId,
    grants: Vec<Grant>,
}

/// One held lock.
#[derive(Debug)]
struct Entry {
    /// `owner` for mutex, fair and read holds, `owner:write` for the writer.
    fields: HashMap<String, Field>,
    /// `None` for mutex and fair locks.
    mode: Option<Mode>,
    expires: Instant,
}

impl Entry {
    fn new(mode: Option<Mode>, now: Instant) -> Self {
        Self {
            fields: HashMap::new(),
            mode,
            expires: now,
        }
    }

    /// Extends, never shortens, the expiry (as every backend does).
    fn arm(&mut self, now: Instant, lease: Duration) {
        self.expires = self.expires.max(now + lease);
    }

    fn count(&self, field: &str) -> u32 {
        self.fields.get(field).map_or(0, |held| {
            u32::try_from(held.grants.len()).unwrap_or(u32::MAX)
        })
    }

    /// Adds `grant` to `field`'s hold (beginning it if there is none); returns the
    /// holds after it and the hold's origin.
    fn add(&mut self, field: &str, grant: Grant) -> (u32, RequestId) {
        let held = self.fields.entry(field.to_owned()).or_insert(Field {
            origin: grant.id,
            grants: Vec::new(),
        });
        held.grants.push(grant);
        let holds = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        (holds, held.origin)
    }

    /// Drops `owner`'s read grants whose leases ended; returns how many are live.
    fn live_reads(&mut self, owner: &str, now: Instant) -> u32 {
        let Some(held) = self.fields.get_mut(owner) else {
            return 0;
        };
        held.grants
            .retain(|grant| grant.expires.is_none_or(|expires| expires > now));
        let live = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        if live == 0 {
            self.fields.remove(owner);
        }
        live
    }

    /// The latest expiry of any live read hold.
    fn longest_read(&self, now: Instant) -> Option<Instant> {
        self.fields
            .values()
            .flat_map(|held| &held.grants)
            .filter_map(|grant| grant.expires)
            .filter(|expiry| *expiry > now)
            .max()
    }

    /// Ends grant `id` of `field` if it is alive there; returns the holds left, or
    /// `None` when the grant is not alive (never granted, ended, or its hold expired).
    fn end(&mut self, field: &str, id: RequestId, now: Instant) -> Option<u32> {
        let held = self.fields.get_mut(field)?;
        let at = held.grants.iter().position(|grant| {
            grant.id == id && grant.expires.is_none_or(|expires| expires > now)
        })?;
        held.grants.swap_remove(at);
        let left = u32::try_from(held.grants.len()).unwrap_or(u32::MAX);
        if left == 0 {
            self.fields.remove(field);
        }
        Some(left)
    }
}

/// A fair lock's waiters, first in line first.
#[derive(Debug, Default)]
struct Queue {
    order: VecDeque<Owner>,
    deadlines: HashMap<Owner, Instant>,
}

impl Queue {
    /// Drops heads whose deadline passed; returns the first live waiter.
    fn prune(&mut self, now: Instant) -> Option<&Owner> {
        while let Some(head) = self.order.front() {
            if self.deadlines.get(head).is_some_and(|d| *d > now) {
                break;
            }
            self.deadlines.remove(head);
            self.order.pop_front();
        }
        self.order.front()
    }

    fn leave(&mut self, owner: &Owner) {
        self.order.retain(|o| o != owner);
        self.deadlines.remove(owner);
    }
}

#[derive(Debug, Default)]
struct Store {
    locks: HashMap<String, Entry>,
    queues: HashMap<String, Queue>,
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
    remembered: u64,
}

impl Store {
    /// Forgets expired answers now and then, so that they take no memory for long.
    fn forget_expired(&mut self, now: Instant) {
        self.remembered += 1;
        if self.remembered.is_multiple_of(256) {
            self.answers.retain(|_, (_, until)| *until > now);
            self.count_downs.retain(|_, (_, until)| *until > now);
            self.permit_answers.retain(|_, (_, until)| *until > now);
            self.permit_releases.retain(|_, (_, until)| *until > now);
        }
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

/// The objects besides locks that a name can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Object {
    Latch,
    Semaphore,
}

impl std::fmt::Display for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Latch => "count-down latch",
            Self::Semaphore => "semaphore",
        })
    }
}

/// Who to tell after an operation, once the store is unlocked.
type Wakeup = Option<(String, Wake)>;

/// Locks kept in this process's memory.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    store: Arc<Mutex<Store>>,
    subscriptions: Subscriptions,
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
        }
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
        let mut names: Vec<String> = self
            .store()
            .locks
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|(name, _)| name.clone())
            .collect();
        names.sort();
        names
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
            _ => channel::mutex(&lock.name),
        }
    }

    /// Wakes the first live waiter of a fair lock that just became free.
    fn next_fair_waiter(store: &mut Store, name: &LockName, now: Instant) -> Wakeup {
        let head = store.queues.get_mut(name.as_str())?.prune(now)?;
        Some((channel::fair_waiter(name, head), Wake::One))
    }
}

fn writer_field(owner: &Owner) -> String {
    format!("{owner}:write")
}

fn busy(entry: &Entry, now: Instant) -> Acquire {
    Acquire::Busy {
        ttl: Some(entry.expires - now),
        reserved: false,
    }
}

fn acquire_exclusive(
    store: &mut Store,
    lock: &LockRef,
    request: AcquireRequest,
    now: Instant,
) -> Acquire {
    let name = lock.name.as_str();
    let owner = lock.owner.as_str();
    let grant = Grant {
        id: request.id,
        expires: None,
    };
    match store.live(name, now) {
        Some(entry) if entry.fields.contains_key(owner) => {
            let (holds, origin) = entry.add(owner, grant);
            entry.arm(now, request.lease);
            let token = store.token(name, false, request.fencing);
            granted(holds, token, origin)
        }
        Some(entry) => busy(entry, now),
        None => {
            let mut entry = Entry::new(None, now);
            let (holds, origin) = entry.add(owner, grant);
            entry.arm(now, request.lease);
            store.locks.insert(name.to_owned(), entry);
            let token = store.token(name, true, request.fencing);
            granted(holds, token, origin)
        }
    }
}

fn granted(holds: u32, token: Option<u64>, origin: RequestId) -> Acquire {
    Acquire::Acquired {
        holds,
        token,
        origin: Some(origin),
    }
}

/// The fair lock: first in the queue goes first; a waiter that stops asking lapses.
fn acquire_fair(
    store: &mut Store,
    lock: &LockRef,
    request: AcquireRequest,
    now: Instant,
) -> Acquire {
    let name = lock.name.as_str();
    let free = store.live(name, now).is_none();
    let head = store
        .queues
        .get_mut(name)
        .and_then(|q| q.prune(now).cloned());
    if free && head.as_ref().is_none_or(|h| *h == lock.owner) {
        if let Some(queue) = store.queues.get_mut(name) {
            queue.leave(&lock.owner);
        }
        return acquire_exclusive(store, lock, request, now);
    }
    if !free
        && store
            .live(name, now)
            .is_some_and(|e| e.fields.contains_key(lock.owner.as_str()))
    {
        return acquire_exclusive(store, lock, request, now);
    }
    let queue = store.queues.entry(name.to_owned()).or_default();
    let queued = queue.deadlines.contains_key(&lock.owner);
    let place_kept_for = request.wait.unwrap_or_default().place_kept_for;
    if queued || request.waits() {
        if !queued {
            queue.order.push_back(lock.owner.clone());
        }
        queue
            .deadlines
            .insert(lock.owner.clone(), now + place_kept_for);
    }
    let first_deadline = queue
        .order
        .front()
        .and_then(|h| queue.deadlines.get(h))
        .copied();
    let mut sleep = match store.live(name, now) {
        Some(entry) => entry.expires - now,
        None => first_deadline.map_or(place_kept_for, |d| d.saturating_duration_since(now)),
    };
    if queued || request.waits() {
        sleep = sleep.min(place_kept_for / 3);
    }
    Acquire::Busy {
        ttl: Some(sleep.max(Duration::from_millis(1))),
        reserved: false,
    }
}

fn acquire_read(
    store: &mut Store,
    lock: &LockRef,
    request: AcquireRequest,
    now: Instant,
) -> Acquire {
    let name = lock.name.as_str();
    let owner = lock.owner.as_str();
    let writer = writer_field(&lock.owner);
    let entry = match store.live(name, now) {
        None => store
            .locks
            .entry(name.to_owned())
            .or_insert_with(|| Entry::new(Some(Mode::Read), now)),
        Some(entry) => {
            let allowed = entry.mode == Some(Mode::Read)
                || (entry.mode == Some(Mode::Write) && entry.fields.contains_key(&writer));
            if !allowed {
                return busy(entry, now);
            }
            entry
        }
    };
    entry.live_reads(owner, now);
    let grant = Grant {
        id: request.id,
        expires: Some(now + request.lease),
    };
    let (holds, origin) = entry.add(owner, grant);
    entry.arm(now, request.lease);
    let token = store.token(name, holds == 1, request.fencing);
    granted(holds, token, origin)
}

fn acquire_write(
    store: &mut Store,
    lock: &LockRef,
    request: AcquireRequest,
    now: Instant,
) -> Result<Acquire, Error> {
    let name = lock.name.as_str();
    let writer = writer_field(&lock.owner);
    let grant = Grant {
        id: request.id,
        expires: None,
    };
    let (holds, origin, fresh) = match store.live(name, now) {
        None => {
            let mut entry = Entry::new(Some(Mode::Write), now);
            let (holds, origin) = entry.add(&writer, grant);
            entry.arm(now, request.lease);
            store.locks.insert(name.to_owned(), entry);
            (holds, origin, true)
        }
        Some(entry) if entry.mode == Some(Mode::Write) && entry.fields.contains_key(&writer) => {
            let (holds, origin) = entry.add(&writer, grant);
            entry.arm(now, request.lease);
            (holds, origin, false)
        }
        Some(entry) if entry.mode == Some(Mode::Read) => {
            // Only live read holds of the owner make an upgrade wait for itself.
            if entry.live_reads(lock.owner.as_str(), now) > 0 {
                return Err(Error::WouldDeadlock {
                    name: name.to_owned(),
                });
            }
            if !entry.fields.is_empty() {
                return Ok(busy(entry, now));
            }
            store.locks.remove(name);
            return acquire_write(store, lock, request, now);
        }
        Some(entry) => return Ok(busy(entry, now)),
    };
    let token = store.token(name, fresh, request.fencing);
    Ok(granted(holds, token, origin))
}

/// Ends read grant `grant`; the lock lives as long as its longest live read hold.
fn release_read(
    store: &mut Store,
    lock: &LockRef,
    grant: RequestId,
    now: Instant,
) -> (Release, Wakeup) {
    let name = lock.name.as_str();
    let Some(entry) = store.live(name, now) else {
        return (Release::NotHeld, None);
    };
    if entry.end(lock.owner.as_str(), grant, now).is_none() {
        return (Release::NotHeld, None);
    }
    let outcome = match entry.live_reads(lock.owner.as_str(), now) {
        0 => Release::Released,
        holds => Release::StillHeld { holds },
    };
    if entry.mode == Some(Mode::Write) {
        return (outcome, None);
    }
    match entry.longest_read(now) {
        Some(expiry) => {
            entry.expires = expiry;
            (outcome, None)
        }
        None => {
            store.locks.remove(name);
            (outcome, Some((channel::read_write(&lock.name), Wake::One)))
        }
    }
}

fn release_write(
    store: &mut Store,
    lock: &LockRef,
    request: &ReleaseRequest,
    now: Instant,
) -> (Release, Wakeup) {
    let name = lock.name.as_str();
    let Some(entry) = store.live(name, now) else {
        return (Release::NotHeld, None);
    };
    if entry.mode != Some(Mode::Write) {
        return (Release::NotHeld, None);
    }
    let Some(left) = entry.end(&writer_field(&lock.owner), request.grant, now) else {
        return (Release::NotHeld, None);
    };
    if left > 0 {
        entry.arm(now, request.lease);
        return (Release::StillHeld { holds: left }, None);
    }
    if entry.fields.is_empty() {
        store.locks.remove(name);
    } else {
        entry.mode = Some(Mode::Read);
    }
    (
        Release::Released,
        Some((channel::read_write(&lock.name), Wake::All)),
    )
}

fn release_exclusive(
    store: &mut Store,
    lock: &LockRef,
    request: &ReleaseRequest,
    now: Instant,
) -> (Release, Wakeup) {
    let name = lock.name.as_str();
    let Some(entry) = store.live(name, now) else {
        return (Release::NotHeld, None);
    };
    let Some(left) = entry.end(lock.owner.as_str(), request.grant, now) else {
        return (Release::NotHeld, None);
    };
    if left > 0 {
        entry.arm(now, request.lease);
        return (Release::StillHeld { holds: left }, None);
    }
    store.locks.remove(name);
    let wakeup = match lock.kind {
        LockKind::Fair => MemoryBackend::next_fair_waiter(store, &lock.name, now),
        _ => Some((channel::mutex(&lock.name), Wake::One)),
    };
    (Release::Released, wakeup)
}

#[async_trait]
impl Backend for MemoryBackend {
    /// Every lock kind, fencing, retries and count-down latches; no reservations, which
    /// first-come-first-served wake-ups make unnecessary here; shared by the clients of
    /// this process only. Every request runs when it is first polled, so in order.
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(HoldModel::Lease)
            .fair(true)
            .read_write(true)
            .fencing(true)
            .retry_safe(true)
            .count_down_latch(true)
            .semaphore(true)
            .expirable_semaphore(true)
            .wakes_one_client(true)
            .ordered_requests(true)
    }

    fn latches(&self) -> Option<&dyn LatchBackend> {
        Some(self)
    }

    fn semaphores(&self) -> Option<&dyn SemaphoreBackend> {
        Some(self)
    }

    fn expirable_semaphores(&self) -> Option<&dyn crate::backend::ExpirableSemaphoreBackend> {
        Some(self)
    }

    /// Wake-ups here are first-come-first-served already (one waiter per release, in
    /// arrival order), so a starving attempt needs no reservation and is treated as any other.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let now = Instant::now();
        let mut store = self.store();
        let name = lock.name.as_str();
        match store.answered(name, request.id, now) {
            Some(Answer::Granted(grant)) => return Ok(grant),
            // A copy of a request whose grant already ended (or was undone before it
            // came) grants nothing: nobody would release it.
            Some(Answer::Ended(_)) => {
                return Ok(Acquire::Busy {
                    ttl: None,
                    reserved: false,
                });
            }
            None => {}
        }
        let reply = match lock.kind {
            LockKind::Fair => acquire_fair(&mut store, lock, request, now),
            LockKind::Read => acquire_read(&mut store, lock, request, now),
            LockKind::Write => acquire_write(&mut store, lock, request, now)?,
            _ => acquire_exclusive(&mut store, lock, request, now),
        };
        if matches!(reply, Acquire::Acquired { .. }) {
            let kept = (now, request.retry_window);
            store.remember(name, request.id, Answer::Granted(reply), kept);
        }
        Ok(reply)
    }

    async fn cancel_wait(&self, lock: &LockRef) -> Result<(), Error> {
        if lock.kind != LockKind::Fair {
            return Ok(());
        }
        let now = Instant::now();
        let wakeup = {
            let mut store = self.store();
            let name = lock.name.as_str();
            let was_first = store
                .queues
                .get(name)
                .and_then(|q| q.order.front())
                .is_some_and(|head| *head == lock.owner);
            if let Some(queue) = store.queues.get_mut(name) {
                queue.leave(&lock.owner);
            }
            if was_first && store.live(name, now).is_none() {
                Self::next_fair_waiter(&mut store, &lock.name, now)
            } else {
                None
            }
        };
        self.wake(wakeup);
        Ok(())
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let mut store = self.store();
        let counter = store
            .tokens
            .entry(lock.name.as_str().to_owned())
            .or_insert(0);
        *counter = (*counter).max(token);
        Ok(())
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let now = Instant::now();
        let (outcome, wakeup) = {
            let mut store = self.store();
            let name = lock.name.as_str();
            if let Some(Answer::Ended(answer)) = store.answered(name, request.grant, now) {
                return Ok(answer);
            }
            let (outcome, wakeup) = match lock.kind {
                LockKind::Read => release_read(&mut store, lock, request.grant, now),
                LockKind::Write => release_write(&mut store, lock, &request, now),
                _ => release_exclusive(&mut store, lock, &request, now),
            };
            // Kept for twice the window: a copy of the grant's acquire request that
            // comes later than its own retries could must still find the grant ended.
            let kept = (now, request.retry_window.saturating_mul(2));
            store.remember(name, request.grant, Answer::Ended(outcome), kept);
            (outcome, wakeup)
        };
        self.wake(wakeup);
        Ok(outcome)
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let now = Instant::now();
        let mut store = self.store();
        locks
            .iter()
            .map(|lock| {
                let owner = lock.owner.as_str();
                let Some(entry) = store.live(lock.name.as_str(), now) else {
                    return Renewal::Gone;
                };
                let holds = match lock.kind {
                    LockKind::Write => entry.count(&writer_field(&lock.owner)),
                    LockKind::Read => entry.live_reads(owner, now),
                    _ => entry.count(owner),
                };
                if holds == 0 {
                    return Renewal::Gone;
                }
                if let Some(held) = entry.fields.get_mut(owner)
                    && lock.kind == LockKind::Read
                {
                    // Extend only: a hold with a longer lease of its own keeps it.
                    for expires in held.grants.iter_mut().filter_map(|g| g.expires.as_mut()) {
                        *expires = (*expires).max(now + lease);
                    }
                }
                entry.arm(now, lease);
                Renewal::Renewed
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let now = Instant::now();
        let mut store = self.store();
        Ok(match store.live(lock.name.as_str(), now) {
            Some(entry) => {
                let (field, mode) = match lock.kind {
                    LockKind::Read => (lock.owner.as_str().to_owned(), Some(Mode::Read)),
                    LockKind::Write => (writer_field(&lock.owner), Some(Mode::Write)),
                    _ => (lock.owner.as_str().to_owned(), None),
                };
                let locked = mode.is_none() || entry.mode == mode;
                LockState::new(locked, entry.count(&field), Some(entry.expires - now))
            }
            None => LockState::default(),
        })
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let now = Instant::now();
        let name = lock.name.as_str();
        let (released, wakeup) = {
            let mut store = self.store();
            let wanted = match lock.kind {
                LockKind::Read => Some(Mode::Read),
                LockKind::Write => Some(Mode::Write),
                _ => None,
            };
            let matches = store
                .live(name, now)
                .is_some_and(|e| wanted.is_none() || e.mode == wanted);
            if matches {
                store.locks.remove(name);
                let wakeup = match lock.kind {
                    LockKind::Fair => Self::next_fair_waiter(&mut store, &lock.name, now),
                    LockKind::Read | LockKind::Write => {
                        Some((channel::read_write(&lock.name), Wake::All))
                    }
                    _ => Some((channel::mutex(&lock.name), Wake::One)),
                };
                (true, wakeup)
            } else {
                (false, None)
            }
        };
        self.wake(wakeup);
        Ok(released)
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.subscriptions.listen(&Self::channel(lock)).await
    }
}

impl MemoryBackend {
    /// The store, for an object of kind `own` named `name`: refused when another kind
    /// of object holds the name (as a networked store refuses a name that holds another
    /// type).
    fn store_for(&self, name: &LockName, own: Object) -> Result<MutexGuard<'_, Store>, Error> {
        let mut store = self.store();
        let name = name.as_str();
        let taken = store.live(name, Instant::now()).is_some()
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

#[async_trait]
impl LatchBackend for MemoryBackend {
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error> {
        {
            let mut store = self.store_for(name, Object::Latch)?;
            if store.latches.contains_key(name.as_str()) {
                return Ok(false);
            }
            store.latches.insert(name.as_str().to_owned(), count);
        }
        self.subscriptions.deliver(&channel::latch(name), Wake::All);
        Ok(true)
    }

    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error> {
        let now = Instant::now();
        let (left, opened) = {
            let mut store = self.store_for(name, Object::Latch)?;
            let key = (name.as_str().to_owned(), request.id);
            if let Some((left, until)) = store.count_downs.get(&key)
                && *until > now
            {
                return Ok(*left);
            }
            let (left, opened) = match store.latches.get_mut(name.as_str()) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    (*count, false)
                }
                Some(_) => {
                    store.latches.remove(name.as_str());
                    (0, true)
                }
                None => (0, false),
            };
            store.forget_expired(now);
            store
                .count_downs
                .insert(key, (left, now + request.retry_window));
            (left, opened)
        };
        if opened {
            self.subscriptions.deliver(&channel::latch(name), Wake::All);
        }
        Ok(left)
    }

    async fn count(&self, name: &LockName) -> Result<u64, Error> {
        let store = self.store_for(name, Object::Latch)?;
        Ok(store.latches.get(name.as_str()).copied().unwrap_or(0))
    }

    async fn delete(&self, name: &LockName) -> Result<bool, Error> {
        let deleted = self
            .store_for(name, Object::Latch)?
            .latches
            .remove(name.as_str())
            .is_some();
        if deleted {
            self.subscriptions.deliver(&channel::latch(name), Wake::All);
        }
        Ok(deleted)
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.subscriptions.listen(&channel::latch(name)).await
    }
}

#[async_trait]
impl SemaphoreBackend for MemoryBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        {
            let mut store = self.store_for(name, Object::Semaphore)?;
            if store.semaphores.contains_key(name.as_str()) {
                return Ok(false);
            }
            let permits = i64::try_from(permits).unwrap_or(i64::MAX);
            store.semaphores.insert(name.as_str().to_owned(), permits);
            store.lower_peak(name.as_str(), permits);
        }
        self.permits_changed(name);
        Ok(true)
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        let available = {
            let mut store = self.store_for(name, Object::Semaphore)?;
            let available = store
                .semaphores
                .entry(name.as_str().to_owned())
                .or_insert(0);
            *available = available.saturating_add(delta);
            let available = *available;
            if delta < 0 {
                store.lower_peak(name.as_str(), available);
            }
            available
        };
        self.permits_changed(name);
        Ok(available)
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let now = Instant::now();
        let mut store = self.store_for(name, Object::Semaphore)?;
        let key = (name.as_str().to_owned(), request.id);
        if store.permit_grants.contains_key(&key) {
            return Ok(PermitAnswer::Taken);
        }
        if store
            .permit_releases
            .get(&key)
            .is_some_and(|(_, until)| *until > now)
        {
            // A late copy of an acquisition whose grant already ended.
            return Ok(PermitAnswer::Unavailable);
        }
        let wanted = i64::try_from(request.permits).unwrap_or(i64::MAX);
        let Some(available) = store.semaphores.get(name.as_str()).copied() else {
            // Never set: no permit was ever there.
            return Ok(PermitAnswer::BeyondPeak);
        };
        let answer = store.may_take(name.as_str(), (available, wanted), request.reserve, now);
        if answer.taken() {
            store
                .semaphores
                .insert(name.as_str().to_owned(), available - wanted);
            store.permit_grants.insert(key, request.permits);
        }
        Ok(answer)
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let now = Instant::now();
        let (available, given) = {
            let mut store = self.store_for(name, Object::Semaphore)?;
            let key = (name.as_str().to_owned(), request.id);
            if let Some((available, until)) = store.permit_releases.get(&key)
                && *until > now
            {
                return Ok(*available);
            }
            let given = store.permit_grants.remove(&key).unwrap_or(0);
            let available = store
                .semaphores
                .entry(name.as_str().to_owned())
                .or_insert(0);
            *available = available.saturating_add(i64::try_from(given).unwrap_or(i64::MAX));
            let available = *available;
            store.forget_expired(now);
            store
                .permit_releases
                .insert(key, (available, now + request.retry_window));
            (available, given)
        };
        if given > 0 {
            self.permits_changed(name);
        }
        Ok(available)
    }

    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        let store = self.store_for(name, Object::Semaphore)?;
        Ok(store.semaphores.get(name.as_str()).copied().unwrap_or(0))
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        let mut store = self.store_for(name, Object::Semaphore)?;
        if store
            .reservations
            .get(name.as_str())
            .is_some_and(|held| held.waiter == waiter)
        {
            store.reservations.remove(name.as_str());
        }
        Ok(())
    }

    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        let mut store = self.store_for(name, Object::Semaphore)?;
        let drained = match store.semaphores.get_mut(name.as_str()) {
            Some(available) => std::mem::replace(available, 0),
            None => return Ok(0),
        };
        store.lower_peak(name.as_str(), 0);
        Ok(drained)
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.subscriptions.listen(&channel::semaphore(name)).await
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
