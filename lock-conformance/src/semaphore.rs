//! Semaphore scenarios: bounded concurrency, local arrival order, the operations and
//! their bad input, nothing kept by dropped permits or abandoned waits, retries counted
//! once.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{
    ErrorKind, LockName, Locks, PermitAnswer, PermitRequest, PermitReservation, RequestId,
};
use tokio::time::{Instant, sleep, timeout};

use crate::Fixture;
use crate::faulty::FaultyBackend;
use crate::scenarios::{eventually, kind, unique};

/// Never more than the permits are inside, with eight workers on two clients.
pub async fn semaphore_bounds_concurrency(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("sem-bound");
    assert!(c1.semaphore(&name).try_set_permits(3).await.unwrap());
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let semaphore = if i % 2 == 0 { &c1 } else { &c2 }.semaphore(&name);
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            tokio::spawn(async move {
                for _ in 0..4 {
                    let permits = semaphore.acquire(1).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    sleep(ms(10)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permits.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        timeout(secs(20), worker)
            .await
            .expect("the workers finish")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} workers were inside a semaphore of 3");
    assert!(most >= 2, "the permits were never shared ({most} at most)");
    assert_eq!(c2.semaphore(&name).available().await.unwrap(), 3);
}

/// In one client, a waiter for two permits that came first is served before a later
/// waiter for one, although one permit would have let the later one in earlier.
///
/// Arrival is by events, not by sleeps: each waiter is polled once, which puts it in its
/// client's line, before the next one is made.
pub async fn semaphore_waiters_of_one_client_go_in_arrival_order(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("sem-order");
    let semaphore = locks.semaphore(&name);
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let [one, other] = [
        semaphore.acquire(1).await.unwrap(),
        semaphore.acquire(1).await.unwrap(),
    ];
    let served = std::sync::Mutex::new(Vec::new());
    let waiter = |permits: u64| {
        let (semaphore, served) = (&semaphore, &served);
        async move {
            let taken = semaphore.acquire(permits).await.unwrap();
            served.lock().unwrap().push(permits);
            taken.release().await.unwrap();
        }
    };
    let mut first = std::pin::pin!(waiter(2));
    assert!(
        poll_once(first.as_mut()).await.is_pending(),
        "no permit is free"
    );
    let mut second = std::pin::pin!(waiter(1));
    assert!(
        poll_once(second.as_mut()).await.is_pending(),
        "no permit is free"
    );
    let releases = async {
        // One permit back: the first waiter still lacks one, and the second must wait.
        // The pause is the second's chance to overtake, which it must not take.
        one.release().await.unwrap();
        sleep(ms(150)).await;
        other.release().await.unwrap();
    };
    timeout(secs(5), async { tokio::join!(first, second, releases) })
        .await
        .expect("both waiters are served");
    assert_eq!(
        *served.lock().unwrap(),
        [2, 1],
        "the later waiter for one overtook the first"
    );
}

/// Polls `future` once, with the caller's waker: whatever it does on its first poll is
/// done when this returns.
async fn poll_once<F: std::future::Future>(
    mut future: std::pin::Pin<&mut F>,
) -> std::task::Poll<F::Output> {
    std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx))).await
}

/// Every operation, and bad input as typed errors that change nothing.
pub async fn semaphore_operations_and_bad_input(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("sem-ops");
    let semaphore = locks.semaphore(&name);
    assert_eq!(semaphore.available().await.unwrap(), 0, "never set: none");
    assert_eq!(
        kind(semaphore.try_set_permits(u64::MAX).await),
        ErrorKind::InvalidArgument
    );
    assert!(semaphore.try_set_permits(5).await.unwrap());
    assert!(!semaphore.try_set_permits(7).await.unwrap(), "set twice");
    // A semaphore's name is no lock's, as a lock's is no semaphore's (below).
    let on_a_semaphore = locks.mutex(&name);
    assert_eq!(
        kind(on_a_semaphore.try_lock().await),
        ErrorKind::Incompatible
    );
    assert_eq!(
        kind(on_a_semaphore.is_locked().await),
        ErrorKind::Incompatible
    );
    assert_eq!(semaphore.available().await.unwrap(), 5);
    assert!(semaphore.try_acquire(6).await.unwrap().is_none());
    assert_eq!(
        kind(semaphore.acquire(u64::MAX).await),
        ErrorKind::InvalidArgument
    );
    let none = semaphore
        .try_acquire(0)
        .await
        .unwrap()
        .expect("zero permits are free");
    assert_eq!(none.count(), 0);
    let five = semaphore
        .try_acquire(5)
        .await
        .unwrap()
        .expect("five are free");
    assert_eq!(five.count(), 5);
    assert_eq!(semaphore.available().await.unwrap(), 0);
    let wait = ms(150);
    let started = Instant::now();
    assert!(semaphore.try_acquire_for(1, wait).await.unwrap().is_none());
    let took = started.elapsed();
    assert!(
        took >= wait && took < wait + ms(400),
        "gave up after {took:?}"
    );
    semaphore.add_permits(-2).await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), -2);
    assert_eq!(
        semaphore.drain().await.unwrap(),
        -2,
        "drain answers what it found"
    );
    assert_eq!(semaphore.available().await.unwrap(), 0);
    five.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 5);
    let nameless = locks.semaphore("");
    assert_eq!(kind(nameless.available().await), ErrorKind::InvalidArgument);
    let held = locks.mutex(&unique("sem-lock")).lock().await.unwrap();
    let on_a_lock = locks.semaphore(held.name());
    assert_eq!(
        kind(on_a_lock.try_set_permits(1).await),
        ErrorKind::Incompatible
    );
    assert_eq!(kind(on_a_lock.available().await), ErrorKind::Incompatible);
    assert!(held.is_held(), "the lock was touched");
    held.unlock().await.unwrap();
}

/// A semaphore never set has no permits, and a wait for one of them would go on in
/// silence (a mistyped name hangs): the wait says why, once, as a warning. A try, which
/// does not wait, says nothing.
pub async fn a_wait_for_a_never_set_semaphore_says_why(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let never_set = locks.semaphore(&unique("sem-unset"));
    let (logs, _capturing) = crate::logs::Logs::capture();
    assert!(never_set.try_acquire(1).await.unwrap().is_none());
    assert!(
        logs.matching(tracing::Level::WARN, "never set").is_empty(),
        "a try waits for nothing"
    );
    // Long enough for the first answer to come on a loaded machine (through PgBouncer
    // beside a full test run, 100 ms once ended the wait before any answer came).
    let wait = secs(1);
    assert!(never_set.try_acquire_for(1, wait).await.unwrap().is_none());
    let said = logs.matching(tracing::Level::WARN, "never set");
    assert_eq!(said.len(), 1, "one warning per wait: {said:?}");
}

/// Dropped permits come back, and a wait given up while the permits were granted (their
/// reply slowed down) keeps nothing.
pub async fn dropped_permits_and_abandoned_waits_keep_nothing(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("sem-drop");
    let semaphore = locks.semaphore(&name);
    assert!(semaphore.try_set_permits(1).await.unwrap());
    drop(semaphore.acquire(1).await.unwrap());
    assert!(
        eventually(secs(2), || async {
            semaphore.available().await.unwrap() == 1
        })
        .await,
        "dropped permits never came back"
    );
    let held = semaphore.acquire(1).await.unwrap();
    for _ in 0..20 {
        // Waits given up at every moment, some of them while a grant is on its way.
        let abandoned = timeout(ms(5), semaphore.acquire(1)).await;
        assert!(abandoned.is_err(), "took a permit that was held");
    }
    held.release().await.unwrap();
    // Each grant now answers 100 ms late; every wait gives up after 20 ms.
    faulty.delay_permit_grants(ms(100));
    for _ in 0..3 {
        let abandoned = timeout(ms(20), semaphore.acquire(1)).await;
        assert!(abandoned.is_err(), "a slowed grant arrived in time");
    }
    faulty.delay_permit_grants(Duration::ZERO);
    assert!(
        eventually(secs(3), || async {
            semaphore.available().await.unwrap() == 1
        })
        .await,
        "an abandoned wait kept a permit: {} available",
        semaphore.available().await.unwrap()
    );
}

/// A storm of acquisitions cancelled at every moment (a timeout of 0 to 200 µs), some of
/// them in the very wake-up that brings their grant: every permit comes back. (A grant
/// sent to a caller cancelled before it read it was lost for good.)
pub async fn a_storm_of_cancelled_acquisitions_loses_no_permit(fx: &dyn Fixture) {
    const PERMITS: i64 = 3;
    let locks = fx.client().await;
    let name = unique("sem-storm");
    let semaphore = locks.semaphore(&name);
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let until = Instant::now() + ms(1_500);
    let tasks: Vec<_> = (0..8u64)
        .map(|task| {
            let semaphore = locks.semaphore(&name);
            tokio::spawn(async move {
                // Bounded by turns too: on paused time the clock stands still while
                // every acquisition is answered at once.
                for turn in task + 1..=task + 2_000 {
                    if Instant::now() >= until {
                        break;
                    }
                    let wait = Duration::from_micros((turn * 37) % 200);
                    if let Ok(Ok(permits)) = timeout(wait, semaphore.acquire(1)).await {
                        drop(permits);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        eventually(secs(3), || async {
            semaphore.available().await.unwrap() == PERMITS
        })
        .await,
        "permits were lost: {} of {PERMITS} available",
        semaphore.available().await.unwrap()
    );
}

/// A starving waiter that gives up while its reserving attempt is on its way holds
/// nothing back once the attempt landed: its cancellation goes after the attempt. (It
/// went first, and the attempt then reserved the permits again, for a waiter gone, for
/// three seconds.)
pub async fn a_cancelled_starving_waiter_leaves_no_reservation(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let waiter = Locks::new(Arc::new(faulty.clone()));
    let holder = fx.client().await;
    let name = unique("sem-cancelled-starving");
    let semaphore = holder.semaphore(&name);
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let (first, second) = (
        semaphore.acquire(1).await.unwrap(),
        semaphore.acquire(1).await.unwrap(),
    );
    // Each attempt of the waiter takes 150 ms to arrive; the waiter gives up while its
    // second attempt, past the starvation threshold, is on its way.
    faulty.delay_permit_requests(ms(150));
    let gave_up = timeout(ms(250), waiter.semaphore(&name).acquire(1)).await;
    assert!(gave_up.is_err(), "every permit is held");
    // The attempt lands, then the cancellation.
    sleep(ms(200)).await;
    first.release().await.unwrap();
    let other = fx.client().await;
    let taken = timeout(ms(500), other.semaphore(&name).acquire(1)).await;
    assert!(
        taken.is_ok(),
        "a gone waiter's reservation held a free permit back"
    );
    drop(taken);
    drop(second);
}

/// A permit request sent again under its id (its reply was lost) answers as the first
/// time and takes or gives back once; a grant is given back once, however often its
/// end is sent, and a late copy of its acquisition takes nothing; the end of a grant
/// never made gives nothing.
pub async fn a_permit_request_sent_twice_counts_once(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let semaphores = backend.semaphores();
    let name = LockName::new(&unique("sem-retry")).unwrap();
    assert!(semaphores.try_set_permits(&name, 3).await.unwrap());
    let take = PermitRequest::new(2, secs(5));
    assert!(semaphores.try_acquire(&name, take).await.unwrap().taken());
    assert!(
        semaphores.try_acquire(&name, take).await.unwrap().taken(),
        "not answered alike"
    );
    assert_eq!(
        semaphores.available(&name).await.unwrap(),
        1,
        "a retry took again"
    );
    let give = PermitRequest::of_grant(take.id, secs(5));
    assert_eq!(semaphores.release(&name, give).await.unwrap(), 3);
    assert_eq!(
        semaphores.release(&name, give).await.unwrap(),
        3,
        "not answered alike"
    );
    assert_eq!(
        semaphores.available(&name).await.unwrap(),
        3,
        "a retry gave back again"
    );
    assert!(
        !semaphores.try_acquire(&name, take).await.unwrap().taken(),
        "a late copy of a grant given back took again"
    );
    let never = PermitRequest::of_grant(RequestId::random(), secs(5));
    assert_eq!(semaphores.release(&name, never).await.unwrap(), 3);
    assert_eq!(
        semaphores.available(&name).await.unwrap(),
        3,
        "the end of a grant never made gave permits"
    );
}

/// Redisson's `release(n)`, from the semantics file: INCRBY, publish the new count.
/// KEYS[1] semaphore; ARGV[1] permits; ARGV[2] channel; ARGV[3] publish.
const REDISSON_RELEASE: &str = "local v = redis.call('incrby', KEYS[1], ARGV[1]) \
    redis.call(ARGV[3], ARGV[2], v) return v";

/// Redisson's `tryAcquire(n)`: take n if that many are there, no publish.
const REDISSON_TRY_ACQUIRE: &str = "local v = tonumber(redis.call('get', KEYS[1]) or '0') \
    if v >= tonumber(ARGV[1]) then redis.call('decrby', KEYS[1], ARGV[1]) return 1 end \
    return 0";

/// A Redisson peer and this library share one semaphore: the count is Redisson's string,
/// a Redisson release wakes our waiter, and Redisson's tryAcquire sees our permits taken
/// and given back.
pub async fn a_redisson_peer_shares_our_semaphore(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let publish = redis.publish_command();
    let name = unique("redisson-sem");
    let channel = format!("redisson_sc:{{{name}}}");
    let (ours, other) = (fx.client().await, fx.client().await);
    let semaphore = ours.semaphore(&name);
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let held = semaphore.acquire(1).await.unwrap();
    assert_eq!(
        redis.run(&name, &["GET", &name]).await,
        redis::Value::BulkString(b"0".to_vec()),
        "the count is not Redisson's string"
    );
    let java_try = ["EVAL", REDISSON_TRY_ACQUIRE, "1", &name, "1"];
    assert_eq!(redis.run(&name, &java_try).await, redis::Value::Int(0));
    let waiter = tokio::spawn({
        let semaphore = other.semaphore(&name);
        async move { semaphore.acquire(1).await }
    });
    sleep(ms(150)).await;
    assert!(!waiter.is_finished(), "took a permit that was not there");
    let java_release = ["EVAL", REDISSON_RELEASE, "1", &name, "1", &channel, publish];
    redis.run(&name, &java_release).await;
    let permits = timeout(secs(2), waiter)
        .await
        .expect("Redisson's release woke our waiter")
        .unwrap()
        .unwrap();
    permits.release().await.unwrap();
    held.release().await.unwrap();
    assert_eq!(redis.run(&name, &java_try).await, redis::Value::Int(1));
    assert_eq!(semaphore.available().await.unwrap(), 1);
}

/// A waiter for all three permits (one client) that has waited past the starvation
/// threshold holds the free permit back: another client's try for one is refused
/// although one is free, and the three go to the waiter when the holder gives its two
/// back. Without reservations, a stream of waiters for one could keep three from ever
/// being free at once.
pub async fn a_starving_waiter_for_many_permits_holds_them_back(fx: &dyn Fixture) {
    let (big, holder, other) = (fx.client().await, fx.client().await, fx.client().await);
    let name = unique("sem-starve");
    assert!(big.semaphore(&name).try_set_permits(3).await.unwrap());
    let two = holder.semaphore(&name).acquire(2).await.unwrap();
    let waiter = tokio::spawn({
        let semaphore = big.semaphore(&name);
        async move { semaphore.acquire(3).await }
    });
    // Past the threshold (10 ms) and a few of its attempts.
    sleep(ms(200)).await;
    let semaphore = other.semaphore(&name);
    assert_eq!(semaphore.available().await.unwrap(), 1);
    assert!(
        semaphore.try_acquire(1).await.unwrap().is_none(),
        "took the permit held back for the starving waiter"
    );
    two.release().await.unwrap();
    let all = timeout(secs(2), waiter)
        .await
        .expect("the starving waiter got its three")
        .unwrap()
        .unwrap();
    assert_eq!(all.count(), 3);
    all.release().await.unwrap();
    let one = semaphore
        .try_acquire(1)
        .await
        .unwrap()
        .expect("the reservation ended with the grant");
    one.release().await.unwrap();
}

/// Second review, N6: a waiter for more permits than the semaphore has (3 of 2) waits
/// for ever, as in Java, but starves nobody. Before, once it starved its reservation
/// held both free permits back from every other client, and in its own client every
/// later waiter stood behind it in the line. Here, for a second, another client and the
/// waiter's own client each take and give back one permit every 100 ms; then a third
/// permit is added and the waiter gets its three. At the store, a request beyond the
/// peak is answered as such and reserves nothing.
pub async fn a_waiter_for_more_permits_than_exist_starves_nobody(fx: &dyn Fixture) {
    let (big, other) = (fx.client().await, fx.client().await);
    let name = unique("sem-beyond");
    assert!(big.semaphore(&name).try_set_permits(2).await.unwrap());
    let waiter = tokio::spawn({
        let semaphore = big.semaphore(&name);
        async move { semaphore.acquire(3).await }
    });
    let started = Instant::now();
    while started.elapsed() < secs(1) {
        for (client, who) in [
            (&other, "another client"),
            (&big, "the waiter's own client"),
        ] {
            let one = client
                .semaphore(&name)
                .try_acquire_for(1, secs(2))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{who} was starved by a waiter for 3 of 2"));
            one.release().await.unwrap();
        }
        sleep(ms(100)).await;
    }
    assert!(!waiter.is_finished(), "3 of 2 permits were granted");
    big.semaphore(&name).add_permits(1).await.unwrap();
    let all = timeout(secs(2), waiter)
        .await
        .expect("the waiter got its three once they existed")
        .unwrap()
        .unwrap();
    assert_eq!(all.count(), 3);
    all.release().await.unwrap();

    let backend = fx.backend().await;
    let semaphores = backend.semaphores();
    let name = LockName::new(&unique("sem-peak")).unwrap();
    let window = secs(5);
    let starving = PermitReservation::new(RequestId::random(), secs(1), secs(3));
    let take = |permits, reserve| PermitRequest::new(permits, window).reserving(reserve);
    assert!(semaphores.try_set_permits(&name, 2).await.unwrap());
    let beyond = semaphores.try_acquire(&name, take(3, Some(starving))).await;
    assert_eq!(beyond.unwrap(), PermitAnswer::BeyondPeak);
    let one = semaphores.try_acquire(&name, take(1, None)).await;
    assert_eq!(one.unwrap(), PermitAnswer::Taken, "held back for 3 of 2");
    // A count lowered starts the peak again: 1 free now, so 2 is beyond it.
    assert_eq!(semaphores.add_permits(&name, -1).await.unwrap(), 0);
    semaphores.add_permits(&name, 1).await.unwrap();
    let two = semaphores.try_acquire(&name, take(2, Some(starving))).await;
    assert_eq!(two.unwrap(), PermitAnswer::BeyondPeak);
}

/// The reservation rules at the store: another acquirer takes only permits beyond the
/// reserved number, a waiter that has waited longer takes the reservation over, the
/// grant ends it, its waiter can take it back, and it lapses when its waiter stops
/// asking.
pub async fn permit_reservations_follow_their_rules(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let semaphores = backend.semaphores();
    let name = LockName::new(&unique("sem-reserve")).unwrap();
    let window = secs(5);
    let take = |permits, reserve| PermitRequest::new(permits, window).reserving(reserve);
    let ask = async |permits, reserve| {
        let request = take(permits, reserve);
        semaphores.try_acquire(&name, request).await.unwrap()
    };
    let (taken, unavailable) = (PermitAnswer::Taken, PermitAnswer::Unavailable);
    let kept = ms(300);
    let (a, b) = (RequestId::random(), RequestId::random());
    let a_waits = Some(PermitReservation::new(a, ms(100), kept));
    let b_waits = Some(PermitReservation::new(b, secs(1), kept));
    assert!(semaphores.try_set_permits(&name, 4).await.unwrap());
    assert_eq!(ask(2, None).await, taken);
    // a reserves 3 of the 2 free: nobody else may take any.
    assert_eq!(ask(3, a_waits).await, unavailable);
    assert_eq!(ask(1, None).await, unavailable);
    // b has waited longer: it takes the reservation over (for 4), and a is held back.
    assert_eq!(ask(4, b_waits).await, unavailable);
    assert_eq!(ask(2, a_waits).await, unavailable);
    semaphores.add_permits(&name, 3).await.unwrap();
    // 5 free, 4 reserved: one may go to another; then b's grant ends the reservation.
    assert_eq!(ask(1, None).await, taken);
    assert_eq!(ask(1, None).await, unavailable);
    assert_eq!(ask(4, b_waits).await, taken);
    semaphores.add_permits(&name, 2).await.unwrap();
    assert_eq!(ask(1, None).await, taken);
    // A waiter that gives up takes its reservation back; nobody else can.
    assert_eq!(ask(5, a_waits).await, unavailable);
    semaphores.cancel_reservation(&name, b).await.unwrap();
    assert_eq!(ask(1, None).await, unavailable);
    semaphores.cancel_reservation(&name, a).await.unwrap();
    assert_eq!(ask(1, None).await, taken);
    semaphores.add_permits(&name, 1).await.unwrap();
    // A reservation whose waiter stops asking lapses.
    assert_eq!(ask(5, a_waits).await, unavailable);
    assert_eq!(ask(1, None).await, unavailable);
    sleep(kept + ms(100)).await;
    assert_eq!(ask(1, None).await, taken);
}
