//! Redisson's `RSemaphore` over the lock protocol.

use async_trait::async_trait;
use lock_core::backend::{PermitAnswer, PermitRequest, SemaphoreBackend};
use lock_core::notify::Listener;
use lock_core::{Error, LockName, RequestId};

use super::{RedisBackend, integer, millis, unexpected};
use crate::layout;
use crate::script;
use crate::transport::Reply;

/// Redisson's `RSemaphore`: the available count in the string `name`, the new count
/// published on `redisson_sc:{name}`.
#[async_trait]
impl SemaphoreBackend for RedisBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        let permits = permits.to_string();
        let channel = layout::semaphore_channel(name);
        let args = [&*permits, &channel, self.options.publish.command()];
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_SET;
        integer(
            "semaphore set",
            self.eval("setting permits", script, &keys, &args).await?,
        )
        .map(|set| set == 1)
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        let delta = delta.to_string();
        let channel = layout::semaphore_channel(name);
        let args = [&*delta, &channel, self.options.publish.command()];
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_ADD;
        integer(
            "semaphore add",
            self.eval("adding permits", script, &keys, &args).await?,
        )
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let grant = layout::permit_answer_key(name, request.id);
        let reserved = layout::permit_reservation_key(name);
        let permits = request.permits.to_string();
        let [reserving, so_far_ms, kept_ms] = reservation_args(request.reserve);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &grant, &reserved, &marker, &peak];
        let args = [&*permits, &reserving, &so_far_ms, &kept_ms];
        let script = &script::SEMAPHORE_ACQUIRE;
        let reply = self.eval("taking permits", script, &keys, &args).await?;
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
        let remembered = millis(request.retry_window).to_string();
        let publish = self.options.publish.command();
        let args = [&*channel, publish, &remembered];
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &grant, &marker];
        let script = &script::SEMAPHORE_RELEASE;
        integer(
            "semaphore release",
            self.eval("giving permits back", script, &keys, &args)
                .await?,
        )
    }

    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_READ;
        integer(
            "semaphore read",
            self.eval("reading permits", script, &keys, &["read"])
                .await?,
        )
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        let keys = [&*layout::permit_reservation_key(name)];
        let waiter = waiter.to_string();
        let script = &script::SEMAPHORE_UNRESERVE;
        self.eval("taking a reservation back", script, &keys, &[&waiter])
            .await
            .map(drop)
    }

    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_READ;
        integer(
            "semaphore drain",
            self.eval("draining permits", script, &keys, &["drain"])
                .await?,
        )
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
