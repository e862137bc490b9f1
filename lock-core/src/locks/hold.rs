//! The client-side view of one hold: its local validity and whether it was lost.
//!
//! All guards of one owner on one lock share a [`Hold`] (reentrant acquisitions add guards
//! to it), as the store counts them in one hold. Each guard ends its own grant; the hold
//! only carries what the grants share: the lease, renewed for all of them, and whether
//! it was lost. Its validity is a [`LeaseClock`]: the scripts only extend expiries, so
//! the deadline only moves forward.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::backend::RequestId;
use crate::locks::lease::LeaseClock;
use crate::{LockRef, LostReason, metrics};

#[derive(Debug, Default)]
struct Counts {
    guards: usize,
    renewing: usize,
}

/// One owner's hold on one lock, shared by its guards.
#[derive(Debug)]
pub(crate) struct Hold {
    /// The hold as the store counts it: a mutex and a fair lock of one owner share one.
    pub(crate) lock: LockRef,
    /// The fencing token of the acquisition that created the hold (reentries keep it).
    pub(crate) token: Option<u64>,
    /// The grant that began the hold in the store, when the backend tells.
    origin: Option<RequestId>,
    pub(crate) lease: LeaseClock,
    counts: Mutex<Counts>,
    /// Told when the last guard leaves: a take-up still waiting for its time has
    /// nothing left to take up.
    released: Notify,
}

impl Hold {
    /// The hold begun in the store by grant `origin`, granted by a request sent at `sent`.
    pub(crate) fn new(
        lock: LockRef,
        origin: Option<RequestId>,
        sent: Instant,
        valid_for: Duration,
        token: Option<u64>,
    ) -> Self {
        let lost_lock = lock.clone();
        let on_lost = Box::new(move |reason| {
            metrics::lost(lost_lock.kind, reason);
            crate::events::hold_lost(&lost_lock, reason);
        });
        Self {
            lock,
            token,
            origin,
            lease: LeaseClock::new(sent, valid_for, on_lost),
            counts: Mutex::new(Counts::default()),
            released: Notify::new(),
        }
    }

    /// Whether a grant that left the owner `holds` holds, in the store's hold begun by
    /// `origin`, belongs to this hold. A different origin means the store's hold this
    /// one stands for ended there (expired, or force-released) and a new one began.
    /// Without origins, a fresh grant (1) says the same.
    pub(crate) fn includes(&self, origin: Option<RequestId>, holds: u32) -> bool {
        match (self.origin, origin) {
            (Some(ours), Some(theirs)) => ours == theirs,
            _ => holds > 1,
        }
    }

    /// Records a successful request sent at `sent` that armed the lease for `valid_for`
    /// (lease minus drift).
    pub(crate) fn extend(&self, sent: Instant, valid_for: Duration) {
        self.lease.extend(sent, valid_for);
    }

    /// Marks the hold lost; returns whether this call did it.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        self.lease.mark_lost(reason)
    }

    /// Why the hold is lost, if it is; a passed deadline marks it lost now.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        self.lease.lost_reason()
    }

    /// Time left before the local deadline, or `None` once lost.
    pub(crate) fn valid_for(&self) -> Option<Duration> {
        self.lease.valid_for()
    }

    /// Resolves when the hold is lost (by a failed renewal or by its deadline passing).
    pub(crate) async fn lost(&self) -> LostReason {
        self.lease.lost().await
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a guard, one the watchdog renews when `renew`.
    pub(crate) fn add_guard(&self, renew: bool) {
        let mut c = self.counts();
        c.guards += 1;
        if renew {
            c.renewing += 1;
        }
    }

    /// Removes a guard; returns the number of guards left.
    pub(crate) fn remove_guard(&self, renew: bool) -> usize {
        let mut c = self.counts();
        c.guards = c.guards.saturating_sub(1);
        if renew {
            c.renewing = c.renewing.saturating_sub(1);
        }
        if c.guards == 0 {
            // A permit, kept for a waiter that comes later: a hold whose last guard
            // left is never joined again (the client forgets it).
            self.released.notify_one();
        }
        c.guards
    }

    /// Resolves once the last guard has left.
    pub(crate) async fn released(&self) {
        if self.guards() == 0 {
            return;
        }
        self.released.notified().await;
    }

    /// How many guards share the hold.
    pub(crate) fn guards(&self) -> usize {
        self.counts().guards
    }

    pub(crate) fn needs_renewal(&self) -> bool {
        self.counts().renewing > 0 && !self.lease.is_marked_lost()
    }
}
