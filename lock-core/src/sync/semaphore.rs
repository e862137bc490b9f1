//! [`Semaphore`]: bounded concurrency across services (Java's `Semaphore`, shared), and
//! [`Permits`], the guard that gives taken permits back.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{
    Capabilities, PermitAnswer, PermitRequest, PermitReservation, RequestId, SemaphoreBackend,
};
use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::locks::turns::Turn;
use crate::metrics::{self, PermitKind};
use crate::notify::Listener;
use crate::sync::starvation::{AttemptTicket, Starvation};
use crate::wait::{self, Driver, InFlight, Settle, Step, Wait};
use crate::{Error, LockName, events, retry};

/// A handle on one semaphore: a count of available permits shared by every client of the
/// store. Cheap; no I/O. Made by [`Locks::semaphore`](crate::Locks::semaphore).
///
/// Permits have no owner and no lease: a process that dies
/// holding some keeps them from everybody until somebody adds them back. Use it for
/// budgets an operator tops up; to bound concurrent work across processes, use an
/// [`ExpirableSemaphore`](crate::ExpirableSemaphore), whose permits come back after their
/// lease.
///
/// Waiting is by notification. Within one client, waiters for one semaphore are served
/// in arrival order, and only the first of them asks the store: a waiter for many
/// permits is never overtaken by later waiters for few in the same client.
///
/// ```no_run
/// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
/// let pool = locks.semaphore("db-connections");
/// pool.try_set_permits(10).await?; // once; false when it is set already
/// let permits = pool.acquire(2).await?; // waits until two are free
/// // ... use two connections ...
/// permits.release().await?; // or drop them: given back in the background
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    named: Named,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

impl Semaphore {
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

    fn parts(&self) -> Result<(&dyn SemaphoreBackend, &LockName), Error> {
        let declared = |caps: &Capabilities| caps.semaphore;
        self.named
            .store(declared, |backend| backend.semaphores(), "semaphores")
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

    /// Adds `delta` permits (negative: takes them away, possibly below zero, as Java's
    /// `addPermits`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may or may not have changed the count.
    pub async fn add_permits(&self, delta: i64) -> Result<(), Error> {
        self.named.open()?;
        let (semaphores, name) = self.parts()?;
        semaphores.add_permits(name, delta).await.map(drop)
    }

    /// The permits available now.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads.
    pub async fn available(&self) -> Result<i64, Error> {
        let (semaphores, name) = self.parts()?;
        semaphores.available(name).await
    }

    /// Takes every available permit; returns how many (Java's `drainPermits`). They are
    /// not given back by anything but [`add_permits`](Semaphore::add_permits).
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may have drained them.
    pub async fn drain(&self) -> Result<i64, Error> {
        self.named.open()?;
        let (semaphores, name) = self.parts()?;
        semaphores.drain(name).await
    }

    /// Waits until `permits` are taken, as long as it takes.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: lock_core::Locks) -> Result<(), lock_core::Error> {
    /// let pool = locks.semaphore("db-connections");
    /// let permits = pool.acquire(2).await?; // two of the pool's permits
    /// // ... use two connections ...
    /// permits.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit; permits granted after the
    /// drop are given back in the background (as a lock's, see
    /// [`Lock`](crate::Lock#cancel-safety)).
    pub async fn acquire(&self, permits: u64) -> Result<Permits, Error> {
        self.acquire_within(permits, Wait::Forever)
            .await?
            .ok_or_else(|| Error::protocol("an unbounded wait ended without the permits"))
    }

    /// One attempt, no waiting (Java's `tryAcquire(n)`). `Ok(None)` when fewer than
    /// `permits` are available.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit.
    pub async fn try_acquire(&self, permits: u64) -> Result<Option<Permits>, Error> {
        self.acquire_within(permits, Wait::Never).await
    }

    /// Waits at most `wait` for `permits` (Java's `tryAcquire(n, wait)`). `Ok(None)` when
    /// the wait ran out.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit.
    pub async fn try_acquire_for(
        &self,
        permits: u64,
        wait: Duration,
    ) -> Result<Option<Permits>, Error> {
        check_bound("wait", wait)?;
        self.acquire_within(permits, Wait::at_most(wait)).await
    }

    async fn acquire_within(&self, permits: u64, wait: Wait) -> Result<Option<Permits>, Error> {
        let is_try = matches!(wait, Wait::Never);
        let acquiring = self.take(permits, wait);
        metrics::measured_permits(PermitKind::Plain, is_try, acquiring).await
    }

    async fn take(&self, permits: u64, wait: Wait) -> Result<Option<Permits>, Error> {
        let (_, name) = self.parts()?;
        check_count("permits", permits)?;
        let client = &self.named.client;
        if client.supervisor.is_closed() {
            return Err(Error::ShutDown);
        }
        if permits == 0 {
            return Ok(Some(Permits::new(client, name, 0, RequestId::random())));
        }
        let starvation = Starvation::new(client, name, false);
        let Some(head) = super::semaphore_turn(client, name, wait).await else {
            return Ok(None);
        };
        let mut taking = Taking {
            client,
            name,
            permits,
            starvation,
            head,
            beyond_peak: false,
        };
        let served = wait::run(&mut taking, wait, &mut None).await?;
        Ok(served.map(|served| served.held))
    }
}

/// One wait for plain permits, in the wait engine.
struct Taking<'a> {
    client: &'a Arc<Inner>,
    name: &'a LockName,
    permits: u64,
    starvation: Starvation,
    /// This client's turn, held while this waiter may be served: a request beyond the
    /// semaphore's peak gives it up to the waiters behind (second review, N6).
    head: Option<Turn<LockName, ()>>,
    /// The first attempt asked for more than the semaphore ever had at once.
    beyond_peak: bool,
}

impl Driver for Taking<'_> {
    type Held = Permits;

    async fn attempt(&mut self) -> Result<Step<Permits>, Error> {
        let (reserve, ticket) = self.starvation.next_attempt();
        match attempt(self.client, self.name, self.permits, reserve, ticket).await? {
            (PermitAnswer::Taken, grant) => {
                self.starvation.granted();
                let permits = Permits::new(self.client, self.name, self.permits, grant);
                Ok(Step::Held(permits))
            }
            (PermitAnswer::BeyondPeak, _) => {
                self.head = None;
                self.beyond_peak = true;
                Ok(Step::busy(None))
            }
            _ => Ok(Step::busy(None)),
        }
    }

    fn subscribe(&self) -> impl Future<Output = Result<Listener, Error>> + Send + 'static {
        let (backend, name) = (Arc::clone(&self.client.backend), self.name.clone());
        let retry_until = Instant::now() + self.client.config.retry_window;
        async move { retry::until_answered(retry_until, || backend.semaphores().listen(&name)).await }
    }

    fn listening(&mut self, _: &Listener) {
        // Said once per wait: nothing else would tell a caller why it never gets them.
        if self.beyond_peak {
            events::waiting_beyond_peak(self.name, self.permits);
        }
    }

    fn also_wake(&self) -> impl Future<Output = ()> + Send {
        self.starvation.refresh()
    }
}

pub(crate) fn check_count(argument: &'static str, count: u64) -> Result<(), Error> {
    if i64::try_from(count).is_err() {
        return Err(Error::invalid_argument(
            argument,
            "must fit in a signed 64-bit count",
        ));
    }
    Ok(())
}

/// One attempt: the store's answer, and the id of the grant it made when the permits
/// were taken. An [`InFlight`] request: if the caller goes away before the answer, a
/// grant is given back instead of being kept by nobody, and so is one whose answer
/// never came. It keeps `ticket` (see [`Starvation::next_attempt`]) until it is over.
async fn attempt(
    client: &Arc<Inner>,
    name: &LockName,
    permits: u64,
    reserve: Option<PermitReservation>,
    ticket: Option<AttemptTicket>,
) -> Result<(PermitAnswer, RequestId), Error> {
    let window = client.config.retry_window;
    let request = PermitRequest::new(permits, window).reserving(reserve);
    let (backend, task_name) = (Arc::clone(&client.backend), name.clone());
    let until = Instant::now() + window;
    let call = Box::pin(async move {
        retry::until_answered(until, || {
            backend.semaphores().try_acquire(&task_name, request)
        })
        .await
    });
    let give_back = GiveBack {
        client: Arc::clone(client),
        name: name.clone(),
        permits,
        grant: request.id,
    };
    let answer = InFlight::new(call, give_back, &client.supervisor)
        .keeping(ticket)
        .await?;
    Ok((answer, request.id))
}

/// Gives back the permits of a grant nobody will hold: its caller went away, or its
/// answer never came. Plain permits have no lease: a grant nobody learnt of would be
/// lost for good.
#[derive(Clone)]
struct GiveBack {
    client: Arc<Inner>,
    name: LockName,
    permits: u64,
    grant: RequestId,
}

const GRANTED_TO_NOBODY: &str = "permits granted to nobody";

impl Settle<PermitAnswer> for GiveBack {
    async fn settle(self, answer: Option<PermitAnswer>) {
        if answer.is_none_or(PermitAnswer::taken) {
            let released = release(&self.client, &self.name, self.grant, RELEASE_PERSISTENCE);
            if let Err(err) = released.await {
                events::permits_not_released(&self.name, self.permits, GRANTED_TO_NOBODY, &err);
            }
        }
    }

    fn unsettled(&self, err: &Error) {
        events::permits_not_released(&self.name, self.permits, GRANTED_TO_NOBODY, err);
    }
}

/// Gives back the `permits` of `grant` in the background, reporting a failure
/// through `tracing`.
fn release_unawaited(
    client: &Arc<Inner>,
    name: &LockName,
    (permits, grant): (u64, RequestId),
    of: &'static str,
) {
    let task_client = Arc::clone(client);
    let task_name = name.clone();
    let give_back =
        async move { release(&task_client, &task_name, grant, RELEASE_PERSISTENCE).await };
    in_background(client, name, permits, of, give_back);
}

/// Runs `give_back` (of `permits` permits of `name`) in a task of its own, reporting a
/// failure through `tracing`: nobody awaits it.
pub(crate) fn in_background<T>(
    client: &Inner,
    name: &LockName,
    permits: u64,
    of: &'static str,
    give_back: impl Future<Output = Result<T, Error>> + Send + 'static,
) {
    let task_name = name.clone();
    let spawned = client.supervisor.spawn_job(async move {
        if let Err(err) = give_back.await {
            crate::events::permits_not_released(&task_name, permits, of, &err);
        }
    });
    if let Err(err) = spawned {
        crate::events::permits_not_released(name, permits, of, &err);
    }
}

/// How long the end of a plain-permit grant is sent again while its outcome is unknown:
/// plain permits have no lease, so a release given up would lose them for good, and the
/// end of a grant can be sent again for as long as it takes (it ends the grant at most
/// once). [`Locks::shutdown`](crate::Locks::shutdown) waits for it, at most this long.
const RELEASE_PERSISTENCE: Duration = Duration::from_secs(300);

/// Ends `grant` of `name`, giving its permits back, sent again for `persistence` while
/// its outcome is unknown.
async fn release(
    client: &Inner,
    name: &LockName,
    grant: RequestId,
    persistence: Duration,
) -> Result<i64, Error> {
    let semaphores = client.backend.semaphores();
    let request = PermitRequest::of_grant(grant, client.config.retry_window);
    let until = Instant::now() + persistence;
    retry::until_answered(until, || semaphores.release(name, request)).await
}

/// Permits taken from a [`Semaphore`]. Give them back with [`Permits::release`];
/// dropping them gives them back in the background.
#[must_use = "dropping permits gives them back at once"]
#[clippy::has_significant_drop]
pub struct Permits {
    client: Arc<Inner>,
    name: LockName,
    count: u64,
    /// The acquisition that took them: their release ends its grant.
    grant: RequestId,
    released: bool,
}

impl fmt::Debug for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permits")
            .field("name", &self.name)
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl Permits {
    fn new(client: &Arc<Inner>, name: &LockName, count: u64, grant: RequestId) -> Self {
        metrics::permits_held(PermitKind::Plain, count as f64);
        Self {
            client: Arc::clone(client),
            name: name.clone(),
            count,
            grant,
            released: false,
        }
    }

    /// How many permits these are.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// Gives the permits back.
    ///
    /// Their grant is ended in the store exactly once, however often the request has to
    /// be sent. While its outcome is unknown (the store cannot be reached) it is sent
    /// again in the background, for minutes: plain permits have no lease, and a release
    /// given up would lose them for good. This returns a
    /// [`Connection`](crate::ErrorKind::Connection) error once the retry window has
    /// passed without an answer; the release goes on.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs in its own task and completes if this future is
    /// dropped ([`Locks::shutdown`](crate::Locks::shutdown) waits for it).
    pub async fn release(mut self) -> Result<(), Error> {
        self.released = true;
        metrics::permits_held(PermitKind::Plain, -(self.count as f64));
        if self.count == 0 {
            return Ok(());
        }
        let client = Arc::clone(&self.client);
        let name = self.name.clone();
        let grant = self.grant;
        let task = self
            .client
            .supervisor
            .spawn_job(async move { release(&client, &name, grant, RELEASE_PERSISTENCE).await })?;
        let window = self.client.config.retry_window;
        match tokio::time::timeout(window, task).await {
            Ok(done) => done
                .map_err(|_| Error::protocol("the release task was cancelled"))?
                .map(drop),
            Err(_) => Err(Error::connection(
                "giving permits back",
                "no answer within the retry window; the release is sent again in the \
                 background",
            )),
        }
    }
}

impl Drop for Permits {
    fn drop(&mut self) {
        if !self.released {
            metrics::permits_held(PermitKind::Plain, -(self.count as f64));
        }
        if !self.released && self.count > 0 {
            let grant = (self.count, self.grant);
            release_unawaited(&self.client, &self.name, grant, "dropped permits");
        }
    }
}
