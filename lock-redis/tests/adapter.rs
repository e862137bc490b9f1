//! The adapter suite (connecting, bad input, ACL, replica acknowledgement, TLS) for the
//! redis-crate adapter, and the ways in only this adapter has: a connection manager, a
//! bb8 pool, a cluster connection.

use lock_conformance::adapter::round_trip;
use lock_redis::Connector;
use lock_testkit::{RedisCluster, RedisServer};

lock_conformance::adapter_tests!(lock_conformance::adapter::through(
    |connector: lock_redis::Connector, pem| connector.root_certificate(pem)
));

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
    let url = cluster.url();
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
