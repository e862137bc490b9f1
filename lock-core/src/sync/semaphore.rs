//! [`Semaphore`]: bounded concurrency across services (Java's `Semaphore`, shared), and
//! [`Permits`], the guard that gives taken permits back.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{
    Capabilities, PermitAnswer, PermitRequest, PermitReservation, RequestId, SemaphoreBackend,
};
use crate::client::named::Named;
use crate::client::shared::Inner;
use crate::config::check_bound;
use crate::metrics::{self, PermitKind};
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
        let (semaphores, name) = self.parts()?;
        semaphores.drain(name).await
    }

    /// Waits until `permits` are taken, as long as it takes.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future never keeps a permit; permits granted after the
    /// drop are given back in the background.
    pub async fn acquire(&self, permits: u64) -> Result<Permits, Error> {
        self.acquire_until(permits, None)
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
        self.acquire_until(permits, Some(Instant::now())).await
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
        self.acquire_until(permits, Some(Instant::now() + wait))
            .await
    }

    async fn acquire_until(
        &self,
        permits: u64,
        deadline: Option<Instant>,
    ) -> Result<Option<Permits>, Error> {
        let acquiring = self.take_until(permits, deadline);
        metrics::measured_permits(PermitKind::Plain, deadline, acquiring).await
    }

    async fn take_until(
        &self,
        permits: u64,
        deadline: Option<Instant>,
    ) -> Result<Option<Permits>, Error> {
        let (semaphores, name) = self.parts()?;
        check_count("permits", permits)?;
        let client = &self.named.client;
        if client.supervisor.is_closed() {
            return Err(Error::ShutDown);
        }
        if permits == 0 {
            return Ok(Some(Permits::new(client, name, 0, RequestId::random())));
        }
        let expired = || deadline.is_some_and(|deadline| Instant::now() >= deadline);
        let starvation = Starvation::new(client, name, false);
        let Some(head) = client.semaphore_turns.wait(name, deadline).await else {
            return Ok(None);
        };
        // This client's turn, held while this waiter may be served: a request beyond
        // the semaphore's peak gives it up to the waiters behind (second review, N6).
        let mut head = Some(head);
        // The first attempt is never cut short by the deadline: a try makes exactly one.
        let mut beyond_peak = false;
        match attempt(client, name, permits, None, None).await? {
            (PermitAnswer::Taken, grant) => {
                return Ok(Some(Permits::new(client, name, permits, grant)));
            }
            (PermitAnswer::BeyondPeak, _) => (head, beyond_peak) = (None, true),
            _ => {}
        }
        if expired() {
            return Ok(None);
        }
        // Said once per wait: nothing else would tell a caller why it never gets them.
        if beyond_peak {
            events::waiting_beyond_peak(name, permits);
        }
        let waiting = async {
            let listener = semaphores.listen(name).await?;
            loop {
                let notified = listener.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                // Also closes the race with a release between the first attempt and
                // the subscription.
                let reserve = starvation.reserve();
                let ticket = starvation.attempt_ticket();
                match attempt(client, name, permits, reserve, Some(ticket)).await? {
                    (PermitAnswer::Taken, grant) => {
                        starvation.granted();
                        return Ok(Some(Permits::new(client, name, permits, grant)));
                    }
                    (PermitAnswer::BeyondPeak, _) => head = None,
                    _ => {}
                }
                // Biased, the notification first: see `acquire::ask`.
                tokio::select! {
                    biased;
                    () = notified => {}
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

pub(crate) fn check_count(argument: &'static str, count: u64) -> Result<(), Error> {
    if i64::try_from(count).is_err() {
        return Err(Error::invalid_argument(
            argument,
            "must fit in a signed 64-bit count",
        ));
    }
    Ok(())
}

/// One attempt, run in a task of its own: the store's answer, and the id of the grant it
/// made when the permits were taken. If the caller goes away before the answer, a grant
/// is given back instead of being kept by nobody, and so is one whose answer never came.
/// The task keeps `ticket` (see [`Starvation::attempt_ticket`]) until the attempt is
/// over.
async fn attempt(
    client: &Arc<Inner>,
    name: &LockName,
    permits: u64,
    reserve: Option<PermitReservation>,
    ticket: Option<AttemptTicket>,
) -> Result<(PermitAnswer, RequestId), Error> {
    let task_client = Arc::clone(client);
    let task_name = name.clone();
    let window = client.config.retry_window;
    let request = PermitRequest::new(permits, window).reserving(reserve);
    let job = async move {
        let _ticket = ticket;
        let semaphores = task_client.backend.semaphores();
        let until = Instant::now() + window;
        let taken =
            retry::until_answered(until, || semaphores.try_acquire(&task_name, request)).await;
        if retry::unanswered(&taken) {
            // Plain permits have no lease: a grant nobody learnt of would be lost for
            // good. Its end gives it back if it was made.
            let of = "a grant whose answer never came";
            release_unawaited(&task_client, &task_name, (permits, request.id), of);
        }
        taken.map(|answer| (answer, request.id))
    };
    let orphan_client = Arc::clone(client);
    let orphan_name = name.clone();
    detached(
        client,
        job,
        move |(answer, grant): (PermitAnswer, RequestId)| {
            if answer.taken() {
                // Nobody is waiting for these permits any more.
                let of = "permits granted to nobody";
                release_unawaited(&orphan_client, &orphan_name, (permits, grant), of);
            }
        },
    )
    .await
}

/// How long a starving waiter's reservation lasts without another attempt: what a
/// waiter that died holds back from the others at most. A waiter attempts again a
/// third of this after its last attempt, released permits or not.
const RESERVATION_KEPT_FOR: Duration = Duration::from_secs(3);

/// One waiting acquisition's starvation: once it has waited past the client's
/// threshold, its attempts reserve the permits it asks for ([`PermitReservation`]), and
/// it attempts again before its reservation lapses even if nothing is released. A wait
/// that ends without the permits (its deadline, or its future dropped) takes its
/// reservation back in the background, so that it holds nothing back from the others.
pub(crate) struct Starvation {
    client: Arc<Inner>,
    name: LockName,
    expirable: bool,
    waiter: RequestId,
    since: Instant,
    threshold: Option<Duration>,
    reserved: AtomicBool,
    granted: AtomicBool,
    /// Closed once the latest attempt is over: a cancellation sent before would reach
    /// the store first, and the attempt would then reserve again, for a waiter gone.
    attempt_done: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

/// Kept by an attempt's task until the attempt is over (see
/// [`Starvation::attempt_ticket`]).
pub(crate) type AttemptTicket = oneshot::Sender<()>;

impl Starvation {
    /// The starvation of a wait for permits of `name`, of the expirable kind or not.
    pub(crate) fn new(client: &Arc<Inner>, name: &LockName, expirable: bool) -> Self {
        Self {
            client: Arc::clone(client),
            name: name.clone(),
            expirable,
            waiter: RequestId::random(),
            since: Instant::now(),
            threshold: client.config.starvation_threshold,
            reserved: AtomicBool::new(false),
            granted: AtomicBool::new(false),
            attempt_done: std::sync::Mutex::new(None),
        }
    }

    /// A ticket for the attempt about to be sent: if the wait ends without the permits,
    /// its reservation is cancelled only once the attempt's task dropped the ticket.
    pub(crate) fn attempt_ticket(&self) -> AttemptTicket {
        let (ticket, done) = oneshot::channel();
        *self
            .attempt_done
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(done);
        ticket
    }

    /// The reservation to send with the next attempt, once the threshold passed.
    pub(crate) fn reserve(&self) -> Option<PermitReservation> {
        let waited = self.since.elapsed();
        let starving = self.threshold.is_some_and(|threshold| waited >= threshold);
        if starving {
            self.reserved.store(true, Ordering::Relaxed);
        }
        starving.then(|| PermitReservation::new(self.waiter, waited, RESERVATION_KEPT_FOR))
    }

    /// Records that the permits were granted: the grant ended any reservation.
    pub(crate) fn granted(&self) {
        self.granted.store(true, Ordering::Relaxed);
    }

    /// Resolves when the waiter must attempt again even if nothing was released: to
    /// keep the reservation it sent (`reserve`), or to make one once the threshold
    /// passes; never when reservations are off.
    pub(crate) async fn refresh(&self, reserve: Option<PermitReservation>) {
        match (reserve, self.threshold) {
            (Some(reserve), _) => tokio::time::sleep(reserve.kept_for / 3).await,
            (None, Some(threshold)) => tokio::time::sleep_until(self.since + threshold).await,
            (None, None) => std::future::pending().await,
        }
    }
}

impl Drop for Starvation {
    fn drop(&mut self) {
        if !self.reserved.load(Ordering::Relaxed) || self.granted.load(Ordering::Relaxed) {
            return;
        }
        let client = Arc::clone(&self.client);
        let (name, waiter, expirable) = (self.name.clone(), self.waiter, self.expirable);
        let task_name = name.clone();
        let attempt_done = self
            .attempt_done
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let cancelled = self.client.supervisor.spawn_job(async move {
            if let Some(attempt_done) = attempt_done {
                // Only "the attempt ended" matters, not how: a closed channel says it.
                let _ = attempt_done.await;
            }
            let backend = &client.backend;
            let cancelled = if expirable {
                let semaphores = backend.expirable_semaphores();
                semaphores.cancel_reservation(&task_name, waiter).await
            } else {
                let semaphores = backend.semaphores();
                semaphores.cancel_reservation(&task_name, waiter).await
            };
            if let Err(err) = cancelled {
                crate::events::reservation_not_cancelled(&task_name, &err);
            }
        });
        if let Err(err) = cancelled {
            crate::events::reservation_not_cancelled(&name, &err);
        }
    }
}

/// Runs `job` in a task of its own and returns its answer; when the caller goes away
/// before it took the answer, `orphaned` gets the answer instead (to give back what it
/// granted). That includes a caller cancelled after the answer was sent but before it
/// was read: the answer travels in an [`Unclaimed`], which hands itself to `orphaned`
/// when it is dropped unread.
pub(crate) async fn detached<T, J, O>(client: &Inner, job: J, orphaned: O) -> Result<T, Error>
where
    T: Send + 'static,
    J: Future<Output = Result<T, Error>> + Send + 'static,
    O: FnOnce(T) + Send + 'static,
{
    let (reply, answer) = oneshot::channel::<Result<Unclaimed<T, O>, Error>>();
    client.supervisor.spawn_job(async move {
        // A send that fails drops the answer, which gives it to `orphaned`.
        let _unread = reply.send(job.await.map(|value| Unclaimed::new(value, orphaned)));
    })?;
    answer
        .await
        .map_err(|_| Error::protocol("the attempt was cancelled"))??
        .claim()
        .ok_or_else(|| Error::protocol("an answer claimed twice"))
}

/// An answer on its way to its caller: dropped without being claimed (the caller went
/// away, before or after it was sent), it goes to its orphan handler instead.
struct Unclaimed<T, O: FnOnce(T)> {
    value: Option<(T, O)>,
}

impl<T, O: FnOnce(T)> Unclaimed<T, O> {
    fn new(value: T, orphaned: O) -> Self {
        Self {
            value: Some((value, orphaned)),
        }
    }

    /// The answer, taken by its caller (`None` cannot happen: only this and drop take
    /// it, each once).
    fn claim(mut self) -> Option<T> {
        self.value.take().map(|(value, _)| value)
    }
}

impl<T, O: FnOnce(T)> Drop for Unclaimed<T, O> {
    fn drop(&mut self) {
        if let Some((value, orphaned)) = self.value.take() {
            orphaned(value);
        }
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

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::Poll;

    use super::detached;
    use crate::Error;
    use crate::memory::MemoryBackend;

    /// An attempt whose answer was sent but never read (its caller was cancelled in the
    /// wake-up that brought the answer) hands the answer to its orphan handler: a grant
    /// nobody will use is given back, never lost.
    #[tokio::test(flavor = "current_thread")]
    async fn an_answer_sent_but_never_read_goes_to_its_orphan_handler() {
        let client = Arc::clone(&crate::Locks::new(Arc::new(MemoryBackend::new())).inner);
        let (orphaned, orphans) = std::sync::mpsc::channel();
        let job = async { Ok::<_, Error>(7) };
        let mut call = Box::pin(detached(&client, job, move |value| {
            orphaned.send(value).expect("the test listens");
        }));
        assert!(poll_once(call.as_mut()).await.is_pending(), "no answer yet");
        // The job runs (one thread: it runs now) and sends its answer.
        tokio::task::yield_now().await;
        drop(call);
        assert_eq!(orphans.try_recv(), Ok(7), "an unread answer was dropped");

        // An answer read by its caller is not orphaned.
        let (orphaned, orphans) = std::sync::mpsc::channel();
        let job = async { Ok::<_, Error>(8) };
        let answer = detached(&client, job, move |value| {
            orphaned.send(value).expect("the test listens");
        })
        .await;
        assert_eq!(answer.expect("answered"), 8);
        assert!(orphans.try_recv().is_err(), "a claimed answer was orphaned");
    }

    async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
    }
}
