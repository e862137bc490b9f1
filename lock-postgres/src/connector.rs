//! [`Connector`]: connects a [`PostgresBackend`], with its [`ConnectorSettings`].

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lock_core::{Error, Locks};
use tokio_postgres::Config;

use crate::advisory::{AdvisoryBackend, AdvisoryServer};
use crate::backend::PostgresBackend;
use crate::combine::Combiner;
use crate::direct::DirectConnect;
use crate::error::pool_failed;
use crate::notify::Notifications;
use crate::schema::{self, SchemaName};
use crate::statements::Statements;
use crate::timeouts::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, silent};
use crate::tls::{MakeTls, Trust, another};

/// The `application_name` of the query connections, unless the URL sets one: what
/// `pg_stat_activity` shows for them (the notification connection's is
/// [`crate::notify::APPLICATION_NAME`]).
pub const QUERIES_APPLICATION_NAME: &str = "distlock-queries";

/// How many query connections a backend keeps at most by default.
const DEFAULT_POOL_SIZE: usize = 16;

/// The pool, the response timeout and the schema of a PostgreSQL connector. Build from
/// [`Default`] with the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use]
pub struct ConnectorSettings {
    /// The most query connections kept. Default: 16.
    pub pool_size: usize,
    /// How long a statement may take. Default: 3 s.
    pub response_timeout: Duration,
    /// How long connecting may take, handshake and migration included. Default: 10 s.
    pub connect_timeout: Duration,
    /// The schema of the lock tables. Default: `distlock`.
    pub schema: SchemaName,
}

impl Default for ConnectorSettings {
    fn default() -> Self {
        Self {
            pool_size: DEFAULT_POOL_SIZE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            schema: SchemaName::default(),
        }
    }
}

impl ConnectorSettings {
    /// The most query connections kept (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How long a statement may take, from asking the pool for a connection to the
    /// reply (default 3 s, as the Redis adapters). Past it the operation fails with a
    /// retryable connection error and its connection leaves the pool, so that a paused
    /// server or a silent network costs a bounded wait, not a hung watchdog.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long connecting may take (default 10 s): the TCP connection, the TLS and
    /// authentication handshake and, in [`Connector::connect`], the migration check. A
    /// paused server or a silent network costs this much, then a retryable connection
    /// error. A `connect_timeout` in the URL bounds only the TCP connection.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The schema of the lock tables (default `distlock`).
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = schema;
        self
    }
}

/// Connects a [`PostgresBackend`].
#[derive(Debug, Clone)]
#[must_use = "a connector does nothing until `connect` is called"]
pub struct Connector {
    url: String,
    notifications_url: Option<String>,
    settings: ConnectorSettings,
    trust: Trust,
}

impl Connector {
    /// A connector for the server `url` names (`postgres://` or `postgresql://`, or a
    /// key-value connection string).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            notifications_url: None,
            settings: ConnectorSettings::default(),
            trust: Trust::default(),
        }
    }

    /// The pool size, the response timeout and the schema (see [`ConnectorSettings`]).
    pub fn settings(mut self, settings: ConnectorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// Where the notification connection goes, when not to `url`: it holds a session
    /// (LISTEN), so behind a transaction-mode pooler point it at the server itself or at
    /// a session-mode pool, while `url` names the pooler.
    pub fn notifications_url(mut self, url: impl Into<String>) -> Self {
        self.notifications_url = Some(url.into());
        self
    }

    /// The schema of the lock tables (see [`ConnectorSettings::schema`]).
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.settings = self.settings.schema(schema);
        self
    }

    /// The most query connections kept (see [`ConnectorSettings::pool_size`]).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.settings = self.settings.pool_size(size);
        self
    }

    /// How long a statement may take (see [`ConnectorSettings::response_timeout`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings = self.settings.response_timeout(timeout);
        self
    }

    /// How long connecting may take (see [`ConnectorSettings::connect_timeout`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings = self.settings.connect_timeout(timeout);
        self
    }

    /// Trusts exactly the PEM root certificate(s) `pem` for TLS instead of the system's
    /// roots (feature `tls`), as for a server with a certificate of a private CA. Whether
    /// TLS is used is the URL's `sslmode`: `prefer` (the default) when the server offers
    /// it, `require` always, `disable` never. The server's certificate is always
    /// verified, its name included.
    #[cfg(feature = "tls")]
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.trust.set_root_certificate(pem.into());
        self
    }

    /// Connects and returns a client with the default client
    /// [`Config`](lock_core::Config).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most a migration rolled back.
    pub async fn locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect().await?)))
    }

    /// Connects, creates or migrates the lock tables (or, for a role that may not,
    /// checks that they are current), and opens the notification connection.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a URL that
    /// is not PostgreSQL's, a pool size of 0, a zero timeout, or a login the server
    /// refuses (an unknown role or database, a wrong password: not retryable, with the
    /// server's message as the cause), the migration's errors (see [`schema::migrate`]),
    /// and [`ErrorKind::Connection`](lock_core::ErrorKind::Connection) when the server
    /// cannot be reached or does not answer within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most a migration rolled back.
    pub async fn connect(self) -> Result<PostgresBackend, Error> {
        let Self {
            url,
            notifications_url,
            settings,
            trust,
        } = self;
        let mut config = parse_url(&url)?;
        if config.get_application_name().is_none() {
            config.application_name(QUERIES_APPLICATION_NAME);
        }
        let mut listen_config = match &notifications_url {
            Some(url) => parse_url(url)?,
            None => config.clone(),
        };
        check(&settings)?;
        let tls = trust.make_tls(&[&config, &listen_config])?;
        for config in [&mut config, &mut listen_config] {
            if config.get_connect_timeout().is_none() {
                config.connect_timeout(settings.connect_timeout);
            }
        }
        let during = "connecting to PostgreSQL";
        // The driver bounds only the TCP connection; a server that accepts it and then
        // says nothing (paused, or a silent network) is bounded here.
        let bound = settings.connect_timeout;
        tokio::time::timeout(bound, open(config, listen_config, tls, settings))
            .await
            .map_err(|_| Error::connection(during, silent("connect timeout", bound)))?
    }
}

impl Connector {
    /// Connects an [`AdvisoryBackend`]: locks as PostgreSQL's session advisory locks on
    /// dedicated connections (see [`crate::advisory`]), the tables created or checked as
    /// by [`Connector::connect`] for their fencing counter. The pool size is the most
    /// sessions that carry the locks taken without waiting (a name always on the same
    /// one, opened when first needed); a lock that waits inside the server waits on a
    /// session of its own.
    ///
    /// # Errors
    ///
    /// As [`Connector::connect`], and
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) behind a
    /// transaction-mode pooler (two connections that land in one server process).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most a migration rolled back and sessions
    /// that close.
    pub async fn connect_advisory(self) -> Result<AdvisoryBackend, Error> {
        let Self {
            url,
            notifications_url: _,
            settings,
            trust,
        } = self;
        let mut config = parse_url(&url)?;
        check(&settings)?;
        let tls = trust.make_tls(&[&config])?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(settings.connect_timeout);
        }
        let server = AdvisoryServer::new(config, tls, settings.schema, settings.response_timeout);
        let backend = AdvisoryBackend::new(server, settings.pool_size);
        let bound = settings.connect_timeout;
        tokio::time::timeout(bound, crate::advisory::prepare(&backend))
            .await
            .map_err(|_| {
                Error::connection("connecting to PostgreSQL", silent("connect timeout", bound))
            })??;
        Ok(backend)
    }

    /// Connects an [`AdvisoryBackend`] (see [`Connector::connect_advisory`]) and returns
    /// a client with the default client [`Config`](lock_core::Config).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`Connector::connect_advisory`].
    pub async fn advisory_locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect_advisory().await?)))
    }
}

/// Refuses settings that cannot work.
fn check(settings: &ConnectorSettings) -> Result<(), Error> {
    lock_core::check_pool_settings(
        settings.pool_size,
        settings.response_timeout,
        settings.connect_timeout,
    )
}

/// Opens the pool and its first connection, migrates, and opens the notification
/// connection.
async fn open(
    config: Config,
    listen_config: Config,
    tls: MakeTls,
    settings: ConnectorSettings,
) -> Result<PostgresBackend, Error> {
    let during = "connecting to PostgreSQL";
    let (connect, preparing) = DirectConnect::new(&config, another(&tls));
    let manager = Manager::from_connect(
        config,
        connect,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let pool = Pool::builder(manager)
        .max_size(settings.pool_size)
        .build()
        .map_err(|err| Error::invalid_config("building the connection pool", Some(err.into())))?;
    {
        let mut client = pool
            .get()
            .await
            .map_err(|err| pool_failed(err, during, &settings.schema))?;
        let client: &mut tokio_postgres::Client = &mut client;
        schema::migrate(client, &settings.schema).await?;
    }
    let notifications = Notifications::connect_with(listen_config, tls).await?;
    let mut backend = PostgresBackend {
        statements: Statements {
            pool,
            schema: settings.schema.clone(),
            preparing,
            response_timeout: settings.response_timeout,
        },
        schema: settings.schema,
        notifications,
        longest_lease: Duration::MAX,
        combiner: Combiner::default(),
    };
    let longest: i64 = backend
        .call("reading the longest lease", "lease_limit", &[])
        .await?;
    let Some(longest) = u64::try_from(longest).ok().filter(|ms| *ms > 0) else {
        return Err(Error::invalid_config(
            format!(
                "distlock.failover_quarantine_ms is {longest}: the longest lease (and a \
                 failover's quarantine) must be at least 1 ms"
            ),
            None,
        ));
    };
    backend.longest_lease = Duration::from_millis(longest);
    Ok(backend)
}

/// A PostgreSQL URL or connection string, or a typed error saying what it is instead.
fn parse_url(url: &str) -> Result<Config, Error> {
    let scheme = url.split_once("://").map(|(scheme, _)| scheme);
    if let Some(scheme) = scheme
        && scheme != "postgres"
        && scheme != "postgresql"
    {
        return Err(Error::invalid_config(
            format!("`{scheme}://` is not a PostgreSQL URL: use postgres:// or postgresql://"),
            None,
        ));
    }
    Config::from_str(url)
        .map_err(|err| Error::invalid_config("the PostgreSQL URL cannot be read", Some(err.into())))
}

#[async_trait::async_trait]
impl lock_core::Connect for Connector {
    type Settings = ConnectorSettings;
    type Backend = PostgresBackend;

    fn new(url: impl Into<String>) -> Self {
        Self::new(url)
    }

    fn settings(self, settings: ConnectorSettings) -> Self {
        self.settings(settings)
    }

    async fn connect(self) -> Result<PostgresBackend, Error> {
        self.connect().await
    }
}
