//! A bounded wait ends at its deadline, also when the store does not answer its first
//! request (a paused server, a connection being re-established): the request goes on in
//! the background and gives back a grant that comes late. On paused time.

use std::sync::Arc;
use std::time::Duration;

use lock_conformance::faulty::{AcquireFault, FaultyBackend};
use lock_core::memory::MemoryBackend;
use lock_core::{ErrorKind, Locks};
use tokio::time::{Instant, sleep};

#[tokio::test(start_paused = true)]
async fn a_bounded_wait_ends_on_time_while_the_store_does_not_answer() {
    let faulty = FaultyBackend::new(Arc::new(MemoryBackend::new()));
    let locks = Locks::new(Arc::new(faulty.clone()));
    let mutex = locks.mutex("bounded:silent");
    faulty.set(AcquireFault::DelayRequest(Duration::from_secs(30)));
    let wait = Duration::from_secs(5);
    let started = Instant::now();
    let err = mutex
        .acquire()
        .wait(wait)
        .await
        .expect_err("nothing answered within the wait");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(
        took < wait + Duration::from_millis(200),
        "a 5 s wait took {took:?}"
    );
    faulty.set(AcquireFault::None);
    // The late request is granted, then given back.
    sleep(Duration::from_secs(40)).await;
    assert!(
        !mutex.is_locked().await.unwrap(),
        "the grant of a wait that ended was kept"
    );
}
