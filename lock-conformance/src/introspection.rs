//! Introspection: who holds a lock, since when, with how much lease left and which
//! fencing token, how many wait; and which locks are held under a prefix.

use crate::timing::{ms, secs};
use std::time::{Duration, SystemTime};

use lock_core::backend::Acquire;
use lock_core::{AcquireRequest, HeldAs, LockKind, LockName, LockRef, Locks, Owner};
use tokio::time::{Instant, sleep};

use crate::Fixture;
use crate::scenarios::unique;

/// A client named for the test, with fencing tokens where the backend issues them.
async fn named(fx: &dyn Fixture, name: &str) -> Locks {
    let backend = fx.backend().await;
    let fencing = backend.capabilities().fencing;
    Locks::builder(backend)
        .client_name(name)
        .fencing(fencing)
        .build()
        .expect("valid settings")
}

/// A held mutex shows its holder (owner, client name, host, process, since when), its
/// lease, its token and its waiters; a free one shows nobody; a read lock shows each
/// reader with its own lease; the held names under a prefix are listed.
pub async fn who_holds_a_lock_is_told(fx: &dyn Fixture) {
    let holder = named(fx, "conformance-holder").await;
    let operator = named(fx, "conformance-operator").await;
    let name = unique("who");
    let free = operator.describe(&name).await.unwrap();
    assert_eq!(free.held_as, HeldAs::Free);
    assert!(
        free.holders.is_empty() && free.lease_left.is_none(),
        "{free:?}"
    );

    // The store's clock and ours are one machine's in these tests; a second each way
    // for the store's rounding.
    let before = SystemTime::now() - secs(1);
    let guard = holder.mutex(&name).lock().await.unwrap();
    let after = SystemTime::now() + secs(1);
    // The client describes itself in a job of its first acquisition.
    sleep(ms(100)).await;
    let held = operator.describe(&name).await.unwrap();
    assert_eq!(held.held_as, HeldAs::Exclusive, "{held:?}");
    assert_eq!(held.holders.len(), 1, "{held:?}");
    let who = &held.holders[0];
    assert_eq!(who.client_id(), holder.client_id(), "{who:?}");
    assert_eq!(who.holds, 1);
    let client = who
        .client
        .as_ref()
        .expect("the holder's client described itself");
    assert_eq!(client.name, "conformance-holder");
    assert_eq!(client.pid, std::process::id());
    assert!(!client.host.is_empty());
    assert!(
        who.since
            .is_some_and(|since| since > before && since < after),
        "since {:?}, granted between {before:?} and {after:?}",
        who.since
    );
    let lease = held.lease_left.expect("a held lock has a lease");
    assert!(
        lease > Duration::ZERO && lease <= Duration::from_secs(30),
        "{lease:?}"
    );
    if let Some(token) = guard.fencing_token() {
        assert_eq!(held.fencing_token, Some(token));
    }
    let listed = operator.held_names(&name, 100).await.unwrap();
    assert_eq!(listed, std::slice::from_ref(&name));
    guard.unlock().await.unwrap();
    assert_eq!(
        operator.describe(&name).await.unwrap().held_as,
        HeldAs::Free
    );
    assert!(operator.held_names(&name, 100).await.unwrap().is_empty());

    if fx.backend().await.capabilities().read_write {
        let readers = [
            holder.rw_lock(&name).reader().lock().await.unwrap(),
            operator.rw_lock(&name).reader().lock().await.unwrap(),
        ];
        let read = operator.describe(&name).await.unwrap();
        assert_eq!(read.held_as, HeldAs::Read, "{read:?}");
        assert_eq!(read.holders.len(), 2, "{read:?}");
        assert!(
            read.holders
                .iter()
                .all(|reader| reader.lease_left.is_some())
        );
        for reader in readers {
            reader.unlock().await.unwrap();
        }
    }

    if fx.backend().await.capabilities().fair {
        let fair = holder.fair_mutex(&name).lock().await.unwrap();
        let waiting = operator.fair_mutex(&name);
        let waiter = tokio::spawn(async move { waiting.lock().await });
        let mut seen = 0;
        for _ in 0..50 {
            seen = operator.describe(&name).await.unwrap().waiting;
            if seen == 1 {
                break;
            }
            sleep(ms(20)).await;
        }
        assert_eq!(seen, 1, "the fair lock's waiter");
        fair.unlock().await.unwrap();
        waiter.await.unwrap().unwrap().unlock().await.unwrap();
    }
}

/// A hold's start time is its grant's, also once the acquire request was sent again
/// (a retry after a lost reply) and found its grant: the store's record of when the hold
/// began must not move to the retry. The owner is one request's alone, the owner of every
/// acquisition outside a holder's scope (on Redis such a hold keeps its start in its
/// grant's latch, which a retry writes again).
pub async fn a_hold_found_again_keeps_when_it_began(fx: &dyn Fixture) {
    let backend = fx.backend().await;
    let operator = named(fx, "conformance-operator").await;
    let name = unique("began");
    let request = AcquireRequest::new(secs(30));
    let owner = Owner::of_request("00000000-0000-0000-0000-0000000be9a2", request.id);
    let lock = LockRef::new(LockKind::Mutex, LockName::new(&name).unwrap(), owner);
    // The hold's age as described, against the runtime's clock: a store that keeps time
    // with the runtime (the memory store, under a paused clock) and one that keeps the
    // wall clock age alike. A quarter of a second for the store's rounding.
    let asked = Instant::now();
    let first = backend.acquire(&lock, request).await.unwrap();
    let granted = Instant::now();
    assert!(
        matches!(first, Acquire::Acquired { holds: 1, .. }),
        "{first:?}"
    );
    sleep(ms(600)).await;
    let again = backend.acquire(&lock, request).await.unwrap();
    assert_eq!(again, first, "a request sent again gets its grant back");
    let held = operator.describe(&name).await.unwrap();
    let described = Instant::now();
    assert_eq!(held.holders.len(), 1, "{held:?}");
    let since = held.holders[0].since.expect("a held lock's start");
    let age = SystemTime::now()
        .duration_since(since)
        .unwrap_or(Duration::ZERO);
    let (least, most) = (described - granted, described - asked);
    assert!(
        age + ms(250) > least && age < most + ms(250),
        "the hold was {age:?} old when described, granted {least:?} to {most:?} before \
         (and sent again 600 ms after)"
    );
    assert!(operator.mutex(&name).force_unlock().await.unwrap());
}

/// A hold handed over to a waiter began when the release handed it over: described
/// before the waiter took it up (a third of the lease later), it shows that start.
pub async fn a_handed_hold_began_at_its_hand_over(fx: &dyn Fixture) {
    let holder = named(fx, "conformance-holder").await;
    let waiting = named(fx, "conformance-waiter").await;
    let operator = named(fx, "conformance-operator").await;
    let name = unique("handed-began");
    let waiter_id = waiting.client_id().to_owned();
    let held = holder.mutex(&name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move { waiting.mutex(&name).lock().await }
    });
    sleep(ms(600)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let info = operator.describe(&name).await.unwrap();
    let described = Instant::now();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].client_id(), waiter_id, "{info:?}");
    let since = info.holders[0].since.expect("a held lock's start");
    assert!(
        since < SystemTime::now() + ms(250),
        "the hold began at {since:?}, after it was described"
    );
    let age = SystemTime::now()
        .duration_since(since)
        .unwrap_or(Duration::ZERO);
    assert!(
        age < described - released + ms(250),
        "the hold was {age:?} old when described, handed over at most {:?} before \
         (its waiter waited 600 ms)",
        described - released
    );
    guard.unlock().await.unwrap();
}

/// A hold written in Redisson's layout by a peer that is not this library (no grants
/// hash, no client key) is described all the same: its owner, holds and lease, with no
/// client and no start time.
pub async fn a_redisson_peers_hold_is_described(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let operator = named(fx, "conformance-operator").await;
    let name = unique("peer");
    let owner = "5d0f43a5-8c9e-4a3b-9f1e-2b7c6d8e9f00:71";
    let _: redis::Value = redis.run(&name, &["HSET", &name, owner, "2"]).await;
    let _: redis::Value = redis.run(&name, &["PEXPIRE", &name, "30000"]).await;
    let peer = operator.describe(&name).await.unwrap();
    assert_eq!(peer.held_as, HeldAs::Exclusive, "{peer:?}");
    assert_eq!(peer.holders.len(), 1, "{peer:?}");
    let holder = &peer.holders[0];
    assert_eq!(holder.owner, owner);
    assert_eq!(holder.holds, 2);
    assert!(
        holder.client.is_none() && holder.since.is_none(),
        "{holder:?}"
    );
    assert!(peer.lease_left.is_some_and(|left| left > secs(20)));
    assert_eq!(
        operator.held_names(&name, 10).await.unwrap(),
        std::slice::from_ref(&name)
    );
    assert!(operator.mutex(&name).force_unlock().await.unwrap());
}
