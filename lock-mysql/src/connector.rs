//! [`Connector`]: connects a [`MysqlBackend`], with its [`ConnectorSettings`].

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Error, Locks};
use mysql_async::Opts;
use mysql_async::prelude::Queryable;

use crate::backend::MysqlBackend;
use crate::error::{Silent, code, failed};
use crate::notify::Notifications;
use crate::pool::{Manager, Pool, connect};
use crate::schema::Tables;
use crate::session::{GetLockBackend, GetLockServer};
use crate::store::Store;
use crate::swap::Logging;

/// How many connections a backend keeps at most by default.
const DEFAULT_POOL_SIZE: usize = 16;

/// How long a statement may take by default, as the other backends.
const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long connecting may take by default.
const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The pool, the timeouts and the tables of a MySQL connector. Build from [`Default`]
/// with the setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
#[must_use]
pub struct ConnectorSettings {
    /// The most connections kept for the lock transactions. Default: 16.
    pub pool_size: usize,
    /// How long a transaction may take, from asking the pool for a connection to its
    /// commit; it also bounds the server's row-lock waits. Default: 3 s.
    pub response_timeout: Duration,
    /// How long connecting may take, the tables' creation included. Default: 10 s.
    pub connect_timeout: Duration,
    /// The lock tables, by their prefix. Default: `distlock_`.
    pub tables: Tables,
    /// How long nothing is granted after a replica took over from the server before
    /// it, and the longest lease the names this client creates grant. Default: 60 s.
    pub failover_quarantine: Duration,
}

impl Default for ConnectorSettings {
    fn default() -> Self {
        Self {
            pool_size: DEFAULT_POOL_SIZE,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            tables: Tables::default(),
            failover_quarantine: DEFAULT_FAILOVER_QUARANTINE,
        }
    }
}

/// The failover quarantine by default, PostgreSQL's.
const DEFAULT_FAILOVER_QUARANTINE: Duration = Duration::from_secs(60);

impl ConnectorSettings {
    /// The most connections kept (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// How long a transaction may take (default 3 s). Past it the operation fails with a
    /// retryable connection error and its connection is closed, which rolls the
    /// transaction back.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// How long connecting may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How long nothing is granted after a replica took over (default 60 s): every
    /// hold the old server may have granted in writes the replica lacks runs out
    /// meanwhile, so no lease may be longer. A name keeps the value of the client that
    /// first used it (its row's machine refuses longer leases); give every client of
    /// one database the same.
    pub fn failover_quarantine(mut self, quarantine: Duration) -> Self {
        self.failover_quarantine = quarantine;
        self
    }

    /// The lock tables (default: prefix `distlock_`).
    pub fn tables(mut self, tables: Tables) -> Self {
        self.tables = tables;
        self
    }
}

/// Connects a [`MysqlBackend`].
#[derive(Debug, Clone)]
#[must_use = "a connector does nothing until `connect` is called"]
pub struct Connector {
    url: String,
    settings: ConnectorSettings,
    /// The PEM root certificates TLS trusts instead of the built-in ones.
    root_certificate: Option<Vec<u8>>,
}

impl Connector {
    /// A connector for the database `url` names: `mysql://user:password@host:port/database`
    /// (the tables go into that database).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            settings: ConnectorSettings::default(),
            root_certificate: None,
        }
    }

    /// Trusts exactly the PEM root certificate(s) `pem` for TLS instead of the built-in
    /// web roots (feature `tls`), as for a server with a certificate of a private CA, and
    /// requires TLS. Without it, TLS is the URL's `require_ssl=true`. The server's
    /// certificate is verified, its name included, unless the URL says `verify_ca=false`
    /// or `verify_identity=false`.
    #[cfg(feature = "tls")]
    pub fn root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.root_certificate = Some(pem.into());
        self
    }

    /// The pool size, the timeouts and the tables (see [`ConnectorSettings`]).
    pub fn settings(mut self, settings: ConnectorSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The most connections kept (see [`ConnectorSettings::pool_size`]).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.settings = self.settings.pool_size(size);
        self
    }

    /// How long a transaction may take (see [`ConnectorSettings::response_timeout`]).
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings = self.settings.response_timeout(timeout);
        self
    }

    /// How long connecting may take (see [`ConnectorSettings::connect_timeout`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings = self.settings.connect_timeout(timeout);
        self
    }

    /// The lock tables (see [`ConnectorSettings::tables`]).
    pub fn tables(mut self, tables: Tables) -> Self {
        self.settings = self.settings.tables(tables);
        self
    }

    /// Connects and returns a client with the default client
    /// [`Config`](lock_core::Config).
    ///
    /// # Errors
    ///
    /// As [`Connector::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most the tables created.
    pub async fn locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect().await?)))
    }

    /// Connects, creates the lock tables where they are missing, and opens the
    /// listening connection.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a URL that
    /// is not MySQL's or names no database, a pool size of 0, a zero timeout, or a login
    /// the server refuses (a wrong password, an unknown database: not retryable, with
    /// the server's message as the cause);
    /// [`ErrorKind::Backend`](lock_core::ErrorKind::Backend) when the tables cannot be
    /// created (the server's message says why); and
    /// [`ErrorKind::Connection`](lock_core::ErrorKind::Connection) when the server
    /// cannot be reached or does not answer within the connect timeout.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most the tables created.
    pub async fn connect(self) -> Result<MysqlBackend, Error> {
        let (opts, settings) = self.checked()?;
        let bound = settings.connect_timeout;
        tokio::time::timeout(bound, open(opts, settings))
            .await
            .map_err(|_| Error::connection("connecting to MySQL", Silent { bound }))?
    }
}

impl Connector {
    /// Connects a [`GetLockBackend`]: locks as MySQL's user-level locks (`GET_LOCK`) on
    /// dedicated connections (see [`crate::session`]), the tables created or checked as
    /// by [`Connector::connect`] for the fencing counters. The pool size is the most
    /// sessions that carry the locks taken without waiting (a name always on the same
    /// one, opened when first needed); a lock that waits inside the server waits on a
    /// session of its own.
    ///
    /// # Errors
    ///
    /// As [`Connector::connect`], and
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) on a Galera node
    /// or a Group Replication member, whose nodes do not share user-level locks.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most the tables created and sessions
    /// that close.
    pub async fn connect_session_locks(self) -> Result<GetLockBackend, Error> {
        let (opts, settings) = self.checked()?;
        let bound = settings.connect_timeout;
        let opened = async {
            let manager = Manager::new(opts, settings.connect_timeout, settings.response_timeout);
            let mut conn = connect(manager.opts(), settings.connect_timeout).await?;
            prepare_tables(&mut conn, &settings.tables).await?;
            crate::session::refuse_clusters(&mut conn).await?;
            drop(conn);
            let server = GetLockServer::new(
                manager.opts().clone(),
                (settings.connect_timeout, settings.response_timeout),
                settings.tables,
            );
            let backend = GetLockBackend::new(server, settings.pool_size);
            // The first carrier, opened now: a login refused or a server that does not
            // answer is the connect's error, not the first lock's.
            backend.sessions().carrier(0).await?;
            Ok(backend)
        };
        tokio::time::timeout(bound, opened)
            .await
            .map_err(|_| Error::connection("connecting to MySQL", Silent { bound }))?
    }

    /// Connects a [`GetLockBackend`] (see [`Connector::connect_session_locks`]) and
    /// returns a client with the default client [`Config`](lock_core::Config).
    ///
    /// # Errors
    ///
    /// As [`Connector::connect_session_locks`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe, as [`Connector::connect_session_locks`].
    pub async fn session_locks(self) -> Result<Locks, Error> {
        Ok(Locks::new(Arc::new(self.connect_session_locks().await?)))
    }
}

impl Connector {
    /// The connection options the URL and the root certificate give (and whether the URL
    /// asks for the Unix socket), and the settings, once both are checked.
    fn checked(self) -> Result<((Opts, bool), ConnectorSettings), Error> {
        let Self {
            url,
            settings,
            root_certificate,
        } = self;
        let (opts, socket) = parse_url(&url)?;
        check(&settings)?;
        Ok(((with_roots(opts, root_certificate), socket), settings))
    }
}

/// `opts` requiring TLS that trusts exactly `pem`'s roots, when given.
#[cfg(feature = "tls")]
fn with_roots(opts: Opts, pem: Option<Vec<u8>>) -> Opts {
    let Some(pem) = pem else {
        return opts;
    };
    let ssl = opts
        .ssl_opts()
        .cloned()
        .unwrap_or_default()
        .with_root_certs(vec![pem.into()])
        .with_disable_built_in_roots(true);
    mysql_async::OptsBuilder::from_opts(opts)
        .ssl_opts(ssl)
        .into()
}

/// `opts` as they are: without the `tls` feature no root certificate can be given.
#[cfg(not(feature = "tls"))]
fn with_roots(opts: Opts, _: Option<Vec<u8>>) -> Opts {
    opts
}

/// Refuses settings that cannot work.
fn check(settings: &ConnectorSettings) -> Result<(), Error> {
    lock_core::check_pool_settings(
        settings.pool_size,
        settings.response_timeout,
        settings.connect_timeout,
    )
}

/// Opens the pool, creates the tables, and opens the listening connection.
async fn open(opts: (Opts, bool), settings: ConnectorSettings) -> Result<MysqlBackend, Error> {
    let manager = Manager::new(opts, settings.connect_timeout, settings.response_timeout);
    let listen_opts = manager.opts().clone();
    let mut conn = connect(manager.opts(), settings.connect_timeout).await?;
    prepare_tables(&mut conn, &settings.tables).await?;
    let logging = Logging::of(&mut conn)
        .await
        .map_err(|err| failed(err, "reading how the server logs"))?;
    drop(conn);
    let pool = Pool::builder(manager)
        .max_size(settings.pool_size)
        .build()
        .map_err(|err| Error::invalid_config("building the connection pool", Some(err.into())))?;
    let notifications = Notifications::connect(
        listen_opts,
        settings.tables.clone(),
        settings.connect_timeout,
    )
    .await?;
    Ok(MysqlBackend {
        store: Store::new(
            pool,
            (settings.tables, logging),
            (settings.response_timeout, settings.failover_quarantine),
        ),
        notifications,
    })
}

/// Creates the lock tables where they are missing. A user that may not create tables
/// (a least-privileged service user, for whom a DBA ran [`Tables::create_sql`]) is
/// refused `CREATE` even for tables that exist: then the tables are only checked.
async fn prepare_tables(conn: &mut mysql_async::Conn, tables: &Tables) -> Result<(), Error> {
    let created = conn.query_drop(tables.create_sql()).await;
    match created {
        Ok(()) => return Ok(()),
        Err(mysql_async::Error::Server(server)) if denies_a_privilege(&server) => {}
        Err(err) => return Err(failed(err, "creating the lock tables")),
    }
    let check = [
        tables.names(),
        tables.wakes(),
        tables.clients(),
        tables.epoch(),
        tables.tokens(),
    ]
    .map(|table| format!("SELECT 1 FROM {table} WHERE 1 = 0"))
    .join("; ");
    match conn.query_drop(check).await {
        Ok(()) => Ok(()),
        Err(unreadable) => Err(Error::invalid_config(
            "the lock tables cannot be read, and this user may not create them: run \
             `Tables::create_sql` as a user who may, then grant this one SELECT, INSERT, \
             UPDATE and DELETE on them",
            Some(unreadable.into()),
        )),
    }
}

/// Whether the server refused a statement for a missing privilege.
fn denies_a_privilege(err: &mysql_async::ServerError) -> bool {
    matches!(
        err.code,
        code::DATABASE_ACCESS_DENIED | code::TABLE_ACCESS_DENIED
    )
}

/// A MySQL URL naming a database (and whether it asks for the server's Unix socket), or a
/// typed error saying what it is instead.
fn parse_url(url: &str) -> Result<(Opts, bool), Error> {
    if let Some((scheme, _)) = url.split_once("://")
        && scheme != "mysql"
        && scheme != "mariadb"
    {
        return Err(Error::invalid_config(
            format!("`{scheme}://` is not a MySQL URL: use mysql://"),
            None,
        ));
    }
    let url = url
        .strip_prefix("mariadb://")
        .map_or_else(|| url.to_owned(), |rest| format!("mysql://{rest}"));
    let opts = Opts::from_url(&url)
        .map_err(|err| Error::invalid_config("the MySQL URL cannot be read", Some(err.into())))?;
    if cfg!(not(feature = "tls")) && opts.ssl_opts().is_some() {
        return Err(Error::invalid_config(
            "the MySQL URL asks for TLS (require_ssl=true), and lock-mysql was built \
             without its `tls` feature (distlock's `tls`)",
            None,
        ));
    }
    if opts.db_name().is_none_or(str::is_empty) {
        return Err(Error::invalid_config(
            "the MySQL URL names no database: the lock tables go into the one it names \
             (mysql://user@host/database)",
            None,
        ));
    }
    Ok((opts, url.contains("prefer_socket=true")))
}

#[async_trait::async_trait]
impl lock_core::Connect for Connector {
    type Settings = ConnectorSettings;
    type Backend = MysqlBackend;

    fn new(url: impl Into<String>) -> Self {
        Self::new(url)
    }

    fn settings(self, settings: ConnectorSettings) -> Self {
        self.settings(settings)
    }

    async fn connect(self) -> Result<MysqlBackend, Error> {
        self.connect().await
    }
}

#[cfg(test)]
mod tests {
    use super::parse_url;

    #[test]
    fn urls_are_checked_before_connecting() {
        for (url, says) in [
            ("postgres://u@h/db", "not a MySQL URL"),
            ("mysql://u@h", "names no database"),
            ("mysql://u@h/", "names no database"),
            ("mysql://u@h:notaport/db", "cannot be read"),
        ] {
            let err = parse_url(url).expect_err(url);
            assert!(err.is_invalid_input(), "{url}: {err}");
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
        assert!(parse_url("mysql://u:p@h:3307/db").is_ok());
        assert!(parse_url("mariadb://u@h/db").is_ok());
    }
}
