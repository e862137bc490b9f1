//! Count-down latch scenarios: every waiter goes on when the count reaches zero, a new
//! count closes the latch again, a retried count-down counts once, bad input is typed.

use crate::timing::{ms, secs};
use std::time::Duration;

use lock_core::{ErrorKind, LatchRequest, LockName};
use redis::Value;
use tokio::time::{Instant, sleep, timeout};

use crate::Fixture;
use crate::scenarios::{kind, unique};

/// Waiters in two clients all return once the third of three count-downs opens the
/// latch, not before.
pub async fn latch_opens_for_every_waiter(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("latch-open");
    let (l1, l2) = (c1.count_down_latch(&name), c2.count_down_latch(&name));
    assert!(
        l1.try_set_count(3).await.unwrap(),
        "an open latch takes a count"
    );
    assert!(
        !l2.try_set_count(5).await.unwrap(),
        "a counting latch keeps its count"
    );
    let waiters: Vec<_> = (0..6)
        .map(|i| {
            let latch = if i % 2 == 0 { l1.clone() } else { l2.clone() };
            tokio::spawn(async move { latch.wait().await })
        })
        .collect();
    l1.count_down().await.unwrap();
    l2.count_down().await.unwrap();
    assert_eq!(l1.count().await.unwrap(), 1);
    sleep(ms(150)).await;
    assert!(
        waiters.iter().all(|waiter| !waiter.is_finished()),
        "a waiter went on before the count reached zero"
    );
    l2.count_down().await.unwrap();
    for waiter in waiters {
        timeout(secs(2), waiter)
            .await
            .expect("every waiter is woken when the latch opens")
            .unwrap()
            .unwrap();
    }
    assert_eq!(l1.count().await.unwrap(), 0);
    timeout(ms(500), l2.wait())
        .await
        .expect("an open latch does not wait")
        .unwrap();
}

/// A new count closes an open latch again; deleting it opens it for its waiters; counting
/// down an open latch changes nothing.
pub async fn latch_closes_again_and_deletes(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("latch-reclose");
    let latch = locks.count_down_latch(&name);
    assert!(latch.try_set_count(1).await.unwrap());
    latch.count_down().await.unwrap();
    assert_eq!(latch.count().await.unwrap(), 0);
    latch.count_down().await.unwrap();
    assert_eq!(
        latch.count().await.unwrap(),
        0,
        "an open latch stays at zero"
    );
    assert!(
        latch.try_set_count(2).await.unwrap(),
        "an opened latch takes a new count"
    );
    let waiter = waiting_on(&latch).await;
    assert!(
        !waiter.is_finished(),
        "the new count did not close the latch"
    );
    assert!(latch.delete().await.unwrap(), "there was a latch to delete");
    timeout(secs(2), waiter)
        .await
        .expect("deleting opens the latch for its waiters")
        .unwrap()
        .unwrap();
    assert!(!latch.delete().await.unwrap(), "nothing left to delete");
}

/// Bad input is a typed error that changes nothing; a bounded wait on a closed latch
/// ends on time with a `Timeout` error; a lock's name is no latch.
pub async fn latch_bad_input_and_timeouts(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("latch-bad");
    let latch = locks.count_down_latch(&name);
    assert_eq!(
        kind(latch.try_set_count(0).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind(latch.try_set_count(u64::MAX).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(latch.count().await.unwrap(), 0, "a refused count was set");
    let nameless = locks.count_down_latch("");
    assert_eq!(
        kind(nameless.count_down().await),
        ErrorKind::InvalidArgument
    );
    latch
        .wait_for(Duration::ZERO)
        .await
        .expect("a latch never set is open, also to a wait of zero");
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(
        kind(latch.wait_for(Duration::ZERO).await),
        ErrorKind::Timeout,
        "a wait of zero on a closed latch"
    );
    let wait = ms(150);
    let started = Instant::now();
    let err = latch.wait_for(wait).await.expect_err("the latch is closed");
    let took = started.elapsed();
    assert_eq!(err.kind(), ErrorKind::Timeout, "{err}");
    assert!(err.to_string().contains("count-down latch"), "{err}");
    assert!(
        took >= wait && took < wait + ms(400),
        "gave up after {took:?}"
    );
    assert_eq!(
        kind(latch.wait_for(Duration::MAX).await),
        ErrorKind::InvalidArgument
    );
    let held = locks.mutex(&unique("latch-lock")).lock().await.unwrap();
    let on_a_lock = locks.count_down_latch(held.name());
    assert_eq!(kind(on_a_lock.count().await), ErrorKind::Incompatible);
    assert_eq!(
        kind(on_a_lock.try_set_count(1).await),
        ErrorKind::Incompatible
    );
    assert!(held.is_held(), "the lock was touched");
    held.unlock().await.unwrap();
    assert!(latch.delete().await.unwrap());
}

/// A count-down sent again under its id (its reply was lost) answers as the first time
/// and counts once.
pub async fn latch_count_down_sent_twice_counts_once(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let latches = backend.latches();
    let name = LockName::new(&unique("latch-retry")).unwrap();
    assert!(latches.try_set_count(&name, 3).await.unwrap());
    let request = LatchRequest::new(secs(5));
    assert_eq!(latches.count_down(&name, request).await.unwrap(), 2);
    assert_eq!(
        latches.count_down(&name, request).await.unwrap(),
        2,
        "not answered alike"
    );
    assert_eq!(
        latches.count(&name).await.unwrap(),
        2,
        "a retry counted down again"
    );
    let next = LatchRequest::new(secs(5));
    assert_eq!(latches.count_down(&name, next).await.unwrap(), 1);
    assert!(latches.delete(&name).await.unwrap());
}

/// Redisson's `countDown`, written from the semantics file: decrement, delete at or below
/// zero, publish `0` when exactly zero. KEYS[1] latch; ARGV[1] channel; ARGV[2] publish.
const REDISSON_COUNT_DOWN: &str = "local v = redis.call('decr', KEYS[1]) \
    if v <= 0 then redis.call('del', KEYS[1]) end \
    if v == 0 then redis.call(ARGV[2], ARGV[1], '0') end \
    return v";

/// Redisson's `trySetCount`: set when absent and publish `1`. KEYS[1] latch; ARGV[1]
/// channel; ARGV[2] publish; ARGV[3] count.
const REDISSON_TRY_SET_COUNT: &str = "if redis.call('exists', KEYS[1]) == 0 then \
    redis.call('set', KEYS[1], ARGV[3]) redis.call(ARGV[2], ARGV[1], '1') return 1 end \
    return 0";

/// A Redisson peer and this library share one latch: the count is Redisson's string,
/// Redisson's count-downs open it for our waiters, and its `trySetCount` closes it for
/// them until we count down.
pub async fn a_redisson_peer_shares_our_latch(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let publish = redis.publish_command();
    let name = unique("redisson-latch");
    let channel = format!("redisson_countdownlatch__channel__{{{name}}}");
    let latch = fx.client().await.count_down_latch(&name);
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(
        redis.run(&name, &["GET", &name]).await,
        Value::BulkString(b"2".to_vec()),
        "the count is not Redisson's string"
    );
    let count_down = ["EVAL", REDISSON_COUNT_DOWN, "1", &name, &channel, publish];
    let java_count_down = || redis.run(&name, &count_down);
    java_count_down().await;
    assert_eq!(latch.count().await.unwrap(), 1);
    let waiter = tokio::spawn({
        let latch = latch.clone();
        async move { latch.wait().await }
    });
    sleep(ms(150)).await;
    assert!(!waiter.is_finished(), "went on at count 1");
    java_count_down().await;
    timeout(secs(2), waiter)
        .await
        .expect("Redisson's count-down to zero woke our waiter")
        .unwrap()
        .unwrap();
    let set = redis
        .run(
            &name,
            &[
                "EVAL",
                REDISSON_TRY_SET_COUNT,
                "1",
                &name,
                &channel,
                publish,
                "1",
            ],
        )
        .await;
    assert_eq!(
        set,
        Value::Int(1),
        "Redisson could not set a count on an open latch"
    );
    let waiter = waiting_on(&latch).await;
    assert!(
        !waiter.is_finished(),
        "Redisson's count did not close the latch"
    );
    latch.count_down().await.unwrap();
    timeout(secs(2), waiter)
        .await
        .expect("our count-down opened the latch")
        .unwrap()
        .unwrap();
    assert_eq!(redis.run(&name, &["EXISTS", &name]).await, Value::Int(0));
}

/// A task waiting on `latch`, given 150 ms to go on if the latch were open.
async fn waiting_on(
    latch: &lock_core::CountDownLatch,
) -> tokio::task::JoinHandle<Result<(), lock_core::Error>> {
    let latch = latch.clone();
    let waiter = tokio::spawn(async move { latch.wait().await });
    sleep(ms(150)).await;
    waiter
}

/// A latch whose name carries its own hash tag (`{user:1}:ready`) opens for its waiter
/// like any other. Java's channel adds braces around the whole name, which on a Redis
/// Cluster puts the channel in another slot than the key.
pub async fn a_latch_named_with_a_hash_tag_opens(fx: &dyn Fixture) {
    let (ours, other) = (fx.client().await, fx.client().await);
    let name = format!("{{{}}}:ready", unique("latch-tag"));
    let latch = ours.count_down_latch(&name);
    assert!(latch.try_set_count(1).await.unwrap());
    let waiter = tokio::spawn({
        let latch = other.count_down_latch(&name);
        async move { latch.wait_for(secs(3)).await }
    });
    sleep(ms(100)).await;
    assert!(!waiter.is_finished(), "the latch opened early");
    latch.count_down().await.unwrap();
    assert_eq!(latch.count().await.unwrap(), 0);
    timeout(secs(3), waiter)
        .await
        .expect("the waiter woke")
        .unwrap()
        .unwrap();
}

/// A semaphore and a count-down latch keep the same plain count under a name (Redisson's
/// layout). Each refuses the other's name as `Incompatible` and changes nothing: before
/// this, on Redis, a `count_down()` took a permit, a latch's `delete()` removed the
/// semaphore and a latch of 5 took `add_permits(10)` and counted 15. Once a latch has
/// opened (its count is gone) the name is free for a semaphore.
pub async fn a_semaphore_and_a_latch_never_share_a_name(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("sem-latch");
    let semaphore = locks.semaphore(&name);
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let latch = locks.count_down_latch(&name);
    assert_eq!(kind(latch.count_down().await), ErrorKind::Incompatible);
    assert_eq!(kind(latch.count().await), ErrorKind::Incompatible);
    assert_eq!(kind(latch.try_set_count(1).await), ErrorKind::Incompatible);
    assert_eq!(kind(latch.delete().await), ErrorKind::Incompatible);
    assert_eq!(
        semaphore.available().await.unwrap(),
        3,
        "the latch took permits"
    );

    let name = unique("latch-sem");
    let latch = locks.count_down_latch(&name);
    assert!(latch.try_set_count(5).await.unwrap());
    let semaphore = locks.semaphore(&name);
    assert_eq!(
        kind(semaphore.add_permits(10).await),
        ErrorKind::Incompatible
    );
    assert_eq!(
        kind(semaphore.try_acquire(1).await),
        ErrorKind::Incompatible
    );
    assert_eq!(kind(semaphore.available().await), ErrorKind::Incompatible);
    assert_eq!(kind(semaphore.drain().await), ErrorKind::Incompatible);
    assert_eq!(
        kind(semaphore.try_set_permits(2).await),
        ErrorKind::Incompatible
    );
    assert_eq!(
        latch.count().await.unwrap(),
        5,
        "the semaphore changed the count"
    );

    for _ in 0..5 {
        latch.count_down().await.unwrap();
    }
    assert!(
        semaphore.try_set_permits(2).await.unwrap(),
        "an open latch keeps its name"
    );
    assert_eq!(semaphore.available().await.unwrap(), 2);
}
