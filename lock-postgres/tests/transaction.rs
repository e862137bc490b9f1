//! Locks and ownership checks inside the caller's own transaction
//! (`lock_postgres::transaction`), on a server the test starts.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_postgres::Connector;
use lock_postgres::schema::SchemaName;
use lock_postgres::transaction::{self, Mode};
use lock_testkit::{PostgresServer, postgres_client};
use tokio::time::{sleep, timeout};

mod waiting;

/// A transaction-scoped lock and an advisory-mode hold of the same name exclude each
/// other, and the transaction's lock ends with the transaction. Fails if the two used
/// different keys, or if the transaction's lock outlived its commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactions_lock_excludes_advisory_holds_until_it_ends() {
    let server = PostgresServer::start().await;
    let advisory = Connector::new(server.url()).advisory_locks().await.unwrap();
    let mut client = postgres_client(&server.url()).await;

    let guard = advisory.mutex("tx:orders").lock().await.unwrap();
    let tx = client.transaction().await.unwrap();
    assert!(
        !transaction::try_lock(&tx, "tx:orders", Mode::Exclusive)
            .await
            .unwrap()
    );
    assert!(
        !transaction::try_lock(&tx, "tx:orders", Mode::Shared)
            .await
            .unwrap()
    );
    guard.unlock().await.unwrap();
    assert!(
        transaction::try_lock(&tx, "tx:orders", Mode::Exclusive)
            .await
            .unwrap()
    );
    assert!(
        advisory
            .mutex("tx:orders")
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        advisory
            .rw_lock("tx:orders")
            .reader()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    tx.commit().await.unwrap();
    let after = advisory.mutex("tx:orders").try_lock().await.unwrap();
    assert!(
        after.is_some(),
        "the transaction's lock ended with its commit"
    );

    // Readers share with a transaction's shared lock, writers wait for it.
    let reader = advisory.rw_lock("tx:report").reader().lock().await.unwrap();
    let tx = client.transaction().await.unwrap();
    transaction::lock(&tx, "tx:report", Mode::Shared)
        .await
        .unwrap();
    assert!(
        transaction::try_lock(&tx, "tx:report-other", Mode::Shared)
            .await
            .unwrap()
    );
    assert!(
        advisory
            .rw_lock("tx:report")
            .writer()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    tx.rollback().await.unwrap();
    reader.unlock().await.unwrap();
    let writer = advisory
        .rw_lock("tx:report")
        .writer()
        .try_lock()
        .await
        .unwrap();
    assert!(writer.is_some(), "the shared lock ended with the rollback");
    assert!(
        transaction::try_lock(&client, "", Mode::Exclusive)
            .await
            .is_err()
    );
}

/// A table-mode hold checked with `holds` inside a transaction cannot end before that
/// transaction does: a force-unlock waits for its commit, after which the token is no
/// longer the holder's. Fails if the check did not hold off the name's operations (the
/// force-unlock would finish while the write's transaction is open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_checked_against_its_hold_commits_before_the_hold_can_end() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url()).connect().await.unwrap();
    let locks = Locks::builder(Arc::new(backend))
        .fencing(true)
        .build()
        .unwrap();
    let operator = Connector::new(server.url()).locks().await.unwrap();
    let schema = SchemaName::default();
    let mut client = postgres_client(&server.url()).await;

    let guard = locks.mutex("own:invoice").lock().await.unwrap();
    let token = guard.fencing_token().expect("fencing is on");
    let tx = client.transaction().await.unwrap();
    assert!(
        transaction::holds(&tx, &schema, "own:invoice", token)
            .await
            .unwrap()
    );
    assert!(
        !transaction::holds(&tx, &schema, "own:invoice", token + 1)
            .await
            .unwrap()
    );
    assert!(
        !transaction::holds(&tx, &schema, "own:other", token)
            .await
            .unwrap()
    );
    let mutex = operator.mutex("own:invoice");
    let forcing = tokio::spawn(async move { mutex.force_unlock().await });
    sleep(Duration::from_millis(300)).await;
    assert!(
        !forcing.is_finished(),
        "the hold was force-released while a write checked against it was uncommitted"
    );
    tx.commit().await.unwrap();
    let forced = timeout(Duration::from_secs(5), forcing)
        .await
        .expect("the force-unlock runs once the write committed")
        .unwrap()
        .unwrap();
    assert!(forced);
    assert!(
        !transaction::holds(&client, &schema, "own:invoice", token)
            .await
            .unwrap()
    );
    assert!(
        transaction::holds(&client, &schema, "own:invoice", u64::MAX)
            .await
            .is_err()
    );
    // A hold without fencing carries 0, which would name any such hold.
    let unfenced = operator.mutex("own:unfenced").lock().await.unwrap();
    let zero = transaction::holds(&client, &schema, "own:unfenced", 0).await;
    assert!(
        zero.is_err_and(|err| err.kind() == lock_core::ErrorKind::InvalidArgument),
        "a token of 0 proved a hold"
    );
    let in_sql: bool = client
        .query_one("SELECT distlock.holds_token('own:unfenced', 0)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!in_sql, "the function took 0 for a token");
    unfenced.unlock().await.unwrap();
}

/// A hold handed over to a waiter counts from the hand-over on, as its guard holds from
/// the hand-over's message: here the waiter's take-up is refused (its role may no longer
/// call the functions once it waits), and its token still proves the hold. Fails if
/// `holds_token` waited for the take-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_hold_proves_its_token_before_its_take_up() {
    let server = PostgresServer::start().await;
    let holder = Locks::builder(Arc::new(
        Connector::new(server.url()).connect().await.unwrap(),
    ))
    .fencing(true)
    .build()
    .unwrap();
    let probe = postgres_client(&server.url()).await;
    let url = waiting::service_role(&server, &probe, "proved_waiter").await;
    let waiter = Connector::new(url).connect().await.unwrap();
    let waiter = Locks::builder(Arc::new(waiter))
        .fencing(true)
        .build()
        .unwrap();
    let name = "own:handed";
    let guard =
        waiting::hand_to_a_refused_waiter((&holder, &waiter), &probe, name, "proved_waiter").await;
    let token = guard.fencing_token().expect("fencing is on");
    let handed: bool = probe
        .query_one(
            "SELECT handed FROM distlock.holds WHERE name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert!(handed, "the refused take-up took the hold up");
    assert!(
        transaction::holds(&probe, &SchemaName::default(), name, token)
            .await
            .unwrap(),
        "the handed hold's token proved nothing"
    );
}
