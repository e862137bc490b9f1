//! Release notifications of several backends, relayed into one registry: a composite
//! lock's waiter wakes when any of its parts is released.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::notify::{Listener, PubSub, Subscriptions, Wake, WeakSubscriptions};
use lock_core::{Backend, Error, LockRef};
use tokio::task::JoinHandle;

/// One part of a composite lock: a lock on one backend.
pub(crate) type Part = (Arc<dyn Backend>, LockRef);

/// The registry composite waiters listen on, fed by forwarding tasks.
pub(crate) struct Relay {
    registry: Subscriptions,
    inner: Arc<Forwarder>,
}

impl fmt::Debug for Relay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Relay")
            .field("channels", &self.registry.channels().len())
            .finish_non_exhaustive()
    }
}

impl Relay {
    /// `listen_timeout` bounds subscribing on one part, so that an unreachable node does
    /// not hold up waiters on the others.
    pub(crate) fn new(listen_timeout: Duration) -> Self {
        let inner = Arc::new(Forwarder {
            parts: Mutex::new(HashMap::new()),
            forwarding: Mutex::new(HashMap::new()),
            registry: OnceLock::new(),
            listen_timeout,
        });
        let registry = Subscriptions::new(inner.clone());
        let _ = inner.registry.set(registry.downgrade());
        Self { registry, inner }
    }

    /// Listens on every part of a composite lock under one `channel` name.
    pub(crate) async fn listen(&self, channel: &str, parts: Vec<Part>) -> Result<Listener, Error> {
        lock(&self.inner.parts).insert(channel.to_owned(), parts);
        self.registry.listen(channel).await
    }

    /// Composite channels with waiters.
    pub(crate) fn channels(&self) -> Vec<String> {
        self.registry.channels()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every critical section here is a single map operation that cannot panic half-way.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Subscribes the parts of a channel and forwards their notifications.
struct Forwarder {
    parts: Mutex<HashMap<String, Vec<Part>>>,
    forwarding: Mutex<HashMap<String, Vec<JoinHandle<()>>>>,
    registry: OnceLock<WeakSubscriptions>,
    listen_timeout: Duration,
}

impl fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarder").finish_non_exhaustive()
    }
}

#[async_trait]
impl PubSub for Forwarder {
    async fn subscribe(&self, channel: &str) -> Result<(), Error> {
        let parts = lock(&self.parts).get(channel).cloned().unwrap_or_default();
        let Some(registry) = self.registry.get().cloned() else {
            return Ok(());
        };
        let listens = parts
            .iter()
            .map(|(backend, part)| tokio::time::timeout(self.listen_timeout, backend.listen(part)));
        let listeners = futures_util::future::join_all(listens).await;
        // A part that cannot be subscribed is left out: its waiters still re-check at the
        // lock's ttl, and the other parts' releases still wake them. Each forwarder is a
        // task of the subscribing caller's runtime, owned here (aborted on unsubscribe),
        // not a job to drain: it lives as long as the subscription.
        let tasks: Vec<JoinHandle<()>> = listeners
            .into_iter()
            .filter_map(|listener| listener.ok()?.ok())
            .map(|listener| {
                let (registry, channel) = (registry.clone(), channel.to_owned());
                tokio::spawn(async move {
                    loop {
                        listener.notified().await;
                        if !registry.deliver(&channel, Wake::One) {
                            break;
                        }
                    }
                })
            })
            .collect();
        if let Some(old) = lock(&self.forwarding).insert(channel.to_owned(), tasks) {
            old.iter().for_each(JoinHandle::abort);
        }
        Ok(())
    }

    async fn unsubscribe(&self, channel: &str) -> Result<(), Error> {
        if let Some(tasks) = lock(&self.forwarding).remove(channel) {
            // Aborting drops the parts' listeners, which unsubscribes them.
            tasks.iter().for_each(JoinHandle::abort);
        }
        // A new waiter may have registered the channel again meanwhile; keep its parts.
        let relisten = self
            .registry
            .get()
            .is_some_and(|registry| registry.is_listened(channel));
        if !relisten {
            lock(&self.parts).remove(channel);
        }
        Ok(())
    }
}
