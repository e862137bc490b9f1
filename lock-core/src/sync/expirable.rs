//! [`ExpirableSemaphore`]: a semaphore whose permits have ids and leases (Java's
//! `PermitExpirableSemaphore`, shared), and [`LeasedPermits`], the guard of issued
//! permits.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    Capabilities, ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, PermitReservation,
    ReturnRequest,
};
use crate::background::watchdog::Renewed;
use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::locks::lease::LeaseClock;
use crate::metrics::{self, PermitKind};
use crate::sync::leased::PermitHold;
use crate::sync::semaphore::{AttemptTicket, Starvation, check_count, detached, in_background};
use crate::{Error, LockName, LostReason, events, retry};

/// The most permits one acquisition may ask for: each is an id sent to the store.
pub const MAX_PERMITS_PER_ACQUISITION: u64 = 10_000;

/// A handle on one expirable semaphore: available permits shared by every client of the
/// store, issued with ids and leases. Cheap; no I/O. Made by
/// [`Locks::expirable_semaphore`](crate::Locks::expirable_semaphore).
///
/// Issued permits come back on their own when their lease ends, so a holder that dies
/// gives them back after one lease: the semaphore to bound concurrent work across
/// processes (a plain [`Semaphore`](crate::Semaphore) keeps a dead holder's permits). Permits taken without a lease are renewed by the
/// client's watchdog while their guard lives: a live holder keeps them however long it
/// works. Expired permits are reclaimed by every operation on the semaphore, and waiters
/// are woken by notification, or at the next expiry when no notification comes.
///
/// The available count is stored as a plain semaphore's ([`Semaphore`](crate::Semaphore)),
/// so both kinds of handle on one name share it. The permits in all are the available and
/// the issued ones: asking for more than that fails at once instead of waiting forever.
///
/// ```no_run
/// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
/// let workers = locks.expirable_semaphore("gpu-slots");
/// workers.try_set_permits(4).await?;
/// let slot = workers.acquire(1).await?; // renewed while `slot` lives
/// println!("running under permit {}", slot.ids()[0]);
/// slot.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ExpirableSemaphore {
    named: Named,
}

impl fmt::Debug for ExpirableSemaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExpirableSemaphore")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl ExpirableSemaphore {
    pub(crate) fn new(client: &Arc<Inner>, name: &str) -> Self {
        Self {
            named: Named::new(client, name),
        }
    }

    /// The semaphore's name as given.
    #[must_use]
    pub fn name(&self) -> &str {
        self.named.as_str()
    }

    fn parts(&self) -> Result<(&dyn ExpirableSemaphoreBackend, &LockName), Error> {
        let declared = |caps: &Capabilities| caps.expirable_semaphore;
        self.named.store(
            declared,
            |backend| backend.expirable_semaphores(),
            "expirable semaphores",
        )
    }

    fn client(&self) -> &Arc<Inner> {
        &self.named.client
    }

    /// Sets the available permits to `permits` if the semaphore was never set; whether
    /// it did (Java's `trySetPermits`).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe in the sense that the permits are either set or not.
    pub async fn try_set_permits(&self, permits: u64) -> Result<bool, Error> {
        let (semaphores, name) = self.parts()?;
        check_count("permits", permits)?;
        semaphores.try_set_permits(name, permits).await
    }

    /// Adds `delta` available permits (negative: takes them away, possibly below zero).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may or may not have changed the count.
    pub async fn add_permits(&self, delta: i64) -> Result<(), Error> {
        let (semaphores, name) = self.parts()?;
        semaphores.add_permits(name, delta).await.map(drop)
    }

    /// The permits available now (expired ones reclaimed first).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads (and reclaims).
    pub async fn available(&self) -> Result<i64, Error> {
        let (semaphores, name) = self.parts()?;
        Ok(semaphores.permits(name).await?.0)
    }

    /// The permits issued now and not expired, by every client.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads (and reclaims).
    pub async fn issued(&self) -> Result<u64, Error> {
        let (semaphores, name) = self.parts()?;
        Ok(semaphores.permits(name).await?.1)
    }

    /// An acquisition of `permits` permits, to configure and await: as long as it takes,
    /// renewed by the watchdog, unless [`wait`](PermitAcquisition::wait) or
    /// [`lease`](PermitAcquisition::lease) say otherwise.
    pub fn acquire(&self, permits: u64) -> PermitAcquisition<'_> {
        PermitAcquisition {
            semaphore: self,
            permits,
            wait: None,
            lease: None,
        }
    }

    /// One attempt, no waiting, renewed by the watchdog (Java's `tryAcquire()`):
    /// `Ok(None)` when fewer than `permits` are available.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit.
    pub async fn try_acquire(&self, permits: u64) -> Result<Option<LeasedPermits>, Error> {
        self.acquire_until(permits, Some(Instant::now()), None)
            .await
    }

    /// Gives back the issued permit `id`, whoever holds it (Java's `release(id)`): for
    /// ids handed over from another service. A guard of this client holding it learns
    /// that it lost it. [`Error::PermitNotIssued`] when it is not issued.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may or may not have given the permit back.
    pub async fn release(&self, id: PermitId) -> Result<(), Error> {
        let (semaphores, name) = self.parts()?;
        let window = self.client().config.retry_window;
        let request = ReturnRequest::new(vec![id], window);
        let until = Instant::now() + window;
        let released = retry::until_answered(until, || semaphores.release(name, &request)).await?;
        if let Some(held) = self.client().leased.holding(id) {
            held.lease.mark_lost(LostReason::OwnerGone);
        }
        if released {
            Ok(())
        } else {
            Err(not_issued(name, id))
        }
    }

    /// Sets the lease of the issued permit `id` to `lease` from now (Java's
    /// `updateLeaseTime`), whoever holds it. [`Error::PermitNotIssued`] when it is not
    /// issued. A permit that this client's watchdog renews gets the watchdog's lease
    /// again at its next renewal; change a guard's lease with
    /// [`LeasedPermits::update_lease`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may or may not have changed the lease (a guard
    /// of this client holding the permit assumes the shorter of the two).
    pub async fn update_lease(&self, id: PermitId, lease: Duration) -> Result<(), Error> {
        let (semaphores, name) = self.parts()?;
        self.client().config.check_lease("lease", lease)?;
        let client = self.client();
        let sent = Instant::now();
        if let Some(held) = client.leased.holding(id) {
            held.lease.shorten(sent, client.valid_for(lease));
        }
        let until = sent + client.config.retry_window;
        let ids = [id];
        let issued =
            retry::until_answered(until, || semaphores.set_lease(name, &ids, lease)).await?;
        if issued.first() == Some(&true) {
            Ok(())
        } else {
            Err(not_issued(name, id))
        }
    }

    async fn acquire_until(
        &self,
        permits: u64,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<LeasedPermits>, Error> {
        let acquiring = self.take_until(permits, deadline, lease);
        metrics::measured_permits(PermitKind::Expirable, deadline, acquiring).await
    }

    async fn take_until(
        &self,
        permits: u64,
        deadline: Option<Instant>,
        lease: Option<Duration>,
    ) -> Result<Option<LeasedPermits>, Error> {
        let (semaphores, name) = self.parts()?;
        if permits == 0 || permits > MAX_PERMITS_PER_ACQUISITION {
            return Err(Error::invalid_argument(
                "permits",
                format!("must be between 1 and {MAX_PERMITS_PER_ACQUISITION}"),
            ));
        }
        if let Some(lease) = lease {
            self.client().config.check_lease("lease", lease)?;
        }
        let client = self.client();
        if client.supervisor.is_closed() {
            return Err(Error::ShutDown);
        }
        let starvation = Starvation::new(client, name, true);
        let Some(_head) = client.semaphore_turns.wait(name, deadline).await else {
            return Ok(None);
        };
        let terms = Terms {
            permits,
            lease: lease.unwrap_or(client.config.watchdog_lease),
            renew: lease.is_none(),
        };
        // The first attempt is never cut short by the deadline: a try makes exactly one.
        if let Attempt::Issued(leased) = attempt(client, name, terms, None, None).await? {
            return Ok(Some(leased));
        }
        if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
            return Ok(None);
        }
        let waiting = async {
            let listener = semaphores.listen(name).await?;
            loop {
                let notified = listener.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Also closes the race with a release between the first attempt and the
                // subscription.
                let reserve = starvation.reserve();
                let ticket = starvation.attempt_ticket();
                let next_expiry = match attempt(client, name, terms, reserve, Some(ticket)).await? {
                    Attempt::Issued(leased) => {
                        starvation.granted();
                        return Ok(Some(leased));
                    }
                    Attempt::Busy(next_expiry) => next_expiry,
                };
                // Expired permits come back without a notification until some operation
                // reclaims them: the earliest expiry is a wake-up of its own.
                let expiry =
                    next_expiry.map_or(crate::MAX_DURATION, |d| d + Duration::from_millis(1));
                // Biased, the notification first: see `acquire::ask`.
                tokio::select! {
                    biased;
                    () = notified => {}
                    () = tokio::time::sleep(expiry) => {}
                    () = starvation.refresh(reserve) => {}
                }
            }
        };
        match deadline {
            None => waiting.await,
            Some(deadline) => tokio::time::timeout_at(deadline, waiting)
                .await
                .unwrap_or(Ok(None)),
        }
    }
}

fn not_issued(name: &LockName, id: PermitId) -> Error {
    Error::PermitNotIssued {
        name: name.as_str().to_owned(),
        id: id.to_string(),
    }
}

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy)]
struct Terms {
    permits: u64,
    lease: Duration,
    renew: bool,
}

enum Attempt {
    Issued(LeasedPermits),
    Busy(Option<Duration>),
}

/// One attempt, run in a task of its own: permits issued after the caller went away are
/// given back. The task keeps `ticket` until the attempt is over.
async fn attempt(
    client: &Arc<Inner>,
    name: &LockName,
    terms: Terms,
    reserve: Option<PermitReservation>,
    ticket: Option<AttemptTicket>,
) -> Result<Attempt, Error> {
    let count = usize::try_from(terms.permits).unwrap_or(usize::MAX);
    let request = IssueRequest::new(count, terms.lease).reserving(reserve);
    let sent = Instant::now();
    let task_client = Arc::clone(client);
    let task_name = name.clone();
    let task_request = request.clone();
    let job = async move {
        let _ticket = ticket;
        let semaphores = task_client.backend.expirable_semaphores();
        // The same ids each time: permits issued by a run whose reply was lost are
        // found issued, not taken again.
        let until = Instant::now() + task_client.config.retry_window;
        retry::until_answered(until, || semaphores.try_issue(&task_name, &task_request)).await
    };
    let orphan_client = Arc::clone(client);
    let orphan_name = name.clone();
    let orphan_ids = request.ids.clone();
    let issue = detached(client, job, move |issue| {
        if issue == Issue::Issued {
            release_unawaited(
                &orphan_client,
                &orphan_name,
                orphan_ids,
                "permits issued to nobody",
            );
        }
    })
    .await?;
    match issue {
        Issue::Issued => Ok(Attempt::Issued(LeasedPermits::new(
            client,
            name,
            request.ids,
            terms,
            sent,
        ))),
        Issue::Busy { next_expiry } => Ok(Attempt::Busy(next_expiry)),
        Issue::Exceeds { total } => Err(Error::invalid_argument(
            "permits",
            format!(
                "asks for {}, more than the {total} the semaphore has in all",
                terms.permits
            ),
        )),
    }
}

/// Gives permits back in the background, reporting a failure through `tracing`.
fn release_unawaited(client: &Arc<Inner>, name: &LockName, ids: Vec<PermitId>, of: &'static str) {
    let count = u64::try_from(ids.len()).unwrap_or(u64::MAX);
    let task_client = Arc::clone(client);
    let task_name = name.clone();
    let give_back = async move { give_back(&task_client, &task_name, ids).await };
    in_background(client, name, count, of, give_back);
}

/// Gives `ids` back; whether they were all still issued.
async fn give_back(client: &Inner, name: &LockName, ids: Vec<PermitId>) -> Result<bool, Error> {
    let semaphores = client.backend.expirable_semaphores();
    let window = client.config.retry_window;
    let request = ReturnRequest::new(ids, window);
    let until = Instant::now() + window;
    retry::until_answered(until, || semaphores.release(name, &request)).await
}

/// An acquisition of expirable permits being configured: [`ExpirableSemaphore::acquire`].
/// Await it to take the permits.
///
/// # Cancel safety
///
/// Cancel-safe: dropping the future never keeps a permit; permits issued after the drop
/// are given back in the background.
#[must_use = "an acquisition does nothing until it is awaited"]
pub struct PermitAcquisition<'a> {
    semaphore: &'a ExpirableSemaphore,
    permits: u64,
    wait: Option<Duration>,
    lease: Option<Duration>,
}

impl fmt::Debug for PermitAcquisition<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitAcquisition")
            .field("semaphore", &self.semaphore)
            .field("permits", &self.permits)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .finish()
    }
}

impl PermitAcquisition<'_> {
    /// Waits at most `wait`; when it runs out the acquisition fails with
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout). `Duration::ZERO` makes one
    /// attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Issues the permits for `lease`, never renewed: they come back after `lease` even
    /// if the guard is still alive.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    async fn run(self) -> Result<LeasedPermits, Error> {
        let deadline = match self.wait {
            Some(wait) => {
                check_bound("wait", wait)?;
                Some(Instant::now() + wait)
            }
            None => None,
        };
        let semaphore = self.semaphore;
        match semaphore
            .acquire_until(self.permits, deadline, self.lease)
            .await?
        {
            Some(leased) => Ok(leased),
            None => Err(Error::Timeout {
                what: "semaphore",
                name: semaphore.name().to_owned(),
                waited: self.wait.unwrap_or_default(),
            }),
        }
    }
}

impl<'a> IntoFuture for PermitAcquisition<'a> {
    type Output = Result<LeasedPermits, Error>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LeasedPermits, Error>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// Permits issued by an [`ExpirableSemaphore`], each with its id. Give them back with
/// [`LeasedPermits::release`]; dropping them gives them back in the background.
///
/// Taken without a lease, they are renewed by the client's watchdog while this guard
/// lives; with one, they come back when it ends. As with a lock's guard, check
/// [`LeasedPermits::is_held`] before acting on what they protect, or race the work
/// against [`LeasedPermits::lost`].
#[must_use = "dropping permits gives them back at once"]
#[clippy::has_significant_drop]
pub struct LeasedPermits {
    client: Arc<Inner>,
    held: Arc<PermitHold>,
    lease: Duration,
    released: bool,
}

impl fmt::Debug for LeasedPermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedPermits")
            .field("name", &self.held.name)
            .field("ids", &self.held.ids)
            .field("lease", &self.lease)
            .field("watchdog", &self.held.renewing.load(Ordering::Relaxed))
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

impl LeasedPermits {
    fn new(
        client: &Arc<Inner>,
        name: &LockName,
        ids: Vec<PermitId>,
        terms: Terms,
        sent: Instant,
    ) -> Self {
        let lost_name = name.clone();
        let count = ids.len();
        metrics::permits_held(PermitKind::Expirable, count as f64);
        let on_lost = Box::new(move |reason| events::permits_lost(&lost_name, count, reason));
        let held = Arc::new(PermitHold {
            name: name.clone(),
            ids,
            lease: LeaseClock::new(sent, client.valid_for(terms.lease), on_lost),
            renewing: AtomicBool::new(terms.renew),
        });
        client.leased.insert(&held);
        if terms.renew {
            client
                .watchdog
                .register(&client.watchdog_host(), Renewed::Permits(Arc::clone(&held)));
        }
        Self {
            client: Arc::clone(client),
            held,
            lease: terms.lease,
            released: false,
        }
    }

    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.held.name.as_str()
    }

    /// The permits' ids, one per permit.
    #[must_use]
    pub fn ids(&self) -> &[PermitId] {
        &self.held.ids
    }

    /// How many permits these are.
    #[must_use]
    pub fn count(&self) -> usize {
        self.held.ids.len()
    }

    /// Whether the permits are still issued by the local clock: not lost, and the last
    /// renewal (or the acquisition) was sent less than a lease (minus drift) ago. No
    /// I/O; it turns false at the deadline even if nothing was heard.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.held.lease.lost_reason().is_none()
    }

    /// How long the permits stay valid without another renewal; `None` once lost.
    #[must_use]
    pub fn valid_for(&self) -> Option<Duration> {
        self.held.lease.valid_for()
    }

    /// Resolves when the permits are lost: a renewal found one of them no longer issued
    /// (released through the handle, or expired), or the lease ran out. Returns the
    /// [`Error::Lost`] to hand to the caller.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches; use it in `tokio::select!` against the work.
    pub async fn lost(&self) -> Error {
        let reason = self.held.lease.lost().await;
        Error::Lost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Sets the permits' lease to `lease` from now; the watchdog stops renewing them.
    /// [`Error::Lost`] when one of them is no longer issued.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may leave the old lease or the new one on the
    /// store; the guard then assumes the shorter.
    pub async fn update_lease(&mut self, lease: Duration) -> Result<(), Error> {
        self.client.config.check_lease("lease", lease)?;
        let semaphores = self.client.backend.expirable_semaphores();
        if let Some(reason) = self.held.lease.lost_reason() {
            return Err(self.lost_error(reason));
        }
        self.stop_renewing();
        let sent = Instant::now();
        let valid_for = self.client.valid_for(lease);
        self.held.lease.shorten(sent, valid_for);
        let until = sent + self.client.config.retry_window;
        let issued = retry::until_answered(until, || {
            semaphores.set_lease(&self.held.name, &self.held.ids, lease)
        })
        .await?;
        if issued.iter().all(|&issued| issued) {
            self.held.lease.rearm(sent, valid_for);
            self.lease = lease;
            Ok(())
        } else {
            self.held.lease.mark_lost(LostReason::OwnerGone);
            Err(self.lost_error(LostReason::OwnerGone))
        }
    }

    /// Gives the permits back. [`Error::NotHeld`](crate::ErrorKind::NotHeld) (as
    /// [`Error::PermitNotIssued`]) when one of them was no longer issued: nothing is
    /// changed then, and the others come back when their lease ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs in its own task and completes if this future is
    /// dropped ([`Locks::shutdown`](crate::Locks::shutdown) waits for it).
    pub async fn release(mut self) -> Result<(), Error> {
        self.finish();
        let client = Arc::clone(&self.client);
        let name = self.held.name.clone();
        let ids = self.held.ids.clone();
        let task = self
            .client
            .supervisor
            .spawn_job(async move { give_back(&client, &name, ids).await })?;
        let released = task
            .await
            .map_err(|_| Error::protocol("the release task was cancelled"))??;
        if released {
            Ok(())
        } else {
            self.held.lease.mark_lost(LostReason::OwnerGone);
            Err(not_issued(&self.held.name, self.held.ids[0]))
        }
    }

    fn lost_error(&self, reason: LostReason) -> Error {
        Error::Lost {
            name: self.name().to_owned(),
            reason,
        }
    }

    fn stop_renewing(&self) {
        if self.held.renewing.swap(false, Ordering::AcqRel) {
            self.client
                .watchdog
                .forget(&Renewed::Permits(Arc::clone(&self.held)));
        }
    }

    /// Synchronous bookkeeping shared by `release` and `Drop`.
    fn finish(&mut self) {
        self.released = true;
        metrics::permits_held(PermitKind::Expirable, -(self.held.ids.len() as f64));
        self.stop_renewing();
        self.client.leased.remove(&self.held);
    }
}

impl Drop for LeasedPermits {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.finish();
        if self.held.lease.lost_reason().is_none() {
            release_unawaited(
                &self.client,
                &self.held.name,
                self.held.ids.clone(),
                "dropped permits",
            );
        }
    }
}
