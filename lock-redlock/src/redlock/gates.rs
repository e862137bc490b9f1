//! Gates that order work on the nodes: a release after the acquisitions still running
//! on its node, a resend after every node task of its earlier try, an acquisition after
//! a force release still running on its node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use lock_core::{LockName, LockRef, RequestId};
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

/// Read-write gates by key, each alive only while somebody holds it: the map does not
/// grow with the keys ever used.
#[derive(Debug)]
pub(super) struct Gates<K>(pub(super) Mutex<HashMap<K, Gate>>);

/// Shared by work that may run together; taken exclusively by work that must come after.
pub(super) type Gate = Arc<RwLock<()>>;

impl<K> Default for Gates<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq + Clone> Gates<K> {
    pub(super) fn gate(&self, key: K) -> Gate {
        let mut gates = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(gates.entry(key).or_default())
    }

    /// Drops `gate` (and the guard taken from it, dropped before) and forgets the entry
    /// when nobody else uses it.
    pub(super) fn done(&self, key: &K, gate: Gate) {
        let mut gates = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        drop(gate);
        if gates.get(key).is_some_and(|g| Arc::strong_count(g) == 1) {
            gates.remove(key);
        }
    }
}

/// A shared hold of `gate`: taken at once where nobody holds or waits for it
/// exclusively, so that work that takes it exclusively later waits for this; else once
/// it is free.
pub(super) fn share(
    gate: &Gate,
) -> impl Future<Output = OwnedRwLockReadGuard<()>> + Send + 'static + use<> {
    let now = Arc::clone(gate).try_read_owned().ok();
    let gate = Arc::clone(gate);
    async move {
        match now {
            Some(shared) => shared,
            None => gate.read_owned().await,
        }
    }
}

/// An exclusive hold of `gate`: taken at once where nobody holds it, so that work that
/// shares it later waits for this; else once everybody who holds or waits before has let go.
pub(super) fn exclusive(
    gate: &Gate,
) -> impl Future<Output = OwnedRwLockWriteGuard<()>> + Send + 'static + use<> {
    let now = Arc::clone(gate).try_write_owned().ok();
    let gate = Arc::clone(gate);
    async move {
        match now {
            Some(exclusive) => exclusive,
            None => gate.write_owned().await,
        }
    }
}

/// Acquisitions still running on a node, per lock. A release on that node waits for
/// them, so that a grant answered after the lock was released there (a slow node the
/// quorum did not wait for) is released too, instead of holding the node for a lease.
pub(super) type InFlight = Gates<(usize, LockRef)>;

/// The node task of each request's latest try, by node and request id. A request is
/// sent again under its id (its outcome was unknown, or it is a waiting acquisition's
/// next attempt); a node would answer the resend by replaying the grant of the earlier
/// try, which that try's undo (perhaps still on its way) then takes away: the resend
/// would count a grant that is gone. So on each node a try's task starts once the
/// earlier try's task there has ended: each holds the gate exclusively for its life.
/// Per node, not per request: a node that hangs (paused, or not connected yet) holds up
/// only its own next task, which the caller stops waiting for after the node timeout,
/// not every node's (issue 48: two paused nodes of five made every lock cycle take the
/// 10 s a connect to them took to fail).
pub(super) type Tries = Gates<(usize, RequestId)>;

/// Force releases still running on a node, per name. A force release deletes whatever
/// holds the name on its node when it lands there; one that the caller stopped waiting
/// for (the node timed out) may land later, and an acquisition this client sent after
/// it must not be the hold it deletes. Acquisitions share the gate, a force release
/// takes it exclusively.
pub(super) type Forcing = Gates<(usize, LockName)>;

/// Every gate of one RedLock client.
#[derive(Debug, Default)]
pub(super) struct NodeGates {
    pub(super) in_flight: InFlight,
    pub(super) tries: Tries,
    pub(super) forcing: Forcing,
}
