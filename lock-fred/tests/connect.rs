//! Connecting through the ways only this adapter has: a fred client or pool the
//! application already has. URL forms, bad input, ACL, replica acknowledgement and TLS
//! are the adapter suite's (lock-conformance/tests/fred_adapter.rs).

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config};
use lock_core::ErrorKind;
use lock_fred::Connector;
use lock_testkit::{RedisCluster, RedisServer};

fn kind<T>(result: Result<T, lock_core::Error>) -> ErrorKind {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(err) => err.kind(),
    }
}

/// Takes and releases one lock through `locks`.
async fn round_trip(locks: &lock_core::Locks) {
    let guard = locks.mutex("connect:round-trip").lock().await.unwrap();
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn zero_settings_are_config_errors() {
    let url = "redis://127.0.0.1:1";
    let zero = Connector::new(url).connect_timeout(Duration::ZERO);
    assert_eq!(kind(zero.connect().await), ErrorKind::InvalidConfig);
    let zero = Connector::new(url).response_timeout(Duration::ZERO);
    assert_eq!(kind(zero.connect().await), ErrorKind::InvalidConfig);
    let zero = Connector::new(url).pool_size(0);
    assert_eq!(kind(zero.connect().await), ErrorKind::InvalidConfig);
    let sharded = Connector::new(url).publish_mode(lock_fred::PublishMode::Sharded);
    assert_eq!(kind(sharded.connect().await), ErrorKind::InvalidConfig);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_from_url_pool_client_and_pool() {
    let server = RedisServer::start().await;
    round_trip(&lock_fred::connect(&server.url()).await.unwrap()).await;
    let pooled = Connector::new(server.url())
        .pool_size(3)
        .locks()
        .await
        .unwrap();
    round_trip(&pooled).await;

    // An application's client, not connected yet: the connector connects it, and
    // leaves it open when the lock client is dropped.
    let config = Config::from_url(&server.url()).unwrap();
    let client = Builder::from_config(config.clone()).build().unwrap();
    let locks = Connector::from_client(client.clone())
        .locks()
        .await
        .unwrap();
    round_trip(&locks).await;
    drop(locks);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(client.is_connected(), "the application's client was closed");

    let pool = Builder::from_config(config).build_pool(2).unwrap();
    pool.init().await.unwrap();
    round_trip(&Connector::from_pool(pool).locks().await.unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_from_a_cluster_client() {
    let cluster = RedisCluster::start(3).await;
    let hosts: Vec<(String, u16)> = cluster
        .nodes()
        .iter()
        .map(|node| ("127.0.0.1".to_owned(), node.port()))
        .collect();
    let config = Config {
        server: fred::prelude::ServerConfig::new_clustered(hosts),
        ..Config::default()
    };
    let client = Builder::from_config(config).build().unwrap();
    let locks = Connector::from_client(client).locks().await.unwrap();
    round_trip(&locks).await;
}
