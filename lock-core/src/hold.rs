//! The client-side view of one hold: its local validity and whether it was lost.
//!
//! All guards of one owner on one lock share a [`Hold`] (reentrant acquisitions add guards
//! to it). Its validity is a [`LeaseClock`]: the scripts only extend expiries, so the
//! deadline only moves forward.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::lease::LeaseClock;
use crate::{LockRef, LostReason, metrics};

#[derive(Debug, Default)]
struct Counts {
    guards: usize,
    renewing: usize,
    /// Grants the server counted before the one that created this hold whose replies
    /// have not arrived yet (concurrent acquisitions by one owner can be answered out of
    /// order): each joins this hold when it comes.
    unclaimed: u32,
    /// Server holds of this owner that no live guard and no request in flight accounts
    /// for: those of guards this client already gave up as lost, which send no release.
    /// The hold's last release releases them too.
    adopted: u32,
}

/// One owner's hold on one lock, shared by its guards.
#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) lock: LockRef,
    /// The fencing token of the acquisition that created the hold (reentries keep it).
    pub(crate) token: Option<u64>,
    /// The owner's hold count after the grant that created this hold.
    born_holds: u32,
    pub(crate) lease: LeaseClock,
    counts: Mutex<Counts>,
}

impl Hold {
    /// A hold created by a grant that left the owner `holds` holds on the server, while
    /// `in_flight` other acquisitions of the owner had no answer yet: the holds that
    /// neither they nor this grant account for are adopted.
    pub(crate) fn new(
        lock: LockRef,
        (holds, in_flight): (u32, u32),
        sent: Instant,
        valid_for: Duration,
        token: Option<u64>,
    ) -> Self {
        let earlier = holds.saturating_sub(1);
        let unclaimed = earlier.min(in_flight);
        let lost_lock = lock.clone();
        let on_lost = Box::new(move |reason| {
            metrics::lost(lost_lock.kind, reason);
            crate::events::hold_lost(&lost_lock, reason);
        });
        Self {
            lock,
            token,
            born_holds: holds,
            lease: LeaseClock::new(sent, valid_for, on_lost),
            counts: Mutex::new(Counts {
                unclaimed,
                adopted: earlier - unclaimed,
                ..Counts::default()
            }),
        }
    }

    /// Whether a grant that left the owner `holds` holds belongs to this live hold
    /// (a reentry, or an earlier concurrent acquisition answered late), rather than
    /// starting a new hold after this one was lost on the server. Claims the grant.
    pub(crate) fn claims(&self, holds: u32) -> bool {
        let mut counts = self.counts();
        if holds < self.born_holds && counts.unclaimed > 0 {
            counts.unclaimed -= 1;
            return true;
        }
        // A fresh grant (1) that nothing explains means the server lost this hold.
        holds > 1
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

    /// How many adopted holds the hold's last release will give back.
    pub(crate) fn adopted(&self) -> u32 {
        self.counts().adopted
    }

    /// The adopted holds, handed out once (to the hold's last release).
    pub(crate) fn take_adopted(&self) -> u32 {
        std::mem::take(&mut self.counts().adopted)
    }

    /// Adds a guard; returns whether the hold now needs renewal and did not before.
    pub(crate) fn add_guard(&self, renew: bool) -> bool {
        let mut c = self.counts();
        c.guards += 1;
        if renew {
            c.renewing += 1;
            c.renewing == 1
        } else {
            false
        }
    }

    /// Removes a guard; returns the number of guards left.
    pub(crate) fn remove_guard(&self, renew: bool) -> usize {
        let mut c = self.counts();
        c.guards = c.guards.saturating_sub(1);
        if renew {
            c.renewing = c.renewing.saturating_sub(1);
        }
        c.guards
    }

    /// How many guards share the hold.
    pub(crate) fn guards(&self) -> usize {
        self.counts().guards
    }

    pub(crate) fn needs_renewal(&self) -> bool {
        self.counts().renewing > 0 && !self.lease.is_marked_lost()
    }
}
