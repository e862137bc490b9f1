//! Distributed locks for async Rust, compatible with Redisson.
//!
//! ```no_run
//! # async fn demo() -> Result<(), lock::Error> {
//! let locks = lock::redis::connect("redis://127.0.0.1:6379").await?;
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
//! The API is [`Locks`] (a client), [`Mutex`] (a handle on one lock), [`Guard`] (one
//! hold) and [`Holder`] (who may re-enter). Backends are chosen by feature:
//!
//! | feature | module | backend |
//! |---|---|---|
//! | `redis` (default) | [`redis`] | the `redis` crate: standalone Redis, Redis Cluster |
//! | `redlock` | `redlock` | MultiLock and RedLock over any of the others |
//! | always | [`memory`] | in-process, for tests and single-process services |
//!
//! Every backend passes the same conformance suite, and the Redis data layout is
//! Redisson's, so a Java service using Redisson and a Rust service using this crate
//! exclude each other on the same Redis.

pub use lock_core::{
    Backend, Config, Error, ErrorKind, Guard, Holder, Lock, LockKind, LockName, Locks,
    LocksBuilder, LostReason, Mutex, RwLock,
};

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
pub mod redis {
    pub use lock_redis::*;
}

/// MultiLock (all of N locks) and RedLock (a majority of N nodes) over any backends.
#[cfg(feature = "redlock")]
pub mod redlock {
    pub use lock_redlock::*;
}
