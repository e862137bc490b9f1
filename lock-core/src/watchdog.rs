//! The watchdog: one task per client renews the leases of all its watchdog guards.
//!
//! Every round (a third of the watchdog lease by default) it renews, in one batched call
//! to the backend, every hold that needs renewal and is due: armed more than half an
//! interval ago, or valid for less than one and a half intervals (so that a hold taken
//! just after a round, with an interval close to the lease, is never left to expire
//! before the next one). A renewal that finds the owner gone marks the hold lost at once;
//! a failed renewal is retried sooner, and the hold is lost when its local deadline passes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backend::Renewal;
use crate::client::Inner;
use crate::events;
use crate::hold::Hold;
use crate::{LostReason, metrics};

/// The shortest pause between rounds after a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    holds: HashMap<usize, Arc<Hold>>,
    /// The renewal task, kept to notice its end: it ends by itself when nothing is left
    /// to renew, and dies with its runtime, or by a panic, while holds still need it.
    task: Option<JoinHandle<()>>,
}

impl State {
    /// Starts the task when holds need it and it is not running.
    fn ensure_running(&mut self, client: &Arc<Inner>) {
        if self.holds.is_empty() || self.task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        if self.task.take().is_some() {
            events::watchdog_restarted(self.holds.len());
        }
        match client.supervisor.spawn_service(run(Arc::downgrade(client))) {
            Ok(task) => self.task = Some(task),
            // Tried again at the next acquisition; until then the holds run on their
            // deadlines, which guards report.
            Err(err) => events::watchdog_not_started(self.holds.len(), &err),
        }
    }
}

impl Watchdog {
    /// Starts renewing `hold` (and the task, if it is not running).
    pub(crate) fn register(&self, client: &Arc<Inner>, hold: &Arc<Hold>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state
            .holds
            .insert(Arc::as_ptr(hold) as usize, Arc::clone(hold));
        state.ensure_running(client);
    }

    /// Stops renewing `hold` if no guard of it needs renewal any more. Checked under the
    /// watchdog's lock, so a reentry that registers the hold again is never undone.
    pub(crate) fn forget(&self, hold: &Arc<Hold>) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !hold.needs_renewal() {
            state.holds.remove(&(Arc::as_ptr(hold) as usize));
        }
    }

    /// How many holds it renews (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .holds
            .len()
    }

    /// Starts the task again if it died while holds still need renewal.
    pub(crate) fn revive(&self, client: &Arc<Inner>) {
        // No pruning here: it would cost every acquisition a pass over every hold.
        // Released holds leave through `forget`, lost ones at the next round.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.ensure_running(client);
    }

    /// The holds due for renewal; forgets those that no longer need it. Stops (returns
    /// `None`) when nothing is left to renew.
    fn due(&self, older_than: Instant, expiring_before: Instant) -> Option<Vec<Arc<Hold>>> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.holds.retain(|_, hold| hold.needs_renewal());
        if state.holds.is_empty() {
            // The task returns: a later registration starts a new one.
            state.task = None;
            return None;
        }
        Some(
            state
                .holds
                .values()
                .filter(|hold| hold.last_sent() <= older_than || hold.deadline() <= expiring_before)
                .cloned()
                .collect(),
        )
    }
}

async fn run(client: Weak<Inner>) {
    let mut pause = match client.upgrade() {
        Some(inner) => inner.config.renew_interval,
        None => return,
    };
    loop {
        tokio::time::sleep(pause).await;
        let Some(inner) = client.upgrade() else {
            return;
        };
        let interval = inner.config.renew_interval;
        let lease = inner.config.watchdog_lease;
        let valid_for = inner.valid_for(lease);
        let now = Instant::now();
        let Some(due) = inner
            .watchdog
            .due(now - interval / 2, now + interval + interval / 2)
        else {
            return;
        };
        let backend = Arc::clone(&inner.backend);
        // Do not keep the client alive across the round trip.
        drop(inner);
        pause = interval;
        if due.is_empty() {
            continue;
        }
        let locks: Vec<_> = due.iter().map(|hold| hold.lock.clone()).collect();
        let sent = Instant::now();
        let outcomes = backend.renew(&locks, lease).await;
        let (mut renewed, mut gone, mut failed) = (0, 0, 0);
        for (hold, outcome) in due.iter().zip(outcomes) {
            match outcome {
                Renewal::Renewed => {
                    renewed += 1;
                    hold.extend(sent, valid_for);
                }
                Renewal::Gone => {
                    gone += 1;
                    hold.mark_lost(LostReason::OwnerGone);
                }
                // Retried sooner while the deadline allows.
                Renewal::Failed(err) => {
                    failed += 1;
                    events::renewal_failed(&hold.lock, &err);
                    hold.expire_if_due();
                }
            }
        }
        metrics::renewals("renewed", renewed);
        metrics::renewals("gone", gone);
        metrics::renewals("failed", failed);
        if failed > 0 {
            pause = (interval / 4).max(MIN_RETRY);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::Locks;
    use crate::memory::MemoryBackend;

    /// Issue 20: a released hold leaves the watchdog at once. Before, every hold stayed
    /// until the next round (10 s by default): a burst of acquisitions held all of them.
    #[tokio::test]
    async fn released_holds_leave_the_watchdog_at_once() {
        let locks = Locks::new(Arc::new(MemoryBackend::new()));
        for i in 0..100 {
            let guard = locks
                .mutex(&format!("burst-{i}"))
                .lock()
                .await
                .expect("lock");
            guard.unlock().await.expect("unlock");
        }
        let reentered = locks.mutex("kept").with_holder(crate::Holder::unique());
        let outer = reentered.lock().await.expect("lock");
        reentered
            .lock()
            .await
            .expect("reenter")
            .unlock()
            .await
            .expect("unlock");
        assert_eq!(
            locks.inner.watchdog.len(),
            1,
            "only the live hold is renewed"
        );
        outer.unlock().await.expect("unlock");
        assert_eq!(locks.inner.watchdog.len(), 0);
    }
}
