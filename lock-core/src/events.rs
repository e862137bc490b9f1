//! What background work reports through `tracing`: every failure nobody awaits (a
//! renewal, the release of a dropped guard, a subscription) becomes a `warn` event here,
//! with the lock's kind and name and the error's whole chain, instead of vanishing.
//! Lock names are fields of log events, never metric labels.

use std::time::Duration;

use crate::{Error, LockRef, LostReason};

use crate::TRACING_TARGET;
use crate::throttle::Throttle;

/// How often a failure that repeats in an outage is warned of (see [`Throttle`]).
pub(crate) const REPEATED_FAILURE_EVERY: Duration = Duration::from_secs(5);

/// Warns of a failure that repeats while a store is unreachable: once every
/// [`REPEATED_FAILURE_EVERY`] per call site, with `held_back`, how many of its failures
/// were not warned of since the last warning.
macro_rules! warn_repeated {
    ($($field:tt)*) => {{
        static THROTTLE: Throttle = Throttle::new(REPEATED_FAILURE_EVERY);
        if let Some(held_back) = THROTTLE.admit() {
            tracing::warn!(target: TRACING_TARGET, held_back, $($field)*);
        }
    }};
}

pub(crate) fn renewal_failed(lock: &LockRef, err: &Error) {
    warn_repeated!(
        kind = %lock.kind,
        name = %lock.name,
        error = %err.chain(),
        "renewing a lock failed; retrying while its lease lasts (one warning every 5 s; held_back counts the failed renewals not warned of since the last)"
    );
}

/// A client could not describe itself in the store: introspection shows its holds
/// without its name, host and process.
pub(crate) fn announce_failed(err: &Error) {
    warn_repeated!(
        error = %err.chain(),
        "this client could not describe itself in the store; introspection shows its holds without its name"
    );
}

/// Debug: a lock granted at the first attempt.
pub(crate) fn acquired_at_once(lock: &LockRef, token: Option<u64>) {
    tracing::debug!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        token,
        "lock acquired"
    );
}

/// Debug: a lock granted after waiting: the hand-off from its previous holder.
pub(crate) fn acquired_after_waiting(lock: &LockRef, waited: Duration, token: Option<u64>) {
    tracing::debug!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        waited_ms = waited.as_millis(),
        token,
        "lock handed off: acquired after waiting"
    );
}

/// Taking up a hold handed over to a waiter failed: it holds the lock until the handed
/// lease (its place) runs out, unless a renewal extends it first.
pub(crate) fn take_up_failed(lock: &LockRef, err: &crate::Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        error = %err.chain(),
        "taking up a lock handed over on release failed; it is held for the waiter's place only"
    );
}

/// Debug: the take-up of a hold handed over found its grant ended (its guard released
/// it first, or it lapsed or was force-released).
pub(crate) fn take_up_found_it_ended(lock: &LockRef) {
    tracing::debug!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        "a hold handed over on release had ended when its take-up came"
    );
}

/// Warn: a bounded wait's attempt could not reach the store; the waiter asks again.
pub(crate) fn attempt_failed_while_waiting(lock: &LockRef, err: &Error) {
    warn_repeated!(
        kind = %lock.kind,
        name = %lock.name,
        error = %err.chain(),
        "an attempt could not reach the store; the bounded wait asks again until its deadline (one warning every 5 s; held_back counts the failures not warned of since the last)"
    );
}

/// Debug: a waiter was told of a release and asks again.
pub(crate) fn woken(lock: &LockRef) {
    tracing::debug!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        "waiter woken by a release"
    );
}

/// Debug: a release the store answered.
pub(crate) fn released(lock: &LockRef, release: crate::backend::Release) {
    tracing::debug!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        outcome = ?release,
        "lock released"
    );
}

pub(crate) fn hold_lost(lock: &LockRef, reason: LostReason) {
    tracing::warn!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        owner = %lock.owner,
        %reason,
        "lock lost"
    );
}

/// A release nobody awaits failed: a dropped guard's, or that of a grant whose caller
/// went away. The lock stays held until its lease runs out.
pub(crate) fn release_failed(lock: &LockRef, of: &'static str, err: &Error) {
    warn_repeated!(
        kind = %lock.kind,
        name = %lock.name,
        of,
        error = %err.chain(),
        "releasing a lock failed; it stays held until its lease ends (one warning every 5 s; held_back counts the failed releases not warned of since the last)"
    );
}

/// Work its caller abandoned could not go on: there was no runtime left to run it on. A
/// release left undone this way ends with its lease.
pub(crate) fn job_dropped(err: &Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        error = %err.chain(),
        "work abandoned by its caller was dropped unfinished"
    );
}

/// Permits nobody awaits could not be given back (dropped permits, or a grant whose
/// caller went away): a plain semaphore has that many fewer until someone adds them; an
/// expirable one gets them back when their lease ends.
pub(crate) fn permits_not_released(
    name: &crate::LockName,
    permits: u64,
    of: &'static str,
    err: &Error,
) {
    tracing::warn!(
        target: TRACING_TARGET,
        %name,
        permits,
        of,
        error = %err.chain(),
        "giving permits back failed; a plain semaphore has fewer until they are added again, expirable permits come back when their lease ends"
    );
}

/// A waiter asks for more permits than the semaphore has had available at once: it may
/// only ever be served after permits are added, and a semaphore never set has none, so a
/// mistyped name or a missing `try_set_permits` would otherwise wait in silence.
pub(crate) fn waiting_beyond_peak(name: &crate::LockName, permits: u64) {
    tracing::warn!(
        target: TRACING_TARGET,
        %name,
        permits,
        "waiting for more permits than the semaphore has had available at once; it waits until permits are added (a semaphore never set has none: check its name and that try_set_permits ran)"
    );
}

/// A waiter for permits that gave up could not take its reservation back: it holds the
/// permits back from the others until it lapses.
pub(crate) fn reservation_not_cancelled(name: &crate::LockName, err: &Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        %name,
        error = %err.chain(),
        "a waiter that gave up could not take back its reservation of permits; it lapses on its own"
    );
}

pub(crate) fn permit_renewal_failed(name: &crate::LockName, err: &Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        %name,
        error = %err.chain(),
        "renewing expirable permits failed; retrying while their lease lasts"
    );
}

pub(crate) fn permits_lost(name: &crate::LockName, permits: usize, reason: LostReason) {
    tracing::warn!(
        target: TRACING_TARGET,
        %name,
        permits,
        %reason,
        "expirable permits lost"
    );
}

pub(crate) fn cancel_failed(lock: &LockRef, err: &Error) {
    tracing::warn!(
        target: TRACING_TARGET,
        kind = %lock.kind,
        name = %lock.name,
        error = %err.chain(),
        "a waiter that gave up could not leave the lock's queue; its place lapses at its deadline"
    );
}

/// The watchdog task ended while holds still needed renewal (its runtime shut down, or
/// it panicked) and is started again.
pub(crate) fn watchdog_restarted(holds: usize) {
    tracing::warn!(
        target: TRACING_TARGET,
        holds,
        "the watchdog task had died (its runtime shut down?); started again"
    );
}

/// A client's last `Locks` was dropped while releases (or other background work) still
/// ran, without [`Locks::shutdown`](crate::Locks::shutdown).
pub(crate) fn dropped_with_jobs_running(jobs: usize) {
    tracing::warn!(
        target: TRACING_TARGET,
        jobs,
        "the client was dropped with background work still running (releases of dropped guards, undos); it goes on while the runtime runs, but a process that exits now cuts it short and its holds stay until their leases end: await Locks::shutdown() before exiting"
    );
}

/// The watchdog could not be started: the holds it should renew run on their deadlines.
pub(crate) fn watchdog_not_started(holds: usize, err: &Error) {
    tracing::error!(
        target: TRACING_TARGET,
        holds,
        error = %err.chain(),
        "the watchdog could not be started; these holds are lost when their lease ends"
    );
}

/// [`Locks::shutdown`](crate::Locks::shutdown) found guards still alive: their holds stay
/// until they are released or their leases end.
pub(crate) fn shut_down_with_holds(holds: usize) {
    tracing::warn!(
        target: TRACING_TARGET,
        holds,
        "client shut down while guards are alive: their locks stay held until the guards \
         are released or dropped"
    );
}
