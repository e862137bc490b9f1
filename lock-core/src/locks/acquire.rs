//! Acquiring a lock: the lock kinds' [driver](crate::wait::Driver) of the wait engine.
//!
//! A client's waiters for one mutex (or write lock) ask the backend one at a time, in
//! arrival order (see [`crate::locks::turns`]): the first in line tries and listens, the
//! others wait in the process, and a release wakes the one that asks rather than all of
//! them.
//!
//! Each attempt is polled by its caller; if the caller's future is dropped while a grant
//! is on its way, the rest of the attempt runs in the background and releases what it
//! was granted instead of leaking a hold (see [`super::attempt`]). A waiter told it was
//! handed the lock holds from the notice (see [`super::handed`]). A bounded wait rides
//! out a store it cannot reach (see [`rides_out`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::{Attempt, QueuedWaiter, attempt};
use super::handed::{Asked, woken};
use crate::backend::{AcquireRequest, RequestId};
use crate::client::shared::Inner;
use crate::locks::guard::Guard;
use crate::locks::lease::Lease;
use crate::locks::turns::{Bell, Turn};
use crate::metrics::{self, AcquireOutcome};
use crate::notify::Listener;
use crate::wait::{self, Driver, Step, Wait};
use crate::{Error, LockName, LockRef};
use crate::{events, retry};

/// Acquires `lock`, waiting as allowed. `Ok(None)` means the wait ran out.
///
/// A plain function around one async block rather than an `async fn` over nested ones:
/// the block uses its captures in place, where each `async fn` layer keeps its own copy
/// of its arguments, and this future is most of what each of thousands of waiters costs.
#[allow(
    clippy::manual_async_fn,
    reason = "an async fn would keep its arguments twice in the future"
)]
pub(crate) fn acquire(
    client: &Arc<Inner>,
    lock: LockRef,
    lease: Lease,
    wait: Wait,
) -> impl Future<Output = Result<Option<Guard>, Error>> + Send + '_ {
    async move {
        let started = Instant::now();
        let kind = lock.kind;
        let _waiting = (!matches!(wait, Wait::Never)).then(|| metrics::lock_waiting(kind));
        let span = tracing::debug_span!(
            target: crate::TRACING_TARGET,
            "acquire",
            kind = %lock.kind,
            name = %lock.name,
            owner = %lock.owner,
        );
        let result = 'acquired: {
            if client.supervisor.is_closed() {
                break 'acquired Err(Error::ShutDown);
            }
            if let Err(err) = within_the_stores_longest_lease(client, lease) {
                break 'acquired Err(err);
            }
            // A watchdog that died with its runtime is started again before anything else.
            span.in_scope(|| client.watchdog.revive(&client.watchdog_host()));
            client.announce_if_due();
            let turn = match wait_in_line(client, &lock, wait).await {
                Line::NotQueued => None,
                Line::Head(turn) => Some(turn),
                Line::WaitRanOut => break 'acquired Ok(None),
            };
            // Boxed: a waiter in line keeps only the small state above; the state of
            // asking and listening is made when its turn comes.
            let asking = ask(client, lock, lease, wait, started, turn);
            Box::pin(asking.instrument(span)).await
        };
        let elapsed = started.elapsed();
        let outcome = match &result {
            Ok(Some(_)) => AcquireOutcome::Acquired,
            Ok(None) if matches!(wait, Wait::Never) => AcquireOutcome::Busy,
            Ok(None) => AcquireOutcome::Timeout,
            Err(_) => AcquireOutcome::Error,
        };
        metrics::acquire(kind, outcome, elapsed);
        result
    }
}

/// Refuses a lease longer than the store grants ([`Capabilities::max_lease`]), before
/// anything is sent.
///
/// [`Capabilities::max_lease`]: crate::backend::Capabilities::max_lease
fn within_the_stores_longest_lease(client: &Inner, lease: Lease) -> Result<(), Error> {
    let Some(longest) = client.capabilities.max_lease else {
        return Ok(());
    };
    let argument = match lease {
        Lease::Watchdog | Lease::Renewed(_) => "watchdog_lease",
        Lease::Fixed(_) => "lease",
    };
    let (lease, _) = lease.terms(&client.config);
    if lease <= longest {
        return Ok(());
    }
    Err(Error::invalid_argument(
        argument,
        format!(
            "{lease:?} is longer than the longest lease this store grants, {longest:?} (see \
             its backend's documentation)"
        ),
    ))
}

/// The head's part of an acquisition: the wait engine, driven by [`Asking`].
async fn ask(
    client: &Arc<Inner>,
    lock: LockRef,
    lease: Lease,
    wait: Wait,
    started: Instant,
    mut turn: Option<Turn<LockName, Option<Listener>>>,
) -> Result<Option<Guard>, Error> {
    let (lease_duration, renew) = lease.terms(&client.config);
    let mut request = AcquireRequest::new(lease_duration)
        .fencing(client.config.fencing)
        .retry_window(client.config.retry_window);
    // The owner of one request alone asks under that request's id.
    if let Some(id) = lock.owner.sole_request() {
        request.id = id;
    }
    // A caller that will wait says so (a fair lock queues it, a try never queues) and
    // tells the backend when it gives up, even when its caller goes away, unless it ends
    // up holding the lock.
    let mut queued = None;
    if !matches!(wait, Wait::Never) {
        request = request.enqueue(client.config.fair_waiter_timeout);
        queued = Some(QueuedWaiter::new(client, &lock, request));
    }
    // A line's heads share one listener, passed on with the turn, and hang it on the
    // line's bell, which this client's own releases ring.
    let mut own_listener = None;
    let (slot, bell) = match turn.as_mut() {
        Some(turn) => {
            let (slot, bell) = turn.parts();
            (slot, Some(bell))
        }
        None => (&mut own_listener, None),
    };
    let mut asking = Asking {
        client,
        lock,
        wait,
        started,
        lease: (lease_duration, renew),
        request,
        latest: None,
        asked: Asked::default(),
        queued,
        unreached: None,
        bell,
        resent: false,
    };
    let Some(served) = wait::run(&mut asking, wait, slot).await? else {
        return Ok(None);
    };
    let guard = served.held;
    QueuedWaiter::served(&mut asking.queued);
    if let Some(bell) = &asking.bell {
        bell.served();
    }
    if served.waited {
        metrics::waited(asking.lock.kind, started.elapsed());
        events::acquired_after_waiting(&asking.lock, started.elapsed(), guard.fencing_token());
    } else {
        events::acquired_at_once(&guard.hold().lock, guard.fencing_token());
    }
    Ok(Some(guard))
}

/// One lock acquisition's part in the wait engine: what it asks under which id, what its
/// wake-ups bring (a hand-over), and the store it could not reach.
struct Asking<'a> {
    client: &'a Arc<Inner>,
    /// The lock as the acquisition asks for it: an owner of one request alone moves to
    /// a fresh owner with a fresh id (see [`Asking::fresh_id`]).
    lock: LockRef,
    wait: Wait,
    started: Instant,
    /// The lease asked for, and whether the watchdog renews it.
    lease: (Duration, bool),
    /// What the next attempt asks: its id is the acquisition's until that is over
    /// (ended, or perhaps undone after an unreached attempt).
    request: AcquireRequest,
    /// The latest attempt, as sent.
    latest: Option<AcquireRequest>,
    asked: Asked,
    queued: Option<QueuedWaiter>,
    /// The store's error while it cannot be reached.
    unreached: Option<Error>,
    bell: Option<Bell<'a>>,
    /// An attempt under the request's id was sent more than once.
    resent: bool,
}

impl Asking<'_> {
    /// Moves the acquisition to a fresh id, once its id is over or may be undone. An
    /// owner of one request alone moves to the fresh id's owner: the old owner's grant,
    /// if a late copy gets one, is another owner's hold, never joined to this one (see
    /// `Owner::of_request`). Its standing with the store under the old owner (a fair
    /// queue's place) is given up, and it waits on as the new owner.
    fn fresh_id(&mut self) {
        self.request = self.request.fresh_id();
        self.resent = false;
        if let Some(owner) = self.lock.owner.for_request(self.request.id) {
            self.lock.owner = owner;
            if self.queued.is_some() {
                // The old one, dropped, gives the old owner's standing up in the background.
                self.queued = Some(QueuedWaiter::new(self.client, &self.lock, self.request));
            }
        }
    }

    /// Lets the attempt wait inside a store that can ([`Capabilities::waits_in_store`]):
    /// for the caller's time left, at most [`STORE_WAIT_SLICE`].
    ///
    /// [`Capabilities::waits_in_store`]: crate::backend::Capabilities::waits_in_store
    fn waiting_in_the_store(&self, request: AcquireRequest) -> AcquireRequest {
        if !self.client.capabilities.waits_in_store {
            return request;
        }
        let slice = self.wait.deadline().map_or(STORE_WAIT_SLICE, |deadline| {
            deadline
                .saturating_duration_since(Instant::now())
                .min(STORE_WAIT_SLICE)
        });
        request.block_for(slice)
    }
}

/// The longest one attempt waits inside a store that can: an unbounded wait asks again
/// after it, so that a waiter whose client shuts down, or whose store went quiet, is not
/// held by one statement for long.
const STORE_WAIT_SLICE: Duration = Duration::from_secs(5);

impl Driver for Asking<'_> {
    type Held = Guard;

    async fn attempt(&mut self) -> Result<Step<Guard>, Error> {
        let request = if self.latest.is_some() {
            let waited = self.started.elapsed();
            let starving = self
                .client
                .config
                .starvation_threshold
                .is_some_and(|threshold| waited >= threshold);
            self.request.waiting(waited, starving)
        } else {
            self.request
        };
        let request = self.waiting_in_the_store(request);
        let numbered = self.asked.next(request);
        self.latest = Some(numbered);
        let renew = self.lease.1;
        let (client, lock, wait) = (self.client, &self.lock, self.wait);
        let queued = (self.queued.as_mut(), &mut self.resent);
        let outcome = attempt(client, lock, numbered, renew, wait, queued).await;
        Ok(match rides_out(wait, outcome, lock, &mut self.unreached)? {
            Attempt::Acquired(guard) => Step::Held(guard),
            // Reserved: the lock is free but kept for a starving waiter, who may be
            // waiting in this client behind us: every local waiter looks.
            Attempt::Busy { ttl, reserved } => Step::Busy {
                retry_in: Some(ttl.unwrap_or(client.config.watchdog_lease)),
                wake_others: reserved,
            },
            // Its id is over (a handed hold lapsed or revoked): it asks at once anew.
            Attempt::Ended => {
                self.fresh_id();
                Step::Again
            }
            // Its id may be undone (see `rides_out`): a pause, then a fresh id.
            Attempt::Unreached => {
                self.fresh_id();
                Step::busy(Some(OUTAGE_PAUSE))
            }
        })
    }

    fn subscribe(&self) -> impl Future<Output = Result<Listener, Error>> + Send + 'static {
        let (backend, lock) = (Arc::clone(&self.client.backend), self.lock.clone());
        // A subscription that was not confirmed is tried again.
        let retry_until = Instant::now() + self.client.config.retry_window;
        async move { retry::until_answered(retry_until, || backend.listen(&lock)).await }
    }

    fn at_hand(&self) -> Option<Listener> {
        self.client.backend.listener_at_hand(&self.lock)
    }

    fn acquisition(&self) -> Option<RequestId> {
        Some(self.request.id)
    }

    fn listening(&mut self, listener: &Listener) {
        if let Some(bell) = &self.bell {
            bell.hang(listener.wake_handle());
        }
    }

    /// A hand-over is made to the id the attempt carried; after an unreached attempt,
    /// whose id is being undone in the background, a hand-over to it is no grant.
    fn woken(&mut self, listener: &Listener) -> Option<Guard> {
        let latest = self.latest.filter(|latest| latest.id == self.request.id)?;
        woken(
            self.client,
            (&self.lock, listener),
            &self.asked,
            latest,
            self.lease,
        )
    }

    /// The error of the store it could not reach, if that is why, else no guard.
    fn ran_out(&mut self) -> Result<Option<Guard>, Error> {
        self.unreached.take().map_or(Ok(None), Err)
    }
}

/// A bounded wait rides out a store it cannot reach: an attempt that failed to reach it
/// (after its retry window) counts as busy, and the waiter asks again after a pause, or
/// at a notification, until its deadline, under a fresh id (the unanswered attempt's
/// grant, if it got one, is undone under the old id: a later grant under that id would
/// be undone with it; the simulation's seed 519 found that). An unbounded wait fails
/// instead, so that an outage does not hang its caller unseen; so does a try, and a wait
/// whose deadline has passed (its grant's fate is unknown: busy would not be the truth).
/// The error is kept in `unreached` (and cleared by an answer): a wait that runs out
/// while the store is unreachable reports it rather than a timeout.
fn rides_out(
    wait: Wait,
    outcome: Result<Attempt, Error>,
    lock: &LockRef,
    unreached: &mut Option<Error>,
) -> Result<Attempt, Error> {
    if outcome.is_ok() {
        *unreached = None;
    }
    match outcome {
        Err(err)
            if matches!(wait, Wait::Until(deadline) if Instant::now() < deadline)
                && err.kind() == crate::ErrorKind::Connection =>
        {
            events::attempt_failed_while_waiting(lock, &err);
            *unreached = Some(err);
            Ok(Attempt::Unreached)
        }
        other => other,
    }
}

/// How long a bounded wait pauses after an attempt that could not reach the store.
const OUTAGE_PAUSE: Duration = Duration::from_millis(500);

/// Where a waiter stands in its client's line for a mutex or a write lock.
enum Line {
    /// It does not queue: a fair lock or a reader, a try, or a reentry (which would wait
    /// for its own release).
    NotQueued,
    /// It is the one waiter of this client that asks the backend.
    Head(Turn<LockName, Option<Listener>>),
    /// The caller's wait ran out in the line.
    WaitRanOut,
}

/// This client's mutex (or writer) waiters ask the backend one at a time, in arrival
/// order: the others wait here and cost no requests, and a release wakes the one that
/// asks.
async fn wait_in_line(client: &Inner, lock: &LockRef, wait: Wait) -> Line {
    let deadline = match wait {
        Wait::Never => return Line::NotQueued,
        Wait::Until(deadline) => Some(deadline),
        Wait::Forever => None,
    };
    let Some(turns) = client.turns(lock.kind) else {
        return Line::NotQueued;
    };
    if client.holds_exclusively(lock) {
        return Line::NotQueued;
    }
    match Box::pin(turns.wait(&lock.name, deadline)).await {
        Some(turn) => Line::Head(turn),
        None => Line::WaitRanOut,
    }
}
