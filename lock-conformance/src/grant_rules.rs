//! Scenarios for the grant rules the hand-over brought: an acquisition is granted at
//! most once and never after it ended (a take-up only takes up a handed hold, and a
//! cancelled acquisition's late attempt takes nothing), and a handed hold lasts no
//! longer than its waiter's lease. Each names the finding it guards (the third
//! correctness review, `shared/reviews/correctness-3.md`, or issue 48) and failed on
//! every store where it applies before its fix. Re-exported through [`crate::scenarios`].

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, AcquireRequest, Backend, ReleaseRequest};
use lock_core::{Guard, LockKind, LockName, LockRef, Locks, Owner};
use tokio::time::{Instant, sleep, timeout};

use crate::Fixture;
use crate::faulty::{AcquireFault, FaultyBackend};
use crate::scenarios::{eventually, unique};

/// The lease the raw waiter asks for.
const LEASE: Duration = Duration::from_secs(30);

/// Takes lock `name` of `kind` through `locks`, waiting.
async fn lock_as(locks: &Locks, kind: LockKind, name: &str) -> Guard {
    match kind {
        LockKind::Fair => locks.fair_mutex(name).lock().await.unwrap(),
        LockKind::Write => locks.rw_lock(name).writer().lock().await.unwrap(),
        _ => locks.mutex(name).lock().await.unwrap(),
    }
}

/// Tries lock `name` of `kind` through `locks` once.
async fn try_as(locks: &Locks, kind: LockKind, name: &str) -> Option<Guard> {
    match kind {
        LockKind::Fair => locks.fair_mutex(name).try_lock().await.unwrap(),
        LockKind::Write => locks.rw_lock(name).writer().try_lock().await.unwrap(),
        _ => locks.mutex(name).try_lock().await.unwrap(),
    }
}

/// A raw waiter of lock `name` of `kind`: its acquisition's request, found busy, queued
/// (registered to be handed the lock, where the store hands over) and listening.
struct RawWaiter {
    backend: Arc<dyn Backend>,
    lock: LockRef,
    request: AcquireRequest,
    _listening: lock_core::notify::Listener,
}

impl RawWaiter {
    async fn queue(fx: &dyn Fixture, kind: LockKind, name: &str) -> Self {
        Self::queue_with_lease(fx, kind, name, LEASE).await
    }

    async fn queue_with_lease(
        fx: &dyn Fixture,
        kind: LockKind,
        name: &str,
        lease: Duration,
    ) -> Self {
        let backend = fx.backend().await;
        let lock = LockRef::new(
            kind,
            LockName::new(name).unwrap(),
            Owner::new("00000000-0000-0000-0000-0000000e1de0", "waiter"),
        );
        let request = AcquireRequest::new(lease)
            .enqueue(secs(5))
            .fencing(true)
            .attempt(1);
        let busy = backend.acquire(&lock, request).await.unwrap();
        assert!(matches!(busy, Acquire::Busy { .. }), "{busy:?}");
        let listening = backend.listen(&lock).await.unwrap();
        // Asked again once listening, as a waiter of ours does: the store now knows it
        // waits for a wake-up of its own.
        let request = request.attempt(2);
        let busy = backend.acquire(&lock, request).await.unwrap();
        assert!(matches!(busy, Acquire::Busy { .. }), "{busy:?}");
        Self {
            backend,
            lock,
            request,
            _listening: listening,
        }
    }

    /// The waiter's hold count, as the store reports it.
    async fn holds(&self) -> u32 {
        self.backend.inspect(&self.lock).await.unwrap().holds
    }
}

/// Asserts that another client takes lock `name` of `kind` at once, and lets it go.
async fn free_for_others(fx: &dyn Fixture, kind: LockKind, name: &str, what: &str) {
    let other = fx.client().await;
    let guard = try_as(&other, kind, name).await;
    assert!(guard.is_some(), "{what}: {name} is held for nobody");
    if let Some(guard) = guard {
        guard.unlock().await.unwrap();
    }
}

/// R1, at the store: a hold handed to a waiting acquisition and revoked by a
/// force-release before its take-up lands is not granted again by that take-up (a
/// third owner held and released the lock in between). Before, the take-up found the
/// handed hold gone and ran as a fresh acquire under the same id: the revoked
/// acquisition held the lock again, and its guard never learnt it had lost it.
async fn a_revoked_handed_hold_is_not_granted_again(fx: &dyn Fixture, kind: LockKind) {
    let name = unique("revoked-handed");
    let holder = fx.client().await;
    let held = lock_as(&holder, kind, &name).await;
    let waiter = RawWaiter::queue(fx, kind, &name).await;
    held.unlock().await.unwrap();
    if waiter.holds().await == 0 {
        // PostgreSQL hands the mutex and the fair lock over, not the write lock.
        println!("the store did not hand the {kind} lock over: nothing to take up");
        return;
    }
    let admin = fx.client().await;
    let revoked = match kind {
        LockKind::Fair => admin.fair_mutex(&name).force_unlock().await.unwrap(),
        LockKind::Write => admin.rw_lock(&name).writer().force_unlock().await.unwrap(),
        _ => admin.mutex(&name).force_unlock().await.unwrap(),
    };
    assert!(revoked, "the handed hold was there to revoke");
    let third = fx.client().await;
    let between = try_as(&third, kind, &name)
        .await
        .expect("the revoked lock is free");
    between.unlock().await.unwrap();
    let take_up = waiter
        .backend
        .acquire(&waiter.lock, waiter.request.attempt(3))
        .await
        .unwrap();
    assert_eq!(
        take_up,
        Acquire::Ended,
        "the take-up of a revoked handed hold was answered as a new acquisition"
    );
    assert_eq!(waiter.holds().await, 0, "the revoked waiter holds again");
    free_for_others(fx, kind, &name, "after the revoked take-up").await;
}

/// R1 for the mutex.
pub async fn a_revoked_handed_mutex_is_not_granted_again(fx: &dyn Fixture) {
    a_revoked_handed_hold_is_not_granted_again(fx, LockKind::Mutex).await;
}

/// R1 for the fair lock.
pub async fn a_revoked_handed_fair_lock_is_not_granted_again(fx: &dyn Fixture) {
    a_revoked_handed_hold_is_not_granted_again(fx, LockKind::Fair).await;
}

/// R1 for the write lock.
pub async fn a_revoked_handed_write_lock_is_not_granted_again(fx: &dyn Fixture) {
    a_revoked_handed_hold_is_not_granted_again(fx, LockKind::Write).await;
}

/// R2: a copy of a waiting acquisition's attempt that arrives after the acquisition gave
/// up (a request held on an abandoned connection, delivered late) takes nothing, even
/// when the lock is free by then. Before, the cancellation left no trace of an
/// acquisition that was never granted, and the copy took the lock for nobody, for its
/// whole lease.
async fn a_late_copy_of_a_cancelled_acquisition_takes_nothing(fx: &dyn Fixture, kind: LockKind) {
    let name = unique("late-cancelled");
    let holder = fx.client().await;
    let held = lock_as(&holder, kind, &name).await;
    let waiter = RawWaiter::queue(fx, kind, &name).await;
    waiter
        .backend
        .cancel_wait(&waiter.lock, &waiter.request)
        .await
        .unwrap();
    held.unlock().await.unwrap();
    let late = waiter
        .backend
        .acquire(&waiter.lock, waiter.request)
        .await
        .unwrap();
    assert!(
        !matches!(late, Acquire::Acquired { .. }),
        "a late copy of a cancelled acquisition's attempt was granted: {late:?}"
    );
    assert_eq!(waiter.holds().await, 0, "the cancelled acquisition holds");
    free_for_others(fx, kind, &name, "after the late copy").await;
}

/// A copy of a granted acquisition's request that arrives after its hold lapsed (its
/// holder died without a release) but within two retry windows of the grant, the
/// longest a copy is assumed to take, grants nothing. Before, a grant's answer was kept
/// one retry window (its end's, two): a copy between the two found nothing, and took
/// the lock afresh, for nobody, for its whole lease.
pub async fn a_late_copy_of_a_lapsed_grant_takes_nothing(fx: &dyn Fixture) {
    a_late_copy_of_an_ended_grant_takes_nothing(fx, false).await;
}

/// The same for a grant that was released: the release's answer is kept two retry
/// windows. Before, PostgreSQL kept it one.
pub async fn a_late_copy_of_a_released_grant_takes_nothing(fx: &dyn Fixture) {
    a_late_copy_of_an_ended_grant_takes_nothing(fx, true).await;
}

async fn a_late_copy_of_an_ended_grant_takes_nothing(fx: &dyn Fixture, released: bool) {
    let name = unique("late-ended");
    let backend = fx.backend().await;
    let lock = LockRef::new(
        LockKind::Mutex,
        LockName::new(&name).unwrap(),
        Owner::new("00000000-0000-0000-0000-00000000dead", "holder"),
    );
    let window = ms(400);
    let lease = ms(150);
    let request = AcquireRequest::new(lease)
        .fencing(true)
        .retry_window(window);
    let granted = backend.acquire(&lock, request).await.unwrap();
    assert!(matches!(granted, Acquire::Acquired { .. }), "{granted:?}");
    if released {
        let release = ReleaseRequest::new(lease, request.id).retry_window(window);
        backend.release(&lock, release).await.unwrap();
    }
    // Past the lease and one window, within two.
    sleep(window + window / 2).await;
    let late = backend.acquire(&lock, request).await.unwrap();
    assert!(
        !matches!(late, Acquire::Acquired { .. }),
        "a late copy of an ended grant's request was granted again: {late:?}"
    );
    free_for_others(fx, LockKind::Mutex, &name, "after the late copy").await;
}

/// A reader's write attempt is refused (it would wait for its own reads), and the
/// refusal ends that acquisition: a late copy of the attempt, arriving once the reads
/// ended, takes nothing. Found by the read-write lock's differential test in the memory
/// store, Redis's script and PostgreSQL's function alike: the copy took the write lock
/// for an acquisition its client had given up on.
pub async fn a_late_copy_of_a_refused_upgrade_takes_nothing(fx: &dyn Fixture) {
    let name = LockName::new(&unique("late-upgrade")).unwrap();
    let backend = fx.backend().await;
    let owner = Owner::new("00000000-0000-0000-0000-0000000feed5", "reader");
    let reader = LockRef::new(LockKind::Read, name.clone(), owner.clone());
    let writer = LockRef::new(LockKind::Write, name.clone(), owner);
    let lease = secs(10);
    let read = AcquireRequest::new(lease).fencing(true);
    let granted = backend.acquire(&reader, read).await.unwrap();
    assert!(matches!(granted, Acquire::Acquired { .. }), "{granted:?}");
    let upgrade = AcquireRequest::new(lease).fencing(true);
    let refused = backend.acquire(&writer, upgrade).await;
    assert!(
        matches!(refused, Err(lock_core::Error::WouldDeadlock { .. })),
        "{refused:?}"
    );
    let released = backend
        .release(&reader, ReleaseRequest::new(lease, read.id))
        .await
        .unwrap();
    assert_eq!(released, lock_core::backend::Release::Released);
    let late = backend.acquire(&writer, upgrade).await;
    assert!(
        !matches!(late, Ok(Acquire::Acquired { .. })),
        "a late copy of a refused upgrade took the write lock: {late:?}"
    );
    backend.force_release(&writer).await.unwrap();
}

/// R2 for the mutex.
pub async fn a_late_copy_of_a_cancelled_mutex_acquisition_takes_nothing(fx: &dyn Fixture) {
    a_late_copy_of_a_cancelled_acquisition_takes_nothing(fx, LockKind::Mutex).await;
}

/// R2 for the fair lock.
pub async fn a_late_copy_of_a_cancelled_fair_acquisition_takes_nothing(fx: &dyn Fixture) {
    a_late_copy_of_a_cancelled_acquisition_takes_nothing(fx, LockKind::Fair).await;
}

/// R1, end to end: a waiter of ours handed the mutex holds it from the notice on; its
/// take-up is held back on the way while an operator force-unlocks the lock and a third
/// client holds and releases it. When the take-up lands, the waiter's guard learns it
/// lost the lock (at once, not at a renewal that would find its owner holding again).
pub async fn a_guard_of_a_revoked_handed_hold_learns_it_at_its_take_up(fx: &dyn Fixture) {
    let name = unique("revoked-guard");
    let holder = fx.client().await;
    let held = holder.mutex(&name).lock().await.unwrap();
    let faulty = FaultyBackend::new(fx.backend().await);
    // No starvation reservation: with it, a release may wake the waiter to ask rather
    // than hand it the lock, and the take-up would not be a separate request.
    let waiting = Locks::builder(Arc::new(faulty.clone()))
        .starvation_threshold(None)
        .build()
        .unwrap();
    let waiter = {
        let (waiting, name) = (waiting.clone(), name.clone());
        tokio::spawn(async move { waiting.mutex(&name).lock().await })
    };
    // Its first attempt, and the one after it listens.
    faulty.listening().await;
    // Let the second attempt be answered before its requests are held back.
    sleep(ms(100)).await;
    faulty.set(AcquireFault::DelayRequest(ms(1500)));
    let released = Instant::now();
    held.unlock().await.unwrap();
    let guard = timeout(secs(5), waiter)
        .await
        .expect("the waiter was handed the lock")
        .unwrap()
        .unwrap();
    // Every request of the waiter now takes 1.5 s on its way: holding sooner, it holds
    // from the hand-over's notice, and its take-up is still on its way.
    if released.elapsed() >= ms(1500) {
        // A store whose notice names no grant (Redis where acquisitions wait for
        // replicas) wakes the waiter: its next attempt takes the hold up before it holds
        // (the store-level scenarios cover it).
        println!("the notice named no grant: the waiter held only after its take-up");
        return;
    }
    assert!(guard.is_held(), "the handed guard does not hold");
    let admin = fx.client().await;
    assert!(admin.mutex(&name).force_unlock().await.unwrap());
    let third = fx.client().await;
    let between = third
        .mutex(&name)
        .try_lock()
        .await
        .unwrap()
        .expect("the revoked lock is free");
    sleep(ms(200)).await;
    between.unlock().await.unwrap();
    let learnt = timeout(secs(5), guard.lost()).await;
    assert!(
        learnt.is_ok(),
        "the guard of a revoked handed hold still holds 5 s after its take-up was due"
    );
    assert!(!guard.is_held());
    faulty.set(AcquireFault::None);
    drop(guard);
    waiting.shutdown().await;
    free_for_others(fx, LockKind::Mutex, &name, "after the revoked guard").await;
}

/// A holder handed the lock that dies (`kill -9`) is replaced within its own lease, not
/// its place: a short lease means a fast takeover, whether it died before its take-up
/// or after it. Before, a handed hold lasted the waiter's place (5 s here) and its
/// take-up never cut it to the waiter's lease (issue 48: with a 3 s watchdog lease the
/// next contender got the lock after 5 s, every run).
pub async fn a_handed_hold_lasts_no_longer_than_its_waiters_lease(fx: &dyn Fixture) {
    let lease = ms(300);
    for takes_up in [false, true] {
        let name = unique("handed-lease");
        let holder = fx.client().await;
        let held = lock_as(&holder, LockKind::Mutex, &name).await;
        let waiter = RawWaiter::queue_with_lease(fx, LockKind::Mutex, &name, lease).await;
        held.unlock().await.unwrap();
        assert_eq!(waiter.holds().await, 1, "handed over");
        if takes_up {
            let taken = waiter
                .backend
                .acquire(&waiter.lock, waiter.request.attempt(3))
                .await
                .unwrap();
            assert!(matches!(taken, Acquire::Acquired { .. }), "{taken:?}");
        }
        // The waiter dies here: it never asks, renews or releases again.
        let died = Instant::now();
        let other = fx.client().await;
        let mutex = other.mutex(&name);
        let replaced = eventually(secs(3), || async {
            match mutex.try_lock().await.unwrap() {
                Some(guard) => guard.unlock().await.is_ok(),
                None => false,
            }
        })
        .await;
        assert!(
            replaced,
            "taken up: {takes_up}; a dead holder with a 300 ms lease still held the handed \
             lock {:?} later",
            died.elapsed()
        );
    }
}
