//! The waiting state machine shared by every lock kind.
//!
//! Try; if busy and the caller may wait, subscribe to the lock's channel and try again
//! (a release between the first try and the subscription would otherwise be missed);
//! then sleep until a notification arrives or the lock's ttl (or the caller's wait) runs
//! out, and repeat. The notification future is armed before every retry, so a release
//! that lands during the retry still wakes the waiter.
//!
//! Each attempt runs in its own task: if the caller's future is dropped while a grant is
//! on its way, the attempt releases what it was granted instead of leaking a hold.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{Acquire, AcquireRequest, Backend};
use crate::client::Inner;
use crate::guard::Guard;
use crate::metrics::{self, AcquireOutcome};
use crate::{Error, LockRef};

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
pub(crate) async fn acquire(
    client: &Arc<Inner>,
    lock: LockRef,
    lease: Lease,
    wait: Wait,
) -> Result<Option<Guard>, Error> {
    let started = Instant::now();
    let kind = lock.kind;
    let result = acquire_inner(client, lock, lease, wait, started).await;
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

async fn acquire_inner(
    client: &Arc<Inner>,
    lock: LockRef,
    lease: Lease,
    wait: Wait,
    started: Instant,
) -> Result<Option<Guard>, Error> {
    let (lease_duration, renew) = match lease {
        Lease::Watchdog => (client.config.watchdog_lease, true),
        Lease::Fixed(d) => (d, false),
    };
    let mut request = AcquireRequest::new(lease_duration).fencing(client.config.fencing);
    // A caller that will wait says so (a fair lock queues it, a try never queues) and
    // tells the backend when it gives up, even when its caller goes away, unless it ends
    // up holding the lock.
    let mut queued = None;
    if !matches!(wait, Wait::Never) {
        request = request.enqueue(client.config.fair_waiter_timeout);
        queued = Some(QueuedWaiter {
            backend: Arc::clone(&client.backend),
            lock: lock.clone(),
            armed: true,
        });
    }
    // Attempts are boxed: a waiter spends its life between attempts, and its resident
    // state should not reserve room for one (thousands of waiters add up).
    if let Attempt::Acquired(guard) = Box::pin(attempt(client, &lock, request, renew)).await? {
        QueuedWaiter::served(&mut queued);
        return Ok(Some(guard));
    }
    if matches!(wait, Wait::Never) || expired(wait) {
        return Ok(None);
    }
    let listener = client.backend.listen(&lock).await?;
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
        let request = request.waiting(waited, starving);
        let ttl = match Box::pin(attempt(client, &lock, request, renew)).await? {
            Attempt::Acquired(guard) => {
                QueuedWaiter::served(&mut queued);
                metrics::waited(lock.kind, started.elapsed());
                return Ok(Some(guard));
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
        };
        let remaining = match wait {
            Wait::Never => return Ok(None),
            Wait::Until(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                Some(left)
            }
            Wait::Forever => None,
        };
        // Sleep until notified, or until the holder's lease could have run out (a lost
        // message must not strand us), or until the caller's wait is over.
        let cap = client.config.watchdog_lease;
        let sleep_for = match (ttl, remaining) {
            (Some(t), Some(r)) => t.min(r),
            (Some(t), None) => t,
            (None, Some(r)) => r.min(cap),
            (None, None) => cap,
        };
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep(sleep_for.max(Duration::from_millis(1))) => {}
        }
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
}

/// One acquire request, cancel-safe: see the module docs.
async fn attempt(
    client: &Arc<Inner>,
    lock: &LockRef,
    request: AcquireRequest,
    renew: bool,
) -> Result<Attempt, Error> {
    let lease = request.lease;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
    let (tx, rx) = oneshot::channel();
    let backend = Arc::clone(&client.backend);
    let lock_ref = lock.clone();
    let sent = Instant::now();
    runtime.spawn(async move {
        let reply = backend.acquire(&lock_ref, request).await;
        if let Err(Ok(Acquire::Acquired { .. })) = tx.send(reply) {
            // The caller went away while the grant was in flight.
            release_orphan(&*backend, &lock_ref, lease).await;
        }
    });
    let mut pending = PendingReply {
        rx: Some(rx),
        backend: Arc::clone(&client.backend),
        lock: lock.clone(),
        lease,
    };
    let reply = pending
        .receive()
        .await
        .ok_or_else(|| Error::protocol("the acquire task ended without a reply"))??;
    match reply {
        Acquire::Acquired { holds, token } => {
            let hold = client.attach(lock, holds, sent, lease, renew, token);
            Ok(Attempt::Acquired(Guard::new(
                Arc::clone(client),
                hold,
                lease,
                renew,
            )))
        }
        Acquire::Busy { ttl, reserved } => Ok(Attempt::Busy { ttl, reserved }),
    }
}

async fn release_orphan(backend: &dyn Backend, lock: &LockRef, lease: Duration) {
    // Nothing to report to: the caller is gone. The lease bounds the hold if this fails.
    let _ = backend.release(lock, lease).await;
}

/// The receiving end of an attempt. If it is dropped after the reply arrived but before
/// it was taken, the granted hold is released here.
struct PendingReply {
    rx: Option<oneshot::Receiver<Result<Acquire, Error>>>,
    backend: Arc<dyn Backend>,
    lock: LockRef,
    lease: Duration,
}

impl PendingReply {
    /// The reply, or `None` if the attempt task died without one.
    async fn receive(&mut self) -> Option<Result<Acquire, Error>> {
        let rx = self.rx.as_mut()?;
        let reply = rx.await.ok();
        self.rx = None;
        reply
    }
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        if let Ok(Ok(Acquire::Acquired { .. })) = rx.try_recv()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let backend = Arc::clone(&self.backend);
            let lock = self.lock.clone();
            let lease = self.lease;
            runtime.spawn(async move { release_orphan(&*backend, &lock, lease).await });
        }
    }
}

/// A waiter's standing with the backend (a fair lock's place in its queue, a composite
/// lock's partial holds). Unless it was served, dropping it (the wait ended, failed or was
/// cancelled) tells the backend in the background, so that a fair queue moves on at once.
struct QueuedWaiter {
    backend: Arc<dyn Backend>,
    lock: LockRef,
    armed: bool,
}

impl QueuedWaiter {
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
        // Without a runtime the place lapses at its deadline instead.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let backend = Arc::clone(&self.backend);
            let lock = self.lock.clone();
            runtime.spawn(async move {
                let _ = backend.cancel_wait(&lock).await;
            });
        }
    }
}
