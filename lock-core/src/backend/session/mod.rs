//! [`SessionLocks`]: a backend made of a server's session locks, the locks a database
//! keeps for the connection that took them until it gives them back or goes away
//! (PostgreSQL's advisory locks, MySQL's `GET_LOCK`), with lock-core's guards, watchdog
//! and reentrancy around them. A store supplies the statements ([`LockSession`]) and how
//! to open a session ([`SessionServer`]); the rules between owners, the sessions and the
//! leases live here once.
//!
//! - **Where they live**: on dedicated connections that nothing resets or shares; at
//!   most a given number of them carry the locks taken without waiting (a name always
//!   on the same one), and a waiter waits inside the server on a session of its own,
//!   which then keeps the lock it waited for.
//! - **Between this client's owners** the client decides (`held.rs`): a server session
//!   gets its own lock again at once, so it cannot tell two owners of one client apart.
//! - **Waiting**: inside the server, bounded by the caller's time left: the server
//!   grants the lock to the waiter the moment it comes free, with no notification and no
//!   second request.
//! - **Holds end** when the session ends (the server frees them), when released, or when
//!   their lease runs out unrenewed: the client gives the lock back then (`leases.rs`;
//!   the watchdog renews, and each renewal checks the session is alive, so a dead
//!   session is a lost hold within one renewal interval).
//!
//! What such a backend cannot do: leases held by the server (a lease is a deadline the
//! client keeps), fair locks, retried requests answered once (a lost answer is a broken
//! session, and its locks go with it), hand-over, introspection, synchronizers.

mod carriers;
mod contract;
mod held;
mod leases;
#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use foldhash::HashMap;
use tokio::sync::{Mutex as AsyncMutex, Notify};
use tokio::time::Instant;

use crate::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, LockKind, LockRef, LockState, Release,
    ReleaseRequest, Renewal,
};
use crate::background::runtime::to_the_end;
use crate::notify::{InProcess, Listener, Subscriptions, Wake};
use crate::{Error, LockName};
pub use carriers::Sessions;
pub use contract::{LockSession, SessionServer, Taken};
use held::{Decision, Held, Unlock};

/// How long a waiter that may not wait inside the server (a composite lock's part, or
/// one beyond the client's waiting statements) waits before it asks again, at most.
const ASK_AGAIN_WITHIN: Duration = Duration::from_millis(100);

/// One name's record, behind the lock that orders this client's operations on it.
type Slot<T> = Arc<AsyncMutex<Option<Held<T>>>>;

/// Locks as a server's session locks: see the [module](self).
pub struct SessionLocks<S: SessionServer> {
    state: Arc<State<S>>,
}

impl<S: SessionServer> fmt::Debug for SessionLocks<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionLocks")
            .field("sessions", &self.state.sessions)
            .finish_non_exhaustive()
    }
}

/// What the backend's operations share with the tasks they run in.
struct State<S: SessionServer> {
    sessions: Sessions<S>,
    names: Mutex<HashMap<LockName, Slot<S::Session>>>,
    /// This client's waiters that cannot wait inside the server listen here; the
    /// client's own releases wake them.
    subscriptions: Subscriptions,
    /// Rung when a lease is set that ends before the task that ends leases next looks,
    /// so that it looks again.
    leases_changed: Arc<Notify>,
    /// When the task that ends leases looks next (`None`: while it looks, and before).
    next_look: Mutex<Option<Instant>>,
}

impl<S: SessionServer> SessionLocks<S> {
    /// What the backend can do: its server's [`SessionServer::CAPABILITIES`].
    pub const CAPABILITIES: Capabilities = S::CAPABILITIES;

    /// A backend on `server`, with at most `carriers` (at least one) sessions carrying
    /// the locks taken without waiting, and as many statements waiting inside the
    /// server at once. Opens no session: the first is opened when first needed.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime: it starts the task that ends leases.
    #[must_use]
    pub fn new(server: S, carriers: usize) -> Self {
        let leases_changed = Arc::new(Notify::new());
        let state = Arc::new(State {
            sessions: Sessions::new(server, carriers),
            names: Mutex::default(),
            subscriptions: Subscriptions::new(Arc::new(InProcess)),
            leases_changed: Arc::clone(&leases_changed),
            next_look: Mutex::new(None),
        });
        tokio::spawn(leases::end_leases(Arc::downgrade(&state), leases_changed));
        Self { state }
    }

    /// The client's sessions (for a store's checks at connect, and for diagnostics).
    #[must_use]
    pub fn sessions(&self) -> &Sessions<S> {
        &self.state.sessions
    }

    /// The session this client holds `name`'s lock on, if it holds it (for diagnostics
    /// and tests: ending the session loses every lock on it).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe.
    pub async fn session_of(&self, name: &LockName) -> Option<Arc<S::Session>> {
        let slot = self.state.slot(name);
        let session = slot
            .lock()
            .await
            .as_ref()
            .map(|held| Arc::clone(held.session()));
        self.state.forget_if_unused(name, &slot);
        session
    }

    /// The names this client's waiters listen on (for diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.state.subscriptions.channels()
    }

    /// Runs `operation` on the state to its end (see [`to_the_end`]), so that a caller
    /// that goes away never leaves a server lock taken or given back without its record.
    async fn run<T, F>(&self, operation: impl FnOnce(Arc<State<S>>) -> F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, Error>> + Send + 'static,
    {
        to_the_end(operation(Arc::clone(&self.state))).await
    }
}

impl<S: SessionServer> State<S> {
    fn server(&self) -> &S {
        self.sessions.server()
    }

    /// The record of `name`, made empty when there is none.
    fn slot(&self, name: &LockName) -> Slot<S::Session> {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(names.entry(name.clone()).or_default())
    }

    /// Forgets an empty record nobody else is using.
    fn forget_if_unused(&self, name: &LockName, slot: &Slot<S::Session>) {
        let mut names = self.names.lock().unwrap_or_else(PoisonError::into_inner);
        let unused =
            Arc::strong_count(slot) == 2 && slot.try_lock().is_ok_and(|record| record.is_none());
        if unused {
            names.remove(name);
        }
    }

    /// Brings a record up to date: a broken session's holds are gone (the server ended
    /// them), and grants whose lease ran out end (their locks given back).
    async fn settle(&self, name: &LockName, record: &mut Option<Held<S::Session>>) {
        if record
            .as_ref()
            .is_some_and(|held| held.session().is_broken())
        {
            *record = None;
            self.subscriptions.deliver(name.as_str(), Wake::All);
            return;
        }
        let ended = Held::expire(record, Instant::now());
        self.give_back(name, record.as_ref(), ended).await;
    }

    /// Gives the server locks in `unlocks` back, wakes this client's waiters when the
    /// name came free, and takes back a waiter's session that holds nothing now.
    async fn give_back(
        &self,
        name: &LockName,
        record: Option<&Held<S::Session>>,
        unlocks: Vec<Unlock<S::Session>>,
    ) {
        if unlocks.is_empty() {
            return;
        }
        let key = self.server().key(name);
        for Unlock { session, shared } in unlocks {
            if let Err(err) = session.unlock(&key, shared).await {
                // The session is broken by then: the server ends it, and the lock with it.
                tracing::warn!(
                    target: crate::TRACING_TARGET,
                    name = name.as_str(),
                    error = %err,
                    "a session lock could not be given back; its session is given up"
                );
            }
            let holds_nothing = record.is_none_or(|held| !Arc::ptr_eq(held.session(), &session));
            if holds_nothing {
                self.sessions.give_back(session);
            }
        }
        self.subscriptions.deliver(name.as_str(), Wake::All);
    }

    async fn acquire(&self, lock: LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let slot = self.slot(&lock.name);
        let answer = self.acquire_in(&lock, request, &slot).await;
        self.forget_if_unused(&lock.name, &slot);
        answer
    }

    async fn acquire_in(
        &self,
        lock: &LockRef,
        request: AcquireRequest,
        slot: &Slot<S::Session>,
    ) -> Result<Acquire, Error> {
        let mut record = slot.lock().await;
        self.settle(&lock.name, &mut record).await;
        let now = Instant::now();
        let until = now + request.lease;
        let name = lock.name.as_str();
        let fencing = request.fencing.then_some(name);
        let key = self.server().key(&lock.name);
        let busy_for = match Held::decide(record.as_ref(), lock, now) {
            Decision::Here => {
                let held = record
                    .as_mut()
                    .ok_or_else(|| Error::protocol("a grant here without a record"))?;
                let fresh = held.join(lock, request.id, until);
                if fresh && request.fencing {
                    match held.session().token(name).await {
                        Ok(token) => held.set_token(lock, token),
                        Err(err) => {
                            let (_, unlocks) = Held::end(&mut record, lock, request.id, until);
                            self.give_back(&lock.name, record.as_ref(), unlocks).await;
                            return Err(err);
                        }
                    }
                }
                return Ok(self.acquired(lock, record.as_ref(), (fresh, until)));
            }
            Decision::Server { shared, on } => {
                let session = match on {
                    Some(session) => session,
                    None => self.sessions.carrier(self.server().slot(&key)).await?,
                };
                let taken = session.try_lock(&key, shared, fencing).await?;
                if let Taken::Granted(token) = taken {
                    return self
                        .record(lock, &mut record, &session, (request, until, token))
                        .await;
                }
                None
            }
            Decision::HeldHere { ends_in } => Some(ends_in),
            Decision::WouldDeadlock => return Err(Error::would_deadlock(name)),
        };
        let Some(wait) = request.may_block_for() else {
            let ttl = busy_for.map_or(ASK_AGAIN_WITHIN, |left| left.min(ASK_AGAIN_WITHIN));
            return Ok(Acquire::Busy {
                ttl: Some(ttl),
                reserved: false,
            });
        };
        let Some(leave) = self.sessions.may_wait() else {
            // As many statements wait inside the server as the client allows: this
            // waiter asks again soon instead (or when this client releases the name).
            return Ok(Acquire::Busy {
                ttl: Some(ASK_AGAIN_WITHIN),
                reserved: false,
            });
        };
        // The wait happens with the name's record free: this client's own releases of the
        // name must reach the server while it lasts.
        drop(record);
        let session = self.sessions.for_a_waiter().await?;
        let shared = lock.kind == LockKind::Read;
        let waited = session.lock(&key, shared, fencing, wait).await;
        drop(leave);
        let token = match waited {
            Ok(Taken::Granted(token)) => token,
            Ok(Taken::Busy) => {
                self.sessions.give_back(session);
                return Ok(Acquire::Busy {
                    ttl: Some(Duration::ZERO),
                    reserved: false,
                });
            }
            Err(err) => {
                self.sessions.give_back(session);
                return Err(err);
            }
        };
        let mut record = slot.lock().await;
        self.settle(&lock.name, &mut record).await;
        self.record(lock, &mut record, &session, (request, until, token))
            .await
    }

    /// Records a grant the server made on `session`.
    async fn record(
        &self,
        lock: &LockRef,
        record: &mut Option<Held<S::Session>>,
        session: &Arc<S::Session>,
        (request, until, token): (AcquireRequest, Instant, Option<u64>),
    ) -> Result<Acquire, Error> {
        match Held::granted(record, lock, session, (request.id, until, token)) {
            Ok((fresh, extra)) => {
                if let Some(extra) = extra {
                    self.give_back(&lock.name, record.as_ref(), vec![extra])
                        .await;
                }
                Ok(self.acquired(lock, record.as_ref(), (fresh, until)))
            }
            Err(unlock) => {
                tracing::error!(
                    target: crate::TRACING_TARGET,
                    name = lock.name.as_str(),
                    "the server granted a session lock this client's record says it holds \
                     on another session; the grant is given back"
                );
                self.give_back(&lock.name, record.as_ref(), vec![unlock])
                    .await;
                Ok(Acquire::Busy {
                    ttl: Some(Duration::ZERO),
                    reserved: false,
                })
            }
        }
    }

    /// The reply to a grant now in the record, whose lease ends at `until`.
    fn acquired(
        &self,
        lock: &LockRef,
        record: Option<&Held<S::Session>>,
        (fresh, until): (bool, Instant),
    ) -> Acquire {
        self.lease_set(until);
        let hold = record.and_then(|held| held.hold(lock));
        Acquire::Acquired {
            holds: hold.map_or(1, held::Hold::count),
            token: hold.and_then(held::Hold::token).filter(|_| fresh),
            origin: hold.map(held::Hold::origin),
        }
    }

    async fn release(&self, lock: LockRef, request: ReleaseRequest) -> Release {
        let slot = self.slot(&lock.name);
        let answer = {
            let mut record = slot.lock().await;
            self.settle(&lock.name, &mut record).await;
            let until = Instant::now() + request.lease;
            let session = record.as_ref().map(|held| Arc::clone(held.session()));
            let (left, unlocks) = Held::end(&mut record, &lock, request.grant, until);
            self.give_back(&lock.name, record.as_ref(), unlocks).await;
            // A session found dead while giving the lock back had lost it already (the
            // server ended it, and its holds with it): the hold was not this release's.
            let lost = session.is_some_and(|session| session.is_broken());
            match left {
                None => Release::NotHeld,
                Some(_) if lost => Release::NotHeld,
                Some(0) => Release::Released,
                Some(holds) => Release::StillHeld { holds },
            }
        };
        self.forget_if_unused(&lock.name, &slot);
        answer
    }

    async fn renew(&self, locks: Vec<LockRef>, lease: Duration) -> Vec<Renewal> {
        // Each session the holds are on is checked once, then the holds are renewed.
        let mut sessions: Vec<Arc<S::Session>> = Vec::new();
        for lock in &locks {
            let slot = self.slot(&lock.name);
            let mut record = slot.lock().await;
            self.settle(&lock.name, &mut record).await;
            if let Some(held) = record.as_ref()
                && !sessions
                    .iter()
                    .any(|seen| Arc::ptr_eq(seen, held.session()))
            {
                sessions.push(Arc::clone(held.session()));
            }
        }
        for session in &sessions {
            if let Err(err) = session.ping().await {
                tracing::warn!(
                    target: crate::TRACING_TARGET,
                    session = ?session,
                    error = %err,
                    "a lock session did not answer; its locks are lost"
                );
            }
        }
        let until = Instant::now() + lease;
        let mut renewed = Vec::with_capacity(locks.len());
        for lock in &locks {
            let slot = self.slot(&lock.name);
            let origin = {
                let mut record = slot.lock().await;
                self.settle(&lock.name, &mut record).await;
                record.as_mut().and_then(|held| held.renew(lock, until))
            };
            self.forget_if_unused(&lock.name, &slot);
            renewed.push(origin.map_or(Renewal::Gone, |origin| Renewal::Renewed {
                origin: Some(origin),
            }));
        }
        renewed
    }

    async fn inspect(&self, lock: LockRef) -> Result<LockState, Error> {
        let slot = self.slot(&lock.name);
        let here = {
            let mut record = slot.lock().await;
            self.settle(&lock.name, &mut record).await;
            let now = Instant::now();
            record
                .as_ref()
                .filter(|held| held.has_side(lock.kind))
                .map(|held| {
                    let holds = held.hold(&lock).map_or(0, held::Hold::count);
                    let ttl = held.ends().map(|end| end.saturating_duration_since(now));
                    LockState::new(true, holds, ttl)
                })
        };
        self.forget_if_unused(&lock.name, &slot);
        if let Some(state) = here {
            return Ok(state);
        }
        let key = self.server().key(&lock.name);
        let carrier = self.sessions.carrier(self.server().slot(&key)).await?;
        let shared = lock.kind == LockKind::Read;
        let held = carrier.held_elsewhere(&key, shared).await?;
        Ok(LockState::new(held, 0, None))
    }

    async fn force_release(&self, lock: LockRef) -> Result<bool, Error> {
        let slot = self.slot(&lock.name);
        let here = {
            let mut record = slot.lock().await;
            self.settle(&lock.name, &mut record).await;
            let (was, unlocks) = Held::clear(&mut record, lock.kind);
            self.give_back(&lock.name, record.as_ref(), unlocks).await;
            was
        };
        self.forget_if_unused(&lock.name, &slot);
        if here {
            return Ok(true);
        }
        let key = self.server().key(&lock.name);
        let carrier = self.sessions.carrier(self.server().slot(&key)).await?;
        let shared = lock.kind == LockKind::Read;
        carrier.end_holders(&key, shared).await
    }
}

#[async_trait]
impl<S: SessionServer> Backend for SessionLocks<S> {
    fn capabilities(&self) -> Capabilities {
        S::CAPABILITIES
    }

    /// Cancel-safe: the operation runs in a task of its own, which records (or gives
    /// back) what the server granted even when the caller went away.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.state.server().check(lock)?;
        let lock = lock.clone();
        self.run(move |state| async move { state.acquire(lock, request).await })
            .await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.state.server().check(lock)?;
        let lock = lock.clone();
        self.run(move |state| async move { Ok(state.release(lock, request).await) })
            .await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let locks = locks.to_vec();
        let count = locks.len();
        let renewed = self
            .run(move |state| async move { Ok(state.renew(locks, lease).await) })
            .await;
        match renewed {
            Ok(renewed) => renewed,
            Err(err) => (0..count).map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.state.server().check(lock)?;
        let lock = lock.clone();
        self.run(move |state| async move { state.inspect(lock).await })
            .await
    }

    /// Frees `lock`: this client's holds of it are given back; a hold of another client
    /// is ended with the server session it is on, which ends every other lock of that
    /// session too (its client finds them lost).
    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.state.server().check(lock)?;
        let lock = lock.clone();
        self.run(move |state| async move { state.force_release(lock).await })
            .await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.state.subscriptions.listen(lock.name.as_str()).await
    }
}
