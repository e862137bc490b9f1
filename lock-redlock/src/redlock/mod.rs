//! [`RedLock`]: one lock name on N independent nodes; held when a majority holds it.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use lock_core::backend::{Acquire, Capabilities, LockState, Release, Renewal};
use lock_core::notify::Listener;
use lock_core::runtime::BackgroundJobs;
use lock_core::{
    AcquireRequest, Backend, ClientInfo, Error, Introspect, LockInfo, LockKind, LockName, LockRef,
    Locks, ReleaseRequest, RequestId,
};

use crate::introspect::{composed, listed_by, of_part};
use crate::relay::Relay;

mod acquire;
mod fan_out;
mod gates;
mod quorum;

use gates::{NodeGates, exclusive};
use quorum::{Quorum, RenewalVerdict};

/// What one node said to a release.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum NodeRelease {
    /// The node released (or still holds, for a reentrant hold) as asked.
    Done(Release),
    /// The node failed or did not answer in time.
    Failed(Error),
}

/// The lock a release was of, and what each node said to it.
type LastRelease = (LockRef, Vec<NodeRelease>);

/// The default node timeout's upper bound, and the default of requests without a lease.
const LONGEST_DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(1);

/// Builds a [`RedLock`].
#[derive(Debug)]
#[must_use]
pub struct RedLockBuilder {
    nodes: Vec<Arc<dyn Backend>>,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    drift_floor: Duration,
}

impl RedLockBuilder {
    /// The longest wait for one node's answer. Default: a twentieth of the request's
    /// lease, at least 5 ms and at most 1 s (so 1 s with the watchdog's 30 s lease); 1 s
    /// for requests without a lease (inspect, force release, leaving a queue).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// The clock-drift allowance: validity is `lease - elapsed - (lease * factor + floor)`.
    /// Default: 0.01 and 2 ms.
    pub fn drift(mut self, factor: f64, floor: Duration) -> Self {
        self.drift_factor = factor;
        self.drift_floor = floor;
        self
    }

    /// Checks the settings.
    pub fn build(self) -> Result<RedLock, Error> {
        if self.nodes.is_empty() {
            return Err(Error::invalid_argument(
                "nodes",
                "a RedLock needs at least one node",
            ));
        }
        if self.node_timeout.is_some_and(|t| t.is_zero()) {
            return Err(Error::invalid_argument("node_timeout", "must be positive"));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::invalid_argument(
                "drift_factor",
                "must be at least 0 and below 0.5",
            ));
        }
        let listen_timeout = self.node_timeout.unwrap_or(LONGEST_DEFAULT_NODE_TIMEOUT);
        Ok(RedLock {
            quorum: Quorum::of(self.nodes.len()),
            nodes: self.nodes,
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            drift_floor: self.drift_floor,
            relay: Relay::new(listen_timeout),
            last_release: Arc::default(),
            gates: Arc::default(),
            background: Arc::new(BackgroundJobs::new()),
            granted: Arc::default(),
        })
    }
}

/// The RedLock algorithm as a [`Backend`]: the same lock on N independent nodes, held
/// while a majority (N/2 + 1) holds it.
///
/// Wrap it in a [`Locks`] client and every lock kind, reentrancy, the watchdog, fencing
/// tokens, guards and cancel safety work as for a single node. Every request goes to all
/// nodes at once, each bounded by the per-node timeout:
///
/// - acquire succeeds when a majority granted it within the lease's validity
///   (`lease - elapsed - drift`, monotonic clock); otherwise it is released on every node
///   that granted it or did not answer. The guard's [`valid_for`](lock_core::Guard::valid_for)
///   is that validity, counted down from when the acquisition was sent;
/// - a renewal counts when a majority confirms it; a node that lost the lock (a restart
///   without persistence) while the majority still holds it gets it back;
/// - the fencing token is the largest a majority granted (tokens of the nodes differ);
/// - a release goes to every node, after any acquisition of the lock still running on
///   that node (so a late grant is released too); the lock is still held only while a
///   majority still holds it. The release answers once a majority agrees, like the
///   acquire, and [`RedLock::last_release`] tells what each node said to the latest
///   release once all have answered. A release that finds the lock on a minority only
///   answers "not held", as on one node: the hold was lost before it (and the minority's
///   parts are released all the same);
/// - a node request that failed without an answer is undone as the undo of that
///   request's grant, which the node performs only if it granted it (undoing a reentry
///   that never ran would take the outer hold away); every node remembers each request's
///   answer, so a request sent again after a lost reply never counts twice;
/// - a force release deletes the lock on each node as it lands there, and this client's
///   acquisitions sent after it go after it on every node. Another client's acquisition
///   is not ordered with it: one that takes a node while the force release is still on
///   its way there loses that part, and its guard learns at its next renewal that a
///   majority no longer holds the lock (a force release revokes, see fencing tokens);
/// - fair locks are refused (`Unsupported`, declared in its capabilities): every node keeps its own queue, and
///   concurrent waiters reach the nodes in different orders.
///
/// See the crate documentation for what RedLock does and does not guarantee.
pub struct RedLock {
    nodes: Vec<Arc<dyn Backend>>,
    quorum: Quorum,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    drift_floor: Duration,
    relay: Relay,
    /// What each node said to the latest release (of any lock) by this client.
    last_release: Arc<Mutex<Option<LastRelease>>>,
    /// What orders this client's requests on each node.
    gates: Arc<NodeGates>,
    /// The node calls that go on after their request has its answer (late grants given
    /// back, the rest of a release); [`Backend::settle`] waits for them.
    background: Arc<BackgroundJobs>,
    /// The grants this client holds, by lock: a node that lost them (a restart without
    /// persistence) while the majority keeps them gets them back under the same ids, so
    /// that their releases end them there too.
    granted: Arc<Mutex<HashMap<LockRef, Vec<RequestId>>>>,
}

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("nodes", &self.nodes.len())
            .field("quorum", &self.quorum.majority())
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

impl RedLock {
    /// A RedLock over `nodes`, each an independent Redis master (or any backend).
    pub fn builder(nodes: Vec<Arc<dyn Backend>>) -> RedLockBuilder {
        RedLockBuilder {
            nodes,
            node_timeout: None,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
        }
    }

    /// A client with default settings over this RedLock.
    #[must_use]
    pub fn locks(self) -> Locks {
        Locks::new(Arc::new(self))
    }

    /// How many nodes must agree.
    #[must_use]
    pub fn quorum(&self) -> usize {
        self.quorum.majority()
    }

    fn grants(&self) -> std::sync::MutexGuard<'_, HashMap<LockRef, Vec<RequestId>>> {
        // Single map operations only: a poisoned map is still consistent.
        self.granted.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Forgets `grant` of `lock`: it is being released.
    fn forget_grant(&self, lock: &LockRef, grant: RequestId) {
        let mut granted = self.grants();
        if let Some(grants) = granted.get_mut(lock) {
            grants.retain(|held| *held != grant);
            if grants.is_empty() {
                granted.remove(lock);
            }
        }
    }

    /// What each node answered to the latest release by this client, if that release
    /// was of `lock`, written once every node has answered (or timed out): a release
    /// itself returns as soon as a majority agrees. Only the latest report is kept.
    #[must_use]
    pub fn last_release(&self, lock: &LockRef) -> Option<Vec<NodeRelease>> {
        match &*self
            .last_release
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some((released, report)) if released == lock => Some(report.clone()),
            _ => None,
        }
    }

    fn node_timeout(&self, lease: Duration) -> Duration {
        self.node_timeout.unwrap_or_else(|| {
            (lease / 20).clamp(Duration::from_millis(5), LONGEST_DEFAULT_NODE_TIMEOUT)
        })
    }

    /// The node timeout of requests that carry no lease (inspect, force release, leaving a
    /// queue, raising fencing counters): the configured one, else the longest default.
    fn unleased_timeout(&self) -> Duration {
        self.node_timeout.unwrap_or(LONGEST_DEFAULT_NODE_TIMEOUT)
    }

    fn drift(&self, lease: Duration) -> Duration {
        lease.mul_f64(self.drift_factor) + self.drift_floor
    }
}

#[async_trait]
impl Backend for RedLock {
    /// What every node supports, but no fair locks: each node keeps its own queue, and
    /// concurrent waiters reach nodes in different orders, so heads disagree and no
    /// waiter gets a majority. For the same reason each node may wake a different
    /// waiting client after a release. Requests to the nodes run in tasks of their own,
    /// so a later request may overtake an earlier one.
    fn capabilities(&self) -> Capabilities {
        Capabilities::common(self.nodes.iter().map(|node| node.capabilities()))
            .fair(false)
            .ordered_requests(false)
            .count_down_latch(false)
            .semaphore(false)
            .expirable_semaphore(false)
            .wakes_one_client(false)
            .hands_over(false)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        if lock.kind == LockKind::Fair {
            return Err(Error::unsupported("fair locks over RedLock nodes"));
        }
        self.acquire_on_majority(lock, request).await
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        if self
            .raise_fencing_on_majority(lock, token, self.unleased_timeout())
            .await
        {
            Ok(())
        } else {
            Err(Error::protocol(
                "a majority of nodes did not raise the fencing counter",
            ))
        }
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let timeout = self.unleased_timeout();
        let mut calls = self.on_all(timeout, |node| {
            let (lock, acquisition) = (lock.clone(), *acquisition);
            async move { node.cancel_wait(&lock, &acquisition).await }
        });
        while calls.next().await.is_some() {}
        Ok(())
    }

    /// Answers as soon as a majority agrees (released, or still held), as the acquire
    /// does; the other nodes' releases finish in their tasks, and
    /// [`RedLock::last_release`] reports every node once all have answered.
    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.forget_grant(lock, request.grant);
        // The nodes' requests were sent by this lock (a node's may have timed out and
        // still arrive, or still be sent again), not by its caller.
        let request = request.passed_on();
        let timeout = self.node_timeout(request.lease);
        let mut calls = self.on_all_indexed(timeout, |index, node| {
            let (lock, gates) = (lock.clone(), Arc::clone(&self.gates));
            async move {
                // After any acquisition of this lock still running on the node.
                let key = (index, lock.clone());
                let gate = gates.in_flight.gate(key.clone());
                let outcome = {
                    let _settled = gate.write().await;
                    node.release(&lock, request).await
                };
                gates.in_flight.done(&key, gate);
                outcome
            }
        });
        let mut report: Vec<Option<NodeRelease>> = vec![None; self.nodes.len()];
        let mut decided = None;
        while let Some((i, outcome)) = calls.next().await {
            report[i] = Some(match outcome {
                Ok(release) => NodeRelease::Done(release),
                Err(err) => NodeRelease::Failed(err),
            });
            decided = self.quorum.release_agreed(&report);
            if decided.is_some() {
                break;
            }
        }
        let answers_due = !calls.is_empty();
        let last_release = Arc::clone(&self.last_release);
        let released = lock.clone();
        let reported = async move {
            while let Some((i, outcome)) = calls.next().await {
                report[i] = Some(match outcome {
                    Ok(release) => NodeRelease::Done(release),
                    Err(err) => NodeRelease::Failed(err),
                });
            }
            let report: Vec<NodeRelease> = report.into_iter().flatten().collect();
            *last_release.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((released, report.clone()));
            report
        };
        match decided {
            Some(decided) if answers_due => {
                if let Err(err) = self.background.spawn(reported) {
                    fan_out::not_started("the rest of a release", &err);
                }
                Ok(decided)
            }
            Some(decided) => {
                reported.await;
                Ok(decided)
            }
            None => self.quorum.release_settled(&reported.await),
        }
    }
    async fn settle(&self) {
        self.background.drained().await;
        futures_util::future::join_all(self.nodes.iter().map(|node| node.settle())).await;
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let timeout = self.node_timeout(lease);
        let batch: Arc<[LockRef]> = locks.into();
        let mut calls = self.on_all(timeout, |node| {
            let batch = Arc::clone(&batch);
            async move { Ok(node.renew(&batch, lease).await) }
        });
        let mut per_node: Vec<Option<Result<Vec<Renewal>, Error>>> =
            (0..self.nodes.len()).map(|_| None).collect();
        while let Some((i, outcome)) = calls.next().await {
            per_node[i] = Some(outcome);
        }
        let verdicts = (0..locks.len()).map(|k| self.quorum.renewal(k, &per_node, timeout));
        locks
            .iter()
            .zip(verdicts)
            .map(|(lock, verdict)| match verdict {
                // The majority holds it: give it back to nodes that lost it (a restart
                // without persistence), so that the majority stays robust.
                RenewalVerdict::Renewed { repair, origin } => {
                    for i in repair {
                        self.repair(i, lock, lease);
                    }
                    Renewal::Renewed { origin }
                }
                RenewalVerdict::Gone => Renewal::Gone,
                RenewalVerdict::Failed(err) => Renewal::Failed(err),
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let timeout = self.unleased_timeout();
        let calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.inspect(&lock).await }
        });
        self.quorum.inspected(calls.collect().await)
    }

    /// Deletes the lock on every node. This client's acquisitions of the name sent later
    /// go after it on each node, also where it is still on its way after the caller
    /// stopped waiting for it.
    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let timeout = self.unleased_timeout();
        let mut calls = self.on_all_indexed(timeout, |index, node| {
            let (lock, gates) = (lock.clone(), Arc::clone(&self.gates));
            // Taken now, before the task runs: an acquisition sent after this call
            // returns waits for it.
            let key = (index, lock.name.clone());
            let gate = gates.forcing.gate(key.clone());
            let forcing = exclusive(&gate);
            async move {
                let outcome = {
                    let _forcing = forcing.await;
                    node.force_release(&lock).await
                };
                gates.forcing.done(&key, gate);
                outcome
            }
        });
        // Deleted on every node that answers; it "was held" as `inspect` says it is, on a
        // majority. A minority still holding it is what a release that answered once a
        // majority agreed leaves for a moment: that lock was already free.
        let mut held = 0;
        while let Some((_, outcome)) = calls.next().await {
            held += usize::from(matches!(outcome, Ok(true)));
        }
        Ok(held >= self.quorum.majority())
    }

    /// Answers for the parts: each part says who holds its locks, when every part can
    /// (the capabilities say so).
    fn introspection(&self) -> &dyn Introspect {
        self
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        let channel = format!("{}|{}|{}", lock.kind, lock.name, lock.owner);
        let parts = self
            .nodes
            .iter()
            .map(|node| (Arc::clone(node), lock.clone()))
            .collect();
        self.relay.listen(&channel, parts).await
    }
}

impl RedLock {
    /// Channels this client listens on for its waiters (for diagnostics and tests).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.relay.channels()
    }
}

/// A holder is one a majority of nodes name; what it holds, what a majority agrees on.
#[async_trait]
impl Introspect for RedLock {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let calls = self.on_all(self.unleased_timeout(), |node| {
            let name = name.clone();
            async move {
                let introspection = of_part(&*node)?;
                introspection.describe(&name).await
            }
        });
        let told = self.quorum.answered(
            "describing a lock on a majority of nodes",
            calls.collect().await,
        )?;
        Ok(composed(name.as_str(), &told, self.quorum.majority()))
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let calls = self.on_all(self.unleased_timeout(), |node| {
            let prefix = prefix.to_owned();
            async move {
                let introspection = of_part(&*node)?;
                introspection.held_names(&prefix, usize::MAX).await
            }
        });
        let told = self.quorum.answered(
            "listing held locks on a majority of nodes",
            calls.collect().await,
        )?;
        Ok(listed_by(told, self.quorum.majority(), limit))
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        let calls = self.on_all(self.unleased_timeout(), |node| {
            let (client_id, client) = (client_id.to_owned(), client.clone());
            async move {
                let introspection = of_part(&*node)?;
                introspection.announce(&client_id, &client, ttl).await
            }
        });
        self.quorum
            .answered(
                "describing this client on a majority of nodes",
                calls.collect().await,
            )
            .map(drop)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lock_core::memory::MemoryBackend;
    use lock_core::{AcquireRequest, Backend, LockKind, LockName, LockRef, Owner};

    use super::RedLock;

    fn lock(owner: &str) -> LockRef {
        LockRef::new(
            LockKind::Mutex,
            LockName::new("gates").expect("valid name"),
            Owner::new(owner, "1"),
        )
    }

    /// The gates of acquisitions and of tries live only while their node tasks run:
    /// granted, busy and released alike leave nothing behind.
    #[tokio::test]
    async fn gates_are_forgotten_once_their_tasks_end() {
        let nodes: Vec<Arc<dyn Backend>> = (0..3)
            .map(|_| Arc::new(MemoryBackend::new()) as Arc<dyn Backend>)
            .collect();
        let redlock = RedLock::builder(nodes).build().expect("valid RedLock");
        let request = AcquireRequest::new(Duration::from_secs(10));
        let held = redlock
            .acquire(&lock("a"), request)
            .await
            .expect("acquired");
        assert!(matches!(held, lock_core::backend::Acquire::Acquired { .. }));
        let busy = redlock
            .acquire(&lock("b"), AcquireRequest::new(Duration::from_secs(10)))
            .await
            .expect("answered");
        assert!(matches!(busy, lock_core::backend::Acquire::Busy { .. }));
        let release = lock_core::ReleaseRequest::new(Duration::from_secs(10), request.id);
        let released = redlock
            .release(&lock("a"), release)
            .await
            .expect("released");
        assert_eq!(released, lock_core::backend::Release::Released);
        assert!(
            redlock.grants().is_empty(),
            "a released grant is remembered"
        );
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let gates = &redlock.gates;
                let tries = gates.tries.0.lock().expect("not poisoned").len();
                let in_flight = gates.in_flight.0.lock().expect("not poisoned").len();
                let forcing = gates.forcing.0.lock().expect("not poisoned").len();
                if tries == 0 && in_flight == 0 && forcing == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every gate is forgotten");
    }
}
