//! [`Backend`] for the in-memory store: the mutex, the fair lock and both sides of the
//! read-write lock.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::handover::Served;
use super::kinds::{acquire_read, acquire_write, release_read, release_write, writer_field};
use super::{Answer, MemoryBackend, Mode, Object, channel};
use crate::Error;
use crate::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LatchBackend, LockKind, LockRef,
    LockState, Release, ReleaseRequest, Renewal, SemaphoreBackend,
};
use crate::notify::{Listener, Wake};

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
            .hands_over(true)
            .introspection(true)
            .max_lease(self.store().max_lease)
    }

    fn latches(&self) -> &dyn LatchBackend {
        self
    }

    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self
    }

    fn expirable_semaphores(&self) -> &dyn crate::backend::ExpirableSemaphoreBackend {
        self
    }

    fn introspection(&self) -> &dyn crate::Introspect {
        self
    }

    /// Wake-ups here are first-come-first-served already (one waiter per release, in
    /// arrival order), so a starving attempt needs no reservation and is treated as any other.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let now = Instant::now();
        let mut store = self.store_for(&lock.name, Object::Lock)?;
        store.check_lease(request.lease)?;
        if matches!(lock.kind, LockKind::Mutex | LockKind::Fair) {
            return store.acquire_exclusive(lock, request, now);
        }
        let name = lock.name.as_str();
        let answered = store.answered(name, request.id, now);
        // A copy of a request whose grant already ended (or was undone before it came,
        // or whose acquisition was cancelled) grants nothing: nobody would release it.
        if let Some(Answer::Ended(_)) = answered {
            return Ok(Acquire::Ended);
        }
        // After a failover, nothing is granted, found again or re-entered until every
        // hold the failover may have lost has run out its lease.
        if let Some(left) = store.quarantined(now) {
            return Ok(Acquire::Busy {
                ttl: Some(left),
                reserved: false,
            });
        }
        // Found again (a retry, a take-up, or a waiter's attempt after a late copy of
        // an earlier one was granted): the grant back, with its lease re-armed, if it
        // lives; nothing if it ended (the protocol's rules).
        if let Some(Answer::Granted(grant) | Answer::Handed(grant)) = answered
            && let Some(reply) = store.found_again(lock, request, grant, now)
        {
            return Ok(reply);
        }
        let reply = if lock.kind == LockKind::Read {
            acquire_read(&mut store, lock, request, now)
        } else {
            let reply = match acquire_write(&mut store, lock, request, now) {
                Ok(reply) => reply,
                // The refusal of a reader's write attempt ends its acquisition: a late
                // copy of the attempt, after the reads ended, must grant nobody.
                Err(refused) => {
                    store.unregister_waiter(name, request.id);
                    let ended = (now, request.retry_window.saturating_mul(2));
                    store.remember(name, request.id, Answer::Ended(Release::NotHeld), ended);
                    return Err(refused);
                }
            };
            waiting_to_be_handed(&mut store, lock, request, reply, now)
        };
        if matches!(reply, Acquire::Acquired { .. }) {
            // Twice the window, as an end: a copy that comes after the grant lapsed
            // (later than the request's own retries could) must find it, not take the
            // lock afresh for nobody.
            let kept = (now, request.retry_window.saturating_mul(2));
            store.remember(name, request.id, Answer::Granted(reply), kept);
        }
        Ok(reply)
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let now = Instant::now();
        let listening = self.listening(lock);
        let served = {
            let mut store = self.store();
            match lock.kind {
                LockKind::Mutex | LockKind::Fair => {
                    store.count_others(lock, listening, now);
                    Some(store.cancel_exclusive(lock, acquisition.id, now))
                }
                // A writer's lock, free after the cancellation, goes to the next writer.
                LockKind::Write => store
                    .give_up(lock, acquisition, now)
                    .then(|| Self::serve(&mut store, lock, now)),
                // A reader has no place to give up; its id still ends.
                LockKind::Read => {
                    store.give_up(lock, acquisition, now);
                    None
                }
            }
        };
        if let Some(served) = served {
            self.announce(served);
        }
        Ok(())
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        self.store().raise_token(&lock.name, token);
        Ok(())
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let now = Instant::now();
        let listening = self.listening(lock);
        let (outcome, wakeup) = {
            let mut store = self.store();
            let name = lock.name.as_str();
            let counts_down = store.planted(crate::protocol::Defect::N2ReleaseCountsDown);
            match store.answered(name, request.grant, now) {
                Some(Answer::Ended(answer)) if !counts_down => return Ok(answer),
                Some(Answer::Handed(_)) => store.hand_overs.released_before_taken_up += 1,
                _ => {}
            }
            let (outcome, served) = match lock.kind {
                LockKind::Mutex | LockKind::Fair => {
                    store.count_others(lock, listening, now);
                    store.release_exclusive(lock, &request, now)
                }
                LockKind::Read | LockKind::Write => {
                    let (outcome, wakeup) = if lock.kind == LockKind::Read {
                        release_read(&mut store, lock, request.grant, now)
                    } else {
                        release_write(&mut store, lock, &request, now)
                    };
                    let handed = if outcome == Release::Released {
                        store.hand_over(&lock.name, now)
                    } else {
                        None
                    };
                    (
                        outcome,
                        handed.map_or(Served::Woken(wakeup), Served::Handed),
                    )
                }
            };
            // Kept for twice the window: a retry of the release gets its first answer,
            // and a copy of the grant's acquire request that comes later than its own
            // retries could still finds the grant ended.
            let kept = (now, request.retry_window.saturating_mul(2));
            store.remember(name, request.grant, Answer::Ended(outcome), kept);
            (outcome, served)
        };
        self.announce(wakeup);
        Ok(outcome)
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let now = Instant::now();
        let mut store = self.store();
        locks
            .iter()
            .map(|lock| {
                if matches!(lock.kind, LockKind::Mutex | LockKind::Fair) {
                    return store.renew_exclusive(lock, lease, now).map_or(
                        Renewal::Gone,
                        |origin| Renewal::Renewed {
                            origin: Some(origin),
                        },
                    );
                }
                let owner = lock.owner.as_str();
                let Some(entry) = store.live(lock.name.as_str(), now) else {
                    return Renewal::Gone;
                };
                let field = if lock.kind == LockKind::Write {
                    writer_field(&lock.owner)
                } else {
                    entry.live_reads(owner, now);
                    owner.to_owned()
                };
                let Some(origin) = entry.fields.get(&field).map(|held| held.origin) else {
                    return Renewal::Gone;
                };
                if let Some(held) = entry.fields.get_mut(owner)
                    && lock.kind == LockKind::Read
                {
                    // Extend only: a hold with a longer lease of its own keeps it.
                    for expires in held.grants.iter_mut().filter_map(|g| g.expires.as_mut()) {
                        *expires = (*expires).max(now + lease);
                    }
                }
                entry.arm(now, lease);
                Renewal::Renewed {
                    origin: Some(origin),
                }
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let now = Instant::now();
        let mut store = self.store_for(&lock.name, Object::Lock)?;
        if matches!(lock.kind, LockKind::Mutex | LockKind::Fair) {
            return Ok(store
                .inspect_exclusive(lock, now)
                .map_or_else(LockState::default, |(holds, left)| {
                    LockState::new(true, holds, Some(left))
                }));
        }
        Ok(match store.live(lock.name.as_str(), now) {
            Some(entry) => {
                let (field, mode) = if lock.kind == LockKind::Read {
                    (lock.owner.as_str().to_owned(), Mode::Read)
                } else {
                    (writer_field(&lock.owner), Mode::Write)
                };
                let locked = entry.mode == Some(mode);
                LockState::new(locked, entry.count(&field), Some(entry.expires - now))
            }
            None => LockState::default(),
        })
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let now = Instant::now();
        let name = lock.name.as_str();
        let (released, wakeup) = {
            let mut store = self.store_for(&lock.name, Object::Lock)?;
            if matches!(lock.kind, LockKind::Mutex | LockKind::Fair) {
                store.force_release_exclusive(lock, now)
            } else {
                let wanted = Some(if lock.kind == LockKind::Read {
                    Mode::Read
                } else {
                    Mode::Write
                });
                if store.live(name, now).is_some_and(|e| e.mode == wanted) {
                    store.locks.remove(name);
                    (true, Some((channel::read_write(&lock.name), Wake::All)))
                } else {
                    (false, None)
                }
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
    /// How many listen on a mutex's channel now (see `Store::count_others`); other kinds
    /// count none, and build no channel name on their release path.
    fn listening(&self, lock: &LockRef) -> usize {
        if lock.kind != LockKind::Mutex {
            return 0;
        }
        self.subscriptions.listeners(&channel::mutex(&lock.name))
    }
}

/// A writer that finds the lock busy and waits to be woken alone is registered to be
/// handed it on release, and told to ask again within a third of its
/// place (a hold handed to a waiter that stopped asking is free again after one place);
/// one that got the lock leaves the waiters.
fn waiting_to_be_handed(
    store: &mut super::Store,
    lock: &LockRef,
    request: AcquireRequest,
    reply: Acquire,
    now: Instant,
) -> Acquire {
    match reply {
        Acquire::Busy { ttl, reserved } if request.waits_to_be_woken_alone() => {
            store.register_waiter(lock, request, now);
            let again_within = request
                .wait
                .map_or(Duration::MAX, |wait| wait.place_kept_for / 3)
                .max(Duration::from_millis(1));
            Acquire::Busy {
                ttl: Some(ttl.map_or(again_within, |ttl| ttl.min(again_within))),
                reserved,
            }
        }
        Acquire::Acquired { .. } => {
            store.unregister_waiter(lock.name.as_str(), request.id);
            reply
        }
        Acquire::Busy { .. } | Acquire::Ended => reply,
    }
}
