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
//! was granted instead of leaking a hold (see [`super::attempt`]). A waiter told it was
//! handed the lock holds from the notice (see [`super::handed`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::attempt::{Attempt, QueuedWaiter, attempt};
use super::handed::{Asked, woken};
use crate::backend::AcquireRequest;
use crate::client::shared::Inner;
use crate::locks::guard::Guard;
use crate::locks::turns::Bell;
use crate::locks::turns::Turn;
use crate::metrics::{self, AcquireOutcome};
use crate::notify::Listener;
use crate::{Error, LockName, LockRef};
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

impl Wait {
    /// A wait of at most `wait` from now. A zero wait is one attempt whose answer is
    /// awaited, however long the store takes (within its response timeout): a wait for
    /// nothing must not turn a slow answer into "busy", nor register a waiter.
    pub(crate) fn at_most(wait: Duration) -> Self {
        if wait.is_zero() {
            Self::Never
        } else {
            Self::Until(Instant::now() + wait)
        }
    }
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
        // A hand-over is made to the id the attempt carried; after an unreached attempt,
        // whose id is being undone in the background, a hand-over to it is no grant.
        let handed_to = (numbered.id == request.id).then_some(numbered);
        let handed = tokio::select! {
            biased;
            () = &mut notified => handed_to.and_then(|numbered| {
                woken(client, (&lock, listener), &asked, numbered, (lease_duration, renew))
            }),
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
