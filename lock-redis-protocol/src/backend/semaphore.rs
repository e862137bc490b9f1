//! Redisson's `RSemaphore` over the lock protocol.

use async_trait::async_trait;
use lock_core::backend::{PermitAnswer, PermitRequest, SemaphoreBackend};
use lock_core::notify::Listener;
use lock_core::{Error, LockName, RequestId};

use super::{RedisBackend, integer, millis, unexpected};
use crate::transport::Reply;
use crate::{calls, layout};

/// Redisson's `RSemaphore`: the available count in the string `name`, the new count
/// published on `redisson_sc:{name}`.
#[async_trait]
impl SemaphoreBackend for RedisBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        let permits = permits.to_string();
        let channel = layout::semaphore_channel(name);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let call = calls::SemaphoreSet {
            semaphore: layout::lock_key(name),
            marker: &marker,
            peak: &peak,
            permits: &permits,
            channel: &channel,
            publish: self.options.publish.command(),
        };
        integer("semaphore set", self.run("setting permits", &call).await?).map(|set| set == 1)
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        let delta = delta.to_string();
        let channel = layout::semaphore_channel(name);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let call = calls::SemaphoreAdd {
            semaphore: layout::lock_key(name),
            marker: &marker,
            peak: &peak,
            delta: &delta,
            channel: &channel,
            publish: self.options.publish.command(),
        };
        integer("semaphore add", self.run("adding permits", &call).await?)
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let grant = layout::permit_answer_key(name, request.id);
        let reservation = layout::permit_reservation_key(name);
        let permits = request.permits.to_string();
        let [waiter, waited_ms, reservation_ms] = reservation_args(request.reserve);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let call = calls::SemaphoreAcquire {
            semaphore: layout::lock_key(name),
            grant: &grant,
            reservation: &reservation,
            marker: &marker,
            peak: &peak,
            permits: &permits,
            waiter: &waiter,
            waited_ms: &waited_ms,
            reservation_ms: &reservation_ms,
        };
        let reply = self.run("taking permits", &call).await?;
        match integer("semaphore acquire", reply)? {
            1 => Ok(PermitAnswer::Taken),
            0 => Ok(PermitAnswer::Unavailable),
            2 => Ok(PermitAnswer::BeyondPeak),
            other => Err(unexpected("semaphore acquire", &Reply::Int(other))),
        }
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let grant = layout::permit_answer_key(name, request.id);
        let channel = layout::semaphore_channel(name);
        let answer_ms = millis(request.retry_window).to_string();
        let marker = layout::kind_marker_key(name);
        let call = calls::SemaphoreRelease {
            semaphore: layout::lock_key(name),
            grant: &grant,
            marker: &marker,
            channel: &channel,
            publish: self.options.publish.command(),
            answer_ms: &answer_ms,
        };
        integer(
            "semaphore release",
            self.run("giving permits back", &call).await?,
        )
    }

    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        self.read_permits(name, "read").await
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        let waiter = waiter.to_string();
        let call = calls::SemaphoreUnreserve {
            reservation: &layout::permit_reservation_key(name),
            waiter: &waiter,
        };
        self.run("taking a reservation back", &call).await.map(drop)
    }

    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        self.read_permits(name, "drain").await
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.listen_on(&layout::semaphore_channel(name)).await
    }
}

/// The arguments a semaphore script takes for a starving waiter's reservation: its id
/// (empty when not starving), how long it has waited and how long a reservation is kept
/// (ms).
pub(super) fn reservation_args(
    reserve: Option<lock_core::backend::PermitReservation>,
) -> [String; 3] {
    match reserve {
        Some(reserve) => [
            reserve.waiter.to_string(),
            reserve.waited.as_millis().to_string(),
            millis(reserve.kept_for).to_string(),
        ],
        None => [String::new(), "0".to_owned(), "1".to_owned()],
    }
}

impl RedisBackend {
    /// Reads a semaphore's available permits (`"read"`) or takes them all (`"drain"`).
    async fn read_permits(&self, name: &LockName, action: &'static str) -> Result<i64, Error> {
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let call = calls::SemaphoreRead {
            semaphore: layout::lock_key(name),
            marker: &marker,
            peak: &peak,
            action,
        };
        let during = if action == "drain" {
            "draining permits"
        } else {
            "reading permits"
        };
        integer("semaphore read", self.run(during, &call).await?)
    }
}
