//! Connecting: a URL that is not PostgreSQL's, an unreadable one, a pool of nothing, no
//! time to answer and an unreachable server are typed errors; a login the server refuses
//! is a configuration error that keeps the server's words; a paused server costs the
//! connect timeout; a reachable one creates the tables once.

use std::time::Duration;

use lock_core::ErrorKind;
use lock_postgres::Connector;
use lock_postgres::schema::SchemaName;
use lock_testkit::{PostgresServer, free_port};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_settings_are_typed_errors() {
    for url in [
        "redis://127.0.0.1:6380",
        "mysql://u@h/db",
        "postgres://u@h:notaport/db",
    ] {
        let err = Connector::new(url).connect().await.expect_err(url);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
    }
    let port = free_port();
    let nobody = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let err = Connector::new(&nobody)
        .connect()
        .await
        .expect_err("nothing listens");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    let server = PostgresServer::start().await;
    let err = Connector::new(server.url())
        .pool_size(0)
        .connect()
        .await
        .expect_err("a pool of nothing");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let err = Connector::new(server.url())
        .response_timeout(Duration::ZERO)
        .connect()
        .await
        .expect_err("no time to answer");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let schema = SchemaName::new("other_locks").expect("a valid name");
    for _ in 0..2 {
        let backend = Connector::new(server.url())
            .schema(schema.clone())
            .connect()
            .await
            .expect("connects, twice");
        assert!(backend.subscribed_channels().is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_the_server_refuses_is_a_configuration_error_with_its_words() {
    let server = PostgresServer::start().await;
    let port = server.port();
    for (url, said) in [
        (
            format!("postgres://nobody@127.0.0.1:{port}/postgres"),
            "role \"nobody\" does not exist",
        ),
        (
            format!("postgres://postgres@127.0.0.1:{port}/nowhere"),
            "database \"nowhere\" does not exist",
        ),
    ] {
        let err = Connector::new(&url).connect().await.expect_err(&url);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        assert!(!err.is_retryable(), "{url}: a retry cannot help");
        let chain = err.chain().to_string();
        assert!(
            chain.contains(said),
            "{url}: the server's words are lost: {chain}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_a_paused_server_gives_up_after_the_connect_timeout() {
    let server = PostgresServer::start().await;
    server.pause();
    let started = tokio::time::Instant::now();
    // The server accepts the TCP connection (the kernel does) and then says nothing:
    // only the handshake's bound ends the wait.
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        Connector::new(server.url())
            .connect_timeout(Duration::from_millis(500))
            .connect(),
    )
    .await;
    let waited = started.elapsed();
    server.resume();
    let err = outcome
        .expect("the connect timeout ends the wait")
        .expect_err("a paused server does not answer");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.is_retryable());
    assert!(waited < Duration::from_secs(10), "waited {waited:?}");
    let err = Connector::new(server.url())
        .connect_timeout(Duration::ZERO)
        .connect()
        .await
        .expect_err("no time to connect");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    // Resumed, the same server is reached.
    Connector::new(server.url())
        .connect()
        .await
        .expect("connects after the pause");
}

/// Statements are prepared on connections proved to be the server's own sessions: a pool
/// that opens all its connections at once, under load, proves every one, so the client
/// still prepares once they are all open (the routes that prove nothing are the unit
/// tests' and the conformance suite's through PgBouncer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_of_direct_connections_opened_under_load_prepares() {
    let server = PostgresServer::start().await;
    let backend = std::sync::Arc::new(
        Connector::new(server.url())
            .pool_size(16)
            .connect()
            .await
            .expect("connects"),
    );
    let locks = lock_core::Locks::new(backend.clone());
    let mut tasks = Vec::new();
    for task in 0..64 {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            let mutex = locks.mutex(&format!("prepared:{task}"));
            for _ in 0..10 {
                let guard = mutex.lock().await.expect("locks");
                guard.unlock().await.expect("unlocks");
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task ran");
    }
    assert!(backend.prepares_statements(), "{backend:?}");
}
