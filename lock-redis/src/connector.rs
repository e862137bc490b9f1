//! [`Connector`]: how a lock client reaches Redis, from a URL or from connections the
//! application already has.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Locks};
use lock_redis_protocol::{ConnectorSettings, PublishMode, RedisBackend, connect};
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use crate::cluster::{ClusterCommands, MakeBuilder};
use crate::notifications::{self, Link};
use crate::reconnect::Reconnecting;
use crate::sentinel::Failover;
use crate::sharded::{self, ShardedLink};
use crate::transport::{Commands, Notifications, RedisPool, RedisTransport};
use crate::url::{self, Deployment};

/// Where script calls go, before connecting.
#[derive(Clone)]
enum Target {
    Url(String),
    Cluster(Vec<String>),
    Manager(redis::Client, ConnectionManager),
    Pool(redis::Client, RedisPool),
    ClusterConnection(Vec<String>, ClusterConnection),
}

impl Target {
    /// The URL, named in connect errors.
    fn url(&self) -> Option<String> {
        match self {
            Self::Url(url) => Some(url.clone()),
            _ => None,
        }
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry passwords: show only what kind of target this is.
        let kind = match self {
            Self::Url(_) => "url",
            Self::Cluster(_) => "cluster",
            Self::Manager(..) => "connection manager",
            Self::Pool(..) => "bb8 pool",
            Self::ClusterConnection(..) => "cluster connection",
        };
        f.write_str(kind)
    }
}

/// Builds a Redis lock backend.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_core::Error> {
/// use std::time::Duration;
///
/// use lock_redis::ConnectorSettings;
///
/// let locks = lock_redis::Connector::new("redis://127.0.0.1:6379")
///     .settings(ConnectorSettings::default().connect_timeout(Duration::from_secs(2)))
///     .locks()
///     .await?;
/// let guard = locks.mutex("orders:42").lock().await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use]
pub struct Connector {
    target: Target,
    tls: url::Tls,
    settings: ConnectorSettings,
}

impl Connector {
    fn with_target(target: Target) -> Self {
        Self {
            target,
            tls: url::Tls::default(),
            settings: ConnectorSettings::default(),
        }
    }

    /// Connects to the deployment a URL names:
    ///
    /// - `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS): a single server;
    /// - `redis+cluster://[user:password@]host:port,host:port,...` (or `rediss+cluster://`):
    ///   a Redis Cluster, discovered from any of the listed nodes;
    /// - `redis+sentinel://[user:password@]host:port,host:port,.../NAME`: the master named
    ///   `NAME` as the listed Sentinels know it, found again after a failover (the
    ///   credentials are the master's).
    ///
    /// The URL is checked when connecting.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Url(url.into()))
    }

    /// Connects to a Redis Cluster through any of `nodes` (each a `redis://` URL).
    pub fn cluster<I, S>(nodes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_target(Target::Cluster(nodes.into_iter().map(Into::into).collect()))
    }

    /// Runs scripts over an existing connection manager; `client` (the one it was made
    /// from) opens the dedicated notification connection.
    pub fn from_manager(client: redis::Client, manager: ConnectionManager) -> Self {
        Self::with_target(Target::Manager(client, manager))
    }

    /// Runs scripts over connections from an existing `bb8` pool; `client` (for the same
    /// server) opens the dedicated notification connection.
    pub fn from_pool(client: redis::Client, pool: RedisPool) -> Self {
        Self::with_target(Target::Pool(client, pool))
    }

    /// Runs scripts over an existing cluster connection; notifications use a dedicated
    /// connection to any of `nodes`.
    ///
    /// Build the connection's client with `.retries(0)`: redis-rs sends a request again
    /// after a connection error by default, and a lock script whose reply was lost has
    /// already run, so running it again would release (or re-enter) twice.
    pub fn from_cluster_connection<I, S>(nodes: I, connection: ClusterConnection) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self::with_target(Target::ClusterConnection(
            nodes.into_iter().map(Into::into).collect(),
            connection,
        ))
    }

    /// Trusts this PEM root certificate for `rediss://` connections, instead of the
    /// system's roots (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.set_root_certificate(pem.into());
        self
    }

    /// The timeouts and lock-protocol options, shared by every Redis adapter; the
    /// defaults are Redisson's.
    pub fn settings(mut self, settings: ConnectorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Connects and returns a client with the default client [`Config`](lock_core::Config).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the connections opened so far are closed when the future is dropped;
    /// nothing runs in the background until it completes.
    pub async fn locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect().await?)))
    }

    /// Opens the script connection and the notification connection and returns the
    /// backend, for [`Locks::builder`] or to combine several backends.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the connections opened so far are closed when the future is dropped;
    /// nothing runs in the background until it completes.
    pub async fn connect(self) -> Result<RedisBackend, Error> {
        let url = self.target.url();
        lock_redis_protocol::url::naming_hosts_on_failure(url, self.connect_target()).await
    }

    async fn connect_target(self) -> Result<RedisBackend, Error> {
        self.settings.validate()?;
        let Self {
            target,
            tls,
            settings,
        } = self;
        let connected = connect_commands(target, &tls, &settings).await?;
        let ConnectorSettings {
            connect_timeout,
            response_timeout,
            ping_interval,
            protocol,
            ..
        } = settings;
        let Connected {
            commands,
            nodes,
            failover,
            cluster,
        } = connected;
        let topology = commands.topology();
        let sharded = match &commands {
            Commands::Cluster(commands) => shards_pubsub(commands, response_timeout).await,
            _ => false,
        };
        let protocol = protocol.publish(protocol.publish.decide(topology, sharded)?);
        if let (PublishMode::Sharded, Some(make)) = (protocol.publish, cluster) {
            let (link, pushes) = ShardedLink::open(make, connect_timeout, response_timeout).await?;
            let notifications = Notifications::Sharded(Arc::clone(&link));
            let transport = RedisTransport::new(commands, notifications, response_timeout);
            let backend = RedisBackend::new(Arc::new(transport), protocol);
            let sink = backend.notification_sink();
            let first = sharded::pump(Arc::clone(&link), Some(pushes), sink.clone());
            backend.run_notification_reader(first, move || {
                link.forget_connection(&sink);
                sharded::pump(Arc::clone(&link), None, sink.clone())
            });
            backend.prepare().await?;
            return Ok(backend);
        }
        let (link, stream) = Link::open(nodes, failover, connect_timeout, response_timeout).await?;
        let notifications = Notifications::Classic(Arc::clone(&link));
        let transport = RedisTransport::new(commands, notifications, response_timeout);
        let backend = RedisBackend::new(Arc::new(transport), protocol);
        let sink = backend.notification_sink();
        let first =
            notifications::pump(Arc::clone(&link), Some(stream), sink.clone(), ping_interval);
        backend.run_notification_reader(first, move || {
            link.forget_connection(&sink);
            notifications::pump(Arc::clone(&link), None, sink.clone(), ping_interval)
        });
        backend.prepare().await?;
        Ok(backend)
    }
}

/// The script connection, and what the subscription connection needs to reach the same
/// deployment.
struct Connected {
    commands: Commands,
    /// The nodes a classic subscription connection may use.
    nodes: Vec<redis::Client>,
    /// Behind Sentinel: where the master is asked for.
    failover: Option<Arc<Failover>>,
    /// On a cluster: how to connect to it again (for sharded subscriptions).
    cluster: Option<MakeBuilder>,
}

impl Connected {
    fn new(commands: Commands, nodes: Vec<redis::Client>) -> Self {
        Self {
            commands,
            nodes,
            failover: None,
            cluster: None,
        }
    }
}

/// Opens the script connection to `target`.
async fn connect_commands(
    target: Target,
    tls: &url::Tls,
    settings: &ConnectorSettings,
) -> Result<Connected, Error> {
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    Ok(match target {
        Target::Url(url) => match url::parse(&url, tls)? {
            Deployment::Single(client) => {
                let connection =
                    Reconnecting::connect(client.clone(), connect_timeout, response_timeout)
                        .await?;
                refuse_cluster_node(&connection).await?;
                Connected::new(Commands::Connection(connection), vec![client])
            }
            Deployment::Cluster(urls) => {
                cluster(&urls, tls, connect_timeout, response_timeout).await?
            }
            Deployment::Sentinel {
                sentinels,
                master,
                node,
            } => {
                let failover = Arc::new(
                    Failover::connect(&sentinels, &master, node, connect_timeout, response_timeout)
                        .await?,
                );
                Connected {
                    failover: Some(Arc::clone(&failover)),
                    ..Connected::new(Commands::Sentinel(failover), Vec::new())
                }
            }
        },
        Target::Cluster(urls) => cluster(&urls, tls, connect_timeout, response_timeout).await?,
        Target::Manager(client, manager) => {
            Connected::new(Commands::Manager(manager), vec![client])
        }
        Target::Pool(client, pool) => Connected::new(Commands::Pool(pool), vec![client]),
        Target::ClusterConnection(urls, connection) => {
            let commands = Commands::Cluster(ClusterCommands::of_application(connection));
            Connected {
                cluster: Some(make_cluster_builder(
                    &urls,
                    tls,
                    connect_timeout,
                    response_timeout,
                )),
                ..Connected::new(commands, url::clients(&urls, tls)?)
            }
        }
    })
}

/// A single-server URL that points at a cluster node would fail on every other key
/// with `MOVED`: say so at once. A server that wants a password the URL lacks answers
/// `NOAUTH` here: also said at once, not at the first lock.
async fn refuse_cluster_node(connection: &Reconnecting) -> Result<(), Error> {
    let mut command = redis::cmd("INFO");
    command.arg("cluster");
    match connection.send(&command).await {
        Ok(redis::Value::BulkString(info)) => {
            connect::refuse_cluster_node(&String::from_utf8_lossy(&info))
        }
        Ok(redis::Value::VerbatimString { text, .. }) => connect::refuse_cluster_node(&text),
        // NOPERM here is an ACL without INFO, not refused credentials.
        Err(err) if matches!(err.code(), Some("NOAUTH" | "WRONGPASS")) => {
            Err(crate::error::connection("connecting", err))
        }
        // A server that does not answer INFO (an ACL without it) is taken at its word.
        _ => Ok(()),
    }
}

/// Whether the cluster's servers support sharded pub/sub, asked the way Redisson asks.
async fn shards_pubsub(commands: &ClusterCommands, timeout: Duration) -> bool {
    let mut command = redis::cmd("PUBSUB");
    command.arg("SHARDNUMSUB");
    let Ok(mut connection) = commands.connection().await else {
        return false;
    };
    let answer = command.query_async::<redis::Value>(&mut connection);
    matches!(tokio::time::timeout(timeout, answer).await, Ok(Ok(_)))
}

/// A cluster client's settings: the timeouts, the trusted roots, and no retries.
fn cluster_builder(
    urls: &[String],
    tls: &url::Tls,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> redis::cluster::ClusterClientBuilder {
    let builder = redis::cluster::ClusterClient::builder(urls.iter().map(String::as_str))
        .connection_timeout(connect_timeout)
        .response_timeout(response_timeout)
        // Never send a request again: after a reset the script may have run, and running
        // a release (or a reentrant acquire) twice would count twice.
        .retries(0);
    #[cfg(feature = "tls")]
    let builder = match url::certificates(tls) {
        Some(certificates) => builder.certs(certificates),
        None => builder,
    };
    #[cfg(not(feature = "tls"))]
    let _ = tls;
    builder
}

/// How to build a client of the cluster at `urls`, as often as needed.
fn make_cluster_builder(
    urls: &[String],
    tls: &url::Tls,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> MakeBuilder {
    let (urls, tls) = (urls.to_vec(), tls.clone());
    Arc::new(move || cluster_builder(&urls, &tls, connect_timeout, response_timeout))
}

/// The script connection to the cluster at `urls`, and a client of each node (for the
/// classic subscription connection).
async fn cluster(
    urls: &[String],
    tls: &url::Tls,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<Connected, Error> {
    let nodes = url::clients(urls, tls)?;
    let make = make_cluster_builder(urls, tls, connect_timeout, response_timeout);
    let commands = ClusterCommands::connect(Arc::clone(&make), connect_timeout).await?;
    Ok(Connected {
        cluster: Some(make),
        ..Connected::new(Commands::Cluster(commands), nodes)
    })
}

#[async_trait::async_trait]
impl lock_core::Connect for Connector {
    type Settings = ConnectorSettings;
    type Backend = RedisBackend;

    fn new(url: impl Into<String>) -> Self {
        Self::new(url)
    }

    fn settings(self, settings: ConnectorSettings) -> Self {
        self.settings(settings)
    }

    async fn connect(self) -> Result<RedisBackend, Error> {
        self.connect().await
    }
}
