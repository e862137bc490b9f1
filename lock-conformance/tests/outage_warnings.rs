//! An outage is reported, not shouted: while the server cannot be reached, each kind of
//! repeated failure (a renewal, a reconnection, the notification connection) is warned
//! of at most once every 5 s, with how many were held back, while the loss of each lock
//! is still warned of. Before, a 4 s outage made about 30 warnings.
//!
//! Each test runs on a current-thread runtime, so that every task of the library runs
//! on the thread whose events it collects.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lock_conformance::logs::Logs;
use lock_core::{Backend, Locks};
use lock_testkit::{FaultProxy, RedisServer};
use tracing::Level;

async fn outage(connect: impl AsyncFn(&str) -> Arc<dyn Backend>) {
    let server = RedisServer::start().await;
    let address = |port: u16| format!("127.0.0.1:{port}").parse().expect("an address");
    let proxy = FaultProxy::start(address(server.port())).await;
    let (logs, _collecting) = Logs::capture();
    let holder = Locks::builder(connect(&proxy.url()).await)
        .watchdog_lease(Duration::from_millis(900))
        .build()
        .expect("valid settings");
    let waiter = Locks::new(connect(&proxy.url()).await);
    let guard = holder.mutex("outage").lock().await.expect("locked");
    let waiting = tokio::spawn(async move {
        let mutex = waiter.mutex("outage");
        // Busy, then unreachable: either way it gives up within its wait.
        let outcome = mutex.acquire().wait(Duration::from_secs(4)).await;
        assert!(
            outcome.is_err(),
            "the lock was held or unreachable throughout"
        );
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Down: new connections are refused, the live ones cut.
    proxy.redirect(address(lock_testkit::free_port()));
    for kind in ["normal", "pubsub"] {
        let killed: i64 = server.command(&["CLIENT", "KILL", "TYPE", kind]).await;
        assert!(killed >= 1, "no {kind} connection to cut");
    }
    tokio::time::sleep(Duration::from_secs(4)).await;
    proxy.redirect(address(server.port()));
    waiting.await.expect("the waiter ends");
    assert!(!guard.is_held(), "the lease ran out in the outage");
    let mut warned: BTreeMap<String, usize> = BTreeMap::new();
    for logged in logs.all() {
        if logged.level <= Level::WARN {
            *warned.entry(logged.message).or_default() += 1;
        }
    }
    assert!(
        warned.keys().any(|message| message.contains("lock lost")),
        "the lost lock was not reported: {warned:?}"
    );
    assert!(
        warned.values().all(|&count| count == 1),
        "a warning repeated within 5 s: {warned:?}"
    );
    assert!(
        warned.len() <= 6,
        "more kinds of warning than failures: {warned:?}"
    );
}

#[tokio::test]
async fn an_outage_of_the_redis_adapter_warns_once_per_kind() {
    outage(async |url: &str| lock_redis::connect_backend(url).await.expect("connect")).await;
}

#[tokio::test]
async fn an_outage_of_the_fred_adapter_warns_once_per_kind() {
    outage(async |url: &str| lock_fred::connect_backend(url).await.expect("connect")).await;
}
