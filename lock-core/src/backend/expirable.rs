//! The contract of expirable semaphores: permits with ids and leases.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;

use super::{PermitReservation, RequestId};
use crate::notify::Listener;
use crate::{Error, LockName};

/// The id of one issued permit of an expirable semaphore: 16 random bytes, shown as 32
/// lowercase hex digits (the form Java services use, so ids can be passed between them).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PermitId(u128);

impl PermitId {
    /// A fresh random id.
    #[must_use]
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }

    /// The id's 16 bytes, most significant first (as stored).
    #[must_use]
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The id of these 16 bytes.
    #[must_use]
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }
}

impl fmt::Debug for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PermitId({self})")
    }
}

impl fmt::Display for PermitId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl FromStr for PermitId {
    type Err = Error;

    /// Parses 32 hex digits (either case); anything else is
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument).
    fn from_str(text: &str) -> Result<Self, Error> {
        let hex = text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit());
        match u128::from_str_radix(text, 16) {
            Ok(id) if hex => Ok(Self(id)),
            _ => Err(Error::invalid_argument(
                "permit id",
                "must be 32 hexadecimal digits",
            )),
        }
    }
}

/// Permits asked for: one id per permit, chosen by the caller, so that a request sent
/// again (after a lost reply) finds its permits issued instead of taking more.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IssueRequest {
    /// The ids of the permits to issue, one per permit.
    pub ids: Vec<PermitId>,
    /// How long the permits stay issued unless renewed, counted on the store's clock.
    pub lease: Duration,
    /// Set when the caller has waited past the starvation threshold.
    pub reserve: Option<PermitReservation>,
}

impl IssueRequest {
    /// A request for `permits` permits with fresh ids and a lease of `lease`.
    #[must_use]
    pub fn new(permits: usize, lease: Duration) -> Self {
        Self {
            ids: (0..permits).map(|_| PermitId::random()).collect(),
            lease,
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

/// The reply to [`ExpirableSemaphoreBackend::try_issue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Issue {
    /// The permits are issued under the request's ids.
    Issued,
    /// Too few are available; `next_expiry` is how long until the first issued permit
    /// expires (and comes back), when one can.
    Busy {
        /// Time until the earliest issued permit expires.
        next_expiry: Option<Duration>,
    },
    /// More permits were asked for than the semaphore has in all (available and issued
    /// together), so waiting cannot help until permits are added.
    Exceeds {
        /// The semaphore's permits in all.
        total: i64,
    },
}

/// Issued permits given back, under an id that makes a retry (after a lost reply) answer
/// as the first run instead of reporting them unknown.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReturnRequest {
    /// The permits to give back.
    pub ids: Vec<PermitId>,
    /// The request's id.
    pub id: RequestId,
    /// How long the caller may send the request again (and the store remember it).
    pub retry_window: Duration,
}

impl ReturnRequest {
    /// A request giving back `ids` with a fresh id, remembered for `retry_window`.
    #[must_use]
    pub fn new(ids: Vec<PermitId>, retry_window: Duration) -> Self {
        Self {
            ids,
            id: RequestId::random(),
            retry_window,
        }
    }
}

/// The expirable semaphores of a store (Java's `PermitExpirableSemaphore`): a count of
/// available permits per name, as for [`SemaphoreBackend`](super::SemaphoreBackend)
/// (and stored alike, so both kinds share a name's count), and the permits issued from
/// it, each with an id and an expiry on the store's clock.
///
/// Every operation that reads, issues, renews or gives back permits first reclaims the
/// issued permits whose expiry passed: they are available again, and listeners are told. Names share the store's name space with its
/// locks and latches: a name used by another kind answers
/// [`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible).
#[async_trait]
pub trait ExpirableSemaphoreBackend: fmt::Debug + Send + Sync {
    /// For a layer that takes this family over (see [Layers](super::Backend#layers)):
    /// the wrapped backend's, which answers every operation the layer does not override.
    /// A store that implements the family overrides every operation and keeps the
    /// default, whose operations answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn below(&self) -> &dyn ExpirableSemaphoreBackend {
        &super::Unsupported
    }

    /// Sets the available permits to `permits` if the semaphore has none set (absent);
    /// whether it did. Listeners are told.
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        self.below().try_set_permits(name, permits).await
    }

    /// Adds `delta` (possibly negative) to the available permits and returns the new
    /// count. Listeners are told when permits were added.
    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        self.below().add_permits(name, delta).await
    }

    /// Issues `request.ids` if that many permits are available and another waiter's
    /// reservation does not hold them back ([`PermitReservation`], shared with the plain
    /// semaphore of the name). Ids already issued (a request sent again) answer
    /// [`Issue::Issued`] and take nothing more.
    async fn try_issue(&self, name: &LockName, request: &IssueRequest) -> Result<Issue, Error> {
        self.below().try_issue(name, request).await
    }

    /// Gives back every permit of `request.ids` if all of them are issued; whether they
    /// were (when one is not, nothing changes). The same request sent again answers as the
    /// first time. Listeners are told.
    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        self.below().release(name, request).await
    }

    /// Extends the expiry of each of `ids` that is still issued to at least `lease` from
    /// now, never shortening it (the watchdog's renewal: one that lands late must not
    /// cut a lease set since); for each id in order, whether it was issued.
    async fn renew(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.below().renew(name, ids, lease).await
    }

    /// Sets the expiry of each of `ids` that is still issued to `lease` from now, longer
    /// or shorter (Java's `updateLeaseTime`); for each id in order, whether it was issued.
    async fn set_lease(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.below().set_lease(name, ids, lease).await
    }

    /// Ends `waiter`'s reservation of permits of `name`, if it holds it (a waiter that
    /// gave up).
    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        self.below().cancel_reservation(name, waiter).await
    }

    /// The available permits (0 for a semaphore never set) and the issued ones.
    async fn permits(&self, name: &LockName) -> Result<(i64, u64), Error> {
        self.below().permits(name).await
    }

    /// Starts listening for the semaphore's notifications (permits added, given back or
    /// reclaimed). Subscribed when this returns.
    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.below().listen(name).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permit_ids_read_back_what_they_show_and_refuse_the_rest() {
        let id = PermitId::random();
        let shown = id.to_string();
        assert_eq!(shown.len(), 32);
        assert_eq!(shown.parse::<PermitId>().expect("own form"), id);
        assert_eq!(shown.to_uppercase().parse::<PermitId>().expect("upper"), id);
        assert_eq!(PermitId::from_bytes(id.to_bytes()), id);
        for bad in ["", "xyz", "+0000000000000000000000000000001", &shown[1..]] {
            let err = bad.parse::<PermitId>().expect_err(bad);
            assert_eq!(err.kind(), crate::ErrorKind::InvalidArgument, "{bad}");
        }
    }
}
