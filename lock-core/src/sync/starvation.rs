//! A wait for permits that starves: once it has waited past the client's threshold, its
//! attempts reserve the permits it asks for, so that waiters for fewer do not overtake
//! it for ever.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::backend::{PermitReservation, RequestId};
use crate::client::shared::Inner;
use crate::{LockName, events};

/// How long a starving waiter's reservation lasts without another attempt: what a
/// waiter that died holds back from the others at most. A waiter attempts again a
/// third of this after its last attempt, released permits or not.
const RESERVATION_KEPT_FOR: Duration = Duration::from_secs(3);

/// Kept by an attempt until it is over (see [`Starvation::next_attempt`]).
pub(crate) type AttemptTicket = oneshot::Sender<()>;

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
    attempts: u32,
    /// The reservation the latest attempt sent.
    latest: Option<PermitReservation>,
    reserved: bool,
    granted: bool,
    /// Closed once the latest attempt is over: a cancellation sent before would reach
    /// the store first, and the attempt would then reserve again, for a waiter gone.
    attempt_done: Option<oneshot::Receiver<()>>,
}

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
            attempts: 0,
            latest: None,
            reserved: false,
            granted: false,
            attempt_done: None,
        }
    }

    /// What the next attempt sends and keeps: the reservation, once the threshold
    /// passed, and a ticket to keep until it is over (if the wait ends without the
    /// permits, its reservation is cancelled only once the attempt dropped the ticket).
    /// The first attempt, a try, reserves nothing and needs no ticket.
    pub(crate) fn next_attempt(&mut self) -> (Option<PermitReservation>, Option<AttemptTicket>) {
        self.attempts = self.attempts.saturating_add(1);
        if self.attempts == 1 {
            return (None, None);
        }
        let waited = self.since.elapsed();
        let starving = self.threshold.is_some_and(|threshold| waited >= threshold);
        self.reserved |= starving;
        self.latest =
            starving.then(|| PermitReservation::new(self.waiter, waited, RESERVATION_KEPT_FOR));
        let (ticket, done) = oneshot::channel();
        self.attempt_done = Some(done);
        (self.latest, Some(ticket))
    }

    /// Records that the permits were granted: the grant ended any reservation.
    pub(crate) fn granted(&mut self) {
        self.granted = true;
    }

    /// Resolves when the waiter must attempt again even if nothing was released: to
    /// keep the reservation its latest attempt sent, or to make one once the threshold
    /// passes; never when reservations are off.
    pub(crate) fn refresh(&self) -> impl Future<Output = ()> + Send + 'static {
        let (latest, threshold, since) = (self.latest, self.threshold, self.since);
        async move {
            match (latest, threshold) {
                (Some(reserve), _) => tokio::time::sleep(reserve.kept_for / 3).await,
                (None, Some(threshold)) => tokio::time::sleep_until(since + threshold).await,
                (None, None) => std::future::pending().await,
            }
        }
    }
}

impl Drop for Starvation {
    fn drop(&mut self) {
        if !self.reserved || self.granted {
            return;
        }
        let client = Arc::clone(&self.client);
        let (name, waiter, expirable) = (self.name.clone(), self.waiter, self.expirable);
        let task_name = name.clone();
        let attempt_done = self.attempt_done.take();
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
                events::reservation_not_cancelled(&task_name, &err);
            }
        });
        if let Err(err) = cancelled {
            events::reservation_not_cancelled(&name, &err);
        }
    }
}
