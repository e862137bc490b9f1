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
use lock_core::faults::{Fate, FateSource, FaultLayer, Happened, Operation};
use lock_core::memory::MemoryBackend;
use lock_core::notify::Listener;
use lock_core::{AcquireRequest, Backend, Error, LockRef, ReleaseRequest, RequestId};
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

/// What befalls a request, in words; `None` when nothing does.
fn describe(fate: &Fate) -> Option<String> {
    let mut faults = Vec::new();
    if !fate.before.is_zero() {
        faults.push(format!("delayed {} ms", fate.before.as_millis()));
    }
    if fate.fail_before {
        faults.push("to be lost on its way".to_owned());
    }
    if fate.lose_reply {
        faults.push("its reply to be lost".to_owned());
    }
    if !fate.after.is_zero() {
        faults.push(format!("reply delayed {} ms", fate.after.as_millis()));
    }
    if let Some(late) = fate.late_copy {
        faults.push(format!("a copy to come {} ms later", late.as_millis()));
    }
    (!faults.is_empty()).then(|| faults.join(", "))
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
        let mut fate = Fate::none().delayed(before).reply_delayed(after);
        if fail_before {
            fate = fate.failed();
        }
        if lose_reply {
            fate = fate.reply_lost();
        }
        match late_copy {
            Some(late) => fate.copied_after(late),
            None => fate,
        }
    }
}

/// One client's way to the store: the memory store, observed, behind a fault layer
/// whose fates are drawn from the run's generator.
pub(crate) type FaultyLink = FaultLayer<Seeded>;

/// Client `client`'s link to `store`.
pub(crate) fn link(client: usize, store: Arc<MemoryBackend>, network: Arc<Network>) -> FaultyLink {
    let observed = Observed {
        store,
        network: Arc::clone(&network),
    };
    FaultLayer::with_source(
        Arc::new(observed),
        Seeded {
            client,
            network,
            paused_until: Arc::new(Mutex::new(None)),
        },
    )
}

/// The fates of one client's requests, drawn from the run's generator, and the pause
/// that holds them back.
#[derive(Debug)]
pub(crate) struct Seeded {
    pub(crate) client: usize,
    network: Arc<Network>,
    /// While in the future, the client's requests wait (a paused process).
    paused_until: Arc<Mutex<Option<Instant>>>,
}

/// The requests the network delays, loses and copies; the others (subscriptions,
/// inspections, force-releases) reach the store untouched and draw nothing.
fn faulted(operation: Operation) -> bool {
    !matches!(operation, Operation::Listen | Operation::ForceRelease)
}

impl Seeded {
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
}

#[async_trait]
impl FateSource for Seeded {
    fn fate(&self, operation: Operation) -> Fate {
        if !faulted(operation) {
            return Fate::none();
        }
        let mut fate = self.network.fate();
        if let Some(faults) = describe(&fate) {
            let client = self.client;
            self.network
                .trace
                .note(&format!("client {client}: {operation}: {faults}"));
        }
        // No late copies of plain permit requests: their answers are kept for twice the
        // retry window only, and plain permits have no lease to bound what a copy run
        // after that takes or gives back (a known gap, see the crate's README).
        if matches!(
            operation,
            Operation::TakePermits | Operation::GivePermitsBack
        ) {
            fate.late_copy = None;
        }
        fate
    }

    async fn hold(&self, operation: Operation) {
        if !faulted(operation) {
            return;
        }
        let paused = *self
            .paused_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(until) = paused {
            tokio::time::sleep_until(until).await;
        }
    }

    fn happened(&self, operation: Operation, what: Happened) {
        let client = self.client;
        let said = match what {
            Happened::LostOnItsWay => format!("client {client}: {operation} lost on its way"),
            Happened::ReplyLost => format!("client {client}: {operation} ran, its reply lost"),
            _ => format!("client {client}: a late copy of {operation} delivered"),
        };
        self.network.trace.note(&said);
    }
}

/// The memory store as the network sees it: every grant and every end it runs (late
/// copies included) is checked against the rule of [`Ends`].
#[derive(Debug)]
struct Observed {
    store: Arc<MemoryBackend>,
    network: Arc<Network>,
}

#[async_trait]
impl Backend for Observed {
    /// The store's, but no introspection: nothing here reads who holds a lock.
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities().introspection(false)
    }

    fn inner(&self) -> Option<&dyn Backend> {
        Some(&*self.store)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let reply = self.store.acquire(lock, request).await;
        if let Ok(Acquire::Acquired { token, .. }) = reply {
            let network = &self.network;
            // A grant's answer is kept one retry window; an end, two.
            network
                .ends
                .granted_token(request.id, token, request.retry_window, &network.trace);
            network.ends.granted(
                request.id,
                request.retry_window.saturating_mul(2),
                &network.trace,
            );
        }
        reply
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let cancelled = self.store.cancel_wait(lock, acquisition).await;
        if cancelled.is_ok() {
            self.network.ends.ended(acquisition.id);
        }
        cancelled
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let released = Backend::release(&*self.store, lock, request).await;
        if released.is_ok() {
            self.network.ends.ended(request.grant);
        }
        released
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        Backend::renew(&*self.store, locks, lease).await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.store.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.store.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        Backend::listen(&*self.store, lock).await
    }
}
