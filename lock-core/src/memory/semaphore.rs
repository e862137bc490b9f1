//! The plain semaphore in memory: a count of available permits per name.

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryBackend, Object, channel};
use crate::backend::{PermitAnswer, PermitRequest, RequestId, SemaphoreBackend};
use crate::notify::Listener;
use crate::{Error, LockName};

#[async_trait]
impl SemaphoreBackend for MemoryBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        {
            let mut store = self.store_for(name, Object::Semaphore)?;
            if store.semaphores.contains_key(name.as_str()) {
                return Ok(false);
            }
            let permits = i64::try_from(permits).unwrap_or(i64::MAX);
            store.semaphores.insert(name.as_str().to_owned(), permits);
            store.lower_peak(name.as_str(), permits);
        }
        self.permits_changed(name);
        Ok(true)
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        let available = {
            let mut store = self.store_for(name, Object::Semaphore)?;
            let available = store
                .semaphores
                .entry(name.as_str().to_owned())
                .or_insert(0);
            *available = available.saturating_add(delta);
            let available = *available;
            if delta < 0 {
                store.lower_peak(name.as_str(), available);
            }
            available
        };
        self.permits_changed(name);
        Ok(available)
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let now = Instant::now();
        let mut store = self.store_for(name, Object::Semaphore)?;
        let key = (name.as_str().to_owned(), request.id);
        if store.permit_grants.contains_key(&key) {
            return Ok(PermitAnswer::Taken);
        }
        if store
            .permit_releases
            .get(&key)
            .is_some_and(|(_, until)| *until > now)
        {
            // A late copy of an acquisition whose grant already ended.
            return Ok(PermitAnswer::Unavailable);
        }
        let wanted = i64::try_from(request.permits).unwrap_or(i64::MAX);
        let Some(available) = store.semaphores.get(name.as_str()).copied() else {
            // Never set: no permit was ever there.
            return Ok(PermitAnswer::BeyondPeak);
        };
        let answer = store.may_take(name.as_str(), (available, wanted), request.reserve, now);
        if answer.taken() {
            store
                .semaphores
                .insert(name.as_str().to_owned(), available - wanted);
            store.permit_grants.insert(key, request.permits);
        }
        Ok(answer)
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let now = Instant::now();
        let (available, given) = {
            let mut store = self.store_for(name, Object::Semaphore)?;
            let key = (name.as_str().to_owned(), request.id);
            if let Some((available, until)) = store.permit_releases.get(&key)
                && *until > now
            {
                return Ok(*available);
            }
            let given = store.permit_grants.remove(&key).unwrap_or(0);
            let available = store
                .semaphores
                .entry(name.as_str().to_owned())
                .or_insert(0);
            *available = available.saturating_add(i64::try_from(given).unwrap_or(i64::MAX));
            let available = *available;
            store.forget_expired(now);
            store
                .permit_releases
                .insert(key, (available, now + request.retry_window));
            (available, given)
        };
        if given > 0 {
            self.permits_changed(name);
        }
        Ok(available)
    }

    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        let store = self.store_for(name, Object::Semaphore)?;
        Ok(store.semaphores.get(name.as_str()).copied().unwrap_or(0))
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        let mut store = self.store_for(name, Object::Semaphore)?;
        if store
            .reservations
            .get(name.as_str())
            .is_some_and(|held| held.waiter == waiter)
        {
            store.reservations.remove(name.as_str());
        }
        Ok(())
    }

    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        let mut store = self.store_for(name, Object::Semaphore)?;
        let drained = match store.semaphores.get_mut(name.as_str()) {
            Some(available) => std::mem::replace(available, 0),
            None => return Ok(0),
        };
        store.lower_peak(name.as_str(), 0);
        Ok(drained)
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.subscriptions.listen(&channel::semaphore(name)).await
    }
}
