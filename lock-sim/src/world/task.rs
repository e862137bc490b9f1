//! One simulated task: draws operations and runs them through a client, noting what it
//! holds in the ledger.

use std::sync::Arc;
use std::time::Duration;

use super::ledger::{Held, Ledger};
use super::workload::{Faults, Op, Workload};
use lock_core::memory::MemoryBackend;
use lock_core::{Guard, Holder, Lock, Locks};
use tokio::time::{Instant, timeout};

use super::{
    BEYOND_WAIT, CONTENDED, EXPIRABLE, LEASE, LONGEST_LEASE, MIXED_NAMES, MUTEX_PICKS, OPERATIONS,
    PERMITS, RW_NAME, SEMAPHORE, SHARED_NAME,
};
use crate::faults::{FaultyLink, Network};
use crate::rng::Rng;

/// How an operation waits.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    Try,
    Bounded(Duration),
    /// Waits long, but its future is dropped after this.
    Cancelled(Duration),
}

/// One task's view of the run.
pub(super) struct Task {
    pub(super) index: usize,
    pub(super) workload: Arc<Workload>,
    pub(super) locks: Locks,
    pub(super) link: FaultyLink,
    pub(super) network: Arc<Network>,
    pub(super) ledger: Arc<Ledger>,
    pub(super) store: Arc<MemoryBackend>,
}

impl Task {
    pub(super) fn draw<T>(&self, draw: impl FnOnce(&mut Rng) -> T) -> T {
        self.network.draw(draw)
    }

    pub(super) fn note(&self, event: &str) {
        self.network.trace.note(&format!(
            "task {} (client {}): {event}",
            self.index, self.link.client
        ));
    }

    pub(super) async fn run(self) {
        for _ in 0..OPERATIONS {
            let op = self.draw(|rng| rng.pick(&self.workload.ops));
            let cancels = self.workload.faults == Faults::All;
            let wait = self.draw(|rng| match rng.below(4) {
                0 => Wait::Try,
                3 if cancels => Wait::Cancelled(rng.millis_below(400)),
                _ => Wait::Bounded(rng.millis_below(500)),
            });
            self.note(&format!("begins {op:?} ({wait:?})"));
            match op {
                Op::Mutex | Op::Fair | Op::Read | Op::Write => self.lock_once(op, wait).await,
                Op::Reenter => self.reenter(wait, false).await,
                Op::ReenterSame => self.reenter(wait, true).await,
                Op::Permits => self.permits(wait).await,
                Op::Leased => self.leased(wait).await,
                Op::Beyond => self.beyond().await,
            }
            self.ledger.check(&self.store);
            let pause = self.draw(|rng| rng.millis_below(60));
            crate::nap(pause).await;
        }
    }

    pub(super) fn handle(&self, op: Op, name: &'static str, holder: Option<&Holder>) -> Lock {
        let lock = match op {
            Op::Fair => self.locks.fair_mutex(name),
            Op::Read => self.locks.rw_lock(name).reader(),
            Op::Write => self.locks.rw_lock(name).writer(),
            _ => self.locks.mutex(name),
        };
        match holder {
            Some(holder) => lock.with_holder(holder.clone()),
            None => lock,
        }
    }

    /// Takes `lock` as `wait` says, with a caller's lease now and then.
    pub(super) async fn take(&self, lock: &Lock, name: &'static str, wait: Wait) -> Option<Guard> {
        let lease = self.draw(|rng| {
            rng.chance(20).then(|| {
                LEASE / 3
                    + rng.millis_below((LONGEST_LEASE.saturating_sub(LEASE / 3)).as_millis() as u64)
            })
        });
        self.ledger.wait(self.index, name);
        let taken = match wait {
            Wait::Try => lock
                .try_lock_for(Duration::ZERO, lease)
                .await
                .ok()
                .flatten(),
            Wait::Bounded(wait) => lock.try_lock_for(wait, lease).await.ok().flatten(),
            Wait::Cancelled(after) => {
                let long = lock.try_lock_for(Duration::from_secs(2), lease);
                timeout(after, long)
                    .await
                    .ok()
                    .and_then(|r| r.ok().flatten())
            }
        };
        self.ledger.waited(self.index);
        taken
    }

    pub(super) async fn lock_once(&self, op: Op, wait: Wait) {
        let name = match op {
            Op::Read | Op::Write => RW_NAME,
            Op::Fair => self.draw(|rng| rng.pick(&MIXED_NAMES)),
            _ => self.draw(|rng| rng.pick(&MUTEX_PICKS)),
        };
        let lock = self.handle(op, name, None);
        let Some(guard) = self.take(&lock, name, wait).await else {
            self.note(&format!("{op:?} {name}: not taken ({wait:?})"));
            return;
        };
        self.note(&format!("{op:?} {name}: taken"));
        let id = self.ledger.insert(name, Held::Guard(guard));
        self.ledger.check(&self.store);
        self.hold().await;
        self.give_back(id, name).await;
    }

    /// Locks the shared mutex again and again, as a service's workers do, beside the
    /// client of another library (see the foreign module): a release nearly always
    /// finds a waiter of ours registered.
    pub(super) async fn contend(self) {
        for _ in 0..OPERATIONS * 3 {
            let lock = self.locks.mutex(SHARED_NAME);
            if let Some(guard) = self
                .take(&lock, SHARED_NAME, Wait::Bounded(CONTENDED))
                .await
            {
                self.note(&format!("{SHARED_NAME}: taken"));
                let id = self.ledger.insert(SHARED_NAME, Held::Guard(guard));
                self.ledger.check(&self.store);
                let held_for = self.draw(|rng| rng.millis_below(20));
                crate::nap(held_for).await;
                self.give_back(id, SHARED_NAME).await;
            }
            let pause = self.draw(|rng| rng.millis_below(10));
            crate::nap(pause).await;
        }
    }

    /// A holder locks one name through the fair and the plain handle (in either order),
    /// or twice through one of them (`same`), then releases the two guards in either
    /// order.
    pub(super) async fn reenter(&self, wait: Wait, same: bool) {
        let name = self.draw(|rng| rng.pick(&MIXED_NAMES));
        let holder = Holder::new(&format!("t{}", self.index)).ok();
        let (first, second) = self.draw(|rng| match (same, rng.chance(50)) {
            (false, true) => (Op::Fair, Op::Mutex),
            (false, false) => (Op::Mutex, Op::Fair),
            (true, true) => (Op::Fair, Op::Fair),
            (true, false) => (Op::Mutex, Op::Mutex),
        });
        let outer = self.handle(first, name, holder.as_ref());
        let Some(guard) = self.take(&outer, name, wait).await else {
            self.note(&format!("reenter {name}: not taken"));
            return;
        };
        let outer_id = self.ledger.insert(name, Held::Guard(guard));
        let inner = self.handle(second, name, holder.as_ref());
        let inner_id = self
            .take(&inner, name, Wait::Bounded(LEASE))
            .await
            .map(|guard| self.ledger.insert(name, Held::Guard(guard)));
        self.note(&format!(
            "reenter {name}: {first:?} then {second:?} ({})",
            if inner_id.is_some() {
                "both"
            } else {
                "outer only"
            }
        ));
        self.ledger.check(&self.store);
        self.hold().await;
        let outer_first = self.draw(|rng| rng.chance(50));
        let order = match inner_id {
            Some(inner_id) if outer_first => vec![outer_id, inner_id],
            Some(inner_id) => vec![inner_id, outer_id],
            None => vec![outer_id],
        };
        for id in order {
            self.give_back(id, name).await;
            self.ledger.check(&self.store);
            let gap = self.draw(|rng| rng.millis_below(80));
            crate::nap(gap).await;
        }
    }

    pub(super) async fn permits(&self, wait: Wait) {
        let semaphore = self.locks.semaphore(SEMAPHORE);
        let taken = match wait {
            Wait::Try => semaphore.try_acquire(1).await.ok().flatten(),
            Wait::Bounded(wait) => semaphore.try_acquire_for(1, wait).await.ok().flatten(),
            Wait::Cancelled(after) => timeout(after, semaphore.acquire(1))
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permits) = taken else {
            self.note(&format!("permits: not taken ({wait:?})"));
            return;
        };
        self.note("permits: taken");
        let id = self.ledger.insert(SEMAPHORE, Held::Permits(permits));
        self.ledger.check(&self.store);
        self.hold().await;
        self.give_back(id, SEMAPHORE).await;
    }

    /// Asks for one permit more than exist, waiting long, and for one permit beside it:
    /// the big waiter may never be served, but must keep nobody else from the permits
    /// (review 2, N6). The one permit is checked by the liveness invariant.
    pub(super) async fn beyond(&self) {
        let semaphore = self.locks.semaphore(SEMAPHORE);
        let big = timeout(BEYOND_WAIT, semaphore.acquire(PERMITS + 1));
        let one = async {
            // The big waiter asks first, and has starved by the time this one comes.
            crate::nap(Duration::from_millis(50)).await;
            self.ledger.wait(self.index, SEMAPHORE);
            let one = semaphore.try_acquire_for(1, BEYOND_WAIT).await;
            self.ledger.waited(self.index);
            one.ok().flatten()
        };
        let (big, one) = tokio::join!(big, one);
        for (what, taken) in [("all", big.ok().and_then(Result::ok)), ("one", one)] {
            let Some(permits) = taken else {
                self.note(&format!("beyond: {what} not taken"));
                continue;
            };
            self.note(&format!("beyond: {what} taken"));
            let id = self.ledger.insert(SEMAPHORE, Held::Permits(permits));
            self.ledger.check(&self.store);
            self.give_back(id, SEMAPHORE).await;
        }
    }

    pub(super) async fn leased(&self, wait: Wait) {
        let semaphore = self.locks.expirable_semaphore(EXPIRABLE);
        let taken = match wait {
            Wait::Try => semaphore.try_acquire(1).await.ok().flatten(),
            Wait::Bounded(wait) => semaphore.acquire(1).wait(wait).await.ok(),
            Wait::Cancelled(after) => timeout(after, semaphore.acquire(1))
                .await
                .ok()
                .and_then(Result::ok),
        };
        let Some(permits) = taken else {
            self.note(&format!("leased permit: not taken ({wait:?})"));
            return;
        };
        self.note("leased permit: taken");
        let mut id = self.ledger.insert(EXPIRABLE, Held::Leased(permits));
        self.ledger.check(&self.store);
        self.hold().await;
        // Now and then, some renewals later, the holder sets another lease.
        if self.draw(|rng| rng.chance(40))
            && let Some(Held::Leased(mut permits)) = self.ledger.take(id)
        {
            let lease = self.draw(|rng| LEASE / 2 + rng.millis_below(900));
            let updated = permits.update_lease(lease).await;
            self.note(&format!(
                "leased permit: lease set to {lease:?}: {}",
                ok(&updated)
            ));
            id = self.ledger.insert(EXPIRABLE, Held::Leased(permits));
            self.ledger.check(&self.store);
            // Holds on for up to the new lease: that is what the lease was set for.
            let held_for = self.draw(|rng| rng.millis_below(lease.as_millis() as u64));
            crate::nap(held_for).await;
        }
        self.give_back(id, EXPIRABLE).await;
    }

    /// Holds for a while; now and then the client is paused past its lease (its
    /// requests, renewals included, wait).
    pub(super) async fn hold(&self) {
        let may_pause = self.workload.faults == Faults::All;
        let (held_for, paused) =
            self.draw(|rng| (rng.millis_below(150), may_pause && rng.chance(8)));
        if paused {
            let until = Instant::now() + LEASE * 2;
            self.note("the client pauses past its lease");
            self.link.pause_until(until);
        }
        crate::nap(held_for).await;
    }

    /// Releases what the ledger's entry `id` holds: awaited, dropped, or given up on
    /// while its release is on its way.
    pub(super) async fn give_back(&self, id: u64, name: &'static str) {
        let Some(held) = self.ledger.take(id) else {
            return;
        };
        let cancels = self.workload.faults == Faults::All;
        let how = self.draw(|rng| {
            if cancels {
                rng.below(3)
            } else {
                rng.below(2) * 2
            }
        });
        let cut = self.draw(|rng| rng.millis_below(40));
        let done = match (held, how) {
            (Held::Guard(guard), 0) => ok(&guard.unlock().await),
            (Held::Guard(guard), 1) => ok(&timeout(cut, guard.unlock()).await.unwrap_or(Ok(()))),
            (Held::Permits(permits), 0) => ok(&permits.release().await),
            (Held::Leased(permits), 0) => ok(&permits.release().await),
            (held, _) => {
                drop(held);
                "dropped"
            }
        };
        self.note(&format!("{name}: given back ({done})"));
    }
}

pub(super) fn ok<T, E>(result: &Result<T, E>) -> &'static str {
    if result.is_ok() { "ok" } else { "error" }
}
