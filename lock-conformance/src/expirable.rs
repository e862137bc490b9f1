//! Expirable-semaphore scenarios: permits renewed while held and back after one lease
//! when their holder is cut off, the operations and their bad input, retries counted
//! once, and one count shared with the plain semaphore.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{
    Error, ErrorKind, IssueRequest, LockName, Locks, MAX_PERMITS_PER_ACQUISITION, PermitId,
    ReturnRequest,
};
use tokio::time::{Instant, sleep, timeout};

use crate::Fixture;
use crate::faulty::FaultyBackend;
use crate::scenarios::{eventually, kind, unique};

/// Never more than the permits are inside, with six workers on two clients that each
/// hold a permit longer than its lease: the watchdog keeps it (were it not renewed, the
/// store would reclaim it and a third worker would get in).
pub async fn expirable_permits_bound_concurrency_while_renewed(fx: &dyn Fixture) {
    let lease = ms(300);
    let (c1, c2) = (
        fx.client_with_lease(lease).await,
        fx.client_with_lease(lease).await,
    );
    let name = unique("xsem-bound");
    assert!(
        c1.expirable_semaphore(&name)
            .try_set_permits(2)
            .await
            .unwrap()
    );
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..6)
        .map(|i| {
            let semaphore = if i % 2 == 0 { &c1 } else { &c2 }.expirable_semaphore(&name);
            let (inside, most) = (Arc::clone(&inside), Arc::clone(&most));
            tokio::spawn(async move {
                for _ in 0..2 {
                    let permit = semaphore.acquire(1).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    sleep(lease + lease / 2).await;
                    assert!(permit.is_held(), "a renewed permit was given up");
                    inside.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    for worker in workers {
        timeout(secs(30), worker)
            .await
            .expect("the workers finish")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} workers were inside a semaphore of 2");
    assert_eq!(most, 2, "the permits were never shared");
    let semaphore = c2.expirable_semaphore(&name);
    assert_eq!(semaphore.available().await.unwrap(), 2);
    assert_eq!(semaphore.issued().await.unwrap(), 0);
}

/// A holder cut off from the store (its renewals and releases fail) gives its permit up
/// by its own clock no later than the store reclaims it; the store then hands it to a
/// waiter of another client, which no notification wakes: it wakes at the expiry.
pub async fn a_cut_off_holders_permits_come_back_after_one_lease(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    let holder = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(ms(400))
        .build()
        .unwrap();
    let other = fx.client().await;
    let name = unique("xsem-cut-off");
    let ours = holder.expirable_semaphore(&name);
    assert!(ours.try_set_permits(1).await.unwrap());
    let permit = ours.acquire(1).await.unwrap();
    sleep(ms(600)).await;
    assert!(permit.is_held(), "renewals kept it past its first lease");
    faulty.fail_renewals(true);
    faulty.fail_releases(true);
    let started = Instant::now();
    let taken = other
        .expirable_semaphore(&name)
        .acquire(1)
        .wait(secs(3))
        .await
        .expect("the permit came back after one lease");
    assert!(
        !permit.is_held(),
        "the cut-off holder still believed in its permit when another got it"
    );
    assert!(
        started.elapsed() <= secs(2),
        "came back only after {:?}",
        started.elapsed()
    );
    let lost = timeout(ms(100), permit.lost())
        .await
        .expect("lost() resolves once the permit is gone");
    assert_eq!(lost.kind(), ErrorKind::Lost);
    drop(permit);
    taken.release().await.unwrap();
}

/// N4 (review 2): a watchdog renewal of a permit that lands after the holder lengthened
/// its lease (`update_lease`) extends, never cuts: the store keeps the longer lease the
/// guard believes in, and nobody gets the one permit while the guard holds it. (Before,
/// the late renewal overwrote the expiry with the watchdog's shorter lease.)
pub async fn a_late_renewal_never_cuts_a_lengthened_permit_lease(fx: &dyn Fixture) {
    let faulty = FaultyBackend::new(fx.backend().await);
    // Timed with room for a loaded machine: the renewal is due at 500 ms and lands at
    // about 1 250 ms, after the lengthening at 600 ms; the holder's first lease lasts
    // until 1 500 ms whatever the renewal does, and a lease the late renewal cut would
    // end at about 2 750 ms, before the intruder tries at about 3 300 ms. (With a lease
    // of 600 ms a loaded machine once delayed the renewal's answer past the lease.)
    let lease = ms(1_500);
    let holder = Locks::builder(Arc::new(faulty.clone()))
        .watchdog_lease(lease)
        .build()
        .unwrap();
    let name = unique("xsem-late-renewal");
    let ours = holder.expirable_semaphore(&name);
    assert!(ours.try_set_permits(1).await.unwrap());
    let mut permit = ours.acquire(1).await.unwrap();
    // The watchdog's next renewal (due within a third of the lease) lands late.
    faulty.delay_next_permit_renewal(lease / 2);
    sleep(ms(600)).await;
    permit.update_lease(secs(10)).await.unwrap();
    // The late renewal has landed; a cut lease would have ended by now.
    sleep(ms(2_700)).await;
    let other = fx.client().await;
    let intruder = other
        .expirable_semaphore(&name)
        .try_acquire(1)
        .await
        .unwrap();
    assert!(
        !(intruder.is_some() && permit.is_held()),
        "OVER CAPACITY: another client got the one permit while the holder's lengthened \
         lease still held it"
    );
    drop(intruder);
    permit.release().await.unwrap();
}

/// Every operation, and bad input as typed errors that change nothing.
pub async fn expirable_operations_and_bad_input(fx: &dyn Fixture) {
    let locks = fx.client().await;
    let name = unique("xsem-ops");
    let semaphore = locks.expirable_semaphore(&name);
    assert_eq!(semaphore.available().await.unwrap(), 0, "never set: none");
    assert_eq!(semaphore.issued().await.unwrap(), 0);
    assert_eq!(
        kind(semaphore.try_set_permits(u64::MAX).await),
        ErrorKind::InvalidArgument
    );
    assert!(semaphore.try_set_permits(3).await.unwrap());
    assert!(!semaphore.try_set_permits(7).await.unwrap(), "set twice");
    for bad in [0, MAX_PERMITS_PER_ACQUISITION + 1] {
        assert_eq!(
            kind(semaphore.acquire(bad).await),
            ErrorKind::InvalidArgument
        );
    }
    let started = Instant::now();
    let too_many = semaphore.acquire(4).wait(secs(5)).await;
    assert_eq!(kind(too_many), ErrorKind::InvalidArgument, "4 of 3 in all");
    assert!(started.elapsed() < secs(1), "it waited");
    assert_eq!(semaphore.available().await.unwrap(), 3);

    let mut two = semaphore.acquire(2).lease(secs(30)).await.unwrap();
    assert_eq!(two.count(), 2);
    assert_ne!(two.ids()[0], two.ids()[1]);
    assert_eq!(semaphore.available().await.unwrap(), 1);
    assert_eq!(semaphore.issued().await.unwrap(), 2);
    assert!(semaphore.try_acquire(2).await.unwrap().is_none());
    let waited = semaphore.acquire(2).wait(ms(100)).await;
    let err = waited.expect_err("two permits are not free");
    assert_eq!(err.kind(), ErrorKind::Timeout);
    assert!(err.to_string().contains("semaphore"), "{err}");
    let unknown = PermitId::random();
    let err = semaphore.release(unknown).await.unwrap_err();
    assert!(
        matches!(err, Error::PermitNotIssued { .. }) && err.is_not_held(),
        "{err:?}"
    );
    let err = semaphore.update_lease(unknown, secs(1)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotHeld);
    assert_eq!(
        kind(semaphore.update_lease(two.ids()[0], Duration::ZERO).await),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        kind("not-an-id".parse::<PermitId>()),
        ErrorKind::InvalidArgument
    );
    assert_eq!(semaphore.issued().await.unwrap(), 2, "bad input changed it");

    // A shorter lease: the permits come back when it ends, and the guard knows first.
    two.update_lease(ms(300)).await.unwrap();
    assert!(two.valid_for() <= Some(ms(300)));
    let three = semaphore
        .acquire(3)
        .wait(secs(3))
        .await
        .expect("the two came back at the end of their new lease");
    assert!(!two.is_held(), "the guard outlived its new lease");
    assert_eq!(two.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
    three.release().await.unwrap();
    assert_eq!(semaphore.available().await.unwrap(), 3);

    // Released through the handle by id: the guard learns that it lost its permit.
    let one = semaphore
        .try_acquire(1)
        .await
        .unwrap()
        .expect("one is free");
    semaphore.release(one.ids()[0]).await.unwrap();
    assert!(!one.is_held());
    assert_eq!(one.release().await.unwrap_err().kind(), ErrorKind::NotHeld);
    assert_eq!(semaphore.available().await.unwrap(), 3);

    drop(semaphore.acquire(1).await.unwrap());
    assert!(
        eventually(secs(2), || async {
            semaphore.available().await.unwrap() == 3
        })
        .await,
        "dropped permits never came back"
    );

    assert_eq!(
        kind(locks.expirable_semaphore("").available().await),
        ErrorKind::InvalidArgument
    );
    let held = locks.mutex(&unique("xsem-lock")).lock().await.unwrap();
    let on_a_lock = locks.expirable_semaphore(held.name());
    assert_eq!(
        kind(on_a_lock.try_set_permits(1).await),
        ErrorKind::Incompatible
    );
    assert_eq!(kind(on_a_lock.acquire(1).await), ErrorKind::Incompatible);
    assert!(held.is_held(), "the lock was touched");
    held.unlock().await.unwrap();
}

/// Issuing under the same ids, and giving back under the same request id, sent again
/// (their replies were lost) answer as the first time and count once.
pub async fn an_expirable_permit_request_sent_twice_counts_once(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let semaphores = backend.expirable_semaphores();
    let name = LockName::new(&unique("xsem-retry")).unwrap();
    assert!(semaphores.try_set_permits(&name, 3).await.unwrap());
    let issue = IssueRequest::new(2, secs(30));
    for _ in 0..2 {
        assert_eq!(
            semaphores.try_issue(&name, &issue).await.unwrap(),
            lock_core::Issue::Issued
        );
    }
    assert_eq!(
        semaphores.permits(&name).await.unwrap(),
        (1, 2),
        "a retry issued again"
    );
    let give_back = ReturnRequest::new(issue.ids.clone(), secs(5));
    for _ in 0..2 {
        assert!(semaphores.release(&name, &give_back).await.unwrap());
    }
    assert_eq!(
        semaphores.permits(&name).await.unwrap(),
        (3, 0),
        "a retry gave back again"
    );
    let again = ReturnRequest::new(issue.ids.clone(), secs(5));
    assert!(
        !semaphores.release(&name, &again).await.unwrap(),
        "a new request gave back permits already given back"
    );
    assert_eq!(semaphores.permits(&name).await.unwrap(), (3, 0));
}

/// Both kinds of semaphore on one name share its count and its wake-ups, as Java's two
/// kinds do.
pub async fn expirable_and_plain_semaphores_share_one_count(fx: &dyn Fixture) {
    let (c1, c2) = (fx.client().await, fx.client().await);
    let name = unique("xsem-shared");
    let plain = c1.semaphore(&name);
    let expirable = c2.expirable_semaphore(&name);
    assert!(plain.try_set_permits(2).await.unwrap());
    assert!(!expirable.try_set_permits(5).await.unwrap(), "set already");
    let leased = expirable.acquire(1).await.unwrap();
    assert_eq!(plain.available().await.unwrap(), 1);
    let taken = plain.acquire(1).await.unwrap();
    assert!(expirable.try_acquire(1).await.unwrap().is_none());
    let waiter = tokio::spawn({
        let expirable = expirable.clone();
        async move { expirable.acquire(1).await }
    });
    sleep(ms(100)).await;
    assert!(!waiter.is_finished(), "took a permit that was not there");
    taken.release().await.unwrap();
    let woken = timeout(secs(2), waiter)
        .await
        .expect("the plain release woke the expirable waiter")
        .unwrap()
        .unwrap();
    woken.release().await.unwrap();
    leased.release().await.unwrap();
    assert_eq!(plain.available().await.unwrap(), 2);
}

/// Redisson's `tryAcquire(lease)` of the permit-expirable semaphore, from the semantics
/// file: reclaim by the Java client's clock, take one permit, add its id (16 raw bytes)
/// with an expiry on that clock. KEYS[1] semaphore, KEYS[2] `{name}:timeout`; ARGV[1]
/// Java's now (ms), ARGV[2] the expiry score, ARGV[3] the id (hex), ARGV[4] channel,
/// ARGV[5] publish.
const REDISSON_EXPIRABLE_ACQUIRE: &str = "\
    local function bytes(hex) return (string.gsub(hex, '%x%x', function(p) \
        return string.char(tonumber(p, 16)) end)) end \
    local expired = redis.call('zrangebyscore', KEYS[2], 0, ARGV[1]) \
    if #expired > 0 then \
        redis.call('zrem', KEYS[2], unpack(expired)) \
        local v = redis.call('incrby', KEYS[1], #expired) \
        redis.call(ARGV[5], ARGV[4], v) \
    end \
    local value = redis.call('get', KEYS[1]) \
    if value ~= false and tonumber(value) >= 1 then \
        redis.call('decrby', KEYS[1], 1) \
        redis.call('zadd', KEYS[2], ARGV[2], bytes(ARGV[3])) \
        return 1 \
    end \
    return 0";

/// Redisson's `release(id)`: remove the id; when it was there, add one permit and
/// publish the new count. KEYS as above; ARGV[1] the id (hex), ARGV[2] channel, ARGV[3]
/// publish.
const REDISSON_EXPIRABLE_RELEASE: &str = "\
    local function bytes(hex) return (string.gsub(hex, '%x%x', function(p) \
        return string.char(tonumber(p, 16)) end)) end \
    if redis.call('zrem', KEYS[2], bytes(ARGV[1])) ~= 1 then return 0 end \
    local v = redis.call('incrby', KEYS[1], 1) \
    redis.call(ARGV[3], ARGV[2], v) \
    return 1";

/// Redisson's "no lease" expiry score.
const REDISSON_NO_LEASE: &str = "922337203685477";

fn java_now_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

/// A Redisson peer and this library share one expirable semaphore: Java's permits
/// (scores on Java's clock, one without a lease) count against ours, ours are stored as
/// Redisson stores them, a Java permit's expiry gives our waiter its permit with no
/// notification, and a Java release wakes our waiter.
pub async fn a_redisson_peer_shares_our_expirable_semaphore(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let publish = redis.publish_command();
    let name = unique("redisson-xsem");
    let timeouts = format!("{{{name}}}:timeout");
    let channel = format!("redisson_sc:{{{name}}}");
    let (ours, other) = (fx.client().await, fx.client().await);
    let semaphore = ours.expirable_semaphore(&name);
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let java_acquire = |score: String, id: PermitId| {
        let now = java_now_ms().to_string();
        let args = [&*now, &*score, &*id.to_string(), &*channel, publish];
        let call: Vec<String> = ["EVAL", REDISSON_EXPIRABLE_ACQUIRE, "2", &name, &timeouts]
            .into_iter()
            .chain(args)
            .map(str::to_owned)
            .collect();
        call
    };
    let run = |call: Vec<String>| {
        let name = name.clone();
        async move {
            let args: Vec<&str> = call.iter().map(String::as_str).collect();
            redis.run(&name, &args).await
        }
    };
    let (short, forever) = (PermitId::random(), PermitId::random());
    let expires_at_ms = java_now_ms() + 400;
    let expiry = expires_at_ms.to_string();
    assert_eq!(run(java_acquire(expiry, short)).await, redis::Value::Int(1));
    assert_eq!(
        run(java_acquire(REDISSON_NO_LEASE.to_owned(), forever)).await,
        redis::Value::Int(1)
    );
    assert_eq!(semaphore.issued().await.unwrap(), 2, "Java's permits");
    let mine = semaphore.acquire(1).await.unwrap();
    let stored = redis.run(&name, &["ZRANGE", &timeouts, "0", "-1"]).await;
    let redis::Value::Array(members) = stored else {
        panic!("{stored:?}")
    };
    assert!(
        members.contains(&redis::Value::BulkString(mine.ids()[0].to_bytes().to_vec())),
        "our permit is not stored as Redisson's 16 bytes: {members:?}"
    );
    assert_eq!(
        run(java_acquire(
            REDISSON_NO_LEASE.to_owned(),
            PermitId::random()
        ))
        .await,
        redis::Value::Int(0),
        "Java took a permit that we hold"
    );
    // Java's short permit expires by Java's clock: our waiter gets it without a message,
    // and not before that moment, however long the steps above took on a loaded machine.
    let second = other
        .expirable_semaphore(&name)
        .acquire(1)
        .wait(secs(3))
        .await
        .expect("the Java permit's expiry gave us its permit");
    let now_ms = java_now_ms();
    assert!(
        now_ms >= expires_at_ms,
        "got a permit {} ms before Java's expired",
        expires_at_ms - now_ms
    );
    let waiter = tokio::spawn({
        let semaphore = other.expirable_semaphore(&name);
        async move { semaphore.acquire(1).await }
    });
    sleep(ms(150)).await;
    assert!(!waiter.is_finished(), "took the permit Java holds forever");
    let release = [
        "EVAL",
        REDISSON_EXPIRABLE_RELEASE,
        "2",
        &name,
        &timeouts,
        &forever.to_string(),
        &channel,
        publish,
    ];
    assert_eq!(redis.run(&name, &release).await, redis::Value::Int(1));
    let third = timeout(secs(2), waiter)
        .await
        .expect("Java's release woke our waiter")
        .unwrap()
        .unwrap();
    for permits in [mine, second, third] {
        permits.release().await.unwrap();
    }
    assert_eq!(semaphore.available().await.unwrap(), 3);
    assert_eq!(semaphore.issued().await.unwrap(), 0);
}

/// A server that lost its data issues no permit during its restart quarantine: the
/// permit a holder took before the restart (a fixed lease, so nothing tells it) must be
/// invalid by its own clock before anyone else gets one. Without the quarantine, the
/// count set again after the restart hands the same permit out at once.
pub async fn a_restart_issues_no_permit_an_old_holder_may_still_believe_in(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let quarantine = secs(1);
    let options =
        lock_redis_protocol::ProtocolOptions::default().restart_quarantine(Some(quarantine));
    let first = Locks::new(fx.backend_with(options).await);
    let second = Locks::new(fx.backend_with(options).await);
    let name = unique("xsem-quarantine");
    // The first issue on a fresh server waits out the quarantine too (a semaphore in the
    // same cluster slot, whose quarantine state it shares).
    let warm_up = first.expirable_semaphore(&format!("{{{name}}}:warm-up"));
    assert!(warm_up.try_set_permits(1).await.unwrap());
    warm_up
        .acquire(1)
        .wait(quarantine * 4)
        .await
        .expect("issued after the quarantine")
        .release()
        .await
        .unwrap();
    let ours = first.expirable_semaphore(&name);
    assert!(ours.try_set_permits(1).await.unwrap());
    let held = ours
        .acquire(1)
        .lease(ms(800))
        .wait(secs(1))
        .await
        .expect("issued at once outside a quarantine");
    redis.restart_node_of(&name).await;
    let theirs = second.expirable_semaphore(&name);
    let taken = timeout(secs(10), async {
        loop {
            // As a service does at start: set the count if nobody has.
            let set = theirs.try_set_permits(1).await;
            let taken = match set {
                Ok(_) => theirs.acquire(1).wait(secs(5)).await,
                Err(err) => Err(err),
            };
            match taken {
                Ok(permit) => return permit,
                Err(err) if err.kind() == ErrorKind::Connection => {
                    sleep(ms(20)).await;
                }
                Err(err) => panic!("unexpected error after the restart: {err:?}"),
            }
        }
    })
    .await
    .expect("the permit is issued again after the quarantine");
    assert!(
        !held.is_held(),
        "a permit was issued while its holder from before the restart still believed in it"
    );
    taken.release().await.unwrap();
}

/// As for the plain semaphore: a starving waiter for all three permits holds the free
/// one back from another client's try, and gets the three when they are given back.
pub async fn a_starving_expirable_waiter_holds_permits_back(fx: &dyn Fixture) {
    let (big, holder, other) = (fx.client().await, fx.client().await, fx.client().await);
    let name = unique("xsem-starve");
    let semaphore = other.expirable_semaphore(&name);
    assert!(semaphore.try_set_permits(3).await.unwrap());
    let two = holder.expirable_semaphore(&name).acquire(2).await.unwrap();
    let waiter = tokio::spawn({
        let semaphore = big.expirable_semaphore(&name);
        async move { semaphore.acquire(3).wait(secs(3)).await }
    });
    sleep(ms(200)).await;
    assert_eq!(semaphore.available().await.unwrap(), 1);
    assert!(
        semaphore.try_acquire(1).await.unwrap().is_none(),
        "took the permit held back for the starving waiter"
    );
    two.release().await.unwrap();
    let all = timeout(secs(3), waiter)
        .await
        .expect("the waiter ends")
        .unwrap()
        .expect("the starving waiter got its three");
    all.release().await.unwrap();
    let one = semaphore.try_acquire(1).await.unwrap();
    assert!(one.is_some(), "the reservation ended with the grant");
}
