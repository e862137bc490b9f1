//! The in-memory backend: the same semantics as Redis, within one process.
//!
//! It is a real backend (it passes the conformance suite) and the reference model the
//! Redis backends are compared with. Use it for tests, for single-process services, and
//! as the demo's fallback when no Redis is at hand. Locks are not shared between
//! processes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backend::{
    Acquire, AcquireRequest, Backend, LockKind, LockRef, LockState, Release, Renewal,
};
use crate::notify::{InProcess, Listener, Subscriptions, Wake};
use crate::redis::layout;
use crate::{Error, Owner};

#[derive(Debug)]
struct Entry {
    holders: HashMap<Owner, u32>,
    expires: Instant,
}

impl Entry {
    /// Extends, never shortens, the expiry (as the Redis scripts do).
    fn arm(&mut self, now: Instant, lease: Duration) {
        self.expires = self.expires.max(now + lease);
    }
}

/// Locks kept in this process's memory.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    locks: Arc<Mutex<HashMap<(LockKind, String), Entry>>>,
    subscriptions: Subscriptions,
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryBackend {
    /// An empty store.
    #[must_use]
    pub fn new() -> Self {
        Self {
            locks: Arc::new(Mutex::new(HashMap::new())),
            subscriptions: Subscriptions::new(Arc::new(InProcess)),
        }
    }

    /// Channels with waiters subscribed (for diagnostics and tests).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.subscriptions.channels()
    }

    /// Locks (kind, name) currently held and not expired.
    #[must_use]
    pub fn held_locks(&self) -> Vec<String> {
        let now = Instant::now();
        let mut names: Vec<String> = self
            .table()
            .iter()
            .filter(|(_, e)| e.expires > now)
            .map(|((_, name), _)| name.clone())
            .collect();
        names.sort();
        names
    }

    fn table(&self) -> MutexGuard<'_, HashMap<(LockKind, String), Entry>> {
        // Critical sections below cannot panic half-way, so a poisoned map is consistent.
        self.locks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn key(lock: &LockRef) -> (LockKind, String) {
        (lock.kind, lock.name.as_str().to_owned())
    }

    /// The live entry for `lock`, dropping it first if it expired.
    fn live<'a>(
        table: &'a mut HashMap<(LockKind, String), Entry>,
        key: &(LockKind, String),
        now: Instant,
    ) -> Option<&'a mut Entry> {
        if table.get(key).is_some_and(|e| e.expires <= now) {
            table.remove(key);
        }
        table.get_mut(key)
    }

    fn channel(lock: &LockRef) -> String {
        match lock.kind {
            LockKind::Mutex => layout::mutex_channel(&lock.name),
        }
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    /// Wake-ups here are first-come-first-served already (one waiter per release, in
    /// arrival order), so a starving attempt needs no reservation and is treated as any other.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let lease = request.lease;
        let now = Instant::now();
        let key = Self::key(lock);
        let mut table = self.table();
        let entry = match Self::live(&mut table, &key, now) {
            Some(entry) => entry,
            None => table.entry(key).or_insert(Entry {
                holders: HashMap::new(),
                expires: now,
            }),
        };
        if entry.holders.is_empty() || entry.holders.contains_key(&lock.owner) {
            let holds = entry.holders.entry(lock.owner.clone()).or_insert(0);
            *holds = holds.saturating_add(1);
            let holds = *holds;
            entry.arm(now, lease);
            Ok(Acquire::Acquired { holds })
        } else {
            Ok(Acquire::Busy {
                ttl: Some(entry.expires - now),
                reserved: false,
            })
        }
    }

    async fn release(&self, lock: &LockRef, lease: Duration) -> Result<Release, Error> {
        let now = Instant::now();
        let key = Self::key(lock);
        let mut table = self.table();
        let Some(entry) = Self::live(&mut table, &key, now) else {
            return Ok(Release::NotHeld);
        };
        let Some(holds) = entry.holders.get_mut(&lock.owner) else {
            return Ok(Release::NotHeld);
        };
        *holds -= 1;
        if *holds > 0 {
            let holds = *holds;
            entry.arm(now, lease);
            return Ok(Release::StillHeld { holds });
        }
        table.remove(&key);
        drop(table);
        self.subscriptions.deliver(&Self::channel(lock), Wake::One);
        Ok(Release::Released)
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let now = Instant::now();
        let mut table = self.table();
        locks
            .iter()
            .map(|lock| match Self::live(&mut table, &Self::key(lock), now) {
                Some(entry) if entry.holders.contains_key(&lock.owner) => {
                    entry.arm(now, lease);
                    Renewal::Renewed
                }
                _ => Renewal::Gone,
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let now = Instant::now();
        let mut table = self.table();
        Ok(match Self::live(&mut table, &Self::key(lock), now) {
            Some(entry) => LockState::new(
                true,
                entry.holders.get(&lock.owner).copied().unwrap_or(0),
                Some(entry.expires - now),
            ),
            None => LockState::default(),
        })
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let now = Instant::now();
        let key = Self::key(lock);
        let released = {
            let mut table = self.table();
            Self::live(&mut table, &key, now).is_some() && table.remove(&key).is_some()
        };
        if released {
            self.subscriptions.deliver(&Self::channel(lock), Wake::One);
        }
        Ok(released)
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.subscriptions.listen(&Self::channel(lock)).await
    }
}
