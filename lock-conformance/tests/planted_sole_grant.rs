//! The Redis store keeps no grants hash for the hold of an owner of one request alone (a
//! sole grant, `Owner::of_request`): its grant is alive exactly while the owner's field is
//! there. A defect planted in that rule must be caught by the differential test, whose
//! sequences have such owners: here, a sole grant found again by a late copy of its
//! request though its hold was force-released.
//!
//! A file of its own: a script's planted source is its source for the whole test process.

use lock_conformance::redis_fixture::RedisFixture;
use lock_conformance::redis_fixture::through;
use lock_conformance::scenarios::first_disagreement;
use lock_core::LockKind;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_differential_test_catches_a_sole_grant_found_without_its_hold() {
    lock_redis_protocol::script::FAIR_ACQUIRE
        .plant_defect(
            "(grant_alive(0) and redis.call('hexists', key, field) == 1)",
            "(grant_alive(0) and (sole_grant() or redis.call('hexists', key, field) == 1))",
        )
        .expect("the defect is planted");
    let fixture = RedisFixture::standalone(through::<lock_redis::Connector>()).await;
    let caught = first_disagreement(&fixture, LockKind::Fair).await;
    let caught = caught.expect("the differential test catches the planted defect");
    println!("caught: {caught}");
}
