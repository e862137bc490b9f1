//! Names and holders the tables cannot keep (too long, or with a NUL) are refused with a typed error before
//! anything is sent, and nobody's locks change; the longest name kept works for every
//! lock kind.

use std::time::Duration;

use lock_core::{ErrorKind, Holder, Locks};
use lock_postgres::{Connector, MAX_NAME_BYTES, MAX_OWNER_BYTES};
use lock_testkit::{PostgresServer, postgres_client};

/// A name of `len` bytes that compresses badly, as a b-tree index would store it.
fn varied_name(len: usize) -> String {
    let mut name = String::with_capacity(len + 40);
    let mut i = 0_u32;
    while name.len() < len {
        name.push_str(&spread_hex(i));
        i += 1;
    }
    name.truncate(len);
    name
}

fn spread_hex(i: u32) -> String {
    format!("{:x}", u64::from(i).wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_and_holders_too_long_for_the_tables_are_refused_and_change_nothing() {
    let server = PostgresServer::start().await;
    let backend = Connector::new(server.url())
        .connect()
        .await
        .expect("connects");
    let locks = Locks::new(std::sync::Arc::new(backend));
    let side_door = postgres_client(&server.url()).await;

    // Someone's lock, which nothing below may touch.
    let held = locks.mutex("someone").lock().await.expect("free");

    let longest = varied_name(MAX_NAME_BYTES);
    let guard = locks
        .mutex(&longest)
        .lock()
        .await
        .expect("the longest name kept");
    guard.unlock().await.expect("released");
    let rw = locks.rw_lock(&longest);
    let one = Holder::unique();
    let write = rw.writer().with_holder(one.clone()).lock().await;
    let write = write.expect("write");
    let read = rw
        .reader()
        .with_holder(one)
        .lock()
        .await
        .expect("downgrade");
    write.unlock().await.expect("released");
    read.unlock().await.expect("released");
    let fair = locks.fair_mutex(&longest).lock().await.expect("fair");
    fair.unlock().await.expect("released");

    let too_long = varied_name(MAX_NAME_BYTES + 1);
    let refused = [
        locks.mutex(&too_long).lock().await.map(drop),
        locks.mutex(&too_long).try_lock().await.map(drop),
        locks.fair_mutex(&too_long).lock().await.map(drop),
        locks.rw_lock(&too_long).reader().lock().await.map(drop),
        locks.rw_lock(&too_long).writer().lock().await.map(drop),
        locks.mutex(&too_long).force_unlock().await.map(drop),
        locks.mutex(&too_long).is_locked().await.map(drop),
    ];
    for outcome in refused {
        let err = outcome.expect_err("a name longer than the tables keep");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("name"), "{err}");
    }

    let holder = Holder::new(&"h".repeat(MAX_OWNER_BYTES)).expect("a valid holder id");
    let err = locks
        .mutex("other")
        .with_holder(holder)
        .lock()
        .await
        .expect_err("an owner longer than the tables keep");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");

    // PostgreSQL's text cannot hold a NUL: refused here, not by the server as a backend
    // error after a round trip.
    let with_nul = [
        locks.mutex("a\0b").lock().await.map(drop),
        locks.fair_mutex("a\0b").try_lock().await.map(drop),
        locks.rw_lock("a\0b").writer().lock().await.map(drop),
        locks.mutex("a\0b").is_locked().await.map(drop),
        locks
            .mutex("other")
            .with_holder(Holder::new("h\0x").expect("lock-core accepts it"))
            .lock()
            .await
            .map(drop),
    ];
    for outcome in with_nul {
        let err = outcome.expect_err("a NUL PostgreSQL cannot store");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains("NUL"), "{err}");
    }

    let rows: Vec<(String, i32)> = side_door
        .query("SELECT name, holds FROM distlock.holds", &[])
        .await
        .expect("reads the holds")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert_eq!(
        rows,
        [("someone".to_owned(), 1)],
        "only someone's hold is left"
    );
    assert!(held.is_held());
    tokio::time::timeout(Duration::from_secs(5), held.unlock())
        .await
        .expect("released in time")
        .expect("released");
}
