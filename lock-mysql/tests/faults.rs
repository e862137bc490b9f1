//! A bad day on a real MariaDB the tests start: a login the server refuses, a server
//! killed and restarted while a lock is held and another client waits, and a paused
//! server. In each, the error says what happened, at most one guard believes it holds
//! the lock, and a waiter is served once the server is back.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{ErrorKind, Guard, Locks};
use lock_mysql::Connector;
use lock_testkit::MariaDbServer;
use tokio::time::{Instant, sleep, timeout};

/// A client of `url` whose watchdog lease is `lease`, with short timeouts.
async fn client(url: &str, lease: Duration) -> Locks {
    let backend = Connector::new(url)
        .pool_size(2)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(2))
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
async fn a_refused_login_is_a_configuration_error() {
    let server = MariaDbServer::start().await;
    let said = server.sql(
        "CREATE USER 'locker'@'%' IDENTIFIED BY 'right'; \
         GRANT ALL ON lock_test.* TO 'locker'@'%'",
    );
    assert!(said.trim().is_empty(), "{said}");
    let port = server.port();
    for (url, says) in [
        (
            format!("mysql://locker:wrong@127.0.0.1:{port}/lock_test"),
            "Access denied",
        ),
        (
            format!("mysql://root@127.0.0.1:{port}/no_such_db"),
            "Unknown database",
        ),
    ] {
        let err = Connector::new(&url).connect().await.expect_err(&url);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        assert!(!err.is_retryable(), "{url}: {err}");
        let chain = err.chain().to_string();
        assert!(chain.contains(says), "{url}: {chain}");
    }
    let right = format!("mysql://locker:right@127.0.0.1:{port}/lock_test");
    Connector::new(right)
        .connect()
        .await
        .expect("the right password connects");
}

/// A user that may not create tables, in a database without them, is told what to run
/// and grant; once a DBA made them, it connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_who_may_not_create_the_tables_is_told_what_to_run() {
    let server = MariaDbServer::start().await;
    let said = server.sql(
        "CREATE USER 'reader'@'%' IDENTIFIED BY 'pw'; \
         GRANT SELECT, INSERT, UPDATE, DELETE ON lock_test.* TO 'reader'@'%'",
    );
    assert!(said.trim().is_empty(), "{said}");
    let url = format!("mysql://reader:pw@127.0.0.1:{}/lock_test", server.port());
    let err = Connector::new(&url).connect().await.expect_err("no tables");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("Tables::create_sql"), "{err}");
    let said = server.sql(&lock_mysql::Tables::default().create_sql());
    assert!(said.trim().is_empty(), "{said}");
    let locks = Connector::new(&url)
        .locks()
        .await
        .expect("the tables are there");
    let guard = locks.mutex("made-by-a-dba").lock().await.unwrap();
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_held_across_a_server_restart_stays_held_and_its_waiter_is_served() {
    let mut server = MariaDbServer::start().await;
    // Longer than the restart takes, so that the watchdog renews it afterwards.
    let lease = Duration::from_secs(8);
    let (a, b) = (
        client(&server.url(), lease).await,
        client(&server.url(), lease).await,
    );
    let held = a.mutex("restart").lock().await.unwrap();
    let mutex = b.mutex("restart");
    let waiter = tokio::spawn(async move { mutex.lock().await.unwrap() });
    sleep(Duration::from_millis(200)).await;
    server.restart().await;
    // The hold was committed before the crash: the waiter must not get the lock.
    sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    assert!(held.is_held());
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
async fn a_paused_server_costs_a_bounded_wait_and_a_retryable_error() {
    let server = MariaDbServer::start().await;
    let locks = client(&server.url(), Duration::from_secs(5)).await;
    let held = locks.mutex("paused").lock().await.unwrap();
    held.unlock().await.unwrap();
    server.pause();
    let started = Instant::now();
    let err = timeout(Duration::from_secs(10), locks.mutex("paused").try_lock())
        .await
        .expect("the attempt is bounded");
    server.resume();
    let err = err.expect_err("a paused server grants nothing");
    assert!(err.is_retryable(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
    let guard = locks
        .mutex("paused")
        .lock()
        .await
        .expect("served once resumed");
    guard.unlock().await.unwrap();
}
