//! The client's side of a hand-over: a waiter woken with the news that the store made it
//! the holder (a [`Handed`] notice) holds at once, when enough of the handed hold's
//! lease is certainly left, and takes the hold up in the background with the
//! acquisition's next attempt once a third of the handed lease has gone (most holds are
//! released before: their release is all the store sees of them); a take-up answered
//! [`Acquire::Ended`] marks the guard lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::attempt::guard;
use crate::backend::{Acquire, AcquireRequest};
use crate::client::shared::{Granted, Inner};
use crate::locks::guard::Guard;
use crate::locks::hold::Hold;
use crate::notify::{Handed, Listener};
use crate::{LockRef, LostReason};
use crate::{events, retry};

/// A waiter was woken: the guard of a hold the wake-up says was handed over to its
/// acquisition, when it may hold it now (see [`take_handed`]).
pub(super) fn woken(
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

/// When a waiting acquisition's latest attempts were sent, by number: a hand-over names
/// the attempt it followed (see [`Handed`]). A few, in place: every waiting acquisition
/// keeps one, and none allocates.
#[derive(Debug, Default)]
pub(super) struct Asked {
    /// The latest attempts, attempt `n` at `n % KEPT` (number 0: none yet).
    recent: [(u32, Option<Instant>); Asked::KEPT],
    count: u32,
}

impl Asked {
    /// How many attempts are remembered: a hand-over follows one of the latest.
    const KEPT: usize = 4;

    /// `request` numbered as the next attempt, recorded as sent now (an instant taken
    /// before it is sent: a lease counted from it ends no later than the store's).
    pub(super) fn next(&mut self, request: AcquireRequest) -> AcquireRequest {
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
    let due = sent + valid_for / 3;
    take_up_in_background(client, lock, guard.hold(), request, due);
    Some(guard)
}

/// Takes a handed hold up at `due`, unless its guards have all left by then: the
/// acquisition's next attempt, under its id, gives the hold the acquisition's full lease.
///
/// Why not at once: a take-up costs the store a statement (or a script) on the lock's
/// name while the hold is young, when most holds are released anyway, and the handed
/// lease left at `due` (two thirds of it) is the margin the watchdog keeps for every
/// renewal. A revocation meanwhile (review 3, R1) is learnt at the take-up, as before,
/// and a guard holds no longer than its handed lease without one.
fn take_up_in_background(
    client: &Arc<Inner>,
    lock: &LockRef,
    hold: &Arc<Hold>,
    request: AcquireRequest,
    due: Instant,
) {
    let (backend, lock_ref) = (Arc::clone(&client.backend), lock.clone());
    let (hold, valid_for) = (Arc::clone(hold), client.valid_for(request.lease));
    let taking_up = client.supervisor.spawn_job(async move {
        // Biased, so that a simulated run replays exactly when both are ready.
        tokio::select! {
            biased;
            () = hold.released() => return,
            () = tokio::time::sleep_until(due) => {}
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
