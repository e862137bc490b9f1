//! Distributed locks for async Rust, compatible with Redisson.
//!
//! ```no_run
//! # async fn demo() -> Result<(), distlock::Error> {
//! let locks = distlock::redis::connect("redis://127.0.0.1:6379").await?;
//! let order = locks.mutex("order:42"); // a cheap handle, no I/O
//!
//! let guard = order.lock().await?; // waits via pub/sub; the watchdog renews the lease
//! tokio::select! {
//!     () = do_work() => {}
//!     err = guard.lost() => return Err(err), // renewal failed or the key vanished
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! # async fn do_work() {}
//! ```
//!
//! The API is [`Locks`] (a client), [`Lock`] (a handle on one lock), [`Guard`] (one
//! hold) and [`Holder`] (who may re-enter). Backends are chosen by feature:
//!
//! | feature | module | backend |
//! |---|---|---|
//! | `redis` (default) | [`redis`] | the `redis` crate: standalone Redis, Redis Cluster, Sentinel |
//! | `fred` | `fred` | the `fred` crate: the same deployments and URL forms |
//! | `tls` | | `rediss://` for the enabled Redis adapters |
//! | `redlock` | `redlock` | MultiLock and RedLock over any of the others |
//! | `macros` (default) | [`distributed_lock`] | the attribute macro |
//! | always | [`memory`] | in-process, for tests and single-process services |
//!
//! Every backend passes the same conformance suite, and the Redis data layout is
//! Redisson's, so a Java service using Redisson and a Rust service using this crate
//! exclude each other on the same Redis.

#![cfg_attr(docsrs, feature(doc_cfg))]

pub use lock_core::{
    Acquisition, Backend, Capabilities, Cause, Chain, Config, Connect, CountDownLatch, Error,
    ErrorKind, ExpirableSemaphore, Guard, HoldModel, Holder, LeasedPermits, Lock, LockKind,
    LockName, Locks, LocksBuilder, LostReason, MAX_PERMITS_PER_ACQUISITION, PermitAcquisition,
    PermitId, Permits, RwLock, Semaphore, TRACING_TARGET,
};

/// Everything needed to implement a [`Backend`]: the request and reply types, the
/// notification registry, the capability declaration. The memory backend
/// ([`memory::MemoryBackend`]) is the worked example.
pub mod backend {
    /// The attribute the [`Backend`] trait is written with; implement it
    /// under `#[distlock::backend::async_trait]`.
    pub use async_trait::async_trait;
    pub use lock_core::backend::*;
    pub use lock_core::notify;
    pub use lock_core::{BoxError, MAX_DURATION, MAX_NAME_LEN};
}

mod macro_support;

pub use macro_support::{__private, current_guard, current_permits, default_client, set_default};

/// Runs an async fn under a distributed lock (feature `macros`, on by default).
///
/// ```no_run
/// # #[derive(Debug)] struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # struct Order { id: u64 }
/// #[distlock::distributed_lock("order:{order.id}", wait = "5s")]
/// async fn settle(order: &Order) -> Result<(), AppError> {
///     // ... runs while holding the lock `order:<id>` ...
///     Ok(())
/// }
/// ```
///
/// - The name is a template: each `{...}` is an argument, or a field path on one
///   (`{order.id}`), formatted with `Display`; `{{`/`}}` are literal braces.
/// - `wait = "5s"`: give up after 5 s with `Err(distlock::Error::Timeout)` converted by
///   `From` (absent: wait as long as it takes; `"0s"`: try once).
/// - `lease = "10s"`: an explicit lease (absent: the watchdog renews while the body runs).
/// - `kind = fair | read | write` (default: the mutex), or `kind = semaphore(permits = N)`:
///   the body holds one permit of the expirable semaphore named by the template, set to
///   N permits if it was never set, so that at most N calls run at once across every
///   service (renewed while the body runs, given back after one lease if the process
///   dies; not reentrant). The body sees its permit through [`current_permits`].
/// - `client = expr`: a `Locks` (absent: the one set with [`set_default`]).
/// - `crate = "path"`: where this crate is, when it is renamed.
///
/// The function must be `async` and return `Result<T, E>` with `E: From<distlock::Error>`.
/// The lock is released when the body returns (also through `?`), when it panics and
/// when the returned future is dropped. Nested annotated calls with the same name
/// re-enter; two concurrent outermost calls exclude each other. The body sees its guard
/// through [`current_guard`] and should watch `guard.lost()` when a lost lease matters.
#[cfg(feature = "macros")]
#[cfg_attr(docsrs, doc(cfg(feature = "macros")))]
pub use lock_macros::distributed_lock;

/// Metric names recorded through the `metrics` facade.
pub use lock_core::metrics;

/// The in-process backend.
pub mod memory {
    pub use lock_core::memory::MemoryBackend;

    /// A client of a fresh in-memory store.
    #[must_use]
    pub fn locks() -> crate::Locks {
        crate::Locks::new(std::sync::Arc::new(MemoryBackend::new()))
    }
}

/// The backend over the `redis` crate.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis {
    pub use lock_redis::*;
}

/// The backend over the `fred` crate.
#[cfg(feature = "fred")]
#[cfg_attr(docsrs, doc(cfg(feature = "fred")))]
pub mod fred {
    pub use lock_fred::*;
}

/// The PostgreSQL backend: locks as lease rows in tables the library creates itself.
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use lock_postgres::*;
}

/// MultiLock (all of N locks) and RedLock (a majority of N nodes) over any backends.
#[cfg(feature = "redlock")]
#[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
pub mod redlock {
    pub use lock_redlock::*;
}
