//! The subscription connection: one dedicated pub/sub connection per client that carries
//! release notifications, pings itself to notice half-open sockets, and reconnects (to
//! any known node) when it breaks, telling lock-core so that channels are subscribed again
//! and waiters re-check.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use lock_core::{Error, Pauses};
use lock_redis_protocol::NotificationSink;
use redis::aio::{PubSubSink, PubSubStream};

use crate::sentinel::Failover;
use tokio::sync::watch;

/// Shortest and longest pause between reconnect attempts.
const RECONNECT_BACKOFF: (Duration, Duration) = (Duration::from_millis(20), Duration::from_secs(1));

/// The shared state of the subscription connection.
pub(crate) struct Link {
    /// Nodes to connect to; in a cluster any node will do, because `PUBLISH` reaches
    /// every node of the cluster.
    nodes: Vec<redis::Client>,
    /// Behind Sentinel: the master is asked for anew on every connect.
    failover: Option<Arc<Failover>>,
    /// The node to try first on the next connect, rotated on failure.
    next: AtomicUsize,
    /// The live connection's command half, `None` while reconnecting.
    sink: watch::Sender<Option<PubSubSink>>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Link")
            .field("nodes", &self.nodes.len())
            .field("connected", &self.sink.borrow().is_some())
            .finish_non_exhaustive()
    }
}

impl Link {
    /// Connects to one of `nodes`, failing within `connect_timeout`.
    pub(crate) async fn open(
        nodes: Vec<redis::Client>,
        failover: Option<Arc<Failover>>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<(Arc<Self>, PubSubStream), Error> {
        let link = Arc::new(Self {
            nodes,
            failover,
            next: AtomicUsize::new(0),
            sink: watch::Sender::new(None),
            connect_timeout,
            response_timeout,
        });
        let (sink, stream) = link.connect_any().await?;
        link.sink.send_replace(Some(sink));
        Ok((link, stream))
    }

    /// One attempt on every node in turn, starting with the last one that worked.
    async fn connect_any(&self) -> Result<(PubSubSink, PubSubStream), Error> {
        if let Some(failover) = &self.failover {
            let master = failover.resolve().await?;
            return match tokio::time::timeout(self.connect_timeout, master.get_async_pubsub()).await
            {
                Ok(Ok(pubsub)) => Ok(pubsub.split()),
                Ok(Err(err)) => Err(crate::error::connection("connecting", err)),
                Err(elapsed) => Err(Error::connection("connecting", elapsed)),
            };
        }
        let mut last = None;
        for _ in 0..self.nodes.len() {
            let index = self.next.load(Ordering::Relaxed) % self.nodes.len();
            let attempt =
                tokio::time::timeout(self.connect_timeout, self.nodes[index].get_async_pubsub())
                    .await;
            match attempt {
                Ok(Ok(pubsub)) => return Ok(pubsub.split()),
                Ok(Err(err)) => last = Some(crate::error::connection("connecting", err)),
                Err(elapsed) => last = Some(Error::connection("connecting", elapsed)),
            }
            self.next.store(index + 1, Ordering::Relaxed);
        }
        Err(last.unwrap_or_else(|| Error::invalid_config("no Redis node to connect to", None)))
    }

    /// The live connection, waiting up to the connect timeout while it reconnects.
    async fn live_sink(&self) -> Result<PubSubSink, Error> {
        let mut sink = self.sink.subscribe();
        match tokio::time::timeout(self.connect_timeout, sink.wait_for(Option::is_some)).await {
            Ok(Ok(sink)) => sink.clone().ok_or_else(|| Error::protocol("unreachable")),
            Ok(Err(_)) => Err(Error::protocol("the subscription connection was shut down")),
            Err(elapsed) => Err(Error::connection("subscribing", elapsed)),
        }
    }

    pub(crate) async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let mut sink = self.live_sink().await?;
        let outcome = tokio::time::timeout(self.response_timeout, sink.subscribe(channel)).await;
        settle("subscribing", "SUBSCRIBE", channel, outcome)
    }

    pub(crate) async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let mut sink = self.live_sink().await?;
        let outcome = tokio::time::timeout(self.response_timeout, sink.unsubscribe(channel)).await;
        settle("unsubscribing", "UNSUBSCRIBE", channel, outcome)
    }
}

/// A server refusal is a backend error. A command the server did not confirm (the
/// connection broke, or no answer came in time) is a connection error, which lock-core
/// retries: an unconfirmed subscription must never pass for one.
pub(crate) fn settle(
    during: &'static str,
    command: &str,
    channel: &str,
    outcome: Result<redis::RedisResult<()>, tokio::time::error::Elapsed>,
) -> Result<(), Error> {
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) if err.code().is_some() => Err(Error::backend(
            during,
            lock_redis_protocol::Refused::new(format!("{command} {channel}"), err),
        )),
        Ok(Err(err)) => Err(Error::connection(during, err)),
        Err(elapsed) => Err(Error::connection(during, elapsed)),
    }
}

/// Reads notifications into `sink` until the backend is gone, reconnecting whenever the
/// connection breaks or stops answering pings. Without a `stream` (a reader started
/// again after its runtime shut down) it connects first.
pub(crate) async fn pump(
    link: Arc<Link>,
    stream: Option<PubSubStream>,
    sink: NotificationSink,
    ping_interval: Duration,
) {
    let mut stream = match stream {
        Some(stream) => stream,
        None => match reopen(&link, &sink).await {
            Some(stream) => stream,
            None => return,
        },
    };
    let mut ping =
        tokio::time::interval_at(tokio::time::Instant::now() + ping_interval, ping_interval);
    ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let broken = tokio::select! {
            biased;
            () = sink.closed() => return,
            message = stream.next() => match message {
                Some(message) => {
                    sink.message(message.get_channel_name(), message.get_payload_bytes());
                    false
                }
                None => true,
            },
            _ = ping.tick() => !link.answers_ping().await,
        };
        if broken {
            match reopen(&link, &sink).await {
                Some(new_stream) => stream = new_stream,
                None => return,
            }
        }
        if sink.is_closed() {
            return;
        }
    }
}

/// Drops the current connection and opens another; `None` once the backend is gone.
async fn reopen(link: &Link, sink: &NotificationSink) -> Option<PubSubStream> {
    link.forget_connection(sink);
    let (new_sink, stream) = with_backoff(sink, || link.connect_any()).await?;
    link.sink.send_replace(Some(new_sink));
    // Messages may have been missed while disconnected: lock-core resubscribes every
    // channel, then wakes every waiter to re-check.
    sink.reconnected();
    Some(stream)
}

impl Link {
    /// Stops handing out the current connection, which broke (or died with its runtime):
    /// subscriptions wait for the next one.
    pub(crate) fn forget_connection(&self, sink: &NotificationSink) {
        if self.sink.send_replace(None).is_some() {
            sink.disconnected();
        }
    }

    async fn answers_ping(&self) -> bool {
        let Some(mut sink) = self.sink.borrow().clone() else {
            return false;
        };
        let pong = tokio::time::timeout(self.response_timeout, sink.ping::<redis::Value>()).await;
        matches!(pong, Ok(Ok(_)))
    }
}

/// Tries `attempt` until it succeeds, pausing longer after each failure (capped);
/// `None` once the backend went meanwhile.
pub(crate) async fn with_backoff<T, F, A>(sink: &NotificationSink, mut attempt: A) -> Option<T>
where
    A: FnMut() -> F,
    F: std::future::Future<Output = Result<T, Error>>,
{
    let (first, longest) = RECONNECT_BACKOFF;
    let mut pauses = Pauses::doubling(first, longest);
    loop {
        tokio::select! {
            biased;
            () = sink.closed() => return None,
            outcome = attempt() => {
                if let Ok(connected) = outcome {
                    return Some(connected);
                }
            }
        }
        tokio::select! {
            biased;
            () = sink.closed() => return None,
            () = tokio::time::sleep(pauses.next().unwrap_or(longest)) => {}
        }
    }
}
