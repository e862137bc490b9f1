//! Faults on a real PostgreSQL the tests start: the query connections terminated while a
//! waiter waits, a server restart while a lock is held, and a paused server. In each,
//! at most one guard believes it holds the lock, and the lock is neither lost while the
//! server keeps it nor kept after its lease.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Backend, ErrorKind, Guard, LockKind, LockName, LockRef, Locks, Owner};
use lock_postgres::{Connector, QUERIES_APPLICATION_NAME};
use lock_testkit::{PostgresServer, postgres_client};
use tokio::time::{Instant, sleep, timeout};

/// A client of `server` whose watchdog lease is `lease`.
async fn client(server: &PostgresServer, lease: Duration) -> Locks {
    let backend = Connector::new(server.url())
        .pool_size(2)
        .connect()
        .await
        .expect("connects");
    Locks::builder(Arc::new(backend))
        .watchdog_lease(lease)
        .build()
        .expect("valid settings")
}

/// Waits for `waiter` to end with a guard, at most `within`.
async fn served(waiter: tokio::task::JoinHandle<Guard>, within: Duration) -> Guard {
    timeout(within, waiter)
        .await
        .expect("the waiter is served in time")
        .expect("the waiter's task")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_served_after_every_query_connection_is_terminated() {
    let server = PostgresServer::start().await;
    let lease = Duration::from_secs(5);
    let (a, b) = (client(&server, lease).await, client(&server, lease).await);
    let held = a.mutex("terminated").lock().await.unwrap();
    let mutex = b.mutex("terminated");
    let waiter = tokio::spawn(async move { mutex.lock().await.unwrap() });
    sleep(Duration::from_millis(200)).await;
    let admin = postgres_client(&server.url()).await;
    let terminated: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE application_name = $1) AS t",
            &[&QUERIES_APPLICATION_NAME],
        )
        .await
        .unwrap()
        .get(0);
    assert!(terminated >= 2, "terminated {terminated} query connections");
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    assert!(held.is_held());
    // The holder's next statement finds its connection gone and is sent again on a new
    // one; the waiter hears the release.
    let released = Instant::now();
    timeout(Duration::from_secs(5), held.unlock())
        .await
        .expect("the release is answered")
        .expect("the release goes through on a new connection");
    let guard = served(waiter, Duration::from_secs(5)).await;
    assert!(
        released.elapsed() < lease,
        "the waiter waited out the lease instead of hearing the release"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_across_a_server_restart_stays_held() {
    let mut server = PostgresServer::start().await;
    // Longer than the restart takes, so that the watchdog renews it afterwards.
    let lease = Duration::from_secs(8);
    let (a, b) = (client(&server, lease).await, client(&server, lease).await);
    let held = a.mutex("restarted").lock().await.unwrap();
    let token_before = held.valid_for();
    server.restart().await;
    // The lock is a row: after the restart it is still the holder's.
    let mutex = b.mutex("restarted");
    let taken = timeout(Duration::from_secs(10), async {
        loop {
            match mutex.try_lock().await {
                Ok(taken) => break taken,
                Err(_) => sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await
    .expect("the server answers again");
    assert!(
        taken.is_none(),
        "another client took a lock held across a restart"
    );
    assert!(held.is_held(), "the holder lost a lock the server kept");
    assert!(token_before.is_some());
    // Past the lease the watchdog had to renew it on the restarted server.
    sleep(lease).await;
    assert!(
        held.is_held(),
        "the watchdog did not renew after the restart"
    );
    assert!(mutex.try_lock().await.unwrap().is_none());
    held.unlock().await.expect("released after the restart");
    mutex
        .try_lock()
        .await
        .unwrap()
        .expect("free once released")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_keeps_a_lease_that_outlives_the_pause_and_ends_one_that_does_not() {
    let server = PostgresServer::start().await;
    let lease = Duration::from_millis(600);
    let (a, b) = (client(&server, lease).await, client(&server, lease).await);

    // A pause shorter than the lease: the hold lives on, renewed after the pause.
    let kept = a.mutex("paused-short").lock().await.unwrap();
    server.pause();
    sleep(lease / 4).await;
    server.resume();
    sleep(lease * 2).await;
    assert!(
        kept.is_held(),
        "a pause shorter than the lease cost the hold"
    );
    assert!(b.mutex("paused-short").try_lock().await.unwrap().is_none());
    kept.unlock().await.unwrap();

    // A pause of several leases: the holder cannot renew, its guard says so when its
    // lease ends, and only then may another client take the lock.
    let lost = a.mutex("paused-long").lock().await.unwrap();
    server.pause();
    sleep(lease * 3).await;
    assert!(
        !lost.is_held(),
        "a guard outlived its lease while the server could not renew it"
    );
    server.resume();
    let mutex = b.mutex("paused-long");
    let taken = timeout(Duration::from_secs(5), mutex.lock())
        .await
        .expect("the lock comes free after the pause")
        .unwrap();
    assert!(!lost.is_held(), "two guards held the lock at once");
    taken.unlock().await.unwrap();
    drop(lost);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_to_a_paused_server_times_out_and_the_pool_recovers() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url())
        .pool_size(2)
        .response_timeout(Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let lock = LockRef::new(
        LockKind::Mutex,
        LockName::new("paused-statement").unwrap(),
        Owner::new("client", "holder"),
    );
    backend.inspect(&lock).await.unwrap();
    server.pause();
    let started = Instant::now();
    let outcome = timeout(Duration::from_secs(5), backend.inspect(&lock))
        .await
        .expect("a statement to a paused server ends");
    let err = outcome.expect_err("a paused server does not answer");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "gave up only after {:?}",
        started.elapsed()
    );
    server.resume();
    // The connection that waited on the paused server left the pool; statements go
    // through again.
    for _ in 0..4 {
        timeout(Duration::from_secs(5), backend.inspect(&lock))
            .await
            .expect("answered in time after the pause")
            .expect("answers after the pause");
    }
}
