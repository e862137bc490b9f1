//! Scenarios for the paths that once let two owners believe they held a lock, left a
//! hold behind nobody could release, or let a hold expire while renewed. Each names the
//! finding of the correctness review it guards (`shared/reviews/correctness.md`) and
//! fails without its fix. Re-exported through [`crate::scenarios`].

use crate::scenarios::wait_until;
use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{ErrorKind, Guard, Holder, Lock, Locks};
use tokio::time::{Instant, sleep, timeout};

use crate::Fixture;
use crate::faulty::{AcquireFault, FaultyBackend};
use crate::scenarios::{all_served, counted_client, handover_gap, spawn_waiter, unique};

/// Review #1: two read holds of one owner, the newer released first. The lock must not
/// expire on the server while the older hold still believes it holds: when a writer
/// gets in, the older hold is no longer held.
pub async fn read_holds_released_out_of_order(fx: &dyn Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let name = unique("rw-out-of-order");
    let lease = ms(600);
    let read = a.rw_lock(&name).reader().with_holder(Holder::unique());
    let older = read.try_lock_for(Duration::ZERO, Some(lease)).await;
    let older = older.unwrap().expect("free");
    sleep(lease / 2).await;
    let newer = read.try_lock_for(Duration::ZERO, Some(lease)).await;
    newer
        .unwrap()
        .expect("readers share")
        .unlock()
        .await
        .unwrap();
    writer_enters_only_after(&older, &b.rw_lock(&name).writer(), lease).await;
    assert!(!older.is_held());
}

/// Polls `writer` until it gets the lock, which must happen within four leases and only
/// once `read` no longer believes it holds: checked when the writer holds. (Checked
/// before the writer's attempt, it raced the attempt: the reader's lease may end, in
/// the client and then in the store, while the attempt is on its way; through
/// PgBouncer beside a full test run it once did.)
async fn writer_enters_only_after(read: &Guard, writer: &Lock, lease: Duration) {
    let started = Instant::now();
    loop {
        if let Some(write) = writer.try_lock().await.unwrap() {
            assert!(
                !read.is_held(),
                "a writer got in while a read hold still believed it held"
            );
            write.unlock().await.unwrap();
            return;
        }
        assert!(started.elapsed() < lease * 4, "the read hold never expired");
        sleep(ms(5)).await;
    }
}

/// Another client takes the mutex `name` within 2 s (a hold left behind would keep it
/// out for its 30 s lease) and releases it; `left_behind` says what failed otherwise.
async fn another_client_takes(fx: &dyn Fixture, name: &str, left_behind: &str) {
    let other = fx.client().await;
    let taken = timeout(secs(2), other.mutex(name).lock()).await;
    let guard = taken.unwrap_or_else(|_| panic!("{left_behind}")).unwrap();
    guard.unlock().await.unwrap();
}

/// A read hold that expired while the lock lived on (another reader kept it) leaves no
/// count behind: its owner's next read hold is a fresh one, released with the lock
/// showing no hold of the owner, and the owner's write attempt is "busy", not
/// `WouldDeadlock`.
pub async fn expired_read_hold_leaves_no_count(fx: &dyn Fixture) {
    let (a, b) = (fx.client().await, fx.client().await);
    let name = unique("rw-expired-count");
    let other = b.rw_lock(&name).reader();
    let other = other.try_lock_for(Duration::ZERO, Some(secs(10)));
    let other = other.await.unwrap().expect("free");
    let holder = Holder::unique();
    let read = a.rw_lock(&name).reader().with_holder(holder.clone());
    // Long enough to arrive alive through PgBouncer beside a full test run (a lease its
    // grant outlives is refused), short enough to wait out.
    let short = read.try_lock_for(Duration::ZERO, Some(ms(400)));
    let short = short.await.unwrap().expect("readers share");
    sleep(ms(600)).await;
    assert!(!short.is_held(), "a read hold outlived its own lease");
    assert_eq!(
        kind_of(short.unlock().await),
        Some(ErrorKind::NotHeld),
        "an expired read hold must not release anyone's hold"
    );
    let again = read.try_lock_for(Duration::ZERO, Some(secs(5)));
    let again = again.await.unwrap().expect("readers share");
    again.unlock().await.unwrap();
    assert_eq!(
        read.hold_count().await.unwrap(),
        0,
        "the expired hold is still counted"
    );
    let write = a.rw_lock(&name).writer().with_holder(holder);
    match write.try_lock().await {
        Ok(None) => {}
        Ok(Some(_)) => panic!("a writer got in beside a reader"),
        Err(err) => panic!("a writer with no live read hold was refused: {err}"),
    }
    other.unlock().await.unwrap();
}

fn kind_of(result: Result<(), lock_core::Error>) -> Option<ErrorKind> {
    result.err().map(|err| err.kind())
}

/// Review #11: with a renewal interval close to the lease, a hold taken just after a
/// watchdog round must still be renewed before it expires.
///
/// Each renewal of the first hold comes 150 ms before its lease ends: with 50 ms (a
/// 300 ms lease renewed every 250 ms), a round trip slowed by a loaded machine lost it
/// (PostgreSQL's advisory mode, once, under CI's load).
pub async fn watchdog_renews_a_hold_taken_between_rounds(fx: &dyn Fixture) {
    let locks = Locks::builder(fx.backend().await)
        .watchdog_lease(ms(900))
        .renew_interval(ms(750))
        .build()
        .expect("an interval below the lease is valid");
    let first = locks.mutex(&unique("wd-first")).lock().await.unwrap();
    // The rounds now come at 750 ms, 1 500 ms, ...; this hold is 360 ms old at the
    // first, and would have expired before the second.
    sleep(ms(390)).await;
    let second = locks.mutex(&unique("wd-second")).lock().await.unwrap();
    sleep(ms(2100)).await;
    assert!(first.is_held(), "the first hold expired under the watchdog");
    assert!(
        second.is_held(),
        "a hold taken between rounds expired under the watchdog"
    );
    second.unlock().await.unwrap();
    first.unlock().await.unwrap();
}

/// Review #13: two concurrent acquisitions by one holder whose replies arrive in the
/// opposite order of the grants (the fresh grant's reply last) give two held guards, and
/// the lock is free once both are released.
pub async fn replies_of_one_holder_in_any_order(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    faulty.set(AcquireFault::DelayFreshGrant(ms(100)));
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("reply-order");
    let m = locks.mutex(&name).with_holder(Holder::unique());
    let (first, second) = tokio::join!(m.lock(), m.lock());
    let (first, second) = (first.unwrap(), second.unwrap());
    assert!(
        first.is_held() && second.is_held(),
        "a guard of a live hold reports lost"
    );
    assert_eq!(m.hold_count().await.unwrap(), 2);
    faulty.set(AcquireFault::None);
    first.unlock().await.unwrap();
    assert!(second.is_held());
    second.unlock().await.unwrap();
    another_client_takes(
        fx,
        &name,
        "a hold was left behind after both guards were released",
    )
    .await;
}

/// Review #8: a fair waiter that gives up while its attempt is still on its way must not
/// land in the queue after its own cancellation: the waiter behind it is served at the
/// next release, not after the quitter's place lapses (5 s).
pub async fn fair_waiter_cancelled_mid_attempt_leaves_no_place(fx: &dyn Fixture) {
    let name = unique("fair-cancel-race");
    let holder = fx.client().await;
    let held = holder.fair_mutex(&name).lock().await.unwrap();
    let slow = FaultyBackend::new(fx.backend().await);
    slow.set(AcquireFault::DelayRequest(ms(50)));
    let quitter = Locks::new(Arc::new(slow));
    let gave_up = timeout(ms(10), quitter.fair_mutex(&name).lock()).await;
    assert!(gave_up.is_err(), "the quitter cannot get a held lock");
    // The quitter's attempt reaches the backend meanwhile.
    sleep(ms(150)).await;
    let (next, counted) = counted_client(fx).await;
    let waiter = spawn_waiter(next.fair_mutex(&name));
    counted.listening().await;
    let gap = handover_gap(held, waiter, secs(3)).await;
    assert!(gap < secs(1), "the waiter behind a quitter waited {gap:?}");
}

/// Review #7: a request whose reply was lost (it ran, the caller never heard) is sent
/// again under the same id and counted once: a reentry still gives a guard with two
/// holds, not three; a release reports success having released one hold, not two.
pub async fn a_lost_reply_is_retried_and_counted_once(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("lost-reply");
    let m = locks.mutex(&name).with_holder(Holder::unique());
    let outer = m.lock().await.unwrap();
    faulty.set(AcquireFault::LoseReply);
    let inner = timeout(secs(5), m.lock())
        .await
        .expect("the retried reentry is answered")
        .expect("a reentry whose reply was lost is sent again");
    assert_eq!(
        m.hold_count().await.unwrap(),
        2,
        "the reentry counted twice"
    );
    faulty.lose_next_release_reply();
    inner
        .unlock()
        .await
        .expect("a release whose reply was lost is sent again");
    assert_eq!(
        m.hold_count().await.unwrap(),
        1,
        "the release counted twice"
    );
    assert!(outer.is_held());
    outer.unlock().await.unwrap();
    assert!(!m.is_locked().await.unwrap());
}

/// Review #7: a grant whose reply was lost while the caller stopped waiting (a
/// `try_lock` reports the error at once) is undone in the background: the lock is free
/// again well before its 30 s lease ends.
pub async fn an_unanswered_grant_is_undone(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("unanswered-grant");
    faulty.set(AcquireFault::LoseReply);
    let tried = locks.mutex(&name).try_lock().await;
    assert!(tried.is_err(), "the reply was lost: {tried:?}");
    another_client_takes(fx, &name, "an unanswered grant was left behind").await;
}

/// An acquisition dropped after the backend granted it, while the answer is still on its
/// way, leaves no hold: the rest of the request runs in the background, which gives the
/// grant back (the lock is free well before its 30 s lease ends).
pub async fn a_grant_whose_caller_left_is_released(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    faulty.set(AcquireFault::DelayFreshGrant(ms(200)));
    let locks = Locks::new(Arc::new(faulty.clone()));
    let name = unique("caller-left");
    let left = timeout(ms(50), locks.mutex(&name).lock()).await;
    assert!(left.is_err(), "the answer was held back: {left:?}");
    another_client_takes(fx, &name, "a grant whose caller left was kept").await;
}

/// Unlocks whose release is on its way when the client shuts down, one abandoned by its
/// caller and one still awaited, both complete before `shutdown` returns: the abandoned
/// one goes on in the background, and shutdown waits for both.
pub async fn unlocks_in_flight_finish_before_shutdown_returns(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::new(Arc::new(faulty.clone()));
    let (left, awaited) = (unique("unlock-left"), unique("unlock-awaited"));
    let observer = fx.client().await;
    let left_guard = locks.mutex(&left).lock().await.unwrap();
    let awaited_guard = locks.mutex(&awaited).lock().await.unwrap();
    faulty.delay_releases(ms(200));
    let gave_up = timeout(ms(20), left_guard.unlock()).await;
    assert!(gave_up.is_err(), "the release was held back: {gave_up:?}");
    let unlocking = tokio::spawn(awaited_guard.unlock());
    // The awaited unlock is under way before the shutdown begins.
    sleep(ms(20)).await;
    timeout(secs(5), locks.shutdown())
        .await
        .expect("the releases end within their delay");
    for (name, what) in [(&left, "an abandoned"), (&awaited, "an awaited")] {
        assert!(
            !observer.mutex(name).is_locked().await.unwrap(),
            "{what} unlock was still under way when shutdown returned"
        );
    }
    unlocking
        .await
        .unwrap()
        .expect("the awaited unlock succeeds");
}

/// `try_lock_for(wait)` returns within its wait plus a small slack even when subscribing
/// to release notifications is slow (here 3 s, as while a connection is re-established).
pub async fn a_bounded_wait_ends_on_time_when_subscribing_is_slow(fx: &dyn Fixture) {
    let name = unique("slow-subscribe");
    let holder = fx.client().await;
    let held = holder.mutex(&name).lock().await.unwrap();
    let slow = FaultyBackend::new(fx.backend().await);
    slow.delay_listens(secs(3));
    let waiter = Locks::new(Arc::new(slow));
    let started = Instant::now();
    let wait = ms(300);
    let got = waiter.mutex(&name).try_lock_for(wait, None).await.unwrap();
    assert!(got.is_none(), "the lock is held");
    assert!(
        started.elapsed() < wait + ms(500),
        "a 300 ms wait took {:?}",
        started.elapsed()
    );
    held.unlock().await.unwrap();
}

/// Review #5, within its documented bound: a Redisson reader on the same read-write
/// lock (simulated with Redisson's own commands: its join, its renewal that sets the
/// lock's expiry to its lease unconditionally, its unlock that sets it to the longest
/// remaining hold) never lets a writer in while our read hold, whose lease is no longer
/// than the Redisson reader's, still believes it holds.
pub async fn a_redisson_reader_never_cuts_our_read_hold_short(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let (ours, writers) = (fx.client().await, fx.client().await);
    let name = unique("redisson-reader");
    let lease = ms(600);
    let lease_ms = lease.as_millis().to_string();
    let read = ours.rw_lock(&name).reader();
    let held = read.try_lock_for(Duration::ZERO, Some(lease)).await;
    let held = held.unwrap().expect("free");
    let tagged = format!("{{{name}}}");
    let java = "5f3c6a1e-0000-4000-8000-000000000001:1";
    let java_hold = format!("{tagged}:{java}:rwlock_timeout:1");
    sleep(ms(100)).await;
    // Redisson's read acquire in read mode.
    redis.run(&name, &["HINCRBY", &name, java, "1"]).await;
    redis
        .run(&name, &["SET", &java_hold, "1", "PX", &lease_ms])
        .await;
    let pttl = redis.pttl(&name).await.max(600).to_string();
    redis.run(&name, &["PEXPIRE", &name, &pttl]).await;
    sleep(ms(100)).await;
    // Redisson's read renewal: the lock's expiry set to its lease, unconditionally.
    redis.run(&name, &["PEXPIRE", &name, &lease_ms]).await;
    redis.run(&name, &["PEXPIRE", &java_hold, &lease_ms]).await;
    sleep(ms(100)).await;
    // Redisson's read unlock: its hold goes, and the lock lives as long as the longest
    // remaining hold key (ours).
    redis.run(&name, &["HDEL", &name, java]).await;
    redis.run(&name, &["DEL", &java_hold]).await;
    let ours_key = format!("{tagged}:{}:rwlock_timeout:1", held.owner());
    let longest = redis.pttl(&ours_key).await;
    assert!(longest > 0, "our read hold key is gone: {longest}");
    redis
        .run(&name, &["PEXPIRE", &name, &longest.to_string()])
        .await;
    writer_enters_only_after(&held, &writers.rw_lock(&name).writer(), lease).await;
}

/// A subscription to release notifications that was not confirmed is a failure that is
/// tried again, never taken for a subscription: a waiter whose first two subscriptions
/// fail is still woken by the release, not left to sleep through the holder's lease.
pub async fn an_unconfirmed_subscription_is_tried_again(fx: &dyn Fixture) {
    let name = unique("unconfirmed-subscription");
    let holder = fx.client().await;
    let held = holder.mutex(&name).lock().await.unwrap();
    let flaky = FaultyBackend::new(fx.backend().await);
    flaky.fail_listens(2);
    let waiter = spawn_waiter(Locks::new(Arc::new(flaky.clone())).mutex(&name));
    // Its second request follows the subscriptions that failed and the one that held.
    flaky.listening().await;
    let gap = handover_gap(held, waiter, secs(5)).await;
    assert!(
        gap < secs(1),
        "the waiter was served {gap:?} after the release"
    );
}

/// A grant answered from the backend's record (its reply was lost) carries its exact
/// fencing token: the next holder's token is exactly one more. (A Redis script once
/// stored tokens, which have 16 digits, with Lua's 14-digit number format.)
pub async fn a_replayed_grant_keeps_its_exact_fencing_token(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let fenced = Locks::builder(Arc::new(faulty.clone()))
        .fencing(true)
        .build()
        .unwrap();
    let name = unique("replayed-token");
    faulty.set(AcquireFault::LoseReply);
    let first = timeout(secs(5), fenced.mutex(&name).lock())
        .await
        .expect("the retried acquisition is answered")
        .unwrap();
    let token = first.fencing_token().expect("fencing is on");
    first.unlock().await.unwrap();
    let second = fenced.mutex(&name).lock().await.unwrap();
    let next = second.fencing_token().expect("fencing is on");
    if fx.consecutive_tokens() {
        assert_eq!(
            next,
            token + 1,
            "the replayed grant's token {token} is not the one the backend issued"
        );
    } else {
        assert!(next > token, "token {next} after the replayed {token}");
    }
    second.unlock().await.unwrap();
}

/// Review #10: a Redisson client that takes the fair lock moves every queued waiter's
/// score one wait slot (300 000 ms) closer, as Redisson's acquire does (simulated with its
/// raw `ZINCRBY`, twice: two Redisson holders in a row). Our waiters queued before keep
/// their places: a newcomer right after the shift is served after them, not first.
pub async fn our_fair_waiters_keep_their_place_when_redisson_moves_the_queue(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let name = unique("redisson-shift");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let scores = format!("redisson_lock_timeout:{{{name}}}");
    let held = fx.client().await.fair_mutex(&name).lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        if i == 3 {
            let queued = strings(redis.run(&queue, &["LRANGE", &queue, "0", "-1"]).await);
            assert_eq!(queued.len(), 3, "{queued:?}");
            for _ in 0..2 {
                for owner in &queued {
                    redis
                        .run(&scores, &["ZINCRBY", &scores, "-300000", owner])
                        .await;
                }
            }
        }
        let (lock, order) = (fx.client().await.fair_mutex(&name), Arc::clone(&order));
        waiters.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            guard.unlock().await.unwrap();
        }));
        // Queued before the next one comes (the newcomer's first attempt is given time
        // below: before the fix it dropped the three shifted waiters and went first).
        let deadline = Instant::now() + secs(5);
        let mut queued = Vec::new();
        while i < 3 && queued.len() <= i {
            assert!(Instant::now() < deadline, "waiter {i} never queued");
            sleep(ms(10)).await;
            queued = strings(redis.run(&queue, &["LRANGE", &queue, "0", "-1"]).await);
        }
    }
    sleep(ms(200)).await;
    held.unlock().await.unwrap();
    all_served(waiters).await;
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3]);
}

/// Review #10: the fair queue's keys never expire under a Redisson waiter. Ours lapse when
/// our waiters stop asking, but a Redisson waiter lives by its score alone (minutes): an
/// expiry set by our waiters' attempts deleted its place. (Before the fix the queue kept
/// an expiry of twice our waiter timeout.)
pub async fn a_redisson_waiter_keeps_the_fair_queue(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let name = unique("redisson-waiter");
    let queue = format!("redisson_lock_queue:{{{name}}}");
    let scores = format!("redisson_lock_timeout:{{{name}}}");
    let held = fx.client().await.fair_mutex(&name).lock().await.unwrap();
    let ours = Locks::builder(fx.backend().await)
        .fair_waiter_timeout(secs(1))
        .build()
        .unwrap();
    let waiter = spawn_waiter(ours.fair_mutex(&name));
    // Queued, with an expiry on the queue.
    wait_until(secs(3), "our waiter never queued", || async {
        redis.pttl(&queue).await > 0
    })
    .await;
    // A Redisson waiter joins behind ours, its score minutes ahead.
    let java = "5f3c6a1e-0000-4000-8000-000000000002:7";
    redis.run(&queue, &["RPUSH", &queue, java]).await;
    let far_ahead = "99999999999999";
    redis
        .run(&scores, &["ZADD", &scores, far_ahead, java])
        .await;
    // Our waiter asks again every third of a second; an attempt must leave the keys
    // without the expiry they had.
    let deadline = Instant::now() + secs(3);
    for key in [&queue, &scores] {
        loop {
            let pttl = redis.pttl(key).await;
            if pttl == -1 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{key} expires under a Redisson waiter (pttl {pttl})"
            );
            sleep(ms(20)).await;
        }
    }
    held.unlock().await.unwrap();
    timeout(secs(5), waiter)
        .await
        .expect("our waiter is served")
        .unwrap();
    let queued = strings(redis.run(&queue, &["LRANGE", &queue, "0", "-1"]).await);
    assert_eq!(queued, [java], "the Redisson waiter kept its place");
}

/// Code review, medium 9: a holder whose hold was lost locally (its renewals ran on the
/// server, but no reply came back) while the server kept it, then takes the lock again:
/// the server counts that as a reentry. Each guard ends its own grant: the new guard's
/// unlock leaves the lost guard's grant, whose unlock (an error: it was lost) ends it, and
/// nothing is left held. Before grants had identities, the old hold's count stayed on the
/// server, unrenewed and unreleased, and kept everyone out for the rest of its lease.
pub async fn a_grant_after_a_lost_hold_leaves_nothing_held(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let locks = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(secs(1))
        .build()
        .unwrap();
    let lock = locks
        .mutex(&unique("stale-reentry"))
        .with_holder(Holder::unique());
    let first = lock.lock().await.unwrap();
    faulty.lose_renewal_replies(true);
    timeout(secs(5), first.lost())
        .await
        .expect("the hold is lost locally once its renewals go unanswered");
    faulty.lose_renewal_replies(false);
    let second = lock.lock().await.unwrap();
    assert_eq!(
        lock.hold_count().await.unwrap(),
        2,
        "the server still counted the first hold (a reentry)"
    );
    second.unlock().await.unwrap();
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the new guard's unlock ended another grant than its own"
    );
    let err = first.unlock().await.expect_err("the first guard was lost");
    assert!(err.is_not_held(), "{err}");
    assert!(
        !lock.is_locked().await.unwrap(),
        "the lost guard's grant was left on the server"
    );
}

/// The strings of an array reply.
fn strings(reply: redis::Value) -> Vec<String> {
    match reply {
        redis::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                other => panic!("not a string: {other:?}"),
            })
            .collect(),
        other => panic!("not an array: {other:?}"),
    }
}
