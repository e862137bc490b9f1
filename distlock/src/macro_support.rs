//! The runtime half of `#[distributed_lock]`: the process-wide default client, the
//! current guard of an annotated function, and the function the expansion calls.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::{Error, Guard, Holder, LeasedPermits, Locks};

static DEFAULT: OnceLock<Locks> = OnceLock::new();

tokio::task_local! {
    static CURRENT: Arc<Guard>;
    static CURRENT_PERMITS: Arc<LeasedPermits>;
}

/// Sets the client `#[distributed_lock]` functions use when they name none. Once per
/// process: a second call is an `InvalidConfig` error and changes nothing.
pub fn set_default(locks: Locks) -> Result<(), Error> {
    DEFAULT
        .set(locks)
        .map_err(|_| Error::invalid_config("the default lock client is already set", None))
}

/// The client set with [`set_default`], if any.
#[must_use]
pub fn default_client() -> Option<Locks> {
    DEFAULT.get().cloned()
}

/// The guard of the innermost `#[distributed_lock]` function running in this task.
///
/// The body uses it to notice a lost lease instead of ignoring it:
///
/// ```no_run
/// # #[derive(Debug)] struct AppError;
/// # impl From<distlock::Error> for AppError { fn from(_: distlock::Error) -> Self { AppError } }
/// # async fn write(_: u64) {}
/// #[distlock::distributed_lock("order:{id}")]
/// async fn settle(id: u64) -> Result<(), AppError> {
///     let guard = distlock::current_guard().expect("inside the lock");
///     tokio::select! {
///         () = write(id) => Ok(()),
///         err = guard.lost() => Err(err.into()),
///     }
/// }
/// ```
#[must_use]
pub fn current_guard() -> Option<Arc<Guard>> {
    CURRENT.try_with(Arc::clone).ok()
}

/// The permit of the innermost `#[distributed_lock(.., kind = semaphore(permits = N))]`
/// function running in this task, to race the work against
/// [`LeasedPermits::lost`] as with [`current_guard`].
#[must_use]
pub fn current_permits() -> Option<Arc<LeasedPermits>> {
    CURRENT_PERMITS.try_with(Arc::clone).ok()
}

/// Used by the code `#[distributed_lock]` generates; not a public API.
#[doc(hidden)]
pub mod __private {
    use super::{
        Arc, CURRENT, CURRENT_PERMITS, Duration, Error, Future, Guard, Holder, LeasedPermits, Locks,
    };

    pub use super::default_client;

    /// The lock kind an annotated function asked for.
    #[derive(Debug, Clone, Copy)]
    #[non_exhaustive]
    pub enum Kind {
        /// `kind = mutex` (the default).
        Mutex,
        /// `kind = fair`.
        Fair,
        /// `kind = read`.
        Read,
        /// `kind = write`.
        Write,
        /// `kind = semaphore(permits = N)`: one permit of the expirable semaphore of N.
        Semaphore(u64),
    }

    /// Takes the lock, runs `body` with its guard as [`super::current_guard`], releases.
    ///
    /// The outermost annotated call opens a fresh [`Holder::scope`], so that nested
    /// annotated calls re-enter while concurrent outermost calls exclude each other.
    /// Dropping the returned future (cancellation) or a panic in `body` drops the guard,
    /// which releases the lock in the background.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future releases the lock (in the background) and drops the
    /// body.
    pub async fn run<T, E, F>(
        client: Option<Locks>,
        kind: Kind,
        name: String,
        wait: Option<Duration>,
        lease: (Option<Duration>, bool),
        body: F,
    ) -> Result<T, E>
    where
        E: From<Error>,
        F: Future<Output = Result<T, E>>,
    {
        let Some(locks) = client else {
            return Err(E::from(Error::invalid_config(
                "no default lock client: call distlock::set_default(locks) first, or pass \
                 `client = ...` to #[distributed_lock]",
                None,
            )));
        };
        if let Kind::Semaphore(permits) = kind {
            // Boxed like the lock's work below.
            return Box::pin(with_permit(locks, permits, name, wait, lease, body)).await;
        }
        // Boxed: the caller's future stays small however deep annotated calls nest.
        let work = Box::pin(async move {
            let lock = match kind {
                Kind::Fair => locks.fair_mutex(&name),
                Kind::Read => locks.rw_lock(&name).reader(),
                Kind::Write => locks.rw_lock(&name).writer(),
                Kind::Mutex | Kind::Semaphore(_) => locks.mutex(&name),
            };
            // A wait that runs out is `Error::Timeout`, as for every bounded acquisition.
            let mut acquisition = lock.acquire();
            if let Some(wait) = wait {
                acquisition = acquisition.wait(wait);
            }
            acquisition = match lease {
                (Some(lease), true) => acquisition.watchdog_lease(lease),
                (Some(lease), false) => acquisition.lease(lease),
                (None, _) => acquisition,
            };
            let guard = Arc::new(acquisition.await.map_err(E::from)?);
            let result = CURRENT.scope(Arc::clone(&guard), body).await;
            give_back(guard).await;
            result
        });
        if Holder::ambient().is_none() {
            Holder::scope(work).await
        } else {
            work.await
        }
    }

    /// Runs `body` holding one permit of the expirable semaphore `name` of `permits`
    /// (set to that many if it was never set): at most `permits` bodies run at once
    /// across every client, and a process that dies gives its permit back after one
    /// lease. Not reentrant: a nested call takes a permit of its own.
    async fn with_permit<T, E, F>(
        locks: Locks,
        permits: u64,
        name: String,
        wait: Option<Duration>,
        lease: (Option<Duration>, bool),
        body: F,
    ) -> Result<T, E>
    where
        E: From<Error>,
        F: Future<Output = Result<T, E>>,
    {
        let semaphore = locks.expirable_semaphore(&name);
        semaphore.try_set_permits(permits).await.map_err(E::from)?;
        let mut acquisition = semaphore.acquire(1);
        if let Some(wait) = wait {
            acquisition = acquisition.wait(wait);
        }
        acquisition = match lease {
            (Some(lease), true) => acquisition.watchdog_lease(lease),
            (Some(lease), false) => acquisition.lease(lease),
            (None, _) => acquisition,
        };
        let permit = Arc::new(acquisition.await.map_err(E::from)?);
        let result = CURRENT_PERMITS.scope(Arc::clone(&permit), body).await;
        give_back(permit).await;
        result
    }

    /// What an annotated function holds while its body runs.
    trait Held: Sized {
        fn name(&self) -> &str;
        fn give_back(self) -> impl Future<Output = Result<(), Error>> + Send;
    }

    impl Held for Guard {
        fn name(&self) -> &str {
            Guard::name(self)
        }

        fn give_back(self) -> impl Future<Output = Result<(), Error>> + Send {
            self.unlock()
        }
    }

    impl Held for LeasedPermits {
        fn name(&self) -> &str {
            LeasedPermits::name(self)
        }

        fn give_back(self) -> impl Future<Output = Result<(), Error>> + Send {
            self.release()
        }
    }

    /// Gives back what the body held once the body is done. The body saw it and could
    /// react to a loss; a release that finds it already gone changes nothing for the
    /// result.
    async fn give_back<H: Held>(held: Arc<H>) {
        match Arc::try_unwrap(held) {
            Ok(held) => {
                if let Err(err) = held.give_back().await
                    && !err.is_not_held()
                {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        error = %err.chain(),
                        "releasing the lock or permit of a #[distributed_lock] function \
                         failed; it stays held until its lease ends"
                    );
                }
            }
            Err(held) => tracing::warn!(
                target: lock_core::TRACING_TARGET,
                name = held.name(),
                "a clone of current_guard() or current_permits() outlives its \
                 #[distributed_lock] function: it is released when the last clone is dropped"
            ),
        }
    }
}
