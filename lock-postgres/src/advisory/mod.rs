//! [`AdvisoryBackend`]: locks as PostgreSQL's session advisory locks
//! (`pg_advisory_lock`, `pg_advisory_lock_shared` for readers), the model of
//! madelson/DistributedLock, with lock-core's guards, watchdog and reentrancy around them:
//! lock-core's [`SessionLocks`] over this module's statements ([`AdvisorySession`]).
//!
//! - **Where they live**: on dedicated connections (`session.rs`) that nothing resets or
//!   shares; at most the pool size of them carry the locks taken without waiting (a name
//!   always on the same one), and a waiter waits inside the server on a session of its
//!   own, which then keeps the lock it waited for.
//! - **Between this client's owners** the client decides (`held.rs`): a server session
//!   gets its own lock again at once, so it cannot tell two owners of one client apart.
//! - **Waiting**: inside the server (`pg_advisory_lock` under a `lock_timeout` of the
//!   caller's time left): the server grants the lock to the waiter the moment it comes
//!   free, with no notification and no second request.
//! - **Holds end** when the session ends (the server frees them), when released, or when
//!   their lease runs out unrenewed: the client gives the lock back then (the watchdog
//!   renews, and each renewal checks the session is alive, so a dead session is a lost
//!   hold within one renewal interval).
//! - **Fencing tokens** come from the tables' counter ([`crate::schema`]), issued in the
//!   statement that takes the lock, so they never go backwards whichever mode took a name.
//! - **Names** map to the lock's 64-bit key by the first 8 bytes of their SHA-1: two
//!   names whose keys collide exclude each other (about one pair in 2^32 among 2^16
//!   names), never the reverse.
//!
//! What it cannot do ([`AdvisoryBackend::CAPABILITIES`]): leases held by the server (a
//! lease is a deadline the client keeps), fair locks, retried requests answered once (a
//! lost answer is a broken session, and its locks go with it), hand-over, introspection,
//! synchronizers. It needs a connection that is one server session: behind a
//! transaction-mode pooler it refuses to start, and a statement that ran in another
//! server process breaks its session with that error.

pub(crate) mod key;
mod session;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::session::{SessionLocks, SessionServer};
use lock_core::backend::{Capabilities, HoldModel, LockRef};
use lock_core::{Error, LockName};
use tokio_postgres::Config;

use crate::backend::check_fits;
use crate::notify::connect_within;
use crate::schema::SchemaName;
use crate::timeouts::silent;
use crate::tls::MakeTls;
pub use session::AdvisorySession;
use session::pooled_error;

/// Locks as PostgreSQL's session advisory locks: see the [module](self).
pub type AdvisoryBackend = SessionLocks<AdvisoryServer>;

/// The application name of advisory sessions, unless the URL sets one.
const SESSIONS_APPLICATION_NAME: &str = "distlock-advisory";

/// The PostgreSQL server advisory sessions are opened on.
pub struct AdvisoryServer {
    config: Config,
    tls: MakeTls,
    schema: SchemaName,
    response_timeout: Duration,
}

impl fmt::Debug for AdvisoryServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvisoryServer")
            .field("schema", &self.schema)
            .finish_non_exhaustive()
    }
}

impl AdvisoryServer {
    /// Sessions of `config`'s server, their fencing counter in `schema`.
    pub(crate) fn new(
        mut config: Config,
        tls: MakeTls,
        schema: SchemaName,
        response_timeout: Duration,
    ) -> Self {
        if config.get_application_name().is_none() {
            config.application_name(SESSIONS_APPLICATION_NAME);
        }
        Self {
            config,
            tls,
            schema,
            response_timeout,
        }
    }

    /// How long connecting, and the checks that come with it, may take.
    fn connect_bound(&self) -> Duration {
        self.config
            .get_connect_timeout()
            .copied()
            .unwrap_or(crate::DEFAULT_CONNECT_TIMEOUT)
    }
}

#[async_trait]
impl SessionServer for AdvisoryServer {
    type Session = AdvisorySession;

    /// The mutex and the read-write lock, fencing tokens, holds that last as long as
    /// their session, and waiting inside the server.
    const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Session)
        .read_write(true)
        .fencing(true)
        .shared(true)
        .waits_in_store(true);

    fn key(&self, name: &LockName) -> i64 {
        key::of(name)
    }

    fn slot(&self, key: &i64) -> u64 {
        u64::from_ne_bytes(key.to_ne_bytes())
    }

    fn check(&self, lock: &LockRef) -> Result<(), Error> {
        check_fits(lock)
    }

    async fn open(&self) -> Result<Arc<AdvisorySession>, Error> {
        let during = "opening an advisory session";
        let (client, connection) = connect_within(&self.config, &self.tls)
            .await
            .map_err(|failure| failure.into_error(during))?;
        let connection = async move {
            if let Err(err) = connection.await {
                tracing::debug!(
                    target: lock_core::TRACING_TARGET,
                    error = %err,
                    "an advisory session's connection ended"
                );
            }
        };
        let connection = tokio::spawn(connection).abort_handle();
        let bound = self.connect_bound();
        // One unnamed statement, one round trip: a statement prepared first and run
        // after could meet another server process behind a pooler, and fail there
        // before the check below can name the pooler.
        let pid = tokio::time::timeout(
            bound,
            client.query_typed("SELECT pg_catalog.pg_backend_pid()", &[]),
        )
        .await
        .map_err(|_| Error::connection(during, silent("connect timeout", bound)))?
        .map_err(|err| Error::connection(during, err))?
        .first()
        .ok_or_else(|| Error::protocol(format!("{during}: no row")))?
        .try_get::<_, i32>(0)
        .map_err(|err| Error::protocol(format!("{during}: {err}")))?;
        Ok(AdvisorySession::new(
            client,
            pid,
            connection,
            (self.response_timeout, self.schema.clone()),
        ))
    }
}

/// Creates or migrates the lock tables (the fencing counter lives there), or checks
/// them, on a connection of its own, and checks that a session is one server process
/// from statement to statement: two connections that find themselves in one server
/// process are a transaction-mode pooler's, where a session lock would be taken by
/// whichever client's statement ran there.
pub(crate) async fn prepare(backend: &AdvisoryBackend) -> Result<(), Error> {
    let sessions = backend.sessions();
    let server = sessions.server();
    let during = "migrating the lock tables";
    let (mut client, connection) = connect_within(&server.config, &server.tls)
        .await
        .map_err(|failure| failure.into_error(during))?;
    let driven = tokio::spawn(connection);
    let migrated = crate::schema::migrate(&mut client, &server.schema).await;
    drop(client);
    if let Ok(Err(err)) = driven.await {
        tracing::debug!(
            target: lock_core::TRACING_TARGET,
            error = %err,
            "the migration's connection ended with an error"
        );
    }
    migrated?;
    let carrier = sessions.carrier(0).await?;
    let other = sessions.for_a_waiter().await?;
    if carrier.pid() == other.pid() {
        carrier.break_off();
        return Err(pooled_error());
    }
    // Each asked again, in turn: a pooler that gave them two server processes hands
    // the next statement the one used last (PgBouncer's default), so one of them
    // now lands in the other's process. Later statements check their process too;
    // this makes the refusal come at connect.
    for session in [&carrier, &other] {
        if let Err(err) = session.still_own_process(server.connect_bound()).await {
            carrier.break_off();
            other.break_off();
            return Err(err);
        }
    }
    sessions.give_back(other);
    Ok(())
}
