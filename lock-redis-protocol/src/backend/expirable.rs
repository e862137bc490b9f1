//! Redisson's `RPermitExpirableSemaphore`: the available count in the string `name` (the
//! plain semaphore's), the issued permits in the sorted set `{name}:timeout`, and the
//! plain semaphore's channel `redisson_sc:{name}`.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{
    ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, ReturnRequest, SemaphoreBackend,
};
use lock_core::notify::Listener;
use lock_core::{Error, LockName, MAX_DURATION, RequestId};

use super::semaphore::reservation_args;
use super::{RedisBackend, integer, millis, unexpected};
use crate::decimals::Decimals;
use crate::transport::Reply;
use crate::{calls, events, layout};

/// The semaphore's issued permits and its channel, which every script takes.
fn issued_and_channel(name: &LockName) -> (String, String) {
    (
        layout::permit_timeouts_key(name),
        layout::semaphore_channel(name),
    )
}

/// The permits' ids as the scripts take them (hex).
fn id_texts(ids: &[PermitId]) -> Vec<String> {
    ids.iter().map(PermitId::to_string).collect()
}

impl RedisBackend {
    /// Extends the expiries of `ids` still issued to `lease` from now, or sets them
    /// `exactly`; for each id, whether it was issued.
    async fn update_expiries(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
        exactly: bool,
    ) -> Result<Vec<bool>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let lease_ms = millis(lease).to_string();
        let (issued, channel) = issued_and_channel(name);
        let texts = id_texts(ids);
        let items: Vec<calls::ExpirableRenewed<'_>> = texts
            .iter()
            .map(|id| calls::ExpirableRenewed { id })
            .collect();
        let call = calls::ExpirableRenew {
            semaphore: layout::lock_key(name),
            issued: &issued,
            channel: &channel,
            publish: self.options.publish.command(),
            lease_ms: &lease_ms,
            exact: if exactly { "1" } else { "0" },
        };
        let (keys, args) = (call.keys_with(&items), call.args_with(&items));
        let reply = self
            .eval(
                "renewing permits",
                calls::ExpirableRenew::SCRIPT,
                &keys,
                &args,
            )
            .await?;
        match &reply {
            Reply::Array(items) if items.len() == ids.len() => items
                .iter()
                .map(|item| match item {
                    Reply::Int(renewed) => Ok(*renewed == 1),
                    _ => Err(unexpected("expirable renew", &reply)),
                })
                .collect(),
            _ => Err(unexpected("expirable renew", &reply)),
        }
    }
}

#[async_trait]
impl ExpirableSemaphoreBackend for RedisBackend {
    /// The plain semaphore's: both kinds share the count (Redisson's trySetPermits is
    /// the same for both).
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        SemaphoreBackend::try_set_permits(self, name, permits).await
    }

    /// The plain semaphore's.
    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        SemaphoreBackend::add_permits(self, name, delta).await
    }

    async fn try_issue(&self, name: &LockName, request: &IssueRequest) -> Result<Issue, Error> {
        if request.ids.is_empty() {
            return Err(Error::invalid_argument("permits", "must be at least 1"));
        }
        let numbers = Decimals::new([millis(request.lease), self.quarantine_ms()]);
        let [lease_ms, quarantine_ms] = numbers.get();
        let epoch = self.epoch_key(name);
        let reservation = layout::permit_reservation_key(name);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let (issued, channel) = issued_and_channel(name);
        let [waiter, waited_ms, reservation_ms] = reservation_args(request.reserve);
        let texts = id_texts(&request.ids);
        let items: Vec<calls::ExpirableIssued<'_>> = texts
            .iter()
            .map(|id| calls::ExpirableIssued { id })
            .collect();
        let call = calls::ExpirableIssue {
            semaphore: layout::lock_key(name),
            issued: &issued,
            epoch: &epoch,
            reservation: &reservation,
            marker: &marker,
            peak: &peak,
            channel: &channel,
            publish: self.options.publish.command(),
            lease_ms,
            quarantine_ms,
            waiter: &waiter,
            waited_ms: &waited_ms,
            reservation_ms: &reservation_ms,
        };
        let (keys, args) = (call.keys_with(&items), call.args_with(&items));
        let reply = self
            .eval(
                "issuing permits",
                calls::ExpirableIssue::SCRIPT,
                &keys,
                &args,
            )
            .await?;
        let Reply::Array(items) = &reply else {
            return Err(unexpected("expirable issue", &reply));
        };
        match items.as_slice() {
            [Reply::Int(1)] => Ok(Issue::Issued),
            [Reply::Int(2), Reply::Int(total)] => Ok(Issue::Exceeds { total: *total }),
            [Reply::Int(0)] => Ok(Issue::Busy { next_expiry: None }),
            [Reply::Int(3), Reply::Int(ms)] => {
                let left = Duration::from_millis(u64::try_from(*ms).unwrap_or(0));
                events::quarantine_active(name, Some(left));
                Ok(Issue::Busy {
                    next_expiry: Some(left),
                })
            }
            [Reply::Int(0), Reply::Int(ms)] => {
                // A Java permit without a lease has an expiry thousands of years away.
                let next = Duration::from_millis(u64::try_from(*ms).unwrap_or(0));
                Ok(Issue::Busy {
                    next_expiry: Some(next.min(MAX_DURATION)),
                })
            }
            _ => Err(unexpected("expirable issue", &reply)),
        }
    }

    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        let answer = layout::permit_answer_key(name, request.id);
        let answer_ms = millis(request.retry_window).to_string();
        let (issued, channel) = issued_and_channel(name);
        let texts = id_texts(&request.ids);
        let items: Vec<calls::ExpirableReleased<'_>> = texts
            .iter()
            .map(|id| calls::ExpirableReleased { id })
            .collect();
        let call = calls::ExpirableRelease {
            semaphore: layout::lock_key(name),
            issued: &issued,
            answer: &answer,
            channel: &channel,
            publish: self.options.publish.command(),
            answer_ms: &answer_ms,
        };
        let (keys, args) = (call.keys_with(&items), call.args_with(&items));
        let reply = self
            .eval(
                "giving permits back",
                calls::ExpirableRelease::SCRIPT,
                &keys,
                &args,
            )
            .await?;
        integer("expirable release", reply).map(|released| released == 1)
    }

    async fn renew(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.update_expiries(name, ids, lease, false).await
    }

    async fn set_lease(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.update_expiries(name, ids, lease, true).await
    }

    /// The plain semaphore's: both kinds share the reservation.
    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        SemaphoreBackend::cancel_reservation(self, name, waiter).await
    }

    async fn permits(&self, name: &LockName) -> Result<(i64, u64), Error> {
        let (issued, channel) = issued_and_channel(name);
        let call = calls::ExpirableRead {
            semaphore: layout::lock_key(name),
            issued: &issued,
            channel: &channel,
            publish: self.options.publish.command(),
        };
        let reply = self.run("reading permits", &call).await?;
        match &reply {
            Reply::Array(items) => match items.as_slice() {
                [Reply::Int(available), Reply::Int(issued)] => {
                    Ok((*available, u64::try_from(*issued).unwrap_or(0)))
                }
                _ => Err(unexpected("expirable read", &reply)),
            },
            _ => Err(unexpected("expirable read", &reply)),
        }
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        SemaphoreBackend::listen(self, name).await
    }
}
