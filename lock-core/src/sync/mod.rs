//! The synchronizers beside the locks: the [`Semaphore`](crate::Semaphore), the
//! [`ExpirableSemaphore`](crate::ExpirableSemaphore) with its leased permits, and the
//! [`CountDownLatch`](crate::CountDownLatch).

pub(crate) mod expirable;
pub(crate) mod latch;
pub(crate) mod leased;
pub(crate) mod leased_permits;
pub(crate) mod semaphore;
pub(crate) mod starvation;
