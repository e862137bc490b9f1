//! The adapter suite (connecting, bad input, ACL, replica acknowledgement, TLS) for the
//! fred adapter, and the ways in only this adapter has: a fred client or pool the
//! application already has.

use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, ReconnectPolicy};
use lock_conformance::adapter::round_trip;
use lock_core::Holder;
use lock_fred::{Connector, ConnectorSettings};
use lock_testkit::{FaultProxy, ProxyFault, RedisCluster, RedisServer};

lock_conformance::adapter_tests!(lock_conformance::adapter::through(
    |connector: lock_fred::Connector, pem| connector.root_certificate(pem)
));

#[tokio::test]
async fn zero_settings_are_config_errors() {
    // The shared settings are checked by lock-core's ConnectorSettings (unit-tested
    // there); the pool size is this adapter's.
    let zero = Connector::new("redis://127.0.0.1:1")
        .pool_size(0)
        .connect()
        .await;
    let err = zero.expect_err("a pool of no clients");
    assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{err}");
    let zero = Connector::new("redis://127.0.0.1:1")
        .settings(ConnectorSettings::default().connect_timeout(Duration::ZERO));
    let err = zero.connect().await.expect_err("no time to connect");
    assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{err}");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_notification_reader_wakes_every_waiter() {
    let server = RedisServer::start().await;
    let holder = lock_fred::connect(&server.url()).await.unwrap();
    // One message of room: a burst of releases overflows it, and the dropped messages
    // must not strand their waiters until the holders' leases would have run out (30 s).
    let waiting = Connector::new(server.url())
        .notification_buffer(1)
        .locks()
        .await
        .unwrap();
    let names: Vec<String> = (0..200).map(|i| format!("lag:{i}")).collect();
    let mut held = Vec::new();
    for name in &names {
        held.push(holder.mutex(name).lock().await.unwrap());
    }
    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            let mutex = waiting.mutex(name);
            tokio::spawn(async move { mutex.lock().await.map(drop) })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    futures_util::future::join_all(held.into_iter().map(lock_core::Guard::unlock)).await;
    let all_served = futures_util::future::join_all(waiters);
    let results = tokio::time::timeout(Duration::from_secs(5), all_served)
        .await
        .expect("every waiter was served although messages were dropped");
    for result in results {
        result.unwrap().unwrap();
    }
}

/// Review #2 on the replica-acknowledgement path: an application's client keeps fred's
/// default of three attempts, yet a script pipelined with `WAIT` whose reply was lost
/// (the connection reset after the server ran it) is not sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applications_client_never_sends_a_replicated_script_again() {
    let server = RedisServer::start().await;
    let address = format!("127.0.0.1:{}", server.port());
    let proxy = FaultProxy::start(address.parse().unwrap()).await;
    let mut builder = Builder::from_config(Config::from_url(&proxy.url()).unwrap());
    builder.set_policy(ReconnectPolicy::new_constant(0, 20));
    let client = builder.build().unwrap();
    let locks = Connector::from_client(client)
        .settings(ConnectorSettings::default().replica_ack(0, Duration::from_millis(100)))
        .locks()
        .await
        .unwrap();
    let mutex = locks.mutex("fred:lost-ack").with_holder(Holder::unique());
    // The library is loaded first, so the reply lost is the reentry's.
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let outer = mutex.lock().await.unwrap();
    proxy.set(ProxyFault::LoseReplyTo(b"FCALL".to_vec()));
    // A waiting acquisition: lock-core sends it again under the same id, and the
    // server answers that from its latch, so only a re-send by fred could count twice.
    let reentry = tokio::time::timeout(Duration::from_secs(5), mutex.lock()).await;
    assert_eq!(proxy.lost_replies(), 1, "no reply was lost: {reentry:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let holds = loop {
        match mutex.hold_count().await {
            Ok(holds) => break holds,
            Err(err) => assert!(
                tokio::time::Instant::now() < deadline,
                "the client never reconnected: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(holds, 2, "the reentry ran {} times", holds - 1);
    drop(outer);
}
