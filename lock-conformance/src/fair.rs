//! Scenarios for the fair mutex: arrival order across clients, dead and departing
//! waiters, renewal, fencing and force-unlock, hand-over to the first waiter.
//! Re-exported through [`crate::scenarios`].

use crate::timing::{ms, secs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lock_core::backend::{Acquire, Release, ReleaseRequest};
use lock_core::{AcquireRequest, LockKind, LockName, LockRef, Locks, Owner};
use tokio::time::{sleep, timeout};

use crate::Fixture;
use crate::family::client_with;
use crate::faulty::FaultyBackend;
use crate::scenarios::{counted_client, handover_gap, spawn_waiter, unique, watchdog_lease};

/// Waiters of a fair lock, each its own client, each arriving once the one before it
/// is queued, get the lock in exactly their arrival order.
pub async fn fair_order_is_arrival_order(fx: &dyn Fixture) {
    let name = unique("fair-order");
    let holder = fx.client().await;
    let first = holder.fair_mutex(&name).lock().await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let counted = FaultyBackend::new(fx.backend().await);
        let locks = Locks::new(Arc::new(counted.clone()));
        let (name, order) = (name.clone(), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = locks.fair_mutex(&name).lock().await.unwrap();
            order.lock().unwrap().push(i);
            sleep(ms(2)).await;
            guard.unlock().await.unwrap();
        }));
        // A waiter asks again once subscribed, so a second request means the first was
        // answered: the waiter is queued. (Fixed pauses between arrivals let a loaded
        // machine deliver a later waiter's first request first.)
        let queued = timeout(secs(10), counted.asked(2)).await;
        assert!(queued.is_ok(), "waiter {i} never asked again");
    }
    first.unlock().await.unwrap();
    for waiter in waiters {
        timeout(secs(10), waiter)
            .await
            .expect("every waiter is served")
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
}

/// 500 waiters of one fair lock, spread over 5 clients, all get it.
pub async fn fair_lock_serves_500_waiters(fx: &dyn Fixture) {
    let name = unique("fair-500");
    let served = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let locks = fx.client().await;
        for _ in 0..100 {
            let (locks, name) = (locks.clone(), name.clone());
            let (served, inside) = (Arc::clone(&served), Arc::clone(&inside));
            tasks.push(tokio::spawn(async move {
                let guard = locks.fair_mutex(&name).lock().await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                inside.fetch_sub(1, Ordering::SeqCst);
                served.fetch_add(1, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }));
        }
    }
    let all = futures_util::future::join_all(tasks);
    let results = timeout(secs(60), all)
        .await
        .unwrap_or_else(|_| panic!("only {} of 500 served", served.load(Ordering::SeqCst)));
    for result in results {
        result.unwrap();
    }
    assert_eq!(served.load(Ordering::SeqCst), 500);
}

/// A queued waiter that died (stopped asking) holds the queue up by at most its
/// deadline; a `try_lock` never queues.
pub async fn fair_dead_waiter_is_skipped_after_its_deadline(fx: &dyn Fixture) {
    let waiter_timeout = ms(300);
    let name = unique("fair-dead");
    let holder = fx.client().await;
    let held = holder.fair_mutex(&name).lock().await.unwrap();

    // A waiter that queues once and dies.
    let backend = fx.backend().await;
    let ghost = LockRef::new(
        LockKind::Fair,
        LockName::new(&name).unwrap(),
        Owner::new("ghost", "task-0"),
    );
    let queued = AcquireRequest::new(secs(30)).enqueue(waiter_timeout);
    let reply = backend.acquire(&ghost, queued).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");

    // A try from another client does not queue: after the release it would be first.
    let other = fx.client().await;
    assert!(other.fair_mutex(&name).try_lock().await.unwrap().is_none());

    let live_counted = FaultyBackend::new(fx.backend().await);
    let live = Locks::builder(Arc::new(live_counted.clone()))
        .fair_waiter_timeout(waiter_timeout)
        .build()
        .expect("valid client settings");
    // The live waiter is served once the dead one lapses.
    let waiting = spawn_waiter(live.fair_mutex(&name));
    // Queued behind the dead waiter: a second request means the first was answered.
    live_counted.listening().await;
    let delay = handover_gap(held, waiting, secs(5)).await;
    assert!(
        delay <= waiter_timeout + ms(400),
        "a dead waiter held the queue up for {delay:?}"
    );
}

/// A waiter that gives up leaves the queue at once: the one behind it does not wait for
/// its deadline.
pub async fn fair_waiter_that_gives_up_leaves_the_queue(fx: &dyn Fixture) {
    let name = unique("fair-leave");
    let holder = fx.client().await;
    let held = holder.fair_mutex(&name).lock().await.unwrap();
    let (quitter, quitter_counted) = counted_client(fx).await;
    let quitter = quitter.fair_mutex(&name);
    // Its wait is long enough for it to subscribe and ask again (which is how the test
    // knows it is queued) on a loaded machine: with 100 ms a cluster's subscription once
    // took longer, and the quitter gave up after one request.
    let quitting = tokio::spawn(async move {
        let outcome = quitter.try_lock_for(secs(2), None).await;
        outcome.map(|guard| guard.is_none())
    });
    // The quitter is queued first, the waiter behind it.
    quitter_counted.listening().await;
    let (next, counted) = counted_client(fx).await;
    let waiting = spawn_waiter(next.fair_mutex(&name));
    counted.listening().await;
    assert!(
        quitting.await.unwrap().unwrap(),
        "the quitter got a held lock"
    );
    let gap = handover_gap(held, waiting, secs(2)).await;
    assert!(gap < ms(500), "the waiter behind a quitter waited {gap:?}");
}

/// The fair lock is renewed by the watchdog, fenced, and force-unlocked like the others:
/// a force-unlock wakes its queue.
pub async fn fair_lock_is_renewed_fenced_and_force_unlocked(fx: &dyn Fixture) {
    let lease = watchdog_lease();
    let locks = client_with(fx, |b| b.watchdog_lease(lease).fencing(true)).await;
    let name = unique("fair-wd");
    let first = locks.fair_mutex(&name).lock().await.unwrap();
    sleep(lease * 3).await;
    assert!(first.is_held(), "a fair hold expired under the watchdog");
    let other = fx.client().await;
    assert!(other.fair_mutex(&name).try_lock().await.unwrap().is_none());
    let token = first.fencing_token().unwrap();
    first.unlock().await.unwrap();
    let second = locks.fair_mutex(&name).lock().await.unwrap();
    assert!(second.fencing_token().unwrap() > token);
    second.unlock().await.unwrap();

    let a = fx.client().await;
    let (b, counted) = counted_client(fx).await;
    let fair_name = unique("force-fair");
    let held = a.fair_mutex(&fair_name).lock().await.unwrap();
    let fair = b.fair_mutex(&fair_name);
    let waiting = tokio::spawn(async move { fair.lock().await.map(drop) });
    counted.listening().await;
    let admin = fx.client().await;
    assert!(admin.fair_mutex(&fair_name).force_unlock().await.unwrap());
    timeout(secs(2), waiting)
        .await
        .expect("the queued waiter is woken by the force-unlock")
        .unwrap()
        .unwrap();
    drop(held);
}

/// A fair lock that comes free goes to the first waiter in the queue: a newcomer's try
/// is refused while that waiter keeps its place, and the waiter then gets the lock.
pub async fn a_free_fair_lock_waits_for_its_first_waiter(fx: &dyn Fixture) {
    let name = unique("fair-first");
    let holder = fx.client().await;
    let held = holder.fair_mutex(&name).lock().await.unwrap();
    // The first waiter queues through the backend and is slow to come back.
    let backend = fx.backend().await;
    let first = LockRef::new(
        LockKind::Fair,
        LockName::new(&name).unwrap(),
        Owner::new("first", "task-0"),
    );
    let queued = AcquireRequest::new(secs(30)).enqueue(secs(5));
    let reply = backend.acquire(&first, queued).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    held.unlock().await.unwrap();
    let newcomer = fx.client().await;
    assert!(
        newcomer
            .fair_mutex(&name)
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "a newcomer took the lock before the first waiter"
    );
    // Its next attempt: under the acquisition's id where the backend hands locks over
    // (the release may have made it the holder already), else under an id of its own.
    let grant = if backend.capabilities().hands_over {
        queued
    } else {
        queued.fresh_id()
    };
    let reply = backend.acquire(&first, grant).await.unwrap();
    assert!(
        matches!(reply, Acquire::Acquired { holds: 1, .. }),
        "{reply:?}"
    );
    let released = backend
        .release(&first, ReleaseRequest::new(secs(30), grant.id))
        .await
        .unwrap();
    assert_eq!(released, Release::Released);
}

/// A cancellation names the acquisition that gives up. A holder that gave up waiting
/// and asked again under its own identity has one place in the fair queue, its later
/// acquisition's; the earlier acquisition's cancellation, arriving late (sent in the
/// background), leaves that place alone, and the later acquisition is still served
/// first. Cancelled by owner, the place went and the waiter behind it was served first.
pub async fn a_late_cancellation_keeps_a_later_acquisitions_place(fx: &dyn Fixture) {
    let name = unique("fair-late-cancel");
    let holder = fx.client().await;
    let held = holder.fair_mutex(&name).lock().await.unwrap();
    let backend = fx.backend().await;
    let waiter = |owner: &str| {
        LockRef::new(
            LockKind::Fair,
            LockName::new(&name).unwrap(),
            Owner::new(owner, "task"),
        )
    };
    let (retrying, behind) = (waiter("retrying"), waiter("behind"));
    let place = secs(10);
    let gave_up = AcquireRequest::new(secs(30)).enqueue(place);
    let reply = backend.acquire(&retrying, gave_up).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    let behind_request = AcquireRequest::new(secs(30)).enqueue(place);
    let reply = backend.acquire(&behind, behind_request).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    let later = AcquireRequest::new(secs(30)).enqueue(place);
    let reply = backend.acquire(&retrying, later).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    backend.cancel_wait(&retrying, &gave_up).await.unwrap();
    held.unlock().await.unwrap();
    // Next attempts: under the acquisition's id where the backend hands locks over (the
    // release may have made it the holder already), else under a fresh one.
    let hands_over = backend.capabilities().hands_over;
    let next = |request: AcquireRequest| {
        if hands_over {
            request
        } else {
            request.fresh_id()
        }
    };
    let (later, behind_request) = (next(later), next(behind_request));
    let reply = backend.acquire(&retrying, later).await.unwrap();
    assert!(
        matches!(reply, Acquire::Acquired { holds: 1, .. }),
        "the later acquisition lost its place to a late cancellation: {reply:?}"
    );
    let reply = backend.acquire(&behind, behind_request).await.unwrap();
    assert!(
        matches!(reply, Acquire::Busy { .. }),
        "two holders: {reply:?}"
    );
    let release = ReleaseRequest::new(secs(30), later.id);
    assert_eq!(
        backend.release(&retrying, release).await.unwrap(),
        Release::Released
    );
    backend.cancel_wait(&behind, &behind_request).await.unwrap();
}
