//! [`FredTransport`]: lock-core's [`Transport`] over fred.

use std::fmt;
use std::sync::PoisonError;
use std::time::Duration;

use async_trait::async_trait;
use fred::bytes::{Bytes, BytesMut};
use fred::clients::{Pipeline, SubscriberClient};
use fred::interfaces::{EventInterface, FunctionInterface};
use fred::prelude::{Client, ClientLike, Options, Pool, PubsubInterface, ServerInterface, Value};
use fred::types::{ClusterHash, CustomCommand};
use lock_core::Error;
use lock_core::notify::PubSub;
use lock_core::runtime::RuntimeWatch;
use lock_redis_protocol::script::ScriptCall;
use lock_redis_protocol::{ReplicaWait, Reply, Topology, Transport, TransportError};

/// The clients that carry script calls.
#[derive(Clone)]
pub(crate) enum Commands {
    Client(Client),
    Pool(Pool),
}

impl Commands {
    /// The deployment the clients talk to.
    pub(crate) fn topology(&self) -> Topology {
        if self.next().is_clustered() {
            Topology::Cluster
        } else {
            Topology::Single
        }
    }

    /// One client: each is one multiplexed connection per server.
    pub(crate) fn next(&self) -> &Client {
        match self {
            Self::Client(client) => client,
            Self::Pool(pool) => pool.next(),
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Client(_) => "client",
            Self::Pool(_) => "pool",
        }
    }

    /// Starts the clients' connection tasks again on the current runtime (see
    /// [`FredTransport::reconnect_if_orphaned`]).
    fn connect_again(&self) {
        // The handles are not needed: the tasks run until the clients quit.
        match self {
            Self::Client(client) => drop(client.connect()),
            Self::Pool(pool) => drop(pool.connect()),
        }
    }

    /// Closes the connections (for clients this adapter opened itself).
    pub(crate) async fn quit(&self) {
        let quit = match self {
            Self::Client(client) => client.quit().await,
            Self::Pool(pool) => pool.quit().await,
        };
        if let Err(err) = quit {
            quit_failed("the command connections", &err);
        }
    }
}

/// Script calls over the command clients; notifications over a dedicated subscriber
/// client whose reader task stops when this transport is dropped.
pub(crate) struct FredTransport {
    commands: Commands,
    subscriber: SubscriberClient,
    /// Sharded pub/sub (`SSUBSCRIBE` on the channel's shard) instead of classic.
    sharded: bool,
    /// Serializes (un)subscriptions; see [`FredTransport::subscribe_confirmed`].
    subscribing: tokio::sync::Mutex<()>,
    /// The runtime the clients' connection tasks run on; see
    /// [`FredTransport::reconnect_if_orphaned`].
    home: std::sync::Mutex<Option<RuntimeWatch>>,
    /// Whether this adapter opened the command clients (an application's clients are
    /// left to the application).
    owns_commands: bool,
    /// Per-call options: one attempt (a lock script must not run twice because a
    /// connection broke after it was sent) within the response timeout.
    options: Options,
    response_timeout: Duration,
}

impl fmt::Debug for FredTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FredTransport")
            .field("commands", &self.commands.name())
            .field("subscriber", &self.subscriber.state())
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

impl FredTransport {
    pub(crate) fn new(
        commands: Commands,
        subscriber: SubscriberClient,
        sharded: bool,
        owns_commands: bool,
        response_timeout: Duration,
    ) -> Self {
        Self {
            commands,
            subscriber,
            sharded,
            subscribing: tokio::sync::Mutex::new(()),
            home: std::sync::Mutex::new(RuntimeWatch::current()),
            owns_commands,
            options: Options {
                max_attempts: Some(1),
                timeout: Some(response_timeout),
                ..Options::default()
            },
            response_timeout,
        }
    }
}

/// `EVALSHA`/`EVAL` with the call's arguments, as a custom command routed by the first
/// key's slot.
///
/// fred's own `evalsha` never pipelines (it waits for each script's reply before sending
/// the next on a connection, so that a `NOSCRIPT` cannot be followed by commands that
/// needed the script); custom commands pipeline. Every call handles its own `NOSCRIPT`,
/// so pipelining is safe, and it is what lets one connection carry many concurrent lock
/// calls.
///
/// The keys and arguments are copied into one buffer and handed over as slices of it:
/// fred clones every argument it is given, and a slice's clone only counts a reference
/// where a string's would copy it (the script's SHA1 or source is static and never
/// copied).
fn script_command(call: &ScriptCall<'_>) -> (CustomCommand, Vec<Value>) {
    let slot = call
        .keys
        .first()
        .map_or(0, |key| fred::util::redis_keyslot(key.as_bytes()));
    let pieces = || call.keys.iter().chain(call.args);
    let mut buffer = BytesMut::with_capacity(pieces().map(|piece| piece.len()).sum());
    pieces().for_each(|piece| buffer.extend_from_slice(piece.as_bytes()));
    let mut rest = buffer.freeze();
    let mut arguments = Vec::with_capacity(call.arg_count());
    arguments.push(Value::Bytes(Bytes::from_static(call.body().as_bytes())));
    arguments.push(Value::Integer(
        i64::try_from(call.keys.len()).unwrap_or(i64::MAX),
    ));
    arguments.extend(pieces().map(|piece| Value::Bytes(rest.split_to(piece.len()))));
    let command = CustomCommand::new_static(call.command(), ClusterHash::Custom(slot), false);
    (command, arguments)
}

/// A connection that could not be closed cleanly is left for the server to drop; nothing
/// of anyone's locks depends on it, so it is only told at debug level.
pub(crate) fn quit_failed(what: &'static str, err: &dyn std::fmt::Display) {
    tracing::debug!(target: lock_core::TRACING_TARGET, what, error = %err, "closing a connection failed");
}

impl FredTransport {
    /// fred runs each client's connection in a task of the runtime that connected it,
    /// and that task dies with its runtime while the client lives on (second review,
    /// N8). The first call made after that starts the connections this adapter owns
    /// again, on the caller's runtime; fred queues the call meanwhile. The subscriber's
    /// reconnection then makes lock-core subscribe every channel again.
    fn reconnect_if_orphaned(&self) {
        let mut home = self.home.lock().unwrap_or_else(PoisonError::into_inner);
        if home.as_ref().is_none_or(RuntimeWatch::is_running) {
            return;
        }
        if self.owns_commands {
            self.commands.connect_again();
        }
        drop(self.subscriber.connect());
        *home = RuntimeWatch::current();
        tracing::warn!(
            target: lock_core::TRACING_TARGET,
            "the runtime the fred clients were connected in has shut down; connecting again"
        );
    }

    /// Subscribes and waits for the server's answer.
    ///
    /// fred completes `SUBSCRIBE` once it is written and drops the reply, so a refusal
    /// (an ACL without the channel) would go unnoticed. Replies come in order, so a
    /// `PING` right after tells: fred hands it the refusal if that was still unclaimed,
    /// and otherwise its shape says whether the connection is subscribed at all (a
    /// subscribed RESP2 connection answers `["pong", ""]`, any other `PONG`). Calls are
    /// serialized so that no refusal reaches another call's `PING`.
    ///
    /// A connection replaced between the two (killed, then connected again) answers a
    /// plain `PONG` too: the `SUBSCRIBE` went down the old connection and the `PING`
    /// was sent again on the new one. fred tells of the new connection before it sends
    /// anything queued, so a reconnection seen by the time the `PONG` arrives makes the
    /// answer a lost connection, which the caller retries, not a refusal.
    async fn subscribe_confirmed(&self, channel: &str) -> Result<(), fred::error::Error> {
        let _one_at_a_time = self.subscribing.lock().await;
        let reconnects = self.subscriber.reconnect_rx();
        // In a cluster fred sends every SUBSCRIBE to the node that owns the slot of the
        // client's id, and an SSUBSCRIBE to the shard of its channel; the PING must take
        // the same connection.
        let routed_by = if self.sharded {
            self.subscriber.ssubscribe(channel).await?;
            channel
        } else {
            self.subscriber.subscribe(channel).await?;
            self.subscriber.id()
        };
        let same_connection = Options {
            cluster_hash: Some(ClusterHash::Custom(fred::util::redis_keyslot(
                routed_by.as_bytes(),
            ))),
            ..Options::default()
        };
        let pong = self
            .subscriber
            .with_options(&same_connection)
            .ping::<Value>(None)
            .await?;
        match pong {
            Value::Array(_) => Ok(()),
            _ if !reconnects.is_empty() => Err(fred::error::Error::new(
                fred::error::ErrorKind::IO,
                "the connection was replaced before the subscription was confirmed",
            )),
            _ => Err(fred::error::Error::new(
                fred::error::ErrorKind::Unknown,
                "NOPERM the subscription was not confirmed (the server dropped it)",
            )),
        }
    }
}

#[async_trait]
impl PubSub for FredTransport {
    async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        self.reconnect_if_orphaned();
        let outcome =
            tokio::time::timeout(self.response_timeout, self.subscribe_confirmed(channel)).await;
        let command = if self.sharded {
            "SSUBSCRIBE"
        } else {
            "SUBSCRIBE"
        };
        settle("subscribing", command, channel, outcome)
    }

    async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        let _one_at_a_time = self.subscribing.lock().await;
        let (command, outcome) = if self.sharded {
            let leaving = self.subscriber.sunsubscribe(channel);
            (
                "SUNSUBSCRIBE",
                tokio::time::timeout(self.response_timeout, leaving).await,
            )
        } else {
            let leaving = self.subscriber.unsubscribe(channel);
            (
                "UNSUBSCRIBE",
                tokio::time::timeout(self.response_timeout, leaving).await,
            )
        };
        settle("unsubscribing", command, channel, outcome)
    }
}

/// A server refusal is a backend error. A command the server did not confirm (the
/// connection broke, or no answer came in time) is a connection error, which lock-core
/// retries: an unconfirmed subscription must never pass for one.
fn settle(
    during: &'static str,
    command: &str,
    channel: &str,
    outcome: Result<Result<(), fred::error::Error>, tokio::time::error::Elapsed>,
) -> Result<(), Error> {
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) if crate::error::server_reply(&err).is_some() => Err(Error::backend(
            during,
            lock_redis_protocol::Refused::new(format!("{command} {channel}"), err),
        )),
        Ok(Err(err)) => Err(Error::connection(during, err)),
        Err(elapsed) => Err(Error::connection(during, elapsed)),
    }
}

#[async_trait]
impl Transport for FredTransport {
    async fn send(&self, call: ScriptCall<'_>) -> Result<Reply, TransportError> {
        self.reconnect_if_orphaned();
        let client = self.commands.next().with_options(&self.options);
        let (command, arguments) = script_command(&call);
        let sent = client.custom::<Value, _>(command, arguments).await;
        sent.map(reply).map_err(crate::error::transport)
    }

    /// Both go in one pipeline, so down one connection, with this transport's options
    /// (one attempt), also for an application's client whose own configuration would
    /// send a command again.
    async fn send_then_wait(
        &self,
        call: ScriptCall<'_>,
        wait: ReplicaWait,
    ) -> Result<(Reply, Reply), TransportError> {
        self.reconnect_if_orphaned();
        let pipeline = Pipeline::from(self.commands.next().with_options(&self.options));
        let (command, arguments) = script_command(&call);
        pipeline
            .custom::<(), _>(command, arguments)
            .await
            .map_err(crate::error::transport)?;
        let millis = i64::try_from(wait.timeout.as_millis()).unwrap_or(i64::MAX);
        pipeline
            .wait::<()>(i64::from(wait.replicas), millis)
            .await
            .map_err(crate::error::transport)?;
        let mut results = pipeline.try_all::<Value>().await.into_iter();
        let (Some(script), Some(acks)) = (results.next(), results.next()) else {
            return Err(TransportError::Io("the pipeline lost a reply".into()));
        };
        let script = script.map_err(crate::error::transport)?;
        let acks = acks.map_err(crate::error::transport)?;
        Ok((reply(script), reply(acks)))
    }

    async fn load_library(&self, source: &str) -> Result<(), TransportError> {
        self.reconnect_if_orphaned();
        let client = self.commands.next().with_options(&self.options);
        let loaded = if client.is_clustered() {
            client.function_load_cluster::<(), _>(true, source).await
        } else {
            client.function_load::<(), _>(true, source).await
        };
        loaded.map_err(crate::error::transport)
    }

    fn topology(&self) -> Topology {
        self.commands.topology()
    }

    /// A client queues commands to its connections in the order they were sent, which
    /// the first poll does; a pool's clients do not keep order among themselves.
    fn keeps_order(&self) -> bool {
        matches!(self.commands, Commands::Client(_))
    }

    fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Every call carries the response timeout in its options, and fred counts it from
    /// the moment the command is queued, so a call waiting for a reconnection is bounded
    /// too (the adapter suite's `a_call_ends_within_the_response_timeout_...` checks it).
    fn bounds_its_calls(&self) -> bool {
        true
    }
}

/// Flattens a fred value into the few shapes lock-core's scripts return.
fn reply(value: Value) -> Reply {
    match value {
        Value::Integer(n) => Reply::Int(n),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::String(s) => Reply::Bytes(s.as_bytes().to_vec()),
        Value::Bytes(bytes) => Reply::Bytes(bytes.to_vec()),
        Value::Double(d) => Reply::Bytes(d.to_string().into_bytes()),
        Value::Queued => Reply::Status("QUEUED".to_owned()),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply).collect()),
        Value::Map(map) => Reply::Array(
            map.inner()
                .into_iter()
                .flat_map(|(k, v)| [reply(Value::from(k)), reply(v)])
                .collect(),
        ),
        Value::Null => Reply::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_flatten_to_lock_core_shapes() {
        assert_eq!(reply(Value::Null), Reply::Nil);
        assert_eq!(reply(Value::Boolean(true)), Reply::Int(1));
        assert_eq!(reply(Value::from("x")), Reply::Bytes(b"x".to_vec()));
        assert_eq!(
            reply(Value::Array(vec![Value::Integer(7), Value::Null])),
            Reply::Array(vec![Reply::Int(7), Reply::Nil])
        );
    }
}
