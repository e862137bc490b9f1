//! The fault layer: a backend in front of the memory backend that delays, loses and
//! duplicates requests and replies as its seeded generator says, and holds back every
//! request of a paused client.
//!
//! Each request draws its fate up front, in the order requests are made (which a seed
//! fixes): a delay before it reaches the store, a failure before it does, a lost reply
//! after it ran, a delay of its reply, and a late copy delivered once its retries and
//! their latches are long over. A lost or failed request is a connection error, as a
//! network gives; the client cannot tell which happened.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Acquire, Capabilities, LockState, Release, Renewal};
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, Error, ExpirableSemaphoreBackend, Issue, IssueRequest, LockName,
    LockRef, PermitAnswer, PermitId, PermitRequest, ReleaseRequest, RequestId, ReturnRequest,
    SemaphoreBackend,
};
use tokio::time::Instant;

use crate::rng::Rng;
use crate::trace::Trace;

/// How often (in 100) each fault strikes a request, and how long delays last.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Profile {
    pub(crate) delay: u64,
    pub(crate) longest_delay_ms: u64,
    /// Now and then a request is held up far longer (a stalled path): past leases.
    pub(crate) long_delay: u64,
    pub(crate) longest_long_delay_ms: u64,
    pub(crate) fail_before: u64,
    pub(crate) lose_reply: u64,
    pub(crate) late_copy: u64,
    /// How late a late copy comes: after this many retry windows at least.
    pub(crate) late_copy_windows: u32,
}

/// What befalls one request.
#[derive(Debug, Clone, Copy, Default)]
struct Fate {
    before: Duration,
    fail_before: bool,
    lose_reply: bool,
    after: Duration,
    late_copy: Option<Duration>,
}

impl Fate {
    /// What befalls the request, in words; `None` when nothing does.
    fn describe(&self) -> Option<String> {
        let mut faults = Vec::new();
        if !self.before.is_zero() {
            faults.push(format!("delayed {} ms", self.before.as_millis()));
        }
        if self.fail_before {
            faults.push("to be lost on its way".to_owned());
        }
        if self.lose_reply {
            faults.push("its reply to be lost".to_owned());
        }
        if !self.after.is_zero() {
            faults.push(format!("reply delayed {} ms", self.after.as_millis()));
        }
        if let Some(late) = self.late_copy {
            faults.push(format!("a copy to come {} ms later", late.as_millis()));
        }
        (!faults.is_empty()).then(|| faults.join(", "))
    }
}

/// The state the clients' fault layers share: the generator, the trace, the profile.
#[derive(Debug)]
pub(crate) struct Network {
    pub(crate) rng: Mutex<Rng>,
    pub(crate) trace: Arc<Trace>,
    pub(crate) profile: Profile,
    pub(crate) window: Duration,
    /// Set once the workload is over: requests then go through untouched, so that what
    /// is left settles.
    pub(crate) calm: std::sync::atomic::AtomicBool,
    /// The ends of acquisitions their clients heard of, and grants made after them.
    pub(crate) ends: Ends,
}

/// The rule "an acquisition is granted at most once, never after it ended", seen from
/// the wire:
/// - once the store ran an acquisition's cancellation or its grant's release, no attempt
///   under its id may be granted while the store keeps its end (twice the retry window):
///   a late copy of a cancelled acquisition's attempt that takes the lock for nobody
///   (third review, R2) breaks it;
/// - every answer that grants an acquisition, and the notice of a hand-over to it, carry
///   one fencing token: a take-up granted afresh after its handed hold was revoked
///   (third review, R1) breaks it.
#[derive(Debug, Default)]
pub(crate) struct Ends {
    ended: Mutex<HashMap<RequestId, Instant>>,
    /// The token each acquisition was first granted (or handed) with, and when.
    tokens: Mutex<HashMap<RequestId, (Option<u64>, Instant)>>,
    broken: Mutex<Option<String>>,
}

impl Ends {
    /// Acquisition `id` was granted (or handed) the lock with `token`; the store keeps
    /// its grant's answer for `kept` (a copy that comes later, once the grant's hold
    /// lapsed, is a request the store no longer knows: a known limit, bounded by one
    /// lease, see the crate's README).
    pub(crate) fn granted_token(
        &self,
        id: RequestId,
        token: Option<u64>,
        kept: Duration,
        trace: &Trace,
    ) {
        let now = Instant::now();
        let first = {
            let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let (first, at) = *tokens.entry(id).or_insert((token, now));
            if now.duration_since(at) >= kept {
                tokens.insert(id, (token, now));
                return;
            }
            first
        };
        if first != token {
            self.broken_by(
                format!(
                    "TWO GRANTS FOR ONE ACQUISITION: acquisition {id} was granted with token \
                     {token:?} after it had been granted {first:?}"
                ),
                trace,
            );
        }
    }

    fn broken_by(&self, what: String, trace: &Trace) {
        trace.note(&what);
        let mut broken = self.broken.lock().unwrap_or_else(PoisonError::into_inner);
        broken.get_or_insert(what);
    }

    /// The store ran the end of acquisition `id` (the first time counts).
    fn ended(&self, id: RequestId) {
        let mut ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
        ended.entry(id).or_insert_with(Instant::now);
    }

    /// The store granted an attempt of acquisition `id`; the store keeps an end for
    /// `kept`.
    fn granted(&self, id: RequestId, kept: Duration, trace: &Trace) {
        let since = {
            let ended = self.ended.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(ended) = ended.get(&id) else {
                return;
            };
            Instant::now().duration_since(*ended)
        };
        if since < kept {
            let what = format!(
                "GRANT AFTER ITS END: acquisition {id} was granted {} ms after the store \
                 ended it",
                since.as_millis()
            );
            self.broken_by(what, trace);
        }
    }

    /// The first grant after an end, if any.
    pub(crate) fn violation(&self) -> Option<String> {
        self.broken
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Network {
    /// Draws from the run's generator.
    pub(crate) fn draw<T>(&self, draw: impl FnOnce(&mut Rng) -> T) -> T {
        draw(&mut self.rng.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn fate(&self) -> Fate {
        if self.calm.load(std::sync::atomic::Ordering::Relaxed) {
            return Fate::default();
        }
        let p = self.profile;
        let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
        let delay = |rng: &mut Rng| {
            if rng.chance(p.long_delay) {
                rng.millis_below(p.longest_long_delay_ms)
            } else if rng.chance(p.delay) {
                rng.millis_below(p.longest_delay_ms)
            } else {
                Duration::ZERO
            }
        };
        let before = delay(&mut rng);
        let fail_before = rng.chance(p.fail_before);
        let lose_reply = !fail_before && rng.chance(p.lose_reply);
        let after = delay(&mut rng);
        let late_copy = (!fail_before && rng.chance(p.late_copy))
            .then(|| self.window * p.late_copy_windows + rng.millis_below(500));
        Fate {
            before,
            fail_before,
            lose_reply,
            after,
            late_copy,
        }
    }
}

/// One client's way to the store.
#[derive(Debug, Clone)]
pub(crate) struct FaultyLink {
    pub(crate) client: usize,
    inner: Arc<lock_core::memory::MemoryBackend>,
    network: Arc<Network>,
    /// While in the future, the client's requests wait (a paused process).
    paused_until: Arc<Mutex<Option<Instant>>>,
}

fn injected(what: &'static str) -> Error {
    Error::connection(what, "injected by the simulation")
}

impl FaultyLink {
    pub(crate) fn new(
        client: usize,
        inner: Arc<lock_core::memory::MemoryBackend>,
        network: Arc<Network>,
    ) -> Self {
        Self {
            client,
            inner,
            network,
            paused_until: Arc::new(Mutex::new(None)),
        }
    }

    /// How late a hand-over's notice reaches a client paused until `paused_until`: when
    /// the pause is over, and now and then (one in ten) up to 400 ms late anyway, as a
    /// message on a busy connection may be. Nothing late once the workload is over.
    pub(crate) fn notice_delay(
        network: &Network,
        paused_until: &Mutex<Option<Instant>>,
    ) -> Duration {
        if network.calm.load(std::sync::atomic::Ordering::Relaxed) {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let paused = paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .filter(|until| *until > now);
        let mut rng = network.rng.lock().unwrap_or_else(PoisonError::into_inner);
        match paused {
            Some(until) => until - now + rng.millis_below(50),
            None if rng.chance(10) => rng.millis_below(400),
            None => Duration::ZERO,
        }
    }

    /// What holds this client's requests back while it is paused.
    pub(crate) fn pause_handle(&self) -> Arc<Mutex<Option<Instant>>> {
        Arc::clone(&self.paused_until)
    }

    /// Holds every request of this client back until `until`.
    pub(crate) fn pause_until(&self, until: Instant) {
        *self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(until);
    }

    /// Runs `request` (made afresh by `make` for a late copy) through its fate.
    async fn through<T, F, Fut>(&self, what: &'static str, make: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Fn(Arc<lock_core::memory::MemoryBackend>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        self.through_copied(what, true, make).await
    }

    /// As [`FaultyLink::through`]; late copies only when `copies` says so.
    async fn through_copied<T, F, Fut>(
        &self,
        what: &'static str,
        copies: bool,
        make: F,
    ) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Fn(Arc<lock_core::memory::MemoryBackend>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let mut fate = self.network.fate();
        if let Some(faults) = fate.describe() {
            let client = self.client;
            self.network
                .trace
                .note(&format!("client {client}: {what}: {faults}"));
        }
        if !copies {
            fate.late_copy = None;
        }
        let paused = *self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = paused {
            tokio::time::sleep_until(until).await;
        }
        crate::nap(fate.before).await;
        if fate.fail_before {
            self.network
                .trace
                .note(&format!("client {}: {what} lost on its way", self.client));
            return Err(injected(what));
        }
        let make = Arc::new(make);
        let outcome = make(Arc::clone(&self.inner)).await;
        if let Some(late) = fate.late_copy {
            let (inner, make, trace) = (
                Arc::clone(&self.inner),
                Arc::clone(&make),
                Arc::clone(&self.network.trace),
            );
            let client = self.client;
            tokio::spawn(async move {
                crate::nap(late).await;
                trace.note(&format!("client {client}: a late copy of {what} delivered"));
                // Nobody hears the copy's answer.
                drop(make(inner).await);
            });
        }
        crate::nap(fate.after).await;
        if fate.lose_reply {
            self.network.trace.note(&format!(
                "client {}: {what} ran, its reply lost",
                self.client
            ));
            return Err(injected(what));
        }
        outcome
    }
}

#[async_trait]
impl Backend for FaultyLink {
    /// The inner store's, but no introspection: nothing here reads who holds a lock.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().introspection(false)
    }

    /// Raising a fencing counter, and what else is not overridden here, goes to the store
    /// untouched.
    fn inner(&self) -> Option<&dyn Backend> {
        Some(&*self.inner)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let (lock, network) = (lock.clone(), Arc::clone(&self.network));
        self.through("acquire", move |inner| {
            let (lock, network) = (lock.clone(), Arc::clone(&network));
            async move {
                let reply = inner.acquire(&lock, request).await;
                if let Ok(Acquire::Acquired { token, .. }) = reply {
                    // A grant's answer is kept one retry window; an end, two.
                    network.ends.granted_token(
                        request.id,
                        token,
                        request.retry_window,
                        &network.trace,
                    );
                    network.ends.granted(
                        request.id,
                        request.retry_window.saturating_mul(2),
                        &network.trace,
                    );
                }
                reply
            }
        })
        .await
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let (lock, acquisition) = (lock.clone(), *acquisition);
        let network = Arc::clone(&self.network);
        self.through("cancel", move |inner| {
            let (lock, network) = (lock.clone(), Arc::clone(&network));
            async move {
                let cancelled = inner.cancel_wait(&lock, &acquisition).await;
                if cancelled.is_ok() {
                    network.ends.ended(acquisition.id);
                }
                cancelled
            }
        })
        .await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let (lock, network) = (lock.clone(), Arc::clone(&self.network));
        self.through("release", move |inner| {
            let (lock, network) = (lock.clone(), Arc::clone(&network));
            async move {
                let released = Backend::release(&*inner, &lock, request).await;
                if released.is_ok() {
                    network.ends.ended(request.grant);
                }
                released
            }
        })
        .await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let batch: Arc<[LockRef]> = locks.into();
        let renewed = self
            .through("renew", move |inner| {
                let batch = Arc::clone(&batch);
                async move { Ok(Backend::renew(&*inner, &batch, lease).await) }
            })
            .await;
        match renewed {
            Ok(renewals) => renewals,
            Err(err) => locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.inner.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.inner.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        Backend::listen(&*self.inner, lock).await
    }

    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self
    }

    fn expirable_semaphores(&self) -> &dyn ExpirableSemaphoreBackend {
        self
    }
}

/// The plain semaphore, through the same faults.
#[async_trait]
impl SemaphoreBackend for FaultyLink {
    fn below(&self) -> &dyn SemaphoreBackend {
        &*self.inner
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let name = name.clone();
        // No late copies of plain permit requests: their answers are kept for twice the
        // retry window only, and plain permits have no lease to bound what a copy run
        // after that takes or gives back (a known gap, see the crate's README).
        self.through_copied("take permits", false, move |inner| {
            let name = name.clone();
            async move { SemaphoreBackend::try_acquire(&*inner, &name, request).await }
        })
        .await
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let name = name.clone();
        self.through_copied("give permits back", false, move |inner| {
            let name = name.clone();
            async move { SemaphoreBackend::release(&*inner, &name, request).await }
        })
        .await
    }
}

/// The expirable semaphore, through the same faults.
#[async_trait]
impl ExpirableSemaphoreBackend for FaultyLink {
    fn below(&self) -> &dyn ExpirableSemaphoreBackend {
        &*self.inner
    }

    async fn try_issue(&self, name: &LockName, request: &IssueRequest) -> Result<Issue, Error> {
        let (name, request) = (name.clone(), request.clone());
        self.through("issue permits", move |inner| {
            let (name, request) = (name.clone(), request.clone());
            async move { inner.try_issue(&name, &request).await }
        })
        .await
    }

    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        let (name, request) = (name.clone(), request.clone());
        self.through("return permits", move |inner| {
            let (name, request) = (name.clone(), request.clone());
            async move { ExpirableSemaphoreBackend::release(&*inner, &name, &request).await }
        })
        .await
    }

    async fn renew(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        let (name, ids) = (name.clone(), ids.to_vec());
        self.through("renew permits", move |inner| {
            let (name, ids) = (name.clone(), ids.clone());
            async move { ExpirableSemaphoreBackend::renew(&*inner, &name, &ids, lease).await }
        })
        .await
    }

    async fn set_lease(
        &self,
        name: &LockName,
        ids: &[PermitId],
        lease: Duration,
    ) -> Result<Vec<bool>, Error> {
        let (name, ids) = (name.clone(), ids.to_vec());
        self.through("set a permit lease", move |inner| {
            let (name, ids) = (name.clone(), ids.clone());
            async move { inner.set_lease(&name, &ids, lease).await }
        })
        .await
    }
}
