//! Sharded release notifications on a Redis 7 cluster (`SSUBSCRIBE`), as Redisson uses
//! there: a sharded message reaches only the shard that owns its channel's slot, so each
//! channel is subscribed on that shard's master. A dedicated RESP3 cluster connection
//! routes every `SSUBSCRIBE` by slot and subscribes again by itself after a reconnect or
//! a slot migration; its pushes carry the messages.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::Error;
use lock_redis_protocol::NotificationSink;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use crate::cluster::MakeBuilder;
use crate::notifications::{settle, with_backoff};

/// The subscription side of a cluster in sharded mode.
pub(crate) struct ShardedLink {
    /// The live connection, `None` while a new one is being made (its predecessor died
    /// with the runtime it was made in).
    connection: watch::Sender<Option<ClusterConnection>>,
    builder: MakeBuilder,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl fmt::Debug for ShardedLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedLink")
            .field("connected", &self.connection.borrow().is_some())
            .finish_non_exhaustive()
    }
}

/// Where a sharded connection's pushes arrive.
pub(crate) type Pushes = mpsc::UnboundedReceiver<PushInfo>;

impl ShardedLink {
    /// Connects a RESP3 cluster connection whose pushes go to the returned receiver.
    pub(crate) async fn open(
        builder: MakeBuilder,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<(Arc<Self>, Pushes), Error> {
        let link = Arc::new(Self {
            connection: watch::Sender::new(None),
            builder,
            connect_timeout,
            response_timeout,
        });
        let pushes = link.connect().await?;
        Ok((link, pushes))
    }

    /// Makes a new connection, and hands it out from now on.
    async fn connect(&self) -> Result<Pushes, Error> {
        let (pushes, received) = mpsc::unbounded_channel();
        let client = (self.builder)()
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(pushes)
            .build()
            .map_err(|err| Error::invalid_config("invalid cluster settings", Some(err.into())))?;
        let connection =
            match tokio::time::timeout(self.connect_timeout, client.get_async_connection()).await {
                Ok(Ok(connection)) => connection,
                Ok(Err(err)) => return Err(crate::error::connection("connecting", err)),
                Err(elapsed) => return Err(Error::connection("connecting", elapsed)),
            };
        self.connection.send_replace(Some(connection));
        Ok(received)
    }

    /// The live connection, waiting up to the connect timeout while a new one is made.
    async fn live(&self) -> Result<ClusterConnection, Error> {
        let mut connection = self.connection.subscribe();
        let live = connection.wait_for(Option::is_some);
        match tokio::time::timeout(self.connect_timeout, live).await {
            Ok(Ok(connection)) => connection
                .clone()
                .ok_or_else(|| Error::protocol("unreachable")),
            Ok(Err(_)) => Err(Error::protocol("the subscription connection was shut down")),
            Err(elapsed) => Err(Error::connection("subscribing", elapsed)),
        }
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let mut connection = self.live().await?;
        let outcome =
            tokio::time::timeout(self.response_timeout, connection.ssubscribe(channel)).await;
        settle("subscribing", "SSUBSCRIBE", channel, outcome)
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let mut connection = self.live().await?;
        let outcome =
            tokio::time::timeout(self.response_timeout, connection.sunsubscribe(channel)).await;
        settle("unsubscribing", "SUNSUBSCRIBE", channel, outcome)
    }

    /// Stops handing out the current connection (it died with its runtime), and makes
    /// another; `None` once the backend is gone.
    async fn reopen(&self, sink: &NotificationSink) -> Option<Pushes> {
        self.forget_connection(sink);
        let pushes = with_backoff(sink, || self.connect()).await?;
        // Every channel is subscribed again on the new connection, and every waiter
        // re-checks.
        sink.reconnected();
        Some(pushes)
    }

    /// Stops handing out the current connection: subscriptions wait for the next one.
    pub(crate) fn forget_connection(&self, sink: &NotificationSink) {
        if self.connection.send_replace(None).is_some() {
            sink.disconnected();
        }
    }
}

/// Reads the cluster connection's pushes into `sink` until the backend is gone. Without
/// `pushes` (a reader started again after its runtime shut down) it connects first.
pub(crate) async fn pump(link: Arc<ShardedLink>, pushes: Option<Pushes>, sink: NotificationSink) {
    let mut pushes = match pushes {
        Some(pushes) => pushes,
        None => match link.reopen(&sink).await {
            Some(pushes) => pushes,
            None => return,
        },
    };
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
