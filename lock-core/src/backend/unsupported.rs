//! [`Unsupported`]: the families of operations a store does not implement.

use std::time::Duration;

use async_trait::async_trait;

use super::{
    ExpirableSemaphoreBackend, Issue, IssueRequest, LatchBackend, LatchRequest, PermitAnswer,
    PermitId, PermitRequest, ReturnRequest, SemaphoreBackend,
};
use crate::backend::{ClientInfo, Introspect, LockInfo, RequestId};
use crate::notify::Listener;
use crate::{Error, LockName};

/// The semaphores, expirable semaphores, latches and introspection of a store that has
/// none: every operation answers [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
/// What [`Backend::semaphores`](super::Backend::semaphores) and its siblings return by
/// default. The end of every chain of [`SemaphoreBackend::below`] and its siblings, so
/// it writes every operation out.
#[derive(Debug, Clone, Copy, Default)]
pub struct Unsupported;

const SEMAPHORES: &str = "semaphores";
const EXPIRABLE: &str = "expirable semaphores";
const LATCHES: &str = "count-down latches";
const INTROSPECTION: &str = "introspection";

#[async_trait]
impl SemaphoreBackend for Unsupported {
    async fn try_set_permits(&self, _: &LockName, _: u64) -> Result<bool, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn add_permits(&self, _: &LockName, _: i64) -> Result<i64, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn try_acquire(&self, _: &LockName, _: PermitRequest) -> Result<PermitAnswer, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn release(&self, _: &LockName, _: PermitRequest) -> Result<i64, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn available(&self, _: &LockName) -> Result<i64, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn drain(&self, _: &LockName) -> Result<i64, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn cancel_reservation(&self, _: &LockName, _: RequestId) -> Result<(), Error> {
        Err(Error::unsupported(SEMAPHORES))
    }

    async fn listen(&self, _: &LockName) -> Result<Listener, Error> {
        Err(Error::unsupported(SEMAPHORES))
    }
}

#[async_trait]
impl ExpirableSemaphoreBackend for Unsupported {
    async fn try_set_permits(&self, _: &LockName, _: u64) -> Result<bool, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn add_permits(&self, _: &LockName, _: i64) -> Result<i64, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn try_issue(&self, _: &LockName, _: &IssueRequest) -> Result<Issue, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn release(&self, _: &LockName, _: &ReturnRequest) -> Result<bool, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn renew(&self, _: &LockName, _: &[PermitId], _: Duration) -> Result<Vec<bool>, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn set_lease(
        &self,
        _: &LockName,
        _: &[PermitId],
        _: Duration,
    ) -> Result<Vec<bool>, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn cancel_reservation(&self, _: &LockName, _: RequestId) -> Result<(), Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn permits(&self, _: &LockName) -> Result<(i64, u64), Error> {
        Err(Error::unsupported(EXPIRABLE))
    }

    async fn listen(&self, _: &LockName) -> Result<Listener, Error> {
        Err(Error::unsupported(EXPIRABLE))
    }
}

#[async_trait]
impl LatchBackend for Unsupported {
    async fn try_set_count(&self, _: &LockName, _: u64) -> Result<bool, Error> {
        Err(Error::unsupported(LATCHES))
    }

    async fn count_down(&self, _: &LockName, _: LatchRequest) -> Result<u64, Error> {
        Err(Error::unsupported(LATCHES))
    }

    async fn count(&self, _: &LockName) -> Result<u64, Error> {
        Err(Error::unsupported(LATCHES))
    }

    async fn delete(&self, _: &LockName) -> Result<bool, Error> {
        Err(Error::unsupported(LATCHES))
    }

    async fn listen(&self, _: &LockName) -> Result<Listener, Error> {
        Err(Error::unsupported(LATCHES))
    }
}

#[async_trait]
impl Introspect for Unsupported {
    async fn describe(&self, _: &LockName) -> Result<LockInfo, Error> {
        Err(Error::unsupported(INTROSPECTION))
    }

    async fn held_names(&self, _: &str, _: usize) -> Result<Vec<String>, Error> {
        Err(Error::unsupported(INTROSPECTION))
    }

    async fn announce(&self, _: &str, _: &ClientInfo, _: Duration) -> Result<(), Error> {
        Err(Error::unsupported(INTROSPECTION))
    }
}
