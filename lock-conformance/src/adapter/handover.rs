//! Hand-over on the server: a mutex release hands the lock to the waiting acquisition of
//! the client registered first (a read-write lock's release to its first registered
//! writer), a fair lock's release to the first in its queue; the acquisition takes it up
//! with its next attempt. A waiter that gave up passes it on at
//! once, one that went quiet loses it when its place lapses, and nothing is handed while
//! a Redisson peer may be listening.
//!
//! The waiter under test is a raw backend, so that the scenario decides when it asks
//! again (a client of ours would take the hold up within a round trip).

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
    let place = Duration::from_secs(10);
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
        let patience = Duration::from_secs(20);
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
        let guard = tokio::time::timeout(Duration::from_secs(10), next_waiter)
            .await
            .expect("the next waiter is served")
            .unwrap()
            .unwrap()
            .expect("acquired");
        let waited = started.elapsed();
        let bound = if gives_up {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(4)
        };
        assert!(
            waited < bound,
            "{kind}, gives up: {gives_up}; the next waiter waited {waited:?}"
        );
        // The quiet waiter's attempt now finds the lock taken: its hold is gone.
        let late = stage
            .quiet
            .acquire(&stage.lock, stage.request)
            .await
            .unwrap();
        assert!(matches!(late, Acquire::Busy { .. }), "{late:?}");
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
            let deadline = Instant::now() + Duration::from_secs(5);
            while server
                .command::<Vec<String>>(&["PUBSUB", "CHANNELS", &pattern])
                .await
                .len()
                < 2
            {
                assert!(Instant::now() < deadline, "the next fair waiter listens");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            ("LLEN", format!("redisson_lock_queue:{{{name}}}"))
        }
        _ => {
            let channel = waiter_channel(kind, name, "");
            await_subscribers(server, "NUMSUB", &channel, 2).await;
            ("ZCARD", format!("redisson_lock_waiting:{{{name}}}"))
        }
    };
    let registered = Instant::now() + Duration::from_secs(5);
    while server.command::<i64>(&[count, &key]).await < 2 {
        assert!(Instant::now() < registered, "the next waiter registers");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An owner whose acquisition was handed the lock, and which starts another acquisition
/// before the first one's cancellation arrives (its future was dropped and it asked
/// again), joins the handed hold, as any reentry does; the late cancellation of the first
/// ends only the first one's grant, and the first acquisition's attempts get nothing more.
pub async fn a_later_acquisition_of_the_owner_joins_a_handed_mutex(connect: &AdapterConnect) {
    let (stage, held) = Stage::new(
        connect,
        (LockKind::Mutex, "handover-owner:m"),
        Duration::from_secs(10),
    )
    .await;
    held.unlock().await.unwrap();
    assert_eq!(
        stage.quiet_holds().await.as_deref(),
        Some("1"),
        "handed over"
    );
    let later = AcquireRequest::new(LEASE).enqueue(Duration::from_secs(10));
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
    assert!(matches!(earlier, Acquire::Busy { .. }), "{earlier:?}");
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
        let place = Duration::from_secs(10);
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

/// Mixed fleets: two clients of ours, a peer that runs Redisson's own lock and unlock
/// scripts, and a peer that follows only Redisson's layout (a hash under the name, `0`
/// on `redisson_lock__channel:{name}` when it lets go) take turns on one mutex, each
/// holding it a few milliseconds at a time. Nobody holds it beside anybody else, and
/// nobody waits a second for one turn: each side wakes the other (a missed wake-up would
/// cost a peer the 30 s lease it saw, and one of ours a third of its place).
pub async fn mixed_fleets_keep_exclusion_and_wake_each_other(connect: &AdapterConnect) {
    const ROUNDS: usize = 20;
    let server = RedisServer::start().await;
    let name = "mixed-fleet:m";
    let section = Arc::new(Section::default());
    let mut turns = Vec::new();
    for _ in 0..2 {
        let ours = locks(connect, ConnectSpec::new(server.url()))
            .await
            .unwrap();
        let (mutex, section) = (ours.mutex(name), Arc::clone(&section));
        turns.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let guard = mutex.lock().await.unwrap();
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(ours);
            longest
        }));
    }
    for style in [PeerStyle::Redisson, PeerStyle::LayoutOnly] {
        let peer = Peer::connect(&server, name, style).await;
        let section = Arc::clone(&section);
        turns.push(tokio::spawn(async move {
            let mut peer = peer;
            let mut longest = Duration::ZERO;
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                peer.lock().await;
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                peer.unlock().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            longest
        }));
    }
    for (contender, turn) in ["ours", "ours", "Redisson", "layout-only"]
        .iter()
        .zip(turns)
    {
        let longest = tokio::time::timeout(Duration::from_secs(60), turn)
            .await
            .expect("every contender finishes its rounds")
            .unwrap();
        assert!(
            longest < Duration::from_secs(1),
            "{contender} waited {longest:?} for one turn"
        );
    }
    assert_eq!(
        section.overlaps.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
}

/// The critical section the contenders share: entering while another is inside is an
/// overlap.
#[derive(Debug, Default)]
pub(super) struct Section {
    inside: std::sync::atomic::AtomicBool,
    pub(super) overlaps: std::sync::atomic::AtomicUsize,
}

impl Section {
    pub(super) async fn enter_and_leave(&self) {
        use std::sync::atomic::Ordering;
        if self.inside.swap(true, Ordering::SeqCst) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(3)).await;
        self.inside.store(false, Ordering::SeqCst);
    }
}

/// How a peer takes and gives back the lock.
#[derive(Debug, Clone, Copy)]
enum PeerStyle {
    /// Redisson's own scripts (`RedissonLock`), with its unlock latch.
    Redisson,
    /// Redisson's layout only: the hash under the name, set when it does not exist, and
    /// deleted then announced with `0`, in commands of its own.
    LayoutOnly,
}

/// Redisson's lock script (`tryLockInnerAsync`): nil when taken, else the lock's PTTL.
const REDISSON_LOCK: &str = "\
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's unlock script (`unlockInnerAsync`, 3.24 on), with its unlock latch.
const REDISSON_UNLOCK: &str = "\
local val = redis.call('get', KEYS[3]); \
if val ~= false then return tonumber(val); end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then \
    redis.call('pexpire', KEYS[1], ARGV[2]); \
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]); \
    return 0; \
else \
    redis.call('del', KEYS[1]); \
    redis.call(ARGV[4], KEYS[2], ARGV[1]); \
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]); \
    return 1; \
end;";

/// The layout-only peer's take: the hash when the name is free, else the PTTL.
const LAYOUT_LOCK: &str = "\
if redis.call('exists', KEYS[1]) == 0 then \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// A peer of another library on the same server, waiting as Redisson does: subscribed
/// to the lock's channel, it tries, and sleeps until a message or the PTTL it saw.
struct Peer {
    style: PeerStyle,
    name: String,
    channel: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    messages: redis::aio::PubSubStream,
    _subscription: redis::aio::PubSubSink,
}

impl Peer {
    const LEASE_MS: u64 = 30_000;

    async fn connect(server: &RedisServer, name: &str, style: PeerStyle) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (mut subscription, messages) = client.get_async_pubsub().await.unwrap().split();
        let channel = format!("redisson_lock__channel:{{{name}}}");
        subscription.subscribe(&channel).await.unwrap();
        Self {
            style,
            name: name.to_owned(),
            channel,
            owner: format!("{}:1", lock_core::RequestId::random()),
            conn,
            messages,
            _subscription: subscription,
        }
    }

    async fn lock(&mut self) {
        use futures_util::StreamExt as _;
        let script = match self.style {
            PeerStyle::Redisson => REDISSON_LOCK,
            PeerStyle::LayoutOnly => LAYOUT_LOCK,
        };
        loop {
            let ttl: Option<u64> = redis::Script::new(script)
                .key(&self.name)
                .arg(Self::LEASE_MS)
                .arg(&self.owner)
                .invoke_async(&mut self.conn)
                .await
                .unwrap();
            let Some(ttl) = ttl else {
                return;
            };
            let wait = Duration::from_millis(ttl.max(1));
            // A message (ours `0`, or another peer's) or the PTTL, whichever first.
            let _message = tokio::time::timeout(wait, self.messages.next()).await;
        }
    }

    async fn unlock(&mut self) {
        match self.style {
            PeerStyle::Redisson => {
                let latch = format!(
                    "redisson_unlock_latch:{{{}}}:{}",
                    self.name,
                    lock_core::RequestId::random()
                );
                let released: Option<i64> = redis::Script::new(REDISSON_UNLOCK)
                    .key(&self.name)
                    .key(&self.channel)
                    .key(&latch)
                    .arg(0)
                    .arg(Self::LEASE_MS)
                    .arg(&self.owner)
                    .arg("publish")
                    .arg(20_000)
                    .invoke_async(&mut self.conn)
                    .await
                    .unwrap();
                assert_eq!(released, Some(1), "the Redisson peer held the lock");
            }
            PeerStyle::LayoutOnly => {
                let deleted: i64 = redis::cmd("DEL")
                    .arg(&self.name)
                    .query_async(&mut self.conn)
                    .await
                    .unwrap();
                assert_eq!(deleted, 1, "the layout-only peer held the lock");
                let _told: i64 = redis::cmd("PUBLISH")
                    .arg(&self.channel)
                    .arg("0")
                    .query_async(&mut self.conn)
                    .await
                    .unwrap();
            }
        }
    }
}
