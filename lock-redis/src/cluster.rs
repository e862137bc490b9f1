//! The script connection to a cluster: redis-rs's cluster connection, whose driver task
//! lives in the runtime the connection was made in. A client used on after that runtime
//! shut down makes its connection again, on the caller's runtime, before the next
//! command (second review, N8).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::Error;
use lock_core::runtime::RuntimeWatch;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{RedisError, RedisResult};

/// Makes the builder of a cluster connection, anew for each connection.
pub(crate) type MakeBuilder = Arc<dyn Fn() -> ClusterClientBuilder + Send + Sync>;

/// A cluster connection that is made again once the runtime it lived in is gone. Clones
/// share the connection.
#[derive(Clone)]
pub(crate) struct ClusterCommands {
    shared: Arc<Shared>,
}

struct Shared {
    current: Mutex<Current>,
    /// How to make a new connection; `None` for an application's own connection, which
    /// lives and dies with the application's runtime.
    make: Option<MakeBuilder>,
    connect_timeout: Duration,
    /// One remake at a time: callers that find the connection dead together wait for
    /// the one new connection.
    remaking: tokio::sync::Mutex<()>,
}

struct Current {
    connection: ClusterConnection,
    home: Option<RuntimeWatch>,
}

impl ClusterCommands {
    /// Connects to the cluster `make` names, within `connect_timeout`.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a connection being made is closed when the future is dropped.
    pub(crate) async fn connect(
        make: MakeBuilder,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let connection = open(&make, connect_timeout).await.map_err(|err| {
            if err.kind() == redis::ErrorKind::InvalidClientConfig {
                Error::invalid_config("invalid cluster settings", Some(err.into()))
            } else {
                crate::error::connection("connecting to the cluster", err)
            }
        })?;
        Ok(Self::new(connection, Some(make), connect_timeout))
    }

    /// The application's connection, used as it is.
    pub(crate) fn of_application(connection: ClusterConnection) -> Self {
        Self::new(connection, None, Duration::ZERO)
    }

    fn new(
        connection: ClusterConnection,
        make: Option<MakeBuilder>,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                current: Mutex::new(Current {
                    connection,
                    home: RuntimeWatch::current(),
                }),
                make,
                connect_timeout,
                remaking: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The connection to send on: the current one, or a new one if the current one's
    /// runtime is gone.
    pub(crate) async fn connection(&self) -> RedisResult<ClusterConnection> {
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        // Boxed: every call's future would otherwise carry room for the remake.
        Box::pin(self.remade()).await
    }

    /// The current connection, unless it must be made again.
    fn live(&self) -> Option<ClusterConnection> {
        let current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let running = current.home.as_ref().is_none_or(RuntimeWatch::is_running);
        (running || self.shared.make.is_none()).then(|| current.connection.clone())
    }

    async fn remade(&self) -> RedisResult<ClusterConnection> {
        let _only_one = self.shared.remaking.lock().await;
        if let Some(connection) = self.live() {
            return Ok(connection);
        }
        // An application's connection is always live: only ours get here.
        let Some(make) = &self.shared.make else {
            return Err(RedisError::from(std::io::Error::other(
                "the cluster connection cannot be made again",
            )));
        };
        let connection = open(make, self.shared.connect_timeout).await?;
        let mut current = self
            .shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        *current = Current {
            connection: connection.clone(),
            home: RuntimeWatch::current(),
        };
        Ok(connection)
    }
}

/// A new cluster connection, within `connect_timeout`.
async fn open(make: &MakeBuilder, connect_timeout: Duration) -> RedisResult<ClusterConnection> {
    let client = make().build()?;
    match tokio::time::timeout(connect_timeout, client.get_async_connection()).await {
        Ok(connection) => connection,
        Err(elapsed) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            elapsed,
        ))),
    }
}
