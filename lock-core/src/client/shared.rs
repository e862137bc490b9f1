//! The state one client shares among its handles, guards and background work: the
//! backend, the settings, the holds it knows of, its waiting lines and its watchdog.

use foldhash::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::background::supervisor::Supervisor;
use crate::background::watchdog::{Host, Renewed, Watchdog};
use crate::config::Config;
use crate::locks::answered::AnsweredReleases;
use crate::locks::hold::Hold;
use crate::locks::turns::Turns;
use crate::notify::Listener;
use crate::sync::leased::LeasedRegistry;
use crate::{
    Backend, Capabilities, ClientInfo, LockKind, LockName, LockRef, LostReason, RequestId,
};

/// How long a client's description lives in the store after it last said it.
const ANNOUNCED_FOR: Duration = Duration::from_secs(3600);
/// How often, at most, a client says it again (at an acquisition): well within
/// [`ANNOUNCED_FOR`], so that a client that keeps acquiring stays described.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(600);

/// What a client's handles, guards and background work share.
pub(crate) struct Inner {
    pub(crate) backend: Arc<dyn Backend>,
    /// The backend's declaration, read once: it does not change.
    pub(crate) capabilities: Capabilities,
    pub(crate) client_id: String,
    pub(crate) config: Config,
    /// The live holds, by the hold as the store counts it (see [`held_as`]).
    holds: StdMutex<HashMap<LockRef, Arc<Hold>>>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) supervisor: Arc<Supervisor>,
    /// The turns of this client's semaphore waiters, per name.
    pub(crate) semaphore_turns: Turns<LockName>,
    /// The turns of this client's mutex waiters, per name, with the listener the
    /// line's heads share.
    pub(crate) mutex_turns: Turns<LockName, Option<Listener>>,
    /// The same for this client's writers of read-write locks.
    pub(crate) writer_turns: Turns<LockName, Option<Listener>>,
    /// The expirable permits this client's guards hold, by id.
    pub(crate) leased: crate::sync::leased::LeasedRegistry,
    /// The latest answered release of each name, which its next release names.
    pub(crate) answered_releases: AnsweredReleases,
    /// What this client says about itself in the store.
    pub(crate) client_info: ClientInfo,
    /// When this client was made, and when it last said what it is, in milliseconds
    /// after that plus one (0: never; see [`Inner::announce_if_due`]). An atomic: every
    /// acquisition looks.
    created: Instant,
    announced: AtomicU64,
}

impl Inner {
    pub(crate) fn new(backend: Arc<dyn Backend>, config: Config) -> Self {
        let config_name = config.client_name.as_deref();
        let client_info = ClientInfo::of_this_process(config_name);
        Self {
            capabilities: backend.capabilities(),
            backend,
            client_id: uuid::Uuid::new_v4().to_string(),
            config,
            holds: StdMutex::new(HashMap::default()),
            watchdog: Arc::default(),
            supervisor: Arc::new(Supervisor::new()),
            semaphore_turns: Turns::default(),
            mutex_turns: Turns::default(),
            writer_turns: Turns::default(),
            leased: LeasedRegistry::default(),
            answered_releases: AnsweredReleases::default(),
            client_info,
            created: Instant::now(),
            announced: AtomicU64::new(0),
        }
    }

    /// Says what this client is in the store (see [`crate::Introspect::announce`]), in a
    /// job, when it never did or last did longer ago than [`ANNOUNCE_EVERY`]; called at
    /// every acquisition. A failure is only logged: introspection then shows the holds
    /// of this client without its description.
    pub(crate) fn announce_if_due(&self) {
        if !self.capabilities.introspection {
            return;
        }
        let now = u64::try_from(self.created.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        let last = self.announced.load(Ordering::Acquire);
        let every = u64::try_from(ANNOUNCE_EVERY.as_millis()).unwrap_or(u64::MAX);
        let due = last == 0 || now.saturating_sub(last) >= every;
        // One acquisition of those that find it due says it.
        if !due
            || self
                .announced
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        let backend = Arc::clone(&self.backend);
        let (client_id, info) = (self.client_id.clone(), self.client_info.clone());
        let announcing = self.supervisor.spawn_job(async move {
            if let Err(err) = backend
                .introspection()
                .announce(&client_id, &info, ANNOUNCED_FOR)
                .await
            {
                crate::events::announce_failed(&err);
            }
        });
        if let Err(err) = announcing {
            crate::events::announce_failed(&err);
        }
    }

    fn holds(&self) -> MutexGuard<'_, HashMap<LockRef, Arc<Hold>>> {
        self.holds.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this client holds `lock`'s name for `lock`'s owner in `lock`'s kind (a
    /// mutex and a fair mutex share their holds): another acquisition by that owner
    /// re-enters.
    pub(crate) fn holds_exclusively(&self, lock: &LockRef) -> bool {
        self.holds().contains_key(&held_as(lock))
    }

    /// The local lines of `kind`'s waiters: mutex and write waiters stand in line;
    /// others (fair waiters, who queue in the store, and readers, who share) do not.
    pub(crate) fn turns(&self, kind: LockKind) -> Option<&Turns<LockName, Option<Listener>>> {
        match kind {
            LockKind::Mutex => Some(&self.mutex_turns),
            LockKind::Write => Some(&self.writer_turns),
            _ => None,
        }
    }

    /// Records a grant made by a request sent at `sent` and returns the hold the new
    /// guard belongs to: the live hold it joins in the store (a reentry, or a concurrent
    /// acquisition answered out of order), else a new one.
    pub(crate) fn attach(
        self: &Arc<Self>,
        lock: &LockRef,
        granted: Granted,
        sent: Instant,
        lease: Duration,
        renew: bool,
    ) -> Arc<Hold> {
        let valid_for = lease.saturating_sub(self.config.drift(lease));
        let key = held_as(lock);
        let hold = {
            let mut holds = self.holds();
            match holds.get(&key) {
                Some(existing)
                    if existing.lost_reason().is_none()
                        && existing.includes(granted.origin, granted.holds) =>
                {
                    existing.extend(sent, valid_for);
                    Arc::clone(existing)
                }
                existing => {
                    // The store's hold we remember ended there (expired, or was
                    // force-released) and this grant began another.
                    if let Some(stale) = existing {
                        stale.mark_lost(LostReason::LeaseExpired);
                    }
                    let hold = Arc::new(Hold::new(
                        lock.clone(),
                        granted.origin,
                        sent,
                        valid_for,
                        granted.token,
                    ));
                    holds.insert(key, Arc::clone(&hold));
                    hold
                }
            }
        };
        hold.add_guard(renew);
        if renew {
            // The latest renewing acquisition's lease, as the store's lease is the
            // latest grant's; registered again, so that a shorter one is renewed in time.
            hold.lease.renew_with(lease);
            self.watchdog
                .register(&self.watchdog_host(), Renewed::Lock(Arc::clone(&hold)));
        }
        hold
    }

    /// Removes a guard from its hold; forgets the hold when it was the last guard.
    pub(crate) fn detach(&self, hold: &Arc<Hold>, renew: bool) {
        let left = hold.remove_guard(renew);
        if renew {
            // At once, not at the watchdog's next round: a burst of short holds would
            // otherwise keep every released hold in memory for a renewal interval.
            self.watchdog.forget(&Renewed::Lock(Arc::clone(hold)));
        }
        if left == 0 {
            let mut holds = self.holds();
            let key = held_as(&hold.lock);
            if holds.get(&key).is_some_and(|h| Arc::ptr_eq(h, hold)) {
                holds.remove(&key);
            }
        }
    }

    /// Marks every hold of this client on `lock`'s name lost (after a force release
    /// deleted the lock, whoever the owner).
    pub(crate) fn forget_all(&self, lock: &LockRef) {
        let holds = self.holds();
        for hold in holds.values() {
            // Every kind of one name lives in the same key, so all of them went.
            if hold.lock.name == lock.name {
                hold.mark_lost(LostReason::OwnerGone);
            }
        }
    }

    /// What the watchdog needs of this client.
    pub(crate) fn watchdog_host(&self) -> Host<'_> {
        Host {
            supervisor: &self.supervisor,
            backend: &self.backend,
            config: &self.config,
        }
    }

    /// How many holds this client knows of.
    pub(crate) fn held_count(&self) -> usize {
        self.holds().len()
    }

    pub(crate) fn valid_for(&self, lease: Duration) -> Duration {
        lease.saturating_sub(self.config.drift(lease))
    }
}

/// What a grant told about the hold it belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Granted {
    pub(crate) holds: u32,
    pub(crate) token: Option<u64>,
    pub(crate) origin: Option<RequestId>,
}

/// The hold `lock` stands for as the store counts it: a mutex and a fair lock of one
/// owner on one name are one hold.
fn held_as(lock: &LockRef) -> LockRef {
    match lock.kind {
        LockKind::Fair => LockRef::new(LockKind::Mutex, lock.name.clone(), lock.owner.clone()),
        _ => lock.clone(),
    }
}
