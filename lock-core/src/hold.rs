//! The client-side view of one hold: its local validity and whether it was lost.
//!
//! All guards of one owner on one lock share a [`Hold`] (reentrant acquisitions add guards
//! to it). Its deadline is the latest `sent + lease - drift` over every request that
//! armed the lease on the server and succeeded, where `sent` is when the request was
//! *sent*: the server's expiry is never earlier (the scripts only extend expiries), so a
//! holder that stops hearing from the server, or is paused, gives the lock up first.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::{LockRef, LostReason, metrics};

#[derive(Debug, Clone, Copy)]
struct Status {
    deadline: Instant,
    lost: Option<LostReason>,
    last_sent: Instant,
}

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
    status: watch::Sender<Status>,
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
        Self {
            lock,
            token,
            born_holds: holds,
            status: watch::Sender::new(Status {
                deadline: sent + valid_for,
                lost: None,
                last_sent: sent,
            }),
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
        self.status.send_if_modified(|s| {
            if s.lost.is_some() {
                return false;
            }
            s.last_sent = s.last_sent.max(sent);
            let deadline = sent + valid_for;
            if deadline > s.deadline {
                s.deadline = deadline;
                true
            } else {
                false
            }
        });
    }

    /// Marks the hold lost; returns whether this call did it.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        let marked = self.status.send_if_modified(|s| {
            if s.lost.is_some() {
                false
            } else {
                s.lost = Some(reason);
                true
            }
        });
        if marked {
            metrics::lost(self.lock.kind, reason);
            crate::events::hold_lost(&self.lock, reason);
        }
        marked
    }

    /// Marks the hold lost if its deadline has passed.
    pub(crate) fn expire_if_due(&self) {
        self.lost_reason();
    }

    /// Why the hold is lost, if it is; a passed deadline marks it lost now.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        let s = *self.status.borrow();
        if s.lost.is_none() && Instant::now() >= s.deadline {
            self.mark_lost(LostReason::LeaseExpired);
        }
        self.status.borrow().lost
    }

    /// Time left before the local deadline, or `None` once lost.
    pub(crate) fn valid_for(&self) -> Option<Duration> {
        if self.lost_reason().is_some() {
            return None;
        }
        Some(
            self.status
                .borrow()
                .deadline
                .saturating_duration_since(Instant::now()),
        )
    }

    /// The local deadline (meaningless once lost).
    pub(crate) fn deadline(&self) -> Instant {
        self.status.borrow().deadline
    }

    pub(crate) fn last_sent(&self) -> Instant {
        self.status.borrow().last_sent
    }

    /// Resolves when the hold is lost (by a failed renewal or by its deadline passing).
    pub(crate) async fn lost(&self) -> LostReason {
        let mut rx = self.status.subscribe();
        loop {
            let s = *rx.borrow_and_update();
            if let Some(reason) = s.lost {
                return reason;
            }
            if Instant::now() >= s.deadline {
                self.mark_lost(LostReason::LeaseExpired);
                continue;
            }
            tokio::select! {
                changed = rx.changed() => {
                    // The sender lives as long as `self`; this cannot fail while borrowed.
                    if changed.is_err() {
                        return LostReason::OwnerGone;
                    }
                }
                () = tokio::time::sleep_until(s.deadline) => {}
            }
        }
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
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
        self.counts().renewing > 0 && self.status.borrow().lost.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockKind, LockName, Owner};

    fn hold(valid_for: Duration) -> Hold {
        let lock = LockRef::new(
            LockKind::Mutex,
            LockName::new("h").expect("name"),
            Owner::new("c", "h"),
        );
        Hold::new(lock, (1, 0), Instant::now(), valid_for, None)
    }

    #[tokio::test(start_paused = true)]
    async fn expires_at_its_deadline_even_without_news() {
        let h = hold(Duration::from_millis(100));
        assert!(h.lost_reason().is_none());
        let reason = h.lost().await;
        assert_eq!(reason, LostReason::LeaseExpired);
        assert!(h.valid_for().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn extension_moves_the_deadline_forward_only() {
        let h = hold(Duration::from_millis(100));
        let start = Instant::now();
        h.extend(start, Duration::from_millis(50));
        assert!(h.valid_for() > Some(Duration::from_millis(90)));
        h.extend(start, Duration::from_millis(300));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(h.lost_reason().is_none());
        h.mark_lost(LostReason::OwnerGone);
        h.extend(Instant::now(), Duration::from_secs(5));
        assert_eq!(h.lost_reason(), Some(LostReason::OwnerGone));
    }
}
