//! Replica acknowledgement: an acquisition no replica confirmed is a typed error and
//! leaves nothing held; with a replica, locks work as usual.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lock_core::ErrorKind;
use lock_redis::Connector;
use lock_testkit::{RedisSentinel, RedisServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_replica_an_acquisition_is_not_replicated_and_given_back() {
    let server = RedisServer::start().await;
    let acked = Connector::new(server.url())
        .replica_ack(1, Duration::from_millis(200))
        .locks()
        .await
        .unwrap();
    let err = acked
        .mutex("ack:none")
        .lock()
        .await
        .expect_err("no replica confirms");
    assert_eq!(err.kind(), ErrorKind::NotReplicated, "{err}");
    assert!(err.to_string().contains("0 of 1 replicas"), "{err}");
    let plain = lock_redis::connect(&server.url()).await.unwrap();
    let guard = plain.mutex("ack:none").try_lock().await.unwrap();
    assert!(guard.is_some(), "the unconfirmed acquisition was left held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_replica_every_lock_kind_works() {
    let deployment = RedisSentinel::start().await;
    let locks = Connector::new(deployment.url())
        .replica_ack(1, Duration::from_secs(1))
        .locks()
        .await
        .unwrap();
    let guard = locks.mutex("ack:m").lock().await.unwrap();
    guard.unlock().await.unwrap();
    locks
        .fair_mutex("ack:f")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    locks
        .rw_lock("ack:rw")
        .read()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    // The acquisition reached the replica before the call returned.
    let held = locks.rw_lock("ack:rw").write().lock().await.unwrap();
    let replica = deployment.replica().unwrap();
    let fields: Vec<String> = replica.command(&["HKEYS", "ack:rw"]).await;
    assert!(fields.contains(&"mode".to_owned()), "{fields:?}");
    held.unlock().await.unwrap();
}
