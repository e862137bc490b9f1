//! Connecting: a URL that is not PostgreSQL's, an unreadable one, a pool of nothing, no
//! time to answer and an unreachable server are typed errors; a reachable one creates
//! the tables once.

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
        .response_timeout(std::time::Duration::ZERO)
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
