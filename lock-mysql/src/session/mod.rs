//! [`GetLockBackend`]: locks as MySQL's user-level locks (`GET_LOCK`), the model of
//! madelson/DistributedLock's MySQL lock, with lock-core's guards, watchdog and
//! reentrancy around them: lock-core's [`SessionLocks`] over this module's statements
//! ([`GetLockSession`]).
//!
//! - **Where they live**: on dedicated connections that no pool resets (a reset frees
//!   every user-level lock of the session); at most the pool size of them carry the
//!   locks taken without waiting, and a waiter waits inside the server on a session of
//!   its own (`GET_LOCK` with the caller's time left), which then keeps the lock.
//! - **Holds end** when the session ends, when released, or when their lease runs out
//!   unrenewed; each renewal asks the session its id, so a dead session (a killed
//!   connection, a restarted server) is a lost hold within one renewal interval.
//! - **Names**: `GET_LOCK` compares names without case and takes at most 64 characters,
//!   and its names are the whole server's. A name of at most 64 ASCII characters with no
//!   capital letter is used as it is; any other name (and any name starting with
//!   `distlock-`, the library's own) becomes `distlock-name-` and its SHA-1 in hex. Two
//!   names never share a server lock by case or length.
//! - **Fencing tokens** come from a counter per name in `<prefix>tokens`, raised to at
//!   least the server's clock in microseconds: they never go backwards, also on a
//!   promoted replica that lacks the last ones (within the clocks' skew).
//!
//! What it cannot do ([`GetLockServer::CAPABILITIES`]): read-write locks (`GET_LOCK` has
//! no shared mode), leases held by the server, fair locks, retried requests answered
//! once, hand-over, introspection, synchronizers. It refuses Galera and Group
//! Replication at connect: their nodes do not share user-level locks.

mod combined;
mod statements;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::session::{SessionLocks, SessionServer};
use lock_core::backend::{Capabilities, HoldModel, LockRef};
use lock_core::{Error, LockName};
use mysql_async::Opts;
use mysql_async::prelude::Queryable;
pub use statements::GetLockSession;

use crate::error::failed;
use crate::schema::Tables;

/// Locks as MySQL's user-level locks: see the [module](self).
pub type GetLockBackend = SessionLocks<GetLockServer>;

/// The start of every server lock name the library makes itself.
const RESERVED: &str = "distlock-";

/// The start of a name mapped to its digest.
const DIGESTED: &str = "distlock-name-";

/// The longest name `GET_LOCK` takes (MySQL's limit).
const LONGEST_NAME: usize = 64;

/// The server lock name of the lock named `name` (see the [module](self)).
pub(crate) fn server_name(name: &str) -> String {
    let as_it_is = name.len() <= LONGEST_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii() && !b.is_ascii_uppercase() && b != 0)
        && !name.starts_with(RESERVED);
    if as_it_is {
        return name.to_owned();
    }
    let digest = sha1_smol::Sha1::from(name).digest().to_string();
    format!("{DIGESTED}{digest}")
}

/// The MySQL server user-level lock sessions are opened on.
pub struct GetLockServer {
    opts: Opts,
    connect_timeout: Duration,
    response_timeout: Duration,
    tables: Tables,
}

impl fmt::Debug for GetLockServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GetLockServer")
            .field("tables", &self.tables)
            .finish_non_exhaustive()
    }
}

impl GetLockServer {
    /// Sessions opened as `opts` say, their fencing counters in `tables`.
    pub(crate) fn new(
        opts: Opts,
        (connect_timeout, response_timeout): (Duration, Duration),
        tables: Tables,
    ) -> Self {
        Self {
            opts,
            connect_timeout,
            response_timeout,
            tables,
        }
    }
}

#[async_trait]
impl SessionServer for GetLockServer {
    type Session = GetLockSession;

    /// The mutex, fencing tokens, holds that last as long as their session, and waiting
    /// inside the server.
    const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Session)
        .fencing(true)
        .shared(true)
        .waits_in_store(true);

    fn key(&self, name: &LockName) -> String {
        server_name(name.as_str())
    }

    /// Any spread does: the carrier is this client's choice alone, so a process-local
    /// hash serves, where a digest would cost every operation more.
    fn slot(&self, key: &String) -> u64 {
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(key, &mut hasher);
        std::hash::Hasher::finish(&hasher)
    }

    /// Every name maps to a server name, and the owner is never stored.
    fn check(&self, _: &LockRef) -> Result<(), Error> {
        Ok(())
    }

    async fn open(&self) -> Result<Arc<GetLockSession>, Error> {
        let during = "opening a user-level lock session";
        let mut conn = crate::pool::connect(&self.opts, self.connect_timeout).await?;
        let identity = tokio::time::timeout(
            self.connect_timeout,
            conn.query_first::<(u64, String), _>("SELECT CONNECTION_ID(), VERSION()"),
        )
        .await
        .map_err(|_| {
            Error::connection(
                during,
                crate::error::Silent {
                    bound: self.connect_timeout,
                },
            )
        })?
        .map_err(|err| failed(err, during))?
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?;
        let (id, version) = identity;
        let mariadb = version.contains("MariaDB");
        Ok(Arc::new(GetLockSession::new(
            (conn, id, mariadb),
            self.response_timeout,
            self.tables.tokens(),
        )))
    }
}

/// Refuses a server whose cluster does not share user-level locks between its nodes,
/// with what to use instead.
pub(crate) async fn refuse_clusters(conn: &mut mysql_async::Conn) -> Result<(), Error> {
    let during = "asking whether the server is a Galera or Group Replication node";
    let wsrep: Option<(String, String)> = conn
        .query_first("SHOW VARIABLES LIKE 'wsrep_on'")
        .await
        .map_err(|err| failed(err, during))?;
    let group: Option<u64> = conn
        .query_first(
            "SELECT COUNT(*) FROM information_schema.PLUGINS \
             WHERE PLUGIN_NAME = 'group_replication' AND PLUGIN_STATUS = 'ACTIVE'",
        )
        .await
        .map_err(|err| failed(err, during))?;
    let galera = wsrep.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON"));
    cluster_refusal(galera, group.unwrap_or(0) > 0).map_or(Ok(()), Err)
}

/// The refusal of a Galera node or a Group Replication member, if the server is one.
fn cluster_refusal(galera: bool, group_replication: bool) -> Option<Error> {
    let which = match (galera, group_replication) {
        (true, _) => "a Galera cluster node (wsrep_on=ON)",
        (false, true) => "a Group Replication member",
        (false, false) => return None,
    };
    Some(Error::invalid_config(
        format!(
            "the server is {which}: user-level locks (GET_LOCK) are not shared between its \
             nodes, so two nodes would grant one lock twice. Use the table mode \
             (Connector::connect), whose rows the cluster replicates"
        ),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::{cluster_refusal, server_name};

    #[test]
    fn short_lowercase_names_stay_and_the_rest_are_digested() {
        assert_eq!(server_name("orders:42"), "orders:42");
        let longest = "n".repeat(64);
        assert_eq!(server_name(&longest), longest);
        for digested in [
            "Orders:42",
            "orders:42:é",
            &"n".repeat(65),
            "distlock-mailbox-1",
            "distlock-name-x",
        ] {
            let name = server_name(digested);
            assert!(name.starts_with("distlock-name-"), "{digested}: {name}");
            assert!(name.len() <= 64, "{name}");
        }
        // Names that differ only by case or beyond 64 characters keep apart.
        assert_ne!(server_name("Orders"), server_name("orders"));
        assert_ne!(server_name("ORDERS"), server_name("Orders"));
        assert_ne!(
            server_name(&format!("{}a", "n".repeat(64))),
            server_name(&format!("{}b", "n".repeat(64)))
        );
    }

    #[test]
    fn galera_and_group_replication_are_refused_with_the_reason() {
        assert!(cluster_refusal(false, false).is_none());
        for (galera, group, says) in [(true, false, "Galera"), (false, true, "Group Replication")] {
            let err = cluster_refusal(galera, group).expect("refused");
            assert_eq!(err.kind(), lock_core::ErrorKind::InvalidConfig, "{err}");
            assert!(err.to_string().contains(says), "{err}");
        }
    }
}
