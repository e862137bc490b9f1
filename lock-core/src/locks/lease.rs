//! [`LeaseClock`]: a lease as its holder sees it, valid until a local deadline or lost.
//!
//! The deadline is the latest `sent + lease - drift` over the requests that armed the
//! lease on the server and succeeded, where `sent` is when the request was *sent*: the
//! server's expiry is never earlier, so a holder that stops hearing from the server, or
//! is paused, gives the lease up first. Locks and expirable permits both keep one.
//! [`Lease`] is the lease an acquisition asks for.

use std::fmt;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::config::Config;
use crate::{Error, LostReason};

/// The lease of a new hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lease {
    /// The client's watchdog lease, renewed while the guard lives.
    Watchdog,
    /// A lease of the caller's, renewed while the guard lives, every third of it.
    Renewed(Duration),
    /// A caller's lease, never renewed.
    Fixed(Duration),
}

impl Lease {
    /// The lease a caller asked for: `lease`, renewed by the watchdog when `renewed`,
    /// else the client's watchdog lease; checked against the client's settings.
    pub(crate) fn asked(
        lease: Option<Duration>,
        renewed: bool,
        config: &Config,
    ) -> Result<Self, Error> {
        match lease {
            Some(lease) if renewed => {
                config.check_renewable("watchdog_lease", lease)?;
                Ok(Self::Renewed(lease))
            }
            Some(lease) => {
                config.check_lease("lease", lease)?;
                Ok(Self::Fixed(lease))
            }
            None => Ok(Self::Watchdog),
        }
    }

    /// The lease a grant asks the store for, and whether the watchdog renews it.
    pub(crate) fn terms(self, config: &Config) -> (Duration, bool) {
        match self {
            Self::Watchdog => (config.watchdog_lease, true),
            Self::Renewed(lease) => (lease, true),
            Self::Fixed(lease) => (lease, false),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Status {
    deadline: Instant,
    lost: Option<LostReason>,
    last_sent: Instant,
    /// Counts re-arms: a renewal sent before one must not extend what it set.
    epoch: u64,
    /// The lease the watchdog's renewals ask for (zero until a renewing guard sets it).
    renewal: Duration,
}

/// Reports a lease newly lost (events and metrics of what the lease is for).
type OnLost = Box<dyn Fn(LostReason) + Send + Sync>;

/// Kept in every held lock, so kept small: a plain mutex and one `Notify` (a watch
/// channel would allocate several hundred bytes more per hold).
pub(crate) struct LeaseClock {
    status: Mutex<Status>,
    /// Wakes [`LeaseClock::lost`] waiters when the status changed.
    changed: Notify,
    on_lost: OnLost,
}

impl fmt::Debug for LeaseClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseClock")
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl LeaseClock {
    /// A lease armed by a request sent at `sent`, valid for `valid_for` (lease minus
    /// drift); `on_lost` is told once when it is lost.
    pub(crate) fn new(sent: Instant, valid_for: Duration, on_lost: OnLost) -> Self {
        Self {
            status: Mutex::new(Status {
                deadline: sent + valid_for,
                lost: None,
                last_sent: sent,
                epoch: 0,
                renewal: Duration::ZERO,
            }),
            changed: Notify::new(),
            on_lost,
        }
    }

    fn locked(&self) -> MutexGuard<'_, Status> {
        // Every change below is a few field writes that cannot panic half-way.
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A copy of the status.
    fn status(&self) -> Status {
        *self.locked()
    }

    /// Applies `change`; when it reports a change, wakes the waiters of
    /// [`LeaseClock::lost`]. Returns what `change` returned.
    fn send_if_modified(&self, change: impl FnOnce(&mut Status) -> bool) -> bool {
        let modified = change(&mut self.locked());
        if modified {
            self.changed.notify_waiters();
        }
        modified
    }

    /// Records a successful request sent at `sent` that armed the lease for `valid_for`.
    /// The deadline only moves forward.
    pub(crate) fn extend(&self, sent: Instant, valid_for: Duration) {
        self.send_if_modified(|s| {
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

    /// As [`extend`](Self::extend), for a renewal sent at `epoch`: ignored when the lease
    /// was re-armed since.
    pub(crate) fn extend_in(&self, epoch: u64, sent: Instant, valid_for: Duration) {
        if self.status().epoch == epoch {
            self.extend(sent, valid_for);
        }
    }

    /// Sets the lease anew from a request sent at `sent`: the deadline may move back
    /// (a shorter lease), and renewals sent before are ignored.
    pub(crate) fn rearm(&self, sent: Instant, valid_for: Duration) {
        self.send_if_modified(|s| {
            if s.lost.is_some() {
                return false;
            }
            s.epoch += 1;
            s.last_sent = sent;
            s.deadline = sent + valid_for;
            true
        });
    }

    /// Moves the deadline back to `sent + valid_for` if that is earlier, before a request
    /// that may shorten the lease: whatever becomes of the request, the local deadline
    /// is then never after the store's. Renewals sent before are ignored.
    pub(crate) fn shorten(&self, sent: Instant, valid_for: Duration) {
        self.send_if_modified(|s| {
            if s.lost.is_some() {
                return false;
            }
            s.epoch += 1;
            s.deadline = s.deadline.min(sent + valid_for);
            true
        });
    }

    /// The number of re-arms so far.
    /// From now on, the watchdog renews this lease for `lease` at a time.
    pub(crate) fn renew_with(&self, lease: Duration) {
        self.locked().renewal = lease;
    }

    /// The lease the watchdog's renewals ask for.
    pub(crate) fn renewal(&self) -> Duration {
        self.locked().renewal
    }

    pub(crate) fn epoch(&self) -> u64 {
        self.status().epoch
    }

    /// Marks the lease lost; returns whether this call did it.
    pub(crate) fn mark_lost(&self, reason: LostReason) -> bool {
        let marked = self.send_if_modified(|s| {
            if s.lost.is_some() {
                false
            } else {
                s.lost = Some(reason);
                true
            }
        });
        if marked {
            (self.on_lost)(reason);
        }
        marked
    }

    /// Why the lease is lost, if it is; a passed deadline marks it lost now.
    pub(crate) fn lost_reason(&self) -> Option<LostReason> {
        let s = self.status();
        if s.lost.is_none() && Instant::now() >= s.deadline {
            self.mark_lost(LostReason::LeaseExpired);
        }
        self.status().lost
    }

    /// Whether the lease is lost (without checking the deadline).
    pub(crate) fn is_marked_lost(&self) -> bool {
        self.status().lost.is_some()
    }

    /// Time left before the local deadline, or `None` once lost.
    pub(crate) fn valid_for(&self) -> Option<Duration> {
        if self.lost_reason().is_some() {
            return None;
        }
        Some(
            self.status()
                .deadline
                .saturating_duration_since(Instant::now()),
        )
    }

    /// The local deadline (meaningless once lost).
    pub(crate) fn deadline(&self) -> Instant {
        self.status().deadline
    }

    pub(crate) fn last_sent(&self) -> Instant {
        self.status().last_sent
    }

    /// Resolves when the lease is lost (by a failed renewal or by its deadline passing).
    pub(crate) async fn lost(&self) -> LostReason {
        loop {
            // Registered before the status is read, so that a change made after the
            // read still wakes this waiter.
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let s = self.status();
            if let Some(reason) = s.lost {
                return reason;
            }
            if Instant::now() >= s.deadline {
                self.mark_lost(LostReason::LeaseExpired);
                continue;
            }
            // Biased: the same branch wins from one run to the next.
            tokio::select! {
                biased;
                () = changed => {}
                () = tokio::time::sleep_until(s.deadline) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn clock(valid_for: Duration) -> (LeaseClock, Arc<AtomicUsize>) {
        let reported = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&reported);
        let on_lost = Box::new(move |_| {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        (
            LeaseClock::new(Instant::now(), valid_for, on_lost),
            reported,
        )
    }

    #[tokio::test(start_paused = true)]
    async fn expires_at_its_deadline_even_without_news_and_reports_once() {
        let (lease, reported) = clock(Duration::from_millis(100));
        assert!(lease.lost_reason().is_none());
        assert_eq!(lease.lost().await, LostReason::LeaseExpired);
        assert!(lease.valid_for().is_none());
        lease.mark_lost(LostReason::OwnerGone);
        assert_eq!(reported.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn extension_moves_the_deadline_forward_only() {
        let (lease, _) = clock(Duration::from_millis(100));
        let start = Instant::now();
        lease.extend(start, Duration::from_millis(50));
        assert!(lease.valid_for() > Some(Duration::from_millis(90)));
        lease.extend(start, Duration::from_millis(300));
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(lease.lost_reason().is_none());
        lease.mark_lost(LostReason::OwnerGone);
        lease.extend(Instant::now(), Duration::from_secs(5));
        assert_eq!(lease.lost_reason(), Some(LostReason::OwnerGone));
    }

    /// A shorter lease set anew moves the deadline back, and a renewal sent before it
    /// cannot undo that (it would leave the local deadline after the server's expiry).
    #[tokio::test(start_paused = true)]
    async fn a_rearm_shortens_and_outdates_earlier_renewals() {
        let (lease, _) = clock(Duration::from_secs(10));
        let before = lease.epoch();
        let renewal_sent = Instant::now();
        lease.rearm(Instant::now(), Duration::from_millis(100));
        lease.extend_in(before, renewal_sent, Duration::from_secs(10));
        assert!(lease.valid_for() <= Some(Duration::from_millis(100)));
        lease.extend_in(lease.epoch(), Instant::now(), Duration::from_millis(200));
        assert!(lease.valid_for() > Some(Duration::from_millis(150)));
    }
}
