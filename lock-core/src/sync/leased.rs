//! The expirable permits a client holds, as its watchdog and its guards see them, and
//! the registry that finds them by id.

use foldhash::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex, PoisonError, Weak};

use crate::LockName;
use crate::backend::PermitId;
use crate::locks::lease::LeaseClock;

/// The permits of one acquisition, as the client's watchdog and guards see them.
#[derive(Debug)]
pub(crate) struct PermitHold {
    pub(crate) name: LockName,
    pub(crate) ids: Vec<PermitId>,
    pub(crate) lease: LeaseClock,
    pub(crate) renewing: AtomicBool,
}

impl PermitHold {
    pub(crate) fn needs_renewal(&self) -> bool {
        self.renewing.load(Ordering::Acquire) && !self.lease.is_marked_lost()
    }
}

/// This client's issued permits by id, so that an operation on an id through the
/// handle reaches the guard holding it.
#[derive(Debug, Default)]
pub(crate) struct LeasedRegistry {
    by_id: StdMutex<HashMap<PermitId, Weak<PermitHold>>>,
}

impl LeasedRegistry {
    fn ids(&self) -> std::sync::MutexGuard<'_, HashMap<PermitId, Weak<PermitHold>>> {
        self.by_id.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, held: &Arc<PermitHold>) {
        let mut ids = self.ids();
        for id in &held.ids {
            ids.insert(*id, Arc::downgrade(held));
        }
    }

    pub(crate) fn remove(&self, held: &PermitHold) {
        let mut ids = self.ids();
        for id in &held.ids {
            ids.remove(id);
        }
    }

    pub(crate) fn holding(&self, id: PermitId) -> Option<Arc<PermitHold>> {
        self.ids().get(&id).and_then(Weak::upgrade)
    }
}
