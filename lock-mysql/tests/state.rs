//! A name's row on a real MariaDB the test starts stays small however often the name is
//! taken: a release whose acquisition was sent once leaves no record of it, and the
//! next release of the name lets the store forget the answer to the one before.
//! Without either, every pair left about 54 bytes in the row for twice the retry window
//! (54 kB after 1 000 pairs in 1.6 s), and every later operation on the name read and
//! wrote all of it.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lock_core::Holder;
use lock_mysql::Connector;
use lock_testkit::MariaDbServer;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_name_keeps_a_small_row() {
    let server = MariaDbServer::start().await;
    let locks = Connector::new(server.url()).locks().await.unwrap();
    let mutex = locks.mutex("hot");
    let size = || {
        server
            .sql("SELECT LENGTH(state) FROM distlock_names")
            .trim()
            .parse::<usize>()
            .expect("one row")
    };
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let first = size();
    for _ in 0..300 {
        mutex.lock().await.unwrap().unlock().await.unwrap();
    }
    let after = size();
    assert!(
        after <= first + 64,
        "the row grew from {first} to {after} bytes over 300 pairs"
    );
    // A reentrant hold ends grant by grant, and leaves no more behind.
    Holder::scope(async {
        let outer = mutex.lock().await.unwrap();
        let inner = mutex.lock().await.unwrap();
        assert_eq!(mutex.hold_count().await.unwrap(), 2);
        inner.unlock().await.unwrap();
        outer.unlock().await.unwrap();
    })
    .await;
    assert!(size() <= first + 64, "{} bytes", size());
}
