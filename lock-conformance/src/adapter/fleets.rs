//! Mixed fleets on a fair lock and on a read-write lock's write side: our clients, which
//! hand the lock over on the server, beside a peer that runs Redisson's own scripts
//! (`RedissonFairLock`, `RedissonWriteLock`).

use std::sync::Arc;
use std::time::Duration;

use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::handover::Section;
use super::{AdapterConnect, ConnectSpec, locks};

/// Our clients and a Redisson fair-lock peer take turns on one fair lock, each holding it
/// a few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: a release of ours tells a Redisson head on its channel (it has
/// no entry to be handed the lock by), and a Redisson release tells our head on its own
/// (a missed wake-up would cost the peer the time it was told to wait, and one of ours a
/// third of its place).
pub async fn mixed_fleets_share_a_fair_lock(connect: &AdapterConnect) {
    const ROUNDS: usize = 15;
    let server = RedisServer::start().await;
    let name = "mixed-fleet:f";
    let section = Arc::new(Section::default());
    let mut turns = Vec::new();
    for _ in 0..2 {
        let ours = locks(connect, ConnectSpec::new(server.url()))
            .await
            .unwrap();
        let (lock, section) = (ours.fair_mutex(name), Arc::clone(&section));
        turns.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let guard = lock.lock().await.unwrap();
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(ours);
            longest
        }));
    }
    let mut peer = FairPeer::connect(&server, name).await;
    let peer_section = Arc::clone(&section);
    turns.push(tokio::spawn(async move {
        let mut longest = Duration::ZERO;
        for _ in 0..ROUNDS {
            let asked = Instant::now();
            peer.lock().await;
            longest = longest.max(asked.elapsed());
            peer_section.enter_and_leave().await;
            peer.unlock().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        longest
    }));
    for (contender, turn) in ["ours", "ours", "Redisson"].iter().zip(turns) {
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

/// Our writers and a Redisson writer take turns on one read-write lock, each holding it a
/// few milliseconds at a time. Nobody holds it beside anybody else, and nobody waits a
/// second for one turn: while the Redisson writer listens on the lock's channel a release
/// of ours hands nothing over and tells everybody (`1`), and a Redisson release tells
/// our writers on the same channel.
pub async fn mixed_fleets_share_a_write_lock(connect: &AdapterConnect) {
    const ROUNDS: usize = 15;
    let server = RedisServer::start().await;
    let name = "mixed-fleet:w";
    let section = Arc::new(Section::default());
    let mut turns = Vec::new();
    for _ in 0..2 {
        let ours = locks(connect, ConnectSpec::new(server.url()))
            .await
            .unwrap();
        let (lock, section) = (ours.rw_lock(name).writer(), Arc::clone(&section));
        turns.push(tokio::spawn(async move {
            let mut longest = Duration::ZERO;
            for _ in 0..ROUNDS {
                let asked = Instant::now();
                let guard = lock.lock().await.unwrap();
                longest = longest.max(asked.elapsed());
                section.enter_and_leave().await;
                guard.unlock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            drop(ours);
            longest
        }));
    }
    let mut peer = WritePeer::connect(&server, name).await;
    let peer_section = Arc::clone(&section);
    turns.push(tokio::spawn(async move {
        let mut longest = Duration::ZERO;
        for _ in 0..ROUNDS {
            let asked = Instant::now();
            peer.lock().await;
            longest = longest.max(asked.elapsed());
            peer_section.enter_and_leave().await;
            peer.unlock().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        longest
    }));
    for (contender, turn) in ["ours", "ours", "Redisson"].iter().zip(turns) {
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

/// A Redisson writer: subscribed to the lock's channel, it tries, and sleeps until a
/// message or the PTTL it saw.
struct WritePeer {
    name: String,
    channel: String,
    field: String,
    conn: redis::aio::MultiplexedConnection,
    messages: redis::aio::PubSubStream,
    _subscription: redis::aio::PubSubSink,
}

impl WritePeer {
    const LEASE_MS: u64 = 30_000;

    async fn connect(server: &RedisServer, name: &str) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (mut subscription, messages) = client.get_async_pubsub().await.unwrap().split();
        let channel = format!("redisson_rwlock:{{{name}}}");
        subscription.subscribe(&channel).await.unwrap();
        Self {
            name: name.to_owned(),
            channel,
            field: format!("{}:1:write", lock_core::RequestId::random()),
            conn,
            messages,
            _subscription: subscription,
        }
    }

    async fn lock(&mut self) {
        use futures_util::StreamExt as _;
        loop {
            let ttl: Option<i64> = redis::Script::new(REDISSON_WRITE_LOCK)
                .key(&self.name)
                .arg(Self::LEASE_MS)
                .arg(&self.field)
                .invoke_async(&mut self.conn)
                .await
                .unwrap();
            let Some(ttl) = ttl else {
                return;
            };
            let wait = Duration::from_millis(u64::try_from(ttl).unwrap_or(0).max(1));
            let _message = tokio::time::timeout(wait, self.messages.next()).await;
        }
    }

    async fn unlock(&mut self) {
        let released: Option<i64> = redis::Script::new(REDISSON_WRITE_UNLOCK)
            .key(&self.name)
            .key(&self.channel)
            .arg(1)
            .arg(Self::LEASE_MS)
            .arg(&self.field)
            .invoke_async(&mut self.conn)
            .await
            .unwrap();
        assert_eq!(released, Some(1), "the Redisson writer held the lock");
    }
}

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
        use futures_util::StreamExt as _;
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
            let wait = Duration::from_millis(u64::try_from(wait).unwrap_or(0).max(1));
            let _message = tokio::time::timeout(wait, self.messages.next()).await;
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

/// The wall clock in milliseconds, as a Redisson client sends it.
fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}
