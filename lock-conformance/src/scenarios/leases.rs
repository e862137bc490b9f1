//! Leases: an expired lease is not held, the watchdog keeps a lock, a dropped guard or a
//! cancelled acquisition leaves no hold, and a forced unlock marks the holder lost.

use crate::timing::{ms, secs};
use std::time::Duration;

use lock_core::backend::Acquire;
use lock_core::{AcquireRequest, ErrorKind, LockKind, LockName, LockRef, Owner, ReleaseRequest};
use tokio::time::{Instant, sleep, timeout};

use super::{counted_client, eventually, kind, unique, watchdog_lease};
use crate::Fixture;

/// A fixed lease expires while the guard lives; the guard then reports not held.
pub async fn expired_lease_is_not_held(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("expire");
    let m = locks.mutex(&name);
    let g = m.lock_with_lease(ms(200)).await.unwrap();
    assert!(g.is_held());
    let lost = timeout(secs(2), g.lost())
        .await
        .expect("lost() resolves at the lease");
    assert!(lost.is_lost());
    assert!(!g.is_held());
    let other = fx.client().await;
    let taken = other
        .mutex(&name)
        .try_lock_for(secs(1), None)
        .await
        .unwrap()
        .expect("an expired lock is free");
    let err = g
        .unlock()
        .await
        .expect_err("the old guard must not release");
    assert!(err.is_not_held(), "{err}");
    assert!(taken.is_held());
    taken.unlock().await.unwrap();
}

/// The watchdog keeps a lock alive for more than three leases.
pub async fn watchdog_keeps_the_lock(fx: &dyn Fixture) {
    let lease = watchdog_lease();
    let locks = fx.client_with_lease(lease).await;
    let other = fx.client().await;
    let name = unique("watchdog");
    let g = locks.mutex(&name).lock().await.unwrap();
    held_past_three_leases(&g, (&locks, &other), &name, lease).await;
    g.unlock().await.unwrap();
    assert!(!other.mutex(&name).is_locked().await.unwrap());
}

/// Checks that the watchdog keeps `guard`'s hold of `name` past three and a half leases:
/// never lost, still excluding `other`, and with at most `lease` left in the store.
async fn held_past_three_leases(
    guard: &lock_core::Guard,
    (locks, other): (&lock_core::Locks, &lock_core::Locks),
    name: &str,
    lease: std::time::Duration,
) {
    tokio::select! {
        err = guard.lost() => panic!("the watchdog let the lock go: {err}"),
        () = sleep(lease * 3 + lease / 2) => {}
    }
    assert!(guard.is_held());
    assert!(other.mutex(name).try_lock().await.unwrap().is_none());
    let ttl = locks
        .mutex(name)
        .remaining_lease()
        .await
        .unwrap()
        .expect("a lease");
    assert!(ttl <= lease, "ttl {ttl:?} above the lease");
}

/// An acquisition that names its own watchdog lease, on a client whose watchdog lease is
/// 30 s, is renewed for that lease: held past three of them, and never with more than
/// one left in the store. Fails if the watchdog renews it for the client's lease (the
/// store's ttl), or only at the client's interval (10 s: the lock expires first).
pub async fn an_acquisition_renews_for_its_own_watchdog_lease(fx: &dyn Fixture) {
    let lease = watchdog_lease();
    let locks = fx.client().await;
    let other = fx.client().await;
    let name = unique("own-watchdog");
    // Another hold first, on the client's lease: the watchdog task already pauses for
    // 10 s when the shorter one arrives.
    let long = locks
        .mutex(&unique("client-watchdog"))
        .lock()
        .await
        .unwrap();
    let g = locks
        .mutex(&name)
        .acquire()
        .watchdog_lease(lease)
        .await
        .unwrap();
    held_past_three_leases(&g, (&locks, &other), &name, lease).await;
    g.unlock().await.unwrap();
    long.unlock().await.unwrap();
    let refused = locks
        .mutex(&name)
        .acquire()
        .watchdog_lease(Duration::from_millis(3))
        .await
        .expect_err("a lease renewals cannot keep");
    assert_eq!(refused.kind(), ErrorKind::InvalidArgument, "{refused}");
}

/// A guard dropped without unlock is released at once, not at the end of its lease.
pub async fn dropped_guard_is_released(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("drop");
    let g = locks.mutex(&name).lock().await.unwrap();
    drop(g);
    let m = locks.mutex(&name);
    assert!(
        eventually(secs(2), || async { !m.is_locked().await.unwrap() }).await,
        "a dropped guard kept its lock (the lease is 30 s)"
    );
}

/// An acquisition whose wait runs out is a `Timeout` error naming the lock, on time; one
/// with a lease holds exactly that lease, unrenewed.
pub async fn an_acquisition_reports_its_timeout_and_keeps_its_lease(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("acquire");
    let lease = ms(400);
    let start = Instant::now();
    let held = c1.mutex(&name).acquire().lease(lease).await.unwrap();
    let wait = ms(150);
    let err = c2
        .mutex(&name)
        .acquire()
        .wait(wait)
        .await
        .expect_err("held");
    let took = start.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.is_retryable(), "a wait that ran out may succeed later");
    assert!(err.to_string().contains(&name), "{err}");
    assert!(
        took >= wait && took < wait + ms(400),
        "gave up after {took:?}"
    );
    let once = c2.mutex(&name).acquire().wait(Duration::ZERO).await;
    assert_eq!(kind(once), ErrorKind::Timeout);
    // The lease is not renewed: the waiter gets the lock once it ran out.
    let got = c2.mutex(&name).acquire().wait(lease * 4).await.unwrap();
    assert!(start.elapsed() >= lease, "taken before the lease ended");
    assert!(!held.is_held(), "a fixed lease outlived itself");
    got.unlock().await.unwrap();
    let bad = c2.mutex(&name).acquire().lease(Duration::ZERO).await;
    assert_eq!(kind(bad), ErrorKind::InvalidArgument);
}

/// Acquire futures dropped at any point never leave a hold behind.
pub async fn cancelled_acquires_leave_no_hold(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("cancel");
    for round in 0..30u64 {
        // A hold leaked by an earlier round would block this for its 30 s lease.
        let g = timeout(secs(2), c1.mutex(&name).lock())
            .await
            .unwrap_or_else(|_| panic!("round {round}: a cancelled acquire left a hold behind"))
            .unwrap();
        let m2 = c2.mutex(&name);
        // The waiter is cancelled around the moment the lock is released, so that some
        // rounds cancel while the grant is in flight.
        let cancel_after = Duration::from_millis(20 + round % 7);
        let waiter = tokio::spawn(async move {
            let _ = timeout(cancel_after, async {
                let g = m2.lock().await;
                // Hold on to it so the timeout, not an unlock, ends it.
                std::future::pending::<()>().await;
                drop(g);
            })
            .await;
        });
        sleep(ms(20)).await;
        g.unlock().await.unwrap();
        waiter.await.unwrap();
    }
    let m = c1.mutex(&name);
    assert!(
        eventually(secs(2), || async { !m.is_locked().await.unwrap() }).await,
        "a cancelled acquire left a hold behind"
    );
}

/// A holder whose lock another client force-unlocks is told at its next renewal at the
/// latest: its guard's `lost()` resolves within one renewal interval (a third of the
/// watchdog lease), and the lock is the next holder's meanwhile.
pub async fn a_revoked_holder_learns_it_within_one_renewal_interval(fx: &dyn Fixture) {
    let holder = fx.client_with_lease(watchdog_lease()).await;
    let operator = fx.client().await;
    let name = unique("revoked");
    let guard = holder.mutex(&name).lock().await.unwrap();
    assert!(operator.mutex(&name).force_unlock().await.unwrap());
    let revoked_at = Instant::now();
    let next = operator.mutex(&name).try_lock().await.unwrap();
    assert!(next.is_some(), "a force-unlocked lock is free");
    learns_within_one_renewal(&guard, revoked_at).await;
    assert!(!guard.is_held());
    assert!(guard.unlock().await.expect_err("revoked").is_not_held());
    if let Some(next) = next {
        next.unlock().await.unwrap();
    }
}

/// A revoked holder learns it at its next renewal even when its owner holds the lock
/// again by then: an attempt of the same owner, sent before the revocation and run
/// after it (its answer not read yet), took the free lock afresh. The renewals name the
/// owner, whose new hold they renew; the store's answer says which hold that is, and the
/// old guard, whose hold began with another grant, is lost.
pub async fn a_revoked_holder_learns_it_though_its_owner_holds_again(fx: &dyn Fixture) {
    let holder = fx.client_with_lease(watchdog_lease()).await;
    let operator = fx.client().await;
    let name = unique("revoked-again");
    let guard = holder.mutex(&name).lock().await.unwrap();
    assert!(operator.mutex(&name).force_unlock().await.unwrap());
    let revoked_at = Instant::now();
    // The owner's attempt whose answer the holder's client never reads.
    let backend = fx.backend().await;
    let (client_id, holder_name) = guard.owner().split_once(':').unwrap();
    let same_owner = LockRef::new(
        LockKind::Mutex,
        LockName::new(&name).unwrap(),
        Owner::new(client_id, holder_name),
    );
    let request = AcquireRequest::new(watchdog_lease());
    let late = backend.acquire(&same_owner, request).await.unwrap();
    assert!(matches!(late, Acquire::Acquired { .. }), "{late:?}");
    learns_within_one_renewal(&guard, revoked_at).await;
    let release = ReleaseRequest::new(watchdog_lease(), request.id);
    backend.release(&same_owner, release).await.unwrap();
}

/// Waits for `guard`, revoked at `revoked_at`, to be lost within one renewal interval
/// (a third of the watchdog lease) of the revocation, with room for a loaded machine.
async fn learns_within_one_renewal(guard: &lock_core::Guard, revoked_at: Instant) {
    let bound = watchdog_lease() / 3 + ms(400);
    let lost = timeout(bound, guard.lost())
        .await
        .expect("lost() within one renewal interval of the revocation");
    assert!(lost.is_lost(), "{lost}");
    assert!(
        revoked_at.elapsed() < bound,
        "told after {:?}",
        revoked_at.elapsed()
    );
}

/// `force_unlock` frees a held lock, wakes its waiter and makes the old guard lost; on a
/// free lock it is a no-op that returns false.
pub async fn force_unlock_frees_and_marks_lost(fx: &dyn Fixture) {
    let (c1, (c2, counted)) = (fx.client().await, counted_client(fx).await);
    let name = unique("force");
    let m1 = c1.mutex(&name);
    assert!(
        !m1.force_unlock().await.unwrap(),
        "force-unlock of a free lock"
    );
    let g = m1.lock().await.unwrap();
    let m2 = c2.mutex(&name);
    let waiter = tokio::spawn(async move { m2.lock().await });
    counted.listening().await;
    assert!(m1.force_unlock().await.unwrap());
    let w = timeout(secs(2), waiter)
        .await
        .expect("waiter woke")
        .unwrap()
        .unwrap();
    assert!(!g.is_held(), "a force-released guard still claims the lock");
    assert!(
        g.unlock()
            .await
            .expect_err("not held any more")
            .is_not_held()
    );
    w.unlock().await.unwrap();
}
