//! The waiting state machine shared by every lock kind.
//!
//! Try; if busy and the caller may wait, subscribe to the lock's channel and try again
//! (a release between the first try and the subscription would otherwise be missed);
//! then sleep until a notification arrives or the lock's ttl (or the caller's wait) runs
//! out, and repeat. The notification future is armed before every retry, so a release
//! that lands during the retry still wakes the waiter.
//!
//! A client's waiters for one mutex (or write lock) ask the backend one at a time, in
//! arrival order (see
//! [`crate::locks::turns`]): the first in line tries and listens, the others wait in the
//! process, and a release wakes the one that asks rather than all of them.
//!
//! Each attempt is polled by its caller; if the caller's future is dropped while a grant
//! is on its way, the rest of the attempt runs in the background and releases what it
//! was granted instead of leaking a hold.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Acquire, AcquireRequest, Backend, ReleaseRequest, RequestId};
use crate::client::shared::{Granted, Inner};
use crate::locks::guard::Guard;
use crate::locks::hold::Hold;
use crate::locks::turns::Bell;
use crate::locks::turns::Turn;
use crate::metrics::{self, AcquireOutcome};
use crate::notify::{Handed, Listener};
use crate::{Error, LockName, LockRef, LostReason};
use crate::{events, retry};

/// How long a caller is prepared to wait.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Wait {
    /// One attempt.
    Never,
    /// Until this instant.
    Until(Instant),
    /// Until acquired.
    Forever,
}

/// The lease of a new hold.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lease {
    /// The client's watchdog lease, renewed while the guard lives.
    Watchdog,
    /// A caller's lease, never renewed.
    Fixed(Duration),
}

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
    let (argument, lease) = match lease {
        Lease::Watchdog => ("watchdog_lease", client.config.watchdog_lease),
        Lease::Fixed(lease) => ("lease", lease),
    };
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

/// The head's part of an acquisition: try, listen, and try again on every release.
#[allow(
    clippy::too_many_lines,
    reason = "one wait loop read top to bottom; issue 49's wait engine splits it into drivers"
)]
async fn ask(
    client: &Arc<Inner>,
    lock: LockRef,
    lease: Lease,
    wait: Wait,
    started: Instant,
    mut turn: Option<Turn<LockName, Option<Listener>>>,
) -> Result<Option<Guard>, Error> {
    let (lease_duration, renew) = match lease {
        Lease::Watchdog => (client.config.watchdog_lease, true),
        Lease::Fixed(d) => (d, false),
    };
    let mut request = AcquireRequest::new(lease_duration)
        .fencing(client.config.fencing)
        .retry_window(client.config.retry_window);
    // A caller that will wait says so (a fair lock queues it, a try never queues) and
    // tells the backend when it gives up, even when its caller goes away, unless it ends
    // up holding the lock.
    let mut queued = None;
    if !matches!(wait, Wait::Never) {
        request = request.enqueue(client.config.fair_waiter_timeout);
        queued = Some(QueuedWaiter::new(client, &lock, request));
    }
    // Attempts are boxed: a waiter spends its life between attempts, and its resident
    // state should not reserve room for one (thousands of waiters add up).
    // Bounded by the caller's wait as every later attempt is: a server that does not
    // answer (paused, or a connection being re-established) must not hold a bounded
    // wait past its deadline for a response timeout or two. A try is never cut short.
    let mut asked = Asked::default();
    let numbered = asked.next(request);
    let first = attempt(client, &lock, numbered, renew, wait, queued.as_mut());
    let Some(first) = Box::pin(within(wait, ATTEMPT_SLACK, first)).await else {
        return Ok(None);
    };
    let mut unreached = None; // the store's error while it cannot be reached
    match rides_out(wait, first, &lock, &mut unreached)? {
        Attempt::Acquired(guard) => return Ok(Some(at_once(&mut queued, turn.as_ref(), guard))),
        Attempt::Ended | Attempt::Unreached => request = request.fresh_id(),
        Attempt::Busy { .. } => {}
    }
    if matches!(wait, Wait::Never) || expired(wait) {
        return ran_out(unreached);
    }
    // Subscribing and every attempt end with the caller's wait: a slow subscription (a
    // connection being re-established) must not hold a bounded wait past its deadline.
    // Both are cancel-safe. A subscription that was not confirmed is tried again.
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
    let Some(listener) = listen(client, &lock, wait, slot).await else {
        return ran_out(unreached);
    };
    let listener = listener?;
    if let Some(bell) = &bell {
        bell.hang(listener.wake_handle());
    }
    loop {
        let notified = listener.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        // The first retry closes the race with a release that happened before the
        // subscription; later ones follow a notification or a ttl.
        let waited = started.elapsed();
        let starving = client
            .config
            .starvation_threshold
            .is_some_and(|threshold| waited >= threshold);
        let numbered = asked.next(request.waiting(waited, starving));
        let retry = attempt(client, &lock, numbered, renew, wait, queued.as_mut());
        // An attempt begun before the deadline (the last one begins right at it, after
        // the sleep) may take a round trip's slack to be answered.
        let Some(outcome) = Box::pin(within(wait, ATTEMPT_SLACK, retry)).await else {
            return ran_out(unreached);
        };
        let ttl = match rides_out(wait, outcome, &lock, &mut unreached)? {
            Attempt::Acquired(guard) => {
                return Ok(Some(served(
                    &mut queued,
                    bell.as_ref(),
                    (&lock, started),
                    guard,
                )));
            }
            Attempt::Busy { ttl, reserved } => {
                if reserved {
                    // The lock is free but reserved for a starving waiter, who may be
                    // waiting in this client behind us: let every local waiter look,
                    // then listen afresh so that this wake-up does not wake us again.
                    listener.wake_all();
                    notified.set(listener.notified());
                    notified.as_mut().enable();
                }
                ttl
            }
            // Its id is over (a handed hold lapsed or revoked): it asks at once anew.
            Attempt::Ended => {
                request = request.fresh_id();
                continue;
            }
            // Its id may be undone (see `rides_out`): a pause, then a fresh id.
            Attempt::Unreached => {
                request = request.fresh_id();
                Some(OUTAGE_PAUSE)
            }
        };
        let Some(sleep_for) = next_sleep(wait, ttl, client.config.watchdog_lease) else {
            return ran_out(unreached);
        };
        // Biased, the notification first: when it and the timer are both ready, the
        // notification is taken (a notified future dropped unconsumed would pass the
        // wake-up on to another waiter), and the outcome does not rest on the runtime's
        // random choice of branch (a simulated run replays exactly).
        let handed = tokio::select! {
            biased;
            () = &mut notified => {
                woken(client, (&lock, listener), &asked, numbered, (lease_duration, renew))
            }
            () = tokio::time::sleep(sleep_for.max(Duration::from_millis(1))) => None,
        };
        if let Some(guard) = handed {
            return Ok(Some(served(
                &mut queued,
                bell.as_ref(),
                (&lock, started),
                guard,
            )));
        }
    }
}

/// A bounded wait rides out a store it cannot reach: an attempt that failed to reach it
/// (after its retry window) counts as busy, and the waiter asks again after a pause, or
/// at a notification, until its deadline, under a fresh id (the unanswered attempt's
/// grant, if it got one, is undone under the old id: a later grant under that id would
/// be undone with it; the simulation's seed 519 found that). An unbounded wait fails instead, so that an
/// outage does not hang its caller unseen; so does a try, and a wait whose deadline has
/// passed (its grant's fate is unknown: busy would not be the truth).
/// The error is kept in `unreached` (and cleared by an answer): a wait that runs out
/// while the store is unreachable reports it rather than a timeout ([`ran_out`]).
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

/// The end of a wait that ran out: the error of the store it could not reach, if that is
/// why, else no guard.
fn ran_out(unreached: Option<Error>) -> Result<Option<Guard>, Error> {
    unreached.map_or(Ok(None), Err)
}

/// How long a bounded wait pauses after an attempt that could not reach the store.
const OUTAGE_PAUSE: Duration = Duration::from_millis(500);

/// How long a waiter sleeps before it asks again (see [`sleep_for`]); `None` when the
/// caller's wait is over (or the caller does not wait).
fn next_sleep(wait: Wait, ttl: Option<Duration>, cap: Duration) -> Option<Duration> {
    let remaining = match wait {
        Wait::Never => return None,
        Wait::Until(deadline) => {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            Some(left)
        }
        Wait::Forever => None,
    };
    Some(sleep_for(ttl, remaining, cap))
}

/// A waiter was woken: the guard of a hold the wake-up says was handed over to its
/// acquisition, when it may hold it now (see [`take_handed`]).
fn woken(
    client: &Arc<Inner>,
    (lock, listener): (&LockRef, &Listener),
    asked: &Asked,
    request: AcquireRequest,
    lease: (Duration, bool),
) -> Option<Guard> {
    events::woken(lock);
    let handed = listener.take_handed(request.id)?;
    take_handed(client, lock, handed, asked, request, lease)
}

/// The caller got the lock at its first attempt: a place it took in the backend's
/// queue is its own no more, and its line's next waiter may ask.
fn at_once(
    queued: &mut Option<QueuedWaiter>,
    turn: Option<&Turn<LockName, Option<Listener>>>,
    guard: Guard,
) -> Guard {
    events::acquired_at_once(&guard.hold().lock, guard.fencing_token());
    QueuedWaiter::served(queued);
    if let Some(turn) = turn {
        turn.served();
    }
    guard
}

/// A waiter got the lock after waiting: the backend took it off its queue, the line's
/// bell is passed on, and the wait is reported.
fn served(
    queued: &mut Option<QueuedWaiter>,
    bell: Option<&Bell<'_>>,
    (lock, started): (&LockRef, Instant),
    guard: Guard,
) -> Guard {
    QueuedWaiter::served(queued);
    if let Some(bell) = bell {
        bell.served();
    }
    metrics::waited(lock.kind, started.elapsed());
    events::acquired_after_waiting(lock, started.elapsed(), guard.fencing_token());
    guard
}

/// When a waiting acquisition's latest attempts were sent, by number: a hand-over names
/// the attempt it followed (see [`Handed`]). A few, in place: every waiting acquisition
/// keeps one, and none allocates.
#[derive(Debug, Default)]
struct Asked {
    /// The latest attempts, attempt `n` at `n % KEPT` (number 0: none yet).
    recent: [(u32, Option<Instant>); Asked::KEPT],
    count: u32,
}

impl Asked {
    /// How many attempts are remembered: a hand-over follows one of the latest.
    const KEPT: usize = 4;

    /// `request` numbered as the next attempt, recorded as sent now (an instant taken
    /// before it is sent: a lease counted from it ends no later than the store's).
    fn next(&mut self, request: AcquireRequest) -> AcquireRequest {
        self.count = self.count.saturating_add(1);
        self.recent[self.count as usize % Self::KEPT] = (self.count, Some(Instant::now()));
        request.attempt(self.count)
    }

    /// When attempt `number` was sent, if it is one of the latest.
    fn sent(&self, number: u32) -> Option<Instant> {
        match self.recent[number as usize % Self::KEPT] {
            (n, sent) if n == number => sent,
            _ => None,
        }
    }
}

/// The guard of a hold handed over to this waiting acquisition (`request`), when enough
/// of its lease is certainly left to hold it now. The store made the hold after it ran
/// the attempt the hand-over names, with a lease of the waiter's place: the lease runs
/// at least a place (less the drift) from when the waiter sent that attempt. The hold is
/// then taken up in the background (the acquisition's next attempt, under its id, gives
/// it the full lease). With too little
/// left (the waiter had not asked for a while), `None`: the waiter asks again, and that
/// attempt takes the hold up before the waiter holds it.
fn take_handed(
    client: &Arc<Inner>,
    lock: &LockRef,
    handed: Handed,
    asked: &Asked,
    request: AcquireRequest,
    (lease, renew): (Duration, bool),
) -> Option<Guard> {
    // The store's handed hold lasts the place, or the lease if shorter.
    let handed_lease = request.wait?.place_kept_for.min(request.lease);
    let sent = asked.sent(handed.after_attempt)?;
    let valid_for = client.valid_for(handed_lease);
    if sent + valid_for < Instant::now() + valid_for / 2 {
        return None;
    }
    let granted = Granted {
        holds: 1,
        token: handed.token,
        origin: Some(request.id),
    };
    let guard = guard(
        client,
        lock,
        granted,
        (request.id, sent, handed_lease),
        (lease, renew),
    );
    take_up_in_background(client, lock, guard.hold(), request);
    Some(guard)
}

/// The guard of grant `grant`, sent at `sent`, whose hold's lease runs `valid` from
/// then: attached to the owner's hold (a reentry joins it), renewed by the watchdog with
/// `renew`, and released with `lease`.
fn guard(
    client: &Arc<Inner>,
    lock: &LockRef,
    granted: Granted,
    (grant, sent, valid): (RequestId, Instant, Duration),
    (lease, renew): (Duration, bool),
) -> Guard {
    let hold = client.attach(lock, granted, sent, valid, renew);
    Guard::new(
        Arc::clone(client),
        hold,
        lock.kind,
        grant,
        lease,
        renew,
        sent,
    )
}

/// Takes a handed hold up: the acquisition's next attempt, under its id, gives the hold
/// the acquisition's full lease.
fn take_up_in_background(
    client: &Arc<Inner>,
    lock: &LockRef,
    hold: &Arc<Hold>,
    request: AcquireRequest,
) {
    let (backend, lock_ref) = (Arc::clone(&client.backend), lock.clone());
    let (hold, valid_for) = (Arc::clone(hold), client.valid_for(request.lease));
    let taking_up = client.supervisor.spawn_job(async move {
        let sent = Instant::now();
        let until = sent + request.retry_window;
        match retry::until_answered(until, || backend.acquire(&lock_ref, request)).await {
            Ok(Acquire::Acquired { origin, .. }) if origin == Some(request.id) => {
                hold.extend(sent, valid_for);
            }
            // The handed grant ended before its take-up (force-released, or lapsed):
            // a guard that still holds it has lost it, now rather than at its next
            // renewal (review 3, R1). One released by its guard already has no guard
            // left to tell.
            Ok(Acquire::Ended) => {
                events::take_up_found_it_ended(&lock_ref);
                if hold.guards() > 0 {
                    hold.mark_lost(LostReason::OwnerGone);
                }
            }
            // A store that answers otherwise (busy): a renewal or the handed lease's
            // deadline tells a guard that still holds it.
            Ok(_) => events::take_up_found_it_ended(&lock_ref),
            Err(err) => events::take_up_failed(&lock_ref, &err),
        }
    });
    if let Err(err) = taking_up {
        events::take_up_failed(lock, &err);
    }
}

/// How long a waiter sleeps without a notification: until the holder's lease (`ttl`)
/// could have run out, since a lost message must not strand it, or until the caller's
/// wait is over (`remaining`); without either, at most the watchdog's lease (`cap`).
fn sleep_for(ttl: Option<Duration>, remaining: Option<Duration>, cap: Duration) -> Duration {
    match (ttl, remaining) {
        (Some(t), Some(r)) => t.min(r),
        (Some(t), None) => t,
        (None, Some(r)) => r.min(cap),
        (None, None) => cap,
    }
}

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

/// The listener in `slot`, or a new subscription put there (`None` when the caller's
/// wait ran out first). A subscription that was not confirmed is tried again.
async fn listen<'a>(
    client: &Inner,
    lock: &LockRef,
    wait: Wait,
    slot: &'a mut Option<Listener>,
) -> Option<Result<&'a Listener, Error>> {
    if let Some(listener) = slot.take() {
        return Some(Ok(slot.insert(listener)));
    }
    let retry_until = Instant::now() + client.config.retry_window;
    let subscribing = retry::until_answered(retry_until, || client.backend.listen(lock));
    match Box::pin(within(wait, Duration::ZERO, subscribing)).await? {
        Ok(listener) => Some(Ok(slot.insert(listener))),
        Err(err) => Some(Err(err)),
    }
}

/// How long past the caller's deadline an attempt begun before it may take.
const ATTEMPT_SLACK: Duration = Duration::from_millis(100);

/// Runs `step` within the caller's wait plus `slack`; `None` when that ran out first.
async fn within<T>(wait: Wait, slack: Duration, step: impl Future<Output = T>) -> Option<T> {
    match wait {
        Wait::Until(deadline) => tokio::time::timeout_at(deadline + slack, step).await.ok(),
        Wait::Never | Wait::Forever => Some(step.await),
    }
}

fn expired(wait: Wait) -> bool {
    matches!(wait, Wait::Until(deadline) if Instant::now() >= deadline)
}

enum Attempt {
    Acquired(Guard),
    Busy {
        ttl: Option<Duration>,
        reserved: bool,
    },
    /// The acquisition's id is over (see [`Acquire::Ended`]): the caller, still
    /// waiting, goes on under a fresh one.
    Ended,
    /// A bounded wait's attempt could not reach the store (see [`rides_out`]): its id
    /// may be undone, so the wait goes on under a fresh one.
    Unreached,
}

/// One acquire request, cancel-safe: see the module docs. A waiter's standing, if any,
/// learns when the request is over, so that giving up never overtakes it.
///
/// A request whose outcome is unknown is sent again (same id) while the caller's wait
/// and the retry window allow; if it stays unknown, or the caller went away, a grant it
/// may have got is undone in the background (see [`crate::retry`]).
///
/// With a backend that hands locks over ([`Capabilities::hands_over`]), every attempt
/// of one acquisition carries the acquisition's id: a grant is the acquisition's,
/// whichever attempt got it, and a hand-over to the waiter between its attempts is
/// made under that id, which the next attempt finds (one identity per grant, no
/// adoption; busy answers are not remembered, so asking again under the id asks
/// afresh). Otherwise each attempt has an id of its own.
///
/// [`Capabilities::hands_over`]: crate::backend::Capabilities::hands_over
async fn attempt(
    client: &Arc<Inner>,
    lock: &LockRef,
    request: AcquireRequest,
    renew: bool,
    wait: Wait,
    queued: Option<&mut QueuedWaiter>,
) -> Result<Attempt, Error> {
    let lease = request.lease;
    let request = if client.backend.capabilities().hands_over {
        request
    } else {
        request.fresh_id()
    };
    let done = queued.map(|queued| {
        let (done, attempt_done) = oneshot::channel::<()>();
        queued.attempt_done = Some(attempt_done);
        queued.request = request;
        done
    });
    let backend = Arc::clone(&client.backend);
    let lock_ref = lock.clone();
    let sent = Instant::now();
    let answer_by = match wait {
        Wait::Never => sent,
        Wait::Until(deadline) => deadline.min(sent + request.retry_window),
        Wait::Forever => sent + request.retry_window,
    };
    let call = Box::pin(async move {
        retry::until_answered(answer_by, || backend.acquire(&lock_ref, request)).await
    });
    let reply = RequestInFlight {
        call: Some(call),
        client: Arc::clone(client),
        lock: lock.clone(),
        request,
        done,
    }
    .await?;
    match reply {
        Acquire::Acquired {
            holds,
            token,
            origin,
        } => {
            let granted = Granted {
                holds,
                token,
                origin,
            };
            let valid = (request.id, sent, lease);
            let guard = guard(client, lock, granted, valid, (lease, renew));
            if !renew && !guard.is_held() {
                // The caller's lease ran out (less the drift margin) before its grant
                // arrived: a guard already lost is no answer. Dropping it releases the
                // grant in the background.
                let took = sent.elapsed();
                drop(guard);
                return Err(Error::invalid_argument(
                    "lease",
                    format!(
                        "{lease:?} is too short: its grant took {took:?} to arrive, and the \
                         lease had run out by then"
                    ),
                ));
            }
            Ok(Attempt::Acquired(guard))
        }
        Acquire::Busy { ttl, reserved } => Ok(Attempt::Busy { ttl, reserved }),
        Acquire::Ended => Ok(Attempt::Ended),
    }
}

/// Ends the grant `request` may have got, if it is alive: the caller never learnt of
/// it. Nobody awaits this: a failure can only be logged, and the lease bounds the hold.
async fn undo_grant(backend: &dyn Backend, lock: &LockRef, request: AcquireRequest) {
    let undo = ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
    let until = Instant::now() + request.retry_window;
    if let Err(err) = retry::until_answered(until, || backend.release(lock, undo)).await {
        events::release_failed(lock, "a grant its caller never learnt of", &err);
    }
}

/// The backend's answer to an acquire request, still to come.
type Call = Pin<Box<dyn Future<Output = Result<Acquire, Error>> + Send>>;

/// One acquire request on its way, polled by the caller itself (no task per attempt).
/// If the caller goes away before the answer came, what is left of the request goes to
/// a job of the client's supervisor, which awaits the answer and undoes a grant the
/// caller will never learn of. An answer that leaves it unknown whether the request
/// ran (a connection error) is undone in a job as well.
struct RequestInFlight {
    /// `None` once answered.
    call: Option<Call>,
    client: Arc<Inner>,
    lock: LockRef,
    request: AcquireRequest,
    /// Dropped once the request is over, so that a waiter that gave up sends its
    /// cancellation only then (it could otherwise reach the backend first and be
    /// undone by the request).
    done: Option<oneshot::Sender<()>>,
}

impl Future for RequestInFlight {
    type Output = Result<Acquire, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Some(call) = this.call.as_mut() else {
            return Poll::Ready(Err(Error::protocol(
                "an acquire request polled after it was answered",
            )));
        };
        let reply = std::task::ready!(call.as_mut().poll(cx));
        this.call = None;
        if retry::unanswered(&reply) {
            this.settle_in_background(None);
        } else {
            this.done = None;
        }
        Poll::Ready(reply)
    }
}

impl RequestInFlight {
    /// Finishes the request in a job: awaits `call`'s answer, if any is still to come,
    /// and undoes a grant it may hold (with no call left, the grant is unknown).
    fn settle_in_background(&mut self, call: Option<Call>) {
        let backend = Arc::clone(&self.client.backend);
        let lock = self.lock.clone();
        let request = self.request;
        let done = self.done.take();
        let settled = self.client.supervisor.spawn_job(async move {
            let undo = match call {
                Some(call) => {
                    let reply = call.await;
                    matches!(reply, Ok(Acquire::Acquired { .. })) || retry::unanswered(&reply)
                }
                None => true,
            };
            if undo {
                undo_grant(&*backend, &lock, request).await;
            }
            drop(done);
        });
        if let Err(err) = settled {
            // The lease bounds the hold.
            events::release_failed(&self.lock, "a grant its caller never learnt of", &err);
        }
    }
}

impl Drop for RequestInFlight {
    fn drop(&mut self) {
        if let Some(call) = self.call.take() {
            self.settle_in_background(Some(call));
        }
    }
}

/// A waiter's standing with the backend (a fair lock's place in its queue, a composite
/// lock's partial holds). Unless it was served, dropping it (the wait ended, failed or was
/// cancelled) tells the backend in the background, so that a fair queue moves on at once.
struct QueuedWaiter {
    client: Arc<Inner>,
    lock: LockRef,
    /// The acquisition's request (its latest attempt's, whose id is the acquisition's
    /// where the backend hands over).
    request: AcquireRequest,
    armed: bool,
    /// Resolves when the latest attempt is over: a cancellation sent before it could
    /// reach the backend first and be undone by the attempt (a fair queue entry made
    /// again, a composite lock's parts kept again).
    attempt_done: Option<oneshot::Receiver<()>>,
}

impl QueuedWaiter {
    fn new(client: &Arc<Inner>, lock: &LockRef, request: AcquireRequest) -> Self {
        Self {
            client: Arc::clone(client),
            lock: lock.clone(),
            request,
            armed: true,
            attempt_done: None,
        }
    }

    /// The waiter got the lock: the server already took it off the queue.
    fn served(waiter: &mut Option<Self>) {
        if let Some(waiter) = waiter {
            waiter.armed = false;
        }
    }
}

impl Drop for QueuedWaiter {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let backend = Arc::clone(&self.client.backend);
        let lock = self.lock.clone();
        let request = self.request;
        let attempt_done = self.attempt_done.take();
        let cancel = self.client.supervisor.spawn_job(async move {
            if let Some(attempt_done) = attempt_done {
                // Only "the attempt ended" matters, not how: a closed channel is the signal.
                let _ = attempt_done.await;
            }
            if let Err(err) = backend.cancel_wait(&lock, &request).await {
                events::cancel_failed(&lock, &err);
            }
        });
        if let Err(err) = cancel {
            // Without a runtime the place lapses at its deadline instead.
            events::cancel_failed(&self.lock, &err);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;
    use crate::{LockKind, LockName, Owner};

    #[test]
    fn a_hand_over_finds_the_attempts_it_may_follow_and_no_other() {
        let mut asked = Asked::default();
        assert_eq!(asked.sent(0), None, "no attempt yet");
        let request = AcquireRequest::new(Duration::from_secs(30)).enqueue(Duration::from_secs(5));
        let mut numbers = Vec::new();
        for _ in 0..6 {
            numbers.push(asked.next(request).wait.map(|w| w.attempt));
        }
        assert_eq!(numbers, (1..=6).map(Some).collect::<Vec<_>>());
        for kept in 3..=6 {
            assert!(
                asked.sent(kept).is_some(),
                "attempt {kept} is one of the latest"
            );
        }
        for gone in [0, 1, 2, 7] {
            assert_eq!(asked.sent(gone), None, "attempt {gone}");
        }
    }

    #[test]
    fn a_waiter_sleeps_until_the_lease_could_end_or_its_wait_does() {
        let (ms, cap) = (Duration::from_millis, Duration::from_secs(30));
        assert_eq!(
            sleep_for(Some(ms(200)), Some(ms(500)), cap),
            ms(200),
            "the lease first"
        );
        assert_eq!(
            sleep_for(Some(ms(900)), Some(ms(500)), cap),
            ms(500),
            "the wait first"
        );
        assert_eq!(
            sleep_for(Some(ms(40_000)), None, cap),
            ms(40_000),
            "a long lease"
        );
        assert_eq!(
            sleep_for(None, Some(ms(500)), cap),
            ms(500),
            "no lease known"
        );
        assert_eq!(
            sleep_for(None, Some(ms(60_000)), cap),
            cap,
            "capped by the watchdog"
        );
        assert_eq!(sleep_for(None, None, cap), cap, "neither known");
    }

    /// A request dropped after the backend granted it, but before its caller saw the
    /// answer, is finished in the background, and the grant is released: the hold must
    /// not live on for its lease.
    #[tokio::test]
    async fn a_grant_answered_after_its_caller_left_is_released() {
        let store = MemoryBackend::new();
        let client = Arc::clone(&crate::Locks::new(Arc::new(store.clone())).inner);
        let lock = LockRef::new(
            LockKind::Mutex,
            LockName::new("left").expect("name"),
            Owner::new("c", "h"),
        );
        let request = AcquireRequest::new(Duration::from_secs(30)).fresh_id();
        let (answer, answer_comes) = oneshot::channel::<()>();
        let (backend, lock_ref) = (Arc::clone(&client.backend), lock.clone());
        // The grant is made at once; its answer waits for the test.
        let call: Call = Box::pin(async move {
            let reply = backend.acquire(&lock_ref, request).await;
            answer_comes.await.expect("the test sends the answer");
            reply
        });
        let mut in_flight = RequestInFlight {
            call: Some(call),
            client: Arc::clone(&client),
            lock: lock.clone(),
            request,
            done: None,
        };
        assert!(
            futures_poll_once(&mut in_flight).await.is_pending(),
            "the answer is held back"
        );
        assert_eq!(
            store.held_locks().len(),
            1,
            "the backend granted the request"
        );
        drop(in_flight);
        answer
            .send(())
            .expect("the background job awaits the answer");
        tokio::time::timeout(Duration::from_secs(2), client.supervisor.drain())
            .await
            .expect("the background job ends");
        assert!(
            store.held_locks().is_empty(),
            "a grant whose caller went away was kept"
        );
    }

    /// Polls `future` once.
    async fn futures_poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
    }
}
