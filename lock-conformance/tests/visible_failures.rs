//! Background failures are visible: a release nobody awaits that fails, a renewal that
//! fails and the loss of the lock that follows each emit a `warn` event (they used to
//! vanish in `let _ =`). [`Logs::global`] is this test binary's collector.

use std::sync::Arc;
use std::time::Duration;

use lock_conformance::faulty::FaultyBackend;
use lock_conformance::logs::Logs;
use lock_core::Locks;
use lock_core::memory::MemoryBackend;

/// Waits up to 2 s for a recorded warning mentioning every one of `words`.
async fn logged(words: &[&str]) -> bool {
    Logs::global().warned(words, Duration::from_secs(2)).await
}

/// Every event so far, for a failure's message.
fn lines() -> Vec<String> {
    Logs::global()
        .all()
        .into_iter()
        .map(|logged| logged.line)
        .collect()
}

/// Installs this binary's global collector.
fn record() {
    drop(Logs::global());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_whose_release_fails_is_reported() {
    record();
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    // A failed release is sent again for the retry window before it is reported.
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .retry_window(Duration::from_millis(200))
        .build()
        .unwrap();
    let guard = locks.mutex("visible:dropped").lock().await.unwrap();
    faulty.fail_releases(true);
    drop(guard);
    assert!(
        logged(&["visible:dropped", "a dropped guard", "release not sent"]).await,
        "no warning for a dropped guard's failed release: {:?}",
        lines()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_renewals_and_the_loss_that_follows_are_reported() {
    record();
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .unwrap();
    let guard = locks.mutex("visible:renewal").lock().await.unwrap();
    faulty.fail_renewals(true);
    let lost = tokio::time::timeout(Duration::from_secs(2), guard.lost()).await;
    assert!(
        lost.is_ok(),
        "renewals kept failing, yet the guard was not lost"
    );
    assert!(
        logged(&["visible:renewal", "renewal not sent"]).await,
        "no warning for a failed renewal"
    );
    assert!(
        logged(&["visible:renewal", "lock lost"]).await,
        "no warning for the lost lock"
    );
}

/// Grants held back by the restart quarantine are reported, distinctly from a lock that
/// is merely busy: a fresh server (no epoch yet) waits one quarantine before its first
/// grant, as after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_restart_quarantine_is_reported() {
    record();
    let server = lock_testkit::RedisServer::start().await;
    let backend = lock_redis::Connector::new(server.url())
        .settings(
            lock_redis::ConnectorSettings::default().restart_quarantine(Duration::from_secs(2)),
        )
        .connect()
        .await
        .expect("connect");
    let locks = Locks::new(Arc::new(backend));
    let got = locks
        .mutex("quarantined")
        .try_lock()
        .await
        .expect("a busy answer");
    assert!(got.is_none(), "a lock granted within the quarantine");
    assert!(
        logged(&["restart quarantine active", "quarantined"]).await,
        "no event: {:?}",
        lines()
    );
}

/// A client dropped while a release still runs, without `shutdown()`, says so: a process
/// that exits right after would cut the release short. One that shut down says nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_dropped_with_releases_running_is_reported() {
    record();
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    faulty.delay_releases(Duration::from_secs(2));
    let locks = Locks::new(Arc::new(faulty.clone()));
    let shut = Locks::new(Arc::new(faulty.clone()));
    drop(locks.mutex("visible:unshut").lock().await.unwrap());
    drop(shut.mutex("visible:shut").lock().await.unwrap());
    let clone = locks.clone();
    drop(locks);
    assert!(
        lines()
            .iter()
            .all(|line| !line.contains("dropped with background work")),
        "reported while a clone of the client still lives"
    );
    drop(clone);
    assert!(
        logged(&["dropped with background work", "jobs="]).await,
        "no warning for a client dropped with a release running: {:?}",
        lines()
    );
    shut.shutdown().await;
    let before = lines().len();
    drop(shut);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        lines()[before..]
            .iter()
            .all(|line| !line.contains("dropped with background work")),
        "a client that shut down was reported: {:?}",
        lines()
    );
}
