//! What a store that executes the protocol's machine ([`crate::protocol::Name`]) for its
//! mutexes, fair locks and read-write locks adds around it, written once for every such store (the memory
//! store, and the MySQL store, which loads a name's machine, steps it in the client and
//! saves it): the machine's time, the event an attempt is, the answers a reply becomes,
//! and what a store reads of a machine to describe its lock.
//!
//! The machine's time counts microseconds; where it starts is the store's choice (the
//! memory store's first request, a server's clock since the epoch).

use std::time::{Duration, SystemTime};

use super::{Acquire, AcquireRequest, LockKind, LockRef, Owner, Release, RequestId};
use crate::protocol::{Event, Name, Reply, Side};
use crate::{Error, HeldAs, HolderInfo, LockInfo};

/// The machine of one lock name (a mutex, a fair lock, or a read-write lock), over a store's request ids and owners, and
/// what the store keeps of each waiting attempt (`A`, for its hand-over's notice).
pub type Machine<A> = Name<RequestId, Owner, A>;

/// How long a release offers a mutex to the clients of other libraries waiting for it
/// (the servers' stores' default for their offers).
pub const OFFER: Duration = Duration::from_millis(100);

/// The machine's time for `duration`.
#[must_use]
pub fn ticks(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The duration of `ticks` of the machine's time.
#[must_use]
pub fn span(ticks: u64) -> Duration {
    Duration::from_micros(ticks)
}

/// A new machine for a name of `kind` (a fair lock's, or a mutex's), at `clock`, whose
/// tokens go on after `token`: leases of at most `max_lease` (none: any), a failover's
/// quarantine of `quarantine`, and grants from `quarantine_until` on.
#[must_use]
pub fn new_machine<A>(
    kind: LockKind,
    max_lease: Option<Duration>,
    quarantine: Duration,
    (clock, token, quarantine_until): (u64, u64, u64),
) -> Machine<A>
where
    A: Clone,
{
    Machine::new(kind == LockKind::Fair, max_lease.map_or(u64::MAX, ticks))
        .quarantining_for(ticks(quarantine))
        .offering_for(ticks(OFFER))
        .starting(clock, token, quarantine_until)
}

/// Brings `machine` to `clock` (a clock that went back leaves it where it is) and has it
/// keep each id for `retention`.
pub fn bring_to<A: Clone>(machine: &mut Machine<A>, clock: u64, retention: Duration) {
    machine.forget_after(ticks(retention));
    let elapsed = clock.saturating_sub(machine.now());
    machine.step(Event::Elapse(elapsed));
}

/// The side of the lock `kind` holds: a reader's, or an exclusive one.
#[must_use]
pub fn side(kind: LockKind) -> Side {
    match kind {
        LockKind::Read => Side::Read,
        _ => Side::Write,
    }
}

/// The event an attempt of `request` on `lock` is, keeping `ask` with a waiter: a
/// fair lock's waiter takes its place; a mutex's (and a writer's) only when a release
/// may wake its client alone (a composite lock's part waits to be woken with every
/// other); a reader never takes one.
#[must_use]
pub fn attempt<A>(lock: &LockRef, request: &AcquireRequest, ask: A) -> Event<RequestId, Owner, A> {
    let waits = match lock.kind {
        LockKind::Fair => request.waits(),
        _ => request.waits_to_be_woken_alone(),
    };
    let place = request.wait.map(|wait| ticks(wait.place_kept_for));
    Event::Attempt {
        side: side(lock.kind),
        id: request.id,
        owner: lock.owner.clone(),
        lease: ticks(request.lease),
        place: place.filter(|_| waits),
        ask,
    }
}

/// The answer to an attempt of `request` on `lock` that the machine replied `reply` to,
/// at `clock`.
///
/// # Errors
///
/// [`Error::WouldDeadlock`] for a write attempt of an owner that reads; an invalid
/// argument for a lease longer than the machine grants.
pub fn acquire_answer<A: Clone>(
    machine: &Machine<A>,
    (lock, request): (&LockRef, &AcquireRequest),
    reply: Reply<RequestId>,
    clock: u64,
) -> Result<Acquire, Error> {
    Ok(match reply {
        Reply::Acquired {
            holds,
            token,
            origin,
        } => Acquire::Acquired {
            holds,
            token: request.fencing.then_some(token),
            origin: Some(origin),
        },
        Reply::Busy => Acquire::Busy {
            ttl: Some(sleep_when_busy(machine, request, clock)),
            reserved: false,
        },
        Reply::WouldDeadlock => {
            return Err(Error::WouldDeadlock {
                name: lock.name.as_str().to_owned(),
            });
        }
        Reply::Refused => {
            let longest = span(machine.longest_lease());
            return Err(Error::invalid_argument(
                "lease",
                format!(
                    "this store grants leases of {longest:?} at most, not {:?}",
                    request.lease
                ),
            ));
        }
        _ => Acquire::Ended,
    })
}

/// How long a busy caller may sleep before asking again: until the hold's lease ends,
/// the quarantine ends, or the first waiter's place lapses, and within a third of its
/// own place when it waits.
#[must_use]
pub fn sleep_when_busy<A: Clone>(
    machine: &Machine<A>,
    request: &AcquireRequest,
    clock: u64,
) -> Duration {
    let place = request.wait.unwrap_or_default().place_kept_for;
    let until = match machine.holder() {
        Some(holder) => holder.expires,
        None if machine.is_held() => machine.readers().map(|r| r.expires).min().unwrap_or(0),
        None => machine.offered_until().unwrap_or_else(|| {
            machine
                .quarantined_until()
                .max(machine.first_waiter().map_or(0, |(_, until)| until))
        }),
    };
    let mut sleep = if until > clock {
        span(until - clock)
    } else {
        place
    };
    if request.waits() {
        sleep = sleep.min(place / 3);
    }
    sleep.max(Duration::from_millis(1))
}

/// The release of grant `grant` by `lock.owner`, with the lease a hold other grants keep
/// gets, as the machine's event.
#[must_use]
pub fn release<A>(lock: &LockRef, grant: RequestId, lease: Duration) -> Event<RequestId, Owner, A> {
    Event::Release {
        side: side(lock.kind),
        id: grant,
        owner: lock.owner.clone(),
        lease: ticks(lease),
    }
}

/// The renewal of `lock.owner`'s hold of `lock` with `lease`, as the machine's event.
#[must_use]
pub fn renew<A>(lock: &LockRef, lease: Duration) -> Event<RequestId, Owner, A> {
    Event::Renew {
        side: side(lock.kind),
        owner: lock.owner.clone(),
        lease: ticks(lease),
    }
}

/// An operator's force-release of `lock`'s side, as the machine's event.
#[must_use]
pub fn force_release<A>(lock: &LockRef) -> Event<RequestId, Owner, A> {
    Event::ForceRelease(side(lock.kind))
}

/// The answer to a release that the machine replied `reply` to.
#[must_use]
pub fn release_answer(reply: Reply<RequestId>) -> Release {
    match reply {
        Reply::Released => Release::Released,
        Reply::StillHeld(holds) => Release::StillHeld { holds },
        _ => Release::NotHeld,
    }
}

/// `lock.owner`'s holds of `lock`'s side as `machine` keeps them, and the lease left at
/// `clock`, if the side is held (by anyone: another owner's hold shows as 0 holds). A
/// read-write lock is held for reading while readers and no writer hold it.
#[must_use]
pub fn inspect<A: Clone>(
    machine: &Machine<A>,
    lock: &LockRef,
    clock: u64,
) -> Option<(u32, Duration)> {
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    if lock.kind == LockKind::Read {
        if machine.holder().is_some() {
            return None;
        }
        let expires = machine.readers().map(|r| r.expires).max()?;
        let holds = machine
            .readers()
            .find(|r| *r.owner == lock.owner)
            .map_or(0, |r| count(r.holds));
        return (expires > clock).then(|| (holds, span(expires - clock)));
    }
    let holder = machine.holder().filter(|holder| holder.expires > clock)?;
    let holds = if *holder.owner == lock.owner {
        count(holder.grants.len())
    } else {
        0
    };
    Some((holds, span(holder.expires - clock)))
}

/// Adds what `machine` knows to `info` at `clock`: its holder (or readers), how many
/// wait, and the last token; `read_write`: the name is a read-write lock's, whose holder
/// writes. Whether the lock is held.
pub fn describe<A: Clone>(
    machine: &Machine<A>,
    (clock, read_write): (u64, bool),
    info: &mut LockInfo,
) -> bool {
    info.fencing_token = Some(machine.last_token()).filter(|token| *token > 0);
    info.waiting = machine.waiting();
    let Some(holder) = machine.holder().filter(|holder| holder.expires > clock) else {
        let readers: Vec<_> = machine.readers().filter(|r| r.expires > clock).collect();
        let Some(expires) = readers.iter().map(|r| r.expires).max() else {
            return false;
        };
        info.held_as = HeldAs::Read;
        info.lease_left = Some(span(expires - clock));
        for reader in readers {
            let holds = u32::try_from(reader.holds).unwrap_or(u32::MAX);
            let mut shown = HolderInfo::new(reader.owner.as_str(), holds);
            shown.lease_left = Some(span(reader.expires - clock));
            info.holders.push(shown);
        }
        return true;
    };
    info.held_as = if read_write {
        HeldAs::Write
    } else {
        HeldAs::Exclusive
    };
    info.lease_left = Some(span(holder.expires - clock));
    let holds = u32::try_from(holder.grants.len()).unwrap_or(u32::MAX);
    let mut shown = HolderInfo::new(holder.owner.as_str(), holds);
    shown.lease_left = info.lease_left;
    let held_for = span(clock.saturating_sub(holder.since));
    shown.since = SystemTime::now().checked_sub(held_for);
    info.holders.push(shown);
    true
}
