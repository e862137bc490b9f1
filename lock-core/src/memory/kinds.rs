//! Acquiring and releasing a read-write lock's two sides on a name's entry: the rules,
//! apart from the store's locking and the wake-ups.

use tokio::time::Instant;

use super::{Entry, Grant, Mode, Store, Wakeup, channel};
use crate::backend::{Acquire, AcquireRequest, LockRef, Release, ReleaseRequest, RequestId};
use crate::notify::Wake;
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

/// Busy while a mutex or a fair lock holds the name, as one key does on a server.
fn held_exclusively(store: &mut Store, name: &str, now: Instant) -> Option<Acquire> {
    let left = store.exclusively_held(name, now)?;
    Some(Acquire::Busy {
        ttl: Some(left),
        reserved: false,
    })
}

pub(super) fn granted(holds: u32, token: Option<u64>, origin: RequestId) -> Acquire {
    Acquire::Acquired {
        holds,
        token,
        origin: Some(origin),
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
    if let Some(busy) = held_exclusively(store, name, now) {
        return busy;
    }
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
    if let Some(busy) = held_exclusively(store, name, now) {
        return Ok(busy);
    }
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
