//! Redisson's `RCountDownLatch` over the lock protocol.

use async_trait::async_trait;
use lock_core::backend::{LatchBackend, LatchRequest};
use lock_core::notify::Listener;
use lock_core::{Error, LockName};

use super::{PublishMode, RedisBackend, millis, unexpected};
use crate::transport::Reply;
use crate::{calls, layout};

/// Redisson's `RCountDownLatch`: the count in the string `name`, messages on
/// `redisson_countdownlatch__channel__{name}` (`0` opened, `1` closed again).
#[async_trait]
impl LatchBackend for RedisBackend {
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error> {
        let count = count.to_string();
        let [channel, java] = self.latch_channels(name);
        let marker = layout::kind_marker_key(name);
        let call = calls::LatchSet {
            latch: layout::lock_key(name),
            marker: &marker,
            count: &count,
            channel: &channel,
            publish: self.options.publish.command(),
            java_channel: &java,
        };
        match self.run("setting a latch", &call).await? {
            Reply::Int(set) => Ok(set == 1),
            other => Err(unexpected("latch set", &other)),
        }
    }

    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error> {
        let answer = layout::count_down_answer_key(name, request.id);
        let [channel, java] = self.latch_channels(name);
        let answer_ms = millis(request.retry_window).to_string();
        let marker = layout::kind_marker_key(name);
        let call = calls::LatchCountDown {
            latch: layout::lock_key(name),
            answer: &answer,
            marker: &marker,
            channel: &channel,
            publish: self.options.publish.command(),
            answer_ms: &answer_ms,
            java_channel: &java,
        };
        match self.run("counting a latch down", &call).await? {
            Reply::Int(left) => Ok(u64::try_from(left).unwrap_or(0)),
            other => Err(unexpected("latch count-down", &other)),
        }
    }

    async fn count(&self, name: &LockName) -> Result<u64, Error> {
        let marker = layout::kind_marker_key(name);
        let call = calls::LatchCount {
            latch: layout::lock_key(name),
            marker: &marker,
        };
        match self.run("reading a latch", &call).await? {
            Reply::Int(count) => Ok(u64::try_from(count).unwrap_or(0)),
            other => Err(unexpected("latch count", &other)),
        }
    }

    async fn delete(&self, name: &LockName) -> Result<bool, Error> {
        let [channel, java] = self.latch_channels(name);
        let marker = layout::kind_marker_key(name);
        let call = calls::LatchDelete {
            latch: layout::lock_key(name),
            marker: &marker,
            channel: &channel,
            publish: self.options.publish.command(),
            java_channel: &java,
        };
        match self.run("deleting a latch", &call).await? {
            Reply::Int(deleted) => Ok(deleted == 1),
            other => Err(unexpected("latch delete", &other)),
        }
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.listen_on(&layout::latch_listen_channel(name)).await
    }
}

impl RedisBackend {
    /// Where a latch's messages go: the channel our waiters listen on, and Java's
    /// channel when it is another one that a publish next to the key still reaches
    /// (classic pub/sub carries every channel everywhere; sharded pub/sub only the
    /// key's slot, where Java's channel for a hash-tagged name is not), else empty.
    fn latch_channels(&self, name: &LockName) -> [String; 2] {
        let ours = layout::latch_listen_channel(name);
        let java = layout::latch_channel(name);
        let sharded = self.options.publish.command() == PublishMode::Sharded.command();
        if java == ours || sharded {
            [ours, String::new()]
        } else {
            [ours, java]
        }
    }
}
