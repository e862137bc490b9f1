//! Sharded release notifications on a Redis 7 cluster (`SSUBSCRIBE`), as Redisson uses
//! there: a sharded message reaches only the shard that owns its channel's slot, so each
//! channel is subscribed on that shard's master. A dedicated RESP3 cluster connection
//! routes every `SSUBSCRIBE` by slot and subscribes again by itself after a reconnect or
//! a slot migration; its pushes carry the messages.

use std::fmt;
use std::time::Duration;

use lock_core::Error;
use lock_redis_protocol::NotificationSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use crate::notifications::settle;

/// The subscription side of a cluster in sharded mode.
pub(crate) struct ShardedLink {
    connection: ClusterConnection,
    response_timeout: Duration,
}

impl fmt::Debug for ShardedLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedLink").finish_non_exhaustive()
    }
}

impl ShardedLink {
    /// Connects a RESP3 cluster connection whose pushes go to the returned receiver.
    pub(crate) async fn open(
        builder: redis::cluster::ClusterClientBuilder,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<(Self, mpsc::UnboundedReceiver<PushInfo>), Error> {
        let (pushes, received) = mpsc::unbounded_channel();
        let client = builder
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
            .map_err(|err| Error::invalid_config("invalid cluster settings", Some(err.into())))?;
        let connection =
            match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(err)) => return Err(crate::error::connection("connecting", err)),
                Err(elapsed) => return Err(Error::connection("connecting", elapsed)),
            };
        let link = Self {
            connection,
            response_timeout,
        };
        Ok((link, received))
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let mut connection = self.connection.clone();
        let outcome =
            tokio::time::timeout(self.response_timeout, connection.ssubscribe(channel)).await;
        settle("subscribing", "SSUBSCRIBE", channel, outcome)
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let mut connection = self.connection.clone();
        let outcome =
            tokio::time::timeout(self.response_timeout, connection.sunsubscribe(channel)).await;
        settle("unsubscribing", "SUNSUBSCRIBE", channel, outcome)
    }
}

/// Reads the cluster connection's pushes into `sink` until the backend is gone.
pub(crate) async fn pump(mut pushes: mpsc::UnboundedReceiver<PushInfo>, sink: NotificationSink) {
    loop {
        let push = tokio::select! {
            biased;
            () = sink.closed() => return,
            push = pushes.recv() => match push {
                Some(push) => push,
                None => return,
            },
        };
        match push.kind {
            PushKind::SMessage => {
                if let [Value::BulkString(channel), payload, ..] = push.data.as_slice() {
                    sink.message(&String::from_utf8_lossy(channel), &bytes(payload));
                }
            }
            // The driver reconnects that node and subscribes its channels again; messages
            // sent meanwhile are lost, so every channel is confirmed again and every
            // waiter re-checks.
            PushKind::Disconnection => {
                sink.disconnected();
                sink.reconnected();
            }
            _ => {}
        }
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::BulkString(bytes) => bytes.clone(),
        Value::SimpleString(text) => text.clone().into_bytes(),
        Value::Int(n) => n.to_string().into_bytes(),
        _ => Vec::new(),
    }
}
