//! [`RedLock`]: one lock name on N independent nodes; held when a majority holds it.

use std::collections::HashMap;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use lock_core::backend::{Acquire, Capabilities, LockState, Release, Renewal};
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, Error, ErrorKind, LockKind, LockRef, Locks, ReleaseRequest, RequestId,
};
use tokio::sync::{OwnedRwLockReadGuard, RwLock, oneshot, watch};
use tokio::time::Instant;

use crate::error::{NodeErrors, timed_out};
use crate::origin::common_origin;
use crate::relay::Relay;

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

/// One node's answer to a request sent to every node: the node's index and its outcome.
/// Boxed, so that answers still due can be collected by a task of their own.
type NodeCall<T> = Pin<Box<dyn Future<Output = (usize, Result<T, Error>)> + Send>>;

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
            quorum: self.nodes.len() / 2 + 1,
            nodes: self.nodes,
            node_timeout: self.node_timeout,
            drift_factor: self.drift_factor,
            drift_floor: self.drift_floor,
            relay: Relay::new(listen_timeout),
            last_release: Arc::default(),
            in_flight: Arc::new(InFlight::default()),
            tries: Arc::new(Tries::default()),
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
/// - fair locks are refused (`Unsupported`, declared in its capabilities): every node keeps its own queue, and
///   concurrent waiters reach the nodes in different orders.
///
/// See the crate documentation for what RedLock does and does not guarantee.
pub struct RedLock {
    nodes: Vec<Arc<dyn Backend>>,
    quorum: usize,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    drift_floor: Duration,
    relay: Relay,
    /// What each node said to the latest release (of any lock) by this client.
    last_release: Arc<Mutex<Option<LastRelease>>>,
    in_flight: Arc<InFlight>,
    tries: Arc<Tries>,
    /// The grants this client holds, by lock: a node that lost them (a restart without
    /// persistence) while the majority keeps them gets them back under the same ids, so
    /// that their releases end them there too.
    granted: Arc<Mutex<HashMap<LockRef, Vec<RequestId>>>>,
}

/// Read-write gates by key, each alive only while somebody holds it: the map does not
/// grow with the keys ever used.
#[derive(Debug)]
struct Gates<K>(Mutex<HashMap<K, Gate>>);

/// Shared by work that may run together; taken exclusively by work that must come after.
type Gate = Arc<RwLock<()>>;

impl<K> Default for Gates<K> {
    fn default() -> Self {
        Self(Mutex::new(HashMap::new()))
    }
}

impl<K: std::hash::Hash + Eq + Clone> Gates<K> {
    fn gate(&self, key: K) -> Gate {
        let mut gates = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(gates.entry(key).or_default())
    }

    /// Drops `gate` (and the guard taken from it, dropped before) and forgets the entry
    /// when nobody else uses it.
    fn done(&self, key: &K, gate: Gate) {
        let mut gates = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        drop(gate);
        if gates.get(key).is_some_and(|g| Arc::strong_count(g) == 1) {
            gates.remove(key);
        }
    }

    /// Waits until everybody who shares `key`'s gate now has let go.
    async fn wait_free(&self, key: K) {
        let gate = self.gate(key.clone());
        drop(gate.write().await);
        self.done(&key, gate);
    }
}

/// A shared hold of `gate`: taken at once where nobody holds or waits for it
/// exclusively, so that work that takes it exclusively later waits for this; else once
/// it is free.
fn share(gate: &Gate) -> impl Future<Output = OwnedRwLockReadGuard<()>> + Send + 'static {
    let now = Arc::clone(gate).try_read_owned().ok();
    let gate = Arc::clone(gate);
    async move {
        match now {
            Some(shared) => shared,
            None => gate.read_owned().await,
        }
    }
}

/// Acquisitions still running on a node, per lock. A release on that node waits for
/// them, so that a grant answered after the lock was released there (a slow node the
/// quorum did not wait for) is released too, instead of holding the node for a lease.
type InFlight = Gates<(usize, LockRef)>;

/// The node tasks of each request's latest try, by request id. A request whose outcome
/// was unknown is sent again under its id; a node would answer the resend by replaying
/// the grant of the earlier try, which that try's undo (a node task of its own, perhaps
/// still on its way) then takes away: the resend would count a grant that is gone. So a
/// resend starts once every node task of the earlier try has ended: the tasks share the
/// request's gate, a resend takes it exclusively first.
type Tries = Gates<RequestId>;

impl fmt::Debug for RedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLock")
            .field("nodes", &self.nodes.len())
            .field("quorum", &self.quorum)
            .field("node_timeout", &self.node_timeout)
            .finish_non_exhaustive()
    }
}

/// Whether the grants of one acquire attempt count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Pending,
    Kept,
    Undone,
}

/// Acquires on node `index` in a task of its own, so that the call completes even after
/// the request stopped waiting for it. A grant that turns out not to count (the quorum
/// failed, or the caller went away) is released by the task once the request has decided.
/// A request that failed without an answer is undone as an undo of *its* grant, which
/// the node performs only if it granted that request: undoing a reentry that never ran
/// must not take the outer hold away.
fn spawn_acquire(
    (index, node): (usize, Arc<dyn Backend>),
    lock: LockRef,
    request: AcquireRequest,
    mut decision: watch::Receiver<Decision>,
    (in_flight, tries): (Arc<InFlight>, Arc<Tries>),
) -> oneshot::Receiver<Result<Acquire, Error>> {
    let (reply, answer) = oneshot::channel();
    // Entered before the task starts: a release of this lock on this node, however soon
    // it comes, waits for this acquisition, and a resend of the request for its end.
    let node_key = (index, lock.clone());
    let (gate, this_try) = (in_flight.gate(node_key.clone()), tries.gate(request.id));
    let (entered, in_try) = (share(&gate), share(&this_try));
    tokio::spawn(async move {
        // Not free at once only if a release of an earlier hold runs on this node: this
        // acquisition goes after it.
        let (in_try, entered) = (in_try.await, entered.await);
        let result = node.acquire(&lock, request).await;
        let maybe_held = !matches!(result, Ok(Acquire::Busy { .. }));
        // A caller that went away no longer needs the answer; `decision` still tells
        // this task whether to give a grant back.
        let _ = reply.send(result);
        if maybe_held {
            let kept = decision
                .wait_for(|d| *d != Decision::Pending)
                .await
                .is_ok_and(|d| *d == Decision::Kept);
            let undo =
                ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
            if !kept && let Err(err) = node.release(&lock, undo).await {
                tracing::warn!(
                    target: "lock",
                    node = index,
                    name = %lock.name,
                    error = %err.chain(),
                    "a RedLock node's grant that did not count could not be released; \
                     it holds until its lease ends"
                );
            }
        }
        drop(entered);
        in_flight.done(&node_key, gate);
        drop(in_try);
        tries.done(&request.id, this_try);
    });
    answer
}

/// One node's answer to an acquire.
enum Granted {
    Yes {
        holds: u32,
        token: Option<u64>,
        origin: Option<RequestId>,
    },
    Busy(Option<Duration>),
    Failed(Error),
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
        self.quorum
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

    /// Gives node `index`, which lost `lock`, this client's grants of it back, each under
    /// its own id and through the node's gate (a release of the lock on that node waits
    /// for them, so none lands after it). A grant the node still remembers is answered
    /// as before and counts once.
    fn repair(&self, index: usize, lock: &LockRef, lease: Duration) {
        let grants = self.grants().get(lock).cloned().unwrap_or_default();
        for grant in grants {
            let mut request = AcquireRequest::new(lease);
            request.id = grant;
            // Decided at once: the grant counts.
            let (_decided, decision) = watch::channel(Decision::Kept);
            let answer = spawn_acquire(
                (index, Arc::clone(&self.nodes[index])),
                lock.clone(),
                request,
                decision,
                (Arc::clone(&self.in_flight), Arc::clone(&self.tries)),
            );
            let name = lock.name.clone();
            tokio::spawn(async move {
                let repaired = match answer.await {
                    Ok(result) => result,
                    Err(_) => Err(Error::protocol("a node's task ended without a reply")),
                };
                if let Err(err) = repaired {
                    tracing::warn!(
                        target: "lock",
                        node = index,
                        name = %name,
                        error = %err.chain(),
                        "a RedLock node that lost the lock could not be given it back"
                    );
                }
            });
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

    /// A release's outcome once a majority of nodes agree on it: released, or still
    /// held (with the count that majority agrees on). `None` while they do not (yet).
    fn majority_says(&self, report: &[Option<NodeRelease>]) -> Option<Release> {
        let mut released = 0;
        let mut still = Vec::new();
        for node in report.iter().flatten() {
            match node {
                NodeRelease::Done(Release::Released) => released += 1,
                NodeRelease::Done(Release::StillHeld { holds }) => still.push(*holds),
                _ => {}
            }
        }
        if released >= self.quorum {
            return Some(Release::Released);
        }
        if still.len() >= self.quorum {
            still.sort_unstable_by(|a, b| b.cmp(a));
            return Some(Release::StillHeld {
                holds: still[self.quorum - 1],
            });
        }
        None
    }

    /// An error naming every node's failure when too many failed for a majority to have
    /// answered `during`.
    fn majority_answered(
        &self,
        during: &'static str,
        failed: Vec<(usize, Error)>,
    ) -> Result<(), Error> {
        if failed.len() > self.nodes.len() - self.quorum {
            return Err(self.nodes_failed(during, failed));
        }
        Ok(())
    }

    /// A connection error naming every failed node's error.
    fn nodes_failed(&self, during: &'static str, failed: Vec<(usize, Error)>) -> Error {
        Error::connection(
            during,
            NodeErrors {
                nodes: failed,
                of: self.nodes.len(),
            },
        )
    }

    /// A release's outcome from every node's answer, when no majority agreed on
    /// "released" or on "still held".
    ///
    /// A hold that a majority still had (some nodes released it, some kept a count) is
    /// released: a minority keeps no lock. A hold a majority no longer had was lost
    /// before the release (leases ran out, nodes restarted, someone force-unlocked it),
    /// even where a minority still had its part: not held, as on one node. When failed
    /// nodes could tip it either way, nobody knows, and the failures are the answer.
    fn settle_release(&self, report: &[NodeRelease]) -> Result<Release, Error> {
        let (mut held, mut failed) = (0, Vec::new());
        for (i, node) in report.iter().enumerate() {
            match node {
                NodeRelease::Done(Release::Released | Release::StillHeld { .. }) => held += 1,
                NodeRelease::Done(_) => {}
                NodeRelease::Failed(err) => failed.push((i, err.clone())),
            }
        }
        if held >= self.quorum {
            return Ok(Release::Released);
        }
        if held + failed.len() >= self.quorum {
            return Err(self.nodes_failed("releasing on a majority of nodes", failed));
        }
        Ok(Release::NotHeld)
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

    /// Runs `call` on every node at once, each bounded by `timeout`.
    fn on_all<T, F, Fut>(&self, timeout: Duration, call: F) -> FuturesUnordered<NodeCall<T>>
    where
        F: Fn(Arc<dyn Backend>) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.on_all_indexed(timeout, move |_, node| call(node))
    }

    /// [`RedLock::on_all`], telling `call` which node it runs on.
    fn on_all_indexed<T, F, Fut>(&self, timeout: Duration, call: F) -> FuturesUnordered<NodeCall<T>>
    where
        F: Fn(usize, Arc<dyn Backend>) -> Fut,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                // Each call runs in its own task: it finishes even if this request is
                // dropped, so a late grant is still known to the node for release.
                let task = tokio::spawn(call(i, Arc::clone(node)));
                let answer: NodeCall<T> = Box::pin(async move {
                    let outcome = match tokio::time::timeout(timeout, task).await {
                        Ok(Ok(result)) => result,
                        Ok(Err(join)) => Err(Error::protocol(format!("node task failed: {join}"))),
                        Err(_) => Err(timed_out(timeout)),
                    };
                    (i, outcome)
                });
                answer
            })
            .collect()
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
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        if lock.kind == LockKind::Fair {
            return Err(Error::unsupported("fair locks over RedLock nodes"));
        }
        // A resend of this request goes after every node task of its earlier try.
        self.tries.wait_free(request.id).await;
        let started = Instant::now();
        let timeout = self.node_timeout(request.lease);
        let (decide, decision) = watch::channel(Decision::Pending);
        // Each node would wake a different client alone; every waiting client hears each.
        let request = request.for_a_part();
        let mut calls: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let answer = spawn_acquire(
                    (i, Arc::clone(node)),
                    lock.clone(),
                    request,
                    decision.clone(),
                    (Arc::clone(&self.in_flight), Arc::clone(&self.tries)),
                );
                async move {
                    let outcome = match tokio::time::timeout(timeout, answer).await {
                        Ok(Ok(result)) => result,
                        Ok(Err(_)) => Err(Error::protocol("a node's task ended without a reply")),
                        Err(_) => Err(timed_out(timeout)),
                    };
                    (i, outcome)
                }
            })
            .collect();
        let n = self.nodes.len();
        let mut answers: Vec<Option<Granted>> = (0..n).map(|_| None).collect();
        let (mut granted, mut busy) = (0, 0);
        while let Some((i, outcome)) = calls.next().await {
            busy += usize::from(matches!(outcome, Ok(Acquire::Busy { .. })));
            answers[i] = Some(match outcome {
                Ok(Acquire::Acquired {
                    holds,
                    token,
                    origin,
                }) => {
                    granted += 1;
                    Granted::Yes {
                        holds,
                        token,
                        origin,
                    }
                }
                Ok(Acquire::Busy { ttl, .. }) => Granted::Busy(ttl),
                Ok(_) => Granted::Failed(Error::protocol("a node answered an unknown reply")),
                Err(err) => Granted::Failed(err),
            });
            // Stop as soon as the outcome is decided: a majority granted, or refused
            // because others hold the lock. Late answers are handled by the nodes'
            // tasks. A majority made impossible by failures waits for every node (each
            // within the node timeout): whether the answer is an error or busy depends
            // on how many failed, and a node that refused first must not pass for the
            // majority's answer when the others are unreachable.
            if granted >= self.quorum || busy > n - self.quorum {
                break;
            }
        }
        let elapsed = started.elapsed();
        let valid = request
            .lease
            .checked_sub(elapsed + self.drift(request.lease))
            .is_some_and(|v| !v.is_zero());
        let (holds, token) = answers
            .iter()
            .flatten()
            .filter_map(|a| match a {
                Granted::Yes { holds, token, .. } => Some((*holds, *token)),
                _ => None,
            })
            .fold((0, None), |(h, t), (holds, token)| {
                (h.max(holds), t.max(token))
            });
        let origin = common_origin(answers.iter().flatten().filter_map(|a| match a {
            Granted::Yes { origin, .. } => Some(*origin),
            _ => None,
        }));
        // Nodes count tokens separately. The token is the largest the majority gave;
        // raising a majority's counters to it makes every later majority (which shares
        // a node with this one) give a larger one.
        let fenced = match token {
            Some(token) if granted >= self.quorum && valid => {
                self.raise_fencing(lock, token, timeout).await
            }
            _ => true,
        };
        // The nodes' tasks that still run read the decision; once all have ended nobody
        // is left to tell, which is no failure.
        if granted >= self.quorum && valid && fenced {
            let _ = decide.send(Decision::Kept);
            self.grants()
                .entry(lock.clone())
                .or_default()
                .push(request.id);
            return Ok(Acquire::Acquired {
                holds,
                token,
                origin,
            });
        }
        let _ = decide.send(Decision::Undone);
        self.not_acquired(answers)
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        if self
            .raise_fencing(lock, token, self.unleased_timeout())
            .await
        {
            Ok(())
        } else {
            Err(Error::protocol(
                "a majority of nodes did not raise the fencing counter",
            ))
        }
    }

    async fn cancel_wait(&self, lock: &LockRef) -> Result<(), Error> {
        let timeout = self.unleased_timeout();
        let mut calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.cancel_wait(&lock).await }
        });
        while calls.next().await.is_some() {}
        Ok(())
    }

    /// Answers as soon as a majority agrees (released, or still held), as the acquire
    /// does; the other nodes' releases finish in their tasks, and
    /// [`RedLock::last_release`] reports every node once all have answered.
    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.forget_grant(lock, request.grant);
        let timeout = self.node_timeout(request.lease);
        let mut calls = self.on_all_indexed(timeout, |index, node| {
            let (lock, in_flight) = (lock.clone(), Arc::clone(&self.in_flight));
            async move {
                // After any acquisition of this lock still running on the node.
                let key = (index, lock.clone());
                let gate = in_flight.gate(key.clone());
                let outcome = {
                    let _settled = gate.write().await;
                    node.release(&lock, request).await
                };
                in_flight.done(&key, gate);
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
            decided = self.majority_says(&report);
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
                tokio::spawn(reported);
                Ok(decided)
            }
            Some(decided) => {
                reported.await;
                Ok(decided)
            }
            None => self.settle_release(&reported.await),
        }
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
        let n = self.nodes.len();
        locks
            .iter()
            .enumerate()
            .map(|(k, lock)| {
                let mut renewed = Vec::new();
                let mut gone = Vec::new();
                let mut failed = Vec::new();
                for (i, outcome) in per_node.iter().enumerate() {
                    match outcome {
                        Some(Ok(renewals)) => match renewals.get(k) {
                            Some(Renewal::Renewed) => renewed.push(i),
                            Some(Renewal::Failed(err)) => failed.push((i, err.clone())),
                            _ => gone.push(i),
                        },
                        Some(Err(err)) => failed.push((i, err.clone())),
                        None => failed.push((i, timed_out(timeout))),
                    }
                }
                if renewed.len() >= self.quorum {
                    // The majority holds it: give it back to nodes that lost it (a
                    // restart without persistence), so that the majority stays robust.
                    for i in gone {
                        self.repair(i, lock, lease);
                    }
                    Renewal::Renewed
                } else if gone.len() > n - self.quorum {
                    Renewal::Gone
                } else {
                    Renewal::Failed(Error::connection(
                        "renewing on a majority of nodes",
                        NodeErrors {
                            nodes: failed,
                            of: n,
                        },
                    ))
                }
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let timeout = self.unleased_timeout();
        let mut calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.inspect(&lock).await }
        });
        let (mut locked, mut holds, mut ttl, mut failed) = (0, Vec::new(), None, Vec::new());
        while let Some((i, outcome)) = calls.next().await {
            match outcome {
                Ok(state) => {
                    if state.locked {
                        locked += 1;
                        ttl = match (ttl, state.ttl) {
                            (Some(a), Some(b)) => Some(std::cmp::min(a, b)),
                            (a, b) => a.or(b),
                        };
                    }
                    holds.push(state.holds);
                }
                Err(err) => failed.push((i, err)),
            }
        }
        self.majority_answered("inspecting a majority of nodes", failed)?;
        // The count a majority agrees on: the quorum-th largest.
        holds.sort_unstable_by(|a, b| b.cmp(a));
        let majority_holds = holds.get(self.quorum - 1).copied().unwrap_or(0);
        let is_locked = locked >= self.quorum;
        Ok(LockState::new(
            is_locked,
            majority_holds,
            ttl.filter(|_| is_locked),
        ))
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let timeout = self.unleased_timeout();
        let mut calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.force_release(&lock).await }
        });
        // Deleted on every node that answers; it "was held" as `inspect` says it is, on a
        // majority. A minority still holding it is what a release that answered once a
        // majority agreed leaves for a moment: that lock was already free.
        let mut held = 0;
        while let Some((_, outcome)) = calls.next().await {
            held += usize::from(matches!(outcome, Ok(true)));
        }
        Ok(held >= self.quorum)
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
    /// The answer to an acquire that did not get a majority: the caller's own error if a
    /// majority refused it for a reason no retry changes, every node's error if too many
    /// failed, else busy until the shortest lease among the holders' nodes.
    fn not_acquired(&self, answers: Vec<Option<Granted>>) -> Result<Acquire, Error> {
        let n = self.nodes.len();
        let mut failures = Vec::new();
        let mut ttl: Option<Duration> = None;
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Some(Granted::Failed(err)) => failures.push((i, err)),
                Some(Granted::Busy(Some(t))) => ttl = Some(ttl.map_or(t, |m| m.min(t))),
                _ => {}
            }
        }
        // An answer that no retry can change (the caller holds the read lock, or the key
        // has another type) is the caller's error, not the nodes'.
        let refused = failures
            .iter()
            .filter(|(_, err)| {
                matches!(
                    err.kind(),
                    ErrorKind::WouldDeadlock | ErrorKind::Incompatible
                )
            })
            .count();
        if refused >= self.quorum
            && let Some(index) = failures.iter().position(|(_, err)| {
                matches!(
                    err.kind(),
                    ErrorKind::WouldDeadlock | ErrorKind::Incompatible
                )
            })
        {
            return Err(failures.swap_remove(index).1);
        }
        if failures.len() > n - self.quorum {
            return Err(Error::connection(
                "acquiring on a majority of nodes",
                NodeErrors {
                    nodes: failures,
                    of: n,
                },
            ));
        }
        Ok(Acquire::Busy {
            ttl,
            reserved: false,
        })
    }

    /// Raises the fencing counter on every node; true when a majority did.
    async fn raise_fencing(&self, lock: &LockRef, token: u64, timeout: Duration) -> bool {
        let mut calls = self.on_all(timeout, |node| {
            let lock = lock.clone();
            async move { node.raise_fencing(&lock, token).await }
        });
        let mut raised = 0;
        while let Some((_, outcome)) = calls.next().await {
            raised += usize::from(outcome.is_ok());
        }
        raised >= self.quorum
    }

    /// Channels this client listens on for its waiters (for diagnostics and tests).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.relay.channels()
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
                let tries = redlock.tries.0.lock().expect("not poisoned").len();
                let in_flight = redlock.in_flight.0.lock().expect("not poisoned").len();
                if tries == 0 && in_flight == 0 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every gate is forgotten");
    }
}
