//! RedLock and MultiLock races that no real network produces on demand: nodes whose
//! requests fail before they are sent, lose their replies or answer late, through
//! [`FaultyBackend`] over in-memory nodes. Each test names the review finding it guards
//! (`shared/reviews/correctness.md`) and failed before its fix. Nothing here waits on a
//! real clock: every test runs on paused time, where the runtime skips ahead whenever
//! all its tasks wait for a timer.

use std::sync::Arc;
use std::time::Duration;

use lock_conformance::faulty::{AcquireFault, FaultyBackend};
use lock_core::memory::MemoryBackend;
use lock_core::{Backend, ErrorKind, Holder, Locks};
use lock_redlock::{MultiLock, RedLock};
use tokio::time::{sleep, timeout};

/// Three in-memory nodes, each behind its own fault switch.
fn nodes() -> (Vec<MemoryBackend>, Vec<FaultyBackend>) {
    let stores: Vec<MemoryBackend> = (0..3).map(|_| MemoryBackend::new()).collect();
    let faulty = stores
        .iter()
        .map(|store| FaultyBackend::new(Arc::new(store.clone())))
        .collect();
    (stores, faulty)
}

fn redlock(nodes: &[FaultyBackend]) -> Locks {
    let nodes = nodes
        .iter()
        .map(|node| Arc::new(node.clone()) as Arc<dyn Backend>)
        .collect();
    RedLock::builder(nodes)
        .build()
        .expect("valid RedLock")
        .locks()
}

fn plain_redlock(stores: &[MemoryBackend]) -> Locks {
    let nodes = stores
        .iter()
        .map(|store| Arc::new(store.clone()) as Arc<dyn Backend>)
        .collect();
    RedLock::builder(nodes)
        .build()
        .expect("valid RedLock")
        .locks()
}

/// Waits until every node was asked for `acquisitions` acquisitions: a RedLock's
/// acquire returns once a majority granted it, while the last node's request may still
/// run (a loaded machine let one land after a force-unlock the test meant to follow it).
/// An in-memory node answers as it is asked.
async fn asked_everywhere(nodes: &[FaultyBackend], acquisitions: usize) {
    timeout(Duration::from_secs(5), async {
        for node in nodes {
            node.asked(acquisitions).await;
        }
    })
    .await
    .expect("every node was asked");
}

/// Deletes the lock `name` on each of `stores` alone, as a restart without persistence
/// or a force-unlock sent to that node would; each must have held it.
async fn force_unlock_on(stores: &[MemoryBackend], name: &str) {
    for store in stores {
        let only = Locks::new(Arc::new(store.clone()));
        assert!(
            only.mutex(name)
                .force_unlock()
                .await
                .expect("the node answers")
        );
    }
}

/// Review #3: a reentry that fails on a majority before reaching it must not be undone
/// there: the undo would take away the outer hold, and another client would get a
/// majority while the outer guard still holds.
#[tokio::test(start_paused = true)]
async fn a_failed_reentry_never_releases_the_outer_hold() {
    let (stores, faulty) = nodes();
    let locks = redlock(&faulty);
    let m = locks.mutex("rl:reentry").with_holder(Holder::unique());
    let outer = m.lock().await.unwrap();
    faulty[1].set(AcquireFault::FailBeforeSending);
    faulty[2].set(AcquireFault::FailBeforeSending);
    let reentry = m.try_lock().await;
    assert!(
        !matches!(reentry, Ok(Some(_))),
        "a reentry granted by one node of three"
    );
    faulty[1].set(AcquireFault::None);
    faulty[2].set(AcquireFault::None);
    // Let any undo the failed attempt scheduled run.
    sleep(Duration::from_millis(100)).await;
    let rival = plain_redlock(&stores);
    assert!(
        rival
            .mutex("rl:reentry")
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "another client got a majority while the outer guard holds"
    );
    assert!(outer.is_held());
    outer.unlock().await.unwrap();
}

/// A node that grants after the lock's release already ran there (the quorum did not
/// wait for it) must not stay locked for a whole lease with nobody to release it.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_after_the_release_is_released_too() {
    let (stores, faulty) = nodes();
    faulty[2].set(AcquireFault::DelayRequest(Duration::from_millis(100)));
    let locks = redlock(&faulty);
    let guard = locks.mutex("rl:late").lock().await.unwrap();
    guard.unlock().await.unwrap();
    sleep(Duration::from_millis(300)).await;
    assert!(
        stores[2].held_locks().is_empty(),
        "the slow node still holds {:?} after the release",
        stores[2].held_locks()
    );
}

/// A release that a majority answers "not held" while a minority still holds the lock
/// (the majority lost it) is not "still held": the hold was lost, the release says so, and
/// the remaining guards of the hold are lost too.
#[tokio::test(start_paused = true)]
async fn a_majority_that_lost_the_lock_ends_the_remaining_guards() {
    let (stores, faulty) = nodes();
    let locks = redlock(&faulty);
    let m = locks
        .mutex("rl:majority-lost")
        .with_holder(Holder::unique());
    let first = m.lock().await.unwrap();
    let second = m.lock().await.unwrap();
    asked_everywhere(&faulty, 2).await;
    // Two nodes lose the lock (a restart without persistence, say).
    force_unlock_on(&stores[1..], "rl:majority-lost").await;
    let lost = first
        .unlock()
        .await
        .expect_err("a release of a hold a majority lost");
    assert!(lost.is_not_held(), "{lost}");
    assert!(
        !second.is_held(),
        "a guard believes it holds a lock a majority no longer has"
    );
    let rival = plain_redlock(&stores);
    let taken = rival.mutex("rl:majority-lost").try_lock().await.unwrap();
    assert!(taken.is_some(), "a majority is free");
}

/// Review #12: two parts with one name (on two backends) could be ordered differently
/// by two clients, and each could keep what the other waits for: refused at build time.
#[test]
fn multilock_parts_with_one_name_are_refused() {
    let (a, b) = (MemoryBackend::new(), MemoryBackend::new());
    let built = MultiLock::builder()
        .lock(Arc::new(a), "x")
        .lock(Arc::new(b), "x")
        .build();
    let err = built.expect_err("a duplicate name is refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("`x`"), "{err}");
}

/// Review #8 on a MultiLock: a waiter that gives up while its attempt is on its way
/// (the part it waits for answers slowly) must not keep the parts that attempt took.
#[tokio::test(start_paused = true)]
async fn a_multilock_waiter_cancelled_mid_attempt_keeps_nothing() {
    let (fast, slow) = (MemoryBackend::new(), MemoryBackend::new());
    let delayed = FaultyBackend::new(Arc::new(slow.clone()));
    delayed.set(AcquireFault::DelayRequest(Duration::from_millis(50)));
    let blocker = Locks::new(Arc::new(slow.clone()));
    let held = blocker.mutex("b-part").lock().await.unwrap();
    let multi = MultiLock::builder()
        .lock(Arc::new(fast.clone()), "a-part")
        .lock(Arc::new(delayed), "b-part")
        .build()
        .unwrap()
        .locks();
    let gave_up = timeout(Duration::from_millis(10), multi.mutex("both").lock()).await;
    assert!(gave_up.is_err(), "one part is held by someone else");
    sleep(Duration::from_millis(200)).await;
    assert!(
        fast.held_locks().is_empty(),
        "a cancelled MultiLock waiter kept {:?}",
        fast.held_locks()
    );
    held.unlock().await.unwrap();
}

/// A release answers once a majority agrees; a slow node's part still runs after it.
/// A force-unlock in that moment finds the lock on that node alone: the lock was free,
/// and saying it was held would tell the caller it took it away from someone.
#[tokio::test(start_paused = true)]
async fn a_force_unlock_behind_a_majority_release_finds_the_lock_free() {
    let (stores, faulty) = nodes();
    faulty[2].delay_releases(Duration::from_millis(300));
    let locks = redlock(&faulty);
    let m = locks.mutex("rl:straggler");
    m.lock().await.unwrap().unlock().await.unwrap();
    assert!(
        !stores[2].held_locks().is_empty(),
        "the slow node's release was expected to be still on its way"
    );
    assert!(
        !m.force_unlock().await.unwrap(),
        "a lock a majority had released was reported held"
    );
    let rival = plain_redlock(&stores);
    assert!(
        rival
            .mutex("rl:straggler")
            .try_lock()
            .await
            .unwrap()
            .is_some()
    );
}

/// A guard whose lock was force-unlocked on a majority and is still on one node (that
/// node's delete came late, or failed) is stale: its release says "not held", as on one
/// node, instead of reporting a release of a lock it no longer had.
#[tokio::test(start_paused = true)]
async fn a_stale_guard_with_a_minority_part_left_is_told_it_lost_the_lock() {
    let (stores, faulty) = nodes();
    let locks = redlock(&faulty);
    let stale = locks.mutex("rl:stale").lock().await.unwrap();
    asked_everywhere(&faulty, 1).await;
    force_unlock_on(&stores[1..], "rl:stale").await;
    let err = stale
        .unlock()
        .await
        .expect_err("a stale guard must not release");
    assert!(err.is_not_held(), "{err}");
    assert!(
        stores[0].held_locks().is_empty(),
        "the minority part stays after the release"
    );
}

/// A RedLock try that failed (two nodes lost their replies) is sent again under the same
/// request id, as every request whose outcome is unknown is. The failed try's grants on
/// those two nodes are undone by undo releases that are slow to arrive (100 ms). The
/// resend must not be answered by those nodes replaying the grants the undos then take
/// away: its holder would believe it holds a lock that a majority no longer has, and
/// another client would get it (CI failure of `write_release_wakes_all_readers` on
/// RedLock over Redis: a reader's release found its hold gone from two nodes).
#[tokio::test]
async fn a_resent_try_is_not_answered_by_grants_its_failed_try_undoes() {
    let (_stores, faulty) = nodes();
    let locks = redlock(&faulty);
    for node in &faulty[..2] {
        node.set(AcquireFault::LoseReply);
        node.delay_releases(Duration::from_millis(100));
    }
    let held = locks
        .mutex("rl:resent")
        .try_lock_for(Duration::from_secs(2), None)
        .await
        .expect("acquired after a resend")
        .expect("the lock was free");
    for node in &faulty[..2] {
        node.delay_releases(Duration::ZERO);
    }
    // Every undo of the failed try has arrived by now.
    sleep(Duration::from_millis(300)).await;
    let other = redlock(&faulty);
    let taken = other
        .mutex("rl:resent")
        .try_lock()
        .await
        .expect("the nodes answer");
    assert!(
        taken.is_none(),
        "a second client got the lock while the first still believes it holds it"
    );
    assert!(held.is_held());
    held.unlock().await.expect("released on a majority");
}

/// Review 2, N15: a renewal that finds the lock gone on one node (a restart without
/// persistence) while the majority keeps it gives that node the lock back, under the
/// grant's own id and through the node's gate: a release that comes while the repair is
/// still on its way waits for it and ends the repaired grant too, so that nothing is
/// left on that node. (Before, the repair bypassed the gate and landed after the
/// release, holding the node for a lease with no guard to release it.)
#[tokio::test(start_paused = true)]
async fn a_repair_on_its_way_is_released_with_the_lock() {
    let (stores, faulty) = nodes();
    let nodes = faulty
        .iter()
        .map(|node| Arc::new(node.clone()) as Arc<dyn Backend>)
        .collect();
    let redlock = RedLock::builder(nodes).build().expect("valid RedLock");
    let locks = Locks::builder(Arc::new(redlock))
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .expect("valid settings");
    let guard = locks.mutex("rl:repair").lock().await.unwrap();
    asked_everywhere(&faulty, 1).await;
    // Node 0 loses the lock; its next acquisition, the repair, is slow.
    let lost = lock_core::LockRef::new(
        lock_core::LockKind::Mutex,
        lock_core::LockName::new("rl:repair").unwrap(),
        lock_core::Owner::new(locks.client_id(), "anyone"),
    );
    assert!(stores[0].force_release(&lost).await.unwrap());
    faulty[0].set(AcquireFault::DelayRequest(Duration::from_millis(300)));
    // A renewal round (every 200 ms) finds it gone there and sends the repair.
    timeout(Duration::from_secs(2), async {
        while faulty[0].acquisitions() < 2 {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the renewal repairs node 0");
    guard.unlock().await.unwrap();
    // The repair lands, then node 0's release, which waited for it.
    sleep(Duration::from_millis(500)).await;
    assert!(
        stores[0].held_locks().is_empty(),
        "a repair that landed after the release keeps node 0 held: {:?}",
        stores[0].held_locks()
    );
}

/// Five nodes: two answer at once that another client holds the lock, three cannot be
/// reached and say so 50 ms later. No majority can be had, and not because of holders:
/// the answer is the nodes' connection error. Before, the RedLock stopped at the first
/// answers that made a majority impossible and called it busy, so a try answered
/// `Ok(None)` and a bounded wait ran out, while the majority of nodes was down (seen as
/// a flaky `three_dead_nodes_fail_within_the_wait_with_every_nodes_error` under load).
#[tokio::test(start_paused = true)]
async fn unreachable_nodes_that_answer_last_still_make_the_answer_an_error() {
    let stores: Vec<MemoryBackend> = (0..5).map(|_| MemoryBackend::new()).collect();
    let faulty: Vec<FaultyBackend> = stores
        .iter()
        .map(|store| FaultyBackend::new(Arc::new(store.clone())))
        .collect();
    let other = Locks::new(Arc::new(stores[0].clone()));
    let _held0 = other.mutex("rl:late-errors").lock().await.unwrap();
    let other = Locks::new(Arc::new(stores[1].clone()));
    let _held1 = other.mutex("rl:late-errors").lock().await.unwrap();
    for node in &faulty[2..] {
        node.set(AcquireFault::FailAfter(Duration::from_millis(50)));
    }
    let nodes = faulty
        .iter()
        .map(|node| Arc::new(node.clone()) as Arc<dyn Backend>)
        .collect();
    let locks = RedLock::builder(nodes).build().unwrap().locks();
    let err = locks
        .mutex("rl:late-errors")
        .try_lock()
        .await
        .expect_err("three of five nodes are unreachable");
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
}

/// A force-unlock whose request to a slow node outlived the node timeout lands there
/// later. The same client's next acquisition must not overtake it: the late delete
/// would take that hold away on the node, and with one more such node the guard would
/// hold a minority while it believes it holds the lock (seen once in CI, on three Redis
/// nodes: a waiter's hold vanished under it and its release answered "not held").
#[tokio::test(start_paused = true)]
async fn a_force_unlock_on_its_way_never_deletes_a_later_acquisition_of_its_client() {
    let (stores, faulty) = nodes();
    // Longer than the node timeout of requests without a lease (1 s by default).
    faulty[2].delay_force_releases(Duration::from_secs(2));
    let locks = redlock(&faulty);
    let m = locks.mutex("rl:late-force");
    assert!(!m.force_unlock().await.unwrap(), "the lock was free");
    assert!(
        faulty[2].acquisitions() == 0,
        "nothing was acquired yet on the slow node"
    );
    let guard = m.lock().await.unwrap();
    // Long after the slow force release landed.
    sleep(Duration::from_secs(5)).await;
    assert!(
        !stores[2].held_locks().is_empty(),
        "the late force release deleted the hold acquired after it"
    );
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
    assert!(stores.iter().all(|store| store.held_locks().is_empty()));
}

/// A revocation that reached a majority and missed one node (its force-release timed
/// out there before it was sent), then a late attempt of the same owner that took the
/// free majority afresh: the majority's hold began with the late grant, the missed node
/// still has the old one. The old guard must learn at its next renewal that it lost its
/// majority. Before, the renewal gave an origin only when every renewing node agreed,
/// so the disagreement made it fall back to hold counts (two on the missed node), and
/// the revoked guard was renewed for as long as the owner held the lock (CI failures of
/// the conformance scenario `a_revoked_holder_learns_it_though_its_owner_holds_again`
/// on RedLock over Redis, a loaded machine's 50 ms node timeout in the operator's call).
#[tokio::test(start_paused = true)]
async fn a_revoked_guard_whose_old_hold_a_minority_keeps_learns_it_lost_the_majority() {
    let (stores, faulty) = nodes();
    let lease = Duration::from_millis(900);
    let holder = Locks::builder(Arc::new(
        RedLock::builder(
            faulty
                .iter()
                .map(|n| Arc::new(n.clone()) as Arc<dyn Backend>)
                .collect(),
        )
        .build()
        .expect("valid RedLock"),
    ))
    .watchdog_lease(lease)
    .build()
    .expect("valid settings");
    let guard = holder.mutex("rl:revoked-again").lock().await.unwrap();
    asked_everywhere(&faulty, 1).await;
    force_unlock_on(&stores[1..], "rl:revoked-again").await;
    // The owner's late attempt, through a RedLock of its own over the same nodes.
    let (client_id, holder_name) = guard.owner().split_once(':').unwrap();
    let same_owner = lock_core::LockRef::new(
        lock_core::LockKind::Mutex,
        lock_core::LockName::new("rl:revoked-again").unwrap(),
        lock_core::Owner::new(client_id, holder_name),
    );
    let late = RedLock::builder(
        faulty
            .iter()
            .map(|n| Arc::new(n.clone()) as Arc<dyn Backend>)
            .collect(),
    )
    .build()
    .expect("valid RedLock");
    let request = lock_core::backend::AcquireRequest::new(lease);
    let granted = late.acquire(&same_owner, request).await.unwrap();
    assert!(
        matches!(granted, lock_core::backend::Acquire::Acquired { .. }),
        "{granted:?}"
    );
    asked_everywhere(&faulty, 2).await;
    let lost = timeout(lease / 3 + Duration::from_millis(100), guard.lost())
        .await
        .expect("the revoked guard is told at its next renewal");
    assert!(lost.is_lost(), "{lost}");
}
