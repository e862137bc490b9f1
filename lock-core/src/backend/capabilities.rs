//! What a backend can do: [`HoldModel`] and [`Capabilities`].

use std::time::Duration;

use super::LockKind;

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

/// What a backend supports, declared by [`Backend::capabilities`](super::Backend::capabilities).
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
    /// Fencing tokens ([`AcquireRequest::fencing`](super::AcquireRequest::fencing) and [`Backend::raise_fencing`](super::Backend::raise_fencing)).
    pub fencing: bool,
    /// How holds end when nobody releases them.
    pub holds: HoldModel,
    /// The backend remembers answers under [`RequestId`](super::RequestId)s, so that a request whose reply
    /// was lost can be sent again without counting twice.
    pub retry_safe: bool,
    /// A starving waiter's attempt reserves the lock's next free moment
    /// ([`AcquireRequest::waiting`](super::AcquireRequest::waiting)).
    pub reservation: bool,
    /// Other processes share the locks (a server); `false` for an in-process store.
    pub shared: bool,
    /// Count-down latches ([`Backend::latches`](super::Backend::latches)).
    pub count_down_latch: bool,
    /// Semaphores ([`Backend::semaphores`](super::Backend::semaphores)).
    pub semaphore: bool,
    /// Expirable semaphores ([`Backend::expirable_semaphores`](super::Backend::expirable_semaphores)).
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
    /// A release of a mutex or a fair lock may hand it over to a waiting acquisition
    /// between its attempts, under the acquisition's request id, which its next attempt
    /// finds. lock-core then asks under one id for every attempt of an acquisition;
    /// otherwise each attempt has an id of its own (a composite lock must: it releases
    /// what a failed attempt took on its parts, and a released grant's id grants
    /// nothing more).
    pub hands_over: bool,
    /// The store says who holds its locks ([`Backend::introspection`]).
    ///
    /// [`Backend::introspection`]: super::Backend::introspection
    pub introspection: bool,
    /// An attempt of a waiting acquisition may wait inside the store, for as long as its
    /// [`Waiting::block_for`](super::Waiting::block_for) says, and the store grants the
    /// lock to it the moment it comes free (PostgreSQL's advisory locks): the hand-over
    /// needs no notification and no second request. lock-core then bounds each attempt
    /// by the caller's deadline.
    pub waits_in_store: bool,
    /// The longest lease the store grants, if it bounds leases; lock-core refuses a
    /// longer one with a typed error before anything is sent. A store whose safety after
    /// losing its last writes rests on waiting out every lease it may have granted (a
    /// failover's quarantine) must bound them: it cannot know a lease the lost writes took
    /// with them.
    pub max_lease: Option<Duration>,
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
            hands_over: false,
            introspection: false,
            waits_in_store: false,
            max_lease: None,
        }
    }

    /// Sets [`Capabilities::max_lease`].
    pub const fn max_lease(mut self, longest: Option<Duration>) -> Self {
        self.max_lease = longest;
        self
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

    /// Sets [`Capabilities::introspection`].
    pub const fn introspection(mut self, yes: bool) -> Self {
        self.introspection = yes;
        self
    }

    /// Sets [`Capabilities::hands_over`].
    pub const fn hands_over(mut self, yes: bool) -> Self {
        self.hands_over = yes;
        self
    }

    /// Sets [`Capabilities::waits_in_store`].
    pub const fn waits_in_store(mut self, yes: bool) -> Self {
        self.waits_in_store = yes;
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
    /// capability only if every one has it; lease-based if any one is; the shortest of
    /// their longest leases.
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
            hands_over: common.hands_over && next.hands_over,
            introspection: common.introspection && next.introspection,
            waits_in_store: common.waits_in_store && next.waits_in_store,
            max_lease: match (common.max_lease, next.max_lease) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
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
