//! Sentinel: the master is found through the Sentinels, and found again after a failover.

use std::fmt;
use std::sync::{PoisonError, RwLock};
use std::time::Duration;

use lock_core::Error;
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};

use crate::reconnect::Reconnecting;

/// The current master's connection, replaced when a failover moved the master.
pub(crate) struct Failover {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The master's address and the connection to it.
    current: RwLock<(String, Reconnecting)>,
    connect_timeout: Duration,
    response_timeout: Duration,
}

impl fmt::Debug for Failover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("master", &self.read().0)
            .finish_non_exhaustive()
    }
}

fn address(client: &redis::Client) -> String {
    client.get_connection_info().addr().to_string()
}

impl Failover {
    /// Asks the Sentinels for `master_name`'s master and connects to it.
    pub(crate) async fn connect(
        sentinels: &[String],
        master_name: &str,
        node: Option<redis::RedisConnectionInfo>,
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Result<Self, Error> {
        let node =
            node.map(|info| SentinelNodeConnectionInfo::default().set_redis_connection_info(info));
        // The driver takes a `String` without TLS and any `AsRef<str>` with it.
        let service: String = master_name.into();
        let client = SentinelClient::build(
            sentinels.to_vec(),
            service,
            node,
            SentinelServerType::Master,
        )
        .map_err(|err| Error::invalid_config("invalid Sentinel settings", Some(err.into())))?;
        let sentinels = tokio::sync::Mutex::new(client);
        let master = Self::resolve_with(&sentinels, connect_timeout).await?;
        let addr = address(&master);
        let connection = Reconnecting::connect(master, connect_timeout, response_timeout).await?;
        Ok(Self {
            sentinels,
            current: RwLock::new((addr, connection)),
            connect_timeout,
            response_timeout,
        })
    }

    async fn resolve_with(
        sentinels: &tokio::sync::Mutex<SentinelClient>,
        timeout: Duration,
    ) -> Result<redis::Client, Error> {
        let mut client = sentinels.lock().await;
        match tokio::time::timeout(timeout, client.async_get_client()).await {
            Ok(Ok(master)) => Ok(master),
            Ok(Err(err)) => Err(crate::error::connection(
                "asking the Sentinels for the master",
                err,
            )),
            Err(elapsed) => Err(Error::connection(
                "asking the Sentinels for the master",
                elapsed,
            )),
        }
    }

    /// The master as the Sentinels see it now.
    pub(crate) async fn resolve(&self) -> Result<redis::Client, Error> {
        Self::resolve_with(&self.sentinels, self.connect_timeout).await
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, (String, Reconnecting)> {
        // Only whole-value swaps happen under the lock: a poisoned value is consistent.
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection to the master as last known.
    pub(crate) fn connection(&self) -> Reconnecting {
        self.read().1.clone()
    }

    /// After a failed call: if the Sentinels now name another master, switch to it.
    pub(crate) async fn refresh(&self) {
        let Ok(master) = self.resolve().await else {
            return;
        };
        let addr = address(&master);
        if addr == self.read().0 {
            return;
        }
        if let Ok(connection) =
            Reconnecting::connect(master, self.connect_timeout, self.response_timeout).await
        {
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = (addr, connection);
        }
    }
}
