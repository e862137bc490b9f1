//! Mixed fleets: our clients, which hand locks over on the server, beside peers that run
//! Redisson's own scripts (`RedissonLock`, `RedissonFairLock`, `RedissonWriteLock`) or
//! follow only Redisson's layout, on a mutex, a fair lock and a read-write lock's write
//! side.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Guard, Lock, Locks};
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::late_listener::LateListener;
use super::redisson_process::RedissonProcess;
use super::{AdapterConnect, ConnectSpec, locks};

/// Mixed fleets: two clients of ours, a peer that runs Redisson's own lock and unlock
/// scripts, and a peer that follows only Redisson's layout (a hash under the name, `0`
/// on `redisson_lock__channel:{name}` when it lets go) take turns on one mutex, each
/// holding it a few milliseconds at a time. Nobody holds it beside anybody else, and
/// nobody waits a second for one turn: each side wakes the other (a missed wake-up would
/// cost a peer the 30 s lease it saw, and one of ours a third of its place).
pub async fn mixed_fleets_keep_exclusion_and_wake_each_other(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:m";
    let fleet = Fleet::new(20);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.mutex(name))
        .await;
    for (style, who) in [
        (PeerStyle::Redisson, "Redisson"),
        (PeerStyle::LayoutOnly, "layout-only"),
    ] {
        fleet.join(who, Peer::connect(&server, name, style).await);
    }
    fleet.finish().await;
}

/// Our clients and a Redisson fair-lock peer take turns on one fair lock, each holding it
/// a few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: a release of ours tells a Redisson head on its channel (it has
/// no entry to be handed the lock by), and a Redisson release tells our head on its own
/// (a missed wake-up would cost the peer the time it was told to wait, and one of ours a
/// third of its place).
pub async fn mixed_fleets_share_a_fair_lock(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:f";
    let fleet = Fleet::new(15);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.fair_mutex(name))
        .await;
    fleet.join("Redisson", FairPeer::connect(&server, name).await);
    fleet.finish().await;
}

/// Three clients of ours and a Redisson process with three workers (one subscription to
/// the lock's channel for all of them, one worker woken per `0` it hears, every other
/// message ignored, as Redisson's `LockPubSub` does) take turns on one mutex. Nobody
/// holds it beside anybody else, and nobody waits 5 s for one turn: a release that
/// hands the lock to one of our waiters must not leave the Redisson workers asleep for
/// the lease they saw (issue 48 saw waits of 1.1-4.1 s and about 5 % of the turns with
/// the npm `node-redisson` client).
pub async fn mixed_fleets_share_a_mutex_with_a_redisson_process(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:p";
    let mut fleet = Fleet::new(40);
    // Every release tells everybody (a Redisson process listens), and the process wakes
    // one of its workers per message: turns are a race, and on a loaded machine one may
    // take a second or two. A lease (30 s) is what must never be waited out.
    fleet.longest_turn = Duration::from_secs(5);
    fleet
        .join_ours(connect, &server, 3, |ours| ours.mutex(name))
        .await;
    let process = RedissonProcess::connect(&server, name).await;
    for _ in 0..3 {
        fleet.join("a Redisson process's worker", process.worker());
    }
    fleet.finish().await;
}

/// Three clients of ours and three peers that speak Redisson's protocol the way the npm
/// `node-redisson` client does (each listens on the lock's channel only while it sleeps
/// after a failed try; see `late_listener`) take turns on one mutex. Nobody holds it
/// beside anybody else, and each side gets at least half its fair share of the turns:
/// a release of ours that finds more listeners than our registered clients offers the
/// lock to the others first. (Before, our faster clients won every race and a hand-over
/// skipped a peer between its try and its subscription: the npm client got 3 % of the
/// turns, and waited up to 30 s.)
pub async fn mixed_fleets_give_late_listeners_their_share(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:l";
    let mut fleet = Fleet::new(40);
    fleet.longest_turn = Duration::from_secs(5);
    fleet.least_share = Some(0.5);
    fleet
        .join_ours(connect, &server, 3, |ours| ours.mutex(name))
        .await;
    for _ in 0..3 {
        let peer = LateListener::connect(&server, name).await;
        fleet.join("a late listener", peer);
    }
    fleet.finish().await;
}

/// Our writers and a Redisson writer take turns on one read-write lock, each holding it a
/// few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: while the Redisson writer listens on the lock's channel a release
/// of ours hands nothing over and tells everybody (`1`), and a Redisson release tells
/// our writers on the same channel.
pub async fn mixed_fleets_share_a_write_lock(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "mixed-fleet:w";
    let fleet = Fleet::new(15);
    fleet
        .join_ours(connect, &server, 2, |ours| ours.rw_lock(name).writer())
        .await;
    let writer = Peer::connect(&server, name, PeerStyle::RedissonWriter).await;
    fleet.join("Redisson", writer);
    fleet.finish().await;
}

/// A mixed fleet: contenders that take turns on one lock, each holding it a few
/// milliseconds at a time in a critical section they share.
struct Fleet {
    rounds: usize,
    /// The longest anybody may wait for one turn.
    longest_turn: Duration,
    /// The least share of the turns each kind of contender must get while all of them
    /// take turns, as a fraction of its fair share (its contenders' part of all).
    least_share: Option<f64>,
    section: Arc<Section>,
    turns: std::sync::Mutex<Vec<(&'static str, tokio::task::JoinHandle<Turns>)>>,
}

/// One contender's turns: the longest wait for one, when each was taken, and when the
/// last ended.
struct Turns {
    longest: Duration,
    taken: Vec<Instant>,
    finished: Instant,
}

impl Fleet {
    fn new(rounds: usize) -> Self {
        Self {
            rounds,
            longest_turn: Duration::from_secs(1),
            least_share: None,
            section: Arc::new(Section::default()),
            turns: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Starts the turns of `clients` clients of ours on `server`, each through the
    /// handle `handle` makes from it.
    async fn join_ours(
        &self,
        connect: &AdapterConnect,
        server: &RedisServer,
        clients: usize,
        handle: impl Fn(&Locks) -> Lock,
    ) {
        for _ in 0..clients {
            let ours = locks(connect, ConnectSpec::new(server.url()))
                .await
                .unwrap();
            let lock = handle(&ours);
            self.join("ours", Ours::new(ours, lock));
        }
    }

    /// Starts `contender`'s turns; each one's wait is timed.
    fn join(&self, who: &'static str, mut contender: impl Contender) {
        let (rounds, section) = (self.rounds, Arc::clone(&self.section));
        let turns = tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            let mut taken = Vec::with_capacity(rounds);
            for _ in 0..rounds {
                let asked = Instant::now();
                contender.take().await;
                taken.push(Instant::now());
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                contender.give_back().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Turns {
                longest,
                taken,
                finished: Instant::now(),
            }
        });
        self.turns.lock().unwrap().push((who, turns));
    }

    /// Waits for every contender's turns: nobody held the lock beside anybody else, and
    /// nobody waited the fleet's longest turn (a second unless it says otherwise) for one
    /// turn (a missed wake-up would cost a peer the PTTL it saw, and one of ours a third
    /// of its place).
    async fn finish(self) {
        let handles = std::mem::take(&mut *self.turns.lock().unwrap());
        let mut all = Vec::with_capacity(handles.len());
        for (who, turns) in handles {
            let turns = tokio::time::timeout(Duration::from_secs(60), turns)
                .await
                .expect("every contender finishes its rounds")
                .unwrap();
            assert!(
                turns.longest < self.longest_turn,
                "{who} waited {:?} for one turn",
                turns.longest
            );
            all.push((who, turns));
        }
        if let Some(least) = self.least_share {
            assert_fair_shares(&all, least);
        }
        assert_eq!(
            self.section
                .overlaps
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
    }
}

/// Asserts that each kind of contender got at least `least` of its fair share of the
/// turns taken until the first contender had taken all of its own (after that, fewer
/// contend).
fn assert_fair_shares(all: &[(&'static str, Turns)], least: f64) {
    let Some(first_done) = all.iter().map(|(_, turns)| turns.finished).min() else {
        return;
    };
    let mut kinds: Vec<(&str, usize, usize)> = Vec::new();
    for (who, turns) in all {
        let taken = turns.taken.iter().filter(|at| **at <= first_done).count();
        match kinds.iter_mut().find(|(kind, _, _)| kind == who) {
            Some((_, contenders, turns)) => {
                *contenders += 1;
                *turns += taken;
            }
            None => kinds.push((who, 1, taken)),
        }
    }
    let contenders: usize = kinds.iter().map(|(_, contenders, _)| contenders).sum();
    let turns: usize = kinds.iter().map(|(_, _, turns)| turns).sum();
    for (who, its_contenders, its_turns) in &kinds {
        #[allow(clippy::cast_precision_loss, reason = "counts of a few hundred")]
        let (share, fair) = (
            *its_turns as f64 / turns as f64,
            *its_contenders as f64 / contenders as f64,
        );
        assert!(
            share >= least * fair,
            "{who} got {its_turns} of {turns} turns ({:.0} %, its fair share {:.0} %): {kinds:?}",
            share * 100.0,
            fair * 100.0
        );
    }
}

/// One contender of a fleet: it takes the lock, and gives it back, its own way.
pub(super) trait Contender: Send + 'static {
    fn take(&mut self) -> impl Future<Output = ()> + Send;
    fn give_back(&mut self) -> impl Future<Output = ()> + Send;
}

/// A client of ours, through one of its lock handles.
struct Ours {
    _locks: Locks,
    lock: Lock,
    guard: Option<Guard>,
}

impl Ours {
    fn new(locks: Locks, lock: Lock) -> Self {
        Self {
            _locks: locks,
            lock,
            guard: None,
        }
    }
}

impl Contender for Ours {
    async fn take(&mut self) {
        self.guard = Some(self.lock.lock().await.unwrap());
    }

    async fn give_back(&mut self) {
        let guard = self.guard.take().expect("taken before");
        guard.unlock().await.unwrap();
    }
}

impl Contender for Peer {
    async fn take(&mut self) {
        self.lock().await;
    }

    async fn give_back(&mut self) {
        self.unlock().await;
    }
}

impl Contender for FairPeer {
    async fn take(&mut self) {
        self.lock().await;
    }

    async fn give_back(&mut self) {
        self.unlock().await;
    }
}

/// The critical section the contenders share: entering while another is inside is an
/// overlap.
#[derive(Debug, Default)]
struct Section {
    inside: std::sync::atomic::AtomicBool,
    overlaps: std::sync::atomic::AtomicUsize,
}

impl Section {
    async fn enter_and_leave(&self) {
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
    /// Redisson's write lock (`RedissonWriteLock`): the field `<owner>:write` of a
    /// read-write lock, on the read-write lock's channel.
    RedissonWriter,
}

/// Redisson's lock script (`tryLockInnerAsync`): nil when taken, else the lock's PTTL.
pub(crate) const REDISSON_LOCK: &str = "\
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
pub(super) struct Peer {
    style: PeerStyle,
    name: String,
    channel: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    messages: redis::aio::PubSubStream,
    _subscription: redis::aio::PubSubSink,
}

impl Peer {
    pub(super) const LEASE_MS: u64 = 30_000;

    async fn connect(server: &RedisServer, name: &str, style: PeerStyle) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (mut subscription, messages) = client.get_async_pubsub().await.unwrap().split();
        let (channel, owner) = match style {
            PeerStyle::RedissonWriter => (format!("redisson_rwlock:{{{name}}}"), ":1:write"),
            PeerStyle::Redisson | PeerStyle::LayoutOnly => {
                (format!("redisson_lock__channel:{{{name}}}"), ":1")
            }
        };
        subscription.subscribe(&channel).await.unwrap();
        Self {
            style,
            name: name.to_owned(),
            channel,
            owner: format!("{}{owner}", lock_core::RequestId::random()),
            conn,
            messages,
            _subscription: subscription,
        }
    }

    async fn lock(&mut self) {
        let script = match self.style {
            PeerStyle::Redisson => REDISSON_LOCK,
            PeerStyle::LayoutOnly => LAYOUT_LOCK,
            PeerStyle::RedissonWriter => REDISSON_WRITE_LOCK,
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
            // A message (ours `0`, or another peer's) or the PTTL, whichever first.
            until_told(&mut self.messages, ttl).await;
        }
    }

    async fn unlock(&mut self) {
        match self.style {
            PeerStyle::Redisson => {
                let released =
                    redisson_unlock(&mut self.conn, &self.name, &self.channel, &self.owner).await;
                assert_eq!(released, Some(1), "the Redisson peer held the lock");
            }
            PeerStyle::RedissonWriter => {
                let released: Option<i64> = redis::Script::new(REDISSON_WRITE_UNLOCK)
                    .key(&self.name)
                    .key(&self.channel)
                    .arg(1)
                    .arg(Self::LEASE_MS)
                    .arg(&self.owner)
                    .invoke_async(&mut self.conn)
                    .await
                    .unwrap();
                assert_eq!(released, Some(1), "the Redisson writer held the lock");
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

/// Redisson's write acquire (`RedissonWriteLock.tryLockInnerAsync`): the write hold when
/// the lock is free or already the caller's; else the lock's PTTL. Nil when taken.
/// KEYS: lock; ARGV: lease, the writer's field ('<owner>:write').
const REDISSON_WRITE_LOCK: &str = "\
local mode = redis.call('hget', KEYS[1], 'mode'); \
if (mode == false) then \
    redis.call('hset', KEYS[1], 'mode', 'write'); \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
if (mode == 'write') and (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) + ARGV[1]); \
    return nil; \
end; \
return redis.call('pttl', KEYS[1]);";

/// Redisson's write release (`RedissonWriteLock.unlockInnerAsync`, without its unlock
/// latch): the last write hold frees the lock and tells every waiter `1`. 1 released, 0
/// holds left, nil not held.
/// KEYS: lock, channel; ARGV: message, lease, the writer's field.
const REDISSON_WRITE_UNLOCK: &str = "\
if redis.call('hget', KEYS[1], 'mode') ~= 'write' then return nil; end; \
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; end; \
redis.call('hdel', KEYS[1], ARGV[3]); \
if (redis.call('hlen', KEYS[1]) == 1) then \
    redis.call('del', KEYS[1]); \
    redis.call('publish', KEYS[2], ARGV[1]); \
else \
    redis.call('hset', KEYS[1], 'mode', 'read'); \
end; \
return 1;";

/// Redisson's fair acquire (`RedissonFairLock.tryLockInnerAsync`): drops queue heads whose
/// score passed, takes the free lock when first (or the queue is empty), moving every
/// score one wait slot closer; else queues the caller behind the last waiter and returns
/// how long it should wait. Nil when taken.
/// KEYS: lock, queue, scores; ARGV: lease, owner, wait slot, now (ms).
const REDISSON_FAIR_LOCK: &str = "\
while true do \
    local first = redis.call('lindex', KEYS[2], 0); \
    if first == false then break; end; \
    local timeout = tonumber(redis.call('zscore', KEYS[3], first)); \
    if timeout <= tonumber(ARGV[4]) then \
        redis.call('zrem', KEYS[3], first); \
        redis.call('lpop', KEYS[2]); \
    else break; end; \
end; \
if (redis.call('exists', KEYS[1]) == 0) and ((redis.call('exists', KEYS[2]) == 0) \
    or (redis.call('lindex', KEYS[2], 0) == ARGV[2])) then \
    redis.call('lpop', KEYS[2]); \
    redis.call('zrem', KEYS[3], ARGV[2]); \
    local queued = redis.call('zrange', KEYS[3], 0, -1); \
    for i = 1, #queued, 1 do \
        redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), queued[i]); \
    end; \
    redis.call('hset', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then \
    redis.call('hincrby', KEYS[1], ARGV[2], 1); \
    redis.call('pexpire', KEYS[1], ARGV[1]); \
    return nil; \
end; \
local score = redis.call('zscore', KEYS[3], ARGV[2]); \
if score ~= false then \
    return score - tonumber(ARGV[3]) - tonumber(ARGV[4]); \
end; \
local last = redis.call('lindex', KEYS[2], -1); \
local ttl; \
if last ~= false and last ~= ARGV[2] then \
    ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4]); \
else \
    ttl = redis.call('pttl', KEYS[1]); \
end; \
if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then \
    redis.call('rpush', KEYS[2], ARGV[2]); \
end; \
return ttl;";

/// Redisson's fair release (`RedissonFairLock.unlockInnerAsync`, without its unlock
/// latch): the last hold deletes the lock and tells the first queued waiter on its own
/// channel. 1 released, 0 holds left, nil not held.
/// KEYS: lock, queue, scores, channel prefix; ARGV: message, lease, owner, now (ms).
const REDISSON_FAIR_UNLOCK: &str = "\
while true do \
    local first = redis.call('lindex', KEYS[2], 0); \
    if first == false then break; end; \
    local timeout = tonumber(redis.call('zscore', KEYS[3], first)); \
    if timeout <= tonumber(ARGV[4]) then \
        redis.call('zrem', KEYS[3], first); \
        redis.call('lpop', KEYS[2]); \
    else break; end; \
end; \
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil; end; \
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); \
if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; end; \
redis.call('del', KEYS[1]); \
local next = redis.call('lindex', KEYS[2], 0); \
if next ~= false then redis.call('publish', KEYS[4] .. ':' .. next, ARGV[1]); end; \
return 1;";

/// A Redisson fair-lock waiter: subscribed to its own channel, it tries, and sleeps until
/// a message or the wait its try returned.
struct FairPeer {
    name: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    messages: redis::aio::PubSubStream,
    _subscription: redis::aio::PubSubSink,
}

impl FairPeer {
    const LEASE_MS: u64 = 30_000;

    async fn connect(server: &RedisServer, name: &str) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (mut subscription, messages) = client.get_async_pubsub().await.unwrap().split();
        let owner = format!("{}:1", lock_core::RequestId::random());
        let channel = format!("redisson_lock__channel:{{{name}}}:{owner}");
        subscription.subscribe(&channel).await.unwrap();
        Self {
            name: name.to_owned(),
            owner,
            conn,
            messages,
            _subscription: subscription,
        }
    }

    /// Its keys: the lock, the queue and the scores.
    fn keys(&self) -> [String; 3] {
        [
            self.name.clone(),
            format!("redisson_lock_queue:{{{}}}", self.name),
            format!("redisson_lock_timeout:{{{}}}", self.name),
        ]
    }

    async fn lock(&mut self) {
        let [lock, queue, scores] = self.keys();
        loop {
            let wait: Option<i64> = redis::Script::new(REDISSON_FAIR_LOCK)
                .key(&lock)
                .key(&queue)
                .key(&scores)
                .arg(Self::LEASE_MS)
                .arg(&self.owner)
                .arg(lock_redis_protocol::layout::REDISSON_WAIT_SLOT_MS)
                .arg(now_ms())
                .invoke_async(&mut self.conn)
                .await
                .unwrap();
            let Some(wait) = wait else {
                return;
            };
            until_told(&mut self.messages, wait).await;
        }
    }

    async fn unlock(&mut self) {
        let [lock, queue, scores] = self.keys();
        let released: Option<i64> = redis::Script::new(REDISSON_FAIR_UNLOCK)
            .key(&lock)
            .key(&queue)
            .key(&scores)
            .key(format!("redisson_lock__channel:{{{}}}", self.name))
            .arg(0)
            .arg(Self::LEASE_MS)
            .arg(&self.owner)
            .arg(now_ms())
            .invoke_async(&mut self.conn)
            .await
            .unwrap();
        assert_eq!(released, Some(1), "the Redisson peer held the lock");
    }
}

/// Redisson's unlock of `name` by `owner`, with its unlock latch, telling `channel`:
/// 1 released, 0 holds left, nil not held.
pub(super) async fn redisson_unlock(
    conn: &mut redis::aio::MultiplexedConnection,
    name: &str,
    channel: &str,
    owner: &str,
) -> Option<i64> {
    let latch = format!(
        "redisson_unlock_latch:{{{name}}}:{}",
        lock_core::RequestId::random()
    );
    redis::Script::new(REDISSON_UNLOCK)
        .key(name)
        .key(channel)
        .key(&latch)
        .arg(0)
        .arg(Peer::LEASE_MS)
        .arg(owner)
        .arg("publish")
        .arg(20_000)
        .invoke_async(conn)
        .await
        .unwrap()
}

/// The wall clock in milliseconds, as a Redisson client sends it.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// A peer waits as Redisson's clients do: until a message on the channel it listens on,
/// or `wait_ms` (what its acquire script answered), whichever comes first.
async fn until_told(messages: &mut redis::aio::PubSubStream, wait_ms: impl TryInto<u64>) {
    use futures_util::StreamExt as _;
    let wait = Duration::from_millis(wait_ms.try_into().unwrap_or(0).max(1));
    let _message = tokio::time::timeout(wait, messages.next()).await;
}
