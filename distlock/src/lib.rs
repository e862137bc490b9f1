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
//! | `postgres` | `postgres` | PostgreSQL: lease rows in tables it creates, LISTEN/NOTIFY; or session advisory locks |
//! | `mysql` | `mysql` | MySQL and MariaDB: the protocol's machine per name in a table it creates, mailbox wake-ups; or user-level locks (`GET_LOCK`) |
//! | `tls` | | `rediss://` for the enabled Redis adapters |
//! | `redlock` | `redlock` | MultiLock and RedLock over any of the others |
//! | `macros` (default) | [`distributed_lock`] | the attribute macro |
//! | always | [`memory`] | in-process, for tests and single-process services |
//!
//! Every backend passes the same conformance suite, and the Redis data layout is
//! Redisson's, so a Java service using Redisson and a Rust service using this crate
//! exclude each other on the same Redis.
//!
//! # Which backend supports what
//!
//! What each backend declares in its [`Capabilities`]; asking a backend for something
//! it does not declare fails at once with [`ErrorKind::Unsupported`], before anything
//! is sent. Both Redis adapters declare the same. (A test compares this table with the
//! declarations.)
//!
//! | capability | memory | Redis | PostgreSQL | PostgreSQL advisory | MySQL | MySQL `GET_LOCK` | RedLock | MultiLock |
//! |---|---|---|---|---|---|---|---|---|
//! | reentrant mutex | yes | yes | yes | yes | yes | yes | yes | yes |
//! | fair mutex | yes | yes | yes | no | yes | no | no | no |
//! | read-write lock | yes | yes | yes | yes | yes | no | yes | yes |
//! | fencing tokens | yes | yes | yes | yes | yes | yes | yes | yes |
//! | semaphore | yes | yes | no | no | no | no | no | no |
//! | expirable semaphore | yes | yes | no | no | no | no | no | no |
//! | count-down latch | yes | yes | no | no | no | no | no | no |
//! | retried requests answered once | yes | yes | yes | no | yes | no | yes | yes |
//! | starving waiters reserve the lock | no | yes | no | no | no | no | yes | yes |
//! | a release wakes one client | yes | yes | no | no | no | no | no | no |
//! | a waiter waits inside the server | no | no | no | yes | no | yes | no | no |
//! | shared between processes | no | yes | yes | yes | yes | yes | yes | yes |
//! | an abandoned hold ends | after its lease | after its lease | after its lease | with its session | after its lease | with its session | after its lease | after its lease |
//!
//! RedLock and MultiLock show what they make of Redis nodes; over other parts they
//! declare what all their parts have in common, less what spans no set of nodes (fair
//! queues, semaphores, latches).
//!
//! # Which one should I use
//!
//! **Connecting.** Each backend's `Connector` takes a URL and one settings value
//! ([`Connect`] names the shape); `connect(url)` of its module is the short form with
//! default settings. Use the `redis` adapter unless the service already uses `fred`;
//! PostgreSQL when the service has a database and no Redis (its advisory mode,
//! `Connector::connect_advisory`, when no lock needs a fair queue or must outlive a
//! failover, and every lock should cost no write); MySQL or MariaDB likewise (its
//! `GET_LOCK` mode, `Connector::connect_session_locks`, on the same terms, and never on
//! Galera or Group Replication); RedLock only where a lock
//! must survive the loss of a Redis master without replication (read its crate
//! documentation first); the memory backend for tests and single-process services.
//!
//! **Taking a lock.** [`Lock::lock`] waits as long as it takes; [`Lock::acquire`] with
//! `.wait(d)` waits at most `d` and answers an [`ErrorKind::Timeout`] error, which suits
//! `?` in a request handler; [`Lock::try_lock_for`] answers `Ok(None)` instead, as
//! Redisson's `tryLock` answers `false`, which suits a branch on the outcome;
//! [`Lock::try_lock`] does not wait at all. Without a lease the watchdog keeps the hold
//! while its [`Guard`] lives; with one (`lock_with_lease`, `.lease(d)`) the hold ends
//! after it, released or not.
//!
//! **Which lock.** [`Locks::mutex`] for exclusion; [`Locks::fair_mutex`] when waiters
//! must be served in arrival order (it costs a queue on the server and a little latency
//! per hand-off); [`Locks::rw_lock`] when readers may share. A [`Guard`]'s
//! [`fencing_token`](Guard::fencing_token) (with fencing on) is what a storage service
//! checks to refuse a holder whose lease ran out.
//!
//! **Which semaphore.** [`Locks::semaphore`] counts permits with no owner and no lease,
//! as Redisson's `RSemaphore`: a permit taken by a process that crashes is gone until
//! somebody adds it back; use it for rates and budgets that an operator tops up.
//! [`Locks::expirable_semaphore`] gives each permit an id and a lease, renewed while its
//! [`LeasedPermits`] live, as Redisson's `RPermitExpirableSemaphore`: a crashed holder's
//! permit comes back after its lease; use it to bound concurrent work across processes.

// Every public item of a library crate says what it is.
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use lock_core::{
    Acquisition, Backend, Capabilities, Cause, Chain, ClientInfo, Config, Connect, CountDownLatch,
    Error, ErrorKind, ExpirableSemaphore, Guard, HeldAs, HoldModel, Holder, HolderInfo,
    LeasedPermits, Lock, LockInfo, LockKind, LockName, Locks, LocksBuilder, LostReason,
    MAX_PERMITS_PER_ACQUISITION, PermitAcquisition, PermitId, Permits, RwLock, Semaphore,
    TRACING_TARGET,
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
/// - `lease = "10s"`: an explicit lease, never renewed (absent: the watchdog renews the
///   client's watchdog lease while the body runs).
/// - `watchdog_lease = "5s"`: renewed while the body runs, each renewal for 5 s instead
///   of the client's watchdog lease, so that a process that dies frees the lock within
///   5 s (Redisson's `lockWatchdogTimeout`, for this function alone).
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

/// The PostgreSQL backend: locks as lease rows in tables the library creates itself, or
/// as session advisory locks ([`postgres::Connector::connect_advisory`]).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres {
    pub use lock_postgres::*;
}

/// The MySQL and MariaDB backend: each lock name's state machine in a row of a table the
/// library creates, stepped in the client; waiters woken through their client's mailbox.
#[cfg(feature = "mysql")]
#[cfg_attr(docsrs, doc(cfg(feature = "mysql")))]
pub mod mysql {
    pub use lock_mysql::*;
}

/// MultiLock (all of N locks) and RedLock (a majority of N nodes) over any backends.
#[cfg(feature = "redlock")]
#[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
pub mod redlock {
    pub use lock_redlock::*;
}
