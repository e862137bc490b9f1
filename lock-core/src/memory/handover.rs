//! Hand-over of a read-write lock to its next writer on release, as the networked
//! backends make it (mutexes and fair locks hand over by the protocol's machine, see
//! the exclusive module): a release that frees the lock makes the first waiting writer
//! that still keeps its place the holder, with a hold that lasts that place or its
//! lease, whichever is shorter, and tells it with the grant ([`Handed`]); the
//! acquisition's next attempt, under its id, takes the hold up with its full lease. A
//! waiter that gave up gives the hold back at once, and one that stopped asking loses it
//! when its place lapses.

use std::collections::VecDeque;

use tokio::time::Instant;

use super::kinds::{granted, writer_field};
use super::{Answer, Entry, Grant, Mode, Store, channel};
use crate::backend::{Acquire, AcquireRequest, LockKind, LockRef, Release, RequestId};
use crate::notify::{Handed, Wake};
use crate::protocol::Defect;
use crate::{LockName, Owner};

/// A writer that waits to be handed the lock, as its latest attempt left it.
#[derive(Debug, Clone)]
pub(super) struct Waiter {
    owner: Owner,
    request: AcquireRequest,
    /// When its latest attempt ran: it keeps its place a place's time from then.
    asked: Instant,
}

impl Waiter {
    /// The acquisition `request` of `lock`, whose latest attempt ran `asked`.
    pub(super) fn new(lock: &LockRef, request: AcquireRequest, asked: Instant) -> Self {
        Self {
            owner: lock.owner.clone(),
            request,
            asked,
        }
    }

    /// Until when it keeps its place: a place's time from its latest attempt.
    pub(super) fn deadline(&self) -> Instant {
        self.asked + self.request.wait.unwrap_or_default().place_kept_for
    }
}

/// A read-write lock's waiting writers, first come first.
pub(super) type Waiters = VecDeque<Waiter>;

/// What a hand-over tells, and whom.
pub(super) struct Notice {
    pub(super) channel: String,
    /// Whom on the channel it wakes: one listener, or every one where other waiters of
    /// the lock listen beside the one it was handed to (a read-write lock's readers).
    pub(super) wake: Wake,
    pub(super) handed: Handed,
    /// The owner handed the lock (the notice goes to its client).
    pub(super) owner: Owner,
    /// The lock's name.
    pub(super) name: String,
}

/// How a free lock's next waiter learns of it.
pub(super) enum Served {
    /// It was handed the lock.
    Handed(Notice),
    /// It is woken to ask (nobody, when nobody waits).
    Woken(super::Wakeup),
}

/// How long a hand-over's notice takes to reach the client of the owner handed the
/// lock (see [`MemoryBackend::delay_hand_over_notices`](super::MemoryBackend::delay_hand_over_notices)).
/// It is called with the lock's name, the owner and the notice, when the hand-over is
/// made.
pub type NoticeDelay =
    std::sync::Arc<dyn Fn(&str, &Owner, &Handed) -> std::time::Duration + Send + Sync>;

/// How many hand-overs a store made, and what became of them (for the simulation's
/// report and for tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HandOvers {
    /// Holds handed over on release (or on a waiter's giving up).
    pub made: u64,
    /// Of those, holds of fair locks.
    pub made_of_fair_locks: u64,
    /// Of those, write holds of read-write locks (the rest are of mutexes).
    pub made_of_write_locks: u64,
    /// Handed holds their acquisition's attempt took up.
    pub taken_up: u64,
    /// Handed holds given back by a waiter that gave up before taking them up.
    pub given_back: u64,
    /// Handed holds released before they were taken up: their waiter held the lock
    /// from the notification on, and let it go before its take-up came.
    pub released_before_taken_up: u64,
}

impl Store {
    /// Registers a waiting acquisition of `lock`, or refreshes it where it stands.
    pub(super) fn register_waiter(
        &mut self,
        lock: &LockRef,
        request: AcquireRequest,
        now: Instant,
    ) {
        let waiters = self
            .waiters
            .entry(lock.name.as_str().to_owned())
            .or_default();
        let waiter = Waiter::new(lock, request, now);
        match waiters.iter_mut().find(|w| w.request.id == request.id) {
            Some(registered) => *registered = waiter,
            None => waiters.push_back(waiter),
        }
    }

    /// Forgets the waiting acquisition `id` of `name`; returns whether it was registered.
    pub(super) fn unregister_waiter(&mut self, name: &str, id: RequestId) -> bool {
        let Some(waiters) = self.waiters.get_mut(name) else {
            return false;
        };
        let before = waiters.len();
        waiters.retain(|w| w.request.id != id);
        let removed = waiters.len() < before;
        if waiters.is_empty() {
            self.waiters.remove(name);
        }
        removed
    }

    /// Hands the free read-write lock `name` (released by a writer or by the last
    /// reader) to its first waiting writer that still keeps its place; returns the
    /// notice to give, or `None` when nobody is handed it (then a plain wake-up goes
    /// out).
    pub(super) fn hand_over(&mut self, name: &LockName, now: Instant) -> Option<Notice> {
        let key = name.as_str();
        if self.quarantined(now).is_some() {
            // Nothing is granted during a failover's quarantine: the waiters are woken,
            // and wait it out.
            return None;
        }
        if self.live(key, now).is_some() {
            // Still held (a read lock's other readers, a writer's own read holds).
            return None;
        }
        let waiter = loop {
            let waiters = self.waiters.get_mut(key)?;
            let Some(waiter) = waiters.pop_front() else {
                self.waiters.remove(key);
                return None;
            };
            if self.keeps_its_place(key, &waiter, now) {
                break waiter;
            }
        };
        self.hand_overs.made_of_write_locks += 1;
        self.hand_to(key, channel::read_write(name), waiter, now)
    }

    /// Whether `waiter` of lock `key` still keeps its place and waits (no attempt of its
    /// acquisition was answered with a grant, or ended).
    fn keeps_its_place(&self, key: &str, waiter: &Waiter, now: Instant) -> bool {
        waiter.request.wait.is_some()
            && waiter.deadline() > now
            && self.answered(key, waiter.request.id, now).is_none()
    }

    /// Makes `waiter` the writer of the free lock `key`, with a hold that lasts its
    /// place or its lease, and returns the notice for the readers' and writers' channel
    /// (every waiter listens there: each is woken, and the one handed the lock holds).
    fn hand_to(
        &mut self,
        key: &str,
        channel: String,
        waiter: Waiter,
        now: Instant,
    ) -> Option<Notice> {
        let request = waiter.request;
        let place = request.wait.map(|w| w.place_kept_for)?;
        let grant = Grant {
            id: request.id,
            expires: None,
        };
        let mut entry = Entry::new(Some(Mode::Write), now);
        entry.add(&writer_field(&waiter.owner), grant);
        // The place, or the waiter's lease if shorter: a holder that dies is replaced
        // within its own lease, handed or not.
        let lasts = if self.planted(Defect::HandedHoldLastsThePlace) {
            place
        } else {
            place.min(request.lease)
        };
        entry.arm(now, lasts);
        self.locks.insert(key.to_owned(), entry);
        let token = self.token(key, true, request.fencing);
        let reply = granted(1, token, request.id);
        // Remembered past the place: a take-up that comes after the hold lapsed must
        // find it ended, not ask afresh under an id the store already granted.
        let kept = place.saturating_add(request.retry_window.saturating_mul(2));
        self.remember(key, request.id, Answer::Handed(reply), (now, kept));
        let attempt = request.wait.map_or(0, |w| w.attempt);
        self.hand_overs.made += 1;
        Some(Notice {
            channel,
            wake: Wake::All,
            handed: Handed::new(request.id, attempt, token),
            owner: waiter.owner,
            name: key.to_owned(),
        })
    }

    /// An attempt of an acquisition granted (or handed) the lock before finds its grant:
    /// while it lives, the hold gets the acquisition's lease (never shortened), and the
    /// first answer is given again, a handed grant's as any other's from now on.
    /// [`Acquire::Ended`] when the grant is gone (released, its place or lease lapsed, or
    /// force-released): an acquisition is granted at most once, so its id is over.
    /// `None` only with the defect R1 planted back: the attempt is to ask afresh.
    pub(super) fn found_again(
        &mut self,
        lock: &LockRef,
        request: AcquireRequest,
        grant: Acquire,
        now: Instant,
    ) -> Option<Acquire> {
        let name = lock.name.as_str();
        let field = field_of(lock);
        let alive = self.live(name, now).is_some_and(|entry| {
            entry.fields.get(&field).is_some_and(|held| {
                held.grants.iter().any(|grant| {
                    grant.id == request.id && grant.expires.is_none_or(|ends| ends > now)
                })
            })
        });
        if !alive {
            if self.planted(Defect::R1TakeUpGrantsAfresh)
                && let Some(Answer::Handed(_)) = self.answered(name, request.id, now)
            {
                self.answers.remove(&(name.to_owned(), request.id));
                return None;
            }
            let ended = (now, request.retry_window.saturating_mul(2));
            self.remember(name, request.id, Answer::Ended(Release::NotHeld), ended);
            return Some(Acquire::Ended);
        }
        if let Some(entry) = self.live(name, now) {
            entry.arm(now, request.lease);
        }
        if let Some(Answer::Handed(_)) = self.answered(name, request.id, now) {
            self.hand_overs.taken_up += 1;
        }
        let kept = (now, request.retry_window.saturating_mul(2));
        self.remember(name, request.id, Answer::Granted(grant), kept);
        Some(grant)
    }

    /// A waiting acquisition gives up, so its client holds nothing of it: it leaves the
    /// waiters, a grant it never learnt of (handed to it, or granted to a late copy of
    /// one of its attempts) ends, and so does its id: a late copy of one of its attempts
    /// grants nothing (review 3, R2). Returns whether the lock is now free.
    pub(super) fn give_up(
        &mut self,
        lock: &LockRef,
        request: &AcquireRequest,
        now: Instant,
    ) -> bool {
        let name = lock.name.as_str();
        self.unregister_waiter(name, request.id);
        let answered = self.answered(name, request.id, now);
        if self.planted(Defect::R2CancelLeavesNoEnd) && !matches!(answered, Some(Answer::Handed(_)))
        {
            return self.live(name, now).is_none();
        }
        if let Some(Answer::Handed(_) | Answer::Granted(_)) = answered {
            // Its own grant ends: the owner's other acquisitions may have joined the
            // hold since, and keep theirs.
            let field = field_of(lock);
            let ended = self.live(name, now).and_then(|entry| {
                let left = entry.end(&field, request.id, now)?;
                if entry.mode == Some(Mode::Write) && left == 0 && !entry.fields.is_empty() {
                    // The writer's own read holds keep the lock, for reading.
                    entry.mode = Some(Mode::Read);
                }
                Some((left, entry.fields.is_empty()))
            });
            if let Some((_, free)) = ended {
                if free {
                    self.locks.remove(name);
                }
                if matches!(answered, Some(Answer::Handed(_))) {
                    self.hand_overs.given_back += 1;
                }
            }
        }
        let ended = (now, request.retry_window.saturating_mul(2));
        self.remember(name, request.id, Answer::Ended(Release::NotHeld), ended);
        self.live(name, now).is_none()
    }
}

/// The field `lock`'s owner holds it under: `owner:write` for a writer.
fn field_of(lock: &LockRef) -> String {
    if lock.kind == LockKind::Write {
        writer_field(&lock.owner)
    } else {
        lock.owner.as_str().to_owned()
    }
}
