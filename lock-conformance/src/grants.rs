//! Scenarios for "one identity per grant": a release or an undo ends exactly the grant
//! it names, only while that grant is alive, and a client never infers which holds it
//! owns from counts. Each names the finding of the second correctness review
//! (`shared/reviews/correctness-2.md`) it guards; each failed before grants had
//! identities. Re-exported through [`crate::scenarios`].

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, Release};
use lock_core::{
    AcquireRequest, Guard, Holder, LockKind, LockName, LockRef, Locks, Owner, ReleaseRequest,
};
use tokio::time::sleep;

use crate::Fixture;
use crate::faulty::{AcquireFault, FaultyBackend};
use crate::scenarios::unique;

/// Asserts that another client cannot take the mutex `name` while `guard` says it holds
/// it, on the same store.
async fn nobody_else_gets(fx: &dyn Fixture, name: &str, guard: &Guard, what: &str) {
    let other = fx.client().await;
    let intruder = other.mutex(name).try_lock().await.unwrap();
    assert!(
        !(intruder.is_some() && guard.is_held()),
        "TWO OWNERS: {what}: another client took {name} while a guard still holds it"
    );
}

/// Asserts that another client takes the mutex `name` at once: nothing was left held.
async fn another_client_takes_it(fx: &dyn Fixture, name: &str, left_behind: &str) {
    let other = fx.client().await;
    let guard = other.mutex(name).try_lock().await.unwrap();
    assert!(guard.is_some(), "{left_behind}");
}

/// N1: one holder locks a name through the fair handle, then through the plain one. The
/// store counts both as one hold; releasing the plain guard must leave the fair guard's
/// grant, and the lock, held. (Before, the plain guard's hold "adopted" the fair one's
/// count and gave it back: the lock was free while the fair guard said held.)
pub async fn fair_and_plain_guards_of_one_holder_end_their_own_grants(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("fair-and-plain");
    let holder = Holder::unique();
    let fair = locks
        .fair_mutex(&name)
        .with_holder(holder.clone())
        .lock()
        .await
        .unwrap();
    let plain = locks
        .mutex(&name)
        .with_holder(holder.clone())
        .lock()
        .await
        .unwrap();
    assert!(fair.is_held() && plain.is_held());
    plain.unlock().await.unwrap();
    assert!(
        fair.is_held(),
        "the fair guard lost its hold to the plain one's unlock"
    );
    nobody_else_gets(fx, &name, &fair, "the plain guard's unlock freed the lock").await;
    // The other way round, too.
    let plain = locks.mutex(&name).with_holder(holder).lock().await.unwrap();
    fair.unlock().await.unwrap();
    nobody_else_gets(fx, &name, &plain, "the fair guard's unlock freed the lock").await;
    plain.unlock().await.unwrap();
    another_client_takes_it(fx, &name, "a grant was left behind").await;
}

/// N2: a guard's release is delayed (on its way, or being retried); meanwhile its holder
/// takes the lock twice more, releasing once. When the delayed release lands, it ends
/// its own grant and nothing else: the holder's latest guard still holds the lock, and
/// nobody else gets it. (Before, the second hold "adopted" the first's count, released
/// it a second time, and the delayed release then deleted the third, live hold.)
pub async fn a_delayed_release_ends_only_its_own_grant(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("delayed-release");
    let lock = locks.mutex(&name).with_holder(Holder::unique());
    let first = lock.lock().await.unwrap();
    faulty.delay_releases(ms(400));
    drop(first);
    // The dropped guard's release is under way (it read the delay) before it is lifted.
    sleep(ms(50)).await;
    faulty.delay_releases(Duration::ZERO);
    let second = lock.lock().await.unwrap();
    second.unlock().await.unwrap();
    let third = lock.lock().await.unwrap();
    assert!(third.is_held());
    // The first guard's release lands now.
    sleep(ms(550)).await;
    assert!(third.is_held(), "the third guard was given up");
    nobody_else_gets(fx, &name, &third, "a delayed release ended a later grant").await;
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    third.unlock().await.unwrap();
    another_client_takes_it(fx, &name, "a grant was left behind").await;
}

/// N3: a `try_lock` with a short lease is granted, but its reply is lost: the caller
/// gets an error and the grant's undo is sent in the background, where it is delayed.
/// The grant expires; the same holder locks again; then the undo lands. It must not end
/// the new grant. (Before, an undo released "one hold of the owner" while its grant's
/// latch lived, whatever had become of that grant.)
pub async fn an_undo_never_ends_a_later_grant(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("late-undo");
    let lock = locks.mutex(&name).with_holder(Holder::unique());
    faulty.set(AcquireFault::LoseReply);
    faulty.delay_releases(ms(500));
    let tried = lock.try_lock_for(Duration::ZERO, Some(ms(200))).await;
    // The reply was lost: an error, or (when the retry came after the short lease, as on
    // a loaded machine) the store's answer that the grant is over. Never a guard.
    assert!(
        !matches!(tried, Ok(Some(_))),
        "the reply was lost: {tried:?}"
    );
    // The undo is on its way (delayed); the short grant expires meanwhile.
    sleep(ms(300)).await;
    faulty.delay_releases(Duration::ZERO);
    let later = lock.lock().await.unwrap();
    // The undo lands.
    sleep(ms(400)).await;
    assert!(later.is_held(), "the later guard was given up");
    nobody_else_gets(fx, &name, &later, "an undo ended a later grant").await;
    later.unlock().await.unwrap();
    another_client_takes_it(fx, &name, "a grant was left behind").await;
}

/// N3 for readers: the undo of a lost read grant with a short lease lands after that
/// grant expired and the same reader read-locked again; the reader's new grant stays, and
/// no writer gets in while it holds.
pub async fn an_undo_never_ends_a_later_read_grant(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("late-read-undo");
    let reader = locks.rw_lock(&name).reader().with_holder(Holder::unique());
    faulty.set(AcquireFault::LoseReply);
    faulty.delay_releases(ms(500));
    let tried = reader.try_lock_for(Duration::ZERO, Some(ms(200))).await;
    // The reply was lost: an error, or (when the retry came after the short lease, as on
    // a loaded machine) the store's answer that the grant is over. Never a guard.
    assert!(
        !matches!(tried, Ok(Some(_))),
        "the reply was lost: {tried:?}"
    );
    sleep(ms(300)).await;
    faulty.delay_releases(Duration::ZERO);
    let later = reader.lock().await.unwrap();
    sleep(ms(400)).await;
    let writer = fx.client().await;
    let write = writer.rw_lock(&name).writer().try_lock().await.unwrap();
    assert!(
        !(write.is_some() && later.is_held()),
        "READER AND WRITER: an undo ended a later read grant"
    );
    drop(write);
    later.unlock().await.unwrap();
}

/// N16: a guard given up as lost (its renewals ran, their replies did not come) while the
/// store kept its grant, and two concurrent acquisitions of the same holder: once all
/// three guards are released, nothing is held. (Before, the lost hold's count was to be
/// "adopted" by a later hold, which concurrent acquisitions miscounted: it stayed for a
/// lease.)
pub async fn a_lost_guard_beside_concurrent_grants_leaves_nothing_held(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    // A lease long enough that waiting for the lost grant to expire shows.
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(secs(2))
        .build()
        .unwrap();
    let name = unique("lost-beside-concurrent");
    let lock = locks.mutex(&name).with_holder(Holder::unique());
    let lost = lock.lock().await.unwrap();
    faulty.lose_renewal_replies(true);
    tokio::time::timeout(secs(5), lost.lost())
        .await
        .expect("the hold is lost locally once its renewals go unanswered");
    faulty.lose_renewal_replies(false);
    // Both on their way before either reaches the store.
    faulty.set(AcquireFault::DelayRequest(ms(50)));
    let (a, b) = tokio::join!(lock.lock(), lock.lock());
    let (a, b) = (a.unwrap(), b.unwrap());
    faulty.set(AcquireFault::None);
    assert!(a.is_held() && b.is_held());
    assert_eq!(lock.hold_count().await.unwrap(), 3);
    a.unlock().await.unwrap();
    b.unlock().await.unwrap();
    nobody_else_gets(fx, &name, &lost, "the lost guard still says held").await;
    drop(lost);
    let other = fx.client().await;
    let free = tokio::time::timeout(ms(500), async {
        loop {
            if let Some(guard) = other.mutex(&name).try_lock().await.unwrap() {
                return guard;
            }
            sleep(ms(10)).await;
        }
    })
    .await;
    assert!(
        free.is_ok(),
        "the dropped lost guard left its grant held for its lease"
    );
}

/// N13: a copy of an acquire request that arrives after its grant was released (a request
/// queued on an abandoned connection, delivered late) grants nothing: nobody would ever
/// release it. The same holds for the release sent again: it ends nothing more.
pub async fn a_late_copy_of_a_released_grant_grants_nothing(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let name = LockName::new(&unique("late-copy")).unwrap();
    let owner = Owner::new("00000000-0000-0000-0000-00000000c0de", "late");
    let lock = LockRef::new(LockKind::Mutex, name.clone(), owner);
    let lease = secs(30);
    let request = AcquireRequest::new(lease);
    let granted = backend.acquire(&lock, request).await.unwrap();
    assert!(matches!(granted, Acquire::Acquired { holds: 1, .. }));
    let release = ReleaseRequest::new(lease, request.id);
    assert_eq!(
        backend.release(&lock, release).await.unwrap(),
        Release::Released
    );
    // A store may answer the copy with the grant it remembers; it must not grant again.
    backend.acquire(&lock, request).await.unwrap();
    assert_eq!(
        backend.release(&lock, release).await.unwrap(),
        Release::Released,
        "a release sent again answers as the first time"
    );
    let other = fx.client().await;
    assert!(
        other
            .mutex(name.as_str())
            .try_lock()
            .await
            .unwrap()
            .is_some(),
        "the late copy left the lock held"
    );
}

/// A release that names a grant its owner never got (or another owner's) ends nothing,
/// even while the owner holds the lock under another grant.
pub async fn a_release_of_an_unknown_grant_ends_nothing(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let name = LockName::new(&unique("unknown-grant")).unwrap();
    let owner = Owner::new("00000000-0000-0000-0000-0000000000aa", "owner");
    let lock = LockRef::new(LockKind::Mutex, name, owner);
    let lease = secs(30);
    let request = AcquireRequest::new(lease);
    assert!(matches!(
        backend.acquire(&lock, request).await.unwrap(),
        Acquire::Acquired { .. }
    ));
    let stranger = AcquireRequest::new(lease).id;
    let reply = backend
        .release(&lock, ReleaseRequest::new(lease, stranger))
        .await
        .unwrap();
    assert_eq!(
        reply,
        Release::NotHeld,
        "a stranger's grant ended the owner's"
    );
    assert_eq!(backend.inspect(&lock).await.unwrap().holds, 1);
    assert_eq!(
        backend
            .release(&lock, ReleaseRequest::new(lease, request.id))
            .await
            .unwrap(),
        Release::Released
    );
}

/// A waiter that cannot reach the store for its retry window goes on under a fresh id,
/// and its old id is undone in the background. A release that hands the lock to the old
/// id while the undo is on its way must not give the waiter a guard: the undo ends that
/// grant, and another client would get the lock while the guard believes it holds.
/// Found by the simulation (seed 633, once a client of another library and two busy
/// contenders shared a mutex with ours); the waiter took the hand-over by the id its
/// last attempt had carried.
pub async fn a_hand_over_to_an_undone_id_gives_no_guard(fx: &dyn Fixture) {
    let name = unique("undone-hand-over");
    let holder = fx.client().await;
    let held = holder.mutex(&name).lock().await.unwrap();
    let faulty = FaultyBackend::new(fx.backend().await);
    let waiting_client = Locks::builder(Arc::new(faulty.clone()))
        .retry_window(ms(300))
        .build()
        .unwrap();
    // The first attempt is answered busy and registers the acquisition; every attempt
    // after it fails for the whole retry window, and the undo of its id lags.
    faulty.delay_listens(ms(200));
    let lock = waiting_client.mutex(&name);
    let waiting = tokio::spawn(async move { lock.try_lock_for(secs(4), None).await });
    faulty.asked(1).await;
    faulty.set(AcquireFault::FailBeforeSending);
    faulty.delay_releases(secs(1));
    sleep(ms(650)).await;
    faulty.set(AcquireFault::None);
    // The release hands the lock to the old id, whose undo is still on its way.
    held.unlock().await.unwrap();
    // The undo lands; the waiter's fresh id is served then.
    sleep(ms(1200)).await;
    let guard = waiting.await.unwrap().unwrap();
    let guard = guard.expect("the waiter is served once the undo freed the lock");
    nobody_else_gets(fx, &name, &guard, "a guard of a hand-over to an undone id").await;
    guard.unlock().await.unwrap();
}
