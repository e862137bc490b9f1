//! [`Sessions`]: a client's dedicated server sessions. The carriers hold the locks taken
//! without waiting (a name always on the same one), opened when first needed and again
//! after they broke; idle sessions are kept for waiters, and a semaphore bounds how many
//! statements wait inside the server at once.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use super::{LockSession, SessionServer};
use crate::Error;

/// How many sessions that hold nothing a client keeps open for its next waiters.
const IDLE_KEPT: usize = 4;

/// The client's sessions of one server: the carriers of the locks taken without waiting
/// (a name's always on the same one), opened when first needed, and the idle sessions
/// kept for waiters.
pub struct Sessions<S: SessionServer> {
    server: S,
    carriers: Vec<Carrier<S::Session>>,
    idle: Mutex<Vec<Arc<S::Session>>>,
    /// One permit per statement that may wait inside the server at once (as many as
    /// carriers): each holds a connection, and a server's connections are few.
    waiting: Arc<tokio::sync::Semaphore>,
}

/// One carrier session, opened again after it broke.
struct Carrier<T> {
    session: Mutex<Option<Arc<T>>>,
    /// Held while the session is opened, so that it is opened once.
    opening: tokio::sync::Mutex<()>,
}

impl<T: LockSession> Carrier<T> {
    fn new() -> Self {
        Self {
            session: Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
        }
    }

    fn current(&self) -> Option<Arc<T>> {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .filter(|session| !session.is_broken())
            .map(Arc::clone)
    }

    fn is(&self, session: &Arc<T>) -> bool {
        self.session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .is_some_and(|carried| Arc::ptr_eq(carried, session))
    }
}

impl<S: SessionServer> fmt::Debug for Sessions<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sessions")
            .field("server", &self.server)
            .field("carriers", &self.carriers.len())
            .field("idle", &self.idle.lock().map_or(0, |idle| idle.len()))
            .finish_non_exhaustive()
    }
}

impl<S: SessionServer> Sessions<S> {
    /// Sessions of `server`, with at most `carriers` (at least one) carrying the locks
    /// taken without waiting.
    pub(super) fn new(server: S, carriers: usize) -> Self {
        let carriers = carriers.max(1);
        Self {
            server,
            carriers: (0..carriers).map(|_| Carrier::new()).collect(),
            idle: Mutex::new(Vec::new()),
            waiting: Arc::new(tokio::sync::Semaphore::new(carriers)),
        }
    }

    /// The server the sessions are opened on.
    pub fn server(&self) -> &S {
        &self.server
    }

    /// The carrier of the names [`SessionServer::slot`] puts at `slot` (modulo their
    /// number), opened when first needed and again after it broke.
    ///
    /// # Errors
    ///
    /// As [`SessionServer::open`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a session opened for a dropped call is kept for the next one.
    pub async fn carrier(&self, slot: u64) -> Result<Arc<S::Session>, Error> {
        let count = u64::try_from(self.carriers.len()).unwrap_or(1);
        let at = usize::try_from(slot % count).unwrap_or(0);
        let carrier = &self.carriers[at];
        if let Some(session) = carrier.current() {
            return Ok(session);
        }
        let _opening = carrier.opening.lock().await;
        if let Some(session) = carrier.current() {
            return Ok(session);
        }
        let session = self.server.open().await?;
        *carrier
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&session));
        Ok(session)
    }

    /// Whether `session` is (or was) one that carries locks taken without waiting.
    fn is_carrier(&self, session: &Arc<S::Session>) -> bool {
        self.carriers.iter().any(|carrier| carrier.is(session))
    }

    /// Leave to wait inside the server, while it is held; `None` when as many statements
    /// wait as the client allows.
    pub(super) fn may_wait(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        Arc::clone(&self.waiting).try_acquire_owned().ok()
    }

    /// A session that holds nothing, for a waiter to wait on.
    ///
    /// # Errors
    ///
    /// As [`SessionServer::open`].
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a dropped call closes the session it was opening.
    pub async fn for_a_waiter(&self) -> Result<Arc<S::Session>, Error> {
        loop {
            let kept = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            match kept {
                Some(session) if session.is_broken() => {}
                Some(session) => return Ok(session),
                None => return self.server.open().await,
            }
        }
    }

    /// Takes back a session that holds nothing any more (a waiter's, once its lock
    /// ended, or one whose wait ran out).
    pub fn give_back(&self, session: Arc<S::Session>) {
        if session.is_broken() || self.is_carrier(&session) {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE_KEPT {
            idle.push(session);
        }
    }
}
