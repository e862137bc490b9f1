//! [`RedisTransport`]: lock-core's [`Transport`] over the `redis` crate.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::Error;
use lock_core::notify::PubSub;
use lock_redis_protocol::script::ScriptCall;
use lock_redis_protocol::{ReplicaWait, Reply, Topology, Transport, TransportError};
use redis::Value;
use redis::aio::ConnectionManager;

use crate::cluster::ClusterCommands;
use crate::notifications::Link;
use crate::reconnect::Reconnecting;
use crate::sentinel::Failover;
use crate::sharded::ShardedLink;

/// A pool of multiplexed connections, as `bb8-redis` builds it.
pub type RedisPool = bb8::Pool<bb8_redis::RedisConnectionManager>;

/// The connection that carries script calls.
#[derive(Clone)]
pub(crate) enum Commands {
    /// Ours, to a server a URL names.
    Connection(Reconnecting),
    /// The application's.
    Manager(ConnectionManager),
    Cluster(ClusterCommands),
    Pool(RedisPool),
    Sentinel(Arc<Failover>),
}

impl Commands {
    pub(crate) fn topology(&self) -> Topology {
        match self {
            Self::Connection(_) | Self::Manager(_) | Self::Pool(_) | Self::Sentinel(_) => {
                Topology::Single
            }
            Self::Cluster(_) => Topology::Cluster,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Self::Connection(_) => "connection",
            Self::Manager(_) => "connection manager",
            Self::Cluster(_) => "cluster connection",
            Self::Pool(_) => "bb8 pool",
            Self::Sentinel(_) => "sentinel",
        }
    }
}

/// Where subscriptions go.
#[derive(Debug)]
pub(crate) enum Notifications {
    /// `SUBSCRIBE` on one pub/sub connection.
    Classic(Arc<Link>),
    /// `SSUBSCRIBE` on the shard of each channel.
    Sharded(Arc<ShardedLink>),
}

/// Script calls over the command connection; notifications over a dedicated pub/sub
/// connection whose reader task stops when this transport is dropped.
pub(crate) struct RedisTransport {
    commands: Commands,
    response_timeout: Duration,
    notifications: Notifications,
}

impl fmt::Debug for RedisTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisTransport")
            .field("commands", &self.commands.name())
            .field("notifications", &self.notifications)
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisTransport {
    pub(crate) fn new(
        commands: Commands,
        notifications: Notifications,
        response_timeout: Duration,
    ) -> Self {
        Self {
            commands,
            response_timeout,
            notifications,
        }
    }

    /// Sends one command on the script connection.
    async fn query(&self, command: &redis::Cmd) -> Result<Value, TransportError> {
        match &self.commands {
            Commands::Connection(connection) => connection
                .send(command)
                .await
                .map_err(crate::error::transport),
            Commands::Manager(manager) => command
                .query_async(&mut manager.clone())
                .await
                .map_err(crate::error::transport),
            // Boxed: a cluster's, a failover's and a checkout's futures are large, and
            // every call's future (ours too) is moved into a box on every call; inline,
            // it would carry room for them.
            Commands::Cluster(cluster) => Box::pin(query_cluster(cluster, command)).await,
            Commands::Sentinel(failover) => Box::pin(query_master(failover, command)).await,
            Commands::Pool(pool) => Box::pin(query_pooled(pool, command)).await,
        }
    }
}

/// Sends one command on the cluster connection, made again first if its runtime is gone.
async fn query_cluster(
    cluster: &ClusterCommands,
    command: &redis::Cmd,
) -> Result<Value, TransportError> {
    let mut connection = cluster
        .connection()
        .await
        .map_err(crate::error::transport)?;
    command
        .query_async(&mut connection)
        .await
        .map_err(crate::error::transport)
}

/// Sends one command to the master the Sentinels named last; after a failure that may
/// mean the master moved, asks them again.
async fn query_master(failover: &Failover, command: &redis::Cmd) -> Result<Value, TransportError> {
    let result = failover.connection().send(command).await;
    if let Err(err) = &result {
        // A broken connection, or a master that became a replica: the Sentinels may know
        // a new master by now.
        let moved = err
            .code()
            .is_some_and(|c| c == "READONLY" || c == "MASTERDOWN");
        if moved || err.code().is_none() {
            failover.refresh().await;
        }
    }
    result.map_err(crate::error::transport)
}

/// Sends one command on a connection checked out of `pool`.
async fn query_pooled(pool: &RedisPool, command: &redis::Cmd) -> Result<Value, TransportError> {
    let mut connection = checkout(pool).await?;
    command
        .query_async(&mut *connection)
        .await
        .map_err(crate::error::transport)
}

/// A connection of `pool`; a checkout that failed or timed out is an I/O error.
async fn checkout(
    pool: &RedisPool,
) -> Result<bb8::PooledConnection<'_, bb8_redis::RedisConnectionManager>, TransportError> {
    pool.get()
        .await
        .map_err(|err| TransportError::Io(Box::new(PoolError(err.to_string()))))
}

/// `EVALSHA`/`EVAL` with the call's arguments; a cluster connection routes it by its
/// first key.
fn script_command(call: &ScriptCall<'_>) -> redis::Cmd {
    // Sized up front: a command grown argument by argument reallocates several times.
    let mut command = redis::Cmd::with_capacity(1 + call.arg_count(), call.byte_len());
    command
        .arg(call.command())
        .arg(call.body())
        .arg(call.keys.len())
        .arg(call.keys)
        .arg(call.args);
    command
}

#[async_trait]
impl PubSub for RedisTransport {
    async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        match &self.notifications {
            Notifications::Classic(link) => link.subscribe(channel).await,
            Notifications::Sharded(link) => link.subscribe(channel).await,
        }
    }

    async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        match &self.notifications {
            Notifications::Classic(link) => link.unsubscribe(channel).await,
            Notifications::Sharded(link) => link.unsubscribe(channel).await,
        }
    }
}

impl RedisTransport {
    /// Runs a pipeline on one connection of the deployment (not on a cluster: `WAIT`
    /// has no key to route by).
    async fn query_pipeline<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
    ) -> Result<T, TransportError> {
        let result = match &self.commands {
            Commands::Connection(connection) => connection.send_pipeline(pipe).await,
            Commands::Manager(manager) => pipe.query_async(&mut manager.clone()).await,
            Commands::Sentinel(failover) => failover.connection().send_pipeline(pipe).await,
            Commands::Pool(pool) => pipe.query_async(&mut *checkout(pool).await?).await,
            Commands::Cluster(_) => {
                return Err(TransportError::Io("no pipelines on a cluster".into()));
            }
        };
        result.map_err(crate::error::transport)
    }
}

#[async_trait]
impl Transport for RedisTransport {
    async fn send(&self, call: ScriptCall<'_>) -> Result<Reply, TransportError> {
        self.query(&script_command(&call)).await.map(reply)
    }

    async fn send_then_wait(
        &self,
        call: ScriptCall<'_>,
        wait: ReplicaWait,
    ) -> Result<(Reply, Reply), TransportError> {
        // The script and the WAIT go down one connection back to back: WAIT covers the
        // writes this connection made before it.
        let mut pipe = redis::pipe();
        pipe.add_command(script_command(&call));
        pipe.cmd("WAIT")
            .arg(wait.replicas)
            .arg(wait.timeout.as_millis() as u64);
        let (script, acks) = self.query_pipeline::<(Value, Value)>(&pipe).await?;
        Ok((reply(script), reply(acks)))
    }

    /// On a cluster, redis-rs sends `FUNCTION LOAD` to every primary and succeeds when
    /// all of them did.
    async fn load_library(&self, source: &str) -> Result<(), TransportError> {
        let mut command = redis::cmd("FUNCTION");
        command.arg("LOAD").arg("REPLACE").arg(source);
        self.query(&command).await.map(drop)
    }

    fn topology(&self) -> Topology {
        self.commands.topology()
    }

    /// One multiplexed connection per server writes commands in the order they were
    /// queued, which the first poll does; a pool's connections do not keep order among
    /// themselves.
    fn keeps_order(&self) -> bool {
        !matches!(self.commands, Commands::Pool(_))
    }

    fn response_timeout(&self) -> Duration {
        self.response_timeout
    }

    /// Our own connection ends every call within the response timeout (see
    /// [`Reconnecting::send`]); the others may wait longer for a reconnection (a
    /// connection manager, a pool checkout, a Sentinel asked for the new master), and the
    /// protocol bounds their calls.
    fn bounds_its_calls(&self) -> bool {
        matches!(self.commands, Commands::Connection(_))
    }
}

/// A pool checkout that failed or timed out.
#[derive(Debug)]
struct PoolError(String);

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "no pooled connection: {}", self.0)
    }
}

impl std::error::Error for PoolError {}

/// Flattens a driver value into the few shapes lock-core's scripts return.
fn reply(value: Value) -> Reply {
    match value {
        Value::Int(n) => Reply::Int(n),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::BulkString(bytes) => Reply::Bytes(bytes),
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".to_owned()),
        Value::Double(d) => Reply::Bytes(d.to_string().into_bytes()),
        Value::VerbatimString { text, .. } => Reply::Bytes(text.into_bytes()),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            Reply::Array(items.into_iter().map(reply).collect())
        }
        Value::Map(pairs) => Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [reply(k), reply(v)])
                .collect(),
        ),
        Value::Attribute { data, .. } => reply(*data),
        Value::ServerError(err) => Reply::Status(format!(
            "{} {}",
            err.code(),
            err.details().unwrap_or_default()
        )),
        _ => Reply::Nil,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_flatten_to_lock_core_shapes() {
        assert_eq!(reply(Value::Nil), Reply::Nil);
        assert_eq!(reply(Value::Boolean(true)), Reply::Int(1));
        assert_eq!(reply(Value::Okay), Reply::Status("OK".into()));
        assert_eq!(
            reply(Value::Map(vec![(
                Value::Int(1),
                Value::BulkString(b"x".to_vec())
            )])),
            Reply::Array(vec![Reply::Int(1), Reply::Bytes(b"x".to_vec())])
        );
        assert_eq!(
            reply(Value::Array(vec![Value::Int(7), Value::Nil])),
            Reply::Array(vec![Reply::Int(7), Reply::Nil])
        );
    }
}
