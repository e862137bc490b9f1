//! [`Backend`] for the in-memory store: the mutex, the fair lock and both sides of the
//! read-write lock.

use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::kinds::{
    acquire_exclusive, acquire_fair, acquire_read, acquire_write, release_exclusive, release_read,
    release_write, writer_field,
};
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
            .introspection(true)
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

    fn introspection(&self) -> Option<&dyn crate::Introspect> {
        Some(self)
    }

    /// Wake-ups here are first-come-first-served already (one waiter per release, in
    /// arrival order), so a starving attempt needs no reservation and is treated as any other.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let now = Instant::now();
        let mut store = self.store_for(&lock.name, Object::Lock)?;
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
            LockKind::Mutex => acquire_exclusive(&mut store, lock, request, now),
        };
        if matches!(reply, Acquire::Acquired { .. }) {
            let kept = (now, request.retry_window);
            store.remember(name, request.id, Answer::Granted(reply), kept);
        }
        Ok(reply)
    }

    async fn cancel_wait(
        &self,
        lock: &LockRef,
        _acquisition: &AcquireRequest,
    ) -> Result<(), Error> {
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
                LockKind::Mutex | LockKind::Fair => {
                    release_exclusive(&mut store, lock, &request, now)
                }
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
                    LockKind::Mutex | LockKind::Fair => entry.count(owner),
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
        let mut store = self.store_for(&lock.name, Object::Lock)?;
        Ok(match store.live(lock.name.as_str(), now) {
            Some(entry) => {
                let (field, mode) = match lock.kind {
                    LockKind::Read => (lock.owner.as_str().to_owned(), Some(Mode::Read)),
                    LockKind::Write => (writer_field(&lock.owner), Some(Mode::Write)),
                    LockKind::Mutex | LockKind::Fair => (lock.owner.as_str().to_owned(), None),
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
            let mut store = self.store_for(&lock.name, Object::Lock)?;
            let wanted = match lock.kind {
                LockKind::Read => Some(Mode::Read),
                LockKind::Write => Some(Mode::Write),
                LockKind::Mutex | LockKind::Fair => None,
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
                    LockKind::Mutex => Some((channel::mutex(&lock.name), Wake::One)),
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
