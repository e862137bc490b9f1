//! [`Locks`]: one client of a lock backend.

pub(crate) mod named;
pub(crate) mod shared;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::{
    Backend, ClientInfo, CountDownLatch, Error, ExpirableSemaphore, Introspect, Lock, LockInfo,
    LockKind, LockName, RwLock, Semaphore, events,
};
use shared::Inner;

/// A client of a lock backend: the factory of lock handles.
///
/// Each client has its own UUID, so two clients (even in one process) exclude each other
/// like two processes do. Cloning is cheap and shares the client. The watchdog renews the
/// leases of all of the client's guards in one background task.
#[derive(Clone)]
pub struct Locks {
    pub(crate) inner: Arc<Inner>,
    /// Shared by this client's `Locks` values only (guards and handles do not count):
    /// dropped with the last of them. Never read: it is there for its `Drop`.
    #[allow(
        dead_code,
        reason = "held for its Drop, which runs with the last Locks"
    )]
    last: Arc<LastHandle>,
}

/// Dropped with a client's last `Locks`: says so when background work is still running
/// then and nobody called [`Locks::shutdown`]; a process that exits right after would cut
/// releases short, and their holds would stay until their leases end.
struct LastHandle(Arc<crate::background::supervisor::Supervisor>);

impl Drop for LastHandle {
    fn drop(&mut self) {
        let running = self.0.running_jobs();
        if running > 0 && !self.0.is_closed() {
            events::dropped_with_jobs_running(running);
        }
    }
}

impl fmt::Debug for Locks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locks")
            .field("client_id", &self.inner.client_id)
            .field("backend", &self.inner.backend)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Locks {
    /// A client of `backend` with the default settings.
    #[must_use]
    pub fn new(backend: Arc<dyn Backend>) -> Self {
        Self::from_parts(backend, Config::default())
    }

    /// A builder for a client of `backend`.
    pub fn builder(backend: Arc<dyn Backend>) -> LocksBuilder {
        LocksBuilder {
            backend,
            config: Config::default(),
            interval_set: false,
        }
    }

    fn from_parts(backend: Arc<dyn Backend>, config: Config) -> Self {
        let inner = Arc::new(Inner::new(backend, config));
        let last = Arc::new(LastHandle(Arc::clone(&inner.supervisor)));
        Self { inner, last }
    }

    /// What this client says about itself in the store: its name, host and process id.
    #[must_use]
    pub fn client_info(&self) -> &ClientInfo {
        &self.inner.client_info
    }

    /// Who holds `name` now (any kind of lock), since when, for how long still, with
    /// which fencing token, and how many wait. [`ErrorKind::Unsupported`] where the
    /// backend cannot say.
    ///
    /// [`ErrorKind::Unsupported`]: crate::ErrorKind::Unsupported
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn describe(&self, name: &str) -> Result<LockInfo, Error> {
        let name = LockName::new(name)?;
        self.introspection()?.describe(&name).await
    }

    /// The names of held locks that start with `prefix`, at most `limit`, sorted.
    /// [`ErrorKind::Unsupported`] where the backend cannot say.
    ///
    /// [`ErrorKind::Unsupported`]: crate::ErrorKind::Unsupported
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let mut names = self.introspection()?.held_names(prefix, limit).await?;
        names.sort_unstable();
        names.dedup();
        Ok(names)
    }

    fn introspection(&self) -> Result<&dyn Introspect, Error> {
        if !self.inner.capabilities.introspection {
            return Err(Error::unsupported("introspection (who holds a lock)"));
        }
        Ok(self.inner.backend.introspection())
    }

    /// A handle on the reentrant mutex `name`. No I/O; an invalid name is reported by the
    /// first operation on the handle.
    #[must_use]
    pub fn mutex(&self, name: &str) -> Lock {
        Lock::new(&self.inner, name, LockKind::Mutex)
    }

    /// A handle on the reentrant fair mutex `name`: waiters, in this client or any other,
    /// are served in arrival order (each woken alone), and `try_lock` never queues.
    /// A waiter that dies is skipped after [`Config::fair_waiter_timeout`](crate::Config).
    #[must_use]
    pub fn fair_mutex(&self, name: &str) -> Lock {
        Lock::new(&self.inner, name, LockKind::Fair)
    }

    /// A handle on the read-write lock `name`.
    #[must_use]
    pub fn rw_lock(&self, name: &str) -> RwLock {
        RwLock::new(&self.inner, name)
    }

    /// A handle on the semaphore `name`. No I/O; a backend without
    /// [`Capabilities::semaphore`](crate::Capabilities::semaphore) refuses its first operation with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    #[must_use]
    pub fn semaphore(&self, name: &str) -> Semaphore {
        Semaphore::new(&self.inner, name)
    }

    /// A handle on the expirable semaphore `name`: permits with ids and leases. No I/O;
    /// a backend without [`Capabilities::expirable_semaphore`](crate::Capabilities::expirable_semaphore) refuses its first
    /// operation with [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    #[must_use]
    pub fn expirable_semaphore(&self, name: &str) -> ExpirableSemaphore {
        ExpirableSemaphore::new(&self.inner, name)
    }

    /// A handle on the count-down latch `name`. No I/O; a backend without
    /// [`Capabilities::count_down_latch`](crate::Capabilities::count_down_latch) refuses its first operation with
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    #[must_use]
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        CountDownLatch::new(&self.inner, name)
    }

    /// This client's UUID: the first part of every owner string it writes.
    #[must_use]
    pub fn client_id(&self) -> &str {
        &self.inner.client_id
    }

    /// The backend this client talks to.
    #[must_use]
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// The client's settings.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Shuts the client down: it starts nothing new on the store (acquisitions of locks
    /// and permits, setting, adding and draining permits, a latch's count and
    /// count-downs, force-unlocks all fail with
    /// [`ErrorKind::ShutDown`](crate::ErrorKind::ShutDown); reads, and releases of what
    /// it holds, still go), and this returns once every
    /// release already started has finished: those of guards dropped or unlocked, of
    /// grants whose caller went away, the cancellations of abandoned waits, and the
    /// backend's own background work ([`Backend::settle`](crate::backend::Backend::settle)).
    ///
    /// Call it before the runtime stops (at the end of `main`): a runtime that stops drops
    /// its tasks, and a release dropped with them leaves its lock held until the lease
    /// ends, 30 s by default. Release guards before: a guard still alive keeps its lock,
    /// renewed, until it is released or dropped (a warning says how many there are).
    ///
    /// A release whose outcome stays unknown is sent again for up to
    /// [`Config::retry_window`]; bound the wait with a timeout if that is too long.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the releases go on in the background, and calling it again waits for
    /// them again. The client is shut down from the first call on.
    pub async fn shutdown(&self) {
        self.inner.supervisor.close();
        self.inner.supervisor.drain().await;
        // A backend's own background work (a composite lock giving back a grant that
        // came late) may hold a lock on a store just as a release job does.
        self.inner.backend.settle().await;
        let live = self.inner.held_count();
        if live > 0 {
            events::shut_down_with_holds(live);
        }
    }
}

/// Builds a [`Locks`] client. Every setting has a default (see [`Config`](crate::Config)).
#[must_use = "a builder does nothing until `build` is called"]
#[derive(Debug)]
pub struct LocksBuilder {
    backend: Arc<dyn Backend>,
    config: Config,
    interval_set: bool,
}

impl LocksBuilder {
    /// The lease of locks taken without an explicit lease (default 30 s). Unless set
    /// explicitly, the renewal interval follows as a third of it.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.config.watchdog_lease = lease;
        if !self.interval_set {
            self.config.renew_interval = lease / 3;
        }
        self
    }

    /// How often the watchdog renews (default: a third of the watchdog lease).
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.config.renew_interval = interval;
        self.interval_set = true;
        self
    }

    /// The clock-drift margin: a hold is given up `lease * factor + floor` before the
    /// server would expire it (defaults 0.01 and 2 ms).
    pub fn drift(mut self, factor: f64, floor: Duration) -> Self {
        self.config.drift_factor = factor;
        self.config.drift_floor = floor;
        self
    }

    /// How long a waiter waits before it reserves the lock's next free moment against
    /// newcomers (default 10 ms); `None` turns reservations off.
    pub fn starvation_threshold(mut self, threshold: Option<Duration>) -> Self {
        self.config.starvation_threshold = threshold;
        self
    }

    /// Issues fencing tokens with every fresh acquisition (default off): see
    /// [`Guard::fencing_token`](crate::Guard::fencing_token).
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.config.fencing = enabled;
        self
    }

    /// How long a fair-lock waiter keeps its place between its own attempts (default
    /// 5 s): the longest a waiter that died holds up the queue.
    pub fn fair_waiter_timeout(mut self, timeout: Duration) -> Self {
        self.config.fair_waiter_timeout = timeout;
        self
    }

    /// How long a request whose outcome is unknown is sent again, and how long backends
    /// remember each answer for it (default 5 s): see
    /// [`Config::retry_window`](crate::Config::retry_window).
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.config.retry_window = window;
        self
    }

    /// The client's name, shown with its holds by introspection ([`Locks::describe`])
    /// beside its host and process id. Default: `<host>:<pid>`.
    pub fn client_name(mut self, name: impl Into<String>) -> Self {
        self.config.client_name = Some(name.into());
        self
    }

    /// Validates the settings and builds the client. Fencing on a backend that does
    /// not declare [`Capabilities::fencing`](crate::Capabilities::fencing) is refused, and
    /// so is a watchdog lease longer than its
    /// [`Capabilities::max_lease`](crate::Capabilities::max_lease).
    pub fn build(self) -> Result<Locks, Error> {
        self.config.validate()?;
        let capabilities = self.backend.capabilities();
        if self.config.fencing && !capabilities.fencing {
            return Err(Error::invalid_config(
                "fencing tokens were asked for, but the backend does not issue them",
                None,
            ));
        }
        if let Some(longest) = capabilities.max_lease
            && self.config.watchdog_lease > longest
        {
            return Err(Error::invalid_config(
                format!(
                    "the watchdog lease of {:?} is longer than the longest lease the backend \
                     grants, {longest:?} (see its documentation)",
                    self.config.watchdog_lease
                ),
                None,
            ));
        }
        Ok(Locks::from_parts(self.backend, self.config))
    }
}
