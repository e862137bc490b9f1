//! A replica of the memory store's locks and failing over to it, for simulations and
//! tests: a failover loses every lock write since the replica last caught up, as an
//! asynchronous replica's promotion does, and the promoted store then grants nothing for
//! the longest lease any hold may have had (the protocol's failover rule, third review
//! R4). Semaphores and latches are not replicated and keep their state: they have no
//! quarantine, and a failover that lost their writes would give out permits twice.

use std::time::Duration;

use tokio::time::Instant;

use super::{MemoryBackend, Store};
use crate::Error;
use crate::protocol::Defect;

/// How long a failover's quarantine lasts when the store bounds no lease (as
/// PostgreSQL's `distlock.failover_quarantine_ms` when unset).
pub const DEFAULT_FAILOVER_QUARANTINE: Duration = Duration::from_secs(60);

impl MemoryBackend {
    /// Bounds every lease by `longest`: the store refuses longer leases, declares the
    /// bound ([`Capabilities::max_lease`](crate::Capabilities::max_lease)), and a
    /// failover's quarantine lasts it ([`MemoryBackend::fail_over`]).
    #[must_use]
    pub fn with_max_lease(self, longest: Duration) -> Self {
        self.store().max_lease = Some(longest);
        self
    }

    /// The replica catches up with every lock write so far.
    pub fn replicate(&self) {
        let mut store = self.store();
        let copy = Store {
            locks: store.locks.clone(),
            waiters: store.waiters.clone(),
            answers: store.answers.clone(),
            tokens: store.tokens.clone(),
            ..Store::default()
        };
        store.replica = Some(Box::new(copy));
        store.replicate_exclusive();
    }

    /// Fails over to the replica: every lock write since it last caught up is lost (all
    /// of them, when it never did), except the fencing counters, which never go
    /// backwards (a networked store seeds them from a clock). The promoted store then grants
    /// nothing, to anyone, for the longest lease a lost hold may have had: the store's
    /// lease bound, or [`DEFAULT_FAILOVER_QUARANTINE`] without one.
    pub fn fail_over(&self) {
        let now = Instant::now();
        let mut store = self.store();
        let replica = store.replica.take().map_or_else(Store::default, |r| *r);
        let quarantine = if store.planted(Defect::R4QuarantineOfKnownLeases) {
            replica.longest_lease_left(now)
        } else {
            store.max_lease.unwrap_or(DEFAULT_FAILOVER_QUARANTINE)
        };
        for (name, token) in replica.tokens {
            let highest = store.tokens.entry(name).or_insert(0);
            *highest = (*highest).max(token);
        }
        store.locks = replica.locks;
        store.waiters = replica.waiters;
        store.answers = replica.answers;
        store.quarantine_until = Some(now + quarantine);
        store.fail_over_exclusive(now);
    }
}

impl Store {
    /// How long the failover quarantine still lasts, if it does.
    pub(super) fn quarantined(&self, now: Instant) -> Option<Duration> {
        self.quarantine_until
            .filter(|until| *until > now)
            .map(|until| until - now)
    }

    /// Refuses a lease longer than the store's bound.
    pub(super) fn check_lease(&self, lease: Duration) -> Result<(), Error> {
        match self.max_lease {
            Some(longest) if lease > longest => Err(Error::invalid_argument(
                "lease",
                format!("this store grants leases of {longest:?} at most, not {lease:?}"),
            )),
            _ => Ok(()),
        }
    }

    /// The longest time any hold of this store has left (what the defect R4 took for
    /// the longest lease a lost hold may have had).
    fn longest_lease_left(&self, now: Instant) -> Duration {
        self.locks
            .values()
            .map(|entry| entry.expires.saturating_duration_since(now))
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Acquire, AcquireRequest, Backend, LockKind, LockRef};
    use crate::{LockName, Owner};

    fn lock(holder: &str) -> LockRef {
        let name = LockName::new("replicated").expect("a valid name");
        LockRef::new(LockKind::Mutex, name, Owner::new("client", holder))
    }

    fn token(reply: Acquire) -> Option<u64> {
        match reply {
            Acquire::Acquired { token, .. } => token,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    /// A hold granted after the replica caught up is lost in the failover; nobody else is
    /// granted the lock before that hold's lease could have run out; tokens go on from
    /// the highest issued; and no lease longer than the bound is granted.
    #[tokio::test(start_paused = true)]
    async fn a_failover_loses_the_latest_writes_and_grants_nothing_for_the_longest_lease() {
        let longest = Duration::from_millis(400);
        let store = MemoryBackend::new().with_max_lease(longest);
        let lease = Duration::from_millis(300);
        store.replicate();
        let first = store
            .acquire(&lock("a"), AcquireRequest::new(lease).fencing(true))
            .await
            .expect("granted");
        assert_eq!(token(first), Some(1));
        store.fail_over();
        let during = store
            .acquire(&lock("b"), AcquireRequest::new(lease).fencing(true))
            .await
            .expect("answered");
        assert!(matches!(during, Acquire::Busy { .. }), "{during:?}");
        tokio::time::sleep(longest).await;
        let after = store
            .acquire(&lock("b"), AcquireRequest::new(lease).fencing(true))
            .await
            .expect("granted");
        assert_eq!(token(after), Some(2), "tokens never go backwards");
        let too_long = store
            .acquire(&lock("c"), AcquireRequest::new(longest * 2))
            .await;
        assert!(too_long.is_err_and(|err| err.kind() == crate::ErrorKind::InvalidArgument));
        assert_eq!(store.capabilities().max_lease, Some(longest));
    }
}
