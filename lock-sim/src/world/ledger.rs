//! The ledger of what every task believes it holds, and the invariants checked against
//! it: safety (no two holders, no more permit holders than permits) and liveness.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use lock_core::memory::MemoryBackend;
use lock_core::{Guard, LeasedPermits, Permits};
use tokio::time::Instant;

use super::{LIVENESS_BOUND, LONGEST_LEASE, MUTEX_NAMES, PERMITS, RW_NAME, SEMAPHORE};

/// What a task holds, as the checker sees it.
pub(super) enum Held {
    Guard(Guard),
    Permits(Permits),
    Leased(LeasedPermits),
    /// A mutex held by a client of another library (see the foreign module): it
    /// believes it holds until it releases, or until `until` (its lease; nothing
    /// renews it).
    Foreign {
        owner: String,
        token: Option<u64>,
        until: Instant,
    },
}

impl Held {
    /// The owner of an exclusive hold its holder believes in now, and whether it is a
    /// reader's.
    fn believed(&self, now: Instant) -> Option<(&str, bool)> {
        match self {
            Self::Guard(guard) if guard.is_held() => {
                Some((guard.owner(), guard.kind() == lock_core::LockKind::Read))
            }
            Self::Foreign { owner, until, .. } if *until > now => Some((owner, false)),
            _ => None,
        }
    }

    /// The fencing token of an exclusive hold.
    fn token(&self) -> Option<u64> {
        match self {
            Self::Guard(guard) => guard.fencing_token(),
            Self::Foreign { token, .. } => *token,
            Self::Permits(_) | Self::Leased(_) => None,
        }
    }
}

pub(super) struct Entry {
    name: &'static str,
    held: Held,
}

/// Every hold and wait of the run's tasks.
#[derive(Default)]
pub(super) struct Ledger {
    entries: Mutex<BTreeMap<u64, Entry>>,
    next: AtomicU64,
    /// Tasks waiting for an exclusive lock: the name and since when.
    waiting: Mutex<BTreeMap<usize, (&'static str, Instant)>>,
    /// How many times each name changed hands: a hold begun by an owner that held none
    /// of it.
    turns: Mutex<BTreeMap<&'static str, u64>>,
    /// Since when each name has been free in the store, as the checker last saw.
    free_since: Mutex<BTreeMap<&'static str, Instant>>,
    /// The latest force-release of each name: when, and the fencing token issued last
    /// before it (every hold with a token up to it was revoked).
    forced: Mutex<BTreeMap<&'static str, (Instant, u64)>>,
    /// The owners whose guards (not revoked) held each name since its latest
    /// force-release.
    held_since_forced: Mutex<BTreeMap<&'static str, BTreeSet<String>>>,
    violation: Mutex<Option<String>>,
}

impl Ledger {
    pub(super) fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Entry>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn insert(&self, name: &'static str, held: Held) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let mut entries = self.entries();
        if let Some((owner, _)) = held.believed(now) {
            let reentry = entries.values().any(|entry| {
                entry.name == name
                    && entry
                        .held
                        .believed(now)
                        .is_some_and(|(other, _)| other == owner)
            });
            if !reentry {
                let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
                *turns.entry(name).or_default() += 1;
            }
        }
        entries.insert(id, Entry { name, held });
        id
    }

    /// How many times `name` changed hands so far.
    pub(super) fn turns(&self, name: &'static str) -> u64 {
        let turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        turns.get(name).copied().unwrap_or(0)
    }

    pub(super) fn take(&self, id: u64) -> Option<Held> {
        self.entries().remove(&id).map(|entry| entry.held)
    }

    pub(super) fn wait(&self, task: usize, name: &'static str) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.insert(task, (name, Instant::now()));
    }

    pub(super) fn waited(&self, task: usize) {
        let mut waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        waiting.remove(&task);
    }

    /// An operator force-released `name`, whose latest fencing token was `token`.
    pub(super) fn forced(&self, name: &'static str, token: u64) {
        let mut forced = self.forced.lock().unwrap_or_else(PoisonError::into_inner);
        forced.insert(name, (Instant::now(), token));
        let mut since = self
            .held_since_forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        since.remove(name);
    }

    /// A guard whose hold a force-release revoked learns it within one lease: its
    /// renewals find the hold gone, and without an answer its own lease runs out. One
    /// exception, a gap of the protocol (renewals name the owner, not the hold): when
    /// its owner was granted the name again and nobody else held it since, its renewals
    /// renew that new hold, and exclusion holds. A take-up granted afresh after another
    /// owner held the lock (third review, R1) breaks the rule.
    pub(super) async fn revocations(&self, store: &MemoryBackend) -> Result<(), String> {
        let now = Instant::now();
        let overdue: Vec<(&'static str, String, Instant)> = {
            let entries = self.entries();
            let forced = self.forced.lock().unwrap_or_else(PoisonError::into_inner);
            entries
                .values()
                .filter_map(|entry| {
                    let Held::Guard(guard) = &entry.held else {
                        return None;
                    };
                    let at = revoked_at(&forced, entry)?;
                    (guard.is_held() && now.duration_since(at) > LONGEST_LEASE)
                        .then(|| (entry.name, guard.owner().to_owned(), at))
                })
                .collect()
        };
        for (name, owner, at) in overdue {
            let Ok(lock_name) = lock_core::LockName::new(name) else {
                continue;
            };
            let info = lock_core::Introspect::describe(store, &lock_name)
                .await
                .map_err(|err| format!("the checker could not read {name}: {err}"))?;
            let owner_holds_again = info.holders.iter().any(|holder| holder.owner == owner);
            let nobody_else = self
                .held_since_forced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(name)
                .is_none_or(|owners| owners.iter().all(|other| *other == owner));
            if !(owner_holds_again && nobody_else) {
                return Err(format!(
                    "REVOKED GUARD HOLDS ON: {owner}'s guard of {name} still believes it holds \
                     {} ms after a force-release revoked it",
                    now.duration_since(at).as_millis()
                ));
            }
        }
        Ok(())
    }

    pub(super) fn fail(&self, violation: String) {
        let mut first = self
            .violation
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        first.get_or_insert(violation);
    }

    pub(super) fn violation(&self) -> Option<String> {
        self.violation
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Checks every invariant of a running system.
    pub(super) fn check(&self, store: &MemoryBackend) {
        if let Err(violation) = self.safety() {
            self.fail(violation);
        }
        if let Err(violation) = self.liveness(store) {
            self.fail(violation);
        }
    }

    /// At most one owner whose guard believes it holds an exclusive lock (a reader only
    /// beside the writer that is the same owner), among guards whose hold no
    /// force-release revoked; a revoked guard learns it within one lease; never more
    /// valid permit holders than permits.
    pub(super) fn safety(&self) -> Result<(), String> {
        let entries = self.entries();
        let forced = self.forced.lock().unwrap_or_else(PoisonError::into_inner);
        // Guards whose hold was revoked are left out: they learn at their next request.
        let mut exclusive: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
        let mut readers: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
        let (mut permits, mut leased) = (0, 0);
        let now = Instant::now();
        for entry in entries.values() {
            match &entry.held {
                Held::Permits(held) => permits += held.count(),
                Held::Leased(held) if held.is_held() => leased += held.count() as u64,
                held => {
                    let Some((owner, reads)) = held.believed(now) else {
                        continue;
                    };
                    if revoked_at(&forced, entry).is_some() {
                        continue;
                    }
                    let owners = if reads { &mut readers } else { &mut exclusive };
                    owners
                        .entry(entry.name)
                        .or_default()
                        .insert(owner.to_owned());
                }
            }
        }
        for (name, owners) in &exclusive {
            if owners.len() > 1 {
                return Err(format!(
                    "TWO OWNERS: {} owners' guards believe they hold {name}",
                    owners.len()
                ));
            }
            if let Some(readers) = readers.get(name)
                && !readers.is_subset(owners)
            {
                return Err(format!(
                    "READER BESIDE A WRITER: another owner's read guard holds {name} \
                     while a write guard does"
                ));
            }
        }
        let mut since_forced = self
            .held_since_forced
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (name, owners) in &exclusive {
            since_forced
                .entry(name)
                .or_default()
                .extend(owners.iter().cloned());
        }
        if permits > PERMITS {
            return Err(format!(
                "OVER CAPACITY: {permits} plain permits held of {PERMITS}"
            ));
        }
        if leased > PERMITS {
            return Err(format!(
                "OVER CAPACITY: {leased} valid expirable permits held of {PERMITS}"
            ));
        }
        Ok(())
    }

    /// No task waits for an exclusive lock that has been free in the store for longer
    /// than the bound, nor for one plain permit while one has been available as long.
    pub(super) fn liveness(&self, store: &MemoryBackend) -> Result<(), String> {
        let now = Instant::now();
        let held = store.held_locks();
        let mut free_since = self
            .free_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let permit_free = store.available_permits(SEMAPHORE) >= 1;
        let names = MUTEX_NAMES.iter().chain([&RW_NAME]);
        let free = names
            .map(|name| (*name, !held.iter().any(|h| h == name)))
            .chain([(SEMAPHORE, permit_free)]);
        for (name, free) in free {
            if free {
                free_since.entry(name).or_insert(now);
            } else {
                free_since.remove(name);
            }
        }
        let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
        for (task, (name, since)) in waiting.iter() {
            if let Some(free) = free_since.get(name) {
                let stuck_since = (*free).max(*since);
                if now.duration_since(stuck_since) > LIVENESS_BOUND {
                    return Err(format!(
                        "STUCK WAITER: task {task} waited {:?} for {name}, free all along",
                        now.duration_since(stuck_since)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// No hold in the store lasts longer than the longest lease any task asks for: every
/// hold is kept by its owner's requests, each arming one lease at most (a handed hold
/// lasts its waiter's lease, not its place: issue 48's kill -9 finding).
pub(super) async fn leases(store: &MemoryBackend) -> Result<(), String> {
    for name in MUTEX_NAMES.iter().chain([&RW_NAME]) {
        let Ok(lock_name) = lock_core::LockName::new(name) else {
            continue;
        };
        let info = lock_core::Introspect::describe(store, &lock_name)
            .await
            .map_err(|err| format!("the checker could not read {name}: {err}"))?;
        if let Some(left) = info.lease_left.filter(|left| *left > LONGEST_LEASE) {
            return Err(format!(
                "HOLD BEYOND ITS LEASE: {name} is held for {} ms more, longer than any lease \
                 asked for",
                left.as_millis()
            ));
        }
    }
    Ok(())
}

/// When the hold `entry`'s guard believes in was revoked by a force-release, if it was:
/// its fencing token is no later than the name's latest before that force-release.
fn revoked_at(forced: &BTreeMap<&'static str, (Instant, u64)>, entry: &Entry) -> Option<Instant> {
    let (at, last) = forced.get(entry.name)?;
    let token = entry.held.token()?;
    (token <= *last).then_some(*at)
}
