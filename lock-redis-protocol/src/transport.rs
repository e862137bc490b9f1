//! What a Redis adapter provides: running scripts and (un)subscribing channels.

use std::fmt;

use async_trait::async_trait;

use crate::script::{Script, ScriptCall};
use lock_core::BoxError;
use lock_core::notify::{Handed, PubSub, Subscriptions, Wake};

/// A reply from Redis, in the few shapes the scripts return.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Nil (RESP2 null bulk or array, RESP3 null).
    Nil,
    /// An integer (RESP3 booleans map to 0 and 1).
    Int(i64),
    /// A bulk string.
    Bytes(Vec<u8>),
    /// A simple status string.
    Status(String),
    /// An array, set or map flattened to its elements.
    Array(Vec<Reply>),
}

/// An error reply from the server: `CODE message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerError {
    /// The error code, such as `WRONGTYPE`, `NOPERM` or `ERR`.
    pub code: String,
    /// The rest of the message.
    pub message: String,
}

impl ServerError {
    /// Builds a server error from its code and message.
    #[must_use]
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.message)
    }
}

impl std::error::Error for ServerError {}

/// A command the server refused, named: drivers' messages do not always say which
/// command or channel it was. Adapters put it in an [`Error::Backend`](lock_core::Error).
#[derive(Debug)]
pub struct Refused {
    what: String,
    source: BoxError,
}

impl Refused {
    /// `what` names the command (and its channel or key), `source` is the driver's error.
    pub fn new(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self {
            what: what.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server refused `{}`", self.what)
    }
}

impl std::error::Error for Refused {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// Why a script call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TransportError {
    /// The server answered with an error.
    Server(ServerError),
    /// The request did not complete (refused, closed, timed out).
    Io(BoxError),
}

impl TransportError {
    /// Runs `call`; taking longer than `limit` (if any) is an [`TransportError::Io`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe exactly when `call` is.
    pub async fn within<T>(
        limit: Option<std::time::Duration>,
        call: impl Future<Output = Result<T, Self>>,
    ) -> Result<T, Self> {
        match limit {
            Some(limit) => tokio::time::timeout(limit, call)
                .await
                .unwrap_or_else(|elapsed| Err(Self::Io(Box::new(elapsed)))),
            None => call.await,
        }
    }

    /// The adapter has no prepared form of `script`.
    #[must_use]
    pub fn unknown_script(script: &Script) -> Self {
        Self::Io(format!("unknown script {}", script.name()).into())
    }
}

/// The deployment a transport talks to; it decides how renewals are batched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Topology {
    /// One master (standalone, or the master behind Sentinel): any keys in one script.
    Single,
    /// Redis Cluster: one script's keys must share a slot.
    Cluster,
}

/// `WAIT replicas timeout` after a script: how many replicas must acknowledge its writes,
/// and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaWait {
    /// Replicas that must acknowledge.
    pub replicas: u32,
    /// The longest wait for them.
    pub timeout: std::time::Duration,
}

/// A Redis connection as the lock protocol needs it. Adapters implement this and nothing
/// else: the scripts, their arguments, the `NOSCRIPT` reload, timeouts and reply decoding
/// are the protocol's.
#[async_trait]
pub trait Transport: PubSub {
    /// Sends `call` once (`EVALSHA` or `EVAL`, as [`ScriptCall::command`] says), routed in
    /// a cluster by `keys[0]`. A call whose reply was lost must not be sent again here:
    /// the protocol decides about retries. The protocol bounds the call by
    /// [`Transport::response_timeout`], unless [`Transport::bounds_its_calls`].
    async fn send(&self, call: ScriptCall<'_>) -> Result<Reply, TransportError>;

    /// Sends `call` and then `WAIT` back to back on one connection (so that `WAIT` covers
    /// the script's writes), and returns both replies. Never called on a cluster.
    /// Adapters that cannot do this keep the default, which refuses.
    async fn send_then_wait(
        &self,
        call: ScriptCall<'_>,
        wait: ReplicaWait,
    ) -> Result<(Reply, Reply), TransportError> {
        let _ = (call, wait);
        Err(TransportError::Io(
            "replica acknowledgement is not supported by this adapter".into(),
        ))
    }

    /// Loads the function library `source` (`FUNCTION LOAD REPLACE`) on every primary of
    /// the deployment, where calls by [`ScriptForm::Function`](crate::script::ScriptForm)
    /// found it missing. Adapters that cannot keep the default, which refuses: the
    /// protocol then falls back to scripts, or says what to run where it may not.
    ///
    /// # Cancel safety
    ///
    /// Must be cancel-safe: loading the same library again is harmless, and the protocol
    /// bounds the call by the response timeout.
    async fn load_library(&self, source: &str) -> Result<(), TransportError> {
        let _ = source;
        Err(TransportError::Io(
            "loading the function library is not supported by this adapter".into(),
        ))
    }

    /// The kind of deployment.
    fn topology(&self) -> Topology;

    /// Whether calls reach the server in the order [`Transport::send`] was first polled
    /// (one multiplexed connection per server, written in order). It only speeds up a
    /// client's hand-off to its own next waiter
    /// ([`Capabilities::ordered_requests`](lock_core::Capabilities::ordered_requests)), so
    /// the default, `false`, is always safe.
    fn keeps_order(&self) -> bool {
        false
    }

    /// The longest wait for one reply.
    fn response_timeout(&self) -> std::time::Duration;

    /// Whether every [`Transport::send`] ends within [`Transport::response_timeout`] of
    /// its own accord, a reconnection included: the protocol then sets no timer of its own
    /// around each call (one per call is a measurable share of a lock's client CPU). The
    /// default, `false`, is always safe.
    fn bounds_its_calls(&self) -> bool {
        false
    }
}

/// Where an adapter delivers what its subscription connection receives.
///
/// Once the backend is gone, [`NotificationSink::is_closed`] turns true and
/// [`NotificationSink::closed`] resolves: the adapter's reader task should then end (the
/// sink and the transport keep each other alive otherwise, through the registry).
#[derive(Debug, Clone)]
pub struct NotificationSink {
    alive: tokio::sync::watch::Receiver<()>,
    registry: Subscriptions,
    /// The payload of a release that wakes this client alone.
    wake_id: std::sync::Arc<str>,
    /// This client's own channel, on which such a release may come instead.
    own_channel: std::sync::Arc<str>,
    /// Whether a waiter may hold a lock handed over to it from the message on. Not
    /// where acquisitions wait for replicas (`WAIT`): the hand-over was not, so the
    /// waiter is only woken, and its next attempt (which waits for them) takes it up.
    holds_from_the_message: bool,
}

impl NotificationSink {
    pub(crate) fn new(
        registry: Subscriptions,
        alive: &std::sync::Arc<tokio::sync::watch::Sender<()>>,
        (wake_id, own_channel): (std::sync::Arc<str>, std::sync::Arc<str>),
        holds_from_the_message: bool,
    ) -> Self {
        Self {
            alive: alive.subscribe(),
            registry,
            wake_id,
            own_channel,
            holds_from_the_message,
        }
    }

    /// Tells the waiter of `lock_channel` that the lock was handed over to `handed`.
    fn handed(&self, lock_channel: &str, handed: Handed) {
        let wake = woken_alone(lock_channel);
        if self.holds_from_the_message {
            self.registry.deliver_handed(lock_channel, handed, wake);
        } else {
            self.registry.deliver(lock_channel, wake);
        }
    }

    /// Resolves once the backend this sink feeds is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches.
    pub async fn closed(&self) {
        let mut alive = self.alive.clone();
        // Nothing is ever sent: `changed` returns only when the sender is dropped.
        while alive.changed().await.is_ok() {}
    }

    /// A message arrived on `channel`.
    pub fn message(&self, channel: &str, payload: &[u8]) {
        // A release that wakes this client alone may come on its own channel, with the
        // lock's channel as the payload, after the hand-over it made to this client.
        if channel == &*self.own_channel {
            let Ok(text) = std::str::from_utf8(payload) else {
                return;
            };
            match text
                .strip_prefix(Handed::PREFIX)
                .and_then(Handed::from_message)
            {
                Some((handed, lock_channel)) => self.handed(lock_channel, handed),
                None => self.registry.deliver(text, woken_alone(text)),
            }
            return;
        }
        // A fair lock's release that hands the lock over tells the one waiter listening on
        // the channel (its owner's own) 'handed:<request id>:<token>:<attempt>'.
        if let Some(told) = payload.strip_prefix(Handed::PREFIX.as_bytes()) {
            match std::str::from_utf8(told)
                .ok()
                .and_then(Handed::from_message)
            {
                Some((handed, "")) => self.handed(channel, handed),
                _ => self.registry.deliver(channel, Wake::One),
            }
            return;
        }
        // Lock releases publish `0`, or the wake id of the one client they wake: one
        // waiter can win, so one is woken, and a release meant for another client wakes
        // nobody here. A latch's `0` opens it for every waiter, and anything else (a
        // Redisson peer's other primitives) wakes everyone to re-check.
        let wake = if payload.starts_with(crate::layout::WAKE_ID_PREFIX.as_bytes()) {
            let Some(rest) = payload.strip_prefix(self.wake_id.as_bytes()) else {
                return;
            };
            if let Some(told) = rest.strip_prefix(b":") {
                // Handed over: '<wake id>:<request id>:<token>:<attempt>'.
                let parsed = std::str::from_utf8(told)
                    .ok()
                    .and_then(Handed::from_message);
                if let Some((handed, "")) = parsed {
                    self.handed(channel, handed);
                }
                return;
            }
            if !rest.is_empty() {
                return;
            }
            woken_alone(channel)
        } else if payload == b"0" && !channel.starts_with(crate::layout::LATCH_CHANNEL_PREFIX) {
            Wake::One
        } else {
            Wake::All
        };
        self.registry.deliver(channel, wake);
    }

    /// The subscription connection was re-established: resubscribe and wake every waiter.
    pub fn reconnected(&self) {
        self.registry.reconnected();
    }

    /// The subscription connection broke (reported through `tracing`); call
    /// [`NotificationSink::reconnected`] once a new one is up.
    pub fn disconnected(&self) {
        self.registry.connection_lost();
    }

    /// Messages may have been dropped (a lagging receiver): reported through `tracing`,
    /// and every waiter re-polls as after a reconnect.
    pub fn messages_dropped(&self) {
        self.registry.messages_dropped();
    }

    /// Whether the backend this sink feeds is gone.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.alive.has_changed().is_err()
    }
}

/// Whom in this client a release that tells it alone wakes, by the lock's channel: one
/// waiter, the one that asks for the lock, except on a read-write lock's channel, where
/// this client's readers listen beside its writer (which the release meant).
fn woken_alone(lock_channel: &str) -> Wake {
    if lock_channel.starts_with(crate::layout::RW_CHANNEL_PREFIX) {
        Wake::All
    } else {
        Wake::One
    }
}
