//! The watchdog: one task per client renews the leases of all its watchdog guards, those
//! of locks and those of expirable permits.
//!
//! Each hold is renewed for its own lease (the client's watchdog lease unless its
//! acquisition named another) every renewal interval of that lease (a third of it by
//! default). A round comes every shortest interval of the holds it renews, sooner when a
//! hold with a shorter one arrives; it renews, in one batched call to the backend per
//! lease (and one per semaphore name and lease for permits), every hold that is due:
//! armed more than half its interval ago, or valid for less than one and a half intervals
//! (so that a hold taken just after a round, with an interval close to the lease, is
//! never left to expire before the next one). A renewal that finds the owner gone marks
//! the hold lost at once; a failed renewal is retried sooner, and the hold is lost when
//! its local deadline passes.

use std::collections::BTreeMap;

use foldhash::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::backend::{PermitId, Renewal};
use crate::background::supervisor::Supervisor;
use crate::config::Config;
use crate::locks::hold::Hold;
use crate::locks::lease::LeaseClock;
use crate::sync::leased::PermitHold;
use crate::{Backend, LockName, LostReason, events, metrics};

/// The shortest pause between rounds after a failed renewal.
const MIN_RETRY: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
pub(crate) struct Watchdog {
    state: Mutex<State>,
    /// Ends the task's pause early: a hold arrived whose renewals are due sooner.
    hasten: Arc<Notify>,
}

impl Drop for Watchdog {
    /// Ends the task's pause: it finds its client gone and ends.
    fn drop(&mut self) {
        self.hasten.notify_one();
    }
}

/// What the watchdog's task needs of its client: where it runs, what it renews through,
/// and the settings. Lent at each call, so that the watchdog never holds its client
/// (which owns it), and its task holds neither.
pub(crate) struct Host<'a> {
    pub(crate) supervisor: &'a Supervisor,
    pub(crate) backend: &'a Arc<dyn Backend>,
    pub(crate) config: &'a Config,
}

/// What the watchdog renews: a lock's hold, or the permits of one acquisition.
#[derive(Debug, Clone)]
pub(crate) enum Renewed {
    Lock(Arc<Hold>),
    Permits(Arc<PermitHold>),
}

impl Renewed {
    fn key(&self) -> usize {
        match self {
            Self::Lock(hold) => Arc::as_ptr(hold) as usize,
            Self::Permits(permits) => Arc::as_ptr(permits) as usize,
        }
    }

    fn lease(&self) -> &LeaseClock {
        match self {
            Self::Lock(hold) => &hold.lease,
            Self::Permits(permits) => &permits.lease,
        }
    }

    fn needs_renewal(&self) -> bool {
        match self {
            Self::Lock(hold) => hold.needs_renewal(),
            Self::Permits(permits) => permits.needs_renewal(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    /// What it renews, by identity, with the order in which it was registered: a round
    /// renews in that order, so that it goes the same way from one run to the next (the
    /// simulation replays runs exactly), whatever the hash map's order.
    holds: HashMap<usize, (u64, Renewed)>,
    registered: u64,
    /// How long the task pauses between rounds now: the shortest renewal interval of
    /// the holds it renewed last (`None` before its first round).
    pause: Option<Duration>,
    /// The renewal task, kept to notice its end: it ends when its client is gone, and
    /// dies with its runtime, or by a panic, while holds may still need it.
    task: Option<JoinHandle<()>>,
}

impl State {
    /// Starts the task when holds need it and it is not running.
    fn ensure_running(&mut self, watchdog: &Arc<Watchdog>, host: &Host<'_>) {
        if self.holds.is_empty() || self.task.as_ref().is_some_and(|task| !task.is_finished()) {
            return;
        }
        if self.task.take().is_some() {
            events::watchdog_restarted(self.holds.len());
        }
        // The new task's first round sets its pause.
        self.pause = None;
        let task = run(
            Arc::downgrade(watchdog),
            Arc::clone(&watchdog.hasten),
            Arc::downgrade(host.backend),
            host.config.clone(),
        );
        match host.supervisor.spawn_service(task) {
            Ok(task) => self.task = Some(task),
            // Tried again at the next acquisition; until then the holds run on their
            // deadlines, which guards report.
            Err(err) => events::watchdog_not_started(self.holds.len(), &err),
        }
    }
}

impl Watchdog {
    /// Starts renewing `hold` (and the task, if it is not running).
    pub(crate) fn register(self: &Arc<Self>, host: &Host<'_>, hold: Renewed) {
        let interval = host.config.renew_interval_for(hold.lease().renewal());
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.registered += 1;
        let order = state.registered;
        state.holds.entry(hold.key()).or_insert((order, hold));
        state.ensure_running(self, host);
        if state.pause.is_none_or(|pause| interval < pause) {
            // Kept as a permit if the task is not pausing yet: it does not miss it.
            self.hasten.notify_one();
        }
    }

    /// Stops renewing `hold` if no guard of it needs renewal any more. Checked under the
    /// watchdog's lock, so a reentry that registers the hold again is never undone.
    pub(crate) fn forget(&self, hold: &Renewed) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if !hold.needs_renewal() {
            state.holds.remove(&hold.key());
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
    pub(crate) fn revive(self: &Arc<Self>, host: &Host<'_>) {
        // No pruning here: it would cost every acquisition a pass over every hold.
        // Released holds leave through `forget`, lost ones at the next round.
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.ensure_running(self, host);
    }

    /// The holds due for renewal at `now`, each with the lease it is renewed for, and the
    /// pause until the next round; forgets the holds that no longer need renewal.
    ///
    /// With nothing left to renew, the task stays, and looks again after the longest
    /// pause (a registration that needs it sooner hastens it): a task that ended there
    /// was started again by the next acquisition, a spawn and a wake-up for every
    /// uncontended lock and unlock.
    fn due(&self, now: Instant, config: &Config) -> Round {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.holds.retain(|_, (_, hold)| hold.needs_renewal());
        let mut pause = config.renew_interval;
        let mut due: Vec<(u64, Renewed, Duration)> = Vec::new();
        for (order, hold) in state.holds.values() {
            let clock = hold.lease();
            let lease = clock.renewal();
            let interval = config.renew_interval_for(lease);
            pause = pause.min(interval);
            // Armed before the boot of the clock's epoch would be long ago anyway.
            let armed_long_ago = now
                .checked_sub(interval / 2)
                .is_none_or(|older_than| clock.last_sent() <= older_than);
            if armed_long_ago || clock.deadline() <= now + interval + interval / 2 {
                due.push((*order, hold.clone(), lease));
            }
        }
        state.pause = Some(pause);
        due.sort_unstable_by_key(|(order, ..)| *order);
        let due = due
            .into_iter()
            .map(|(_, hold, lease)| (hold, lease))
            .collect();
        Round { due, pause }
    }
}

/// What one round renews, and how long the task pauses after it.
struct Round {
    due: Vec<(Renewed, Duration)>,
    pause: Duration,
}

/// Renews what is due every round, until the client is gone (its watchdog or its
/// backend dropped). Holds nothing of the client between rounds.
async fn run(
    watchdog: Weak<Watchdog>,
    hasten: Arc<Notify>,
    backend: Weak<dyn Backend>,
    config: Config,
) {
    let mut next = Instant::now() + config.renew_interval;
    loop {
        tokio::select! {
            () = tokio::time::sleep_until(next) => {}
            () = hasten.notified() => {}
        }
        let Some(renewing) = watchdog.upgrade() else {
            return;
        };
        // The next round is a pause after this one began, not after it ended: a slow
        // store's renewals would otherwise come later and later, each a round trip behind
        // the pause, until a lease ran out between two of them.
        let began = Instant::now();
        let round = renewing.due(began, &config);
        // Do not keep the client's parts alive across the round trip.
        drop(renewing);
        let Some(backend) = backend.upgrade() else {
            return;
        };
        next = began + round.pause;
        if round.due.is_empty() {
            continue;
        }
        let tally = renew_round(&*backend, round.due, &config).await;
        metrics::renewals("renewed", tally.renewed);
        metrics::renewals("gone", tally.gone);
        metrics::renewals("failed", tally.failed);
        if tally.failed > 0 {
            next = Instant::now() + (round.pause / 4).max(MIN_RETRY);
        }
    }
}

/// Renewals of one round's permits, by semaphore name and lease.
type PermitsDue = BTreeMap<(LockName, Duration), Vec<(Arc<PermitHold>, u64)>>;

/// Renews what a round found due: the locks in one call per lease, the permits in one
/// call per semaphore name and lease, in that order (the same from one run to the next).
async fn renew_round(
    backend: &dyn Backend,
    due: Vec<(Renewed, Duration)>,
    config: &Config,
) -> Tally {
    let mut holds: BTreeMap<Duration, Vec<(Arc<Hold>, u64)>> = BTreeMap::new();
    let mut permits = PermitsDue::new();
    for (entry, lease) in due {
        let epoch = entry.lease().epoch();
        match entry {
            Renewed::Lock(hold) => holds.entry(lease).or_default().push((hold, epoch)),
            Renewed::Permits(held) => {
                permits
                    .entry((held.name.clone(), lease))
                    .or_default()
                    .push((held, epoch));
            }
        }
    }
    let valid_for = |lease: Duration| lease.saturating_sub(config.drift(lease));
    let mut tally = Tally::default();
    for (&lease, held) in &holds {
        renew_locks(backend, held, lease, valid_for(lease), &mut tally).await;
    }
    for ((name, lease), held) in &permits {
        renew_permits(backend, name, held, *lease, valid_for(*lease), &mut tally).await;
    }
    tally
}

/// How a round went, for metrics and the next pause.
#[derive(Debug, Default)]
struct Tally {
    renewed: usize,
    gone: usize,
    failed: usize,
}

/// Renews the due lock holds in one batched call.
async fn renew_locks(
    backend: &dyn Backend,
    due: &[(Arc<Hold>, u64)],
    lease: Duration,
    valid_for: Duration,
    tally: &mut Tally,
) {
    if due.is_empty() {
        return;
    }
    let locks: Vec<_> = due.iter().map(|(hold, _)| hold.lock.clone()).collect();
    let sent = Instant::now();
    let outcomes = backend.renew(&locks, lease).await;
    for ((hold, epoch), outcome) in due.iter().zip(outcomes) {
        match outcome {
            // The owner's hold renewed is another than this one: this one was revoked
            // (or lapsed) and a new grant began the owner's hold since.
            Renewal::Renewed { origin } if !hold.includes(origin, 2) => {
                tally.gone += 1;
                hold.mark_lost(LostReason::OwnerGone);
            }
            Renewal::Renewed { .. } => {
                tally.renewed += 1;
                hold.lease.extend_in(*epoch, sent, valid_for);
            }
            Renewal::Gone => {
                tally.gone += 1;
                hold.mark_lost(LostReason::OwnerGone);
            }
            // Retried sooner while the deadline allows.
            Renewal::Failed(err) => {
                tally.failed += 1;
                events::renewal_failed(&hold.lock, &err);
                hold.lost_reason();
            }
        }
    }
}

/// Renews the due permits of one expirable semaphore in one call. An acquisition whose
/// permits are not all issued any more is lost.
async fn renew_permits(
    backend: &dyn Backend,
    name: &LockName,
    due: &[(Arc<PermitHold>, u64)],
    lease: Duration,
    valid_for: Duration,
    tally: &mut Tally,
) {
    let semaphores = backend.expirable_semaphores();
    let ids: Vec<PermitId> = due.iter().flat_map(|(held, _)| held.ids.clone()).collect();
    let sent = Instant::now();
    match semaphores.renew(name, &ids, lease).await {
        Ok(issued) if issued.len() == ids.len() => {
            let mut rest = issued.as_slice();
            for (held, epoch) in due {
                let (mine, others) = rest.split_at(held.ids.len());
                rest = others;
                if mine.iter().all(|&issued| issued) {
                    tally.renewed += 1;
                    held.lease.extend_in(*epoch, sent, valid_for);
                } else {
                    tally.gone += 1;
                    held.lease.mark_lost(LostReason::OwnerGone);
                }
            }
        }
        outcome => {
            let err = outcome.err().unwrap_or_else(|| {
                crate::Error::protocol("a renewal answered for a different number of permits")
            });
            events::permit_renewal_failed(name, &err);
            for (held, _) in due {
                tally.failed += 1;
                held.lease.lost_reason();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::task::JoinHandle;

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

    /// The task outlives the holds it renewed: one task serves one hold after another,
    /// rather than one task each (a spawn and a wake-up for every uncontended pair).
    /// Would fail if the task ended when nothing was left to renew.
    #[tokio::test]
    async fn one_task_serves_one_hold_after_another() {
        let locks = Locks::new(Arc::new(MemoryBackend::new()));
        let task_id = || {
            let state = locks
                .inner
                .watchdog
                .state
                .lock()
                .expect("the watchdog's state");
            state
                .task
                .as_ref()
                .filter(|task| !task.is_finished())
                .map(JoinHandle::id)
        };
        let mut ids = Vec::new();
        for _ in 0..5 {
            let guard = locks.mutex("one-after-another").lock().await.expect("lock");
            ids.push(task_id().expect("a running task while a hold needs it"));
            guard.unlock().await.expect("unlock");
            // A round after the release, which finds nothing to renew.
            let round = locks
                .inner
                .watchdog
                .due(tokio::time::Instant::now(), &locks.inner.config);
            assert!(round.due.is_empty());
        }
        assert!(
            ids.windows(2).all(|pair| pair[0] == pair[1]),
            "a task was started for each hold: {ids:?}"
        );
    }

    /// A client's watchdog task ends once the client is gone.
    #[tokio::test]
    async fn the_task_ends_with_its_client() {
        let locks = Locks::new(Arc::new(MemoryBackend::new()));
        locks
            .mutex("ends")
            .lock()
            .await
            .expect("lock")
            .unlock()
            .await
            .expect("unlock");
        let task = {
            let mut state = locks
                .inner
                .watchdog
                .state
                .lock()
                .expect("the watchdog's state");
            state.task.take().expect("the task")
        };
        drop(locks);
        tokio::time::timeout(Duration::from_secs(2), task)
            .await
            .expect("the task ends within 2 s of its client")
            .expect("the task ends without a panic");
    }
}
