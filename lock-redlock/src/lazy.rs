//! [`LazyNode`]: a node that connects on first use, so that a RedLock or a MultiLock can
//! start while a minority of its nodes is down, and takes in a node that comes up later
//! without a restart.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use lock_core::backend::{
    Acquire, AcquireRequest, Capabilities, LockState, Release, ReleaseRequest, Renewal,
};
use lock_core::notify::Listener;
use lock_core::{Backend, Error, LockRef, Pauses};
use tokio::sync::Notify;
use tokio::time::Instant;

/// The first pause after a failed connect; they double up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between connect attempts.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);
/// How long calls wait for a connect attempt, from its start: a node that answers takes
/// a few milliseconds; one that does not is down for the calls until the attempt ends.
const CONNECT_GRACE: Duration = Duration::from_millis(200);

type Connect = Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Backend>, Error>> + Send + Sync>;

/// A backend that connects on first use and, while it cannot, answers every call with a
/// connection error at once (trying again after a pause that doubles from 250 ms to 5 s;
/// a connect that takes longer than 200 ms counts as failing until it ends).
///
/// Give each node of a RedLock as a `LazyNode` and the RedLock is built (and serves
/// locks, with a majority) even if some nodes are down or paused when it starts; a node
/// that comes up later is connected by the next call that reaches it. Once connected,
/// the node's own backend reconnects by itself, as the Redis adapters do.
///
/// ```no_run
/// # async fn demo() -> Result<(), lock_core::Error> {
/// use std::sync::Arc;
/// use lock_redlock::{LazyNode, RedLock};
///
/// let urls = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"];
/// let nodes = urls
///     .iter()
///     .map(|url| {
///         let url = url.to_string();
///         let capabilities = lock_redis::RedisBackend::CAPABILITIES;
///         Arc::new(LazyNode::new(url.clone(), capabilities, move || {
///             let url = url.clone();
///             async move {
///                 let node = lock_redis::Connector::new(url).connect().await?;
///                 Ok(Arc::new(node) as Arc<dyn lock_core::Backend>)
///             }
///         })) as Arc<dyn lock_core::Backend>
///     })
///     .collect();
/// let locks = RedLock::builder(nodes).build()?.locks();
/// # Ok(()) }
/// ```
pub struct LazyNode {
    name: String,
    capabilities: Capabilities,
    shared: Arc<Shared>,
}

/// What the node's calls and its connect attempts share.
struct Shared {
    name: String,
    capabilities: Capabilities,
    connect: Connect,
    connected: OnceLock<Arc<dyn Backend>>,
    attempts: Mutex<Attempts>,
    /// Told when a connect attempt ends, whichever way.
    ended: Notify,
}

/// The node's connect attempts: one at a time, in a task of its own.
#[derive(Debug)]
struct Attempts {
    /// Since when the attempt under way runs, if one does.
    running_since: Option<Instant>,
    /// When the next may start, after a failure.
    next_attempt: Option<Instant>,
    pauses: Pauses,
    /// Why the latest attempt failed.
    failure: Option<Error>,
}

impl fmt::Debug for LazyNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyNode")
            .field("name", &self.name)
            .field("connected", &self.shared.connected.get())
            .finish_non_exhaustive()
    }
}

impl LazyNode {
    /// A node named `name` (for errors and logs) that connects with `connect`. It
    /// declares `capabilities` before it is connected (a RedLock asks at once); a backend
    /// that turns out to lack one of them is refused when it connects.
    pub fn new<F, Fut>(name: impl Into<String>, capabilities: Capabilities, connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn Backend>, Error>> + Send + 'static,
    {
        let name = name.into();
        Self {
            name: name.clone(),
            capabilities,
            shared: Arc::new(Shared {
                name,
                capabilities,
                connect: Arc::new(move || Box::pin(connect())),
                connected: OnceLock::new(),
                attempts: Mutex::new(Attempts {
                    running_since: None,
                    next_attempt: None,
                    pauses: Pauses::doubling(FIRST_PAUSE, LONGEST_PAUSE),
                    failure: None,
                }),
                ended: Notify::new(),
            }),
        }
    }

    /// Whether the node is connected.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.shared.connected.get().is_some()
    }

    /// The connected backend. When the node is not connected, a connect attempt starts
    /// (unless one runs, or the pause after a failed one is not over), in a task of its
    /// own, and the call waits for it until [`CONNECT_GRACE`] after it began: a node
    /// that takes longer (a paused server accepts the connection and never answers) is
    /// down for the calls until the attempt ends, and they fail at once, so that a
    /// RedLock decides with the other nodes instead of waiting out its node timeout on
    /// each call (issue 48).
    ///
    /// Cancel-safe: the attempt runs on whether or not its caller still waits.
    async fn backend(&self) -> Result<Arc<dyn Backend>, Error> {
        let shared = &self.shared;
        if let Some(backend) = shared.connected.get() {
            return Ok(Arc::clone(backend));
        }
        let ended = shared.ended.notified();
        tokio::pin!(ended);
        ended.as_mut().enable();
        let began = {
            let mut attempts = shared
                .attempts
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(backend) = shared.connected.get() {
                return Ok(Arc::clone(backend));
            }
            match attempts.running_since {
                Some(began) => began,
                None if attempts.next_attempt.is_some_and(|at| Instant::now() < at) => {
                    return Err(self.down(attempts.failure.clone()));
                }
                None => {
                    let began = Instant::now();
                    attempts.running_since = Some(began);
                    tokio::spawn(Arc::clone(shared).attempt());
                    began
                }
            }
        };
        if tokio::time::timeout_at(began + CONNECT_GRACE, ended)
            .await
            .is_err()
        {
            return Err(self.down(None));
        }
        match shared.connected.get() {
            Some(backend) => Ok(Arc::clone(backend)),
            None => {
                let attempts = shared
                    .attempts
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                Err(attempts.failure.clone().unwrap_or_else(|| self.down(None)))
            }
        }
    }

    /// The error of a call on a node that is not connected, with why the latest connect
    /// attempt failed, if it did.
    fn down(&self, failure: Option<Error>) -> Error {
        failure.unwrap_or_else(|| {
            Error::connection(
                "reaching a node that is not connected",
                NodeDown(self.name.clone()),
            )
        })
    }
}

impl Shared {
    /// One connect attempt: on success the node is connected for good (its backend
    /// reconnects by itself); on failure the next waits a pause that doubles.
    ///
    /// An attempt dropped before it ends (its runtime shut down) ends as a failure, so
    /// that a caller on another runtime starts the next one instead of waiting for it.
    async fn attempt(self: Arc<Self>) {
        let mut unfinished = Unfinished(Some(Arc::clone(&self)));
        let outcome = match (self.connect)().await {
            Ok(backend) if !covers(backend.capabilities(), self.capabilities) => {
                Err(Error::invalid_config(
                    format!(
                        "node {} lacks capabilities it was declared with: it has {:?}, \
                         {:?} was declared",
                        self.name,
                        backend.capabilities(),
                        self.capabilities
                    ),
                    None,
                ))
            }
            connected => connected,
        };
        {
            let mut attempts = self.attempts.lock().unwrap_or_else(PoisonError::into_inner);
            attempts.running_since = None;
            match outcome {
                Ok(backend) => {
                    if self.connected.set(backend).is_ok() && attempts.next_attempt.is_some() {
                        tracing::info!(target: lock_core::TRACING_TARGET, node = %self.name, "a node that was down is connected");
                    }
                    attempts.failure = None;
                }
                Err(err) => {
                    let pause = attempts.pauses.next().unwrap_or(LONGEST_PAUSE);
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        node = %self.name,
                        error = %err.chain(),
                        retry_in_ms = pause.as_millis(),
                        "connecting to a node failed"
                    );
                    attempts.next_attempt = Some(Instant::now() + pause);
                    attempts.failure = Some(err);
                }
            }
        }
        unfinished.0 = None;
        self.ended.notify_waiters();
    }
}

/// Ends a connect attempt that was dropped half-way: no attempt runs any more, and its
/// waiters are told. Emptied when the attempt ends.
struct Unfinished(Option<Arc<Shared>>);

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(shared) = self.0.take() else {
            return;
        };
        shared
            .attempts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .running_since = None;
        tracing::debug!(
            target: lock_core::TRACING_TARGET,
            node = %shared.name,
            "a node's connect attempt was dropped with its runtime; the next call tries again"
        );
        shared.ended.notify_waiters();
    }
}

/// Whether `actual` has every capability of `declared`.
fn covers(actual: Capabilities, declared: Capabilities) -> bool {
    Capabilities::common([actual, declared]) == declared
}

/// The node could not be connected, and the pause before the next attempt is not over.
#[derive(Debug)]
struct NodeDown(String);

impl fmt::Display for NodeDown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "node {} could not be connected; trying again shortly",
            self.0
        )
    }
}

impl std::error::Error for NodeDown {}

#[async_trait]
impl Backend for LazyNode {
    /// The declared capabilities, without the synchronizers other than locks, which a
    /// node cannot hand out before it is connected.
    fn capabilities(&self) -> Capabilities {
        self.capabilities
            .count_down_latch(false)
            .semaphore(false)
            .expirable_semaphore(false)
            .introspection(false)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.backend().await?.acquire(lock, request).await
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        // Never connected: it holds no place of ours to give up.
        match self.shared.connected.get() {
            Some(backend) => backend.cancel_wait(lock, acquisition).await,
            None => Ok(()),
        }
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        self.backend().await?.raise_fencing(lock, token).await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.backend().await?.release(lock, request).await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        match self.backend().await {
            Ok(backend) => backend.renew(locks, lease).await,
            Err(err) => locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.backend().await?.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.backend().await?.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.backend().await?.listen(lock).await
    }

    async fn settle(&self) {
        // Never connected: it started nothing.
        if let Some(backend) = self.shared.connected.get() {
            backend.settle().await;
        }
    }
}
