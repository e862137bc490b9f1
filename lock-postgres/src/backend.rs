//! [`PostgresBackend`]: lock-core's `Backend` over the lock tables.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use lock_core::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LockKind, LockRef, LockState,
    Release, ReleaseRequest, Renewal,
};
use lock_core::notify::Listener;
use lock_core::{Error, LockName};
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Config, NoTls};

use crate::notify::Notifications;
use crate::schema::{self, SchemaName, failed};

/// How many query connections a backend keeps at most by default.
const DEFAULT_POOL_SIZE: usize = 16;

/// Locks in PostgreSQL tables.
///
/// Every operation is one statement (a call of one of the library's functions) on a
/// pooled connection, atomic and without session state; waiting is by LISTEN/NOTIFY on a
/// dedicated connection ([`Notifications`]). Expiries are on the database's clock.
pub struct PostgresBackend {
    pool: Pool,
    schema: SchemaName,
    notifications: Notifications,
}

impl fmt::Debug for PostgresBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("schema", &self.schema)
            .field("pool", &self.pool.status())
            .finish_non_exhaustive()
    }
}

/// Connects a [`PostgresBackend`].
#[derive(Debug, Clone)]
#[must_use = "a connector does nothing until `connect` is called"]
pub struct Connector {
    url: String,
    schema: SchemaName,
    pool_size: usize,
}

impl Connector {
    /// A connector for the server `url` names (`postgres://` or `postgresql://`, or a
    /// key-value connection string).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: SchemaName::default(),
            pool_size: DEFAULT_POOL_SIZE,
        }
    }

    /// The schema of the lock tables (default `distlock`).
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = schema;
        self
    }

    /// The most query connections kept (default 16).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    /// Connects, creates or migrates the lock tables, and opens the notification
    /// connection.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidConfig`](lock_core::ErrorKind::InvalidConfig) for a URL that
    /// is not PostgreSQL's or a pool size of 0, the migration's errors (see
    /// [`schema::migrate`]), and [`ErrorKind::Connection`](lock_core::ErrorKind::Connection)
    /// when the server cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped future leaves at most a migration rolled back.
    pub async fn connect(self) -> Result<PostgresBackend, Error> {
        let config = parse_url(&self.url)?;
        if self.pool_size == 0 {
            return Err(Error::invalid_config(
                "the pool size must be at least 1",
                None,
            ));
        }
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(self.pool_size)
            .build()
            .map_err(|err| {
                Error::invalid_config("building the connection pool", Some(err.into()))
            })?;
        {
            let mut client = pool
                .get()
                .await
                .map_err(|err| Error::connection("connecting to PostgreSQL", err))?;
            let client: &mut tokio_postgres::Client = &mut client;
            schema::migrate(client, &self.schema).await?;
        }
        let notifications = Notifications::connect(config).await?;
        Ok(PostgresBackend {
            pool,
            schema: self.schema,
            notifications,
        })
    }
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

impl PostgresBackend {
    /// What this backend supports today: the reentrant mutex with fencing tokens and
    /// retried requests answered once; fair and read-write locks follow.
    pub const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Lease)
        .fencing(true)
        .retry_safe(true)
        .shared(true);

    /// The channels this client listens on for its waiters (for diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.notifications.subscriptions().channels()
    }

    /// The channel of `name`'s releases: a hash, as channel names are at most 63 bytes.
    fn channel(&self, name: &LockName) -> String {
        let digest = sha1_smol::Sha1::from(format!("{}:{name}", self.schema)).digest();
        format!("dl_{digest}")
    }

    /// Runs `SELECT <schema>.<call>` on a pooled connection and returns its one value.
    async fn call<T>(
        &self,
        during: &'static str,
        call: &str,
        params: &[Param<'_>],
    ) -> Result<T, Error>
    where
        T: for<'a> FromSql<'a>,
    {
        let statement = format!("SELECT {}.{call}", self.schema);
        let rows = self.query(during, &statement, params).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
        row.try_get(0)
            .map_err(|err| Error::protocol(format!("{during}: {err}")))
    }

    /// Runs `statement` on a pooled connection as one unnamed statement with typed
    /// parameters: one round trip, and nothing a transaction-mode pooler could lose
    /// between statements (a named prepared statement would be).
    async fn query(
        &self,
        during: &'static str,
        statement: &str,
        params: &[Param<'_>],
    ) -> Result<Vec<tokio_postgres::Row>, Error> {
        let client = self
            .pool
            .get()
            .await
            .map_err(|err| Error::connection(during, err))?;
        client
            .query_typed(statement, params)
            .await
            .map_err(|err| failed(err, during, &self.schema))
    }
}

/// A statement parameter and its type.
type Param<'a> = (&'a (dyn ToSql + Sync), Type);

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

fn unexpected(what: &str, reply: &[i64]) -> Error {
    Error::protocol(format!("{what} answered {reply:?}"))
}

#[async_trait]
impl Backend for PostgresBackend {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        if lock.kind != LockKind::Mutex {
            return Err(Error::unsupported("lock kinds other than the mutex"));
        }
        let reply: Vec<i64> = self
            .call(
                "acquiring",
                "mutex_acquire($1::text, $2::text, $3::bigint, $4::boolean, $5::text::uuid, $6::bigint)",
                &[
                    (&lock.name.as_str(), Type::TEXT),
                    (&lock.owner.as_str(), Type::TEXT),
                    (&millis(request.lease), Type::INT8),
                    (&request.fencing, Type::BOOL),
                    (&request.id.to_string(), Type::TEXT),
                    (&millis(request.retry_window), Type::INT8),
                ],
            )
            .await?;
        match reply.as_slice() {
            [1, holds, token] => Ok(Acquire::Acquired {
                holds: u32::try_from(*holds).map_err(|_| unexpected("acquire", &reply))?,
                token: u64::try_from(*token)
                    .ok()
                    .filter(|&t| request.fencing && t > 0),
            }),
            [0, ttl, _] => Ok(Acquire::Busy {
                ttl: u64::try_from(*ttl).ok().map(Duration::from_millis),
                reserved: false,
            }),
            _ => Err(unexpected("acquire", &reply)),
        }
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        if lock.kind != LockKind::Mutex {
            return Err(Error::unsupported("lock kinds other than the mutex"));
        }
        let undoes = request.undoes.map(|grant| grant.to_string());
        let reply: Vec<i64> = self
            .call(
                "releasing",
                "mutex_release($1::text, $2::text, $3::bigint, $4::text::uuid, $5::bigint, \
                 $6::text::uuid, $7::text)",
                &[
                    (&lock.name.as_str(), Type::TEXT),
                    (&lock.owner.as_str(), Type::TEXT),
                    (&millis(request.lease), Type::INT8),
                    (&request.id.to_string(), Type::TEXT),
                    (&millis(request.retry_window), Type::INT8),
                    (&undoes, Type::TEXT),
                    (&self.channel(&lock.name), Type::TEXT),
                ],
            )
            .await?;
        match reply.as_slice() {
            [0, _] => Ok(Release::NotHeld),
            [1, holds] => Ok(Release::StillHeld {
                holds: u32::try_from(*holds).map_err(|_| unexpected("release", &reply))?,
            }),
            [2, _] => Ok(Release::Released),
            _ => Err(unexpected("release", &reply)),
        }
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let names: Vec<&str> = locks.iter().map(|lock| lock.name.as_str()).collect();
        let owners: Vec<&str> = locks.iter().map(|lock| lock.owner.as_str()).collect();
        let renewed = async {
            // One statement for the whole batch: every hold still valid gets the lease
            // from now (never shorter than it had).
            let statement = format!(
                "UPDATE {s}.holds AS h
                    SET expires_at = greatest(h.expires_at,
                                              clock_timestamp() + $3 * interval '1 millisecond')
                   FROM unnest($1::text[], $2::text[]) AS r(name, owner)
                  WHERE h.name = r.name AND h.owner = r.owner AND h.kind = 'mutex'
                    AND h.expires_at > clock_timestamp()
              RETURNING h.name, h.owner",
                s = self.schema
            );
            let params: [Param<'_>; 3] = [
                (&names, Type::TEXT_ARRAY),
                (&owners, Type::TEXT_ARRAY),
                (&millis(lease), Type::INT8),
            ];
            let rows = self.query("renewing", &statement, &params).await?;
            Ok::<_, Error>(
                rows.iter()
                    .map(|row| (row.get::<_, String>(0), row.get::<_, String>(1)))
                    .collect::<Vec<_>>(),
            )
        };
        match renewed.await {
            Ok(renewed) => locks
                .iter()
                .map(|lock| {
                    let found = renewed.iter().any(|(name, owner)| {
                        name == lock.name.as_str() && owner == lock.owner.as_str()
                    });
                    if found && lock.kind == LockKind::Mutex {
                        Renewal::Renewed
                    } else {
                        Renewal::Gone
                    }
                })
                .collect(),
            Err(err) => locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        // Whether anyone holds it, the owner's hold count, and the lock's time left (the
        // longest lease among its holds).
        let statement = format!(
            "SELECT count(*) > 0,
                    coalesce(sum(holds) FILTER (WHERE owner = $2 AND kind = 'mutex'), 0)::bigint,
                    ceil(extract(epoch FROM max(expires_at) - clock_timestamp()) * 1000)::bigint
               FROM {s}.holds
              WHERE name = $1 AND expires_at > clock_timestamp()",
            s = self.schema
        );
        let params: [Param<'_>; 2] = [
            (&lock.name.as_str(), Type::TEXT),
            (&lock.owner.as_str(), Type::TEXT),
        ];
        let rows = self.query("inspecting", &statement, &params).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::protocol("inspecting: no row"))?;
        let locked: bool = row.get(0);
        let holds: i64 = row.get(1);
        let ttl: Option<i64> = row.get(2);
        Ok(LockState::new(
            locked,
            u32::try_from(holds).unwrap_or(0),
            ttl.and_then(|ms| u64::try_from(ms).ok())
                .map(Duration::from_millis),
        ))
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.call(
            "force-releasing",
            "force_release($1::text, $2::text)",
            &[
                (&lock.name.as_str(), Type::TEXT),
                (&self.channel(&lock.name), Type::TEXT),
            ],
        )
        .await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.notifications
            .subscriptions()
            .listen(&self.channel(&lock.name))
            .await
    }
}
