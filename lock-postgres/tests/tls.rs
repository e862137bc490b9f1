//! TLS (feature `tls`): a server that accepts TCP connections only over TLS, with a
//! certificate of a private CA, is reached when that CA is trusted, by the query
//! connections and the notification connection alike; not trusted, or in plain, it is
//! refused with a typed error.

#![cfg(feature = "tls")]

use std::sync::Arc;
use std::time::Duration;

use lock_core::{ErrorKind, Locks};
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, TestCertificates, postgres_client};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_tls_is_reached_with_its_ca_trusted() {
    let certificates = TestCertificates::generate();
    let server = PostgresServer::start_with_tls(&certificates).await;
    let url = server.url();

    let plain = Connector::new(format!("{url}?sslmode=disable"))
        .connect()
        .await
        .expect_err("the server takes no plain TCP connection");
    assert_eq!(plain.kind(), ErrorKind::InvalidConfig, "{}", plain.chain());
    assert!(
        plain.chain().to_string().contains("no encryption"),
        "{}",
        plain.chain()
    );

    let untrusted = Connector::new(format!("{url}?sslmode=require"))
        .connect()
        .await
        .expect_err("the private CA is not among the system's roots");
    let said = untrusted.chain().to_string();
    assert!(said.contains("certificate"), "{said}");

    let trusted = |url: String| {
        Connector::new(url)
            .root_certificate(certificates.ca_pem())
            .connect()
    };
    let a = Locks::new(Arc::new(
        trusted(format!("{url}?sslmode=require"))
            .await
            .unwrap_or_else(|err| panic!("connects over TLS: {}", err.chain())),
    ));
    // `prefer`, the default, takes TLS where the server offers it.
    let b =
        Locks::new(Arc::new(trusted(url.clone()).await.unwrap_or_else(|err| {
            panic!("connects over TLS: {}", err.chain())
        })));

    // A waiter is woken by the release's notification, over the TLS notification
    // connection, well before a lease would end.
    let held = a.mutex("tls").lock().await.expect("free");
    let mutex = b.mutex("tls");
    let waiter = tokio::spawn(async move { mutex.lock().await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.unlock().await.expect("released");
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("woken by the notification")
        .expect("the waiter ran")
        .expect("acquired");
    guard.unlock().await.expect("released");

    let side_door = postgres_client(&server.socket_url()).await;
    let row = side_door
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*)
               FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
              WHERE a.application_name LIKE 'distlock-%'",
            &[],
        )
        .await
        .expect("reads the sessions");
    let (encrypted, ours): (i64, i64) = (row.get(0), row.get(1));
    // Each client: at least one query connection and its notification connection.
    assert!(ours >= 4, "{ours} connections of ours");
    assert_eq!(encrypted, ours, "a connection of ours is not encrypted");
}

/// A connection string naming the server's Unix socket directory connects with the `tls`
/// feature too, in both modes: the server offers no TLS there, and no host name is asked
/// for a certificate (rustls refused the empty name, so no such connection could open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unix_socket_connects_in_plain_with_the_tls_feature() {
    let server = PostgresServer::start().await;
    let backend = Arc::new(
        Connector::new(server.socket_url())
            .connect()
            .await
            .expect("table mode connects over the Unix socket"),
    );
    assert!(
        !backend.prepares_statements(),
        "a Unix socket proves nothing"
    );
    let locks = Locks::new(backend);
    let held = locks.mutex("over-a-socket").lock().await.expect("locks");
    // Another client, so that the release reaches it by its notification connection.
    let other = Connector::new(server.socket_url())
        .locks()
        .await
        .expect("a second client connects over the Unix socket");
    let waiter = tokio::spawn(async move { other.mutex("over-a-socket").lock().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.expect("unlocks");
    let woken = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter is woken by the release's notification")
        .expect("the waiter ran")
        .expect("the waiter holds");
    woken.unlock().await.expect("unlocks");
    let advisory = Connector::new(server.socket_url())
        .advisory_locks()
        .await
        .expect("advisory mode connects over the Unix socket");
    let guard = advisory.mutex("over-a-socket").lock().await.expect("locks");
    guard.unlock().await.expect("unlocks");
}
