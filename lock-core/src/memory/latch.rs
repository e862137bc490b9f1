//! The count-down latch in memory.

use async_trait::async_trait;
use tokio::time::Instant;

use super::{MemoryBackend, Object, channel};
use crate::backend::{LatchBackend, LatchRequest};
use crate::notify::{Listener, Wake};
use crate::{Error, LockName};

#[async_trait]
impl LatchBackend for MemoryBackend {
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error> {
        {
            let mut store = self.store_for(name, Object::Latch)?;
            if store.latches.contains_key(name.as_str()) {
                return Ok(false);
            }
            store.latches.insert(name.as_str().to_owned(), count);
        }
        self.subscriptions.deliver(&channel::latch(name), Wake::All);
        Ok(true)
    }

    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error> {
        let now = Instant::now();
        let (left, opened) = {
            let mut store = self.store_for(name, Object::Latch)?;
            let key = (name.as_str().to_owned(), request.id);
            if let Some((left, until)) = store.count_downs.get(&key)
                && *until > now
            {
                return Ok(*left);
            }
            let (left, opened) = match store.latches.get_mut(name.as_str()) {
                Some(count) if *count > 1 => {
                    *count -= 1;
                    (*count, false)
                }
                Some(_) => {
                    store.latches.remove(name.as_str());
                    (0, true)
                }
                None => (0, false),
            };
            store.forget_expired(now);
            store
                .count_downs
                .insert(key, (left, now + request.retry_window));
            (left, opened)
        };
        if opened {
            self.subscriptions.deliver(&channel::latch(name), Wake::All);
        }
        Ok(left)
    }

    async fn count(&self, name: &LockName) -> Result<u64, Error> {
        let store = self.store_for(name, Object::Latch)?;
        Ok(store.latches.get(name.as_str()).copied().unwrap_or(0))
    }

    async fn delete(&self, name: &LockName) -> Result<bool, Error> {
        let deleted = self
            .store_for(name, Object::Latch)?
            .latches
            .remove(name.as_str())
            .is_some();
        if deleted {
            self.subscriptions.deliver(&channel::latch(name), Wake::All);
        }
        Ok(deleted)
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.subscriptions.listen(&channel::latch(name)).await
    }
}
