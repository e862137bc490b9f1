//! [`Connector`]: how a lock client reaches Redis through fred, from a URL or from a
//! client or pool the application already has.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fred::clients::SubscriberClient;
use fred::prelude::{Builder, Client, ClientLike, Pool, PubsubInterface, Value};
use fred::types::InfoKind;
use lock_core::{Error, Locks};
use lock_redis_protocol::{ConnectorSettings, PublishMode, RedisBackend, Topology, connect};

use crate::config::{self, Timeouts, Tls};
use crate::notifications::{self, Owned};
use crate::transport::{Commands, FredTransport, quit_failed};

/// Room for bursts of release messages before the reader counts as lagging.
const MESSAGE_BUFFER: usize = 1024;

/// Where script calls go, before connecting.
#[derive(Clone)]
enum Target {
    Url(String),
    Client(Client),
    Pool(Pool),
}

impl Target {
    /// The URL, named in connect errors.
    fn url(&self) -> Option<String> {
        if let Self::Url(url) = self {
            return Some(url.clone());
        }
        None
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // URLs may carry passwords: show only what kind of target this is.
        f.write_str(match self {
            Self::Url(_) => "url",
            Self::Client(_) => "fred client",
            Self::Pool(_) => "fred pool",
        })
    }
}

/// Builds a Redis lock backend over fred.
///
/// ```no_run
/// # async fn run() -> Result<(), lock_core::Error> {
/// use std::time::Duration;
///
/// use lock_fred::ConnectorSettings;
///
/// let locks = lock_fred::Connector::new("redis://127.0.0.1:6379")
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
    tls: Tls,
    pool_size: usize,
    notification_buffer: usize,
    settings: ConnectorSettings,
}

impl Connector {
    fn with_target(target: Target) -> Self {
        Self {
            target,
            tls: Tls::default(),
            pool_size: 1,
            notification_buffer: MESSAGE_BUFFER,
            settings: ConnectorSettings::default(),
        }
    }

    /// Connects to the deployment a URL names:
    ///
    /// - `redis://[user:password@]host:port[/db]` or `rediss://...` (TLS, feature `tls`):
    ///   a single server;
    /// - `redis+cluster://[user:password@]host:port,host:port,...` (or `rediss+cluster://`):
    ///   a Redis Cluster, discovered from any of the listed nodes;
    /// - `redis+sentinel://[user:password@]host:port,host:port,.../NAME`: the master named
    ///   `NAME` as the listed Sentinels know it, followed through failovers (the
    ///   credentials are the master's).
    ///
    /// The URL is checked when connecting.
    pub fn new(url: impl Into<String>) -> Self {
        Self::with_target(Target::Url(url.into()))
    }

    /// Connects and returns a client with the default client [`Config`](lock_core::Config);
    /// [`Connector::connect`] and [`Locks::builder`] configure one.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future part-way may leave a fred client it had started reconnecting in
    /// the background (fred gives each client a task of its own); bound the wait with
    /// [`ConnectorSettings::connect_timeout`](lock_redis_protocol::ConnectorSettings::connect_timeout)
    /// instead, which closes what was opened.
    pub async fn locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect().await?)))
    }

    /// The timeouts and lock-protocol options, the same for every Redis adapter
    /// (defaults: Redisson's).
    pub fn settings(mut self, settings: ConnectorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Runs scripts over a fred client the application already has (connected or not;
    /// it is connected if need be). Notifications use a dedicated subscriber client with
    /// the same configuration. The client is left open when the backend is dropped.
    pub fn from_client(client: Client) -> Self {
        Self::with_target(Target::Client(client))
    }

    /// Runs scripts over a fred pool the application already has, like
    /// [`Connector::from_client`].
    pub fn from_pool(pool: Pool) -> Self {
        Self::with_target(Target::Pool(pool))
    }

    /// Trusts this PEM root certificate for `rediss://` connections, instead of the
    /// system's roots (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.set_root_certificate(pem.into());
        self
    }

    /// How many clients (each one multiplexed connection per server) carry script calls
    /// when connecting from a URL. Default: 1, which is plenty for most services.
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How many release messages may wait for the reader before it counts as lagging
    /// (then every waiter is woken to re-check). Default: 1024; small values are for
    /// tests.
    #[doc(hidden)]
    pub fn notification_buffer(mut self, messages: usize) -> Self {
        self.notification_buffer = messages.max(1);
        self
    }

    /// Connects the command clients and the subscriber client and returns the backend,
    /// for [`Locks::builder`] or for composition.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future part-way may leave a fred client it had started reconnecting in
    /// the background (fred gives each client a task of its own); bound the wait with
    /// [`ConnectorSettings::connect_timeout`](lock_redis_protocol::ConnectorSettings::connect_timeout)
    /// instead, which closes what was opened.
    pub async fn connect(self) -> Result<RedisBackend, Error> {
        let url = self.target.url();
        lock_redis_protocol::url::naming_hosts_on_failure(url, self.connect_target()).await
    }

    async fn connect_target(self) -> Result<RedisBackend, Error> {
        self.validate()?;
        let timeouts = Timeouts {
            connect: self.settings.connect_timeout,
            response: self.settings.response_timeout,
        };
        let (commands, subscriber_builder, owned) = match self.target {
            Target::Url(url) => {
                let builder = config::builder(config::from_url(&url, &self.tls)?, timeouts);
                let commands = if self.pool_size > 1 {
                    Commands::Pool(builder.build_pool(self.pool_size).map_err(invalid)?)
                } else {
                    Commands::Client(builder.build().map_err(invalid)?)
                };
                start(&commands, timeouts).await?;
                (commands, builder, true)
            }
            Target::Client(client) => {
                let builder = like(&client);
                let commands = Commands::Client(client);
                start(&commands, timeouts).await?;
                (commands, builder, false)
            }
            Target::Pool(pool) => {
                let builder = like(pool.next());
                let commands = Commands::Pool(pool);
                start(&commands, timeouts).await?;
                (commands, builder, false)
            }
        };
        let publish =
            decide_publish_mode(&commands, self.settings.protocol.publish, timeouts).await;
        let publish = match publish {
            Ok(publish) => publish,
            Err(err) => {
                if owned {
                    close_in_background(commands);
                }
                return Err(err);
            }
        };
        let subscriber =
            match subscribe_client(subscriber_builder, timeouts, self.notification_buffer).await {
                Ok(subscriber) => subscriber,
                Err(err) => {
                    if owned {
                        close_in_background(commands);
                    }
                    return Err(err);
                }
            };
        let transport = FredTransport::new(
            commands.clone(),
            subscriber.clone(),
            publish == PublishMode::Sharded,
            owned,
            self.settings.response_timeout,
        );
        let protocol = self.settings.protocol.publish(publish);
        let backend = RedisBackend::new(Arc::new(transport), protocol);
        let owned = Owned {
            subscriber,
            commands: owned.then_some(commands),
        };
        let (sink, ping_interval) = (backend.notification_sink(), self.settings.ping_interval);
        let first = notifications::pump(owned.clone(), sink.clone(), ping_interval);
        // The transport connects the clients again on the caller's runtime; the reader
        // only has to read on.
        backend.run_notification_reader(first, move || {
            notifications::pump(owned.clone(), sink.clone(), ping_interval)
        });
        backend.prepare().await?;
        Ok(backend)
    }

    fn validate(&self) -> Result<(), Error> {
        if self.pool_size == 0 {
            return Err(Error::invalid_config("pool_size must be positive", None));
        }
        self.settings.validate()
    }
}

fn invalid(err: fred::error::Error) -> Error {
    Error::invalid_config("invalid fred settings", Some(err.into()))
}

/// A builder with an application client's configuration, for the subscriber client.
fn like(client: &Client) -> Builder {
    let mut builder = Builder::from_config(client.client_config());
    builder.set_connection_config(client.connection_config().clone());
    builder.set_performance_config(client.perf_config());
    builder.set_policy(
        client
            .client_reconnect_policy()
            .unwrap_or_else(config::reconnect_policy),
    );
    builder
}

/// Connects the command clients (unless the application already did) and checks that
/// the server answers and is the kind of deployment the configuration says.
async fn start(commands: &Commands, timeouts: Timeouts) -> Result<(), Error> {
    let client = match commands {
        Commands::Client(client) => client.clone(),
        Commands::Pool(pool) => pool.next().clone(),
    };
    // Connections this call opened are closed again on failure; an application's
    // connected client is left as it was.
    let opened_here = !client.is_connected();
    if opened_here {
        let connecting = async {
            match commands {
                Commands::Client(client) => client.init().await.map(drop),
                Commands::Pool(pool) => pool.init().await.map(drop),
            }
        };
        match tokio::time::timeout(timeouts.connect, connecting).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => return Err(crate::error::connection("connecting", err)),
            Err(elapsed) => {
                close_in_background(commands.clone());
                return Err(Error::connection("connecting", elapsed));
            }
        }
    }
    if let Err(err) = check_server(&client, timeouts).await {
        if opened_here {
            close_in_background(commands.clone());
        }
        return Err(err);
    }
    Ok(())
}

/// Stops the reconnect loop a failed attempt started, without making the caller wait
/// for a server that may never answer.
/// Sharded pub/sub on a cluster whose servers answer `PUBSUB SHARDNUMSUB` (Redis 7), as
/// Redisson decides, unless the settings say otherwise.
async fn decide_publish_mode(
    commands: &Commands,
    mode: PublishMode,
    timeouts: Timeouts,
) -> Result<PublishMode, Error> {
    let topology = commands.topology();
    let mut sharded = false;
    if topology == Topology::Cluster {
        let probe = commands
            .next()
            .pubsub_shardnumsub::<Value, _>(Vec::<String>::new());
        sharded = matches!(
            tokio::time::timeout(timeouts.response, probe).await,
            Ok(Ok(_))
        );
    }
    mode.decide(topology, sharded)
}

fn close_in_background(commands: Commands) {
    quit_in_background("the command connections", async move {
        commands.quit().await;
        Ok::<(), std::convert::Infallible>(())
    });
}

/// Closes a connection that a failed connect opened, without making the caller wait.
///
/// A task of its own, not a client's job: there is no client yet whose shutdown could
/// wait for it, `connect` is awaited on a runtime (so one is there to run it), the quit
/// is bounded, and nothing of anyone's locks depends on it: a runtime that stops first
/// drops the connection, which the server then closes.
fn quit_in_background<E: std::fmt::Display + Send + 'static>(
    what: &'static str,
    quit: impl Future<Output = Result<(), E>> + Send + 'static,
) {
    tokio::spawn(async move {
        match tokio::time::timeout(Duration::from_secs(5), quit).await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => quit_failed(what, &err),
            Err(elapsed) => quit_failed(what, &elapsed),
        }
    });
}

/// A server that accepts connections but does not answer is a connection error; a
/// cluster node behind a single-server URL (every other key would be `MOVED`) is a
/// configuration error.
async fn check_server(client: &Client, timeouts: Timeouts) -> Result<(), Error> {
    let within = timeouts.connect.min(timeouts.response);
    match tokio::time::timeout(within, client.ping::<String>(None)).await {
        Ok(Ok(_)) => {}
        Ok(Err(err)) => return Err(crate::error::connection("connecting", err)),
        Err(elapsed) => return Err(Error::connection("connecting", elapsed)),
    }
    if client.is_clustered() {
        return Ok(());
    }
    let info = client.info::<String>(Some(InfoKind::Cluster));
    match tokio::time::timeout(within, info).await {
        Ok(Ok(info)) => connect::refuse_cluster_node(&info),
        // A server that does not answer INFO (an ACL without it) is taken at its word.
        _ => Ok(()),
    }
}

/// The dedicated subscriber client for release notifications.
async fn subscribe_client(
    mut builder: Builder,
    timeouts: Timeouts,
    buffer: usize,
) -> Result<SubscriberClient, Error> {
    builder.with_performance_config(|performance| {
        performance.broadcast_channel_capacity = buffer;
    });
    // The subscriber is this adapter's own connection, even when built from an
    // application's client: no Nagle delay between a SUBSCRIBE and its confirming PING.
    builder.with_connection_config(|connection| connection.tcp.nodelay = Some(true));
    let subscriber = builder.build_subscriber_client().map_err(invalid)?;
    match tokio::time::timeout(timeouts.connect, subscriber.init()).await {
        Ok(Ok(_)) => Ok(subscriber),
        Ok(Err(err)) => Err(crate::error::connection("connecting", err)),
        Err(elapsed) => {
            quit_in_background("the subscriber connection", async move {
                subscriber.quit().await
            });
            Err(Error::connection("connecting", elapsed))
        }
    }
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
