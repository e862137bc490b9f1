//! Acquires and releases that wait for the pool share a statement (`combine` in the
//! crate), on a server the test starts: fewer transactions than calls, every call its
//! own answer, a refused call refused alone, and no connection of the pool lost to a
//! caller that stopped waiting for one.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use lock_core::{ErrorKind, Locks};
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, postgres_client};

/// Lock-and-unlock pairs each task runs.
const PAIRS: usize = 5;
/// Tasks on one client whose pool has one connection.
const TASKS: usize = 32;

/// The transaction ids the server assigned so far: every statement that writes takes
/// one (and so does this query).
async fn xids(client: &lock_postgres::tokio_postgres::Client) -> i64 {
    client
        .query_one("SELECT pg_catalog.txid_current()", &[])
        .await
        .unwrap()
        .get(0)
}

/// A client whose pool has one connection, and a connection of the test's own.
async fn one_connection_client(
    server: &PostgresServer,
) -> (Arc<Locks>, lock_postgres::tokio_postgres::Client) {
    let backend = Connector::new(server.url())
        .pool_size(1)
        .connect()
        .await
        .unwrap();
    let admin = postgres_client(&server.url()).await;
    (Arc::new(Locks::new(Arc::new(backend))), admin)
}

/// 32 tasks on one pooled connection each lock and unlock names of their own: every
/// call is answered as its own (each task holds its own name, and its unlock finds its
/// hold), in well under one transaction per call. Fails if calls that wait for the pool
/// were sent one to a statement, or if a combined statement gave a call another's
/// reply (an unlock would find no hold).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_wait_for_the_pool_share_a_statement() {
    let server = PostgresServer::start().await;
    let (locks, admin) = one_connection_client(&server).await;

    let before = xids(&admin).await;
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move {
                for pair in 0..PAIRS {
                    let mutex = locks.mutex(&format!("combined:{task}:{pair}"));
                    let guard = mutex.try_lock().await.unwrap().expect("a name of its own");
                    assert!(guard.is_held());
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let transactions = xids(&admin).await - before;

    let calls = i64::try_from(TASKS * PAIRS * 2).unwrap();
    assert!(
        transactions <= calls * 3 / 4,
        "{calls} calls took {transactions} transactions"
    );
}

/// A call the server refuses, among calls that share its statement, gets the refusal,
/// and the others their grants. The refusal is planted: a check on the hold rows that
/// refuses one name. Fails if a refused statement's error went to every call in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_call_is_refused_alone() {
    let server = PostgresServer::start().await;
    let (locks, admin) = one_connection_client(&server).await;
    admin
        .batch_execute(
            "ALTER TABLE distlock.holds ADD CONSTRAINT planted_refusal CHECK (name <> 'refused')",
        )
        .await
        .unwrap();

    let tasks: Vec<_> = (0..16)
        .map(|task| {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move {
                let name = if task == 8 {
                    "refused".to_owned()
                } else {
                    format!("accepted:{task}")
                };
                let taken = locks.mutex(&name).try_lock().await;
                (name, taken)
            })
        })
        .collect();
    for task in tasks {
        let (name, taken) = task.await.unwrap();
        match taken {
            Err(err) if name == "refused" => assert_eq!(err.kind(), ErrorKind::Backend, "{err}"),
            Ok(Some(guard)) if name != "refused" => guard.unlock().await.unwrap(),
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// The sessions opened on the server so far (each of this test's connections included).
async fn sessions(client: &lock_postgres::tokio_postgres::Client) -> i64 {
    // A backend counts its session when it flushes its statistics, at the latest when it
    // exits: a connection closed at once is counted by then.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    client
        .query_one(
            "SELECT sessions FROM pg_catalog.pg_stat_database \
              WHERE datname = pg_catalog.current_database()",
            &[],
        )
        .await
        .unwrap()
        .get(0)
}

/// 64 tasks on a pool of four connections, which opens three of them while callers
/// whose replies another statement carried stop waiting for one: the pool opens no
/// more connections than it keeps. Fails if a wait for the pool is dropped while the
/// pool opens a connection (the connection closes as soon as the server made its
/// session: hundreds were opened).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_for_the_pool_no_longer_wanted_closes_no_connection() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url())
        .pool_size(4)
        .connect()
        .await
        .unwrap();
    let locks = Arc::new(Locks::new(Arc::new(backend)));
    let admin = postgres_client(&server.url()).await;

    let before = sessions(&admin).await;
    let tasks: Vec<_> = (0..64)
        .map(|task| {
            let locks = Arc::clone(&locks);
            tokio::spawn(async move {
                for pair in 0..PAIRS {
                    let mutex = locks.mutex(&format!("pool:{task}:{pair}"));
                    let guard = mutex.try_lock().await.unwrap().expect("a name of its own");
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let opened = sessions(&admin).await - before;
    // The pool had one connection (the migration's); it may open the other three.
    assert!(opened <= 3, "{opened} sessions opened for a pool of four");
}
