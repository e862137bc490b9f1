//! [`Lock`]: a handle on one distributed lock of any kind: the reentrant mutex, the fair
//! mutex, or one side of a read-write lock.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::locks::acquire;
use crate::locks::holder;
use crate::locks::lease::Lease;
use crate::wait::Wait;
use crate::{Error, Guard, Holder, LockKind, LockRef, Owner, RequestId};

/// A handle on one lock. Cheap to create and clone; does no I/O by itself.
///
/// Made by [`Locks::mutex`](crate::Locks::mutex), [`Locks::fair_mutex`](crate::Locks::fair_mutex) or [`crate::RwLock::reader`] /
/// [`crate::RwLock::writer`]; every kind has the same operations. Acquisitions by the same
/// [`Holder`] re-enter (each returns its own [`Guard`]); other holders, in this client or
/// any other, are excluded (readers only exclude writers). Without an explicit lease the
/// lock is renewed by the client's watchdog for as long as the guard lives.
///
/// # Which acquire to use
///
/// | call | waits | when the wait runs out |
/// |---|---|---|
/// | [`lock`](Lock::lock) | until it has the lock | (never) |
/// | [`acquire`](Lock::acquire)`().wait(d)` | at most `d` | `Err` of kind [`Timeout`](crate::ErrorKind::Timeout): for `?` |
/// | [`try_lock_for`](Lock::try_lock_for)`(d, lease)` | at most `d` | `Ok(None)`: for a branch on the outcome |
/// | [`try_lock`](Lock::try_lock) | not at all | `Ok(None)` |
///
/// Each takes a lease too (`acquire().lease(l)`, [`lock_with_lease`](Lock::lock_with_lease),
/// the second argument of `try_lock_for`): the hold ends after it, renewed by nobody.
/// Prefer the watchdog (no lease) unless the work must stop holding at a known time.
///
/// # Cancel safety
///
/// Every acquisition is cancel-safe: dropping its future (a `select!` that took another
/// branch, a timeout, a task aborted) never leaves a hold behind. A grant that arrives
/// after the drop is released in the background, and so is one whose answer never came;
/// a fair-lock waiter leaves the queue at once. Every synchronizer waits through the same
/// engine, so the semaphores promise the same of their permits.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
/// let order = locks.mutex("order:42");
/// let guard = order.lock().await?;
/// // ... work on order 42 ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    named: Named,
    kind: LockKind,
    holder: Option<Holder>,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("kind", &self.kind)
            .field("name", &self.name())
            .field("holder", &self.holder)
            .finish_non_exhaustive()
    }
}

impl Lock {
    pub(crate) fn new(client: &Arc<Inner>, name: &str, kind: LockKind) -> Self {
        Self {
            named: Named::new(client, name),
            kind,
            holder: None,
        }
    }

    /// The same lock, acquired and inspected as `holder` instead of the ambient holder.
    #[must_use]
    pub fn with_holder(mut self, holder: Holder) -> Self {
        self.holder = Some(holder);
        self
    }

    /// Which lock this is a handle on.
    #[must_use]
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The lock's name as given.
    #[must_use]
    pub fn name(&self) -> &str {
        self.named.as_str()
    }

    fn lock_ref(&self) -> Result<LockRef, Error> {
        let name = self.named.checked()?.clone();
        // Every operation starts here: a kind the backend does not declare is refused
        // before anything is sent.
        if let Some(missing) = self.named.client.capabilities.missing(self.kind) {
            return Err(Error::unsupported(missing));
        }
        let client_id = &self.named.client.client_id;
        let owner = match self.holder.clone().or_else(Holder::ambient) {
            Some(holder) => Owner::new(client_id, holder.as_str()),
            // A reader's hold counts the grants of its owner's reads, which a store
            // records whatever the owner (see `Owner::of_request`).
            None if self.kind == LockKind::Read => holder::unique_owner(client_id),
            // The owner of its acquisition's request alone: `acquire` asks under that id.
            None => Owner::of_request(client_id, RequestId::random()),
        };
        Ok(LockRef::new(self.kind, name, owner))
    }

    /// Starts an acquisition to configure: how long to wait, which lease. Awaiting it
    /// takes the lock.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(orders: lock_core::Lock) -> Result<(), lock_core::Error> {
    /// use std::time::Duration;
    ///
    /// // Wait at most 5 s; hold for 10 s, never renewed.
    /// let guard = orders
    ///     .acquire()
    ///     .wait(Duration::from_secs(5))
    ///     .lease(Duration::from_secs(10))
    ///     .await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self) -> Acquisition<'_> {
        Acquisition {
            lock: self,
            wait: None,
            lease: None,
            renewed: false,
        }
    }

    /// Waits until the lock is acquired; the watchdog renews it while the guard lives.
    /// The same as `self.acquire().await`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
    /// let guard = locks.mutex("report:daily").lock().await?;
    /// tokio::select! {
    ///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {} // the work
    ///     lost = guard.lost() => return Err(lost), // renewal failed: stop working
    /// }
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [the lock's](Lock#cancel-safety).
    pub fn lock(&self) -> impl Future<Output = Result<Guard, Error>> + Send + '_ {
        self.acquire_with(Lease::Watchdog, Wait::Forever)
            .map(unbounded)
    }

    /// Waits until the lock is acquired, with a lease that is never renewed: the lock is
    /// released after `lease` even if the guard is still alive.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [the lock's](Lock#cancel-safety).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<Guard, Error> {
        self.named.client.config.check_lease("lease", lease)?;
        unbounded(self.acquire_with(Lease::Fixed(lease), Wait::Forever).await)
    }

    /// One attempt, no waiting (Java's `tryLock()`). `Ok(None)` when someone else holds
    /// the lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [the lock's](Lock#cancel-safety).
    pub fn try_lock(&self) -> impl Future<Output = Result<Option<Guard>, Error>> + Send + '_ {
        self.acquire_with(Lease::Watchdog, Wait::Never)
    }

    /// Waits at most `wait` for the lock (Java's `tryLock(wait, lease)`). With
    /// `Some(lease)`, the lock is never renewed and expires after `lease`; with `None`,
    /// the watchdog renews it. `Ok(None)` when the wait ran out, where Java answers
    /// `false`; [`Lock::acquire`] with [`Acquisition::wait`] reports the same outcome as
    /// an [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) error instead. A zero wait
    /// makes one attempt and waits for its answer, however slow, as
    /// [`Lock::try_lock`] does: only a busy lock answers `Ok(None)`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
    /// use std::time::Duration;
    ///
    /// let report = locks.mutex("report:daily");
    /// match report.try_lock_for(Duration::from_secs(2), None).await? {
    ///     Some(guard) => guard.unlock().await?, // ours: do the work, then release
    ///     None => println!("another instance runs the report"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: see [the lock's](Lock#cancel-safety).
    pub async fn try_lock_for(
        &self,
        wait: Duration,
        lease: Option<Duration>,
    ) -> Result<Option<Guard>, Error> {
        check_bound("wait", wait)?;
        let lease = Lease::asked(lease, false, &self.named.client.config)?;
        self.acquire_with(lease, Wait::at_most(wait)).await
    }

    /// The acquisition every waiting method shares. The lock's owner is read when the
    /// future first runs (inside the caller's [`Holder::scope`], if any).
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn would keep its arguments twice in the future"
    )]
    fn acquire_with(
        &self,
        lease: Lease,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<Guard>, Error>> + Send + '_ {
        // Plain function and block, not an `async fn`: see `acquire::acquire`.
        async move {
            let lock = self.lock_ref()?;
            acquire::acquire(&self.named.client, lock, lease, wait).await
        }
    }

    /// Whether anyone holds the lock.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn is_locked(&self) -> Result<bool, Error> {
        Ok(self.inspect().await?.locked)
    }

    /// Whether the handle's holder (see [`Holder`]: explicit, else the enclosing
    /// [`Holder::scope`]'s) holds the lock. Outside both it is `false`: every operation
    /// there is a holder of its own.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn is_held_by_current(&self) -> Result<bool, Error> {
        Ok(self.inspect().await?.holds > 0)
    }

    /// How many holds the handle's holder has (0 when it does not hold the lock; always 0
    /// without an explicit holder or an enclosing [`Holder::scope`]).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn hold_count(&self) -> Result<u32, Error> {
        Ok(self.inspect().await?.holds)
    }

    /// The lock's remaining lease on the server; `None` when it is free.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>, Error> {
        let state = self.inspect().await?;
        Ok(state.ttl.filter(|_| state.locked))
    }

    async fn inspect(&self) -> Result<crate::backend::LockState, Error> {
        let lock = self.lock_ref()?;
        self.named.client.backend.inspect(&lock).await
    }

    /// Releases the lock whoever holds it, and wakes its waiters. Returns whether it was
    /// held; on a free lock this is a no-op that returns `false`. Guards of this client
    /// on the lock report it lost.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: once sent, the deletion happens on the server even if the future
    /// is dropped, and this client's guards on the lock then learn of it only at their
    /// next renewal.
    pub async fn force_unlock(&self) -> Result<bool, Error> {
        self.named.open()?;
        let lock = self.lock_ref()?;
        let released = self.named.client.backend.force_release(&lock).await?;
        if released {
            self.named.client.forget_all(&lock);
        }
        Ok(released)
    }
}

/// A handle on one read-write lock: many readers or one writer. Cheap; no I/O.
///
/// A writer may also take the read lock (a downgrade: release the write lock and keep
/// reading). A reader asking for the write lock gets [`Error::WouldDeadlock`] instead of
/// waiting for itself. Each read hold has its own lease, so a crashed reader's hold
/// expires on its own and does not keep writers out.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
/// let prices = locks.rw_lock("prices");
/// let reading = prices.reader().lock().await?;   // shared with other readers
/// reading.unlock().await?;
/// let writing = prices.writer().lock().await?;  // exclusive
/// writing.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    read: Lock,
    write: Lock,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.read.name())
            .finish_non_exhaustive()
    }
}

impl RwLock {
    pub(crate) fn new(client: &Arc<Inner>, name: &str) -> Self {
        Self {
            read: Lock::new(client, name, LockKind::Read),
            write: Lock::new(client, name, LockKind::Write),
        }
    }

    /// A handle on the shared side (no I/O): its guards are read holds; inspection and
    /// force-unlock see read holds only.
    #[must_use]
    pub fn reader(&self) -> Lock {
        self.read.clone()
    }

    /// A handle on the exclusive side (no I/O): its guard is the write hold; inspection
    /// and force-unlock see the write hold only.
    #[must_use]
    pub fn writer(&self) -> Lock {
        self.write.clone()
    }
}

/// The outcome of a wait without a deadline, which ends only with the lock or an error.
fn unbounded(acquired: Result<Option<Guard>, Error>) -> Result<Guard, Error> {
    acquired?.ok_or_else(|| Error::protocol("an unbounded wait ended without the lock"))
}

/// An acquisition being configured: [`Lock::acquire`]. Await it to take the lock.
///
/// Without [`wait`](Acquisition::wait) it waits as long as it takes; without
/// [`lease`](Acquisition::lease) the watchdog renews the lock while the guard lives.
///
/// # Cancel safety
///
/// Cancel-safe: see [the lock's](Lock#cancel-safety).
#[must_use = "an acquisition does nothing until it is awaited"]
pub struct Acquisition<'a> {
    lock: &'a Lock,
    wait: Option<Duration>,
    lease: Option<Duration>,
    /// Whether the watchdog renews `lease` (set) or the client's watchdog lease (unset).
    renewed: bool,
}

impl fmt::Debug for Acquisition<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acquisition")
            .field("lock", &self.lock)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("renewed", &self.renewed)
            .finish()
    }
}

impl Acquisition<'_> {
    /// Waits at most `wait`; when it runs out the acquisition fails with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout). `Duration::ZERO` makes one
    /// attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Holds the lock for `lease`, never renewed: it is released after `lease` even if
    /// the guard is still alive. Replaces an earlier
    /// [`watchdog_lease`](Acquisition::watchdog_lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self.renewed = false;
        self
    }

    /// Renews the lock while the guard lives, as without a lease, but each renewal for
    /// `lease` (every third of it) instead of the client's
    /// [`watchdog_lease`](crate::LocksBuilder::watchdog_lease): a process that dies
    /// holding it frees it after `lease` at most: the client's watchdog lease, for one
    /// acquisition. A reentry keeps renewing the hold with the lease of the latest
    /// acquisition that asked for renewals. Replaces an earlier
    /// [`lease`](Acquisition::lease).
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
    /// use std::time::Duration;
    ///
    /// // Freed within 5 s if this process dies; held as long as the guard lives.
    /// let guard = locks
    ///     .mutex("ledger")
    ///     .acquire()
    ///     .watchdog_lease(Duration::from_secs(5))
    ///     .await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self.renewed = true;
        self
    }

    async fn run(self) -> Result<Guard, Error> {
        let lease = Lease::asked(self.lease, self.renewed, &self.lock.named.client.config)?;
        let wait = match self.wait {
            Some(wait) => {
                check_bound("wait", wait)?;
                Wait::at_most(wait)
            }
            None => Wait::Forever,
        };
        match self.lock.acquire_with(lease, wait).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::Timeout {
                what: "lock",
                name: self.lock.name().to_owned(),
                waited: self.wait.unwrap_or_default(),
            }),
        }
    }
}

impl<'a> IntoFuture for Acquisition<'a> {
    type Output = Result<Guard, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Guard, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}
