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
use crate::script::{self, Script};
use crate::transport::Reply;
use crate::{events, layout};

impl RedisBackend {
    /// Runs an expirable-semaphore script: the semaphore and its issued permits (then
    /// `extra` keys) as keys; the channel, the publish command and `args` (then the ids)
    /// as arguments.
    async fn eval_expirable(
        &self,
        during: &'static str,
        script: &'static Script,
        name: &LockName,
        extra: &[&str],
        args: &[&str],
        ids: &[PermitId],
    ) -> Result<Reply, Error> {
        let timeouts = layout::permit_timeouts_key(name);
        let mut keys = vec![layout::lock_key(name), &timeouts];
        keys.extend(extra);
        let channel = layout::semaphore_channel(name);
        let ids: Vec<String> = ids.iter().map(PermitId::to_string).collect();
        let mut all = vec![&*channel, self.options.publish.command()];
        all.extend(args);
        all.extend(ids.iter().map(String::as_str));
        self.eval(during, script, &keys, &all).await
    }

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
        let lease = millis(lease).to_string();
        let exactly = if exactly { "1" } else { "0" };
        let reply = self
            .eval_expirable(
                "renewing permits",
                &script::EXPIRABLE_RENEW,
                name,
                &[],
                &[&lease, exactly],
                ids,
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
        let [lease, quarantine] = numbers.get();
        let epoch = self.epoch_key(name);
        let reserved = layout::permit_reservation_key(name);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let [reserving, so_far_ms, kept_ms] = reservation_args(request.reserve);
        let reply = self
            .eval_expirable(
                "issuing permits",
                &script::EXPIRABLE_ISSUE,
                name,
                &[&epoch, &reserved, &marker, &peak],
                &[lease, quarantine, &reserving, &so_far_ms, &kept_ms],
                &request.ids,
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
        let remembered = millis(request.retry_window).to_string();
        let reply = self
            .eval_expirable(
                "giving permits back",
                &script::EXPIRABLE_RELEASE,
                name,
                &[&answer],
                &[&remembered],
                &request.ids,
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
        let reply = self
            .eval_expirable(
                "reading permits",
                &script::EXPIRABLE_READ,
                name,
                &[],
                &[],
                &[],
            )
            .await?;
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
