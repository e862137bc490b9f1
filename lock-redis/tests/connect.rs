//! Connecting: every way in works, and every bad input is a typed error in bounded time.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lock_core::ErrorKind;
use lock_redis::Connector;
use lock_testkit::{RedisCluster, RedisSentinel, RedisServer};
use tokio::time::Instant;

const SHORT: Duration = Duration::from_millis(500);

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

/// Connecting to `port` fails with a connection error well within the connect timeout.
async fn assert_connection_error_in_time(port: u16) {
    let started = Instant::now();
    let result = Connector::new(format!("redis://127.0.0.1:{port}"))
        .connect_timeout(SHORT)
        .connect()
        .await;
    assert_eq!(kind(result), ErrorKind::Connection);
    let took = started.elapsed();
    assert!(took < SHORT * 4, "took {took:?}");
}

#[tokio::test]
async fn bad_urls_are_config_errors_before_any_network() {
    for url in [
        "",
        "http://localhost",
        "redis://:notaport",
        "redis+cluster://",
        "not a url",
    ] {
        let started = Instant::now();
        assert_eq!(
            kind(lock_redis::connect(url).await),
            ErrorKind::InvalidConfig,
            "{url:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{url:?} took a while"
        );
    }
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
async fn refused_connection_is_a_connection_error() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert_connection_error_in_time(port).await;
}

#[tokio::test]
async fn silent_server_is_a_connection_error_within_the_timeout() {
    // Accepts connections and never answers: the handshake must not hang.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    assert_connection_error_in_time(port).await;
    accepting.abort();
}

#[tokio::test]
async fn cluster_url_on_a_standalone_server_is_an_error() {
    let server = RedisServer::start().await;
    let url = format!("redis+cluster://127.0.0.1:{}", server.port());
    let started = Instant::now();
    let result = Connector::new(url)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await;
    assert!(
        result.is_err(),
        "a cluster client connected to a standalone server"
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "took {:?}",
        started.elapsed()
    );
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

#[tokio::test]
async fn single_server_url_on_a_cluster_node_is_a_config_error() {
    let cluster = RedisCluster::start(3).await;
    let err = Connector::new(cluster.urls()[0].clone())
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("a cluster node behind a single-server URL");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_an_unknown_master_is_an_error_within_the_timeout() {
    let deployment = RedisSentinel::start().await;
    let url = deployment
        .url()
        .replace(deployment.master_name(), "no-such-master");
    let started = Instant::now();
    let result = Connector::new(url)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .await;
    assert!(result.is_err(), "connected to a master nobody monitors");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    // The right name works.
    round_trip(&Connector::new(deployment.url()).locks().await.unwrap()).await;
}
