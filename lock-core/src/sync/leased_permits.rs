//! [`LeasedPermits`]: the guard of expirable permits issued to this client.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{PermitId, ReturnRequest};
use crate::background::watchdog::Renewed;
use crate::client::shared::Inner;
use crate::locks::lease::LeaseClock;
use crate::metrics::{self, PermitKind};
use crate::sync::leased::PermitHold;
use crate::sync::semaphore::in_background;
use crate::{Error, LockName, LostReason, events, retry};

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) permits: u64,
    pub(crate) lease: Duration,
    pub(crate) renew: bool,
}

pub(crate) fn not_issued(name: &LockName, id: PermitId) -> Error {
    Error::PermitNotIssued {
        name: name.as_str().to_owned(),
        id: id.to_string(),
    }
}

/// Gives permits back in the background, reporting a failure through `tracing`.
pub(crate) fn release_unawaited(
    client: &Arc<Inner>,
    name: &LockName,
    ids: Vec<PermitId>,
    of: &'static str,
) {
    let count = u64::try_from(ids.len()).unwrap_or(u64::MAX);
    let task_client = Arc::clone(client);
    let task_name = name.clone();
    let give_back = async move { give_back(&task_client, &task_name, ids).await };
    in_background(client, name, count, of, give_back);
}

/// Gives `ids` back; whether they were all still issued.
pub(crate) async fn give_back(
    client: &Inner,
    name: &LockName,
    ids: Vec<PermitId>,
) -> Result<bool, Error> {
    let semaphores = client.backend.expirable_semaphores();
    let window = client.config.retry_window;
    let request = ReturnRequest::new(ids, window);
    let until = Instant::now() + window;
    retry::until_answered(until, || semaphores.release(name, &request)).await
}

/// Permits issued by an [`ExpirableSemaphore`](crate::ExpirableSemaphore), each with
/// its id. Give them back with [`LeasedPermits::release`]; dropping them gives them back
/// in the background.
///
/// Taken without a lease, they are renewed by the client's watchdog while this guard
/// lives; with one, they come back when it ends. As with a lock's guard, check
/// [`LeasedPermits::is_held`] before acting on what they protect, or race the work
/// against [`LeasedPermits::lost`].
#[must_use = "dropping permits gives them back at once"]
#[clippy::has_significant_drop]
pub struct LeasedPermits {
    client: Arc<Inner>,
    held: Arc<PermitHold>,
    lease: Duration,
    released: bool,
}

impl fmt::Debug for LeasedPermits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasedPermits")
            .field("name", &self.held.name)
            .field("ids", &self.held.ids)
            .field("lease", &self.lease)
            .field("watchdog", &self.held.renewing.load(Ordering::Relaxed))
            .field("held", &self.is_held())
            .finish_non_exhaustive()
    }
}

impl LeasedPermits {
    pub(crate) fn new(
        client: &Arc<Inner>,
        name: &LockName,
        ids: Vec<PermitId>,
        terms: Terms,
        sent: Instant,
    ) -> Self {
        let lost_name = name.clone();
        let count = ids.len();
        metrics::permits_held(PermitKind::Expirable, count as f64);
        let on_lost = Box::new(move |reason| events::permits_lost(&lost_name, count, reason));
        let held = Arc::new(PermitHold {
            name: name.clone(),
            ids,
            lease: LeaseClock::new(sent, client.valid_for(terms.lease), on_lost),
            renewing: AtomicBool::new(terms.renew),
        });
        client.leased.insert(&held);
        if terms.renew {
            held.lease.renew_with(terms.lease);
            client
                .watchdog
                .register(&client.watchdog_host(), Renewed::Permits(Arc::clone(&held)));
        }
        Self {
            client: Arc::clone(client),
            held,
            lease: terms.lease,
            released: false,
        }
    }

    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        self.held.name.as_str()
    }

    /// The permits' ids, one per permit.
    #[must_use]
    pub fn ids(&self) -> &[PermitId] {
        &self.held.ids
    }

    /// How many permits these are.
    #[must_use]
    pub fn count(&self) -> usize {
        self.held.ids.len()
    }

    /// Whether the permits are still issued by the local clock: not lost, and the last
    /// renewal (or the acquisition) was sent less than a lease (minus drift) ago. No
    /// I/O; it turns false at the deadline even if nothing was heard.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.held.lease.lost_reason().is_none()
    }

    /// How long the permits stay valid without another renewal; `None` once lost.
    #[must_use]
    pub fn valid_for(&self) -> Option<Duration> {
        self.held.lease.valid_for()
    }

    /// Resolves when the permits are lost: a renewal found one of them no longer issued
    /// (released through the handle, or expired), or the lease ran out. Returns the
    /// [`Error::Lost`] to hand to the caller.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches; use it in `tokio::select!` against the work.
    pub async fn lost(&self) -> Error {
        let reason = self.held.lease.lost().await;
        Error::Lost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Sets the permits' lease to `lease` from now; the watchdog stops renewing them.
    /// [`Error::Lost`] when one of them is no longer issued.
    ///
    /// # Cancel safety
    ///
    /// Not cancel-safe: a dropped future may leave the old lease or the new one on the
    /// store; the guard then assumes the shorter.
    pub async fn update_lease(&mut self, lease: Duration) -> Result<(), Error> {
        self.client.config.check_lease("lease", lease)?;
        let semaphores = self.client.backend.expirable_semaphores();
        if let Some(reason) = self.held.lease.lost_reason() {
            return Err(self.lost_error(reason));
        }
        self.stop_renewing();
        let sent = Instant::now();
        let valid_for = self.client.valid_for(lease);
        self.held.lease.shorten(sent, valid_for);
        let until = sent + self.client.config.retry_window;
        let issued = retry::until_answered(until, || {
            semaphores.set_lease(&self.held.name, &self.held.ids, lease)
        })
        .await?;
        if issued.iter().all(|&issued| issued) {
            self.held.lease.rearm(sent, valid_for);
            self.lease = lease;
            Ok(())
        } else {
            self.held.lease.mark_lost(LostReason::OwnerGone);
            Err(self.lost_error(LostReason::OwnerGone))
        }
    }

    /// Gives the permits back. [`Error::NotHeld`](crate::ErrorKind::NotHeld) (as
    /// [`Error::PermitNotIssued`]) when one of them was no longer issued: nothing is
    /// changed then, and the others come back when their lease ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the release runs in its own task and completes if this future is
    /// dropped ([`Locks::shutdown`](crate::Locks::shutdown) waits for it).
    pub async fn release(mut self) -> Result<(), Error> {
        self.finish();
        let client = Arc::clone(&self.client);
        let name = self.held.name.clone();
        let ids = self.held.ids.clone();
        let task = self
            .client
            .supervisor
            .spawn_job(async move { give_back(&client, &name, ids).await })?;
        let released = task
            .await
            .map_err(|_| Error::protocol("the release task was cancelled"))??;
        if released {
            Ok(())
        } else {
            self.held.lease.mark_lost(LostReason::OwnerGone);
            Err(not_issued(&self.held.name, self.held.ids[0]))
        }
    }

    fn lost_error(&self, reason: LostReason) -> Error {
        Error::Lost {
            name: self.name().to_owned(),
            reason,
        }
    }

    fn stop_renewing(&self) {
        if self.held.renewing.swap(false, Ordering::AcqRel) {
            self.client
                .watchdog
                .forget(&Renewed::Permits(Arc::clone(&self.held)));
        }
    }

    /// Synchronous bookkeeping shared by `release` and `Drop`.
    fn finish(&mut self) {
        self.released = true;
        metrics::permits_held(PermitKind::Expirable, -(self.held.ids.len() as f64));
        self.stop_renewing();
        self.client.leased.remove(&self.held);
    }
}

impl Drop for LeasedPermits {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.finish();
        if self.held.lease.lost_reason().is_none() {
            release_unawaited(
                &self.client,
                &self.held.name,
                self.held.ids.clone(),
                "dropped permits",
            );
        }
    }
}
