//! A peer that speaks Redisson's protocol the way the npm `node-redisson` client does: it
//! tries first, subscribes to the lock's channel only after the lock was busy, wakes on
//! any message or the PTTL it saw, and unsubscribes before it tries again. It is counted
//! among the channel's listeners only while it sleeps, so a release that comes between
//! its try and its subscription finds it nowhere.

use std::time::Duration;

use lock_testkit::RedisServer;

use super::contender::Contender;
use super::peers::{REDISSON_LOCK, redisson_unlock, try_take_for};

/// A worker with Redisson's lock and unlock scripts and a subscription of its own, held
/// only while it waits.
pub(super) struct LateListener {
    /// The lease of its holds, in milliseconds.
    lease_ms: u64,
    name: String,
    channel: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    subscription: redis::aio::PubSubSink,
    messages: redis::aio::PubSubStream,
}

impl LateListener {
    /// A late listener on `name` whose holds last `lease` (the PTTL a missed release
    /// costs the others).
    pub(super) async fn connect(server: &RedisServer, name: &str, lease: Duration) -> Self {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (subscription, messages) = client.get_async_pubsub().await.unwrap().split();
        Self {
            lease_ms: u64::try_from(lease.as_millis()).unwrap_or(u64::MAX),
            name: name.to_owned(),
            channel: format!("redisson_lock__channel:{{{name}}}"),
            owner: format!("{}:1", lock_core::RequestId::random()),
            conn,
            subscription,
            messages,
        }
    }
}

impl Contender for LateListener {
    async fn take(&mut self) {
        use futures_util::StreamExt as _;
        loop {
            let taken = try_take_for(
                &mut self.conn,
                REDISSON_LOCK,
                &self.name,
                &self.owner,
                self.lease_ms,
            );
            let Some(ttl) = taken.await else {
                return;
            };
            self.subscription.subscribe(&self.channel).await.unwrap();
            let wait = Duration::from_millis(ttl.max(1));
            let _message = tokio::time::timeout(wait, self.messages.next()).await;
            self.subscription.unsubscribe(&self.channel).await.unwrap();
        }
    }

    async fn give_back(&mut self) {
        let released =
            redisson_unlock(&mut self.conn, &self.name, &self.channel, &self.owner).await;
        assert_eq!(released, Some(1), "the late listener held the lock");
    }
}
