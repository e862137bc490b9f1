//! Acquiring and releasing each lock kind on a name's entry: the rules, apart from the
//! store's locking and the wake-ups.

use std::time::Duration;

use tokio::time::Instant;

use super::{Entry, Grant, MemoryBackend, Mode, Store, Wakeup, channel};
use crate::backend::{
    Acquire, AcquireRequest, LockKind, LockRef, Release, ReleaseRequest, RequestId,
};
use crate::notify::Wake;
use crate::protocol::Defect;
use crate::{Error, Owner};

pub(super) fn writer_field(owner: &Owner) -> String {
    format!("{owner}:write")
}

pub(super) fn busy(entry: &Entry, now: Instant) -> Acquire {
    Acquire::Busy {
        ttl: Some(entry.expires - now),
        reserved: false,
    }
}

pub(super) fn acquire_exclusive(
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

pub(super) fn granted(holds: u32, token: Option<u64>, origin: RequestId) -> Acquire {
    Acquire::Acquired {
        holds,
        token,
        origin: Some(origin),
    }
}

/// The fair lock: first in the queue goes first; a waiter that stops asking lapses.
pub(super) fn acquire_fair(
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
    let queued = queue.waiting.contains_key(&lock.owner);
    let place_kept_for = request.wait.unwrap_or_default().place_kept_for;
    if queued || request.waits() {
        if !queued {
            queue.order.push_back(lock.owner.clone());
        }
        let waiter = super::handover::Waiter::new(lock, request, now);
        queue.waiting.insert(lock.owner.clone(), waiter);
    }
    let first_deadline = queue
        .order
        .front()
        .and_then(|h| queue.waiting.get(h))
        .map(super::handover::Waiter::deadline);
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

pub(super) fn acquire_read(
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

pub(super) fn acquire_write(
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
pub(super) fn release_read(
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

pub(super) fn release_write(
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

pub(super) fn release_exclusive(
    store: &mut Store,
    lock: &LockRef,
    request: &ReleaseRequest,
    now: Instant,
) -> (Release, Wakeup) {
    let name = lock.name.as_str();
    let release_ends_any_grant = store.planted(Defect::N3ReleaseEndsAnyGrant);
    let counts_down = store.planted(Defect::N2ReleaseCountsDown);
    let Some(entry) = store.live(name, now) else {
        return (Release::NotHeld, None);
    };
    let ended = if counts_down {
        entry.end_latest(lock.owner.as_str())
    } else {
        match entry.end(lock.owner.as_str(), request.grant, now) {
            None if release_ends_any_grant => entry.end_latest(lock.owner.as_str()),
            ended => ended,
        }
    };
    let Some(left) = ended else {
        return (Release::NotHeld, None);
    };
    if left > 0 {
        entry.arm(now, request.lease);
        return (Release::StillHeld { holds: left }, None);
    }
    store.locks.remove(name);
    let wakeup = match lock.kind {
        LockKind::Fair => MemoryBackend::next_fair_waiter(store, &lock.name, now),
        LockKind::Mutex | LockKind::Read | LockKind::Write => {
            Some((channel::mutex(&lock.name), Wake::One))
        }
    };
    (Release::Released, wakeup)
}
