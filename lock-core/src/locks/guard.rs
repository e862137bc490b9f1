//! [`Guard`]: proof of one hold on a lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{Release, ReleaseRequest, RequestId};
use crate::client::shared::Inner;
use crate::locks::hold::Hold;
use crate::{Error, LockKind, LockRef, LostReason, events, metrics, retry};

const DROPPED: &str = "a dropped guard";

/// One hold on a lock. Release it with [`Guard::unlock`]; dropping it releases it in the
/// background.
///
/// Each successful acquisition returns its own guard, and each guard releases exactly one
/// hold: a reentrant acquisition by the same holder gives a second guard, and the lock is
/// free once both are released. A guard can be moved to and released from any task.
///
/// While the guard lives, the lock is renewed by the client's watchdog unless it was
/// taken with an explicit lease. Check [`Guard::is_held`] before acting on the protected
/// resource, or race the work against [`Guard::lost`].
#[must_use = "dropping a guard releases the lock at once"]
#[clippy::has_significant_drop]
pub struct Guard {
    client: Arc<Inner>,
    hold: Arc<Hold>,
    /// The kind this guard took the lock as; the name and the owner are its hold's (a
    /// fair and a plain mutex share one hold). Not the whole lock: a waiting task
    /// carries room for its guard and its `unlock()`, and thousands wait.
    kind: LockKind,
    /// This guard's grant: the one its release ends.
    grant: RequestId,
    lease: Duration,
    renew: bool,
    acquired_at: Instant,
    /// When this hold ends on its own: a read hold with a caller's lease has its own
    /// expiry on the server, whatever the owner's other read holds do.
    own_deadline: Option<Instant>,
    released: bool,
    /// Every attempt of the grant's acquisition was sent once and answered (see
    /// [`ReleaseRequest::settled`](field@ReleaseRequest::settled)); false for a hold
    /// handed over, whose take-up may be on its way.
    pub(crate) settled: bool,
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("kind", &self.kind)
            .field("name", &self.hold.lock.name)
            .field("owner", &self.hold.lock.owner)
            .field("grant", &self.grant)
            .field("lease", &self.lease)
            .field("watchdog", &self.renew)
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

impl Guard {
    /// The guard of `grant`, taken as a lock of `kind`, part of `hold`, granted by a
    /// request sent at `sent`.
    pub(crate) fn new(
        client: Arc<Inner>,
        hold: Arc<Hold>,
        kind: LockKind,
        grant: RequestId,
        lease: Duration,
        renew: bool,
        sent: Instant,
    ) -> Self {
        metrics::held(kind, 1.0);
        let own_deadline =
            (kind == LockKind::Read && !renew).then(|| sent + client.valid_for(lease));
        Self {
            client,
            hold,
            kind,
            grant,
            lease,
            renew,
            acquired_at: Instant::now(),
            own_deadline,
            released: false,
            settled: false,
        }
    }

    /// The owner's hold this guard is one grant of.
    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    /// Why this hold is gone, if it is: the owner's hold was lost, or this read hold's
    /// own lease ran out.
    fn lost_reason(&self) -> Option<LostReason> {
        self.hold.lost_reason().or_else(|| {
            self.own_deadline
                .is_some_and(|deadline| Instant::now() >= deadline)
                .then_some(LostReason::LeaseExpired)
        })
    }

    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.hold.lock.name.as_str()
    }

    /// The lock's kind.
    #[must_use]
    pub fn kind(&self) -> LockKind {
        self.kind
    }

    /// The owner string stored in the backend (`"<client-uuid>:<holder>"`).
    #[must_use]
    pub fn owner(&self) -> &str {
        self.hold.lock.owner.as_str()
    }

    /// The lock as this guard took it.
    fn lock_ref(&self) -> LockRef {
        let held = &self.hold.lock;
        LockRef::new(self.kind, held.name.clone(), held.owner.clone())
    }

    /// Whether the hold is still valid by the local clock: not lost, and the last
    /// successful renewal (or the acquisition) was sent less than a lease (minus drift)
    /// ago. This does no I/O; it turns false at the deadline even if nothing was heard.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.lost_reason().is_none()
    }

    /// The fencing token of this hold, when the client issues them
    /// ([`LocksBuilder::fencing`](crate::LocksBuilder::fencing)): strictly greater than every
    /// token issued before for this lock name, by any client. A reentrant acquisition
    /// keeps the holder's token. Pass it to the storage you protect and have it reject
    /// writes carrying a smaller token than it has seen: that stops a holder whose lease
    /// silently expired (a long pause) from writing after the next holder.
    ///
    /// Read holds get tokens too; concurrent readers get different ones.
    #[must_use]
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.token
    }

    /// How long the hold stays valid without another successful renewal; `None` once lost.
    #[must_use]
    pub fn valid_for(&self) -> Option<Duration> {
        let shared = self.hold.valid_for()?;
        match self.own_deadline {
            Some(deadline) => {
                let own = deadline.saturating_duration_since(Instant::now());
                (!own.is_zero()).then(|| shared.min(own))
            }
            None => Some(shared),
        }
    }

    /// Resolves when the hold is lost: a renewal found another owner, or the lease ran
    /// out (an explicit lease, or renewals that kept failing). Never resolves while the
    /// hold is valid. Returns the [`Error::Lost`] to hand to the caller.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches; use it in `tokio::select!` against the work.
    pub async fn lost(&self) -> Error {
        let reason = match self.own_deadline {
            // Biased, the hold's own news first: the same branch wins from one run to the
            // next.
            Some(deadline) => tokio::select! {
                biased;
                reason = self.hold.lost() => reason,
                () = tokio::time::sleep_until(deadline) => LostReason::LeaseExpired,
            },
            None => self.hold.lost().await,
        };
        self.lost_error(reason)
    }

    fn lost_error(&self, reason: LostReason) -> Error {
        Error::Lost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Releases this hold.
    ///
    /// Returns [`Error::NotHeld`] when the hold was already gone (its lease expired, or
    /// the lock was force-released). A guard that the client gave up as lost still ends
    /// its grant in the store, in case the store kept it (renewals whose replies were
    /// lost): the release ends this guard's grant and nothing else, only while it is
    /// alive. If the request fails, the lock is released at the latest when its lease
    /// runs out (renewal stops at once).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: if this future is dropped before the release is over, the rest of
    /// the release goes on in a task of its own and completes
    /// ([`Locks::shutdown`](crate::Locks::shutdown) waits for it).
    ///
    /// The guard is given up when this is called; the future keeps only what the
    /// release's answer needs (a waiting task carries room for it).
    pub fn unlock(mut self) -> impl Future<Output = Result<(), Error>> + Send + use<> {
        self.released = true;
        self.finish();
        let lost = self.lost_reason();
        // Taken before the request can run: the re-armed lease counts from no earlier.
        let sent = Instant::now();
        // Polled by the caller; only if the future is dropped first does the rest of the
        // release go on in a task of its own.
        let release = self.client.supervisor.awaited_job(release_job(&self, None));
        let (hold, kind) = (Arc::clone(&self.hold), self.kind);
        let valid_for = self.client.valid_for(self.lease);
        // Released above: dropping the guard now does nothing more.
        drop(self);
        async move {
            let outcome = release.await;
            let not_held = |lost| Error::NotHeld {
                name: hold.lock.name.as_str().to_owned(),
                lost,
            };
            if let Some(reason) = lost {
                return Err(not_held(Some(reason)));
            }
            match outcome? {
                // A mutex or write release re-arms the lease of the holds left. A read
                // release re-arms nothing: the owner's remaining read holds keep their
                // own expiries, which the local deadline already covers.
                Release::StillHeld { .. } if kind != LockKind::Read => {
                    hold.extend(sent, valid_for);
                    Ok(())
                }
                Release::NotHeld => {
                    hold.mark_lost(LostReason::OwnerGone);
                    Err(not_held(None))
                }
                Release::StillHeld { .. } | Release::Released => Ok(()),
            }
        }
    }

    /// Synchronous bookkeeping shared by `unlock` and `Drop`.
    fn finish(&self) {
        self.client.detach(&self.hold, self.renew);
        metrics::held(self.kind, -1.0);
        metrics::released(self.kind, self.acquired_at.elapsed());
    }
}

/// The release of `guard`'s grant, as a job that must finish even if nobody awaits it.
/// `unawaited` names the release when nobody awaits its outcome (a dropped guard): a
/// failure is then reported through `tracing`.
fn release_job(
    guard: &Guard,
    unawaited: Option<&'static str>,
) -> impl Future<Output = Result<Release, Error>> + Send + use<> {
    let client = &guard.client;
    let backend = Arc::clone(&client.backend);
    let hold = Arc::clone(&guard.hold);
    let lock = guard.lock_ref();
    let window = client.config.retry_window;
    let request = ReleaseRequest::new(guard.lease, guard.grant)
        .retry_window(window)
        .settled(guard.settled)
        .answered_before(client.answered_releases.take(&lock.name));
    let answered = Arc::clone(client);
    // The line a release of this kind may let in.
    let lines = match lock.kind {
        LockKind::Mutex | LockKind::Fair => client.mutex_turns.clone(),
        LockKind::Write | LockKind::Read => client.writer_turns.clone(),
    };
    // Where the store keeps this client's requests in order, the next waiter in line may
    // ask as soon as this release is on its way: its request runs right after it. Only
    // the hold's last release frees the lock (counted before the request is sent).
    let ring_early = client.capabilities.ordered_requests && hold.guards() == 0;
    async move {
        // Sent again (same id) while its outcome is unknown: a release that already ran
        // answers as the first time.
        let until = Instant::now() + window;
        let release = retry::until_answered(until, || backend.release(&lock, request));
        let (outcome, rung) = if ring_early {
            once_sent(release, || lines.ring(&lock.name)).await
        } else {
            (release.await, None)
        };
        if let Ok(Release::Released) = outcome {
            // This client's next waiter in line tries at once rather than when the
            // store's release message comes back (other clients still get that); if it
            // was woken before this answer and nobody has been served since, it may
            // have come too early (a script the server had to load first).
            lines.ring_again(&lock.name, rung.flatten());
        }
        if let Ok(Release::Released) = outcome
            && hold.guards() > 0
        {
            // The backend holds nothing more for the owner, yet guards of this hold
            // remain: they must not go on believing they hold it.
            hold.mark_lost(LostReason::OwnerGone);
        }
        if outcome.is_ok() {
            answered.answered_releases.answered(&lock.name, request.id);
        }
        match (unawaited, &outcome) {
            (Some(of), Err(err)) => events::release_failed(&lock, of, err),
            (_, Ok(release)) => events::released(&lock, *release),
            (None, Err(_)) => {}
        }
        outcome
    }
}

/// Runs `request`, calling `sent` once its first poll leaves it pending (it is then on
/// its way); returns what `sent` returned, if it was called.
async fn once_sent<F: Future, R>(request: F, sent: impl FnOnce() -> R) -> (F::Output, Option<R>) {
    let mut request = std::pin::pin!(request);
    let mut sent = Some(sent);
    let mut said = None;
    let output = std::future::poll_fn(|cx| {
        let poll = request.as_mut().poll(cx);
        if poll.is_pending()
            && let Some(sent) = sent.take()
        {
            said = Some(sent());
        }
        poll
    })
    .await;
    (output, said)
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.released = true;
        self.finish();
        // Lost or not: a lost guard's grant may still be alive in the store.
        if let Err(err) = self
            .client
            .supervisor
            .spawn_job(release_job(self, Some(DROPPED)))
        {
            // Without a runtime the release cannot be sent; renewal has stopped, so the
            // lease runs out on its own.
            events::release_failed(&self.lock_ref(), DROPPED, &err);
        }
    }
}
