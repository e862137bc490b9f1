//! One acquire attempt, cancel-safe: an [`InFlight`] request whose grant, if its caller
//! never learns of it, is undone in the background. A waiter's standing with the store
//! (its place in a fair queue) is given up the same way when the wait ends without the
//! lock.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{Acquire, AcquireRequest, Backend, ReleaseRequest, RequestId};
use crate::client::shared::{Granted, Inner};
use crate::locks::guard::Guard;
use crate::wait::{InFlight, Settle, Wait};
use crate::{Error, LockRef};
use crate::{events, retry};

pub(super) enum Attempt {
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
pub(super) async fn attempt(
    client: &Arc<Inner>,
    lock: &LockRef,
    request: AcquireRequest,
    renew: bool,
    wait: Wait,
    (queued, resent): (Option<&mut QueuedWaiter>, &mut bool),
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
    let (backend, lock_ref) = (Arc::clone(&client.backend), lock.clone());
    let sent = Instant::now();
    let answer_by = match wait {
        Wait::Never => sent,
        Wait::Until(deadline) => deadline.min(sent + request.retry_window),
        Wait::Forever => sent + request.retry_window,
    };
    let undo = UndoGrant {
        backend: Arc::clone(&backend),
        lock: lock.clone(),
        request,
    };
    let call = Box::pin(async move {
        let mut sends = 0_u32;
        let answer = retry::until_answered(answer_by, || {
            sends += 1;
            backend.acquire(&lock_ref, request)
        })
        .await;
        answer.map(|answer| (answer, sends > 1))
    });
    let (reply, sent_again) = InFlight::new(call, undo, &client.supervisor)
        .keeping(done)
        .await?;
    // An attempt sent more than once may have a copy on its way: its acquisition's
    // release is not settled (see `ReleaseRequest::settled`).
    *resent |= sent_again;
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
            let mut guard = guard(client, lock, granted, valid, (lease, renew));
            guard.settled = !*resent;
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

/// Ends the grant an acquire request may have got, if it is alive: its caller never
/// learnt of it. Nobody awaits this: a failure can only be logged, and the lease bounds
/// the hold.
#[derive(Clone)]
struct UndoGrant {
    backend: Arc<dyn Backend>,
    lock: LockRef,
    request: AcquireRequest,
}

impl Settle<(Acquire, bool)> for UndoGrant {
    async fn settle(self, answer: Option<(Acquire, bool)>) {
        if matches!(answer, None | Some((Acquire::Acquired { .. }, _))) {
            let Self {
                backend,
                lock,
                request,
            } = self;
            let undo =
                ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
            let until = Instant::now() + request.retry_window;
            let undone = retry::until_answered(until, || backend.release(&lock, undo)).await;
            if let Err(err) = undone {
                events::release_failed(&lock, "a grant its caller never learnt of", &err);
            }
        }
    }

    fn unsettled(&self, err: &Error) {
        // The lease bounds the hold.
        events::release_failed(&self.lock, "a grant its caller never learnt of", err);
    }
}

/// A waiter's standing with the backend (a fair lock's place in its queue, a composite
/// lock's partial holds). Unless it was served, dropping it (the wait ended, failed or was
/// cancelled) tells the backend in the background, so that a fair queue moves on at once.
pub(super) struct QueuedWaiter {
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
    pub(super) fn new(client: &Arc<Inner>, lock: &LockRef, request: AcquireRequest) -> Self {
        Self {
            client: Arc::clone(client),
            lock: lock.clone(),
            request,
            armed: true,
            attempt_done: None,
        }
    }

    /// The waiter got the lock: the server already took it off the queue.
    pub(super) fn served(waiter: &mut Option<Self>) {
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

/// The guard of grant `grant`, sent at `sent`, whose hold's lease runs `valid` from
/// then: attached to the owner's hold (a reentry joins it), renewed by the watchdog with
/// `renew`, and released with `lease`.
pub(super) fn guard(
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

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::Poll;

    use super::*;
    use crate::memory::MemoryBackend;
    use crate::{LockKind, LockName, Owner};

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
        let call = Box::pin(async move {
            let reply = backend.acquire(&lock_ref, request).await;
            answer_comes.await.expect("the test sends the answer");
            reply.map(|reply| (reply, false))
        });
        let undo = UndoGrant {
            backend: Arc::clone(&client.backend),
            lock: lock.clone(),
            request,
        };
        let mut in_flight = InFlight::new(call, undo, &client.supervisor);
        assert!(
            poll_once(&mut in_flight).await.is_pending(),
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
    async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
    }
}
