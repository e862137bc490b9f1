//! A failover to an asynchronous standby that never received the last grant (second
//! review, N10): the promoted server must not grant the lock again while the lost
//! grant's lease may still run in its holder, and the fencing token it issues must be
//! above the lost one.

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, postgres_client};
use tokio::time::{Instant, sleep};

async fn fenced_client(url: &str) -> Locks {
    let backend = Connector::new(url)
        .connect()
        .await
        .unwrap_or_else(|err| panic!("connects to {url}: {}", err.chain()));
    Locks::builder(Arc::new(backend))
        .fencing(true)
        .build()
        .expect("a valid client")
}

/// Waits until the standby has replayed the first grant: the lease length in use and
/// the token.
async fn replicated(standby: &PostgresServer, token: u64) {
    let client = postgres_client(&standby.url()).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let row = client
            .query_opt(
                "SELECT e.longest_lease_ms, t.token FROM distlock.epoch e, distlock.tokens t
                  WHERE t.name = 'ledger'",
                &[],
            )
            .await;
        // Before the standby replays the migration, the tables are not there yet.
        let seen = row
            .ok()
            .flatten()
            .map(|row| (row.get::<_, i64>(0), row.get::<_, i64>(1)));
        if seen.is_some_and(|(lease, seen)| lease > 0 && u64::try_from(seen) == Ok(token)) {
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
    let mut standby = PostgresServer::start_standby(&primary).await;
    let lease = Duration::from_millis(1500);
    let a = fenced_client(&primary.url()).await;

    // A first grant reaches the standby: it knows the lease in use and the counter.
    let first = a
        .mutex("ledger")
        .acquire()
        .lease(lease)
        .await
        .expect("free");
    let first_token = first.fencing_token().expect("fencing is on");
    first.unlock().await.expect("released");
    replicated(&standby, first_token).await;

    // The standby goes down; the next grant exists only on the primary, which then
    // crashes. The standby comes back, still pointing at the dead primary, and is
    // promoted: the grant and its token are lost, while A works on, believing it holds.
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
