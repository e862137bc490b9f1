//! Expirable semaphores in memory: the available count is the plain semaphore's, and
//! the issued permits are kept per name with their expiries.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryBackend, Object, Store};
use crate::backend::{
    ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, RequestId, ReturnRequest,
    SemaphoreBackend,
};
use crate::notify::Listener;
use crate::{Error, LockName};

/// The permits issued from one semaphore: id -> expiry.
pub(super) type Issued = HashMap<PermitId, Instant>;

impl Store {
    /// Makes the permits of `name` whose expiry passed available again; whether any were.
    fn reclaim(&mut self, name: &str, now: Instant) -> bool {
        let Some(issued) = self.issued.get_mut(name) else {
            return false;
        };
        let before = issued.len();
        issued.retain(|_, expiry| *expiry > now);
        let reclaimed = before - issued.len();
        if issued.is_empty() {
            self.issued.remove(name);
        }
        if reclaimed == 0 {
            return false;
        }
        let available = self.semaphores.entry(name.to_owned()).or_insert(0);
        *available = available.saturating_add(i64::try_from(reclaimed).unwrap_or(i64::MAX));
        true
    }

    fn issued_count(&self, name: &str) -> usize {
        self.issued.get(name).map_or(0, HashMap::len)
    }
}

impl MemoryBackend {
    /// Runs `operation` on the store of the expirable semaphore `name` after reclaiming
    /// its expired permits; tells listeners when permits came back (reclaimed, or
    /// `operation` says so).
    fn with_reclaimed<T>(
        &self,
        name: &LockName,
        operation: impl FnOnce(&mut Store, Instant) -> (T, bool),
    ) -> Result<T, Error> {
        let now = Instant::now();
        let (answer, changed) = {
            let mut store = self.store_for(name, Object::Semaphore)?;
            let reclaimed = store.reclaim(name.as_str(), now);
            let (answer, changed) = operation(&mut store, now);
            (answer, reclaimed || changed)
        };
        if changed {
            self.permits_changed(name);
        }
        Ok(answer)
    }

    /// Gives each of `ids` still issued the expiry `expiry(its expiry, now + lease)`;
    /// for each id in order, whether it was issued.
    fn update_expiries(
        &self,
        name: &LockName,
        ids: &[PermitId],
        expiry: impl Fn(&Instant, Instant) -> Instant,
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.with_reclaimed(name, |store, now| {
            let Some(issued) = store.issued.get_mut(name.as_str()) else {
                return (vec![false; ids.len()], false);
            };
            let updated = ids
                .iter()
                .map(|id| match issued.get_mut(id) {
                    Some(expires) => {
                        *expires = expiry(expires, now + lease);
                        true
                    }
                    None => false,
                })
                .collect();
            (updated, false)
        })
    }
}

#[async_trait]
impl ExpirableSemaphoreBackend for MemoryBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        self.with_reclaimed(name, |store, _| {
            if store.semaphores.contains_key(name.as_str()) {
                return (false, false);
            }
            let permits = i64::try_from(permits).unwrap_or(i64::MAX);
            store.semaphores.insert(name.as_str().to_owned(), permits);
            (true, true)
        })
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        self.with_reclaimed(name, |store, _| {
            let available = store
                .semaphores
                .entry(name.as_str().to_owned())
                .or_insert(0);
            *available = available.saturating_add(delta);
            (*available, delta > 0)
        })
    }

    async fn try_issue(&self, name: &LockName, request: &IssueRequest) -> Result<Issue, Error> {
        self.with_reclaimed(name, |store, now| {
            let key = name.as_str();
            let issued = store.issued.get(key);
            if request
                .ids
                .first()
                .is_some_and(|id| issued.is_some_and(|issued| issued.contains_key(id)))
            {
                // Sent again after a lost reply: issued by the first run.
                return (Issue::Issued, false);
            }
            let wanted = i64::try_from(request.ids.len()).unwrap_or(i64::MAX);
            let Some(available) = store.semaphores.get(key).copied() else {
                return (busy(issued, now), false);
            };
            if store
                .may_take(key, (available, wanted), request.reserve, now)
                .taken()
            {
                store.semaphores.insert(key.to_owned(), available - wanted);
                let expiry = now + request.lease;
                let issued = store.issued.entry(key.to_owned()).or_default();
                issued.extend(request.ids.iter().map(|id| (*id, expiry)));
                return (Issue::Issued, false);
            }
            let issued_count = i64::try_from(store.issued_count(key)).unwrap_or(0);
            let total = available.saturating_add(issued_count);
            if wanted > total {
                (Issue::Exceeds { total }, false)
            } else {
                (busy(store.issued.get(key), now), false)
            }
        })
    }

    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        self.with_reclaimed(name, |store, now| {
            let key = (name.as_str().to_owned(), request.id);
            if let Some((answer, until)) = store.permit_answers.get(&key)
                && *until > now
            {
                return (*answer == 1, false);
            }
            let issued = store.issued.entry(name.as_str().to_owned()).or_default();
            let all = request.ids.iter().all(|id| issued.contains_key(id));
            if all {
                for id in &request.ids {
                    issued.remove(id);
                }
                let given = i64::try_from(request.ids.len()).unwrap_or(i64::MAX);
                let available = store
                    .semaphores
                    .entry(name.as_str().to_owned())
                    .or_insert(0);
                *available = available.saturating_add(given);
            }
            if store
                .issued
                .get(name.as_str())
                .is_some_and(HashMap::is_empty)
            {
                store.issued.remove(name.as_str());
            }
            store.forget_expired(now);
            store
                .permit_answers
                .insert(key, (i64::from(all), now + request.retry_window));
            (all, all)
        })
    }

    async fn renew(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.update_expiries(name, ids, |expiry, at_least| (*expiry).max(at_least), lease)
    }

    async fn set_lease(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        self.update_expiries(name, ids, |_, exactly| exactly, lease)
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        SemaphoreBackend::cancel_reservation(self, name, waiter).await
    }

    async fn permits(&self, name: &LockName) -> Result<(i64, u64), Error> {
        self.with_reclaimed(name, |store, _| {
            let key = name.as_str();
            let available = store.semaphores.get(key).copied().unwrap_or(0);
            let issued = u64::try_from(store.issued_count(key)).unwrap_or(u64::MAX);
            ((available, issued), false)
        })
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.subscriptions
            .listen(&super::channel::semaphore(name))
            .await
    }
}

/// Too few permits: when the first issued one expires, if any.
fn busy(issued: Option<&Issued>, now: Instant) -> Issue {
    let next_expiry = issued
        .and_then(|issued| issued.values().min())
        .map(|expiry| expiry.saturating_duration_since(now));
    Issue::Busy { next_expiry }
}
