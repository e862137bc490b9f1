//! [`FaultLayer`]: a backend in front of another that delays, loses and duplicates its
//! requests and replies as a [`FateSource`] decides, to see what a client does on a bad
//! network without one. The conformance suite drives it from a script (a test sets
//! switches), the simulation from a seeded generator; a service's own tests can put it
//! in front of the memory backend.
//!
//! Each operation draws its [`Fate`] when it is sent: a wait before it reaches the
//! store, a failure before it does, a lost reply after it ran, a wait of its reply, a
//! late copy run once more after it. A lost or failed operation is a connection error, as
//! a network gives; the client cannot tell which happened.
//!
//! Behind the `faults` feature.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::{
    Acquire, Capabilities, ExpirableSemaphoreBackend, Issue, IssueRequest, LockState, PermitAnswer,
    PermitId, PermitRequest, Release, Renewal, ReturnRequest, SemaphoreBackend,
};
use crate::notify::{InProcess, Listener, Subscriptions};
use crate::{AcquireRequest, Backend, Error, LockName, LockRef, ReleaseRequest};

/// An operation a [`FaultLayer`] can fault. What is not listed (inspection, raising a
/// fencing counter, the latches, introspection, the families' reads and settings) goes
/// to the wrapped backend untouched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// [`Backend::acquire`].
    Acquire,
    /// [`Backend::cancel_wait`].
    Cancel,
    /// [`Backend::release`].
    Release,
    /// [`Backend::renew`].
    Renew,
    /// [`Backend::force_release`].
    ForceRelease,
    /// [`Backend::listen`].
    Listen,
    /// [`SemaphoreBackend::try_acquire`].
    TakePermits,
    /// [`SemaphoreBackend::release`].
    GivePermitsBack,
    /// [`ExpirableSemaphoreBackend::try_issue`].
    IssuePermits,
    /// [`ExpirableSemaphoreBackend::release`].
    ReturnPermits,
    /// [`ExpirableSemaphoreBackend::renew`].
    RenewPermits,
    /// [`ExpirableSemaphoreBackend::set_lease`].
    SetPermitLease,
}

impl Operation {
    /// The operation in words, as a trace and an injected error show it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquisition",
            Self::Cancel => "cancellation",
            Self::Release => "release",
            Self::Renew => "renewal",
            Self::ForceRelease => "force release",
            Self::Listen => "subscription",
            Self::TakePermits => "permit request",
            Self::GivePermitsBack => "permits' return",
            Self::IssuePermits => "expirable permit request",
            Self::ReturnPermits => "expirable permits' return",
            Self::RenewPermits => "permit renewal",
            Self::SetPermitLease => "permit lease change",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What befalls one operation. The default: nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fate {
    /// How long it takes to reach the store.
    pub before: Duration,
    /// It never reaches the store: the caller gets a connection error after `before`.
    pub fail_before: bool,
    /// It runs, and its reply is lost: the caller gets a connection error.
    pub lose_reply: bool,
    /// How long its reply takes to come back.
    pub after: Duration,
    /// A copy of it runs once more this long after it ran, and nobody hears the copy's
    /// answer (a request queued on a connection its client gave up on).
    pub late_copy: Option<Duration>,
    /// For [`Operation::Listen`]: the subscription is confirmed, and nothing ever
    /// arrives on it (a connection that lost its messages).
    pub deaf: bool,
}

impl Fate {
    /// Nothing befalls it.
    #[must_use]
    pub fn none() -> Self {
        Self::default()
    }

    /// It takes `delay` to reach the store.
    #[must_use]
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.before = delay;
        self
    }

    /// It never reaches the store.
    #[must_use]
    pub fn failed(mut self) -> Self {
        self.fail_before = true;
        self
    }

    /// It runs and its reply is lost.
    #[must_use]
    pub fn reply_lost(mut self) -> Self {
        self.lose_reply = true;
        self
    }

    /// Its reply takes `delay` to come back.
    #[must_use]
    pub fn reply_delayed(mut self, delay: Duration) -> Self {
        self.after = delay;
        self
    }

    /// A copy of it runs `late` after it.
    #[must_use]
    pub fn copied_after(mut self, late: Duration) -> Self {
        self.late_copy = Some(late);
        self
    }

    /// A subscription on which nothing arrives.
    #[must_use]
    pub fn deaf(mut self) -> Self {
        self.deaf = true;
        self
    }
}

/// What the store answered, as far as a fate source may hold a reply back by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// An acquisition was granted; `fresh` when it began a hold (a count of 1).
    Granted {
        /// The grant began a hold.
        fresh: bool,
    },
    /// Anything else, errors included.
    Other,
}

/// What a fault did to an operation, for a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Happened {
    /// It was lost before it reached the store.
    LostOnItsWay,
    /// It ran, and its reply was lost.
    ReplyLost,
    /// A late copy of it reached the store.
    LateCopyDelivered,
}

/// Decides the fate of each operation a [`FaultLayer`] passes on.
#[async_trait]
pub trait FateSource: fmt::Debug + Send + Sync + 'static {
    /// The fate of `operation`, about to be sent: called once per operation, in the order
    /// they are sent.
    fn fate(&self, operation: Operation) -> Fate;

    /// Returns when `operation` may go on its way (a paused process holds it back); at
    /// once by default. Runs before the fate's own wait.
    async fn hold(&self, operation: Operation) {
        let _ = operation;
    }

    /// Returns when the reply to `operation`, which the store answered as `answer`, may
    /// go back (a reply held back until a test lets it go); at once by default. Runs
    /// before the fate's own wait of the reply.
    async fn answered(&self, operation: Operation, answer: Answer) {
        let _ = (operation, answer);
    }

    /// Told what a fault did, for a trace; nothing by default.
    fn happened(&self, operation: Operation, what: Happened) {
        let _ = (operation, what);
    }
}

/// A backend in front of `inner` whose operations meet the fates its source decides (see
/// the [module](self)). It declares what the wrapped backend declares. It dereferences to
/// its source, so that a test turns a scripted source's switches on the layer itself.
pub struct FaultLayer<S> {
    inner: Arc<dyn Backend>,
    source: Arc<S>,
    /// Where a deaf subscription listens: nothing is ever published here.
    silence: Subscriptions,
}

impl<S> Clone for FaultLayer<S> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            source: Arc::clone(&self.source),
            silence: self.silence.clone(),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for FaultLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultLayer")
            .field("inner", &self.inner)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl<S> std::ops::Deref for FaultLayer<S> {
    type Target = S;

    fn deref(&self) -> &S {
        &self.source
    }
}

impl<S: FateSource + Default> FaultLayer<S> {
    /// Wraps `inner` behind a source in its default state.
    #[must_use]
    pub fn new(inner: Arc<dyn Backend>) -> Self {
        Self::with_source(inner, S::default())
    }
}

impl<S: FateSource> FaultLayer<S> {
    /// Wraps `inner` behind `source`.
    #[must_use]
    pub fn with_source(inner: Arc<dyn Backend>, source: S) -> Self {
        Self {
            inner,
            source: Arc::new(source),
            silence: Subscriptions::new(Arc::new(InProcess)),
        }
    }

    /// The fate source.
    #[must_use]
    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// The way of `operation` to the store: its fate drawn, its hold, its wait; the
    /// error it meets when the fate loses it on the way (`lost`, in words).
    async fn on_its_way(&self, operation: Operation, lost: &'static str) -> Result<Fate, Error> {
        let fate = self.source.fate(operation);
        self.source.hold(operation).await;
        nap(fate.before).await;
        if fate.fail_before {
            self.source.happened(operation, Happened::LostOnItsWay);
            return Err(injected(operation, lost));
        }
        Ok(fate)
    }

    /// Runs `operation` (made afresh by `make` for a late copy) through its fate.
    async fn through<T, F, Fut>(&self, operation: Operation, make: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: Fn(Arc<dyn Backend>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
        for<'a> &'a T: Into<Answer>,
    {
        let fate = self.on_its_way(operation, "not sent").await?;
        let make = Arc::new(make);
        let outcome = make(Arc::clone(&self.inner)).await;
        if let Some(late) = fate.late_copy {
            let (inner, make, source) = (
                Arc::clone(&self.inner),
                Arc::clone(&make),
                Arc::clone(&self.source),
            );
            tokio::spawn(async move {
                nap(late).await;
                source.happened(operation, Happened::LateCopyDelivered);
                // Nobody hears the copy's answer.
                drop(make(inner).await);
            });
        }
        let answer = outcome.as_ref().map_or(Answer::Other, Into::into);
        self.source.answered(operation, answer).await;
        nap(fate.after).await;
        if fate.lose_reply {
            self.source.happened(operation, Happened::ReplyLost);
            return Err(injected(operation, "reply lost"));
        }
        outcome
    }
}

/// Sleeps `duration`; not at all for none (a zero sleep still yields to the runtime).
async fn nap(duration: Duration) {
    if !duration.is_zero() {
        tokio::time::sleep(duration).await;
    }
}

/// A connection error as a network gives, saying it was injected: "injected: release
/// not sent", "injected: renewal reply lost".
fn injected(operation: Operation, what: &'static str) -> Error {
    Error::connection(
        "reaching the backend",
        std::io::Error::other(format!("injected: {operation} {what}")),
    )
}

impl From<&Acquire> for Answer {
    fn from(acquire: &Acquire) -> Self {
        match acquire {
            Acquire::Acquired { holds, .. } => Self::Granted { fresh: *holds == 1 },
            _ => Self::Other,
        }
    }
}

macro_rules! other_answers {
    ($($answer:ty),*) => {
        $(impl From<&$answer> for Answer {
            fn from(_: &$answer) -> Self {
                Self::Other
            }
        })*
    };
}

other_answers!(
    (),
    Release,
    Vec<Renewal>,
    bool,
    Listener,
    PermitAnswer,
    i64,
    Issue,
    Vec<bool>
);

#[async_trait]
impl<S: FateSource> Backend for FaultLayer<S> {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn inner(&self) -> Option<&dyn Backend> {
        Some(&*self.inner)
    }

    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self
    }

    fn expirable_semaphores(&self) -> &dyn ExpirableSemaphoreBackend {
        self
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let lock = lock.clone();
        self.through(Operation::Acquire, move |inner| {
            let lock = lock.clone();
            async move { inner.acquire(&lock, request).await }
        })
        .await
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let (lock, acquisition) = (lock.clone(), *acquisition);
        self.through(Operation::Cancel, move |inner| {
            let lock = lock.clone();
            async move { inner.cancel_wait(&lock, &acquisition).await }
        })
        .await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let lock = lock.clone();
        // This layer sends copies of requests of its own (late copies nobody hears), so
        // no acquisition it passed on is settled.
        let request = request.settled(false);
        self.through(Operation::Release, move |inner| {
            let lock = lock.clone();
            async move { inner.release(&lock, request).await }
        })
        .await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let batch: Arc<[LockRef]> = locks.into();
        let renewed = self
            .through(Operation::Renew, move |inner| {
                let batch = Arc::clone(&batch);
                async move { Ok(inner.renew(&batch, lease).await) }
            })
            .await;
        renewed.unwrap_or_else(|err| locks.iter().map(|_| Renewal::Failed(err.clone())).collect())
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.inner.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let lock = lock.clone();
        self.through(Operation::ForceRelease, move |inner| {
            let lock = lock.clone();
            async move { inner.force_release(&lock).await }
        })
        .await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        let fate = self.on_its_way(Operation::Listen, "not confirmed").await?;
        if fate.deaf {
            return self.silence.listen(lock.name.as_str()).await;
        }
        self.inner.listen(lock).await
    }
}

/// The wrapped backend's semaphores, taking and giving back through the fates.
#[async_trait]
impl<S: FateSource> SemaphoreBackend for FaultLayer<S> {
    fn below(&self) -> &dyn SemaphoreBackend {
        self.inner.semaphores()
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let name = name.clone();
        self.through(Operation::TakePermits, move |inner| {
            let name = name.clone();
            async move { inner.semaphores().try_acquire(&name, request).await }
        })
        .await
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let name = name.clone();
        self.through(Operation::GivePermitsBack, move |inner| {
            let name = name.clone();
            async move { inner.semaphores().release(&name, request).await }
        })
        .await
    }
}

/// The wrapped backend's expirable semaphores, issuing, returning and renewing through
/// the fates.
#[async_trait]
impl<S: FateSource> ExpirableSemaphoreBackend for FaultLayer<S> {
    fn below(&self) -> &dyn ExpirableSemaphoreBackend {
        self.inner.expirable_semaphores()
    }

    async fn try_issue(&self, name: &LockName, request: &IssueRequest) -> Result<Issue, Error> {
        let (name, request) = (name.clone(), request.clone());
        self.through(Operation::IssuePermits, move |inner| {
            let (name, request) = (name.clone(), request.clone());
            async move {
                inner
                    .expirable_semaphores()
                    .try_issue(&name, &request)
                    .await
            }
        })
        .await
    }

    async fn release(&self, name: &LockName, request: &ReturnRequest) -> Result<bool, Error> {
        let (name, request) = (name.clone(), request.clone());
        self.through(Operation::ReturnPermits, move |inner| {
            let (name, request) = (name.clone(), request.clone());
            async move { inner.expirable_semaphores().release(&name, &request).await }
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
        self.through(Operation::RenewPermits, move |inner| {
            let (name, ids) = (name.clone(), ids.clone());
            async move { inner.expirable_semaphores().renew(&name, &ids, lease).await }
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
        self.through(Operation::SetPermitLease, move |inner| {
            let (name, ids) = (name.clone(), ids.clone());
            async move {
                inner
                    .expirable_semaphores()
                    .set_lease(&name, &ids, lease)
                    .await
            }
        })
        .await
    }
}
