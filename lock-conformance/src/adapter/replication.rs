//! Replicas: acknowledgement confirms or gives a grant back, and a dataset rolled back
//! by a promotion starts the restart quarantine.

use crate::timing::{ms, secs};

use lock_core::{ErrorKind, Locks};
use lock_redis_protocol::NotReplicated;
use lock_testkit::{RedisSentinel, RedisServer};
use tokio::time::Instant;

use super::{AdapterConnect, ConnectSpec, locks};

pub async fn without_a_replica_an_acquisition_is_not_replicated_and_given_back(
    connect: &AdapterConnect,
) {
    let server = RedisServer::start().await;
    let mut spec = ConnectSpec::new(server.url());
    spec.replica_ack = Some((1, ms(200)));
    let acked = locks(connect, spec).await.unwrap();
    let err = acked
        .mutex("ack:none")
        .lock()
        .await
        .expect_err("no replica confirms");
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<NotReplicated>());
    assert_eq!(
        source,
        Some(&NotReplicated {
            wanted: 1,
            acknowledged: 0
        }),
        "{err}"
    );
    let plain = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let guard = plain.mutex("ack:none").try_lock().await.unwrap();
    assert!(guard.is_some(), "the unconfirmed acquisition was left held");
}

pub async fn with_a_replica_every_lock_kind_works(connect: &AdapterConnect) {
    let deployment = RedisSentinel::start().await;
    let mut spec = ConnectSpec::new(deployment.url());
    spec.replica_ack = Some((1, secs(1)));
    let locks = locks(connect, spec).await.unwrap();
    locks
        .mutex("ack:m")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let fair = locks.fair_mutex("ack:f").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let read = locks.rw_lock("ack:rw").reader().lock().await.unwrap();
    read.unlock().await.unwrap();
    // The acquisition reached the replica before the call returned.
    let held = locks.rw_lock("ack:rw").writer().lock().await.unwrap();
    let replica = deployment.replica().unwrap();
    let fields: Vec<String> = replica.command(&["HKEYS", "ack:rw"]).await;
    assert!(fields.contains(&"mode".to_owned()), "{fields:?}");
    held.unlock().await.unwrap();
}

/// Second review, N5: a server's dataset can go back in time without a restart. M1 and
/// M2 replicate; M2 is promoted beside M1 (a split brain), A locks `x` on M1, M1 becomes
/// M2's replica and takes M2's data (no `x`), then M1 is promoted again. M1's run id
/// never changed, and the quarantine tied to it let B have `x` 0.4 ms later while A's
/// guard still held it. The quarantine now follows the replication id, which every
/// promotion changes: B waits it out, by when A knows its hold is gone.
pub async fn a_rollback_without_a_restart_starts_the_quarantine(connect: &AdapterConnect) {
    let (m1, m2) = (RedisServer::start().await, RedisServer::start().await);
    let lease = ms(1500);
    let quarantine = secs(2);
    let client = async || {
        let spec = ConnectSpec {
            restart_quarantine: Some(quarantine),
            ..ConnectSpec::new(m1.url())
        };
        Locks::builder(connect(spec).await.unwrap())
            .watchdog_lease(lease)
            .build()
            .unwrap()
    };
    let (a, b) = (client().await, client().await);
    replicate(&m2, &m1).await;
    // A fresh server's first grant waits out the quarantine; the epoch then reaches M2.
    tokio::time::timeout(quarantine * 3, a.mutex("rollback:warm-up").lock())
        .await
        .expect("granted after the quarantine")
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let _: i64 = m1.command(&["WAIT", "1", "2000"]).await;
    let _: String = m2.command(&["REPLICAOF", "NO", "ONE"]).await;
    let held = tokio::time::timeout(secs(1), a.mutex("x").lock())
        .await
        .expect("granted at once: no rollback yet")
        .unwrap();
    let _: String = m2
        .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
        .await;
    replicate(&m1, &m2).await;
    let _: String = m1.command(&["REPLICAOF", "NO", "ONE"]).await;
    let failed_back = Instant::now();
    let taken = tokio::time::timeout(secs(10), async {
        loop {
            match b.mutex("x").lock().await {
                Ok(guard) => return guard,
                // Requests sent while M1 was a replica may still be answered READONLY.
                Err(err) if err.kind() == ErrorKind::Connection => {
                    tokio::time::sleep(ms(20)).await;
                }
                Err(err) => panic!("unexpected error after the failback: {err:?}"),
            }
        }
    })
    .await
    .expect("B gets x after the quarantine");
    assert!(
        !held.is_held(),
        "TWO OWNERS: B got x {:?} after the failback while A's guard held it",
        failed_back.elapsed()
    );
    assert!(
        failed_back.elapsed() >= quarantine * 9 / 10,
        "granted {:?} after the failback, inside the quarantine",
        failed_back.elapsed()
    );
    taken.unlock().await.unwrap();
}

/// Makes `replica` a replica of `master` and waits until it has synchronised.
async fn replicate(replica: &RedisServer, master: &RedisServer) {
    let port = master.port().to_string();
    let _: String = replica.command(&["REPLICAOF", "127.0.0.1", &port]).await;
    let deadline = Instant::now() + secs(10);
    loop {
        let info: String = replica.command(&["INFO", "replication"]).await;
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "the replica never synchronised");
        tokio::time::sleep(ms(10)).await;
    }
}
