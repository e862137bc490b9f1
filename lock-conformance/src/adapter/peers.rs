//! Peers of another library for the mixed-fleet scenarios (see `fleets`): Redisson's own
//! lock, unlock, write and fair-lock scripts, a peer that follows only Redisson's layout,
//! and the waiting Redisson's clients do (subscribed, until a message or the wait their
//! script answered).

use std::time::Duration;

use lock_testkit::RedisServer;

/// How a peer takes and gives back the lock.
#[derive(Debug, Clone, Copy)]
pub(super) enum PeerStyle {
    /// Redisson's own scripts (`RedissonLock`), with its unlock latch.
    Redisson,
    /// Redisson's layout only: the hash under the name, set when it does not exist, and
    /// deleted then announced with `0`, in commands of its own.
    LayoutOnly,
    /// Redisson's write lock (`RedissonWriteLock`): the field `<owner>:write` of a
    /// read-write lock, on the read-write lock's channel.
    RedissonWriter,
}

pub(crate) use lock_testkit::redisson::LOCK as REDISSON_LOCK;
use lock_testkit::redisson::UNLOCK as REDISSON_UNLOCK;

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

    pub(super) async fn connect(server: &RedisServer, name: &str, style: PeerStyle) -> Self {
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

    pub(super) async fn lock(&mut self) {
        let script = match self.style {
            PeerStyle::Redisson => REDISSON_LOCK,
            PeerStyle::LayoutOnly => LAYOUT_LOCK,
            PeerStyle::RedissonWriter => REDISSON_WRITE_LOCK,
        };
        loop {
            let Some(ttl) = try_take(&mut self.conn, script, &self.name, &self.owner).await else {
                return;
            };
            // A message (ours `0`, or another peer's) or the PTTL, whichever first.
            until_told(&mut self.messages, ttl).await;
        }
    }

    pub(super) async fn unlock(&mut self) {
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
pub(super) struct FairPeer {
    name: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    messages: redis::aio::PubSubStream,
    _subscription: redis::aio::PubSubSink,
}

impl FairPeer {
    const LEASE_MS: u64 = 30_000;

    pub(super) async fn connect(server: &RedisServer, name: &str) -> Self {
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

    pub(super) async fn lock(&mut self) {
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

    pub(super) async fn unlock(&mut self) {
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

/// One attempt of a take script (`REDISSON_LOCK` or one of its kind) on `name` for
/// `owner` with a peer's lease: `None` when taken, else the lock's PTTL (ms).
pub(super) async fn try_take(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &str,
    name: &str,
    owner: &str,
) -> Option<u64> {
    try_take_for(conn, script, name, owner, Peer::LEASE_MS).await
}

/// [`try_take`] with a lease of `lease_ms`.
pub(super) async fn try_take_for(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &str,
    name: &str,
    owner: &str,
    lease_ms: u64,
) -> Option<u64> {
    redis::Script::new(script)
        .key(name)
        .arg(lease_ms)
        .arg(owner)
        .invoke_async(conn)
        .await
        .unwrap()
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
