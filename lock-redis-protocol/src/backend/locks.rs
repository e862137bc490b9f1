//! The locks: [`Backend`] for the mutex, the fair lock and both sides of the read-write
//! lock. Acquiring, cancelling a wait, inspecting and force-releasing are here; releases
//! are in `release.rs`, renewals in `renew.rs`.

use std::time::Duration;

use async_trait::async_trait;
use lock_core::Error;
use lock_core::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, LatchBackend, LockRef, LockState, Release,
    ReleaseRequest, Renewal, SemaphoreBackend,
};
use lock_core::notify::Listener;

use super::answer::{AcquireAnswer, decode_acquire};
use super::{Family, RedisBackend, count, flag, millis, pttl, unexpected};
use crate::calls::{
    FairAcquire, FairCancel, FairForceRelease, FencingRaise, FixedCall, MutexAcquire, MutexCancel,
    MutexForceRelease, MutexInspect, RwForceRelease, RwReadAcquire, RwWriteAcquire,
};
use crate::decimals::Decimals;
use crate::error::NotReplicated;
use crate::transport::Reply;
use crate::{events, layout};

impl RedisBackend {
    /// A grant fewer replicas confirmed than asked for could be lost in a failover: it
    /// is given back, and the acquisition fails with the reason.
    async fn give_back_unreplicated(
        &self,
        lock: &LockRef,
        request: &AcquireRequest,
        acknowledged: u32,
    ) -> Result<(), Error> {
        let Some((wanted, _)) = self.options.replica_ack else {
            return Ok(());
        };
        if acknowledged >= wanted {
            return Ok(());
        }
        let undo =
            ReleaseRequest::new(request.lease, request.id).retry_window(request.retry_window);
        if let Err(err) = Backend::release(self, lock, undo).await {
            events::unconfirmed_grant_kept(lock, &err);
        }
        Err(Error::backend_retryable(
            "acquiring",
            NotReplicated {
                wanted,
                acknowledged,
            },
        ))
    }
}

impl RedisBackend {
    /// The wake id a mutex acquire registers this client under: its own when the caller
    /// waits to be woken alone, else none.
    fn wake_id_for(&self, request: &AcquireRequest) -> &str {
        if !request.waits_to_be_woken_alone() {
            return "";
        }
        // Before the waiter listens: its first attempt comes first.
        self.registered_a_waiter
            .store(true, std::sync::atomic::Ordering::Relaxed);
        &self.wake_id
    }
}

impl RedisBackend {
    /// Sends an acquire's call and reads its answer; a grant too few replicas confirmed
    /// is given back.
    async fn run_acquire<'a, C, const K: usize, const A: usize>(
        &self,
        lock: &LockRef,
        request: &AcquireRequest,
        call: &C,
    ) -> Result<Acquire, Error>
    where
        C: FixedCall<'a, K, A>,
    {
        let (reply, acknowledged) = self
            .eval_write("acquiring", C::SCRIPT, &call.keys(), &call.args())
            .await?;
        let answer = AcquireAnswer::of(&reply);
        let items = answer.as_ref().map(AcquireAnswer::items);
        if let (Some([1, ..]), Some(acknowledged)) = (items, acknowledged) {
            self.give_back_unreplicated(lock, request, acknowledged)
                .await?;
        }
        let origin = answer.as_ref().and_then(|answer| answer.origin);
        decode_acquire(items, origin, &reply, &lock.name, request.fencing)
    }
}

/// What a waiter's cancellation sends beside its lock's keys: the restart quarantine,
/// how long its ended grant's latch lives (as a release's: a late copy of an attempt
/// must find the grant ended), and its acquisition's id.
struct Cancellation {
    numbers: Decimals<3>,
    request: String,
}

impl Cancellation {
    fn new(backend: &RedisBackend, first: u64, acquisition: &AcquireRequest) -> Self {
        let mut request = String::with_capacity(32);
        acquisition.id.push_hex(&mut request);
        Self {
            numbers: Decimals::new([
                first,
                backend.quarantine_ms(),
                millis(acquisition.retry_window.saturating_mul(2)),
            ]),
            request,
        }
    }
}

impl RedisBackend {
    /// A mutex's or a writer's waiter gives up (see the `mutex_cancel` script).
    async fn leave_waiters(
        &self,
        lock: &LockRef,
        family: Family,
        acquisition: &AcquireRequest,
    ) -> Result<(), Error> {
        let name = &lock.name;
        let (channel, mode, field) = if family == Family::Write {
            let field = format!("{}:write", lock.owner);
            (layout::rw_channel(name), "write", field)
        } else {
            let field = lock.owner.as_str().to_owned();
            (layout::mutex_channel(name), "", field)
        };
        let waiting = layout::waiting_clients_key(name);
        let reservation = layout::reservation_key(name);
        let requests = layout::waiting_requests_key(name);
        let (token, epoch) = (layout::token_key(name), self.epoch_key(name));
        let cancel = Cancellation::new(self, millis(self.options.reservation), acquisition);
        let [offer_ms, quarantine_ms, latch_ms] = cancel.numbers.get();
        let call = MutexCancel {
            lock: layout::lock_key(name),
            waiting: &waiting,
            reservation: &reservation,
            requests: &requests,
            token: &token,
            epoch: &epoch,
            wake_id: &self.wake_id,
            channel: &channel,
            publish: self.options.publish.command(),
            numsub: self.listener_count_command(),
            offer_ms,
            quarantine_ms,
            acquisition: &cancel.request,
            field: &field,
            latch_ms,
            mode,
        };
        self.run("leaving the waiters", &call).await.map(drop)
    }

    /// A fair lock's waiter gives up (see the `fair_cancel` script).
    async fn leave_queue(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        let name = &lock.name;
        let [queue, deadlines, alive] = layout::fair_queue_keys(name);
        let prefix = layout::mutex_channel(name);
        let (token, epoch) = (layout::token_key(name), self.epoch_key(name));
        let cancel = Cancellation::new(self, layout::REDISSON_WAIT_SLOT_MS, acquisition);
        let [slot_ms, quarantine_ms, latch_ms] = cancel.numbers.get();
        let call = FairCancel {
            lock: layout::lock_key(name),
            queue: &queue,
            deadlines: &deadlines,
            alive: &alive,
            token: &token,
            epoch: &epoch,
            owner: lock.owner.as_str(),
            channel_prefix: &prefix,
            publish: self.options.publish.command(),
            slot_ms,
            quarantine_ms,
            acquisition: &cancel.request,
            latch_ms,
        };
        self.run("leaving the queue", &call).await.map(drop)
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES.ordered_requests(self.transport.keeps_order())
    }

    #[allow(
        clippy::too_many_lines,
        reason = "one call per family, each naming every input its script reads"
    )]
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let family = Family::of(lock.kind)?;
        let name = &lock.name;
        let owner = lock.owner.as_str();
        let key = layout::lock_key(name);
        let mut built = layout::Keys::new(name);
        let (token_at, latch_at) = (built.token(), built.grant_latch(request.id));
        let grants_at = built.grants(owner, family == Family::Write);
        // Only the mutex's script takes these; made in the same buffer, they cost no
        // allocation.
        let (reservation_at, waiting_at) = (built.reservation(), built.waiting_clients());
        let requests_at = built.waiting_requests();
        let mut grant = String::with_capacity(32);
        request.id.push_hex(&mut grant);
        let epoch = self.epoch_key(name);
        let wait = request.wait.unwrap_or_default();
        // The grant's answer is kept twice the window, as its end is: a copy of this
        // request that comes later than its own retries could, after the grant lapsed,
        // must find it, not take the lock afresh for nobody.
        let numbers = Decimals::new([
            millis(request.lease),
            millis(request.retry_window.saturating_mul(2)),
            self.quarantine_ms(),
            millis(wait.place_kept_for),
        ]);
        let [lease_ms, latch_ms, quarantine, place_ms] = numbers.get();
        let attempt = Decimals::new([u64::from(wait.attempt)]);
        let attempt = attempt.get()[0];
        let (lock_key, epoch) = (key, &*epoch);
        let (token, grants, latch) = (
            built.get(token_at),
            built.get(grants_at),
            built.get(latch_at),
        );
        let (fencing, grant, quarantine_ms) = (flag(request.fencing), grant.as_str(), quarantine);
        match family {
            Family::Mutex | Family::Write => {
                let wake_id = self.wake_id_for(&request);
                // A live waiter asks again within the holder's lease (its own, as a
                // rule): a set of waiting clients none of which asked that long is gone.
                let rendered = Decimals::new([
                    millis(self.options.reservation),
                    millis(wait.waited),
                    millis(request.lease.saturating_add(wait.place_kept_for)),
                ]);
                let [reservation_ms, waited_ms, registered_ms] = rendered.get();
                let (waiting, requests) = (built.get(waiting_at), built.get(requests_at));
                if family == Family::Write {
                    let hold_prefix = layout::read_hold_prefix(name, owner);
                    let call = RwWriteAcquire {
                        lock: lock_key,
                        token,
                        epoch,
                        waiting,
                        requests,
                        grants,
                        latch,
                        lease_ms,
                        owner,
                        fencing,
                        quarantine_ms,
                        hold_prefix: &hold_prefix,
                        wake_id,
                        registered_ms,
                        place_ms,
                        attempt,
                        grant,
                        latch_ms,
                    };
                    self.run_acquire(lock, &request, &call).await
                } else {
                    let call = MutexAcquire {
                        lock: lock_key,
                        reservation: built.get(reservation_at),
                        token,
                        epoch,
                        waiting,
                        requests,
                        grants,
                        latch,
                        lease_ms,
                        owner,
                        starving: flag(wait.starving),
                        reservation_ms,
                        waited_ms,
                        fencing,
                        quarantine_ms,
                        wake_id,
                        registered_ms,
                        place_ms,
                        attempt,
                        grant,
                        latch_ms,
                    };
                    self.run_acquire(lock, &request, &call).await
                }
            }
            Family::Fair => {
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let call = FairAcquire {
                    lock: lock_key,
                    queue: &queue,
                    deadlines: &deadlines,
                    alive: &alive,
                    token,
                    epoch,
                    grants,
                    latch,
                    lease_ms,
                    owner,
                    joins: flag(request.waits()),
                    place_ms,
                    fencing,
                    quarantine_ms,
                    slot_ms: layout::REDISSON_WAIT_SLOT_TEXT,
                    attempt,
                    grant,
                    latch_ms,
                };
                self.run_acquire(lock, &request, &call).await
            }
            Family::Read => {
                let hold_prefix = layout::read_hold_prefix(name, owner);
                let call = RwReadAcquire {
                    lock: lock_key,
                    token,
                    epoch,
                    grants,
                    latch,
                    lease_ms,
                    owner,
                    hold_prefix: &hold_prefix,
                    fencing,
                    quarantine_ms,
                    grant,
                    latch_ms,
                };
                self.run_acquire(lock, &request, &call).await
            }
        }
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let key = layout::token_key(&lock.name);
        let token = token.to_string();
        let call = FencingRaise {
            token: &key,
            value: &token,
        };
        self.run("raising the fencing counter", &call)
            .await
            .map(drop)
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.release_grant(lock, request).await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        self.renew_all(locks, lease).await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let (field, mode) = match Family::of(lock.kind)? {
            Family::Read => (lock.owner.as_str().to_owned(), "read"),
            Family::Write => (format!("{}:write", lock.owner), "write"),
            Family::Mutex | Family::Fair => (lock.owner.as_str().to_owned(), ""),
        };
        let call = MutexInspect {
            lock: layout::lock_key(&lock.name),
            field: &field,
            mode,
        };
        let reply = self.run("inspecting", &call).await?;
        match &reply {
            Reply::Array(items) => match items.as_slice() {
                [Reply::Int(locked), Reply::Int(holds), Reply::Int(ttl)] => Ok(LockState::new(
                    *locked == 1,
                    count(*holds, &reply)?,
                    pttl(*ttl),
                )),
                _ => Err(unexpected("inspect", &reply)),
            },
            _ => Err(unexpected("inspect", &reply)),
        }
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        let name = &lock.name;
        let key = layout::lock_key(name);
        let publish = self.options.publish.command();
        let family = Family::of(lock.kind)?;
        let reply = match family {
            Family::Fair => {
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let prefix = layout::mutex_channel(name);
                let call = FairForceRelease {
                    lock: key,
                    queue: &queue,
                    deadlines: &deadlines,
                    alive: &alive,
                    channel_prefix: &prefix,
                    publish,
                };
                self.run("force-releasing", &call).await?
            }
            Family::Read | Family::Write => {
                let mode = if family == Family::Read {
                    "read"
                } else {
                    "write"
                };
                let channel = layout::rw_channel(name);
                let call = RwForceRelease {
                    lock: key,
                    mode,
                    channel: &channel,
                    publish,
                };
                self.run("force-releasing", &call).await?
            }
            Family::Mutex => {
                let channel = layout::mutex_channel(name);
                let call = MutexForceRelease {
                    lock: key,
                    channel: &channel,
                    publish,
                };
                self.run("force-releasing", &call).await?
            }
        };
        match reply {
            Reply::Int(n) => Ok(n == 1),
            other => Err(unexpected("force release", &other)),
        }
    }

    async fn cancel_wait(&self, lock: &LockRef, acquisition: &AcquireRequest) -> Result<(), Error> {
        match Family::of(lock.kind)? {
            Family::Fair => self.leave_queue(lock, acquisition).await,
            family @ (Family::Mutex | Family::Write) => {
                self.leave_waiters(lock, family, acquisition).await
            }
            // A reader leaves nothing behind on the server.
            Family::Read => Ok(()),
        }
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        use std::sync::atomic::Ordering;
        let family = Family::of(lock.kind)?;
        let channel = Self::channel(lock, family);
        if !matches!(family, Family::Mutex | Family::Write)
            || !self.wakes_on_own_channel()
            || !self.registered_a_waiter.load(Ordering::Relaxed)
            || self.own_listener.initialized()
        {
            return self.listen_on(&channel).await;
        }
        // A release that wakes this client alone tells it on its own channel: one
        // message instead of one to every client listening on the lock's.
        let (shared, own) = futures_util::future::join(
            self.listen_on(&channel),
            self.own_listener
                .get_or_try_init(|| self.own_channel_listener()),
        )
        .await;
        own?;
        shared
    }

    fn latches(&self) -> &dyn LatchBackend {
        self
    }

    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self
    }

    fn expirable_semaphores(&self) -> &dyn lock_core::backend::ExpirableSemaphoreBackend {
        self
    }

    fn introspection(&self) -> &dyn lock_core::Introspect {
        self
    }
}
