//! The count-down latch's operations: [`LatchBackend`] and its request.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::RequestId;
use crate::notify::Listener;
use crate::{Error, LockName};

/// A count-down latch operation that changes the count: its id makes a retry (after a
/// lost reply) answer as the first run instead of counting twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchRequest {
    /// The request's id.
    pub id: RequestId,
    /// How long the caller may send the request again (and the store remember it).
    pub retry_window: Duration,
}

impl LatchRequest {
    /// A request with a fresh id, remembered for `retry_window`.
    #[must_use]
    pub fn new(retry_window: Duration) -> Self {
        Self {
            id: RequestId::random(),
            retry_window,
        }
    }
}

/// The count-down latches of a store (Java's `CountDownLatch`, shared): a count per name
/// that services count down, and waiters that all go on once it reaches zero.
///
/// A latch's name shares the store's name space with its locks: a name used by a lock
/// answers [`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible).
#[async_trait]
pub trait LatchBackend: fmt::Debug + Send + Sync {
    /// For a layer that takes this family over (see [Layers](super::Backend#layers)):
    /// the wrapped backend's, which answers every operation the layer does not override.
    /// A store that implements the family overrides every operation and keeps the
    /// default, whose operations answer [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn below(&self) -> &dyn LatchBackend {
        &super::Unsupported
    }

    /// Sets the count to `count` (at least 1) if the latch is open (no count); whether
    /// it did. Setting a count closes the latch again and tells its listeners.
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error> {
        self.below().try_set_count(name, count).await
    }

    /// Counts down once and returns the count left (0: the latch is open; counting down
    /// an open latch changes nothing). Reaching zero wakes every listener.
    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error> {
        self.below().count_down(name, request).await
    }

    /// The count left; 0 when the latch is open.
    async fn count(&self, name: &LockName) -> Result<u64, Error> {
        self.below().count(name).await
    }

    /// Deletes the latch (it is then open); whether there was one. Listeners are told.
    async fn delete(&self, name: &LockName) -> Result<bool, Error> {
        self.below().delete(name).await
    }

    /// Starts listening for the latch's notifications (opened, closed again). Subscribed
    /// when this returns.
    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.below().listen(name).await
    }
}
