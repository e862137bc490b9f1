//! [`FredTransport`]: lock-core's [`Transport`] over fred.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use fred::clients::{Pipeline, SubscriberClient};
use fred::prelude::{Client, ClientLike, Options, Pool, PubsubInterface, ServerInterface, Value};
use fred::types::scripts::Script as FredScript;
use fred::types::{ClusterHash, CustomCommand};
use lock_core::Error;
use lock_core::notify::PubSub;
use lock_core::redis::{Reply, Script, Topology, Transport, TransportError, script};
use tokio::sync::oneshot;

/// The clients that carry script calls.
#[derive(Clone)]
pub(crate) enum Commands {
    Client(Client),
    Pool(Pool),
}

impl Commands {
    /// One client: each is one multiplexed connection per server.
    /// The deployment the clients talk to.
    pub(crate) fn topology(&self) -> Topology {
        if self.next().is_clustered() {
            Topology::Cluster
        } else {
            Topology::Single
        }
    }

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
    /// The SHA1 of every script, indexed by [`Script::index`].
    hashes: Vec<String>,
    /// Per-call options: one attempt (a lock script must not run twice because a
    /// connection broke after it was sent) within the response timeout.
    options: Options,
    response_timeout: Duration,
    /// Dropping the transport drops this sender, which stops the reader task.
    _shutdown: oneshot::Sender<()>,
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
        response_timeout: Duration,
        shutdown: oneshot::Sender<()>,
    ) -> Self {
        Self {
            commands,
            subscriber,
            sharded,
            subscribing: tokio::sync::Mutex::new(()),
            hashes: script::ALL
                .iter()
                .map(|s| FredScript::from_lua(s.source()).sha1().to_string())
                .collect(),
            options: Options {
                max_attempts: Some(1),
                timeout: Some(response_timeout),
                ..Options::default()
            },
            response_timeout,
            _shutdown: shutdown,
        }
    }

    fn hash(&self, script: &Script) -> Result<&str, TransportError> {
        self.hashes
            .get(script.index())
            .map(String::as_str)
            .ok_or_else(|| TransportError::unknown_script(script))
    }

    /// `EVALSHA sha n keys.. args..`, or `EVAL source ...` when `load`, as a custom
    /// command routed by the first key's slot.
    ///
    /// fred's own `evalsha` never pipelines (it waits for each script's reply before
    /// sending the next on a connection, so that a `NOSCRIPT` cannot be followed by
    /// commands that needed the script); custom commands pipeline. Every call here
    /// handles its own `NOSCRIPT`, so pipelining is safe, and it is what lets one
    /// connection carry many concurrent lock calls.
    fn script_command(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        load: bool,
    ) -> Result<(CustomCommand, Vec<String>), TransportError> {
        let (command, first) = if load {
            ("EVAL", script.source().to_owned())
        } else {
            ("EVALSHA", self.hash(script)?.to_owned())
        };
        let slot = keys
            .first()
            .map_or(0, |key| fred::util::redis_keyslot(key.as_bytes()));
        let mut arguments = Vec::with_capacity(2 + keys.len() + args.len());
        arguments.push(first);
        arguments.push(keys.len().to_string());
        arguments.extend(keys.iter().chain(args).map(|&s| s.to_owned()));
        let command = CustomCommand::new_static(command, ClusterHash::Custom(slot), false);
        Ok((command, arguments))
    }

    /// EVALSHA, then EVAL (which loads the script) when the server does not know it
    /// (after a restart or `SCRIPT FLUSH`). EVAL is routed like EVALSHA, so in a cluster
    /// the script lands on the node that needs it.
    async fn invoke(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Value, TransportError> {
        let client = self.commands.next().with_options(&self.options);
        let (command, arguments) = self.script_command(script, keys, args, false)?;
        match client.custom::<Value, _>(command, arguments).await {
            Err(err) if is_noscript(&err) => {
                let (command, arguments) = self.script_command(script, keys, args, true)?;
                client
                    .custom::<Value, _>(command, arguments)
                    .await
                    .map_err(crate::error::transport)
            }
            other => other.map_err(crate::error::transport),
        }
    }

    /// Runs the script (by SHA, or its source when `load`) and `WAIT` back to back in
    /// one pipeline, so both go down one connection: WAIT covers the script's writes.
    async fn pipelined_with_wait(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        load: bool,
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Value, i64), TransportError> {
        // With this transport's options (one attempt), also for an application's client
        // whose own configuration would send a command again.
        let pipeline = Pipeline::from(self.commands.next().with_options(&self.options));
        let (command, arguments) = self.script_command(script, keys, args, load)?;
        pipeline
            .custom::<(), _>(command, arguments)
            .await
            .map_err(crate::error::transport)?;
        let millis = i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        pipeline
            .wait::<()>(i64::from(replicas), millis)
            .await
            .map_err(crate::error::transport)?;
        let mut results = pipeline.try_all::<Value>().await.into_iter();
        let (Some(reply), Some(acks)) = (results.next(), results.next()) else {
            return Err(TransportError::Io("the pipeline lost a reply".into()));
        };
        let reply = reply.map_err(|err| {
            if is_noscript(&err) {
                TransportError::Server(lock_core::redis::ServerError::new("NOSCRIPT", ""))
            } else {
                crate::error::transport(err)
            }
        })?;
        let acks = acks.map_err(crate::error::transport)?.as_i64().unwrap_or(0);
        Ok((reply, acks))
    }
}

/// A connection that could not be closed cleanly is left for the server to drop; nothing
/// of anyone's locks depends on it, so it is only told at debug level.
pub(crate) fn quit_failed(what: &'static str, err: &dyn std::fmt::Display) {
    tracing::debug!(target: "lock", what, error = %err, "closing a connection failed");
}

fn is_noscript(err: &fred::error::Error) -> bool {
    err.details().starts_with("NOSCRIPT")
}

impl FredTransport {
    /// Subscribes and waits for the server's answer.
    ///
    /// fred completes `SUBSCRIBE` once it is written and drops the reply, so a refusal
    /// (an ACL without the channel) would go unnoticed. Replies come in order, so a
    /// `PING` right after tells: fred hands it the refusal if that was still unclaimed,
    /// and otherwise its shape says whether the connection is subscribed at all (a
    /// subscribed RESP2 connection answers `["pong", ""]`, any other `PONG`). Calls are
    /// serialized so that no refusal reaches another call's `PING`.
    async fn subscribe_confirmed(&self, channel: &str) -> Result<(), fred::error::Error> {
        let _one_at_a_time = self.subscribing.lock().await;
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
            lock_core::redis::Refused::new(format!("{command} {channel}"), err),
        )),
        Ok(Err(err)) => Err(Error::connection(during, err)),
        Err(elapsed) => Err(Error::connection(during, elapsed)),
    }
}

#[async_trait]
impl Transport for FredTransport {
    async fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, TransportError> {
        // fred applies the timeout too; this one also bounds the NOSCRIPT reload.
        let call = self.invoke(script, keys, args);
        TransportError::within(self.response_timeout * 2, call)
            .await
            .map(reply)
    }

    async fn eval_replicated(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        replicas: u32,
        timeout: Duration,
    ) -> Result<(Reply, u32), TransportError> {
        if self.topology() == Topology::Cluster {
            return Err(TransportError::Io(
                "replica acknowledgement is not supported on Redis Cluster".into(),
            ));
        }
        let run = async {
            match self
                .pipelined_with_wait(script, keys, args, false, replicas, timeout)
                .await
            {
                Err(TransportError::Server(err)) if err.code == "NOSCRIPT" => {
                    self.pipelined_with_wait(script, keys, args, true, replicas, timeout)
                        .await
                }
                other => other,
            }
        };
        TransportError::within(self.response_timeout * 2 + timeout, run)
            .await
            .map(|(value, acks)| (reply(value), u32::try_from(acks).unwrap_or(0)))
    }

    fn topology(&self) -> Topology {
        self.commands.topology()
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
