//! [`LazyNode`]: a node that connects on first use, so that a RedLock or a MultiLock can
//! start while a minority of its nodes is down, and takes in a node that comes up later
//! without a restart.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::BoxFuture;
use lock_core::backend::{
    Acquire, AcquireRequest, Capabilities, LockState, Release, ReleaseRequest, Renewal,
};
use lock_core::notify::Listener;
use lock_core::{Backend, Error, LockRef, Pauses};
use tokio::time::Instant;

/// The first pause after a failed connect; they double up to [`LONGEST_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(250);
/// The longest pause between connect attempts.
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

type Connect = Arc<dyn Fn() -> BoxFuture<'static, Result<Arc<dyn Backend>, Error>> + Send + Sync>;

/// A backend that connects on first use and, while it cannot, answers every call with a
/// connection error at once (trying again after a pause that doubles from 250 ms to 5 s).
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
    connect: Connect,
    connected: OnceLock<Arc<dyn Backend>>,
    /// Serializes connect attempts; holds when the next may start and the pause after it.
    attempts: tokio::sync::Mutex<Backoff>,
}

#[derive(Debug)]
struct Backoff {
    next_attempt: Option<Instant>,
    pauses: Pauses,
}

impl fmt::Debug for LazyNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LazyNode")
            .field("name", &self.name)
            .field("connected", &self.connected.get())
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
        Self {
            name: name.into(),
            capabilities,
            connect: Arc::new(move || Box::pin(connect())),
            connected: OnceLock::new(),
            attempts: tokio::sync::Mutex::new(Backoff {
                next_attempt: None,
                pauses: Pauses::doubling(FIRST_PAUSE, LONGEST_PAUSE),
            }),
        }
    }

    /// Whether the node is connected.
    #[must_use]
    pub fn is_connected(&self) -> bool {
        self.connected.get().is_some()
    }

    /// The connected backend, connecting first if the pause since the last failure is over.
    ///
    /// Cancel-safe: a connect cancelled half-way is started afresh by the next call.
    async fn backend(&self) -> Result<Arc<dyn Backend>, Error> {
        if let Some(backend) = self.connected.get() {
            return Ok(Arc::clone(backend));
        }
        let mut backoff = self.attempts.lock().await;
        if let Some(backend) = self.connected.get() {
            return Ok(Arc::clone(backend));
        }
        if backoff.next_attempt.is_some_and(|at| Instant::now() < at) {
            return Err(Error::connection(
                "reaching a node that is down",
                NodeDown(self.name.clone()),
            ));
        }
        match (self.connect)().await {
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
            Ok(backend) => {
                let backend = Arc::clone(self.connected.get_or_init(|| backend));
                if backoff.next_attempt.is_some() {
                    tracing::info!(target: lock_core::TRACING_TARGET, node = %self.name, "a node that was down is connected");
                }
                Ok(backend)
            }
            Err(err) => {
                let pause = backoff.pauses.next().unwrap_or(LONGEST_PAUSE);
                tracing::warn!(
                    target: lock_core::TRACING_TARGET,
                    node = %self.name,
                    error = %err.chain(),
                    retry_in_ms = pause.as_millis(),
                    "connecting to a node failed"
                );
                backoff.next_attempt = Some(Instant::now() + pause);
                Err(err)
            }
        }
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
        match self.connected.get() {
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
}
