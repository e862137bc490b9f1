//! One client's background work across runtimes and at shutdown (code review, high 1 and
//! medium 10): a client that outlives the runtime it was built in keeps renewing and
//! waking its waiters, and `Locks::shutdown` sends every release before the runtime goes.

use std::sync::Arc;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{ErrorKind, Holder, Locks};
use tokio::runtime::{Builder, Runtime};

fn runtime() -> Runtime {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

const LEASE: Duration = Duration::from_millis(600);

fn holder(id: &str) -> Holder {
    Holder::new(id).expect("a valid holder id")
}

/// A client used from a second runtime after the first one, where its watchdog and its
/// notification worker ran, shut down. Before the supervisor, the watchdog's `running`
/// flag stayed set (no renewal ever again: `late` was lost after one lease) and the
/// notification worker was gone for good (every wait failed at once).
#[test]
fn a_client_outlives_the_runtime_it_was_built_in() {
    let first = runtime();
    let locks = first.block_on(async {
        Locks::builder(Arc::new(MemoryBackend::new()))
            .watchdog_lease(LEASE)
            .build()
            .expect("a client")
    });
    let early = first.block_on(async {
        let early = locks.mutex("early").lock().await.expect("early");
        // A wait subscribes, which starts the notification worker on this runtime.
        let blocker = locks
            .mutex("busy")
            .with_holder(holder("blocker"))
            .lock()
            .await
            .expect("blocker");
        let waited = locks
            .mutex("busy")
            .with_holder(holder("waiter"))
            .try_lock_for(Duration::from_millis(50), None)
            .await
            .expect("a wait that runs out");
        assert!(waited.is_none());
        blocker.unlock().await.expect("unlock");
        early
    });
    drop(first);

    let second = runtime();
    second.block_on(async {
        let late = locks.mutex("late").lock().await.expect("late");
        tokio::time::sleep(LEASE * 4).await;
        assert!(
            late.is_held(),
            "a hold taken after the first runtime went was not renewed"
        );
        assert!(
            early.is_held(),
            "a hold from the first runtime was not renewed"
        );

        // A release wakes a waiter at once, well before the holder's 10 s lease.
        let held = locks
            .mutex("contended")
            .with_holder(holder("a"))
            .lock_with_lease(Duration::from_secs(10))
            .await
            .expect("held");
        let waiter = {
            let lock = locks.mutex("contended").with_holder(holder("b"));
            tokio::spawn(async move { lock.try_lock_for(Duration::from_secs(5), None).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        held.unlock().await.expect("unlock");
        let woken = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("the waiter was woken by the release, not by the lease")
            .expect("the waiter task")
            .expect("the wait");
        assert!(woken.is_some());
        late.unlock().await.expect("unlock late");
        early.unlock().await.expect("unlock early");
    });
}

/// A guard dropped just before `main` returns: its release runs in a task, which the
/// runtime would drop as it stops. `shutdown` waits for it, so the lock is free at once
/// afterwards (without it the lock stays held for the rest of the lease: this test
/// drops the runtime right after, and finds the lock held).
#[test]
fn shutdown_sends_the_releases_of_dropped_guards() {
    let store = MemoryBackend::new();
    let main = runtime();
    let locks = main.block_on(async {
        let locks = Locks::new(Arc::new(store.clone()));
        let guard = locks.mutex("main").lock().await.expect("lock");
        drop(guard);
        locks.shutdown().await;
        locks
    });
    drop(main);
    assert!(
        store.held_locks().is_empty(),
        "a dropped guard's release was lost with the runtime"
    );
    drop(locks);
}

/// After `shutdown` the client takes no new locks; releases of guards still alive go on.
#[test]
fn a_shut_down_client_takes_no_new_locks() {
    let main = runtime();
    main.block_on(async {
        let locks = Locks::new(Arc::new(MemoryBackend::new()));
        let alive = locks.mutex("alive").lock().await.expect("lock");
        locks.shutdown().await;
        let err = locks
            .mutex("new")
            .try_lock()
            .await
            .expect_err("a shut-down client took a lock");
        assert_eq!(err.kind(), ErrorKind::ShutDown, "{err}");
        assert!(alive.is_held());
        alive
            .unlock()
            .await
            .expect("a guard alive at shutdown still releases");
        assert!(!locks.mutex("alive").is_locked().await.expect("inspect"));
    });
}

/// After `shutdown` nothing new reaches the store, whatever the kind of object: no
/// permits set, added, drained or taken, no latch set or counted down, no force-unlock
/// (newcomer review 4, item 14: the semaphores still wrote). Reads still go.
#[test]
fn a_shut_down_client_starts_nothing_new_on_any_kind() {
    let main = runtime();
    main.block_on(async {
        let locks = Locks::new(Arc::new(MemoryBackend::new()));
        let set = locks.semaphore("pool").try_set_permits(2).await;
        assert!(set.expect("before shutdown"));
        locks.shutdown().await;
        let refused = |outcome: Result<(), lock_core::Error>, what: &str| {
            let err = outcome.expect_err(what);
            assert_eq!(err.kind(), ErrorKind::ShutDown, "{what}: {err}");
        };
        let pool = locks.semaphore("pool");
        refused(pool.try_set_permits(3).await.map(drop), "set permits");
        refused(pool.add_permits(1).await, "add permits");
        refused(pool.drain().await.map(drop), "drain");
        refused(pool.try_acquire(1).await.map(drop), "take permits");
        let slots = locks.expirable_semaphore("slots");
        refused(
            slots.try_set_permits(1).await.map(drop),
            "set expirable permits",
        );
        let latch = locks.count_down_latch("ready");
        refused(latch.try_set_count(1).await.map(drop), "set a count");
        refused(latch.count_down().await, "count down");
        refused(latch.delete().await.map(drop), "delete a latch");
        refused(
            locks.mutex("x").force_unlock().await.map(drop),
            "force-unlock",
        );
        assert_eq!(pool.available().await.expect("reads still go"), 2);
        assert_eq!(latch.count().await.expect("reads still go"), 0);
    });
}
