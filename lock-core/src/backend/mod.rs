//! The contract between the lock state machines and a storage backend.
//!
//! A backend executes single, atomic lock operations (acquire, release, renew, inspect,
//! force-release) and delivers release notifications. Everything that spans time (waiting,
//! renewal, guards, reentrancy bookkeeping) lives in lock-core and is the same for every
//! backend. The trait is object-safe so that composite locks can mix backends.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::notify::Listener;
use crate::{Error, LockName};

mod expirable;

pub use expirable::{ExpirableSemaphoreBackend, Issue, IssueRequest, PermitId, ReturnRequest};

/// Which lock primitive an operation is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// The reentrant mutex.
    Mutex,
    /// The reentrant fair mutex: waiters are served in arrival order.
    Fair,
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
}

impl LockKind {
    /// A short, stable label, used in metrics and logs.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Mutex => "mutex",
            Self::Fair => "fair",
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

impl fmt::Display for LockKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The owner string stored in the backend: `"<client-uuid>:<holder>"`. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// Builds the owner string of `holder` on the client identified by `client_id`.
    #[must_use]
    pub fn new(client_id: &str, holder: &str) -> Self {
        Self::from_pieces(&[client_id, ":", holder])
    }

    /// The owner string made of `pieces`, in one allocation (an owner is made for every
    /// operation outside a holder's scope).
    pub(crate) fn from_pieces(pieces: &[&str]) -> Self {
        Self(Arc::from(concat(pieces)))
    }

    /// The owner string as stored.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `pieces` joined into a string kept on the stack when it is short, so that turning it
/// into an `Arc<str>` is its only allocation.
pub(crate) fn concat(pieces: &[&str]) -> Concat {
    let len = pieces.iter().map(|piece| piece.len()).sum();
    if len > SHORT {
        return Concat::Long(pieces.concat());
    }
    let mut bytes = [0; SHORT];
    let mut at = 0;
    for piece in pieces {
        bytes[at..at + piece.len()].copy_from_slice(piece.as_bytes());
        at += piece.len();
    }
    Concat::Short { bytes, len }
}

/// How long a string [`concat`] keeps on the stack: a client id, a `:` and a holder
/// id of a few dozen characters.
const SHORT: usize = 96;

/// A string made by [`concat`].
pub(crate) enum Concat {
    Short { bytes: [u8; SHORT], len: usize },
    Long(String),
}

impl From<Concat> for Arc<str> {
    fn from(joined: Concat) -> Self {
        match joined {
            // Whole `str`s copied one after another are UTF-8.
            Concat::Short { bytes, len } => match std::str::from_utf8(&bytes[..len]) {
                Ok(text) => Arc::from(text),
                Err(_) => Arc::from(String::from_utf8_lossy(&bytes[..len])),
            },
            Concat::Long(text) => Arc::from(text),
        }
    }
}

/// One lock as seen by one owner: the subject of every backend operation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockRef {
    /// The lock primitive.
    pub kind: LockKind,
    /// The lock's name.
    pub name: LockName,
    /// Who is asking.
    pub owner: Owner,
}

impl LockRef {
    /// Builds a lock reference.
    #[must_use]
    pub fn new(kind: LockKind, name: LockName, owner: Owner) -> Self {
        Self { kind, name, owner }
    }
}

/// Identifies one request across its retries: a backend answers a request it already
/// ran with that run's answer (within [`AcquireRequest::retry_window`]), so a request
/// whose reply was lost can be sent again without counting twice. Shown as 32 lowercase
/// hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId(u128);

impl RequestId {
    /// A fresh random id.
    #[must_use]
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }

    /// The id shown as `hex` (32 hex digits, as [`Display`](fmt::Display) shows it);
    /// `None` for anything else.
    #[must_use]
    pub fn from_hex(hex: &str) -> Option<Self> {
        if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u128::from_str_radix(hex, 16).ok().map(Self)
    }

    /// The id whose 128 bits are `high` then `low` (a store that keeps numbers of 64 bits
    /// answers with the two halves).
    #[must_use]
    pub fn from_halves(high: i64, low: i64) -> Self {
        let (high, low) = (
            u128::from(high.cast_unsigned()),
            u128::from(low.cast_unsigned()),
        );
        Self(high << 64 | low)
    }

    /// Appends the id's 32 lowercase hex digits to `out`, as [`Display`](fmt::Display)
    /// shows it, without the formatting machinery (backends put it in keys on every
    /// request).
    pub fn push_hex(self, out: &mut String) {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        // Filled in place and appended at once: pushing digit by digit checked the
        // string's room 32 times.
        let mut hex = [0u8; 32];
        for (pair, byte) in hex.chunks_exact_mut(2).zip(self.0.to_be_bytes()) {
            pair[0] = DIGITS[usize::from(byte >> 4)];
            pair[1] = DIGITS[usize::from(byte & 0xf)];
        }
        // Always ASCII digits.
        if let Ok(hex) = std::str::from_utf8(&hex) {
            out.push_str(hex);
        }
    }
}

impl fmt::Debug for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RequestId({self})")
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

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
}

impl Default for Waiting {
    fn default() -> Self {
        Self {
            waited: Duration::ZERO,
            starving: false,
            place_kept_for: DEFAULT_PLACE_KEPT_FOR,
            wakes_alone: true,
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
    /// hold. Composite backends pass it on to their parts.
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
    /// every waiting client, never one alone (see [`Waiting::wakes_alone`]).
    #[must_use]
    pub fn for_a_part(mut self) -> Self {
        if let Some(wait) = self.wait.as_mut() {
            wait.wakes_alone = false;
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
        }
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
    /// The lease was re-armed.
    Renewed,
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

/// How a backend's holds end when nobody releases them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldModel {
    /// Every hold has a lease that runs out unless renewed (the watchdog renews it while
    /// a guard lives): a crashed holder's lock comes free after one lease.
    Lease,
    /// A hold lasts as long as the owner's session with the store (a connection): the
    /// store frees it when the session ends. Leases are still honoured as deadlines.
    Session,
}

/// What a backend supports, declared by [`Backend::capabilities`].
///
/// lock-core refuses what a backend does not declare before sending anything (a fair
/// lock on a backend without [`fair`](Capabilities::fair) fails with
/// [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported)), and the conformance suite
/// runs the scenarios the declaration selects. Build one from [`Capabilities::new`] (the
/// reentrant mutex, which every backend supports) and the setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[must_use]
#[allow(
    clippy::struct_excessive_bools,
    reason = "each capability is an independent yes or no that backends declare by name"
)]
pub struct Capabilities {
    /// Fair locks ([`LockKind::Fair`]): waiters are served in arrival order.
    pub fair: bool,
    /// Read-write locks ([`LockKind::Read`] and [`LockKind::Write`]).
    pub read_write: bool,
    /// Fencing tokens ([`AcquireRequest::fencing`] and [`Backend::raise_fencing`]).
    pub fencing: bool,
    /// How holds end when nobody releases them.
    pub holds: HoldModel,
    /// The backend remembers answers under [`RequestId`]s, so that a request whose reply
    /// was lost can be sent again without counting twice.
    pub retry_safe: bool,
    /// A starving waiter's attempt reserves the lock's next free moment
    /// ([`AcquireRequest::waiting`]).
    pub reservation: bool,
    /// Other processes share the locks (a server); `false` for an in-process store.
    pub shared: bool,
    /// Count-down latches ([`Backend::latches`]).
    pub count_down_latch: bool,
    /// Semaphores ([`Backend::semaphores`]).
    pub semaphore: bool,
    /// Expirable semaphores ([`Backend::expirable_semaphores`]).
    pub expirable_semaphore: bool,
    /// A mutex release wakes one waiting client, not every client with a waiter: one
    /// attempt per release instead of one per client (where the deployment lets the
    /// backend tell; otherwise it falls back to waking every client).
    pub wakes_one_client: bool,
    /// The store serves this client's requests in the order they were first polled: a
    /// release polled before an acquisition runs before it. lock-core uses this only to
    /// go faster, never for safety: the client's next waiter for a lock asks as soon as
    /// the client's own release of it is on its way, and its request lands right behind
    /// the release. Where the order does not hold, that waiter finds the lock busy and
    /// waits for the release's notification as any other client's waiter does.
    pub ordered_requests: bool,
}

impl Capabilities {
    /// A backend of the reentrant mutex only, with holds of `holds`; the setters add the
    /// rest.
    pub const fn new(holds: HoldModel) -> Self {
        Self {
            fair: false,
            read_write: false,
            fencing: false,
            holds,
            retry_safe: false,
            reservation: false,
            shared: false,
            count_down_latch: false,
            semaphore: false,
            expirable_semaphore: false,
            wakes_one_client: false,
            ordered_requests: false,
        }
    }

    /// Sets [`Capabilities::fair`].
    pub const fn fair(mut self, yes: bool) -> Self {
        self.fair = yes;
        self
    }

    /// Sets [`Capabilities::read_write`].
    pub const fn read_write(mut self, yes: bool) -> Self {
        self.read_write = yes;
        self
    }

    /// Sets [`Capabilities::fencing`].
    pub const fn fencing(mut self, yes: bool) -> Self {
        self.fencing = yes;
        self
    }

    /// Sets [`Capabilities::retry_safe`].
    pub const fn retry_safe(mut self, yes: bool) -> Self {
        self.retry_safe = yes;
        self
    }

    /// Sets [`Capabilities::reservation`].
    pub const fn reservation(mut self, yes: bool) -> Self {
        self.reservation = yes;
        self
    }

    /// Sets [`Capabilities::shared`].
    pub const fn shared(mut self, yes: bool) -> Self {
        self.shared = yes;
        self
    }

    /// Sets [`Capabilities::count_down_latch`].
    pub const fn count_down_latch(mut self, yes: bool) -> Self {
        self.count_down_latch = yes;
        self
    }

    /// Sets [`Capabilities::semaphore`].
    pub const fn semaphore(mut self, yes: bool) -> Self {
        self.semaphore = yes;
        self
    }

    /// Sets [`Capabilities::expirable_semaphore`].
    pub const fn expirable_semaphore(mut self, yes: bool) -> Self {
        self.expirable_semaphore = yes;
        self
    }

    /// Sets [`Capabilities::wakes_one_client`].
    pub const fn wakes_one_client(mut self, yes: bool) -> Self {
        self.wakes_one_client = yes;
        self
    }

    /// Sets [`Capabilities::ordered_requests`].
    pub const fn ordered_requests(mut self, yes: bool) -> Self {
        self.ordered_requests = yes;
        self
    }

    /// Whether locks of `kind` are supported.
    #[must_use]
    pub const fn supports(self, kind: LockKind) -> bool {
        match kind {
            LockKind::Mutex => true,
            LockKind::Fair => self.fair,
            LockKind::Read | LockKind::Write => self.read_write,
        }
    }

    /// What several backends support together (a composite lock over them): a
    /// capability only if every one has it; lease-based if any one is.
    pub fn common(all: impl IntoIterator<Item = Self>) -> Self {
        let mut all = all.into_iter();
        let Some(first) = all.next() else {
            return Self::new(HoldModel::Lease);
        };
        all.fold(first, |common, next| Self {
            fair: common.fair && next.fair,
            read_write: common.read_write && next.read_write,
            fencing: common.fencing && next.fencing,
            holds: if next.holds == HoldModel::Lease {
                HoldModel::Lease
            } else {
                common.holds
            },
            retry_safe: common.retry_safe && next.retry_safe,
            reservation: common.reservation && next.reservation,
            shared: common.shared && next.shared,
            count_down_latch: common.count_down_latch && next.count_down_latch,
            semaphore: common.semaphore && next.semaphore,
            expirable_semaphore: common.expirable_semaphore && next.expirable_semaphore,
            wakes_one_client: common.wakes_one_client && next.wakes_one_client,
            ordered_requests: common.ordered_requests && next.ordered_requests,
        })
    }

    /// The name of `kind`'s capability, for errors, when it is not supported.
    #[must_use]
    pub(crate) fn missing(self, kind: LockKind) -> Option<&'static str> {
        match kind {
            _ if self.supports(kind) => None,
            LockKind::Fair => Some("fair locks"),
            _ => Some("read-write locks"),
        }
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
/// - declare what you support in [`Backend::capabilities`]; lock-core never asks for more,
///   and optional operations you do not override answer
///   [`ErrorKind::Unsupported`](crate::ErrorKind::Unsupported);
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

    /// Takes the lock (or one more hold of it) for `lock.owner` as `request` says. A
    /// request sent again with the same id (within its retry window) after it was
    /// granted answers with that grant and takes nothing more.
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error>;

    /// A waiter gives up (its wait ran out, failed, or its future was dropped): a fair
    /// lock removes it from its queue (and wakes the next waiter if it was first), a
    /// composite lock releases what it kept. Called for every waiting acquire that did
    /// not end with the lock, so implementations with nothing to undo must return at once.
    async fn cancel_wait(&self, lock: &LockRef) -> Result<(), Error> {
        let _ = lock;
        Ok(())
    }

    /// Raises the fencing counter of `lock`'s name to at least `token`, so that every
    /// later token exceeds it. Composite locks whose parts count separately use it to
    /// keep one order across parts. Backends without [`Capabilities::fencing`] keep the
    /// default, which refuses.
    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let _ = (lock, token);
        Err(Error::unsupported("fencing tokens"))
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

    /// The count-down latches of this store, when it declares
    /// [`Capabilities::count_down_latch`].
    fn latches(&self) -> Option<&dyn LatchBackend> {
        None
    }

    /// The semaphores of this store, when it declares [`Capabilities::semaphore`].
    fn semaphores(&self) -> Option<&dyn SemaphoreBackend> {
        None
    }

    /// The expirable semaphores of this store, when it declares
    /// [`Capabilities::expirable_semaphore`].
    fn expirable_semaphores(&self) -> Option<&dyn ExpirableSemaphoreBackend> {
        None
    }
}

/// Permits asked for or given back, under an id that makes a retry (after a lost reply)
/// answer as the first run instead of taking or returning them twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitRequest {
    /// How many permits.
    pub permits: u64,
    /// The request's id.
    pub id: RequestId,
    /// How long the caller may send the request again (and the store remember it).
    pub retry_window: Duration,
    /// Set when the caller has waited past the starvation threshold (acquisitions only).
    pub reserve: Option<PermitReservation>,
}

impl PermitRequest {
    /// A request for `permits` with a fresh id, remembered for `retry_window`.
    #[must_use]
    pub fn new(permits: u64, retry_window: Duration) -> Self {
        Self {
            permits,
            id: RequestId::random(),
            retry_window,
            reserve: None,
        }
    }

    /// The release of the permits granted to acquisition `grant`: see
    /// [`SemaphoreBackend::release`].
    #[must_use]
    pub fn of_grant(grant: RequestId, retry_window: Duration) -> Self {
        Self {
            permits: 0,
            id: grant,
            retry_window,
            reserve: None,
        }
    }

    /// Marks the request as a starving waiter's (see [`PermitReservation`]).
    #[must_use]
    pub fn reserving(mut self, reserve: Option<PermitReservation>) -> Self {
        self.reserve = reserve;
        self
    }
}

/// A plain semaphore's answer to an acquisition ([`SemaphoreBackend::try_acquire`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PermitAnswer {
    /// The permits were taken.
    Taken,
    /// Too few are available now, or another waiter's reservation holds them back.
    Unavailable,
    /// More than the semaphore's peak: more than it has had available at once since its
    /// count last went down (by `add_permits` with a negative delta, or `drain`). The
    /// store cannot tell how many permits exist in all (holders outside this library are
    /// counted nowhere), so such a request may only ever be served after permits are
    /// added: it reserves nothing, and holds its client's waiting line for nobody
    /// (second review, N6: a reservation for permits that do not exist starved every
    /// other acquirer for as long as it waited).
    BeyondPeak,
}

impl PermitAnswer {
    /// Whether the permits were taken.
    #[must_use]
    pub fn taken(self) -> bool {
        self == Self::Taken
    }
}

/// A waiter for permits that has waited past the starvation threshold. Its attempt,
/// when too few permits are available, reserves the number it asks for: from then on
/// every other acquirer of the store may take only permits beyond that number, until
/// this waiter gets its permits or stops asking for `kept_for`. One waiter holds a
/// semaphore's reservation at a time: the one that has waited longest (a starving
/// attempt that began waiting earlier than the holder takes the reservation over). This
/// is how a waiter for many permits is not starved by a stream of waiters for few.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PermitReservation {
    /// The waiting acquisition, the same across its attempts.
    pub waiter: RequestId,
    /// How long the reservation lasts without another attempt of the waiter.
    pub kept_for: Duration,
    /// How long the waiter has waited so far.
    pub waited: Duration,
}

impl PermitReservation {
    /// The reservation of `waiter`, which has waited `so_far`, kept `kept_for` after
    /// each attempt.
    #[must_use]
    pub fn new(waiter: RequestId, so_far: Duration, kept_for: Duration) -> Self {
        Self {
            waiter,
            kept_for,
            waited: so_far,
        }
    }
}

/// The semaphores of a store (Java's `Semaphore`, shared between services): a count
/// of available permits per name; acquiring takes some, releasing gives some back.
///
/// Names share the store's name space with its locks and latches: a name used by another
/// kind answers [`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible).
#[async_trait]
pub trait SemaphoreBackend: fmt::Debug + Send + Sync {
    /// Sets the available permits to `permits` if the semaphore has none set (absent);
    /// whether it did. Listeners are told.
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error>;

    /// Adds `delta` (possibly negative) to the available permits and returns the new
    /// count. Listeners are told.
    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error>;

    /// Takes `request.permits` if that many are available and another waiter's
    /// reservation does not hold them back ([`PermitReservation`]). A grant is kept
    /// under the request's id for as long as its permits are held (plain permits have no
    /// lease), so that it is given back exactly once. The same request sent again
    /// answers as the first time and takes nothing more; once its grant was given back,
    /// it takes nothing at all.
    ///
    /// The store keeps the semaphore's peak: the most permits available at once since
    /// the count last went down. A request for more than that reserves nothing (a
    /// reservation held by such a request holds nothing back either) and is answered
    /// [`PermitAnswer::BeyondPeak`] when it takes nothing.
    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error>;

    /// Gives back the permits of the grant of acquisition `request.id` (see
    /// [`PermitRequest::of_grant`]) if it holds them, ending it, and returns the
    /// available count after. A grant not held (never made, or given back before)
    /// changes nothing; the end is remembered for `request.retry_window`, so that a
    /// late copy of the acquisition takes nothing. Sent again, it answers as the first
    /// time, and it can be sent again for as long as it takes: it ends one grant at most
    /// once. The undo of an acquisition whose answer never came is the same request.
    /// Listeners are told.
    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error>;

    /// The available permits (0 for a semaphore never set).
    async fn available(&self, name: &LockName) -> Result<i64, Error>;

    /// Takes every available permit and returns how many there were.
    async fn drain(&self, name: &LockName) -> Result<i64, Error>;

    /// Ends `waiter`'s reservation of permits of `name`, if it holds it (a waiter that
    /// gave up).
    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error>;

    /// Starts listening for the semaphore's notifications (permits added or released).
    /// Subscribed when this returns.
    async fn listen(&self, name: &LockName) -> Result<Listener, Error>;
}

/// A count-down latch operation that changes the count: its id makes a retry (after a
/// lost reply) answer as the first run instead of counting twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchRequest {
    /// The request's id.
    pub id: RequestId,
    /// How long the caller may send the request again (and the store remember it).
    pub retry_window: Duration,
}

impl LatchRequest {
    /// A request with a fresh id, remembered for `retry_window`.
    #[must_use]
    pub fn new(retry_window: Duration) -> Self {
        Self {
            id: RequestId::random(),
            retry_window,
        }
    }
}

/// The count-down latches of a store (Java's `CountDownLatch`, shared): a count per name
/// that services count down, and waiters that all go on once it reaches zero.
///
/// A latch's name shares the store's name space with its locks: a name used by a lock
/// answers [`ErrorKind::Incompatible`](crate::ErrorKind::Incompatible).
#[async_trait]
pub trait LatchBackend: fmt::Debug + Send + Sync {
    /// Sets the count to `count` (at least 1) if the latch is open (no count); whether
    /// it did. Setting a count closes the latch again and tells its listeners.
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error>;

    /// Counts down once and returns the count left (0: the latch is open; counting down
    /// an open latch changes nothing). Reaching zero wakes every listener.
    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error>;

    /// The count left; 0 when the latch is open.
    async fn count(&self, name: &LockName) -> Result<u64, Error>;

    /// Deletes the latch (it is then open); whether there was one. Listeners are told.
    async fn delete(&self, name: &LockName) -> Result<bool, Error>;

    /// Starts listening for the latch's notifications (opened, closed again). Subscribed
    /// when this returns.
    async fn listen(&self, name: &LockName) -> Result<Listener, Error>;
}

#[cfg(test)]
mod tests {
    use super::{Owner, RequestId};

    #[test]
    fn owners_join_client_and_holder_at_any_length() {
        let client = "6f1c2a8e-0d4b-4c55-9a51-3f0e1b2c3d4e";
        for holder in [
            "h",
            "scope-12",
            &"x".repeat(58),
            &"y".repeat(59),
            &"z".repeat(300),
        ] {
            assert_eq!(
                Owner::new(client, holder).as_str(),
                format!("{client}:{holder}")
            );
        }
    }

    #[test]
    fn request_id_hex_is_its_display() {
        for id in [
            0,
            1,
            0xabc,
            u128::MAX,
            0x0123_4567_89ab_cdef_fedc_ba98_7654_3210,
        ] {
            let id = RequestId(id);
            let mut hex = String::from("key:");
            id.push_hex(&mut hex);
            assert_eq!(hex, format!("key:{id}"));
        }
        let random = RequestId::random();
        let mut hex = String::new();
        random.push_hex(&mut hex);
        assert_eq!(hex, random.to_string());
        assert_eq!(RequestId::from_hex(&hex), Some(random));
        assert_eq!(RequestId::from_hex(&hex.to_uppercase()), Some(random));
        let id = RequestId(0x8000_0000_0000_0001_0000_0000_0000_00ff);
        assert_eq!(RequestId::from_halves(i64::MIN + 1, 0xff), id);
        for bad in [
            "",
            "0",
            &hex[1..],
            &format!("{hex}0"),
            &format!("+{}", &hex[1..]),
        ] {
            assert_eq!(RequestId::from_hex(bad), None, "{bad:?}");
        }
    }
}
