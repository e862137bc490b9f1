//! TLS (feature `tls`): a server that accepts TCP connections only over TLS, with a
//! certificate of a private CA, is reached when that CA is trusted, by the lock
//! transactions and the listening connection alike (a waiter is woken through it); not
//! trusted, or in plain, it is refused with a typed error.

#![cfg(feature = "tls")]

use std::time::Duration;

use lock_mysql::Connector;
use lock_testkit::{MariaDbServer, TestCertificates};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_requires_tls_is_reached_with_its_ca_trusted() {
    let certificates = TestCertificates::generate();
    let server = MariaDbServer::start_with_tls(&certificates).await;
    let url = server.url();

    let plain = Connector::new(url.clone())
        .connect()
        .await
        .expect_err("the server takes no plain TCP connection");
    // MariaDB refuses the login itself (1045), not naming the transport.
    assert!(plain.is_invalid_input(), "{}", plain.chain());

    let untrusted = Connector::new(format!("{url}?require_ssl=true"))
        .connect()
        .await
        .expect_err("the private CA is not among the built-in roots");
    let said = untrusted.chain().to_string();
    assert!(said.to_lowercase().contains("certificate"), "{said}");

    let trusted = || {
        Connector::new(url.clone())
            .root_certificate(certificates.ca_pem())
            .locks()
    };
    let (holder, other) = (trusted().await.unwrap(), trusted().await.unwrap());
    let guard = holder.mutex("tls").lock().await.unwrap();
    let second = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let guard = other.mutex("tls").lock().await.unwrap();
        let waited = started.elapsed();
        guard.unlock().await.unwrap();
        waited
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    guard.unlock().await.unwrap();
    // Woken through the listening connection, over TLS: its own next attempt would come
    // ten seconds later.
    let waited = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the waiter is woken")
        .unwrap();
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    // Two clients, each with its pool's connections and a listening connection.
    let status = server.sql("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'");
    let accepted: u64 = status
        .split_whitespace()
        .last()
        .and_then(|count| count.parse().ok())
        .unwrap_or(0);
    assert!(
        accepted >= 4,
        "TLS handshakes the server accepted: {status}"
    );
}
