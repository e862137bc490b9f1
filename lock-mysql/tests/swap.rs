//! A name whose row this client wrote last changes in one statement, a compare-and-set
//! (`swap`), and only while nobody else wrote the row since: otherwise the operation
//! takes the two-round-trip transaction and decides on the row as it is. On a real
//! MariaDB the test starts.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use lock_core::Locks;
use lock_mysql::Connector;
use lock_testkit::{FaultProxy, MariaDbServer, ProxyFault};

/// The server's count `variable` of its global status so far.
fn counted(server: &MariaDbServer, variable: &str) -> u64 {
    let status = server.sql(&format!("SHOW GLOBAL STATUS LIKE '{variable}'"));
    status
        .split_whitespace()
        .last()
        .and_then(|count| count.parse().ok())
        .expect("a count")
}

/// How many transactions the server began so far.
fn transactions(server: &MariaDbServer) -> u64 {
    counted(server, "Com_begin")
}

async fn client(server: &MariaDbServer) -> Locks {
    Locks::builder(std::sync::Arc::new(
        Connector::new(server.url())
            .connect()
            .await
            .expect("connects"),
    ))
    .fencing(true)
    .build()
    .expect("valid settings")
}

/// A server whose binary log replicates statements, where the swap names the server
/// through a user variable (a replica would compare its own `@@server_id` otherwise).
async fn logging_statements() -> MariaDbServer {
    let server = MariaDbServer::start().await;
    let format =
        server.sql("SET GLOBAL binlog_format = 'STATEMENT'; SELECT @@GLOBAL.binlog_format");
    assert_eq!(format.trim(), "STATEMENT");
    server
}

/// Would fail if every operation took the transaction (two per pair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_this_client_wrote_last_changes_in_one_statement() {
    one_statement_a_change(MariaDbServer::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_statement_a_change_where_statements_are_logged() {
    one_statement_a_change(logging_statements().await).await;
}

async fn one_statement_a_change(server: MariaDbServer) {
    let locks = client(&server).await;
    let mutex = locks.mutex("hot");
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let before = transactions(&server);
    for _ in 0..100 {
        mutex.lock().await.unwrap().unlock().await.unwrap();
    }
    let began = transactions(&server) - before;
    assert!(
        began < 20,
        "{began} transactions for 100 pairs on a name nobody else touched"
    );
}

/// Would fail if the statement changed the row whatever it held since (the client
/// would be granted the lock beside the other client's hold, and issue the same
/// token again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_write_sends_the_operation_to_the_transaction() {
    another_clients_write(MariaDbServer::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_write_where_statements_are_logged() {
    another_clients_write(logging_statements().await).await;
}

async fn another_clients_write(server: MariaDbServer) {
    let (ours, theirs) = (client(&server).await, client(&server).await);
    let mut last_token = 0;
    for _ in 0..3 {
        let guard = ours.mutex("shared").lock().await.unwrap();
        last_token = guard.fencing_token().expect("a token");
        guard.unlock().await.unwrap();
    }
    let held = theirs.mutex("shared").lock().await.unwrap();
    let their_token = held.fencing_token().expect("a token");
    assert!(their_token > last_token);
    assert!(
        ours.mutex("shared").try_lock().await.unwrap().is_none(),
        "granted beside another client's hold"
    );
    held.unlock().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(5), ours.mutex("shared").lock())
        .await
        .expect("granted once free")
        .unwrap();
    let token = guard.fencing_token().expect("a token");
    assert!(
        token > their_token,
        "token {token} does not follow {their_token}"
    );
    guard.unlock().await.unwrap();
    // And the swaps go on from the row as the transaction left it.
    for _ in 0..3 {
        ours.mutex("shared")
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    assert!(theirs.mutex("shared").try_lock().await.unwrap().is_some());
}

/// How many prepared statements the server ran so far.
fn executed(server: &MariaDbServer) -> u64 {
    counted(server, "Com_stmt_execute")
}

/// A client of `server` with one connection, reached through a proxy, that has taken
/// and released each of `names` once (so that it wrote their rows last).
async fn warmed_behind_a_proxy(server: &MariaDbServer, names: &[String]) -> (Locks, FaultProxy) {
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port()).into()).await;
    let url = server
        .url()
        .replace(&server.port().to_string(), &proxy.port().to_string());
    let locks = Locks::builder(std::sync::Arc::new(
        Connector::new(url)
            .pool_size(1)
            .connect()
            .await
            .expect("connects"),
    ))
    .build()
    .expect("valid settings");
    for name in names {
        locks
            .mutex(name)
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    (locks, proxy)
}

/// A task per name, each taking and releasing its name `rounds` times at once with the
/// others; answers how many operations they made.
async fn pairs_on_each(locks: &Locks, names: &[String], rounds: u64) -> u64 {
    let tasks: Vec<_> = names
        .iter()
        .map(|name| {
            let (locks, name) = (locks.clone(), name.clone());
            tokio::spawn(async move {
                for _ in 0..rounds {
                    let guard = locks.mutex(&name).lock().await.unwrap();
                    assert!(guard.is_held());
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    names.len() as u64 * rounds * 2
}

/// Swaps of several names that queue for the client's one connection go to the server
/// several to a statement, and every pair still holds and frees its own name. The
/// connection's replies come 3 ms late, so that the callers queue behind it rather than
/// behind the client's own work. Would fail if each swap went alone (a statement per
/// operation, 400 in all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaps_that_queue_share_a_statement() {
    let server = MariaDbServer::start().await;
    let names: Vec<String> = (0..8).map(|n| format!("queued-{n}")).collect();
    let (locks, proxy) = warmed_behind_a_proxy(&server, &names).await;
    proxy.set(ProxyFault::DelayReplies(Duration::from_millis(3)));
    let (began, ran) = (transactions(&server), executed(&server));
    let operations = pairs_on_each(&locks, &names, 25).await;
    let (began, ran) = (transactions(&server) - began, executed(&server) - ran);
    assert!(
        began < operations / 4,
        "{began} transactions for {operations} operations"
    );
    assert!(
        ran < operations / 2,
        "{ran} statements for {operations} operations on one connection"
    );
    proxy.set(ProxyFault::Forward);
    for name in &names {
        assert!(
            locks.mutex(name).try_lock().await.unwrap().is_some(),
            "{name} is free"
        );
    }
}

/// Where statements are slow (replies 40 ms late, longer than a queued swap may wait),
/// operations stop queueing their swaps and take a connection first, so that they still
/// change their rows in one statement each. Would fail if they went on queueing: twelve
/// callers make three statements' worth of swaps, and those behind the first statement
/// would wait past their windows again and again, then take the transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distant_server_keeps_its_swaps() {
    let server = MariaDbServer::start().await;
    let names: Vec<String> = (0..12).map(|n| format!("distant-{n}")).collect();
    let (locks, proxy) = warmed_behind_a_proxy(&server, &names).await;
    proxy.set(ProxyFault::DelayReplies(Duration::from_millis(40)));
    let began = transactions(&server);
    let operations = pairs_on_each(&locks, &names, 2).await;
    let began = transactions(&server) - began;
    assert!(
        began < operations / 4,
        "{began} transactions for {operations} operations"
    );
}
