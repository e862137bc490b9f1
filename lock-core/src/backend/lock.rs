//! The lock operations: [`Backend`] and the requests and answers it exchanges.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::{
    Capabilities, ExpirableSemaphoreBackend, Introspect, LatchBackend, LockRef, RequestId,
    SemaphoreBackend, Unsupported,
};
use crate::Error;
use crate::notify::Listener;

/// How long a backend remembers a request's answer by default, for its retries.
pub const DEFAULT_RETRY_WINDOW: Duration = Duration::from_secs(5);

/// The reply to an acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquire {
    /// The lock is now held; `holds` is the owner's hold count after this acquisition.
    /// The grant is known by the request's id from now on: a release names it.
    Acquired {
        /// Hold count after this acquisition (1 for a fresh acquisition).
        holds: u32,
        /// The fencing token of a fresh acquisition, when the request asked for one.
        token: Option<u64>,
        /// The id of the grant that began the owner's hold this grant belongs to (its own
        /// id for a fresh acquisition): two grants with the same origin share one hold in
        /// the store, and a different origin means the earlier hold ended there. `None`
        /// from a backend that does not tell.
        origin: Option<RequestId>,
    },
    /// Someone else holds the lock, or it is free but reserved for a starving waiter.
    Busy {
        /// The lock's remaining lease (or the reservation's), if it has one: the longest a
        /// waiter should sleep without a notification.
        ttl: Option<Duration>,
        /// The lock is free but reserved for another owner's starving waiter. That waiter
        /// may be in this client, so local waiters should all look again.
        reserved: bool,
    },
    /// The acquisition this request belongs to is over, and nothing was granted: its
    /// grant ended (released, given back, revoked by a force-release, or lapsed before
    /// its take-up), or the acquisition was cancelled. A store grants an acquisition id
    /// at most once and never after it ended, so a late copy of an earlier attempt takes
    /// nothing. A caller that still waits goes on under a fresh id; a hold taken from a
    /// hand-over notice whose take-up is answered so is lost.
    Ended,
}

/// How long a fair-lock waiter keeps its place between its own attempts by default.
pub const DEFAULT_PLACE_KEPT_FOR: Duration = Duration::from_secs(5);

/// How a caller that waits for a busy lock is waiting: the hints a backend interprets as
/// its [`Capabilities`] allow, and ignores otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Waiting {
    /// How long the caller has waited so far; among starving waiters the one that started
    /// waiting first goes first.
    pub waited: Duration,
    /// The caller has waited past the starvation threshold. With
    /// [`Capabilities::reservation`], a starving waiter that finds the lock busy reserves
    /// its next free moment, so that newcomers cannot keep overtaking it (in the manner of
    /// Go's `sync.Mutex` starvation mode).
    pub starving: bool,
    /// Fair locks: how long a queued waiter keeps its place without asking again; a
    /// waiter that died is skipped after this.
    pub place_kept_for: Duration,
    /// With [`Capabilities::wakes_one_client`], a release may wake this caller's client
    /// alone. Composite backends turn it off for their parts: each part would choose
    /// its own client, and none might then win every part (or a majority).
    pub wakes_alone: bool,
    /// Which attempt of its acquisition this is, counted from 1 (0: not counted). A
    /// backend that hands locks over ([`Capabilities::hands_over`]) names, in its
    /// hand-over notification, the latest attempt the store ran before the hand-over
    /// ([`Handed`](crate::notify::Handed)): the waiter then knows from when the handed
    /// hold's lease counts at the latest.
    pub attempt: u32,
    /// With [`Capabilities::waits_in_store`], how long this attempt may wait inside the
    /// store for the lock to come free before it answers busy: the caller's time left
    /// (bounded), `None` for an attempt that must answer at once (a composite lock's
    /// part, which must not wait on one part while it holds others).
    pub block_for: Option<Duration>,
}

impl Default for Waiting {
    fn default() -> Self {
        Self {
            waited: Duration::ZERO,
            starving: false,
            place_kept_for: DEFAULT_PLACE_KEPT_FOR,
            wakes_alone: true,
            attempt: 0,
            block_for: None,
        }
    }
}

/// What an acquire attempt asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lease to set (the watchdog's lease, or the caller's).
    pub lease: Duration,
    /// Return a fencing token on a fresh acquisition: a number strictly greater than every
    /// token issued before for this name.
    pub fencing: bool,
    /// Set when the caller waits if the lock is busy (a `try_lock` does not): a fair lock
    /// queues it, and a composite lock may keep what it took. Such a caller later
    /// succeeds or calls [`Backend::cancel_wait`].
    pub wait: Option<Waiting>,
    /// This request's id. A grant is remembered under it for `retry_window`: the same
    /// request sent again (its reply was lost) gets that grant back instead of a second
    /// hold. With [`Capabilities::hands_over`] it is the same for every attempt of one
    /// acquisition, and a grant the backend made to the waiting acquisition between its
    /// attempts (a hand-over on release) is found by its next attempt. Busy answers are
    /// not remembered. Composite backends pass it on to their parts.
    ///
    /// [`Capabilities::hands_over`]: super::Capabilities::hands_over
    pub id: RequestId,
    /// How long the caller may send the request again.
    pub retry_window: Duration,
}

impl AcquireRequest {
    /// A plain attempt with `lease`.
    #[must_use]
    pub fn new(lease: Duration) -> Self {
        Self {
            lease,
            fencing: false,
            wait: None,
            id: RequestId::random(),
            retry_window: DEFAULT_RETRY_WINDOW,
        }
    }

    /// The same request under a fresh id: a new attempt, not a retry of the last one.
    #[must_use]
    pub fn fresh_id(mut self) -> Self {
        self.id = RequestId::random();
        self
    }

    /// Sets how long the caller may retry the request (and the backend remember it).
    #[must_use]
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.retry_window = window;
        self
    }

    /// Asks for a fencing token on a fresh acquisition.
    #[must_use]
    pub fn fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// The caller waits when the lock is busy; a fair lock keeps its place for
    /// `place_kept_for` between attempts.
    #[must_use]
    pub fn enqueue(mut self, place_kept_for: Duration) -> Self {
        let wait = self.wait.get_or_insert_with(Waiting::default);
        wait.place_kept_for = place_kept_for;
        self
    }

    /// The caller has waited `waited` so far, `starving` when past the starvation
    /// threshold (it waits, as after [`AcquireRequest::enqueue`]).
    #[must_use]
    pub fn waiting(mut self, waited: Duration, starving: bool) -> Self {
        let wait = self.wait.get_or_insert_with(Waiting::default);
        wait.waited = waited;
        wait.starving = starving;
        self
    }

    /// Numbers this attempt of a waiting acquisition (see [`Waiting::attempt`]).
    #[must_use]
    pub fn attempt(mut self, attempt: u32) -> Self {
        if let Some(wait) = self.wait.as_mut() {
            wait.attempt = attempt;
        }
        self
    }

    /// Lets this attempt of a waiting acquisition wait inside the store for up to `wait`
    /// (see [`Waiting::block_for`]); a zero `wait` lets it wait not at all.
    #[must_use]
    pub fn block_for(mut self, wait: Duration) -> Self {
        if let Some(waiting) = self.wait.as_mut() {
            waiting.block_for = (!wait.is_zero()).then_some(wait);
        }
        self
    }

    /// How long this attempt may wait inside the store (see [`Waiting::block_for`]).
    #[must_use]
    pub fn may_block_for(&self) -> Option<Duration> {
        self.wait.and_then(|wait| wait.block_for)
    }

    /// Whether the caller waits when the lock is busy.
    #[must_use]
    pub fn waits(&self) -> bool {
        self.wait.is_some()
    }

    /// Whether the caller waits and a release may wake its client alone (see
    /// [`Waiting::wakes_alone`]).
    #[must_use]
    pub fn waits_to_be_woken_alone(&self) -> bool {
        self.wait.is_some_and(|wait| wait.wakes_alone)
    }

    /// The same request for a part of a composite lock: a release of the part wakes
    /// every waiting client, never one alone (see [`Waiting::wakes_alone`]), and the
    /// part answers at once (see [`Waiting::block_for`]).
    #[must_use]
    pub fn for_a_part(mut self) -> Self {
        if let Some(wait) = self.wait.as_mut() {
            wait.wakes_alone = false;
            wait.block_for = None;
        }
        self
    }
}

/// What a release asks for: the end of one grant.
///
/// A release names the grant it ends by the id of the acquire request that got it. The
/// backend removes exactly that grant, and only while it is alive (granted, not ended,
/// its hold not expired or replaced): a release never ends someone else's grant, nor a
/// later grant of the same owner. The undo of a grant whose answer never arrived is the
/// same request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReleaseRequest {
    /// The lease to re-arm when holds remain.
    pub lease: Duration,
    /// The grant this release ends: the id of the acquire request that got it.
    pub grant: RequestId,
    /// This request's id: the answer is remembered under it for `retry_window`, so the
    /// release sent again after a lost reply never releases a second hold.
    pub id: RequestId,
    /// How long the caller may send the request again.
    pub retry_window: Duration,
    /// Every attempt of the grant's acquisition was sent once and answered, as the
    /// caller saw it: no copy of one is on its way, so once this release ends the grant
    /// the store need not remember the acquisition (a store that keeps what it knows of
    /// each id in the name's state drops it, and the state stays small however often
    /// the name is taken). False unless the caller knows: a layer that sends requests
    /// of its own (a composite lock's parts) passes false on.
    pub settled: bool,
    /// An earlier release of the same name by the same client whose answer the caller
    /// got: it is never sent again, so a store that keeps release answers in the name's
    /// state may forget that one now.
    pub answered_before: Option<RequestId>,
}

impl ReleaseRequest {
    /// The end of `grant`, re-arming `lease` on the holds left, with a fresh id.
    #[must_use]
    pub fn new(lease: Duration, grant: RequestId) -> Self {
        Self {
            lease,
            grant,
            id: RequestId::random(),
            retry_window: DEFAULT_RETRY_WINDOW,
            settled: false,
            answered_before: None,
        }
    }

    /// Names an earlier release of the same name whose answer the caller got (see
    /// [`ReleaseRequest::answered_before`](field@ReleaseRequest::answered_before)).
    #[must_use]
    pub fn answered_before(mut self, earlier: Option<RequestId>) -> Self {
        self.answered_before = earlier;
        self
    }

    /// The request as a layer that sends requests of its own (a composite lock to its
    /// parts) passes it on: it vouches for neither the acquisition's sends nor the
    /// earlier release's.
    #[must_use]
    pub fn passed_on(self) -> Self {
        self.settled(false).answered_before(None)
    }

    /// Says whether every attempt of the grant's acquisition was sent once and answered
    /// (see [`ReleaseRequest::settled`](field@ReleaseRequest::settled)).
    #[must_use]
    pub fn settled(mut self, settled: bool) -> Self {
        self.settled = settled;
        self
    }

    /// Sets how long the caller may retry the request (and the backend remember it).
    #[must_use]
    pub fn retry_window(mut self, window: Duration) -> Self {
        self.retry_window = window;
        self
    }
}

/// The reply to a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// The last hold was released; waiters were notified.
    Released,
    /// One hold was released and `holds` remain; the lease was re-armed.
    StillHeld {
        /// Holds that remain.
        holds: u32,
    },
    /// The owner does not hold the lock; nothing changed.
    NotHeld,
}

/// The outcome of renewing one lock in a batch.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Renewal {
    /// The lease was re-armed, of the store's hold begun by grant `origin` (when the
    /// store tells): a hold of the same owner begun by another grant means the one the
    /// client renews ended there (force-released, or expired) and another began, by an
    /// attempt whose answer the client has not read yet.
    Renewed {
        /// The grant that began the hold renewed, when the store tells.
        origin: Option<RequestId>,
    },
    /// The owner no longer holds the lock: the hold is lost.
    Gone,
    /// The renewal could not be performed; the caller retries while the lease lasts.
    Failed(Error),
}

/// What an inspection of a lock found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LockState {
    /// Whether anyone holds the lock.
    pub locked: bool,
    /// How many holds the inspecting owner has.
    pub holds: u32,
    /// The remaining lease, if the lock is held and has one.
    pub ttl: Option<Duration>,
}

impl LockState {
    /// Builds a lock state.
    #[must_use]
    pub fn new(locked: bool, holds: u32, ttl: Option<Duration>) -> Self {
        Self { locked, holds, ttl }
    }
}

/// A lock store: the atomic operations every lock is built from.
///
/// # Writing a backend
///
/// A backend stores, per lock name, who holds the lock and how often (a reentrant
/// count per owner), until when (the lease), and for fair and read-write locks their
/// queue and holds; everything that spans time (waiting, renewal, guards, reentrancy
/// bookkeeping) is lock-core's. [`MemoryBackend`](crate::memory::MemoryBackend) is the
/// worked example: read it side by side with this trait. In short:
///
/// - declare what you support in [`Backend::capabilities`], the only word on it:
///   lock-core never asks for more, and optional operations you do not override answer
///   [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported) (the semaphores, the
///   expirable semaphores, the latches and introspection are each one trait, reached
///   through [`Backend::semaphores`] and its siblings: return `self` from those you
///   implement);
/// - make each operation atomic against every other client of the store, and refuse a
///   release or renewal by anyone but the recorded owner;
/// - when a lock becomes free, notify its listeners (see [`Backend::listen`] and
///   [`crate::notify::Subscriptions`]), or return a ttl from [`Acquire::Busy`] that
///   bounds how long waiters sleep;
/// - with [`Capabilities::retry_safe`], answer a request sent again under the same
///   [`RequestId`] with its first answer;
/// - run the conformance suite (`lock-conformance`) on a fixture of your backend: it
///   selects the scenarios your capabilities call for.
///
/// # Layers
///
/// A layer wraps a backend to change some of what it does (inject faults, connect on
/// first use), as opendal's layers do: it returns the wrapped backend from
/// [`Backend::inner`], writes the lock operations every backend must (passing on those
/// it leaves alone), and overrides only what it changes otherwise. The optional lock
/// operations it does not override, and the families it does not take over, go to the
/// wrapped backend. To change one semaphore operation, return `self` from
/// [`Backend::semaphores`], the wrapped backend's semaphores from
/// [`SemaphoreBackend::below`], and override that operation alone.
///
/// # Cancel safety
///
/// lock-core runs acquisitions and releases in tasks of their own, so a caller that
/// gives up does not cancel them half-way; inspections and force-releases are awaited by
/// the caller and may be dropped at any point, and any future may be dropped at a
/// runtime's shutdown. Each operation must therefore leave the store as if it ran
/// entirely or not at all (one atomic script or statement per operation gives this); a
/// retry under the same [`RequestId`] settles which.
///
/// Implementations must make each operation atomic with respect to every other client of
/// the same store, and must publish a notification to [`Backend::listen`] listeners when a
/// lock becomes free.
#[async_trait]
pub trait Backend: fmt::Debug + Send + Sync + 'static {
    /// What this backend supports. It must not change over the backend's life.
    fn capabilities(&self) -> Capabilities;

    /// For a layer (a backend that wraps another to change some of its operations: fault
    /// injection, a lazily connected node), the backend it wraps: every optional
    /// operation the layer does not override goes to it (see [Layers](Backend#layers)).
    /// A store keeps the default, `None`.
    fn inner(&self) -> Option<&dyn Backend> {
        None
    }

    /// Takes the lock (or one more hold of it) for `lock.owner` as `request` says. A
    /// request sent again with the same id (within its retry window) after it was
    /// granted answers with that grant and takes nothing more.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error>;

    /// A waiter gives up (its wait ran out, failed, or its future was dropped): a fair
    /// lock removes it from its queue (and wakes the next waiter if it was first), a
    /// composite lock releases what it kept, and with [`Capabilities::hands_over`] a
    /// hold handed over to `acquisition` (its latest request: the id is the
    /// acquisition's) and not yet taken up goes to the next waiter. Called for every
    /// waiting acquire that did not end with the lock, after its last request was
    /// answered, so implementations with nothing to undo must return at once.
    ///
    /// [`Capabilities::hands_over`]: super::Capabilities::hands_over
    /// A store with nothing to undo keeps the default (nothing to do); a layer's default
    /// passes the call on.
    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        match self.inner() {
            Some(inner) => inner.cancel_wait(lock, acquisition).await,
            None => Ok(()),
        }
    }

    /// Raises the fencing counter of `lock`'s name to at least `token`, so that every
    /// later token exceeds it. Composite locks whose parts count separately use it to
    /// keep one order across parts. Stores without [`Capabilities::fencing`] keep the
    /// default, which refuses.
    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        match self.inner() {
            Some(inner) => inner.raise_fencing(lock, token).await,
            None => Err(Error::unsupported("fencing tokens")),
        }
    }

    /// Releases one hold. When holds remain, the lease is re-armed to the request's
    /// lease. Sent again with the same id, it answers as the first time and changes
    /// nothing.
    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error>;

    /// Re-arms the lease of every lock in `locks` that its owner still holds.
    ///
    /// Returns one outcome per input, in order. Implementations batch the work (one
    /// request per batch, or per shard of a partitioned store) rather than issuing one
    /// request per lock.
    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal>;

    /// Reads the lock's state as seen by `lock.owner`.
    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error>;

    /// Deletes the lock whoever holds it and notifies waiters. Returns whether it was held.
    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error>;

    /// Starts listening for the notification that tells `lock.owner` to try again.
    ///
    /// The returned listener is subscribed when this returns, so a release published after
    /// this call is never missed. Listeners of one channel share one subscription.
    ///
    /// For a mutex and for a writer, what the listener hears must not depend on
    /// `lock.owner`: a client's waiters for one name stand in a line and pass the first
    /// one's listener on to the next (only a fair lock may wake each waiter on its own).
    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error>;

    /// A listener as [`Backend::listen`] gives, at once and without a request, when this
    /// client is subscribed to `lock`'s channel already (another waiter listens there,
    /// or the subscription lingers: see [`Subscriptions::listening`]). A waiter that
    /// gets one makes its first attempt listening, and asks once instead of twice.
    ///
    /// The default, `None`, makes every waiter ask before it listens. A layer keeps it
    /// unless it passes [`Backend::listen`] on unchanged.
    ///
    /// [`Subscriptions::listening`]: crate::notify::Subscriptions::listening
    fn listener_at_hand(&self, lock: &LockRef) -> Option<Listener> {
        let _ = lock;
        None
    }

    /// Waits for the work this backend started in the background on its own (a composite
    /// lock giving back a grant that came too late, or finishing a release it answered
    /// before every node did). [`Locks::shutdown`](crate::Locks::shutdown) awaits it after
    /// the client's own jobs. A store with no such work keeps the default, which returns
    /// at once; a layer's default passes the call on.
    ///
    /// Must be cancel-safe: it only waits, and the work goes on.
    async fn settle(&self) {
        if let Some(inner) = self.inner() {
            inner.settle().await;
        }
    }

    /// The count-down latches of this store. A store that declares
    /// [`Capabilities::count_down_latch`] returns itself; the default is the inner
    /// backend's for a layer, and for a store latches that answer
    /// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported).
    fn latches(&self) -> &dyn LatchBackend {
        self.inner().map_or(&Unsupported, |inner| inner.latches())
    }

    /// The semaphores of this store: as [`Backend::latches`], for
    /// [`Capabilities::semaphore`].
    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self.inner()
            .map_or(&Unsupported, |inner| inner.semaphores())
    }

    /// The expirable semaphores of this store: as [`Backend::latches`], for
    /// [`Capabilities::expirable_semaphore`].
    fn expirable_semaphores(&self) -> &dyn ExpirableSemaphoreBackend {
        self.inner()
            .map_or(&Unsupported, |inner| inner.expirable_semaphores())
    }

    /// Who holds this store's locks: as [`Backend::latches`], for
    /// [`Capabilities::introspection`].
    fn introspection(&self) -> &dyn Introspect {
        self.inner()
            .map_or(&Unsupported, |inner| inner.introspection())
    }
}
