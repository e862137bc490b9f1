//! A replica promoted after its primary died (the third review's R4, on MySQL): the
//! replica lacks the primary's last grants, whose holders still believe they hold. The
//! first transaction on the promoted server finds the epoch naming another server and
//! starts the failover quarantine: nothing is granted until every lease the old server
//! may have granted ran out, and the name's fencing tokens jump past every token the
//! old server issued.
//!
//! Without the quarantine, the new client is granted the lock at once while the old
//! holder still believes it holds; without the tokens' jump, its token repeats the old
//! holder's (the replica's counter is behind by exactly that grant).

use std::time::Duration;

use lock_core::Locks;
use lock_mysql::{Connector, ConnectorSettings};
use lock_testkit::MariaDbServer;
use tokio::time::{Instant, sleep};

const QUARANTINE: Duration = Duration::from_secs(3);

async fn client(url: &str) -> Locks {
    client_of(url, ConnectorSettings::default()).await
}

async fn client_of(url: &str, settings: ConnectorSettings) -> Locks {
    let settings = settings
        .failover_quarantine(QUARANTINE)
        .response_timeout(Duration::from_secs(1))
        .connect_timeout(Duration::from_secs(5));
    Locks::builder(std::sync::Arc::new(
        Connector::new(url)
            .settings(settings)
            .connect()
            .await
            .expect("connects"),
    ))
    .fencing(true)
    .watchdog_lease(Duration::from_secs(2))
    .build()
    .expect("valid settings")
}

/// Waits until `replica` has applied everything `primary` wrote so far.
fn caught_up(primary: &MariaDbServer, replica: &MariaDbServer) {
    let position = primary.sql("SELECT @@gtid_binlog_pos");
    let position = position.trim();
    let waited = replica.sql(&format!("SELECT MASTER_GTID_WAIT('{position}', 10)"));
    assert_eq!(
        waited.trim(),
        "0",
        "the replica did not catch up with {position}"
    );
}

/// Stops `replica` replicating once it caught up, grants "orders" on `primary` to
/// another client (a grant the replica never sees, whose holder believes it holds for
/// its lease), and fails over: the primary dies, the replica is promoted. The client,
/// its guard, the guard's token, and until when it believes it holds.
async fn fail_over_past_a_grant(
    primary: &mut MariaDbServer,
    replica: &MariaDbServer,
) -> (Locks, lock_core::Guard, u64, Instant) {
    caught_up(primary, replica);
    replica.stop_replicating();
    let lost = client(&primary.url()).await;
    let lease = Duration::from_millis(2_500);
    let held = lost
        .mutex("orders")
        .lock_with_lease(lease)
        .await
        .expect("granted on the primary");
    let token = held.fencing_token().expect("a token");
    let believed_until = Instant::now() + lease;
    primary.crash();
    replica.promote();
    (lost, held, token, believed_until)
}

/// A grant on the promoted server (asked for from `started`): not before the lost
/// hold's owner stopped believing it holds, with a token past the lost hold's.
async fn granted_after_the_lost_hold(
    guard: lock_core::Guard,
    (believed_until, lost_token): (Instant, u64),
    started: Instant,
) {
    assert!(
        Instant::now() >= believed_until,
        "granted {:?} after asking, before the lost hold's lease ran out",
        started.elapsed()
    );
    let token = guard.fencing_token().expect("a token");
    assert!(
        token > lost_token,
        "token {token} does not follow the lost hold's {lost_token}"
    );
    guard.unlock().await.expect("unlocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_grants_nothing_until_lost_holds_ran_out_and_tokens_go_on() {
    let mut primary = MariaDbServer::start_primary(1).await;
    let replica = MariaDbServer::start_replica(&primary, 2).await;

    let first = client(&primary.url()).await;
    let guard = first.mutex("orders").lock().await.unwrap();
    guard.unlock().await.unwrap();
    let (_lost, held, lost_token, believed_until) =
        fail_over_past_a_grant(&mut primary, &replica).await;

    let after = client(&replica.url()).await;
    let early = after.mutex("orders").try_lock().await.unwrap();
    assert!(
        early.is_none() || Instant::now() >= believed_until,
        "granted on the promoted replica while the lost hold's owner believes it holds"
    );
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(10), after.mutex("orders").lock())
        .await
        .expect("granted once the quarantine ends")
        .unwrap();
    granted_after_the_lost_hold(guard, (believed_until, lost_token), started).await;
    drop(held);
    sleep(Duration::from_millis(10)).await;
}

/// The same, for a client that wrote the name's row last and would change it in one
/// statement (`swap`): the promoted replica holds the very bytes that client wrote, and
/// the epoch row it copied names the old server, so only the statement's check of the
/// serving server (`@@server_id`) tells the two apart. Reached through a proxy that
/// leads to the promoted server after the failover, as a service's address would.
/// Without that check, the client is granted the lock at once on the promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_wrote_the_row_last_is_quarantined_on_the_promoted_replica_too() {
    let mut primary = MariaDbServer::start_primary(1).await;
    let replica = MariaDbServer::start_replica(&primary, 2).await;
    let address =
        |server: &MariaDbServer| -> std::net::SocketAddr { ([127, 0, 0, 1], server.port()).into() };
    let proxy = lock_testkit::FaultProxy::start(address(&primary)).await;
    let through_proxy = primary
        .url()
        .replace(&primary.port().to_string(), &proxy.port().to_string());

    // One connection, so that the first statement after the failover that finds it
    // broken leaves the next one to reach the promoted server.
    let ours = client_of(&through_proxy, ConnectorSettings::default().pool_size(1)).await;
    for _ in 0..5 {
        ours.mutex("orders")
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    let (_lost, held, lost_token, believed_until) =
        fail_over_past_a_grant(&mut primary, &replica).await;
    proxy.redirect(address(&replica));

    let started = Instant::now();
    // A read (which writes nothing, so starts no quarantine) meets the connection to the
    // old server broken; the next one reaches the promoted server.
    while ours.mutex("elsewhere").is_locked().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(10), "no connection");
    }
    let guard = loop {
        if let Ok(Some(guard)) = ours.mutex("orders").try_lock().await {
            break guard;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "never granted on the promoted replica"
        );
        sleep(Duration::from_millis(50)).await;
    };
    granted_after_the_lost_hold(guard, (believed_until, lost_token), started).await;
    drop(held);
    sleep(Duration::from_millis(10)).await;
}
