//! [`Sessions`]: a client's advisory sessions. The carriers hold the locks taken without
//! waiting (a name always on the same one, by its key), opened when first needed and
//! again after they broke; idle sessions are kept for waiters, and a semaphore bounds
//! how many statements wait inside the server at once.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::Error;
use tokio_postgres::Config;

use super::session::{Session, pooled_error};
use crate::notify::connect_within;
use crate::schema::SchemaName;
use crate::timeouts::silent;
use crate::tls::MakeTls;

/// The application name of advisory sessions, unless the URL sets one.
pub(crate) const SESSIONS_APPLICATION_NAME: &str = "distlock-advisory";

/// How many sessions that hold nothing a client keeps open for its next waiters.
const IDLE_KEPT: usize = 4;

/// The client's sessions: the carriers of the locks taken without waiting (a name's
/// always on the same one, by its key), opened when first needed, and the idle sessions
/// kept for waiters.
pub(crate) struct Sessions {
    config: Config,
    tls: MakeTls,
    carriers: Vec<Carrier>,
    idle: Mutex<Vec<Arc<Session>>>,
    /// One permit per statement that may wait inside the server at once (as many as
    /// carriers): each holds a connection, and a server's connections are few.
    waiting: Arc<tokio::sync::Semaphore>,
}

/// One carrier session, opened again after it broke.
#[derive(Default)]
struct Carrier {
    session: Mutex<Option<Arc<Session>>>,
    /// Held while the session is opened, so that it is opened once.
    opening: tokio::sync::Mutex<()>,
}

impl Carrier {
    fn current(&self) -> Option<Arc<Session>> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|session| !session.is_broken())
            .map(Arc::clone)
    }

    fn is(&self, session: &Arc<Session>) -> bool {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|carried| Arc::ptr_eq(carried, session))
    }
}

impl fmt::Debug for Sessions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("idle", &self.idle.lock().map_or(0, |idle| idle.len()))
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Sessions of `config`'s server, with at most `carriers` (at least one) carrying
    /// the locks taken without waiting.
    pub(crate) fn new(mut config: Config, tls: MakeTls, carriers: usize) -> Self {
        if config.get_application_name().is_none() {
            config.application_name(SESSIONS_APPLICATION_NAME);
        }
        let carriers = carriers.max(1);
        Self {
            config,
            tls,
            carriers: (0..carriers).map(|_| Carrier::default()).collect(),
            idle: Mutex::new(Vec::new()),
            waiting: Arc::new(tokio::sync::Semaphore::new(carriers)),
        }
    }

    /// How long connecting, and the checks that come with it, may take.
    fn connect_bound(&self) -> Duration {
        self.config
            .get_connect_timeout()
            .copied()
            .unwrap_or(crate::DEFAULT_CONNECT_TIMEOUT)
    }

    /// Opens a session.
    pub(super) async fn open(&self) -> Result<Arc<Session>, Error> {
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
        Ok(Session::new(client, pid, connection))
    }

    /// Creates or migrates the lock tables (the fencing counter lives there), or checks
    /// them, on a connection of its own, and checks that a session is one server process
    /// from statement to statement: two connections that find themselves in one server
    /// process are a transaction-mode pooler's, where a session lock would be taken by
    /// whichever client's statement ran there.
    pub(crate) async fn prepare(&self, schema: &SchemaName) -> Result<(), Error> {
        let during = "migrating the lock tables";
        let (mut client, connection) = connect_within(&self.config, &self.tls)
            .await
            .map_err(|failure| failure.into_error(during))?;
        let driven = tokio::spawn(connection);
        let migrated = crate::schema::migrate(&mut client, schema).await;
        drop(client);
        if let Ok(Err(err)) = driven.await {
            tracing::debug!(
                target: lock_core::TRACING_TARGET,
                error = %err,
                "the migration's connection ended with an error"
            );
        }
        migrated?;
        let carrier = self.carrier(0).await?;
        let other = self.for_a_waiter().await?;
        if carrier.pid() == other.pid() {
            carrier.break_off();
            return Err(pooled_error());
        }
        // Each asked again, in turn: a pooler that gave them two server processes hands
        // the next statement the one used last (PgBouncer's default), so one of them
        // now lands in the other's process. Later statements check their process too;
        // this makes the refusal come at connect.
        for session in [&carrier, &other] {
            if let Err(err) = session.still_own_process(self.connect_bound()).await {
                carrier.break_off();
                other.break_off();
                return Err(err);
            }
        }
        self.give_back(other);
        Ok(())
    }

    /// The session that carries `key`'s locks taken without waiting, opened when first
    /// needed and again after it broke.
    pub(super) async fn carrier(&self, key: i64) -> Result<Arc<Session>, Error> {
        let slots = u64::try_from(self.carriers.len()).unwrap_or(1);
        let at = usize::try_from(u64::from_ne_bytes(key.to_ne_bytes()) % slots).unwrap_or(0);
        let carrier = &self.carriers[at];
        if let Some(session) = carrier.current() {
            return Ok(session);
        }
        let _opening = carrier.opening.lock().await;
        if let Some(session) = carrier.current() {
            return Ok(session);
        }
        let session = self.open().await?;
        *carrier
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Whether `session` is (or was) one that carries locks taken without waiting.
    fn is_carrier(&self, session: &Arc<Session>) -> bool {
        self.carriers.iter().any(|carrier| carrier.is(session))
    }

    /// Leave to wait inside the server, while it is held; `None` when as many statements
    /// wait as the client allows.
    pub(super) fn may_wait(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.waiting).try_acquire_owned().ok()
    }

    /// A session that holds nothing, for a waiter to wait on.
    pub(super) async fn for_a_waiter(&self) -> Result<Arc<Session>, Error> {
        loop {
            let kept = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match kept {
                Some(session) if session.is_broken() => {}
                Some(session) => return Ok(session),
                None => return self.open().await,
            }
        }
    }

    /// Takes back a session that holds nothing any more (a waiter's, once its lock
    /// ended, or one whose wait ran out).
    pub(super) fn give_back(&self, session: Arc<Session>) {
        if session.is_broken() || self.is_carrier(&session) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(session);
        }
    }
}
