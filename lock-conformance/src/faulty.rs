//! [`FaultyBackend`]: a wrapper that fails, delays or loses the replies of another
//! backend's acquisitions, for races no real network produces on demand (composite
//! locks, cancellation, replies of one owner answered out of order).

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Acquire, Capabilities, LockState, Release, Renewal};
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, Error, ExpirableSemaphoreBackend, LockName, LockRef, PermitAnswer,
    PermitId, PermitRequest, ReleaseRequest, ReturnRequest,
};

/// What the wrapper does to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AcquireFault {
    /// Forward it untouched.
    #[default]
    None,
    /// Fail without reaching the wrapped backend, as a request lost before it was sent.
    FailBeforeSending,
    /// Run the next acquisition on the wrapped backend, then report a connection error:
    /// its reply was lost after the backend acted. Later ones are forwarded again.
    LoseReply,
    /// Wait this long before forwarding it.
    DelayRequest(Duration),
    /// Wait this long, then fail without reaching the wrapped backend: a node that
    /// cannot be reached and takes its time to say so.
    FailAfter(Duration),
    /// Forward it at once, then hold back a reply that is a fresh grant (a hold count
    /// of 1) for this long, so that a later grant's reply arrives first.
    DelayFreshGrant(Duration),
}

/// A backend whose acquisitions misbehave as told, and whose releases and renewals can
/// be made to fail; every other operation is forwarded. Clones share the switches.
#[derive(Clone)]
pub struct FaultyBackend {
    inner: Arc<dyn Backend>,
    fault: Arc<Mutex<AcquireFault>>,
    failing_releases: Arc<AtomicBool>,
    failing_renewals: Arc<AtomicBool>,
    losing_renewal_replies: Arc<AtomicBool>,
    losing_release_reply: Arc<AtomicBool>,
    listen_delay: Arc<Mutex<Duration>>,
    failing_listens: Arc<std::sync::atomic::AtomicUsize>,
    permit_grant_delay: Arc<Mutex<Duration>>,
    /// How long the next expirable-permit renewal waits before it is forwarded.
    permit_renewal_delay: Arc<Mutex<Duration>>,
    /// How long plain permit requests wait before they are forwarded.
    permit_request_delay: Arc<Mutex<Duration>>,
    release_delay: Arc<Mutex<Duration>>,
    force_release_delay: Arc<Mutex<Duration>>,
    /// While `true`, release answers wait for it to turn `false`.
    release_answers_held: Arc<tokio::sync::watch::Sender<bool>>,
    /// How many lock acquisitions were asked so far; watched by [`Self::asked`].
    acquisitions: Arc<tokio::sync::watch::Sender<usize>>,
    /// While set, listeners subscribe here, where no message ever arrives.
    deaf: Arc<AtomicBool>,
    silence: lock_core::notify::Subscriptions,
}

impl fmt::Debug for FaultyBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyBackend")
            .field("inner", &self.inner)
            .field("fault", &self.fault())
            .field("failing_releases", &self.failing_releases)
            .field("failing_renewals", &self.failing_renewals)
            .field("losing_renewal_replies", &self.losing_renewal_replies)
            .field("losing_release_reply", &self.losing_release_reply)
            .field("listen_delay", &self.listen_delay)
            .field("failing_listens", &self.failing_listens)
            .field("permit_grant_delay", &self.permit_grant_delay)
            .field("permit_renewal_delay", &self.permit_renewal_delay)
            .field("permit_request_delay", &self.permit_request_delay)
            .field("release_delay", &self.release_delay)
            .field("force_release_delay", &self.force_release_delay)
            .field("release_answers_held", &*self.release_answers_held.borrow())
            .field("acquisitions", &*self.acquisitions.borrow())
            .field("deaf", &self.deaf)
            .finish_non_exhaustive()
    }
}

impl FaultyBackend {
    /// Wraps `inner`, forwarding everything until a fault is set.
    #[must_use]
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self {
            inner,
            fault: Arc::new(Mutex::new(AcquireFault::None)),
            failing_releases: Arc::new(AtomicBool::new(false)),
            failing_renewals: Arc::new(AtomicBool::new(false)),
            losing_renewal_replies: Arc::new(AtomicBool::new(false)),
            losing_release_reply: Arc::new(AtomicBool::new(false)),
            listen_delay: Arc::new(Mutex::new(Duration::ZERO)),
            failing_listens: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
            permit_grant_delay: Arc::new(Mutex::new(Duration::ZERO)),
            permit_renewal_delay: Arc::new(Mutex::new(Duration::ZERO)),
            permit_request_delay: Arc::new(Mutex::new(Duration::ZERO)),
            release_delay: Arc::new(Mutex::new(Duration::ZERO)),
            force_release_delay: Arc::new(Mutex::new(Duration::ZERO)),
            release_answers_held: Arc::new(tokio::sync::watch::Sender::new(false)),
            acquisitions: Arc::new(tokio::sync::watch::Sender::new(0)),
            deaf: Arc::new(AtomicBool::new(false)),
            silence: lock_core::notify::Subscriptions::new(Arc::new(lock_core::notify::InProcess)),
        }
    }

    /// Makes new listeners hear nothing from the wrapped backend (or hear it again): a
    /// waiter then learns of a release only from its own client, or by its lease.
    pub fn deafen_listens(&self, deaf: bool) {
        self.deaf.store(deaf, Ordering::SeqCst);
    }

    /// How many lock acquisitions were asked of this wrapper so far.
    #[must_use]
    pub fn acquisitions(&self) -> usize {
        *self.acquisitions.borrow()
    }

    /// Returns once `count` lock acquisitions were asked of this wrapper (at once if they
    /// were): a test orders its steps by this event, not by a pause.
    pub async fn asked(&self, count: usize) {
        let mut asked = self.acquisitions.subscribe();
        // The sender lives as long as `self`: the wait ends only by the count.
        drop(
            asked
                .wait_for(|asked| *asked >= count)
                .await
                .expect("the wrapper keeps its own count"),
        );
    }

    /// Returns once a waiter of this wrapper's only client listens for releases: it has
    /// asked twice, and a waiter asks a second time only once it listens (which closes
    /// the race with a release in between), so a release from now on reaches it. Fails
    /// the test after 10 s.
    pub async fn listening(&self) {
        let listening = tokio::time::timeout(Duration::from_secs(10), self.asked(2)).await;
        assert!(listening.is_ok(), "the waiter never asked a second time");
    }

    /// Makes plain permit requests wait this long before they reach the wrapped backend
    /// (a slow request: its caller may give up while it is on its way).
    pub fn delay_permit_requests(&self, delay: Duration) {
        *self
            .permit_request_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes the next renewal of expirable permits (the watchdog's; not a lease set by
    /// `update_lease`) wait this long before it reaches the wrapped backend: a renewal
    /// that lands late.
    pub fn delay_next_permit_renewal(&self, delay: Duration) {
        *self
            .permit_renewal_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes semaphore acquisitions answer this long after the wrapped backend granted
    /// them (a slow reply), so that a caller may give up while its permits are granted.
    pub fn delay_permit_grants(&self, delay: Duration) {
        *self
            .permit_grant_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes releases fail without reaching the wrapped backend (or forward again).
    pub fn fail_releases(&self, failing: bool) {
        self.failing_releases.store(failing, Ordering::SeqCst);
    }

    /// Makes releases reach the wrapped backend this long after they were sent (a slow
    /// connection), so that a caller may give up while its release is on its way. A
    /// request sent after a delayed release may then overtake it, whatever the wrapped
    /// backend's [`Capabilities::ordered_requests`] says.
    pub fn delay_releases(&self, delay: Duration) {
        *self
            .release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes force releases reach the wrapped backend this long after they were sent, so
    /// that a caller may stop waiting while one is on its way.
    pub fn delay_force_releases(&self, delay: Duration) {
        *self
            .force_release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Holds back the answers of releases, which the wrapped backend has run, until
    /// called again with `false` (a slow reply).
    pub fn hold_release_answers(&self, held: bool) {
        self.release_answers_held.send_replace(held);
    }

    /// Runs the next release on the wrapped backend, then reports a connection error:
    /// its reply was lost after the backend acted.
    pub fn lose_next_release_reply(&self) {
        self.losing_release_reply.store(true, Ordering::SeqCst);
    }

    /// Makes subscribing to release notifications take this long (a slow connection).
    pub fn delay_listens(&self, delay: Duration) {
        *self
            .listen_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = delay;
    }

    /// Makes the next `count` subscriptions fail unconfirmed (a connection error).
    pub fn fail_listens(&self, count: usize) {
        self.failing_listens.store(count, Ordering::SeqCst);
    }

    /// Makes renewals fail without reaching the wrapped backend (or forward again).
    pub fn fail_renewals(&self, failing: bool) {
        self.failing_renewals.store(failing, Ordering::SeqCst);
    }

    /// Makes renewals run on the wrapped backend but report failure, as when their
    /// replies are lost (or forward their answers again).
    pub fn lose_renewal_replies(&self, losing: bool) {
        self.losing_renewal_replies.store(losing, Ordering::SeqCst);
    }

    /// What acquisitions do from now on.
    pub fn set(&self, fault: AcquireFault) {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
    }

    fn fault(&self) -> AcquireFault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn injected(what: &'static str) -> Error {
    Error::connection("reaching the backend", std::io::Error::other(what))
}

#[async_trait]
impl Backend for FaultyBackend {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    /// Every optional operation not overridden here goes to the wrapped backend.
    fn inner(&self) -> Option<&dyn Backend> {
        Some(&*self.inner)
    }

    fn semaphores(&self) -> &dyn lock_core::SemaphoreBackend {
        self
    }

    fn expirable_semaphores(&self) -> &dyn ExpirableSemaphoreBackend {
        self
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.acquisitions.send_modify(|asked| *asked += 1);
        match self.fault() {
            AcquireFault::None => self.inner.acquire(lock, request).await,
            AcquireFault::FailBeforeSending => Err(injected("injected: not sent")),
            AcquireFault::LoseReply => {
                self.set(AcquireFault::None);
                self.inner.acquire(lock, request).await?;
                Err(injected("injected: reply lost"))
            }
            AcquireFault::DelayRequest(delay) => {
                tokio::time::sleep(delay).await;
                self.inner.acquire(lock, request).await
            }
            AcquireFault::FailAfter(delay) => {
                tokio::time::sleep(delay).await;
                Err(injected("injected: unreachable"))
            }
            AcquireFault::DelayFreshGrant(delay) => {
                let reply = self.inner.acquire(lock, request).await;
                if let Ok(Acquire::Acquired { holds: 1, .. }) = reply {
                    tokio::time::sleep(delay).await;
                }
                reply
            }
        }
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        if self.failing_releases.load(Ordering::SeqCst) {
            return Err(injected("injected: release not sent"));
        }
        let delay = *self
            .release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let outcome = self.inner.release(lock, request).await;
        // The sender lives as long as this wrapper, so the wait cannot fail.
        let mut answers = self.release_answers_held.subscribe();
        if let Err(closed) = answers.wait_for(|held| !held).await {
            return Err(Error::connection("waiting to answer a release", closed));
        }
        if self.losing_release_reply.swap(false, Ordering::SeqCst) {
            return Err(injected("injected: reply lost"));
        }
        outcome
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        if self.failing_renewals.load(Ordering::SeqCst) {
            let err = injected("injected: renewal not sent");
            return locks.iter().map(|_| Renewal::Failed(err.clone())).collect();
        }
        let renewals = self.inner.renew(locks, lease).await;
        if self.losing_renewal_replies.load(Ordering::SeqCst) {
            let err = injected("injected: renewal reply lost");
            return locks.iter().map(|_| Renewal::Failed(err.clone())).collect();
        }
        renewals
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.inner.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let delay = *self
            .force_release_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(delay).await;
        self.inner.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        let delay = *self
            .listen_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(delay).await;
        let failing = self
            .failing_listens
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if failing.is_ok() {
            return Err(injected("injected: subscription not confirmed"));
        }
        if self.deaf.load(Ordering::SeqCst) {
            return self.silence.listen(lock.name.as_str()).await;
        }
        self.inner.listen(lock).await
    }
}

/// The wrapped backend's semaphores, with requests sent late and grants answered late
/// when told.
#[async_trait]
impl lock_core::SemaphoreBackend for FaultyBackend {
    fn below(&self) -> &dyn lock_core::SemaphoreBackend {
        self.inner.semaphores()
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let before = *self
            .permit_request_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(before).await;
        let granted = self.inner.semaphores().try_acquire(name, request).await;
        let delay = *self
            .permit_grant_delay
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        tokio::time::sleep(delay).await;
        granted
    }
}

/// The wrapped backend's expirable semaphores, whose renewals and releases fail with
/// the locks' when told (a holder cut off from the store).
#[async_trait]
impl ExpirableSemaphoreBackend for FaultyBackend {
    fn below(&self) -> &dyn ExpirableSemaphoreBackend {
        self.inner.expirable_semaphores()
    }

    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        if self.failing_releases.load(Ordering::SeqCst) {
            return Err(injected("injected: release not sent"));
        }
        self.inner
            .expirable_semaphores()
            .release(name, request)
            .await
    }

    async fn renew(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        if self.failing_renewals.load(Ordering::SeqCst) {
            return Err(injected("injected: renewal not sent"));
        }
        let delay = std::mem::take(
            &mut *self
                .permit_renewal_delay
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.inner
            .expirable_semaphores()
            .renew(name, ids, lease)
            .await
    }

    async fn set_lease(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        if self.failing_renewals.load(Ordering::SeqCst) {
            return Err(injected("injected: renewal not sent"));
        }
        self.inner
            .expirable_semaphores()
            .set_lease(name, ids, lease)
            .await
    }
}
