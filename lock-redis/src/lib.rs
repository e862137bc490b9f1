//! The adapter between distlock and the [`redis`] crate.
//!
//! It is transport only: `lock-redis-protocol` owns the scripts and the key layout
//! (Redisson's), lock-core the state machines; this crate runs those scripts over a
//! connection and carries release notifications over a dedicated pub/sub connection that
//! reconnects by itself.
//!
//! Deployments: a single server (`redis://`, `rediss://`, `unix://`), Redis Cluster
//! (`redis+cluster://host:port,host:port`) and Sentinel
//! (`redis+sentinel://host:port,host:port/NAME`). Connections: from a URL, or from a
//! [`ConnectionManager`](redis::aio::ConnectionManager), a `bb8` pool or a
//! [`ClusterConnection`](redis::cluster_async::ClusterConnection) the application already
//! has (see [`Connector`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), lock_core::Error> {
//! let locks = lock_redis::connect("redis://127.0.0.1:6379").await?;
//! let guard = locks.mutex("orders:42").lock().await?;
//! // ... the critical section; the watchdog keeps the lease alive ...
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

mod cluster;
mod connector;
mod error;
mod notifications;
mod reconnect;
mod sentinel;
mod sharded;
mod transport;
mod url;

use std::sync::Arc;

use lock_core::{Backend, Error, Locks};

pub use connector::Connector;
pub use lock_redis_protocol::{
    ConnectorSettings, NotReplicated, ProtocolOptions, PublishMode, RedisBackend, ServerCode,
    WrongType,
};
pub use transport::RedisPool;

/// The `tracing` target of what this crate reports, lock-core's: one directive covers
/// every event of the library.
const EVENTS_TARGET: &str = lock_core::TRACING_TARGET;

/// Connects to the deployment `url` names (see [`Connector::new`]) with default settings.
///
/// # Cancel safety
///
/// Cancel-safe: the connections opened so far are closed when the future is dropped;
/// nothing runs in the background until it completes.
pub async fn connect(url: &str) -> Result<Locks, Error> {
    Connector::new(url).locks().await
}

/// Connects to the deployment `url` names and returns the backend, for
/// [`Locks::builder`] or to combine several backends.
///
/// # Cancel safety
///
/// Cancel-safe: the connections opened so far are closed when the future is dropped;
/// nothing runs in the background until it completes.
pub async fn connect_backend(url: &str) -> Result<Arc<dyn Backend>, Error> {
    Ok(Arc::new(Connector::new(url).connect().await?))
}
