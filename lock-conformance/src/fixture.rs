//! Fixtures: how the suite reaches a backend, and (for Redis) how it injects faults.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::memory::MemoryBackend;
use lock_core::{Backend, Locks};

/// A lock store the scenarios run against.
#[async_trait]
pub trait Fixture: Send + Sync {
    /// A backend with its own connections to the shared store: two calls give two
    /// independent clients of the same locks.
    async fn backend(&self) -> Arc<dyn Backend>;

    /// A backend with the given Redis protocol settings; other backends ignore them.
    async fn backend_with(
        &self,
        options: lock_redis_protocol::ProtocolOptions,
    ) -> Arc<dyn Backend> {
        let _ = options;
        self.backend().await
    }

    /// Channels subscribed for waiters of locks, across the whole store (not a client's
    /// own wake-up channel, which a Redis client keeps for its life).
    async fn subscribed_channels(&self) -> Vec<String>;

    /// Whether each fresh grant's fencing token is exactly one more than the last (one
    /// store). A composite backend's tokens only increase: RedLock takes the largest its
    /// majority gave, and majorities differ. PostgreSQL's are at least the microseconds
    /// since the epoch, so that a counter a failover rolled back still goes up.
    fn consecutive_tokens(&self) -> bool {
        true
    }

    /// Whether the store serves its mutex's waiters in arrival order, as a fair lock's
    /// (PostgreSQL's mutex and fair lock share one queue): a free mutex then goes to
    /// its first waiter before a newcomer. The differential test holds the mutex to the
    /// fair rules where it is.
    fn fair_mutex(&self) -> bool {
        false
    }

    /// How much slower than the reference (a quiet 2-core machine) this store's
    /// scenarios must allow for: every duration of the scenarios is multiplied by it
    /// (see [`crate::timing`]). 1 by default.
    fn time_scale(&self) -> f64 {
        1.0
    }

    /// Fault injection, for Redis fixtures.
    fn redis(&self) -> Option<&dyn RedisControl> {
        None
    }

    /// What the fixture offers beyond its backend's capabilities; known without
    /// starting anything, so that a scenario it cannot serve is skipped at once.
    fn deployment(&self) -> crate::Deployment {
        crate::Deployment::default()
    }

    /// A client with its own connections and the given watchdog lease.
    async fn client_with_lease(&self, watchdog_lease: Duration) -> Locks {
        Locks::builder(self.backend().await)
            .watchdog_lease(watchdog_lease)
            .build()
            .expect("valid client settings")
    }

    /// A client with its own connections and default settings.
    async fn client(&self) -> Locks {
        Locks::new(self.backend().await)
    }
}

/// Server-side access to a Redis fixture, for layout checks and faults.
#[async_trait]
pub trait RedisControl: Send + Sync {
    /// `CLIENT KILL TYPE pubsub` on every node; returns how many connections died.
    async fn kill_pubsub_clients(&self) -> usize;
    /// `SCRIPT FLUSH` and `FUNCTION FLUSH` on every node: the server forgets the scripts'
    /// code in either form.
    async fn script_flush(&self);
    /// Restarts the node that owns `key`: it loses every write since its last `SAVE`.
    async fn restart_node_of(&self, key: &str);
    /// `SAVE` on the node that owns `key`: a restart reloads this snapshot.
    async fn save_node_of(&self, key: &str);
    /// Kills the master of a Sentinel deployment and waits for the replica's promotion.
    /// Only Sentinel fixtures support it (their scenarios are the only callers).
    async fn fail_over(&self) {
        panic!("this fixture cannot fail over");
    }
    /// `SET key value` on the node that owns `key`.
    async fn set_string(&self, key: &str, value: &str);
    /// `HGETALL key`, as field/value pairs sorted by field.
    async fn hash(&self, key: &str) -> Vec<(String, String)>;
    /// `PTTL key`.
    async fn pttl(&self, key: &str) -> i64;
    /// Runs `args` on the node that owns `key` (a peer's raw commands).
    async fn run(&self, key: &str, args: &[&str]) -> redis::Value;
    /// How a Redisson peer publishes here: `spublish` on a cluster (sharded pub/sub, as
    /// Redisson decides on Redis 7), `publish` elsewhere.
    fn publish_command(&self) -> &'static str;
}

/// The in-memory backend: every "client" shares one store.
#[derive(Debug, Clone, Default)]
pub struct MemoryFixture {
    store: MemoryBackend,
}

impl MemoryFixture {
    /// A fresh store. Async like every other fixture's constructor, for the test macros.
    #[allow(clippy::unused_async)]
    pub async fn start() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Fixture for MemoryFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        Arc::new(self.store.clone())
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        self.store.subscribed_channels()
    }
}

/// The backends a fixture made, kept weakly, for [`Fixture::subscribed_channels`]: the
/// channels the live ones listen on, sorted, each once.
#[derive(Debug)]
pub struct Tracked<T> {
    backends: std::sync::Mutex<Vec<std::sync::Weak<T>>>,
}

impl<T> Default for Tracked<T> {
    fn default() -> Self {
        Self {
            backends: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl<T> Tracked<T> {
    /// Keeps (weakly) and returns `backend`.
    pub fn keep(&self, backend: T) -> Arc<T> {
        let backend = Arc::new(backend);
        self.backends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(Arc::downgrade(&backend));
        backend
    }

    /// The channels `of` says each live backend listens on, sorted, each once.
    pub fn channels(&self, of: impl Fn(&T) -> Vec<String>) -> Vec<String> {
        let backends = self
            .backends
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut channels: Vec<String> = backends
            .iter()
            .filter_map(std::sync::Weak::upgrade)
            .flat_map(|backend| of(&backend))
            .collect();
        channels.sort();
        channels.dedup();
        channels
    }
}

/// What a fixture on one server keeps: the server, started on first use, and the
/// backends made on it ([`Tracked`]).
#[derive(Debug)]
pub struct OnDemand<S, B> {
    server: tokio::sync::OnceCell<S>,
    backends: Tracked<B>,
}

impl<S, B> Default for OnDemand<S, B> {
    fn default() -> Self {
        Self {
            server: tokio::sync::OnceCell::new(),
            backends: Tracked::default(),
        }
    }
}

impl<S, B> OnDemand<S, B> {
    /// The server, started by `start` on first use.
    pub async fn server<F: Future<Output = S>>(&self, start: impl FnOnce() -> F) -> &S {
        self.server.get_or_init(start).await
    }

    /// The backends made on the server.
    pub fn backends(&self) -> &Tracked<B> {
        &self.backends
    }
}
