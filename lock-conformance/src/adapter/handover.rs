//! Hand-over on the server: a mutex release hands the lock to the waiting acquisition of
//! the client registered first (a read-write lock's release to its first registered
//! writer), a fair lock's release to the first in its queue; the acquisition takes it up
//! with its next attempt. A waiter that gave up passes it on at
//! once, one that went quiet loses it when its place lapses, and nothing is handed while
//! a Redisson peer may be listening.
//!
//! The waiter under test is a raw backend, so that the scenario decides when it asks
//! again (a client of ours would take the hold up within a round trip).

use crate::scenarios::wait_until;
use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, AcquireRequest, Backend, Release, ReleaseRequest};
use lock_core::{LockKind, LockName, LockRef, Locks, Owner};
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::{AdapterConnect, ConnectSpec, await_subscribers, locks, wakes::raw_subscriber};
use crate::scenarios::spawn_try_waiter;

/// The lease the waiter asks for.
const LEASE: Duration = Duration::from_secs(30);

/// A server, a client of ours holding `name`, and a raw backend whose acquisition of
/// `name` (owner `quiet:task`, its place kept for `place`) waits registered and
/// listening.
struct Stage {
    server: RedisServer,
    holder: Locks,
    quiet: Arc<dyn Backend>,
    lock: LockRef,
    request: AcquireRequest,
    _listening: lock_core::notify::Listener,
}

impl Stage {
    async fn new(
        connect: &AdapterConnect,
        (kind, name): (LockKind, &str),
        place: Duration,
    ) -> (Self, lock_core::Guard) {
        let server = RedisServer::start().await;
        let holder = locks(connect, ConnectSpec::new(server.url()))
            .await
            .unwrap();
        let quiet = connect(ConnectSpec::new(server.url())).await.unwrap();
        let lock = LockRef::new(
            kind,
            LockName::new(name).unwrap(),
            Owner::new("quiet", "task"),
        );
        let held = match kind {
            LockKind::Fair => holder.fair_mutex(name).lock().await.unwrap(),
            LockKind::Write => holder.rw_lock(name).writer().lock().await.unwrap(),
            _ => holder.mutex(name).lock().await.unwrap(),
        };
        let request = AcquireRequest::new(LEASE).enqueue(place).fencing(true);
        let busy = quiet.acquire(&lock, request).await.unwrap();
        assert!(matches!(busy, Acquire::Busy { .. }), "{busy:?}");
        let listening = quiet.listen(&lock).await.unwrap();
        await_subscribers(
            &server,
            "NUMSUB",
            &waiter_channel(kind, name, "quiet:task"),
            1,
        )
        .await;
        let stage = Self {
            server,
            holder,
            quiet,
            lock,
            request,
            _listening: listening,
        };
        (stage, held)
    }

    /// The quiet owner's hold count of the lock, as stored.
    async fn quiet_holds(&self) -> Option<String> {
        let field = match self.lock.kind {
            LockKind::Write => "quiet:task:write",
            _ => "quiet:task",
        };
        self.server
            .command(&["HGET", self.lock.name.as_str(), field])
            .await
    }

    async fn ttl(&self) -> i64 {
        self.server
            .command(&["PTTL", self.lock.name.as_str()])
            .await
    }
}

/// The channel a waiter of `owner` for lock `name` of `kind` listens on.
fn waiter_channel(kind: LockKind, name: &str, owner: &str) -> String {
    match kind {
        LockKind::Fair => format!("redisson_lock__channel:{{{name}}}:{owner}"),
        LockKind::Read | LockKind::Write => format!("redisson_rwlock:{{{name}}}"),
        _ => format!("redisson_lock__channel:{{{name}}}"),
    }
}

/// The release makes the waiting acquisition the holder before it asks again (a
/// mutex's or a writer's registered first, a fair lock's first in its queue, which it
/// leaves), with a
/// lease of its place's length and a fresh fencing token; its next attempt, under the
/// same id, takes the hold up with its full lease, and releases it as any grant.
pub async fn a_release_hands_the_lock_to_the_waiting_acquisition(connect: &AdapterConnect) {
    for (kind, name) in [
        (LockKind::Mutex, "handover:m"),
        (LockKind::Fair, "handover:f"),
        (LockKind::Write, "handover:w"),
    ] {
        hands_the_lock_to_the_waiting_acquisition(connect, kind, name).await;
    }
}

async fn hands_the_lock_to_the_waiting_acquisition(
    connect: &AdapterConnect,
    kind: LockKind,
    name: &str,
) {
    let place = secs(10);
    let (stage, held) = Stage::new(connect, (kind, name), place).await;
    let before = held.fencing_token();
    held.unlock().await.unwrap();
    assert_eq!(
        stage.quiet_holds().await.as_deref(),
        Some("1"),
        "{kind}: handed over"
    );
    if kind == LockKind::Fair {
        let queue = format!("redisson_lock_queue:{{{name}}}");
        let queued: i64 = stage.server.command(&["LLEN", &queue]).await;
        assert_eq!(queued, 0, "the waiter handed the fair lock left its queue");
    }
    let ttl = stage.ttl().await;
    assert!(
        ttl > 0 && ttl <= 10_000,
        "a handed hold lasts the place: {ttl} ms"
    );
    let taken = stage
        .quiet
        .acquire(&stage.lock, stage.request)
        .await
        .unwrap();
    let Acquire::Acquired {
        holds: 1,
        token: Some(fresh_token),
        origin,
    } = taken
    else {
        panic!("the next attempt takes the handed hold up: {taken:?}");
    };
    assert_eq!(
        origin,
        Some(stage.request.id),
        "the grant is the acquisition's"
    );
    if let Some(before) = before {
        assert!(
            fresh_token > before,
            "a fresh token: {fresh_token} after {before}"
        );
    }
    let ttl = stage.ttl().await;
    assert!(ttl > 20_000, "taken up with the full lease: {ttl} ms");
    // Sent again (a lost reply), the attempt gets the same grant.
    let again = stage
        .quiet
        .acquire(&stage.lock, stage.request)
        .await
        .unwrap();
    assert_eq!(again, taken);
    let release = ReleaseRequest::new(LEASE, stage.request.id);
    let released = stage.quiet.release(&stage.lock, release).await.unwrap();
    assert_eq!(released, Release::Released);
    assert_eq!(stage.quiet_holds().await, None);
}

/// A waiter handed the lock that never asks again (paused, or its process hung) keeps it
/// only for its place (1 s here), and one that gives up passes it on at once (before
/// its place of 10 s ends): either way the next client's waiter is served long before
/// a lease (30 s) could run out.
pub async fn a_waiter_that_has_gone_loses_the_handed_lock_within_its_place(
    connect: &AdapterConnect,
) {
    for (kind, gives_up) in [
        (LockKind::Mutex, false),
        (LockKind::Mutex, true),
        (LockKind::Fair, false),
        (LockKind::Fair, true),
        (LockKind::Write, false),
        (LockKind::Write, true),
    ] {
        let place = Duration::from_secs(if gives_up { 10 } else { 1 });
        let name = format!("handover-gone-{gives_up}:{kind}");
        let (stage, held) = Stage::new(connect, (kind, &name), place).await;
        let next = locks(connect, ConnectSpec::new(stage.server.url()))
            .await
            .unwrap();
        let patience = secs(20);
        let next_waiter = match kind {
            LockKind::Fair => spawn_try_waiter(next.fair_mutex(&name), patience),
            LockKind::Write => spawn_try_waiter(next.rw_lock(&name).writer(), patience),
            _ => spawn_try_waiter(next.mutex(&name), patience),
        };
        await_next_waiter(&stage.server, kind, &name).await;
        held.unlock().await.unwrap();
        assert_eq!(
            stage.quiet_holds().await.as_deref(),
            Some("1"),
            "handed over"
        );
        let started = Instant::now();
        if gives_up {
            stage
                .quiet
                .cancel_wait(&stage.lock, &stage.request)
                .await
                .unwrap();
        }
        let guard = tokio::time::timeout(secs(10), next_waiter)
            .await
            .expect("the next waiter is served")
            .unwrap()
            .unwrap()
            .expect("acquired");
        let waited = started.elapsed();
        let bound = if gives_up { secs(2) } else { secs(4) };
        assert!(
            waited < bound,
            "{kind}, gives up: {gives_up}; the next waiter waited {waited:?}"
        );
        // The quiet waiter's attempt now finds its acquisition over: its handed hold
        // is gone, and an acquisition is granted at most once.
        let late = stage
            .quiet
            .acquire(&stage.lock, stage.request)
            .await
            .unwrap();
        assert_eq!(late, Acquire::Ended);
        guard.unlock().await.unwrap();
        drop(stage.holder);
    }
}

/// Waits until the next client's waiter of `name` listens and, with an attempt after
/// that, has registered behind the quiet one (a mutex's waiting clients, a fair lock's
/// queue).
async fn await_next_waiter(server: &RedisServer, kind: LockKind, name: &str) {
    let (count, key) = match kind {
        LockKind::Fair => {
            let pattern = format!("redisson_lock__channel:{{{name}}}:*");
            let deadline = Instant::now() + secs(5);
            while server
                .command::<Vec<String>>(&["PUBSUB", "CHANNELS", &pattern])
                .await
                .len()
                < 2
            {
                assert!(Instant::now() < deadline, "the next fair waiter listens");
                tokio::time::sleep(ms(5)).await;
            }
            ("LLEN", format!("redisson_lock_queue:{{{name}}}"))
        }
        _ => {
            let channel = waiter_channel(kind, name, "");
            await_subscribers(server, "NUMSUB", &channel, 2).await;
            ("ZCARD", format!("redisson_lock_waiting:{{{name}}}"))
        }
    };
    wait_until(secs(5), "the next waiter registers", || async {
        server.command::<i64>(&[count, &key]).await >= 2
    })
    .await;
}

/// A client whose reader and writer both wait on one read-write lock listens on the
/// lock's channel once, for both. A release that hands the lock to its writer wakes every
/// waiter of the client on that channel, not one: a wake-up taken by the reader (which
/// finds the lock write-held and sleeps again) would leave the writer holding a lock it
/// does not know it holds until it asks again, a third of its place later (5 s here).
pub async fn a_handed_writer_is_woken_beside_its_clients_reader(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "handover-rw-beside:w";
    let holder = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let held = holder.rw_lock(name).writer().lock().await.unwrap();
    let client = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let channel = waiter_channel(LockKind::Write, name, "");
    // The reader listens first: a wake-up meant for one waiter would reach it.
    let reader = client.rw_lock(name).reader();
    let reading = tokio::spawn(async move {
        let guard = reader.lock().await.unwrap();
        guard.unlock().await.unwrap();
    });
    await_subscribers(&server, "NUMSUB", &channel, 1).await;
    let writer = client.rw_lock(name).writer();
    let writing = tokio::spawn(async move {
        let guard = writer.lock().await.unwrap();
        let held_at = Instant::now();
        guard.unlock().await.unwrap();
        held_at
    });
    let registry = format!("redisson_lock_waiting:{{{name}}}");
    wait_until(secs(5), "the writer registers", || async {
        server.command::<i64>(&["ZCARD", &registry]).await >= 1
    })
    .await;
    // Both asked since they listen: the release finds them asleep.
    tokio::time::sleep(ms(50)).await;
    let released = Instant::now();
    held.unlock().await.unwrap();
    let held_at = tokio::time::timeout(secs(10), writing)
        .await
        .expect("the writer is served")
        .unwrap();
    let waited = held_at - released;
    assert!(
        waited < secs(1),
        "the writer held the lock {waited:?} after the release"
    );
    tokio::time::timeout(secs(10), reading)
        .await
        .expect("the reader is served after the writer")
        .unwrap();
}

/// An owner whose acquisition was handed the lock, and which starts another acquisition
/// before the first one's cancellation arrives (its future was dropped and it asked
/// again), joins the handed hold, as any reentry does; the late cancellation of the first
/// ends only the first one's grant, and the first acquisition's attempts get nothing more.
pub async fn a_later_acquisition_of_the_owner_joins_a_handed_mutex(connect: &AdapterConnect) {
    let (stage, held) = Stage::new(connect, (LockKind::Mutex, "handover-owner:m"), secs(10)).await;
    held.unlock().await.unwrap();
    assert_eq!(
        stage.quiet_holds().await.as_deref(),
        Some("1"),
        "handed over"
    );
    let later = AcquireRequest::new(LEASE).enqueue(secs(10));
    let joined = stage.quiet.acquire(&stage.lock, later).await.unwrap();
    let Acquire::Acquired {
        holds: 2, origin, ..
    } = joined
    else {
        panic!("the later acquisition joins the handed hold: {joined:?}");
    };
    assert_eq!(
        origin,
        Some(stage.request.id),
        "one hold, begun by the hand-over"
    );
    stage
        .quiet
        .cancel_wait(&stage.lock, &stage.request)
        .await
        .unwrap();
    assert_eq!(
        stage.quiet_holds().await.as_deref(),
        Some("1"),
        "the earlier acquisition's cancellation ends its own grant alone"
    );
    let earlier = stage
        .quiet
        .acquire(&stage.lock, stage.request)
        .await
        .unwrap();
    assert_eq!(earlier, Acquire::Ended);
    let release = ReleaseRequest::new(LEASE, later.id);
    let released = stage.quiet.release(&stage.lock, release).await.unwrap();
    assert_eq!(released, Release::Released);
    assert_eq!(stage.quiet_holds().await, None);
}

/// While a Redisson waiter may listen on the lock's channel (more listeners than our
/// registered clients), a release hands nothing over: the lock is free, everybody is
/// told, and the Redisson peer may take it with its own script, as before. So for a
/// mutex, and for a read-write lock, whose Redisson readers and writers listen on its
/// one channel.
pub async fn nothing_is_handed_over_while_a_redisson_peer_listens(connect: &AdapterConnect) {
    let peer = "5f3c6a1e-0000-4000-8000-000000000009:1";
    for (kind, name) in [
        (LockKind::Mutex, "handover-redisson:m"),
        (LockKind::Write, "handover-redisson:w"),
    ] {
        let place = secs(10);
        let (stage, held) = Stage::new(connect, (kind, name), place).await;
        let channel = waiter_channel(kind, name, "");
        let _redisson = raw_subscriber(stage.server.port(), "SUBSCRIBE", &channel).await;
        await_subscribers(&stage.server, "NUMSUB", &channel, 2).await;
        held.unlock().await.unwrap();
        let exists: i64 = stage.server.command(&["EXISTS", name]).await;
        assert_eq!(exists, 0, "{kind}: free, for anybody told to take it");
        // A Redisson peer takes it with its own script's first step.
        let taken: i64 = match kind {
            LockKind::Write => {
                let field = format!("{peer}:write");
                let hset = ["HSET", name, "mode", "write", &field, "1"];
                stage.server.command(&hset).await
            }
            _ => stage.server.command(&["HSET", name, peer, "1"]).await,
        };
        assert!(taken >= 1);
        let busy = stage
            .quiet
            .acquire(&stage.lock, stage.request)
            .await
            .unwrap();
        assert!(matches!(busy, Acquire::Busy { .. }), "{kind}: {busy:?}");
    }
}
