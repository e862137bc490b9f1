//! Redis fixtures: a standalone server or a cluster started for one test, reached
//! through any adapter.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{Backend, Error};
use lock_redis_protocol::ProtocolOptions;
use lock_testkit::{RedisCluster, RedisSentinel, RedisServer};
use tokio::sync::Mutex;

use crate::{Fixture, RedisControl};

/// How a Redis adapter connects: node URLs, whether they form a cluster, and the
/// protocol settings to use.
pub type Connect = Arc<
    dyn Fn(
            Vec<String>,
            bool,
            ProtocolOptions,
        ) -> Pin<Box<dyn Future<Output = Result<Arc<dyn Backend>, Error>> + Send>>
        + Send
        + Sync,
>;

/// How a Redis adapter whose connector is `C` connects to a fixture's servers: a cluster
/// from all of their URLs, anything else (a single server, a `redis+sentinel://` URL)
/// from the first.
#[must_use]
pub fn through<C>() -> Connect
where
    C: lock_core::Connect<Settings = lock_redis_protocol::ConnectorSettings>,
{
    Arc::new(
        |urls: Vec<String>, cluster: bool, options: ProtocolOptions| {
            Box::pin(async move {
                let url = if cluster {
                    cluster_url(&urls)
                } else {
                    urls[0].clone()
                };
                let settings = lock_redis_protocol::ConnectorSettings::default().protocol(options);
                let backend = C::new(url).settings(settings).connect().await?;
                Ok(Arc::new(backend) as Arc<dyn Backend>)
            })
        },
    )
}

/// `redis://h:p` URLs as one `redis+cluster://h:p,h:p` URL.
fn cluster_url(urls: &[String]) -> String {
    let hosts: Vec<&str> = urls
        .iter()
        .map(|url| url.trim_start_matches("redis://").trim_end_matches('/'))
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

enum Topology {
    Standalone(Mutex<RedisServer>),
    Cluster(Mutex<RedisCluster>),
    Sentinel(Mutex<RedisSentinel>),
}

/// Which deployment a fixture starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Standalone,
    Cluster,
    Sentinel,
}

/// A Redis deployment for one test, started on first use, reached through one adapter.
/// Starting late lets a scenario the deployment cannot serve be skipped without it.
pub struct RedisFixture {
    kind: Kind,
    started: tokio::sync::OnceCell<Topology>,
    connect: Connect,
}

impl fmt::Debug for RedisFixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisFixture")
            .field("kind", &self.kind)
            .field("started", &self.started.initialized())
            .finish_non_exhaustive()
    }
}

impl RedisFixture {
    fn new(kind: Kind, connect: Connect) -> Self {
        Self {
            kind,
            started: tokio::sync::OnceCell::new(),
            connect,
        }
    }

    /// A standalone server, reached with `connect`. Async like every fixture's
    /// constructor, for the test macros; the server starts on first use.
    #[allow(
        clippy::unused_async,
        reason = "the test macros await every fixture constructor"
    )]
    pub async fn standalone(connect: Connect) -> Self {
        Self::new(Kind::Standalone, connect)
    }

    /// A three-master cluster, reached with `connect`; started on first use.
    #[allow(
        clippy::unused_async,
        reason = "the test macros await every fixture constructor"
    )]
    pub async fn cluster(connect: Connect) -> Self {
        Self::new(Kind::Cluster, connect)
    }

    /// A master, a replica and three Sentinels, reached with `connect` through a
    /// `redis+sentinel://` URL; started on first use.
    #[allow(
        clippy::unused_async,
        reason = "the test macros await every fixture constructor"
    )]
    pub async fn sentinel(connect: Connect) -> Self {
        Self::new(Kind::Sentinel, connect)
    }

    /// The deployment, started by the first caller.
    async fn topology(&self) -> &Topology {
        self.started
            .get_or_init(|| async {
                match self.kind {
                    Kind::Standalone => {
                        Topology::Standalone(Mutex::new(RedisServer::start().await))
                    }
                    Kind::Cluster => Topology::Cluster(Mutex::new(RedisCluster::start(3).await)),
                    Kind::Sentinel => Topology::Sentinel(Mutex::new(RedisSentinel::start().await)),
                }
            })
            .await
    }

    async fn urls(&self) -> (Vec<String>, bool) {
        match self.topology().await {
            Topology::Standalone(server) => (vec![server.lock().await.url()], false),
            Topology::Cluster(cluster) => (cluster.lock().await.urls(), true),
            Topology::Sentinel(deployment) => (vec![deployment.lock().await.url()], false),
        }
    }

    /// Runs `args` on the node owning `key`.
    async fn on_node_of<T: redis::FromRedisValue>(&self, key: &str, args: &[&str]) -> T {
        match self.topology().await {
            Topology::Standalone(server) => server.lock().await.command(args).await,
            Topology::Sentinel(deployment) => deployment.lock().await.master().command(args).await,
            Topology::Cluster(cluster) => {
                let cluster = cluster.lock().await;
                cluster.node_for_key(key).await.command(args).await
            }
        }
    }
}

#[async_trait]
impl Fixture for RedisFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        self.backend_with(ProtocolOptions::default()).await
    }

    async fn backend_with(&self, options: ProtocolOptions) -> Arc<dyn Backend> {
        let (urls, cluster) = self.urls().await;
        (self.connect)(urls, cluster, options)
            .await
            .expect("connect to the test Redis")
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        let mut channels: Vec<String> = match self.topology().await {
            Topology::Standalone(server) => {
                server.lock().await.command(&["PUBSUB", "CHANNELS"]).await
            }
            Topology::Cluster(cluster) => {
                // A Redis 7 cluster carries notifications sharded (as Redisson decides).
                let cluster = cluster.lock().await;
                let mut all = Vec::new();
                for listing in [["PUBSUB", "CHANNELS"], ["PUBSUB", "SHARDCHANNELS"]] {
                    let per_node = cluster.query_all::<Vec<String>>(&listing).await;
                    all.extend(per_node.into_iter().flatten());
                }
                all
            }
            Topology::Sentinel(deployment) => {
                let deployment = deployment.lock().await;
                let all: Vec<String> = deployment.master().command(&["PUBSUB", "CHANNELS"]).await;
                // The Sentinels talk to each other through the master's pub/sub.
                all.into_iter()
                    .filter(|channel| !channel.starts_with("__sentinel__:"))
                    .collect()
            }
        };
        // A client keeps its own channel once a mutex waiter needed it.
        channels.retain(|channel| !lock_redis_protocol::layout::is_own_channel(channel));
        channels.sort();
        channels.dedup();
        channels
    }

    fn redis(&self) -> Option<&dyn RedisControl> {
        Some(self)
    }

    fn deployment(&self) -> crate::Deployment {
        crate::Deployment::redis(self.kind == Kind::Sentinel)
    }
}

#[async_trait]
impl RedisControl for RedisFixture {
    async fn kill_pubsub_clients(&self) -> usize {
        match self.topology().await {
            Topology::Standalone(server) => {
                lock_testkit::kill_pubsub_clients(&*server.lock().await).await
            }
            Topology::Cluster(cluster) => {
                let cluster = cluster.lock().await;
                let mut killed = 0;
                for node in cluster.nodes() {
                    killed += lock_testkit::kill_pubsub_clients(node).await;
                }
                killed
            }
            Topology::Sentinel(deployment) => {
                lock_testkit::kill_pubsub_clients(deployment.lock().await.master()).await
            }
        }
    }

    async fn script_flush(&self) {
        // Both forms of the scripts' code go: the cached scripts and the function library.
        for flush in [["SCRIPT", "FLUSH"], ["FUNCTION", "FLUSH"]] {
            match self.topology().await {
                Topology::Standalone(server) => {
                    let () = server.lock().await.command(&flush).await;
                }
                Topology::Cluster(cluster) => {
                    let _: Vec<()> = cluster.lock().await.query_all(&flush).await;
                }
                Topology::Sentinel(deployment) => {
                    let () = deployment.lock().await.master().command(&flush).await;
                }
            }
        }
    }

    async fn restart_node_of(&self, key: &str) {
        match self.topology().await {
            Topology::Standalone(server) => server.lock().await.restart().await,
            Topology::Cluster(cluster) => {
                let mut cluster = cluster.lock().await;
                cluster.restart_node_for_key(key).await;
            }
            Topology::Sentinel(deployment) => deployment.lock().await.restart_master().await,
        }
    }

    async fn run(&self, key: &str, args: &[&str]) -> redis::Value {
        match self.topology().await {
            Topology::Standalone(server) => server.lock().await.command(args).await,
            Topology::Cluster(cluster) => {
                let cluster = cluster.lock().await;
                cluster.node_for_key(key).await.command(args).await
            }
            Topology::Sentinel(deployment) => deployment.lock().await.master().command(args).await,
        }
    }

    async fn save_node_of(&self, key: &str) {
        match self.topology().await {
            Topology::Standalone(server) => save(&*server.lock().await).await,
            Topology::Cluster(cluster) => save(cluster.lock().await.node_for_key(key).await).await,
            Topology::Sentinel(deployment) => save(deployment.lock().await.master()).await,
        }
    }

    async fn fail_over(&self) {
        match self.topology().await {
            Topology::Sentinel(deployment) => deployment.lock().await.kill_master().await,
            _ => panic!("only a Sentinel deployment fails over"),
        }
    }

    async fn set_string(&self, key: &str, value: &str) {
        let () = self.on_node_of(key, &["SET", key, value]).await;
    }

    async fn hash(&self, key: &str) -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = self.on_node_of(key, &["HGETALL", key]).await;
        pairs.sort();
        pairs
    }

    async fn pttl(&self, key: &str) -> i64 {
        self.on_node_of(key, &["PTTL", key]).await
    }

    fn publish_command(&self) -> &'static str {
        if self.kind == Kind::Cluster {
            "spublish"
        } else {
            "publish"
        }
    }
}

async fn save(server: &RedisServer) {
    let () = server.command(&["SAVE"]).await;
}
