//! The lock tables on a real PostgreSQL the test starts: created once whatever the
//! number of migrators, in any schema, and refused with a typed error (changing nothing)
//! for a missing privilege, a newer version or tables changed by hand; the functions
//! replaced only by a newer or changed revision.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use lock_core::ErrorKind;
use lock_postgres::SchemaError;
use lock_postgres::schema::{FUNCTIONS_REVISION, SchemaName, VERSION, migrate};
use lock_testkit::{PostgresServer, postgres_client};
use tokio_postgres::Client;

fn schema_error(err: &lock_core::Error) -> &SchemaError {
    std::error::Error::source(err)
        .and_then(|source| source.downcast_ref::<SchemaError>())
        .unwrap_or_else(|| panic!("no SchemaError in {err:?}"))
}

async fn version(client: &Client, schema: &str) -> i32 {
    client
        .query_one(&format!("SELECT version FROM {schema}.version"), &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrations_create_the_tables_once() {
    let server = PostgresServer::start().await;
    let schema = SchemaName::new("locks_a").unwrap();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(postgres_client(&server.url()).await);
    }
    let runs = clients.into_iter().map(|mut client| {
        let schema = schema.clone();
        tokio::spawn(async move { migrate(&mut client, &schema).await.map(|()| client) })
    });
    let mut done = Vec::new();
    for run in runs {
        done.push(run.await.unwrap().expect("every migrator succeeds"));
    }
    let mut client = done.pop().unwrap();
    migrate(&mut client, &schema)
        .await
        .expect("a third time too");
    assert_eq!(version(&client, "locks_a").await, VERSION);
    let rows = client
        .query("SELECT count(*) FROM locks_a.version", &[])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 1, "one version row");
    // The default schema works alike.
    migrate(&mut client, &SchemaName::default()).await.unwrap();
    assert_eq!(version(&client, "distlock").await, VERSION);
}

#[test]
fn schema_names_are_plain_identifiers() {
    for good in ["distlock", "locks_2", "_x"] {
        assert!(SchemaName::new(good).is_ok(), "{good}");
    }
    let too_long = "x".repeat(64);
    for bad in [
        "",
        "Locks",
        "2locks",
        "a-b",
        "a;drop",
        "pg_locks",
        "information_schema",
        &too_long,
    ] {
        let err = SchemaName::new(bad).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{bad}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_create_gets_the_privilege_named_and_nothing_changes() {
    let server = PostgresServer::start().await;
    let admin = postgres_client(&server.url()).await;
    admin
        .batch_execute("CREATE ROLE locker LOGIN; CREATE SCHEMA theirs;")
        .await
        .unwrap();
    let url = format!("postgres://locker@127.0.0.1:{}/postgres", server.port());
    let mut locker = postgres_client(&url).await;
    let err = migrate(&mut locker, &SchemaName::new("mine").unwrap())
        .await
        .expect_err("no CREATE on the database");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(
        matches!(schema_error(&err), SchemaError::MissingPrivilege { privilege: "CREATE", on } if on == "the database"),
        "{err:?}"
    );
    let err = migrate(&mut locker, &SchemaName::new("theirs").unwrap())
        .await
        .expect_err("no CREATE on the schema");
    assert!(
        matches!(schema_error(&err), SchemaError::MissingPrivilege { on, .. } if on == "schema theirs"),
        "{err:?}"
    );
    let tables = admin
        .query(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema IN ('mine', 'theirs')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(
        tables[0].get::<_, i64>(0),
        0,
        "a refused migration wrote something"
    );
    // Given the privilege, the same user migrates.
    admin
        .batch_execute("GRANT USAGE, CREATE ON SCHEMA theirs TO locker")
        .await
        .unwrap();
    migrate(&mut locker, &SchemaName::new("theirs").unwrap())
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_or_hand_changed_schema_is_refused_unchanged() {
    let server = PostgresServer::start().await;
    let mut client = postgres_client(&server.url()).await;
    let schema = SchemaName::default();
    migrate(&mut client, &schema).await.unwrap();
    client
        .batch_execute("UPDATE distlock.version SET version = 99")
        .await
        .unwrap();
    let err = migrate(&mut client, &schema).await.expect_err("newer");
    assert_eq!(err.kind(), ErrorKind::Incompatible);
    assert!(
        matches!(schema_error(&err), SchemaError::Newer { found: 99, .. }),
        "{err:?}"
    );
    assert_eq!(
        version(&client, "distlock").await,
        99,
        "the version was touched"
    );
    client
        .batch_execute(&format!("UPDATE distlock.version SET version = {VERSION}"))
        .await
        .unwrap();
    client
        .batch_execute("ALTER TABLE distlock.tokens ALTER COLUMN token TYPE integer")
        .await
        .unwrap();
    let err = migrate(&mut client, &schema).await.expect_err("changed");
    assert_eq!(err.kind(), ErrorKind::Incompatible);
    assert!(
        matches!(schema_error(&err), SchemaError::Changed { table, problem }
            if table == "distlock.tokens" && problem.contains("integer, not bigint")),
        "{err:?}"
    );
    client
        .batch_execute("ALTER TABLE distlock.holds DROP COLUMN expires_at")
        .await
        .unwrap();
    let err = migrate(&mut client, &schema).await.expect_err("changed");
    assert!(
        matches!(schema_error(&err), SchemaError::Changed { problem, .. } if problem.contains("expires_at")
            || problem.contains("token")),
        "{err:?}"
    );
}

/// The transaction id that last wrote the `acquire` function of `distlock`.
async fn acquire_written_by(client: &Client) -> String {
    client
        .query_one(
            "SELECT xmin::text FROM pg_proc
              WHERE proname = 'acquire' AND pronamespace = 'distlock'::regnamespace",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_are_replaced_only_by_a_newer_or_changed_revision() {
    let server = PostgresServer::start().await;
    let mut client = postgres_client(&server.url()).await;
    let schema = SchemaName::default();
    migrate(&mut client, &schema).await.unwrap();
    let first = acquire_written_by(&client).await;
    // The same functions: nothing is written (other sessions keep their cached plans).
    migrate(&mut client, &schema).await.unwrap();
    assert_eq!(
        acquire_written_by(&client).await,
        first,
        "replaced unchanged"
    );
    // The same revision changed (as while developing): replaced.
    client
        .batch_execute("UPDATE distlock.functions SET digest = 'edited'")
        .await
        .unwrap();
    migrate(&mut client, &schema).await.unwrap();
    let second = acquire_written_by(&client).await;
    assert_ne!(second, first, "changed functions were kept");
    // A newer library installed its functions: an older one keeps them.
    client
        .batch_execute(&format!(
            "UPDATE distlock.functions SET revision = {}",
            FUNCTIONS_REVISION + 1
        ))
        .await
        .unwrap();
    migrate(&mut client, &schema).await.unwrap();
    assert_eq!(
        acquire_written_by(&client).await,
        second,
        "an older client replaced newer functions"
    );
    let revision: i32 = client
        .query_one("SELECT revision FROM distlock.functions", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(revision, FUNCTIONS_REVISION + 1);
}
