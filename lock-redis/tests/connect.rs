//! Connecting through the ways only this adapter has: a connection manager, a bb8 pool, a
//! cluster connection. URL forms, bad input, ACL, replica acknowledgement and TLS are the
//! adapter suite's (lock-conformance/tests/redis_adapter.rs).

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lock_core::ErrorKind;
use lock_redis::Connector;
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
async fn zero_timeouts_are_config_errors() {
    let zero = Connector::new("redis://127.0.0.1:1").connect_timeout(Duration::ZERO);
    assert_eq!(kind(zero.connect().await), ErrorKind::InvalidConfig);
    let zero = Connector::new("redis://127.0.0.1:1").response_timeout(Duration::ZERO);
    assert_eq!(kind(zero.connect().await), ErrorKind::InvalidConfig);
    let sharded =
        Connector::new("redis://127.0.0.1:1").publish_mode(lock_redis::PublishMode::Sharded);
    assert_eq!(kind(sharded.connect().await), ErrorKind::InvalidConfig);
}

#[tokio::test]
async fn connects_from_url_manager_and_pool() {
    let server = RedisServer::start().await;
    round_trip(&lock_redis::connect(&server.url()).await.unwrap()).await;

    let client = redis::Client::open(server.url()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    round_trip(
        &Connector::from_manager(client.clone(), manager)
            .locks()
            .await
            .unwrap(),
    )
    .await;

    let pool = bb8::Pool::builder()
        .max_size(4)
        .build(bb8_redis::RedisConnectionManager::new(server.url()).unwrap())
        .await
        .unwrap();
    round_trip(&Connector::from_pool(client, pool).locks().await.unwrap()).await;
}

#[tokio::test]
async fn connects_to_a_cluster_by_url_and_by_connection() {
    let cluster = RedisCluster::start(3).await;
    let nodes: Vec<String> = cluster
        .nodes()
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    let url = format!("redis+cluster://{}", nodes.join(","));
    round_trip(&lock_redis::connect(&url).await.unwrap()).await;

    let connection = redis::cluster::ClusterClient::new(cluster.urls())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let locks = Connector::from_cluster_connection(cluster.urls(), connection)
        .locks()
        .await
        .unwrap();
    round_trip(&locks).await;
}
