//! Issue 48's mixed fleets, planted back in the mutex release script: a release that
//! offers nothing to the clients of other libraries (they listen, never register), so
//! that our registered waiter takes the lock from under them. The differential test
//! (`first_disagreement`), whose sequences include such a client listening, must catch
//! it.
//!
//! A test binary of its own: a script's planted source is its source for the whole test
//! process.

use lock_conformance::redis_fixture::RedisFixture;
use lock_conformance::redis_fixture::through;
use lock_conformance::scenarios::first_disagreement;
use lock_core::LockKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_differential_test_catches_a_release_that_offers_other_libraries_nothing() {
    lock_redis_protocol::script::MUTEX_RELEASE
        .plant_defect(
            "if counted and foreign and m.reservation then",
            "if false then",
        )
        .expect("the defect is planted");
    let fixture = RedisFixture::standalone(through::<lock_redis::Connector>()).await;
    let caught = first_disagreement(&fixture, LockKind::Mutex).await;
    let caught = caught.expect("the differential test catches the planted defect");
    println!("caught: {caught}");
}
