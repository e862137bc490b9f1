//! [`MultiLock`]: several locks, on one or several backends, taken as one.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use lock_core::backend::{Acquire, Capabilities, LockState, Release, Renewal};
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, ClientInfo, Error, Introspect, LockInfo, LockName, LockRef, Locks,
    ReleaseRequest, RequestId,
};

use crate::error::NodeErrors;
use crate::introspect::{composed, listed_by, of_part};
use crate::origin::common_origin;
use crate::relay::Relay;

/// Builds a [`MultiLock`].
#[must_use]
pub struct MultiLockBuilder {
    parts: Vec<(Arc<dyn Backend>, String)>,
}

impl fmt::Debug for MultiLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.parts.iter().map(|(_, n)| n.as_str()).collect();
        f.debug_struct("MultiLockBuilder")
            .field("names", &names)
            .finish()
    }
}

impl MultiLockBuilder {
    /// Adds the lock `name` on `backend`.
    pub fn lock(mut self, backend: Arc<dyn Backend>, name: impl Into<String>) -> Self {
        self.parts.push((backend, name.into()));
        self
    }

    /// Checks the names and builds the lock.
    pub fn build(self) -> Result<MultiLock, Error> {
        if self.parts.is_empty() {
            return Err(Error::invalid_argument(
                "locks",
                "a MultiLock needs at least one lock",
            ));
        }
        let mut parts = Vec::with_capacity(self.parts.len());
        for (backend, name) in self.parts {
            parts.push((backend, LockName::new(&name)?));
        }
        // One order for every client: a waiter keeps only the parts ordered before the
        // one it waits for, so two clients locking overlapping sets can never each hold
        // what the other waits for. Names must be unique for that order to be total:
        // backends have no identity shared by every client, so two parts named alike
        // (on two backends) could be ordered differently by two clients, and each could
        // keep the part the other waits for.
        parts.sort_by(|a, b| a.1.as_str().cmp(b.1.as_str()));
        if let Some(pair) = parts.windows(2).find(|pair| pair[0].1 == pair[1].1) {
            return Err(Error::invalid_argument(
                "locks",
                format!(
                    "the name `{}` is used by two parts of one MultiLock: give every part \
                     its own name",
                    pair[0].1
                ),
            ));
        }
        Ok(MultiLock {
            parts,
            kept: Mutex::new(HashMap::new()),
            relay: Relay::new(Duration::from_secs(1)),
        })
    }
}

/// Several locks taken as one: all of them or none, as a [`Backend`].
///
/// Wrap it in a [`Locks`] client ([`MultiLock::locks`]) and lock any name on it (the
/// name only labels the guard): acquiring takes every part at once, concurrently. When
/// some part is busy, a `try_lock` releases what it took; a waiting acquire keeps the
/// parts ordered before the busy one (by name), releases the rest, and waits, through
/// pub/sub, for any part to be released. Because every client orders parts the same way,
/// overlapping MultiLocks taken in different orders neither deadlock nor livelock.
///
/// Leases, renewal, releases and fencing apply to every part; the guard is lost as soon
/// as any part is.
pub struct MultiLock {
    parts: Vec<(Arc<dyn Backend>, LockName)>,
    /// Per waiting owner: the parts it kept from its previous attempt, with their
    /// fencing tokens.
    kept: Mutex<HashMap<LockRef, Vec<Kept>>>,
    relay: Relay,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.parts.iter().map(|(_, n)| n.as_str()).collect();
        f.debug_struct("MultiLock")
            .field("names", &names)
            .finish_non_exhaustive()
    }
}

/// Whether a waiter kept a part from its previous attempt, and under which grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kept {
    No,
    Yes {
        token: Option<u64>,
        grant: RequestId,
    },
}

/// One part's answer to an acquire attempt.
enum Part {
    Held {
        holds: u32,
        token: Option<u64>,
        origin: Option<RequestId>,
    },
    Busy(Option<Duration>),
    Failed(Error),
}

impl MultiLock {
    /// An empty builder; add parts with [`MultiLockBuilder::lock`].
    pub fn builder() -> MultiLockBuilder {
        MultiLockBuilder { parts: Vec::new() }
    }

    /// A client with default settings over this MultiLock.
    #[must_use]
    pub fn locks(self) -> Locks {
        Locks::new(Arc::new(self))
    }

    fn part(&self, i: usize, lock: &LockRef) -> LockRef {
        LockRef::new(lock.kind, self.parts[i].1.clone(), lock.owner.clone())
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, HashMap<LockRef, Vec<Kept>>> {
        // Single map operations only: a poisoned map is still consistent.
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes part `i` under this request's id, so that every part holds the composite
    /// grant under one id and its release names it. A part kept from the previous
    /// attempt is taken again (a reentry) and its earlier grant ended, which re-arms its
    /// lease from this attempt, like the others'.
    async fn take(&self, i: usize, lock: &LockRef, request: AcquireRequest, kept: Kept) -> Part {
        let backend = &self.parts[i].0;
        let part = self.part(i, lock);
        // The caller's id goes to every part (each keeps its own latch, by name), so
        // that a retry of this request is answered by each part as the first time.
        let mut plain = AcquireRequest::new(request.lease)
            .fencing(request.fencing)
            .retry_window(request.retry_window);
        plain.id = request.id;
        let taken = match backend.acquire(&part, plain).await {
            Ok(Acquire::Acquired {
                holds,
                token,
                origin,
            }) => Part::Held {
                holds,
                token,
                origin,
            },
            Ok(Acquire::Busy { ttl, .. }) => Part::Busy(ttl),
            // A late copy of an attempt this part already ended: nothing was taken.
            Ok(Acquire::Ended) => Part::Busy(None),
            Ok(_) => Part::Failed(Error::protocol("a part answered an unknown reply")),
            Err(err) => Part::Failed(err),
        };
        let Kept::Yes { token, grant } = kept else {
            return taken;
        };
        // The earlier grant goes whatever this attempt got: held again, the part holds
        // the new grant alone; not held again, the waiter does not keep it.
        let earlier = ReleaseRequest::new(request.lease, grant).retry_window(request.retry_window);
        let ended = backend.release(&part, earlier).await;
        match (taken, ended) {
            (
                Part::Held {
                    holds: holds @ 2..,
                    origin,
                    ..
                },
                Ok(_),
            ) => Part::Held {
                holds: holds - 1,
                token,
                origin,
            },
            (taken, Ok(_)) => taken,
            (_, Err(err)) => Part::Failed(err),
        }
    }

    /// Releases the listed parts, concurrently.
    async fn release_parts(&self, parts: &[usize], lock: &LockRef, release: ReleaseRequest) {
        join_all(parts.iter().map(|&i| {
            let part = self.part(i, lock);
            async move {
                if let Err(err) = self.parts[i].0.release(&part, release).await {
                    tracing::warn!(
                        target: lock_core::TRACING_TARGET,
                        part = %part.name,
                        error = %err.chain(),
                        "a MultiLock part could not be given back; it holds until its lease ends"
                    );
                }
            }
        }))
        .await;
    }
}

#[async_trait]
impl Backend for MultiLock {
    /// What every part supports, but no fair locks: each part keeps its own queue, so
    /// no arrival order holds across parts (and each part may wake a different waiting
    /// client after a release). Requests in order on every part stay in order: a release
    /// is sent to every part when first polled.
    fn capabilities(&self) -> Capabilities {
        Capabilities::common(self.parts.iter().map(|(part, _)| part.capabilities()))
            .fair(false)
            .count_down_latch(false)
            .semaphore(false)
            .expirable_semaphore(false)
            .wakes_one_client(false)
            .hands_over(false)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let n = self.parts.len();
        let kept = self
            .kept()
            .remove(lock)
            .unwrap_or_else(|| vec![Kept::No; n]);
        let answers = join_all((0..n).map(|i| self.take(i, lock, request, kept[i]))).await;
        if answers.iter().all(|a| matches!(a, Part::Held { .. })) {
            let (holds, token) = answers.iter().fold((1, None), |(h, t), a| match a {
                Part::Held { holds, token, .. } => (h.max(*holds), t.max(*token)),
                _ => (h, t),
            });
            let origin = common_origin(answers.iter().map(|a| match a {
                Part::Held { origin, .. } => *origin,
                _ => None,
            }));
            return Ok(Acquire::Acquired {
                holds,
                token,
                origin,
            });
        }
        let held: Vec<usize> = (0..n)
            .filter(|&i| matches!(answers[i], Part::Held { .. }))
            .collect();
        let tokens: Vec<Option<u64>> = answers
            .iter()
            .map(|a| match a {
                Part::Held { token, .. } => *token,
                _ => None,
            })
            .collect();
        // The first busy part, in the shared order, is the one to wait for.
        let blocked = (0..n).find(|i| !held.contains(i)).unwrap_or(0);
        let mut ttl = None;
        let mut failures = Vec::new();
        for (i, answer) in answers.into_iter().enumerate() {
            match answer {
                Part::Failed(err) => failures.push((i, err)),
                Part::Busy(t) if i == blocked => ttl = t,
                _ => {}
            }
        }
        // What this attempt took goes back as the undo of its grants: a part whose
        // request failed without an answer is released only if it granted it.
        let undo =
            ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
        if !failures.is_empty() {
            let taken: Vec<usize> = (0..n)
                .filter(|i| held.contains(i) || failures.iter().any(|(f, _)| f == i))
                .collect();
            self.release_parts(&taken, lock, undo).await;
            return Err(Error::connection(
                "acquiring every part of a multi-lock",
                NodeErrors {
                    nodes: failures,
                    of: n,
                },
            ));
        }
        let (keep, give_back): (Vec<usize>, Vec<usize>) = if request.waits() {
            held.iter().partition(|&&i| i < blocked)
        } else {
            (Vec::new(), held)
        };
        self.release_parts(&give_back, lock, undo).await;
        if !keep.is_empty() {
            let mut mask = vec![Kept::No; n];
            for i in keep {
                mask[i] = Kept::Yes {
                    token: tokens[i],
                    grant: request.id,
                };
            }
            self.kept().insert(lock.clone(), mask);
        }
        Ok(Acquire::Busy {
            ttl,
            reserved: false,
        })
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let outcomes = join_all((0..self.parts.len()).map(|i| {
            let part = self.part(i, lock);
            async move { self.parts[i].0.raise_fencing(&part, token).await }
        }))
        .await;
        outcomes.into_iter().collect()
    }

    async fn cancel_wait(
        &self,
        lock: &LockRef,
        _acquisition: &AcquireRequest,
    ) -> Result<(), Error> {
        let kept = self.kept().remove(lock);
        if let Some(mask) = kept {
            // The lease does not matter for a last hold; a short one for the rare
            // reentrant case.
            for (i, kept) in mask.into_iter().enumerate() {
                if let Kept::Yes { grant, .. } = kept {
                    let release = ReleaseRequest::new(Duration::from_secs(1), grant);
                    self.release_parts(&[i], lock, release).await;
                }
            }
        }
        Ok(())
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        // The parts' requests were sent by this lock, not by its caller: whether each
        // was sent once, or answered, is not the caller's to say.
        let request = request.passed_on();
        let outcomes = join_all((0..self.parts.len()).map(|i| {
            let part = self.part(i, lock);
            async move { self.parts[i].0.release(&part, request).await }
        }))
        .await;
        let mut still = Vec::new();
        let (mut released, mut failures) = (0, Vec::new());
        for (i, outcome) in outcomes.into_iter().enumerate() {
            match outcome {
                Ok(Release::StillHeld { holds }) => still.push(holds),
                Ok(Release::Released) => released += 1,
                Ok(_) => {}
                Err(err) => failures.push((i, err)),
            }
        }
        // The whole lock is still held only if every part still is.
        if still.len() == self.parts.len()
            && let Some(&holds) = still.iter().min()
        {
            return Ok(Release::StillHeld { holds });
        }
        released += still.len();
        if !failures.is_empty() {
            return Err(Error::connection(
                "releasing every part of a multi-lock",
                NodeErrors {
                    nodes: failures,
                    of: self.parts.len(),
                },
            ));
        }
        Ok(if released > 0 {
            Release::Released
        } else {
            Release::NotHeld
        })
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        join_all(locks.iter().map(|lock| async move {
            let parts = join_all((0..self.parts.len()).map(|i| {
                let part = self.part(i, lock);
                async move {
                    self.parts[i]
                        .0
                        .renew(std::slice::from_ref(&part), lease)
                        .await
                }
            }))
            .await;
            let (mut failed, mut origins) = (None, Vec::new());
            for renewal in parts.into_iter().flatten() {
                match renewal {
                    Renewal::Renewed { origin } => origins.push(origin),
                    Renewal::Failed(err) => failed = Some(Renewal::Failed(err)),
                    _ => return Renewal::Gone,
                }
            }
            failed.unwrap_or(Renewal::Renewed {
                origin: common_origin(origins.into_iter()),
            })
        }))
        .await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let states = join_all((0..self.parts.len()).map(|i| {
            let part = self.part(i, lock);
            async move { self.parts[i].0.inspect(&part).await }
        }))
        .await;
        let (mut locked, mut holds, mut ttl) = (true, u32::MAX, None::<Duration>);
        for state in states {
            let state = state?;
            locked &= state.locked;
            holds = holds.min(state.holds);
            if let Some(t) = state.ttl {
                ttl = Some(ttl.map_or(t, |m| m.min(t)));
            }
        }
        Ok(LockState::new(locked, holds, ttl.filter(|_| locked)))
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let outcomes = join_all((0..self.parts.len()).map(|i| {
            let part = self.part(i, lock);
            async move { self.parts[i].0.force_release(&part).await }
        }))
        .await;
        let mut any = false;
        for outcome in outcomes {
            any |= outcome?;
        }
        Ok(any)
    }

    /// Answers for the parts: each part says who holds its locks, when every part can
    /// (the capabilities say so).
    fn introspection(&self) -> &dyn Introspect {
        self
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        let channel = format!("{}|{}", lock.kind, lock.owner);
        let parts = (0..self.parts.len())
            .map(|i| (Arc::clone(&self.parts[i].0), self.part(i, lock)))
            .collect();
        self.relay.listen(&channel, parts).await
    }

    async fn settle(&self) {
        // A backend that carries several parts is asked once per part: waiting is
        // idempotent.
        futures_util::future::join_all(self.parts.iter().map(|(backend, _)| backend.settle()))
            .await;
    }
}

impl MultiLock {
    /// Channels this client listens on for its waiters (for diagnostics and tests).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.relay.channels()
    }
}

/// Any name of a MultiLock stands for all its parts: a holder is one that holds every
/// part. Its held names are its parts' (a MultiLock has no names of its own).
#[async_trait]
impl Introspect for MultiLock {
    async fn describe(&self, name: &LockName) -> Result<LockInfo, Error> {
        let told = join_all(self.parts.iter().map(|(backend, part)| async move {
            let introspection = of_part(&**backend)?;
            introspection.describe(part).await
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, Error>>()?;
        Ok(composed(name.as_str(), &told, self.parts.len()))
    }

    async fn held_names(&self, prefix: &str, limit: usize) -> Result<Vec<String>, Error> {
        let told = join_all(self.parts.iter().map(|(backend, part)| async move {
            let introspection = of_part(&**backend)?;
            let held = introspection.held_names(part.as_str(), usize::MAX).await?;
            Ok::<_, Error>(
                held.into_iter()
                    .filter(|name| name == part.as_str() && name.starts_with(prefix))
                    .collect::<Vec<_>>(),
            )
        }))
        .await
        .into_iter()
        .collect::<Result<Vec<_>, Error>>()?;
        Ok(listed_by(told, 1, limit))
    }

    async fn announce(
        &self,
        client_id: &str,
        client: &ClientInfo,
        ttl: Duration,
    ) -> Result<(), Error> {
        join_all(self.parts.iter().map(|(backend, _)| async move {
            let introspection = of_part(&**backend)?;
            introspection.announce(client_id, client, ttl).await
        }))
        .await
        .into_iter()
        .collect()
    }
}
