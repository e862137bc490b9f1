//! [`ExpirableSemaphore`]: a semaphore whose permits have ids and leases (Java's
//! `PermitExpirableSemaphore`, shared), and the wait for them; their guard is
//! [`LeasedPermits`].

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    Capabilities, ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, PermitReservation,
    ReturnRequest,
};
use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::locks::lease::Lease;
use crate::metrics::{self, PermitKind};
use crate::notify::Listener;
use crate::sync::leased_permits::{LeasedPermits, Terms, give_back, not_issued};
use crate::sync::semaphore::check_count;
use crate::sync::starvation::{AttemptTicket, Starvation};
use crate::wait::{self, Driver, InFlight, Settle, Step, Wait};
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
        self.named.open()?;
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
        self.named.open()?;
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
            renewed: false,
        }
    }

    /// One attempt, no waiting, renewed by the watchdog (Java's `tryAcquire()`):
    /// `Ok(None)` when fewer than `permits` are available.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit.
    pub async fn try_acquire(&self, permits: u64) -> Result<Option<LeasedPermits>, Error> {
        self.acquire_within(permits, Wait::Never, Lease::Watchdog)
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

    async fn acquire_within(
        &self,
        permits: u64,
        wait: Wait,
        lease: Lease,
    ) -> Result<Option<LeasedPermits>, Error> {
        let is_try = matches!(wait, Wait::Never);
        let acquiring = self.take(permits, wait, lease);
        metrics::measured_permits(PermitKind::Expirable, is_try, acquiring).await
    }

    async fn take(
        &self,
        permits: u64,
        wait: Wait,
        lease: Lease,
    ) -> Result<Option<LeasedPermits>, Error> {
        let (_, name) = self.parts()?;
        if permits == 0 || permits > MAX_PERMITS_PER_ACQUISITION {
            return Err(Error::invalid_argument(
                "permits",
                format!("must be between 1 and {MAX_PERMITS_PER_ACQUISITION}"),
            ));
        }
        let client = self.client();
        if client.supervisor.is_closed() {
            return Err(Error::ShutDown);
        }
        let starvation = Starvation::new(client, name, true);
        let Some(_head) = super::semaphore_turn(client, name, wait).await else {
            return Ok(None);
        };
        let (lease, renew) = lease.terms(&client.config);
        let terms = Terms {
            permits,
            lease,
            renew,
        };
        let mut issuing = Issuing {
            client,
            name,
            terms,
            starvation,
        };
        let served = wait::run(&mut issuing, wait, &mut None).await?;
        Ok(served.map(|served| served.held))
    }
}

/// One wait for expirable permits, in the wait engine.
struct Issuing<'a> {
    client: &'a Arc<Inner>,
    name: &'a LockName,
    terms: Terms,
    starvation: Starvation,
}

impl Driver for Issuing<'_> {
    type Held = LeasedPermits;

    async fn attempt(&mut self) -> Result<Step<LeasedPermits>, Error> {
        let (reserve, ticket) = self.starvation.next_attempt();
        match attempt(self.client, self.name, self.terms, reserve, ticket).await? {
            Attempt::Issued(leased) => {
                self.starvation.granted();
                Ok(Step::Held(leased))
            }
            // Expired permits come back without a notification until some operation
            // reclaims them: the earliest expiry is a wake-up of its own.
            Attempt::Busy(next_expiry) => Ok(Step::busy(
                next_expiry.map(|expiry| expiry + Duration::from_millis(1)),
            )),
        }
    }

    fn subscribe(&self) -> impl Future<Output = Result<Listener, Error>> + Send + 'static {
        let (backend, name) = (Arc::clone(&self.client.backend), self.name.clone());
        let retry_until = Instant::now() + self.client.config.retry_window;
        async move {
            let semaphores = backend.expirable_semaphores();
            retry::until_answered(retry_until, || semaphores.listen(&name)).await
        }
    }

    fn also_wake(&self) -> impl Future<Output = ()> + Send {
        self.starvation.refresh()
    }
}

enum Attempt {
    Issued(LeasedPermits),
    Busy(Option<Duration>),
}

/// One attempt, an [`InFlight`] request: permits issued after the caller went away,
/// or by an attempt whose answer never came, are given back. It keeps `ticket` until it
/// is over.
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
    let (backend, task_name, task_request) =
        (Arc::clone(&client.backend), name.clone(), request.clone());
    // The same ids each time: permits issued by a run whose reply was lost are found
    // issued, not taken again.
    let until = Instant::now() + client.config.retry_window;
    let call = Box::pin(async move {
        let semaphores = backend.expirable_semaphores();
        retry::until_answered(until, || semaphores.try_issue(&task_name, &task_request)).await
    });
    let give_back = GiveBack {
        client: Arc::clone(client),
        name: name.clone(),
        ids: request.ids.clone(),
    };
    let issue = InFlight::new(call, give_back, &client.supervisor)
        .keeping(ticket)
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

/// Gives back permits issued to nobody: their caller went away, or their answer never
/// came (their lease would bring them back, later).
#[derive(Clone)]
struct GiveBack {
    client: Arc<Inner>,
    name: LockName,
    ids: Vec<PermitId>,
}

const ISSUED_TO_NOBODY: &str = "permits issued to nobody";

impl Settle<Issue> for GiveBack {
    async fn settle(self, answer: Option<Issue>) {
        if matches!(answer, None | Some(Issue::Issued)) {
            let count = u64::try_from(self.ids.len()).unwrap_or(u64::MAX);
            if let Err(err) = give_back(&self.client, &self.name, self.ids).await {
                events::permits_not_released(&self.name, count, ISSUED_TO_NOBODY, &err);
            }
        }
    }

    fn unsettled(&self, err: &Error) {
        let count = u64::try_from(self.ids.len()).unwrap_or(u64::MAX);
        events::permits_not_released(&self.name, count, ISSUED_TO_NOBODY, err);
    }
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
    /// Whether the watchdog renews `lease` (set) or the client's watchdog lease (unset).
    renewed: bool,
}

impl fmt::Debug for PermitAcquisition<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitAcquisition")
            .field("semaphore", &self.semaphore)
            .field("permits", &self.permits)
            .field("wait", &self.wait)
            .field("lease", &self.lease)
            .field("renewed", &self.renewed)
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
    /// if the guard is still alive. Replaces an earlier
    /// [`watchdog_lease`](PermitAcquisition::watchdog_lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self.renewed = false;
        self
    }

    /// Renews the permits while the guard lives, each renewal for `lease` (every third
    /// of it) instead of the client's watchdog lease: a process that dies holding them
    /// gives them back after `lease` at most. Replaces an earlier
    /// [`lease`](PermitAcquisition::lease).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self.renewed = true;
        self
    }

    async fn run(self) -> Result<LeasedPermits, Error> {
        let wait = match self.wait {
            Some(wait) => {
                check_bound("wait", wait)?;
                Wait::at_most(wait)
            }
            None => Wait::Forever,
        };
        let semaphore = self.semaphore;
        let lease = Lease::asked(self.lease, self.renewed, &semaphore.client().config)?;
        match semaphore.acquire_within(self.permits, wait, lease).await? {
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
