//! Who a mutex release wakes: with [`lock_core::Capabilities::wakes_one_client`], one
//! waiting client per release, so that one attempt follows it instead of one per client;
//! never at the cost of a waiter that must hear it.

use crate::scenarios::wait_until;
use crate::timing::{ms, secs};
use std::sync::Arc;

use lock_core::{LockKind, LockName, LockRef, Locks, Owner};
use lock_redis_protocol::ProtocolOptions;
use redis::Value;
use tokio::time::{sleep, timeout};

use crate::Fixture;
use crate::faulty::FaultyBackend;
use crate::scenarios::{
    all_served, counted_client, served_then_released, spawn_try_waiter, unique,
};

/// Several clients wait for one mutex; each release is followed by one attempt at most,
/// by one waiting client (none where the release hands the lock over: the waiter holds
/// from the message, and takes the hold up only if it keeps it for a while), and every
/// client is served in turn. Before releases woke one client alone, every waiting client
/// asked after each release (here: four attempts per release instead of one).
pub async fn a_release_wakes_one_waiting_client(fx: &dyn Fixture) {
    const CLIENTS: usize = 4;
    let holder = fx.client().await;
    let name = unique("one-client");
    let held = holder.mutex(&name).lock().await.unwrap();
    let mut counters = Vec::new();
    let mut waiters = Vec::new();
    let mut releases: Vec<Option<tokio::sync::oneshot::Sender<()>>> = Vec::new();
    let (passed_tx, mut passed) = tokio::sync::mpsc::unbounded_channel();
    for n in 0..CLIENTS {
        let counted = FaultyBackend::new(fx.backend().await);
        counters.push(counted.clone());
        let mutex = Locks::new(Arc::new(counted)).mutex(&name);
        let passed = passed_tx.clone();
        let (release, let_go) = tokio::sync::oneshot::channel::<()>();
        releases.push(Some(release));
        waiters.push(tokio::spawn(async move {
            let guard = mutex.lock().await.unwrap();
            passed.send(n).unwrap();
            // Hold until the test has counted the attempts that followed the release.
            let_go.await.unwrap();
            guard.unlock().await.unwrap();
        }));
        // Each client arrives after the one before.
        sleep(ms(30)).await;
    }
    let attempts = || {
        counters
            .iter()
            .map(|counter| counter.acquisitions())
            .sum::<usize>()
    };
    // Every client has asked (once, and again once subscribed).
    sleep(ms(200)).await;
    let mut served: Vec<usize> = Vec::new();
    let mut held = Some(held);
    for round in 0..CLIENTS {
        let before = attempts();
        match (held.take(), served.last()) {
            (Some(held), _) => held.unlock().await.unwrap(),
            (None, Some(&last)) => {
                releases[last].take().unwrap().send(()).unwrap();
            }
            (None, None) => unreachable!("the first round releases the holder"),
        }
        let Ok(next) = timeout(secs(5), passed.recv()).await else {
            panic!(
                "no waiting client was served after release {round}, after {} attempts; {}",
                attempts() - before,
                waiting_state(fx, &name).await
            );
        };
        let next = next.unwrap();
        // Attempts the release caused, and any that lag behind.
        sleep(ms(150)).await;
        let asked = attempts() - before;
        assert!(
            asked <= 1,
            "release {round} was followed by {asked} attempts by waiting clients, not one at most"
        );
        served.push(next);
    }
    if let Some(last) = served.last() {
        releases[*last].take().unwrap().send(()).unwrap();
    }
    all_served(waiters).await;
    served.sort_unstable();
    assert_eq!(
        served,
        (0..CLIENTS).collect::<Vec<_>>(),
        "every client is served once"
    );
}

/// A client registered as waiting vanished without a word (its process died; here its
/// registration is written by hand, in the place it would hold, first in line): a
/// release must not be spent on it. The live waiter is woken at once and served once the
/// lock's offer to the vanished client (100 ms) has lapsed, not when the holder's 30 s
/// lease would have ended.
pub async fn a_vanished_clients_registration_does_not_swallow_a_release(fx: &dyn Fixture) {
    let redis = fx.redis().expect("a Redis fixture");
    let name = unique("vanished");
    let waiting = format!("redisson_lock_waiting:{{{name}}}");
    let holder = fx.client().await;
    let held = holder.mutex(&name).lock().await.unwrap();
    let (client, counted) = counted_client(fx).await;
    let waiter = spawn_try_waiter(client.mutex(&name), secs(20));
    counted.listening().await;
    let registered = redis
        .run(&waiting, &["ZRANGE", &waiting, "0", "0", "WITHSCORES"])
        .await;
    let Value::Array(entry) = registered else {
        panic!("the waiting client is not registered: {registered:?}");
    };
    let Some(Value::BulkString(score)) = entry.get(1) else {
        panic!("the waiting client is not registered: {entry:?}");
    };
    let score: u64 = String::from_utf8_lossy(score).parse().unwrap();
    let earlier = (score - 1).to_string();
    let gone = "distlock-wake:00000000-0000-4000-8000-00000000dead";
    redis
        .run(&waiting, &["ZADD", &waiting, &earlier, gone])
        .await;
    held.unlock().await.unwrap();
    served_then_released(waiter, secs(3), "the release reached the live waiter").await;
}

/// A release beside a waiter of another library (a listener of the lock's channel that
/// is not a registered client of ours, as a Redisson waiter is) offers it the lock: our
/// waiting client keeps back while the offer lasts (2 s here, so that a loaded machine
/// does not let it lapse), the other library's client takes the lock 200 ms after the
/// release with Redisson's own script, and our client is served after its release.
/// Before, our client (faster than any peer) won every such race, and a Redisson-protocol
/// client sharing a lock with ours got a few percent of the turns (issue 48).
pub async fn a_release_beside_another_librarys_waiter_offers_it_the_lock(fx: &dyn Fixture) {
    let Some(redis) = fx.redis() else {
        panic!("the scenario needs RedisControl");
    };
    let name = unique("offer-others");
    let long_offers = ProtocolOptions::default().reservation(secs(2));
    let holder = Locks::new(fx.backend_with(long_offers).await);
    let held = holder.mutex(&name).lock().await.unwrap();
    // A starving waiter of ours would hold the lock's next free moment against everybody
    // (a reservation of its own, which a release keeps): this one never starves.
    let counted = FaultyBackend::new(fx.backend().await);
    let client = Locks::builder(Arc::new(counted.clone()))
        .starvation_threshold(None)
        .build()
        .unwrap();
    let ours = spawn_try_waiter(client.mutex(&name), secs(10));
    counted.listening().await;
    let outsider = fx.backend().await;
    let lock = LockRef::new(
        LockKind::Mutex,
        LockName::new(&name).unwrap(),
        Owner::new("outsider", "1"),
    );
    let listening = outsider.listen(&lock).await.unwrap();
    let channel = format!("redisson_lock__channel:{{{name}}}");
    // The release must count the outsider: it has subscribed when both listen.
    wait_until(secs(5), "the outsider never subscribed", || async {
        listeners(redis, &channel).await >= 2
    })
    .await;
    held.unlock().await.unwrap();
    sleep(ms(200)).await;
    assert!(
        !ours.is_finished(),
        "our waiter took the lock offered to the others"
    );
    let taken = redis
        .run(
            &name,
            &[
                "EVAL",
                crate::adapter::REDISSON_LOCK,
                "1",
                &name,
                "30000",
                "outsider:1",
            ],
        )
        .await;
    assert_eq!(
        taken,
        Value::Nil,
        "the other library's client takes the lock; {}",
        waiting_state(fx, &name).await
    );
    drop(listening);
    redis.run(&name, &["DEL", &name]).await;
    redis
        .run(&channel, &[redis.publish_command(), &channel, "0"])
        .await;
    served_then_released(
        ours,
        secs(3),
        "our client is served after the other library's release",
    )
    .await;
}

/// How many listen on `channel`, as a release counts them.
pub(crate) async fn listeners(redis: &dyn crate::fixture::RedisControl, channel: &str) -> i64 {
    let count = if redis.publish_command() == "spublish" {
        "SHARDNUMSUB"
    } else {
        "NUMSUB"
    };
    match redis.run(channel, &["PUBSUB", count, channel]).await {
        Value::Array(counts) => match counts.get(1) {
            Some(Value::Int(listening)) => *listening,
            other => panic!("PUBSUB {count} answered {other:?}"),
        },
        other => panic!("PUBSUB {count} answered {other:?}"),
    }
}

/// What the store says of a mutex's waiting clients, for a failure message.
async fn waiting_state(fx: &dyn Fixture, name: &str) -> String {
    let Some(redis) = fx.redis() else {
        return "no store to look into".to_owned();
    };
    let waiting = format!("redisson_lock_waiting:{{{name}}}");
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let count = if redis.publish_command() == "spublish" {
        "SHARDNUMSUB"
    } else {
        "NUMSUB"
    };
    let reservation = format!("redisson_lock_reserved:{{{name}}}");
    format!(
        "registered {:?}, listeners {:?}, holders {:?}, reservation {:?}",
        redis
            .run(&waiting, &["ZRANGE", &waiting, "0", "-1", "WITHSCORES"])
            .await,
        redis.run(&waiting, &["PUBSUB", count, &channel]).await,
        redis.run(name, &["HGETALL", name]).await,
        redis.run(&reservation, &["GET", &reservation]).await,
    )
}
