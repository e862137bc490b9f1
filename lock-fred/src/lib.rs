//! The adapter between distlock and the [`fred`] Redis client.
//!
//! It is transport only: `lock-redis-protocol` owns the scripts and the key layout
//! (Redisson's), lock-core the state machines; this crate runs those scripts over fred
//! clients (as functions of one library on Redis 7, else by SHA, loading what the
//! server lacks) and carries release notifications
//! over a dedicated
//! [`SubscriberClient`](fred::clients::SubscriberClient), resubscribing after every
//! reconnect and whenever its message buffer overflowed.
//!
//! Deployments: a single server (`redis://`, `rediss://`), Redis Cluster
//! (`redis+cluster://host:port,host:port`) and Sentinel
//! (`redis+sentinel://host:port,host:port/NAME`), the same URL forms as `lock-redis`.
//! Connections: from a URL, or from a fred [`Client`](fred::prelude::Client) or
//! [`Pool`](fred::prelude::Pool) the application already has (see [`Connector`]).
//!
//! ```no_run
//! # async fn run() -> Result<(), lock_core::Error> {
//! let locks = lock_fred::connect("redis://127.0.0.1:6379").await?;
//! let guard = locks.mutex("orders:42").lock().await?;
//! // ... the critical section; the watchdog keeps the lease alive ...
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

mod config;
mod connector;
mod error;
mod notifications;
#[cfg(feature = "tls")]
mod tls;
mod transport;

use std::sync::Arc;

use lock_core::{Backend, Error, Locks};

pub use connector::Connector;
pub use lock_redis_protocol::{
    ConnectorSettings, NotReplicated, ProtocolOptions, PublishMode, RedisBackend, ServerCode,
    WrongType,
};

/// Connects to the deployment `url` names (see [`Connector::new`]) with default settings.
///
/// # Cancel safety
///
/// Dropping the future part-way may leave a fred client it had started reconnecting in
/// the background (fred gives each client a task of its own); bound the wait with
/// `ConnectorSettings::connect_timeout`
/// instead, which closes what was opened.
pub async fn connect(url: &str) -> Result<Locks, Error> {
    Connector::new(url).locks().await
}

/// Connects to the deployment `url` names and returns the backend, for
/// [`Locks::builder`] or to combine several backends.
///
/// # Cancel safety
///
/// Dropping the future part-way may leave a fred client it had started reconnecting in
/// the background (fred gives each client a task of its own); bound the wait with
/// `ConnectorSettings::connect_timeout`
/// instead, which closes what was opened.
pub async fn connect_backend(url: &str) -> Result<Arc<dyn Backend>, Error> {
    Ok(Arc::new(Connector::new(url).connect().await?))
}
