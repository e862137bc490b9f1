//! Exclusion and reentrancy: holders and clients exclude each other, a holder reenters,
//! nobody else releases, and bad arguments are typed errors.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{ErrorKind, Holder, LockKind, LockName, LockRef, Locks, Owner, RequestId};
use tokio::time::{sleep, timeout};

use super::{eventually, kind, unique};
use crate::Fixture;
use crate::faulty::{AcquireFault, FaultyBackend};

/// Hold count 0 -> 1 -> 2 -> 1 -> 0 through reentry by one holder.
pub async fn hold_count_goes_up_and_down(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let m = locks.mutex(&unique("count"));
    Holder::scope(async {
        assert_eq!(m.hold_count().await.unwrap(), 0);
        let a = m.lock().await.unwrap();
        assert_eq!(m.hold_count().await.unwrap(), 1);
        let b = m.lock().await.unwrap();
        assert_eq!(m.hold_count().await.unwrap(), 2);
        a.unlock().await.unwrap();
        assert_eq!(m.hold_count().await.unwrap(), 1);
        assert!(m.is_locked().await.unwrap());
        b.unlock().await.unwrap();
        assert_eq!(m.hold_count().await.unwrap(), 0);
        assert!(!m.is_locked().await.unwrap());
    })
    .await;
}

/// Outside a holder scope an acquisition re-enters nothing: a second one in the same
/// task (or thread) waits like anyone else's. (The default holder used to be the task,
/// else the thread: two futures of one task re-entered each other's lock, and a task
/// that got the id of an ended task re-entered the guard that task left behind.)
pub async fn acquisitions_outside_a_scope_do_not_reenter(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let m = locks.mutex(&unique("no-implicit-reentry"));
    let first = m.lock().await.unwrap();
    assert!(
        m.try_lock().await.unwrap().is_none(),
        "a second acquisition outside any scope re-entered"
    );
    let (a, b) = tokio::join!(m.try_lock(), m.try_lock());
    assert!(a.unwrap().is_none() && b.unwrap().is_none());
    first.unlock().await.unwrap();
    assert!(!m.is_locked().await.unwrap());
}

/// The same holder re-enters without waiting; a second guard is independent.
pub async fn same_holder_reenters(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("reenter");
    let holder = Holder::unique();
    let m = locks.mutex(&name).with_holder(holder.clone());
    let outer = m.lock().await.unwrap();
    let inner = timeout(secs(2), m.lock())
        .await
        .expect("a holder must re-enter its own lock without waiting")
        .unwrap();
    assert!(m.is_held_by_current().await.unwrap());
    assert_eq!(inner.owner(), outer.owner());
    // Released from another task: a guard remembers its owner.
    tokio::spawn(async move { inner.unlock().await })
        .await
        .unwrap()
        .unwrap();
    assert_eq!(m.hold_count().await.unwrap(), 1);
    outer.unlock().await.unwrap();
    assert!(!m.is_locked().await.unwrap());
}

/// Two holders of one client exclude each other.
pub async fn holders_exclude_each_other(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("holders");
    let a = locks.mutex(&name).with_holder(Holder::unique());
    let b = locks.mutex(&name).with_holder(Holder::unique());
    let guard = a.lock().await.unwrap();
    assert!(
        b.try_lock().await.unwrap().is_none(),
        "another holder got a held lock"
    );
    assert!(!b.is_held_by_current().await.unwrap());
    assert!(b.is_locked().await.unwrap());
    guard.unlock().await.unwrap();
    let g = b.try_lock().await.unwrap().expect("free after release");
    g.unlock().await.unwrap();
}

/// Two clients (own connections, own UUIDs) exclude each other, even with one holder id.
pub async fn clients_exclude_each_other(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    assert_ne!(c1.client_id(), c2.client_id());
    let name = unique("clients");
    let holder = Holder::new("same-holder-id").unwrap();
    let g = c1
        .mutex(&name)
        .with_holder(holder.clone())
        .lock()
        .await
        .unwrap();
    let other = c2.mutex(&name).with_holder(holder);
    assert!(other.try_lock().await.unwrap().is_none());
    g.unlock().await.unwrap();
    let g2 = other.try_lock().await.unwrap().expect("free after release");
    g2.unlock().await.unwrap();
}

/// A release by a non-holder is a typed error and leaves the lock to its holder.
pub async fn non_holder_cannot_release(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("nonholder");
    let m1 = c1.mutex(&name).with_holder(Holder::unique());
    let stale = m1.lock().await.unwrap();
    // Someone force-releases it and another client takes it.
    assert!(c2.mutex(&name).force_unlock().await.unwrap());
    let m2 = c2.mutex(&name).with_holder(Holder::unique());
    let current = m2.lock().await.unwrap();
    // The stale guard learns of the loss at its next renewal at the latest; its release
    // is refused by the server either way.
    let err = stale
        .unlock()
        .await
        .expect_err("a stale guard must not release");
    assert!(err.is_not_held(), "{err}");
    assert!(
        m2.is_held_by_current().await.unwrap(),
        "the new holder lost its lock"
    );
    // Straight to the backend, as an owner that never held it.
    let intruder = LockRef::new(
        LockKind::Mutex,
        LockName::new(&name).unwrap(),
        Owner::new("00000000-0000-0000-0000-000000000000", "intruder"),
    );
    let reply = c2
        .backend()
        .release(
            &intruder,
            lock_core::ReleaseRequest::new(secs(30), RequestId::random()),
        )
        .await
        .unwrap();
    assert_eq!(reply, lock_core::backend::Release::NotHeld);
    assert_eq!(
        m2.hold_count().await.unwrap(),
        1,
        "a non-holder changed the hold count"
    );
    current.unlock().await.unwrap();
}

/// `tokio::join!` of two acquisitions under different holder scopes excludes.
pub async fn join_of_two_scopes_excludes(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("join");
    let inside = AtomicBool::new(false);
    let overlaps = AtomicUsize::new(0);
    let section = || async {
        Holder::scope(async {
            for _ in 0..5 {
                let g = locks.mutex(&name).lock().await.unwrap();
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                sleep(ms(5)).await;
                inside.store(false, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
        })
        .await;
    };
    timeout(secs(20), async { tokio::join!(section(), section()) })
        .await
        .expect("both scopes finish");
    assert_eq!(
        overlaps.load(Ordering::SeqCst),
        0,
        "two scopes held the lock at once"
    );
}

/// 16 clients x 50 read-modify-write increments under the lock give exactly 800.
pub async fn counter_under_lock_is_exact(fx: &dyn Fixture) {
    let name = unique("counter");
    let counter = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let locks = fx.client().await;
        let (name, counter) = (name.clone(), Arc::clone(&counter));
        tasks.push(tokio::spawn(async move {
            // Sixteen contenders make overlaps likely if exclusion ever fails; fifty
            // rounds each (800 sections) keep the suite's CPU in bounds on two cores,
            // where RedLock wakes every client on every release.
            for _ in 0..50 {
                let g = locks.mutex(&name).lock().await.unwrap();
                // A deliberately racy read-modify-write: only the lock makes it exact.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
        }));
    }
    // A guard against a hang, not a speed check: 16 clients over three RedLock nodes took
    // 100 s for twice the rounds on a loaded two-core machine (every release wakes every
    // client, and votes split).
    timeout(secs(180), futures_util::future::join_all(tasks))
        .await
        .expect("800 increments finish")
        .into_iter()
        .for_each(|r| r.unwrap());
    assert_eq!(counter.load(Ordering::SeqCst), 800);
}

/// Bad input gets a typed error before anything is sent, and nothing changes.
pub async fn bad_arguments_are_typed_errors(fx: &dyn Fixture) {
    let locks: Locks = fx.client().await;
    assert_eq!(
        kind(locks.mutex("").lock().await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(locks.mutex("").is_locked().await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(locks.mutex("").force_unlock().await),
        ErrorKind::InvalidArgument
    );
    let m = locks.mutex(&unique("bad"));
    assert_eq!(
        kind(m.lock_with_lease(Duration::ZERO).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(m.try_lock_for(Duration::MAX, None).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(m.try_lock_for(secs(1), Some(Duration::MAX)).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(m.try_lock_for(secs(1), Some(Duration::ZERO)).await),
        ErrorKind::InvalidArgument
    );
    assert!(
        !m.is_locked().await.unwrap(),
        "a rejected call changed the lock"
    );
    // The clock-drift margin (2 ms and 1 %) would take all of it: the guard would come
    // back lost.
    let err = m
        .lock_with_lease(Duration::from_millis(1))
        .await
        .expect_err("a lease the drift margin uses up");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(err.to_string().contains("drift"), "{err}");
    assert!(
        !m.is_locked().await.unwrap(),
        "a refused lease took the lock"
    );
    let err = Locks::builder(fx.backend().await)
        .watchdog_lease(Duration::from_millis(2))
        .build()
        .expect_err("a lease too short to renew");
    assert!(err.is_invalid_input());
    // Unlocking twice: the second release goes through a reentrant guard of the same
    // hold; once both are gone the lock is free and a force-unlock is a no-op.
    let h = m.clone().with_holder(Holder::unique());
    let (a, b) = (h.lock().await.unwrap(), h.lock().await.unwrap());
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
    assert!(!h.force_unlock().await.unwrap());
}

/// A lease too short to survive its own round trip is refused with a typed error, and
/// its grant is released: before, the caller got an `Ok` guard already lost (issue 48, a
/// newcomer's 5 ms lease on PostgreSQL). The grant's reply is held back 100 ms here, so
/// a 20 ms lease has run out when it arrives, on every store.
pub async fn a_lease_too_short_for_its_round_trip_is_refused(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("too-short");
    faulty.set(AcquireFault::DelayFreshGrant(ms(100)));
    let refused = locks
        .mutex(&name)
        .acquire()
        .lease(ms(20))
        .await
        .expect_err("a guard lost on arrival is no answer");
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{refused}");
    faulty.set(AcquireFault::None);
    let other = fx.client().await;
    assert!(
        eventually(secs(2), || async {
            other.mutex(&name).try_lock().await.unwrap().is_some()
        })
        .await,
        "the refused grant was kept"
    );
}
