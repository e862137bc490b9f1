//! A failover to an asynchronous standby that never received the last grant (second
//! review, N10): the promoted server must not grant the lock again while the lost
//! grant's lease may still run in its holder, and the fencing token it issues must be
//! above the lost one. The quarantine lasts the longest lease the database allows
//! (`distlock.failover_quarantine_ms`), and no lease is longer (third review, R4: a
//! quarantine as long as the longest lease the promoted server knew of missed a longer
//! one the failover lost).

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{AcquireRequest, Backend};
use lock_core::{ErrorKind, LockKind, LockName, LockRef, Locks, Owner};
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, postgres_client};
use tokio::time::{Instant, sleep};

async fn fenced_client(url: &str) -> Locks {
    let backend = Connector::new(url)
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connects to {url}: {}", err.chain()));
    // Within the database's longest lease (see `limit_leases`).
    Locks::builder(Arc::new(backend))
        .watchdog_lease(Duration::from_secs(3))
        .fencing(true)
        .build()
        .expect("a valid client")
}

/// Limits leases, and so the failover quarantine, to `longest` on `primary`'s database
/// (a database setting: the standby replays it).
async fn limit_leases(primary: &PostgresServer, longest: Duration) {
    postgres_client(&primary.url())
        .await
        .batch_execute(&format!(
            "ALTER DATABASE postgres SET distlock.failover_quarantine_ms = {}",
            longest.as_millis()
        ))
        .await
        .expect("set");
}

/// Waits until the standby has replayed the first grant: its token.
async fn replicated(standby: &PostgresServer, token: u64) {
    let client = postgres_client(&standby.url()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = client
            .query_opt(
                "SELECT t.token FROM distlock.tokens t WHERE t.name = 'ledger'",
                &[],
            )
            .await;
        // Before the standby replays the migration, the tables are not there yet.
        let seen = row.ok().flatten().map(|row| row.get::<_, i64>(0));
        if seen.is_some_and(|seen| u64::try_from(seen) == Ok(token)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the standby did not catch up: {seen:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_loses_a_grant_gives_no_second_owner_and_no_repeated_token() {
    let mut primary = PostgresServer::start().await;
    let longest = Duration::from_secs(4);
    limit_leases(&primary, longest).await;
    let mut standby = PostgresServer::start_standby(&primary).await;
    let a = fenced_client(&primary.url()).await;

    // No lease is longer than the quarantine: refused by the client before it asks,
    // and by the database from a client that asks anyway.
    let too_long = a
        .mutex("ledger")
        .acquire()
        .lease(longest + Duration::from_millis(1))
        .await
        .expect_err("a lease longer than the quarantine is refused");
    assert_eq!(too_long.kind(), ErrorKind::InvalidArgument, "{too_long}");
    let raw = Connector::new(primary.url())
        .connect()
        .await
        .expect("connects");
    let lock = LockRef::new(
        LockKind::Mutex,
        LockName::new("ledger").expect("a name"),
        Owner::new("raw", "task"),
    );
    let asked = raw
        .acquire(&lock, AcquireRequest::new(Duration::from_secs(20)))
        .await
        .expect_err("the database refuses it too");
    assert_eq!(asked.kind(), ErrorKind::InvalidArgument, "{asked}");

    // A first grant reaches the standby, with a short lease: the longest it knows of.
    let first = a
        .mutex("ledger")
        .acquire()
        .lease(Duration::from_millis(1500))
        .await
        .expect("free");
    let first_token = first.fencing_token().expect("fencing is on");
    first.unlock().await.expect("released");
    replicated(&standby, first_token).await;

    // The standby goes down; the next grant, with a longer lease than any before, exists
    // only on the primary, which then crashes. The standby comes back, still pointing at
    // the dead primary, and is promoted: the grant, its token and its lease are lost,
    // while A works on, believing it holds.
    let lease = longest.saturating_sub(Duration::from_millis(100));
    standby.crash();
    let lost = a
        .mutex("ledger")
        .acquire()
        .lease(lease)
        .await
        .expect("free");
    let granted = Instant::now();
    let lost_token = lost.fencing_token().expect("fencing is on");
    assert!(lost_token > first_token);
    primary.crash();
    standby.restart().await;
    standby.promote();

    let b = fenced_client(&standby.url()).await;
    let taken = b
        .mutex("ledger")
        .acquire()
        .wait(Duration::from_secs(20))
        .await
        .expect("granted once the quarantine is over");
    let waited = granted.elapsed();
    assert!(
        waited >= lease,
        "a second owner {waited:?} after the lost grant, within its {lease:?} lease"
    );
    let new_token = taken.fencing_token().expect("fencing is on");
    assert!(
        new_token > lost_token,
        "the promoted server issued {new_token} after the lost grant's {lost_token}"
    );
    taken.unlock().await.expect("released");
    drop(lost);
    a.shutdown().await;
}
