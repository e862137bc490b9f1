//! The plain semaphore's operations: [`SemaphoreBackend`] and its requests.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::RequestId;
use crate::notify::Listener;
use crate::{Error, LockName};

/// Permits asked for or given back, under an id that makes a retry (after a lost reply)
/// answer as the first run instead of taking or returning them twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitRequest {
    /// How many permits.
    pub permits: u64,
    /// The request's id.
    pub id: RequestId,
    /// How long the caller may send the request again (and the store remember it).
    pub retry_window: Duration,
    /// Set when the caller has waited past the starvation threshold (acquisitions only).
    pub reserve: Option<PermitReservation>,
}

impl PermitRequest {
    /// A request for `permits` with a fresh id, remembered for `retry_window`.
    #[must_use]
    pub fn new(permits: u64, retry_window: Duration) -> Self {
        Self {
            permits,
            id: RequestId::random(),
            retry_window,
            reserve: None,
        }
    }

    /// The release of the permits granted to acquisition `grant`: see
    /// [`SemaphoreBackend::release`].
    #[must_use]
    pub fn of_grant(grant: RequestId, retry_window: Duration) -> Self {
        Self {
            permits: 0,
            id: grant,
            retry_window,
            reserve: None,
        }
    }

    /// Marks the request as a starving waiter's (see [`PermitReservation`]).
    #[must_use]
    pub fn reserving(mut self, reserve: Option<PermitReservation>) -> Self {
        self.reserve = reserve;
        self
    }
}

/// A plain semaphore's answer to an acquisition ([`SemaphoreBackend::try_acquire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermitAnswer {
    /// The permits were taken.
    Taken,
    /// Too few are available now, or another waiter's reservation holds them back.
    Unavailable,
    /// More than the semaphore's peak: more than it has had available at once since its
    /// count last went down (by `add_permits` with a negative delta, or `drain`). The
    /// store cannot tell how many permits exist in all (holders outside this library are
    /// counted nowhere), so such a request may only ever be served after permits are
    /// added: it reserves nothing, and holds its client's waiting line for nobody
    /// (second review, N6: a reservation for permits that do not exist starved every
    /// other acquirer for as long as it waited).
    BeyondPeak,
}

impl PermitAnswer {
    /// Whether the permits were taken.
    #[must_use]
    pub fn taken(self) -> bool {
        self == Self::Taken
    }
}

/// A waiter for permits that has waited past the starvation threshold. Its attempt,
/// when too few permits are available, reserves the number it asks for: from then on
/// every other acquirer of the store may take only permits beyond that number, until
/// this waiter gets its permits or stops asking for `kept_for`. One waiter holds a
/// semaphore's reservation at a time: the one that has waited longest (a starving
/// attempt that began waiting earlier than the holder takes the reservation over). This
/// is how a waiter for many permits is not starved by a stream of waiters for few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitReservation {
    /// The waiting acquisition, the same across its attempts.
    pub waiter: RequestId,
    /// How long the reservation lasts without another attempt of the waiter.
    pub kept_for: Duration,
    /// How long the waiter has waited so far.
    pub waited: Duration,
}

impl PermitReservation {
    /// The reservation of `waiter`, which has waited `so_far`, kept `kept_for` after
    /// each attempt.
    #[must_use]
    pub fn new(waiter: RequestId, so_far: Duration, kept_for: Duration) -> Self {
        Self {
            waiter,
            kept_for,
            waited: so_far,
        }
    }
}

/// The semaphores of a store (Java's `Semaphore`, shared between services): a count
/// of available permits per name; acquiring takes some, releasing gives some back.
///
/// Names share the store's name space with its locks and latches: a name used by another
/// kind answers [`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible).
#[async_trait]
pub trait SemaphoreBackend: fmt::Debug + Send + Sync {
    /// For a layer that takes this family over (see [Layers](super::Backend#layers)):
    /// the wrapped backend's, which answers every operation the layer does not override.
    /// A store that implements the family overrides every operation and keeps the
    /// default, whose operations answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn below(&self) -> &dyn SemaphoreBackend {
        &super::Unsupported
    }

    /// Sets the available permits to `permits` if the semaphore has none set (absent);
    /// whether it did. Listeners are told.
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        self.below().try_set_permits(name, permits).await
    }

    /// Adds `delta` (possibly negative) to the available permits and returns the new
    /// count. Listeners are told.
    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        self.below().add_permits(name, delta).await
    }

    /// Takes `request.permits` if that many are available and another waiter's
    /// reservation does not hold them back ([`PermitReservation`]). A grant is kept
    /// under the request's id for as long as its permits are held (plain permits have no
    /// lease), so that it is given back exactly once. The same request sent again
    /// answers as the first time and takes nothing more; once its grant was given back,
    /// it takes nothing at all.
    ///
    /// The store keeps the semaphore's peak: the most permits available at once since
    /// the count last went down. A request for more than that reserves nothing (a
    /// reservation held by such a request holds nothing back either) and is answered
    /// [`PermitAnswer::BeyondPeak`] when it takes nothing.
    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        self.below().try_acquire(name, request).await
    }

    /// Gives back the permits of the grant of acquisition `request.id` (see
    /// [`PermitRequest::of_grant`]) if it holds them, ending it, and returns the
    /// available count after. A grant not held (never made, or given back before)
    /// changes nothing; the end is remembered for `request.retry_window`, so that a
    /// late copy of the acquisition takes nothing. Sent again, it answers as the first
    /// time, and it can be sent again for as long as it takes: it ends one grant at most
    /// once. The undo of an acquisition whose answer never came is the same request.
    /// Listeners are told.
    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        self.below().release(name, request).await
    }

    /// The available permits (0 for a semaphore never set).
    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        self.below().available(name).await
    }

    /// Takes every available permit and returns how many there were.
    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        self.below().drain(name).await
    }

    /// Ends `waiter`'s reservation of permits of `name`, if it holds it (a waiter that
    /// gave up).
    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        self.below().cancel_reservation(name, waiter).await
    }

    /// Starts listening for the semaphore's notifications (permits added or released).
    /// Subscribed when this returns.
    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.below().listen(name).await
    }
}
