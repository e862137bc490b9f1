//! The lock tables on a real PostgreSQL the test starts: created once whatever the
//! number of migrators, in any schema, and refused with a typed error (changing nothing)
//! for a missing privilege, a newer version or tables changed by hand; the functions
//! replaced only by a newer or changed revision.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, LockKind, LockRef};
use lock_core::{AcquireRequest, Backend, ErrorKind, LockName, Locks, Owner};
use lock_postgres::schema::{FUNCTIONS_REVISION, SchemaName, VERSION, migrate};
use lock_postgres::{Connector, SchemaError};
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

/// A client whose server notices are collected: every NOTICE the server sends it.
async fn noticed_client(url: &str) -> (Client, Arc<std::sync::Mutex<Vec<String>>>) {
    let (client, mut connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let notices = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&notices);
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notice(notice) = message {
                seen.lock().unwrap().push(notice.message().to_owned());
            }
        }
    });
    (client, notices)
}

/// The first migration of a fresh database, by the client and by the printed script,
/// speaks only of what it creates: no NOTICE (an earlier revision dropped functions of
/// older revisions, one NOTICE each where none existed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_migration_of_a_fresh_database_prints_no_notice() {
    let server = PostgresServer::start().await;
    let (mut client, notices) = noticed_client(&server.url()).await;
    migrate(&mut client, &SchemaName::default()).await.unwrap();
    let script = lock_postgres::schema::migration_sql(&SchemaName::new("printed").unwrap());
    client.batch_execute(&script).await.unwrap();
    // A round trip after both: every notice they caused has arrived.
    client.simple_query("SELECT 1").await.unwrap();
    assert_eq!(*notices.lock().unwrap(), Vec::<String>::new());
    assert_eq!(version(&client, "printed").await, VERSION);
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
        matches!(schema_error(&err), SchemaError::MissingPrivilege { privilege: "CREATE", on, .. } if on == "the database"),
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

/// Second review, N9: a function planted in a schema on the lock client's search path,
/// whose argument types match a call better than PostgreSQL's own (`(text, integer)`
/// against `pg_catalog`'s `(text, bigint)`), is never called by the lock functions: they
/// run with a pinned search path and call PostgreSQL's functions by their full name.
/// Before, every lock operation called it, with the lock client's rights, on every name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_planted_on_the_search_path_is_never_called() {
    let server = PostgresServer::start().await;
    let side = postgres_client(&server.url()).await;
    side.batch_execute(
        "CREATE TABLE public.seen (name text);
         CREATE FUNCTION public.hashtextextended(t text, seed integer) RETURNS bigint
         LANGUAGE plpgsql AS $$ BEGIN INSERT INTO public.seen VALUES (t); RETURN 42; END $$;",
    )
    .await
    .unwrap();
    let backend = Connector::new(server.url()).connect().await.unwrap();
    let locks = Locks::new(Arc::new(backend));
    let guard = locks.mutex("victim").lock().await.unwrap();
    assert!(locks.mutex("victim").is_locked().await.unwrap());
    guard.unlock().await.unwrap();
    let fair = locks.fair_mutex("victim-fair").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let read = locks.rw_lock("victim-rw").reader().lock().await.unwrap();
    read.unlock().await.unwrap();
    assert!(!locks.mutex("victim").force_unlock().await.unwrap());
    let seen: Vec<String> = side
        .query("SELECT name FROM public.seen", &[])
        .await
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert!(seen.is_empty(), "the planted function saw {seen:?}");
}

/// Second review, N11: a request sent again after its kept answer's window ended, but
/// before the sweep removed it, is answered as the first run was. Before, it ran again
/// and failed on the answer's key (23505), taken for a permanent error: an acquire's
/// grant was then never undone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_its_answers_window_gets_the_first_answer() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url()).connect().await.unwrap();
    let lock = LockRef::new(
        LockKind::Mutex,
        LockName::new("late-retry").unwrap(),
        Owner::new("client", "task"),
    );
    let request =
        AcquireRequest::new(Duration::from_secs(30)).retry_window(Duration::from_millis(100));
    let first = backend.acquire(&lock, request).await.unwrap();
    assert!(
        matches!(first, Acquire::Acquired { holds: 1, .. }),
        "{first:?}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = backend.acquire(&lock, request).await.unwrap();
    assert_eq!(again, first, "the late retry ran again");
}

/// The lock functions commit durably whatever the session asked: a grant or a fencing
/// token lost in a crash would let a second holder in. (The test server runs with
/// `synchronous_commit = off`, as a tuned server may.) Checked inside the transaction
/// of the call, where the functions' own setting shows; the pinned search path of the
/// functions does not undo it at their exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_operation_commits_durably_in_a_session_that_does_not() {
    let server = PostgresServer::start().await;
    let mut client = postgres_client(&server.url()).await;
    migrate(&mut client, &SchemaName::default()).await.unwrap();
    // `local` would not wait for a synchronous standby.
    for session in ["off", "local"] {
        let transaction = client.transaction().await.unwrap();
        transaction
            .batch_execute(&format!("SET LOCAL synchronous_commit = {session}"))
            .await
            .unwrap();
        transaction
            .execute(
                "SELECT distlock.acquire('durable', 'owner', 'mutex', 30000, false,
                        gen_random_uuid(), 1000, false, 0, '', false, 0)",
                &[],
            )
            .await
            .unwrap();
        let setting: String = transaction
            .query_one("SELECT current_setting('synchronous_commit')", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(setting, "on", "from {session}");
        transaction.commit().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_role_with_the_listed_grants_locks_after_the_printed_migration() {
    let server = PostgresServer::start().await;
    let admin = postgres_client(&server.url()).await;
    let schema = SchemaName::default();
    // Twice: the script changes nothing the second time.
    for _ in 0..2 {
        admin
            .batch_execute(&lock_postgres::schema::migration_sql(&schema))
            .await
            .unwrap_or_else(|err| panic!("the printed migration runs: {err:?}"));
    }
    admin
        .batch_execute("CREATE ROLE service LOGIN")
        .await
        .unwrap();
    admin
        .batch_execute(&lock_postgres::schema::grants_sql(&schema, "service").unwrap())
        .await
        .unwrap();
    let url = format!("postgres://service@127.0.0.1:{}/postgres", server.port());
    // The role may create nothing: connecting must not try to.
    let locks = Connector::new(&url)
        .locks()
        .await
        .unwrap_or_else(|err| panic!("connects without migrating: {}", err.chain()));
    let guard = locks.mutex("job").lock().await.expect("locks");
    let other = Connector::new(&url).locks().await.expect("a second client");
    assert!(other.mutex("job").try_lock().await.unwrap().is_none());
    guard.unlock().await.expect("releases");
    let fenced = other.mutex("job").lock().await.expect("takes it after");
    fenced.unlock().await.expect("releases");
    // A change other than through the entry points is refused, a helper's call too.
    let service = postgres_client(&url).await;
    for statement in [
        "DELETE FROM distlock.holds",
        "INSERT INTO distlock.tokens VALUES ('job', 0)",
        "CREATE TABLE distlock.mine (x int)",
        "SELECT distlock.grant_hold('job', 'me', 'mutex', 60000, false, gen_random_uuid(), \
         true, now())",
    ] {
        let err = service.batch_execute(statement).await.expect_err(statement);
        assert_eq!(
            err.code(),
            Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE),
            "{statement}: {err:?}"
        );
    }
    // A service never force-releases someone else's lock; an operator's role may.
    let held = other.mutex("job").lock().await.expect("locks");
    let refused = other
        .mutex("job")
        .force_unlock()
        .await
        .expect_err("a service's role may not force-release");
    assert_eq!(refused.kind(), ErrorKind::InvalidConfig, "{refused}");
    assert!(held.is_held(), "the refused force-release changed nothing");
    admin
        .batch_execute(&format!(
            "CREATE ROLE operator LOGIN;\n{}",
            lock_postgres::schema::operator_grants_sql(&schema, "operator").unwrap()
        ))
        .await
        .unwrap();
    let operator_url = format!("postgres://operator@127.0.0.1:{}/postgres", server.port());
    let operator = Connector::new(&operator_url)
        .locks()
        .await
        .expect("connects");
    assert!(
        operator
            .mutex("job")
            .force_unlock()
            .await
            .expect("an operator may"),
        "the lock was held"
    );
    drop(held);
    // A role without the grants may not call the functions (EXECUTE is not PUBLIC's).
    admin
        .batch_execute("CREATE ROLE stranger LOGIN")
        .await
        .unwrap();
    let stranger = postgres_client(&format!(
        "postgres://stranger@127.0.0.1:{}/postgres",
        server.port()
    ))
    .await;
    admin
        .batch_execute("GRANT USAGE ON SCHEMA distlock TO stranger")
        .await
        .unwrap();
    let err = stranger
        .batch_execute("SELECT distlock.force_release('job', 'mutex', 'x')")
        .await
        .expect_err("no EXECUTE");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::INSUFFICIENT_PRIVILEGE)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_that_may_not_migrate_older_functions_is_told_what_the_server_said() {
    let server = PostgresServer::start().await;
    Connector::new(server.url())
        .connect()
        .await
        .expect("the owner migrates");
    let admin = postgres_client(&server.url()).await;
    admin
        .batch_execute(&format!(
            "UPDATE distlock.functions SET revision = {};
             CREATE ROLE service LOGIN;
             GRANT USAGE, CREATE ON SCHEMA distlock TO service;
             {}",
            FUNCTIONS_REVISION - 1,
            lock_postgres::schema::grants_sql(&SchemaName::default(), "service").unwrap()
        ))
        .await
        .unwrap();
    let url = format!("postgres://service@127.0.0.1:{}/postgres", server.port());
    let err = Connector::new(&url)
        .connect()
        .await
        .expect_err("functions another role owns");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let SchemaError::MissingPrivilege {
        privilege, server, ..
    } = schema_error(&err)
    else {
        panic!("not a missing privilege: {err:?}");
    };
    // USAGE and CREATE on the schema are there: the error says what the server said.
    assert_eq!(*privilege, "ownership", "{err:?}");
    assert!(server.0.contains("must be owner"), "{server:?}");
    assert!(err.to_string().contains("migration"), "{err}");
}
