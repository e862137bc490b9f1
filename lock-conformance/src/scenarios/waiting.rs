//! Waiting: waiters wake on release, a client asks once for all its waiters, starving
//! waiters go first, and subscriptions end with their waiters.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{LockKind, LockName, LockRef, Locks, Owner, RequestId};
use tokio::time::{Instant, sleep, timeout};

use super::{all_served, counted_client, eventually, handover_gap, spawn_waiter, unique};
use crate::Fixture;
use crate::faulty::{AcquireFault, FaultyBackend};

/// `try_lock_for` gives up after its wait, not much later.
pub async fn try_lock_for_gives_up_after_its_wait(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("trywait");
    let g = c1.mutex(&name).lock().await.unwrap();
    let wait = ms(250);
    let start = Instant::now();
    let got = c2.mutex(&name).try_lock_for(wait, None).await.unwrap();
    let took = start.elapsed();
    assert!(got.is_none(), "acquired a held lock");
    assert!(took >= wait, "gave up early: {took:?}");
    assert!(took < wait + ms(250), "gave up late: {took:?}");
    g.unlock().await.unwrap();
}

/// A try that waits for nothing (`try_lock_for(Duration::ZERO, lease)`) still waits for
/// its one answer: a free lock on a store that answers in 300 ms is granted. Before, the
/// attempt was given up 100 ms past its zero wait and the caller told the lock was busy
/// (seen under load through PgBouncer).
pub async fn a_zero_wait_try_waits_for_its_slow_answer(fx: &dyn Fixture) {
    let slow = FaultyBackend::new(fx.backend().await);
    let client = Locks::new(Arc::new(slow.clone()));
    slow.set(AcquireFault::DelayRequest(ms(300)));
    let name = unique("zero-wait");
    let guard = client
        .mutex(&name)
        .try_lock_for(Duration::ZERO, Some(secs(10)))
        .await
        .unwrap()
        .expect("the lock is free");
    slow.set(AcquireFault::None);
    guard.unlock().await.unwrap();
}

/// A waiter is woken by the release, not by its own clock: it is served well before it
/// would ask again on its own (a third of its 5 s place, 1.7 s) or find the holder's
/// 30 s lease run out. The bound leaves a loaded machine room: the release, the
/// notification and the take-up through PgBouncer took 110 ms under the whole suite.
pub async fn waiter_wakes_on_release(fx: &dyn Fixture) {
    let (c1, (c2, counted)) = (fx.client().await, counted_client(fx).await);
    let name = unique("wake");
    let g = c1.mutex(&name).lock().await.unwrap();
    let waiter = spawn_waiter(c2.mutex(&name));
    counted.listening().await;
    let gap = handover_gap(g, waiter, secs(5)).await;
    assert!(gap < ms(500), "the waiter took {gap:?} to wake");
}

/// Many waiters of one client on a held mutex: only the first asks the backend (its
/// try, and its retry once subscribed); the others wait in the client, and all are
/// served in arrival order once the holder lets go. Before local lines every waiter
/// asked twice, and a release woke any of them.
pub async fn one_client_asks_once_for_its_mutex_waiters(fx: &dyn Fixture) {
    one_client_asks_once(fx, Locks::mutex).await;
}

/// The same for the writers of a read-write lock.
pub async fn one_client_asks_once_for_its_writers(fx: &dyn Fixture) {
    one_client_asks_once(fx, |locks, name| locks.rw_lock(name).writer()).await;
}

/// Waiters of one client for the lock `handle` makes, while another client holds it.
async fn one_client_asks_once(fx: &dyn Fixture, handle: fn(&Locks, &str) -> lock_core::Lock) {
    const WAITERS: usize = 10;
    let holder = fx.client().await;
    let name = unique("local-line");
    let held = handle(&holder, &name).lock().await.unwrap();
    let counted = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(counted.clone()));
    let served = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for n in 0..WAITERS {
        let (lock, served) = (handle(&locks, &name), Arc::clone(&served));
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            served.lock().unwrap().push(n);
            guard.unlock().await.unwrap();
        }));
        // Each arrives after the one before.
        sleep(ms(20)).await;
    }
    sleep(ms(100)).await;
    let asked = counted.acquisitions();
    assert!(
        asked <= 2,
        "{WAITERS} waiters of one client asked the backend {asked} times while the lock \
         was held"
    );
    held.unlock().await.unwrap();
    all_served(waiters).await;
    assert_eq!(
        *served.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "the waiters were not served in arrival order"
    );
}

/// A release made by a client wakes that client's next mutex waiter at once, without
/// waiting for the store's release message: here no message ever arrives, and the
/// holder's 30 s lease would otherwise be the waiter's only way out. The release is
/// slow to reach the store, so where the client wakes its waiter as soon as the
/// release is on its way, the waiter asks too early and must be woken again once the
/// release is answered.
pub async fn a_clients_own_release_wakes_its_next_waiter(fx: &dyn Fixture) {
    let deaf = FaultyBackend::new(fx.backend().await);
    deaf.deafen_listens(true);
    let locks = Locks::new(Arc::new(deaf.clone()));
    let name = unique("own-release");
    let held = locks.mutex(&name).lock().await.unwrap();
    let waiter = spawn_waiter(locks.mutex(&name));
    sleep(ms(150)).await;
    deaf.delay_releases(ms(100));
    let gap = handover_gap(held, waiter, secs(5)).await;
    assert!(
        gap < ms(500),
        "the waiter took {gap:?} to hear its own client's release"
    );
}

/// Where the store keeps a client's requests in order, the client's next waiter asks
/// as soon as the client's release is on its way, not once it is answered: here the
/// release's answer is held back and no message ever arrives, so the waiter gets the
/// lock before the answer only by asking right behind the release (else the holder's
/// 30 s lease, or the answer, would be its way out).
pub async fn a_clients_next_waiter_asks_right_behind_its_release(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    faulty.deafen_listens(true);
    let locks = Locks::new(Arc::new(faulty.clone()));
    // A server that has not run the release script yet is sent it after refusing its
    // digest, and the waiter's request goes in between: load it first, on the node of
    // the lock (one hash tag for both names).
    let tag = unique("behind-release");
    let warm_up = locks.mutex(&format!("{{{tag}}}:warm-up"));
    warm_up.lock().await.unwrap().unlock().await.unwrap();
    let name = format!("{{{tag}}}:held");
    let held = locks.mutex(&name).lock().await.unwrap();
    let waiter = {
        let lock = locks.mutex(&name);
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    // The waiter asks, subscribes and asks again: then it waits for a wake-up.
    let queued = timeout(secs(10), faulty.asked(4)).await;
    assert!(queued.is_ok(), "the waiter never asked twice");
    faulty.hold_release_answers(true);
    let unlocking = tokio::spawn(held.unlock());
    let served = timeout(secs(5), waiter).await;
    let answered_first = unlocking.is_finished();
    faulty.hold_release_answers(false);
    let guard = served
        .expect("the waiter was not served while its client's release went unanswered")
        .unwrap();
    assert!(
        !answered_first,
        "the release was answered although held back"
    );
    unlocking.await.unwrap().unwrap();
    guard.unlock().await.unwrap();
}

/// No channel stays subscribed once the last waiter has left.
pub async fn channels_are_unsubscribed_after_waiters_leave(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("channels");
    let g = c1.mutex(&name).lock().await.unwrap();
    let m2 = c2.mutex(&name);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let m = m2.clone();
            tokio::spawn(async move {
                let got = m.try_lock_for(secs(10), None).await.unwrap();
                let g = got.expect("each waiter gets the lock in turn");
                g.unlock().await.unwrap();
            })
        })
        .collect();
    // A store that waiters wait inside answers their first attempt only when their
    // slice of waiting ends: they subscribe only then, if the lock is still busy.
    if !fx.backend().await.capabilities().waits_in_store {
        assert!(
            eventually(secs(2), || async {
                !fx.subscribed_channels().await.is_empty()
            })
            .await,
            "waiters never subscribed"
        );
    }
    g.unlock().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    // A waiter that gives up leaves too.
    let g = c1.mutex(&name).lock().await.unwrap();
    assert!(m2.try_lock_for(ms(100), None).await.unwrap().is_none());
    g.unlock().await.unwrap();
    assert!(
        eventually(secs(2), || async {
            fx.subscribed_channels().await.is_empty()
        })
        .await,
        "channels still subscribed: {:?}",
        fx.subscribed_channels().await
    );
}

/// A starving waiter reserves the lock's next free moment: a newcomer cannot overtake it,
/// a waiter that has waited longer takes the reservation over, and a reservation whose
/// waiter went away lapses on its own.
pub async fn starving_waiter_goes_before_newcomers(fx: &dyn Fixture) {
    use lock_core::AcquireRequest;
    use lock_core::backend::Acquire;

    let backend = fx.backend().await;
    let name = LockName::new(&unique("starving")).unwrap();
    let owner = |who: &str| LockRef::new(LockKind::Mutex, name.clone(), Owner::new("test", who));
    let (holder, young, old, newcomer) =
        (owner("holder"), owner("young"), owner("old"), owner("new"));
    let lease = secs(5);
    // Every call is a new request (its own id): reusing one would be a retry.
    let plain = || AcquireRequest::new(lease);
    let starving = |waited_ms| plain().waiting(Duration::from_millis(waited_ms), true);
    let acquired = |reply: Acquire| matches!(reply, Acquire::Acquired { .. });
    let reserved = |reply: Acquire| matches!(reply, Acquire::Busy { reserved: true, .. });

    // Takes the lock for `who`; the grant's id, to release it by.
    let take = |who: LockRef, request: AcquireRequest| {
        let backend = Arc::clone(&backend);
        async move { acquired(backend.acquire(&who, request).await.unwrap()).then_some(request.id) }
    };
    let release = |who: LockRef, grant: Option<RequestId>| {
        let backend = Arc::clone(&backend);
        async move {
            let grant = grant.expect("the lock was taken");
            let release = lock_core::ReleaseRequest::new(lease, grant);
            backend.release(&who, release).await.unwrap();
        }
    };

    let held = take(holder.clone(), plain()).await;
    assert!(held.is_some());
    // Two starving waiters find it busy; the one waiting longer holds the reservation.
    assert!(!acquired(
        backend.acquire(&young, starving(20)).await.unwrap()
    ));
    assert!(!acquired(
        backend.acquire(&old, starving(500)).await.unwrap()
    ));
    release(holder.clone(), held).await;
    let reply = backend.acquire(&newcomer, plain()).await.unwrap();
    assert!(
        reserved(reply),
        "a newcomer overtook a starving waiter: {reply:?}"
    );
    assert!(reserved(
        backend.acquire(&young, starving(30)).await.unwrap()
    ));
    let held = take(old.clone(), starving(510)).await;
    assert!(held.is_some());
    release(old.clone(), held).await;

    // The young waiter reserves next, then goes away: its reservation lapses.
    let held = take(holder.clone(), plain()).await;
    assert!(held.is_some());
    assert!(!acquired(
        backend.acquire(&young, starving(40)).await.unwrap()
    ));
    release(holder.clone(), held).await;
    assert!(reserved(backend.acquire(&newcomer, plain()).await.unwrap()));
    let lapsed = timeout(secs(2), async {
        loop {
            if let Some(grant) = take(newcomer.clone(), plain()).await {
                break grant;
            }
            sleep(ms(10)).await;
        }
    })
    .await;
    assert!(
        lapsed.is_ok(),
        "an abandoned reservation kept the lock free but unusable"
    );
    release(newcomer.clone(), lapsed.ok()).await;
}

/// A bounded wait rides out a store it cannot reach for a while shorter than its
/// deadline: it asks again until the store answers, and takes the free lock then
/// (issue 48: `acquire().wait(120 s)` failed after the 5 s retry window). Here every
/// attempt fails for the first 600 ms of a 5 s wait, with a 100 ms retry window.
pub async fn a_bounded_wait_rides_out_an_outage_shorter_than_its_deadline(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .retry_window(ms(100))
        .build()
        .unwrap();
    let name = unique("outage");
    faulty.set(crate::faulty::AcquireFault::FailBeforeSending);
    let refused = locks.mutex(&name).try_lock().await;
    assert!(refused.is_err(), "a try does not wait out an outage");
    let waiting = {
        let (locks, name) = (locks.clone(), name.clone());
        tokio::spawn(async move { locks.mutex(&name).acquire().wait(secs(5)).await })
    };
    sleep(ms(600)).await;
    faulty.set(crate::faulty::AcquireFault::None);
    let acquired = timeout(secs(10), waiting)
        .await
        .expect("the wait ends")
        .unwrap();
    assert!(
        acquired.as_ref().is_ok_and(lock_core::Guard::is_held),
        "the bounded wait gave up during the outage: {acquired:?}"
    );
}
