//! A Redisson client process for the mixed-fleet scenarios: workers that share one
//! connection and one subscription, woken one per `0` as Redisson's `LockPubSub` wakes
//! them, each with Redisson's own lock and unlock scripts.

use std::sync::Arc;
use std::time::Duration;

use lock_testkit::RedisServer;

use super::contender::Contender;
use super::peers::{REDISSON_LOCK, redisson_unlock, try_take};

/// A Redisson client process: its workers share one connection and one subscription to
/// the lock's channel; each `0` heard there wakes one waiting worker, a `1` all of them,
/// and any other message none (Redisson's `LockPubSub`). Its workers wait as Redisson's
/// do: until woken, or the PTTL their attempt saw.
pub(super) struct RedissonProcess {
    name: String,
    conn: redis::aio::MultiplexedConnection,
    wake: Arc<tokio::sync::Notify>,
    _listener: tokio::task::JoinHandle<()>,
    _subscription: redis::aio::PubSubSink,
}

impl RedissonProcess {
    pub(super) async fn connect(server: &RedisServer, name: &str) -> Self {
        use futures_util::StreamExt as _;
        let client = redis::Client::open(server.url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        let (mut subscription, mut messages) = client.get_async_pubsub().await.unwrap().split();
        subscription
            .subscribe(format!("redisson_lock__channel:{{{name}}}"))
            .await
            .unwrap();
        let wake = Arc::new(tokio::sync::Notify::new());
        let listener = tokio::spawn({
            let wake = Arc::clone(&wake);
            async move {
                while let Some(message) = messages.next().await {
                    match message.get_payload::<String>().as_deref() {
                        Ok("0") => wake.notify_one(),
                        Ok("1") => wake.notify_waiters(),
                        _ => {}
                    }
                }
            }
        });
        Self {
            name: name.to_owned(),
            conn,
            wake,
            _listener: listener,
            _subscription: subscription,
        }
    }

    /// A worker of the process, with an owner of its own (a Redisson thread).
    pub(super) fn worker(&self) -> RedissonWorker {
        RedissonWorker {
            name: self.name.clone(),
            channel: format!("redisson_lock__channel:{{{}}}", self.name),
            owner: format!("{}:1", lock_core::RequestId::random()),
            conn: self.conn.clone(),
            wake: Arc::clone(&self.wake),
        }
    }
}

/// One worker of a [`RedissonProcess`], with Redisson's own lock and unlock scripts.
pub(super) struct RedissonWorker {
    name: String,
    channel: String,
    owner: String,
    conn: redis::aio::MultiplexedConnection,
    wake: Arc<tokio::sync::Notify>,
}

impl Contender for RedissonWorker {
    async fn take(&mut self) {
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let taken = try_take(&mut self.conn, REDISSON_LOCK, &self.name, &self.owner);
            let Some(ttl) = taken.await else {
                return;
            };
            let _woken = tokio::time::timeout(Duration::from_millis(ttl.max(1)), woken).await;
        }
    }

    async fn give_back(&mut self) {
        let released =
            redisson_unlock(&mut self.conn, &self.name, &self.channel, &self.owner).await;
        assert_eq!(released, Some(1), "the Redisson worker held the lock");
    }
}
