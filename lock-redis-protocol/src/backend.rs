//! [`RedisBackend`]: the lock protocol over any [`Transport`].

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use lock_core::backend::{
    Acquire, AcquireRequest, Backend, Capabilities, HoldModel, LatchBackend, LatchRequest,
    LockKind, LockRef, LockState, PermitAnswer, PermitRequest, Release, ReleaseRequest, Renewal,
    SemaphoreBackend,
};
use lock_core::notify::{Listener, ReaderTask, Subscriptions};
use lock_core::{Error, LockName, RequestId};

use crate::decimals::Decimals;
use crate::error::{NotReplicated, WrongType};
use crate::events;
use crate::layout;
use crate::script::{self, Script, ScriptCall, ScriptForm};
use crate::slot::key_slot;
use crate::transport::{
    NotificationSink, ReplicaWait, Reply, ServerError, Topology, Transport, TransportError,
};

mod expirable;

/// How releases are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PublishMode {
    /// As Redisson decides by default: sharded on a cluster whose servers answer
    /// `PUBSUB SHARDNUMSUB` (Redis 7), classic everywhere else. Adapters decide at connect;
    /// a backend given `Auto` undecided publishes classically.
    #[default]
    Auto,
    /// `PUBLISH`/`SUBSCRIBE`: works everywhere; in a cluster every node forwards it.
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7 cluster only): only the slot's shard carries it.
    /// A Redisson peer on a Redis 7 cluster uses it, and hears nothing else.
    Sharded,
}

impl PublishMode {
    fn command(self) -> &'static str {
        match self {
            Self::Auto | Self::Classic => "publish",
            Self::Sharded => "spublish",
        }
    }

    /// The mode a deployment uses: `Auto` decided by the topology and by whether the
    /// servers support sharded pub/sub (`PUBSUB SHARDNUMSUB` answered), as Redisson
    /// decides. An explicit `Sharded` outside a cluster is a configuration error.
    pub fn decide(self, topology: Topology, sharded_supported: bool) -> Result<Self, Error> {
        match (self, topology) {
            (Self::Auto, Topology::Cluster) if sharded_supported => Ok(Self::Sharded),
            (Self::Auto | Self::Classic, _) => Ok(Self::Classic),
            (Self::Sharded, Topology::Cluster) => Ok(Self::Sharded),
            (Self::Sharded, _) => Err(Error::invalid_config(
                "sharded pub/sub (SPUBLISH) is for Redis Cluster; this deployment is not one",
                None,
            )),
        }
    }
}

/// Settings of the Redis lock protocol.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProtocolOptions {
    /// How releases are published. Default: [`PublishMode::Auto`].
    pub publish: PublishMode,
    /// Most locks renewed by one script call. Default: 100, as Redisson.
    pub renew_batch: usize,
    /// Grants wait this long after any restart of the server (a new run id), so that no
    /// holder from before can still believe it holds a lock granted again: a restart
    /// without persistence loses every lock, one from an RDB snapshot or an AOF written
    /// every second loses the latest grants, and a promotion (a failover, or a failback
    /// after a full resync) may bring back an older dataset without any restart. Each of
    /// these gives the server a new replication id, which the acquire scripts read with
    /// `INFO replication` (about 2 us of server time per acquisition), so an ACL user
    /// needs `+info`. Set it to at least the longest lease in use; the first use of a
    /// fresh server waits it too. Default: off (see the README for why).
    pub restart_quarantine: Option<Duration>,
    /// Wait for this many replicas (`WAIT`) after every acquisition and renewal, each
    /// time for at most the given time, as Redisson's replica sync check does; fewer is
    /// a `Backend` error whose source is [`NotReplicated`](crate::NotReplicated) (and an
    /// unconfirmed acquisition is released again). With
    /// it, a lock survives a failover to a replica. Default: off.
    pub replica_ack: Option<(u32, Duration)>,
    /// How long a starving waiter's reservation of a lock's next free moment lasts
    /// without being refreshed; it bounds how long a waiter that died while starving can
    /// keep a free lock from others. Default: 100 ms.
    pub reservation: Duration,
}

impl Default for ProtocolOptions {
    fn default() -> Self {
        Self {
            publish: PublishMode::Auto,
            renew_batch: 100,
            reservation: Duration::from_millis(100),
            restart_quarantine: None,
            replica_ack: None,
        }
    }
}

impl ProtocolOptions {
    /// Sets how releases are published.
    #[must_use]
    pub fn publish(mut self, mode: PublishMode) -> Self {
        self.publish = mode;
        self
    }

    /// Makes grants wait `quarantine` after any restart of the server (see
    /// [`ProtocolOptions::restart_quarantine`]).
    #[must_use]
    pub fn restart_quarantine(mut self, quarantine: Option<Duration>) -> Self {
        self.restart_quarantine = quarantine;
        self
    }

    /// Requires `replicas` replicas to confirm every acquisition and renewal within
    /// `timeout` (see [`ProtocolOptions::replica_ack`]).
    #[must_use]
    pub fn replica_ack(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_ack = Some((replicas, timeout));
        self
    }

    /// Sets how long a starving waiter's reservation lasts (at least 1 ms), and how long a
    /// mutex release offers the lock to the waiting client it picked.
    #[must_use]
    pub fn reservation(mut self, lifetime: Duration) -> Self {
        self.reservation = lifetime.max(Duration::from_millis(1));
        self
    }

    /// Sets the most locks renewed by one script call (at least 1).
    #[must_use]
    pub fn renew_batch(mut self, size: usize) -> Self {
        self.renew_batch = size.max(1);
        self
    }
}

/// The Redis lock protocol (Redisson's data layout) over a [`Transport`].
pub struct RedisBackend {
    transport: Arc<dyn Transport>,
    /// Cluster hash tags by slot, for the per-slot restart epoch keys.
    slot_tags: std::sync::Mutex<std::collections::HashMap<u16, String>>,
    subscriptions: Subscriptions,
    options: ProtocolOptions,
    /// Dropped with the last handle to the backend, which ends the adapter's reader.
    alive: Arc<tokio::sync::watch::Sender<()>>,
    /// What a release publishes to wake this client alone: its mutex waiters register
    /// it (see [`layout::waiting_clients_key`]). One per backend, as its subscriptions.
    wake_id: Arc<str>,
    /// Where such a release may wake it instead (see [`layout::own_channel`]).
    own_channel: Arc<str>,
    /// The subscription to the own channel, taken by the first mutex waiter and kept for
    /// the client's life: a client whose locks are contended waits again and again, and
    /// a second SUBSCRIBE and UNSUBSCRIBE per wait cost the server more than one idle
    /// subscription does. `None` once the server refused it (an ACL that does not allow
    /// it): waiters then listen on their locks' channels alone.
    own_listener: tokio::sync::OnceCell<Option<Listener>>,
    /// The adapter's notification reader, started again on the caller's runtime when it
    /// died with its own (see [`RedisBackend::run_notification_reader`]).
    reader: std::sync::OnceLock<ReaderTask>,
    /// Set once a mutex waiter registered this client (see [`layout::waiting_clients_key`]):
    /// only a registered client is ever woken alone. A waiter that does not register (a
    /// RedLock's, on each of its nodes) has no use for the own channel.
    registered_a_waiter: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("transport", &self.transport)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisBackend {
    /// What every Redis deployment supports: every lock kind, fencing tokens, retries
    /// answered from latches, reservations for starving waiters, leases, and releases
    /// that wake one waiting client (on a cluster only with sharded pub/sub: classic
    /// messages reach listeners on every node, which one node cannot count). An adapter
    /// whose connection keeps requests in order adds
    /// [`Capabilities::ordered_requests`].
    pub const CAPABILITIES: Capabilities = Capabilities::new(HoldModel::Lease)
        .fair(true)
        .read_write(true)
        .fencing(true)
        .retry_safe(true)
        .reservation(true)
        .shared(true)
        .count_down_latch(true)
        .semaphore(true)
        .expirable_semaphore(true)
        .wakes_one_client(true);

    /// Runs the protocol over `transport`.
    ///
    /// The adapter feeds what its subscription connection receives into
    /// [`RedisBackend::notification_sink`].
    #[must_use]
    pub fn new(transport: Arc<dyn Transport>, options: ProtocolOptions) -> Self {
        let subscriptions = Subscriptions::new(transport.clone());
        let wake_id = format!("{}{}", layout::WAKE_ID_PREFIX, uuid::Uuid::new_v4());
        Self {
            transport,
            slot_tags: std::sync::Mutex::new(std::collections::HashMap::new()),
            subscriptions,
            options,
            alive: Arc::new(tokio::sync::watch::Sender::new(())),
            own_channel: layout::own_channel(&wake_id).into(),
            wake_id: Arc::from(wake_id),
            own_listener: tokio::sync::OnceCell::new(),
            reader: std::sync::OnceLock::new(),
            registered_a_waiter: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Where the adapter delivers messages and reconnect events.
    #[must_use]
    pub fn notification_sink(&self) -> NotificationSink {
        NotificationSink::new(
            self.subscriptions.clone(),
            &self.alive,
            (Arc::clone(&self.wake_id), Arc::clone(&self.own_channel)),
        )
    }

    /// Runs the adapter's notification reader: `first` now, on the current runtime, and
    /// `revive` on a waiter's runtime whenever the reader is found dead (the runtime it
    /// ran on shut down while the client lived on). `revive` must open a new
    /// subscription connection and call [`NotificationSink::reconnected`] once it is up.
    /// A second call is ignored: a backend has one reader.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn run_notification_reader<F, R, G>(&self, first: F, revive: R)
    where
        F: Future<Output = ()> + Send + 'static,
        R: Fn() -> G + Send + Sync + 'static,
        G: Future<Output = ()> + Send + 'static,
    {
        self.reader.get_or_init(|| ReaderTask::spawn(first, revive));
    }

    /// Listens on `channel`, with the notification reader running.
    async fn listen_on(&self, channel: &str) -> Result<Listener, Error> {
        if let Some(reader) = self.reader.get() {
            reader.ensure_running()?;
        }
        self.subscriptions.listen(channel).await
    }

    /// Channels this client is subscribed to for its waiters (for diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.subscriptions.channels()
    }

    /// Runs a script that writes a hold (acquire, renew): with replica acknowledgement
    /// on, also returns how many replicas confirmed (else `None`).
    async fn eval_write(
        &self,
        during: &'static str,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<(Reply, Option<u32>), Error> {
        match self.options.replica_ack {
            None => self
                .eval(during, script, keys, args)
                .await
                .map(|r| (r, None)),
            Some((replicas, timeout)) => {
                if self.transport.topology() == Topology::Cluster {
                    return Err(Error::invalid_config(
                        "replica acknowledgement is not supported on Redis Cluster",
                        None,
                    ));
                }
                let wait = ReplicaWait { replicas, timeout };
                let limit = Some(self.transport.response_timeout() * 2 + timeout);
                let sent = send_loading(script, keys, args, |call| {
                    TransportError::within(limit, self.transport.send_then_wait(call, wait))
                });
                let (reply, acks) = sent
                    .await
                    .map_err(|err| script_failed(err, during, script, keys, args))?;
                match acks {
                    Reply::Int(acks) => Ok((reply, Some(u32::try_from(acks).unwrap_or(0)))),
                    other => Err(unexpected("WAIT", &other)),
                }
            }
        }
    }

    async fn eval(
        &self,
        during: &'static str,
        script: &'static Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, Error> {
        let limit = (!self.transport.bounds_its_calls()).then(|| self.transport.response_timeout());
        send_loading(script, keys, args, |call| {
            TransportError::within(limit, self.transport.send(call))
        })
        .await
        .map_err(|err| script_failed(err, during, script, keys, args))
    }

    /// The restart epoch key for `name`: one per server, or one per slot in a cluster
    /// (a script's keys share the lock's slot).
    fn epoch_key(&self, name: &LockName) -> Cow<'static, str> {
        if self.transport.topology() != Topology::Cluster {
            return Cow::Borrowed(layout::EPOCH_PREFIX);
        }
        let slot = key_slot(layout::lock_key(name));
        let mut tags = self
            .slot_tags
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let tag = tags
            .entry(slot)
            .or_insert_with(|| layout::tag_for_slot(slot));
        Cow::Owned(format!("{}:{{{tag}}}", layout::EPOCH_PREFIX))
    }

    /// The restart quarantine in milliseconds, 0 for none.
    fn quarantine_ms(&self) -> u64 {
        self.options.restart_quarantine.map_or(0, millis)
    }

    /// The `PUBSUB` subcommand that counts the listeners of a release channel on the
    /// server that runs the script, or `""` where that count cannot see them all (classic
    /// pub/sub on a cluster reaches listeners on every node): then every release tells
    /// every listener.
    fn listener_count_command(&self) -> &'static str {
        match (self.options.publish, self.transport.topology()) {
            (PublishMode::Sharded, _) => "shardnumsub",
            (_, Topology::Cluster) => "",
            _ => "numsub",
        }
    }

    /// Whether a mutex release can wake this client on its own channel: with classic
    /// pub/sub outside a cluster, where a script may publish on any channel and count its
    /// listeners (a cluster's classic messages go to every node, and sharded channels
    /// must live in the lock's slot).
    /// The release script decides the same way, from the listener count command.
    fn wakes_on_own_channel(&self) -> bool {
        self.listener_count_command() == "numsub"
    }

    /// Subscribes this client's own channel; `None` where the server refuses it (a
    /// release then tells this client on the lock's channel, as every other client).
    async fn own_channel_listener(&self) -> Result<Option<Listener>, Error> {
        match self.listen_on(&self.own_channel).await {
            Ok(listener) => Ok(Some(listener)),
            Err(err) if err.is_backend() => {
                events::own_channel_refused(&err);
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// The channel a waiter of `lock` listens on.
    fn channel(lock: &LockRef) -> String {
        match lock.kind {
            LockKind::Fair => layout::fair_waiter_channel(&lock.name, lock.owner.as_str()),
            LockKind::Read | LockKind::Write => layout::rw_channel(&lock.name),
            _ => layout::mutex_channel(&lock.name),
        }
    }

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

    /// Runs the mutex's acquire script over its `keys` (see `mutex_acquire.lua`), with
    /// `numbers` the lease, the fencing flag, the quarantine, the grant's id and the latch
    /// lifetime, as the acquire takes them for every kind.
    async fn acquire_mutex(
        &self,
        lock: &LockRef,
        request: &AcquireRequest,
        keys: [&str; 7],
        [lease_ms, fencing, quarantine, grant, latch_ms]: [&str; 5],
    ) -> Result<(Reply, Option<u32>), Error> {
        let wait = request.wait.unwrap_or_default();
        let wake_id = if request.waits_to_be_woken_alone() {
            // Before the waiter listens: its first attempt comes first.
            self.registered_a_waiter
                .store(true, std::sync::atomic::Ordering::Relaxed);
            &*self.wake_id
        } else {
            ""
        };
        // A live waiter asks again within the holder's lease (its own, as a rule): a zset
        // of waiting clients none of which asked that long is gone.
        let mutex = Decimals::new([
            millis(self.options.reservation),
            millis(wait.waited),
            millis(request.lease.saturating_add(wait.place_kept_for)),
        ]);
        let [reservation_ms, waited_ms, registered_ms] = mutex.get();
        let args = [
            lease_ms,
            lock.owner.as_str(),
            flag(wait.starving),
            reservation_ms,
            waited_ms,
            fencing,
            quarantine,
            wake_id,
            registered_ms,
            grant,
            latch_ms,
        ];
        self.eval_write("acquiring", &script::MUTEX_ACQUIRE, &keys, &args)
            .await
    }

    /// Renews one batch of locks of one kind family in one slot.
    async fn renew_chunk(&self, locks: &[&LockRef], lease_ms: &str) -> Vec<Renewal> {
        // Per lock: the lock and its owner's grants hash.
        let grants: Vec<String> = locks
            .iter()
            .map(|l| layout::grants_key(&l.name, l.owner.as_str(), l.kind == LockKind::Write))
            .collect();
        let keys: Vec<&str> = locks
            .iter()
            .zip(&grants)
            .flat_map(|(l, grants)| [layout::lock_key(&l.name), grants.as_str()])
            .collect();
        let reads = locks.first().is_some_and(|l| l.kind == LockKind::Read);
        // Per lock: the owner's field, and for read holds the prefix of its hold keys.
        let per_lock: Vec<String> = locks
            .iter()
            .flat_map(|l| match l.kind {
                LockKind::Read => vec![
                    l.owner.as_str().to_owned(),
                    layout::read_hold_prefix(&l.name, l.owner.as_str()),
                ],
                LockKind::Write => vec![format!("{}:write", l.owner)],
                _ => vec![l.owner.as_str().to_owned()],
            })
            .collect();
        let mut args: Vec<&str> = Vec::with_capacity(per_lock.len() + 1);
        args.push(lease_ms);
        args.extend(per_lock.iter().map(String::as_str));
        let script = if reads {
            &script::RW_READ_RENEW
        } else {
            &script::MUTEX_RENEW
        };
        match self.eval_write("renewing", script, &keys, &args).await {
            Ok((_, Some(acknowledged)))
                if self
                    .options
                    .replica_ack
                    .is_some_and(|(wanted, _)| acknowledged < wanted) =>
            {
                let wanted = self.options.replica_ack.map_or(0, |(wanted, _)| wanted);
                locks
                    .iter()
                    .map(|_| {
                        Renewal::Failed(Error::backend_retryable(
                            "renewing",
                            NotReplicated {
                                wanted,
                                acknowledged,
                            },
                        ))
                    })
                    .collect()
            }
            Ok((Reply::Array(items), _)) if items.len() == locks.len() => items
                .iter()
                .map(|item| match item {
                    Reply::Int(1) => Renewal::Renewed,
                    _ => Renewal::Gone,
                })
                .collect(),
            Ok((other, _)) => {
                let err = unexpected("renew", &other);
                locks.iter().map(|_| Renewal::Failed(err.clone())).collect()
            }
            Err(err) => locks.iter().map(|_| Renewal::Failed(err.clone())).collect(),
        }
    }
}

/// Renewal scripts take one kind family at a time: read holds have their own script.
fn renew_family(kind: LockKind) -> u8 {
    u8::from(kind == LockKind::Read)
}

fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

#[async_trait]
impl Backend for RedisBackend {
    fn capabilities(&self) -> Capabilities {
        Self::CAPABILITIES.ordered_requests(self.transport.keeps_order())
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let name = &lock.name;
        let owner = lock.owner.as_str();
        let key = layout::lock_key(name);
        let mut built = layout::Keys::new(name);
        let (token_at, latch_at) = (built.token(), built.grant_latch(request.id));
        let grants_at = built.grants(owner, lock.kind == LockKind::Write);
        // Only the mutex's script takes these; made in the same buffer, they cost no
        // allocation.
        let (reservation_at, waiting_at) = (built.reservation(), built.waiting_clients());
        let mut grant = String::with_capacity(32);
        request.id.push_hex(&mut grant);
        let fencing = flag(request.fencing);
        let epoch = self.epoch_key(name);
        let wait = request.wait.unwrap_or_default();
        let numbers = Decimals::new([
            millis(request.lease),
            millis(request.retry_window),
            self.quarantine_ms(),
        ]);
        let [lease_ms, latch_ms, quarantine] = numbers.get();
        let (reply, acknowledged) = match lock.kind {
            LockKind::Fair => {
                let fair =
                    Decimals::new([millis(wait.place_kept_for), layout::REDISSON_WAIT_SLOT_MS]);
                let [timeout_ms, slot] = fair.get();
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let (token_key, latch) = (built.get(token_at), built.get(latch_at));
                let args = [
                    lease_ms,
                    owner,
                    flag(request.waits()),
                    timeout_ms,
                    fencing,
                    quarantine,
                    slot,
                    &grant,
                    latch_ms,
                ];
                let grants = built.get(grants_at);
                let keys = [
                    key, &queue, &deadlines, &alive, token_key, &epoch, grants, latch,
                ];
                self.eval_write("acquiring", &script::FAIR_ACQUIRE, &keys, &args)
                    .await?
            }
            LockKind::Read => {
                let prefix = layout::read_hold_prefix(name, owner);
                let args = [
                    lease_ms, owner, &prefix, fencing, quarantine, &grant, latch_ms,
                ];
                let keys = [
                    key,
                    built.get(token_at),
                    &epoch,
                    built.get(grants_at),
                    built.get(latch_at),
                ];
                self.eval_write("acquiring", &script::RW_READ_ACQUIRE, &keys, &args)
                    .await?
            }
            LockKind::Write => {
                let prefix = layout::read_hold_prefix(name, owner);
                let args = [
                    lease_ms, owner, fencing, quarantine, &prefix, &grant, latch_ms,
                ];
                let keys = [
                    key,
                    built.get(token_at),
                    &epoch,
                    built.get(grants_at),
                    built.get(latch_at),
                ];
                self.eval_write("acquiring", &script::RW_WRITE_ACQUIRE, &keys, &args)
                    .await?
            }
            _ => {
                let keys = [
                    key,
                    built.get(reservation_at),
                    built.get(token_at),
                    &epoch,
                    built.get(waiting_at),
                    built.get(grants_at),
                    built.get(latch_at),
                ];
                let numbers = [lease_ms, fencing, quarantine, &grant, latch_ms];
                self.acquire_mutex(lock, &request, keys, numbers).await?
            }
        };
        let answer = AcquireAnswer::of(&reply);
        let items = answer.as_ref().map(AcquireAnswer::items);
        if let (Some([1, ..]), Some(acknowledged)) = (items, acknowledged) {
            self.give_back_unreplicated(lock, &request, acknowledged)
                .await?;
        }
        let origin = answer.as_ref().and_then(|answer| answer.origin);
        decode_acquire(items, origin, &reply, name, request.fencing)
    }

    async fn raise_fencing(&self, lock: &LockRef, token: u64) -> Result<(), Error> {
        let key = layout::token_key(&lock.name);
        let token = token.to_string();
        self.eval(
            "raising the fencing counter",
            &script::FENCING_RAISE,
            &[&key],
            &[&token],
        )
        .await
        .map(drop)
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        let name = &lock.name;
        let owner = lock.owner.as_str();
        let key = layout::lock_key(name);
        let publish = self.options.publish.command();
        // Every release script ends its keys with the owner's grants hash and the
        // grant's latch, and its arguments with the grant's id and the latch lifetime.
        let mut built = layout::Keys::new(name);
        let grants_at = built.grants(owner, lock.kind == LockKind::Write);
        let latch_at = built.grant_latch(request.grant);
        let mut grant = String::with_capacity(32);
        request.grant.push_hex(&mut grant);
        // Kept twice the window: a copy of the grant's acquire request that comes later
        // than its own retries could must still find the grant ended.
        let numbers = Decimals::new([
            millis(request.lease),
            millis(request.retry_window.saturating_mul(2)),
            millis(self.options.reservation),
        ]);
        let [lease_ms, latch_ms, offer_ms] = numbers.get();
        let reply = match lock.kind {
            LockKind::Fair => {
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let prefix = layout::mutex_channel(name);
                let args = [lease_ms, owner, &prefix, publish, &grant, latch_ms];
                let (grants, latch) = (built.get(grants_at), built.get(latch_at));
                let keys = [key, &queue, &deadlines, &alive, grants, latch];
                self.eval("releasing", &script::FAIR_RELEASE, &keys, &args)
                    .await?
            }
            LockKind::Read => {
                let (channel, tagged) = (layout::rw_channel(name), layout::tagged(name));
                let args = [owner, &channel, publish, &tagged, &grant, latch_ms];
                let keys = [key, built.get(grants_at), built.get(latch_at)];
                self.eval("releasing", &script::RW_READ_RELEASE, &keys, &args)
                    .await?
            }
            LockKind::Write => {
                let channel = layout::rw_channel(name);
                let args = [lease_ms, owner, &channel, publish, &grant, latch_ms];
                let keys = [key, built.get(grants_at), built.get(latch_at)];
                self.eval("releasing", &script::RW_WRITE_RELEASE, &keys, &args)
                    .await?
            }
            _ => {
                let channel_at = built.mutex_channel();
                let (waiting_at, reservation_at) = (built.waiting_clients(), built.reservation());
                let count = self.listener_count_command();
                let channel = built.get(channel_at);
                let args = [
                    lease_ms, owner, channel, publish, count, offer_ms, &grant, latch_ms,
                ];
                let keys = [
                    key,
                    built.get(waiting_at),
                    built.get(reservation_at),
                    built.get(grants_at),
                    built.get(latch_at),
                ];
                self.eval("releasing", &script::MUTEX_RELEASE, &keys, &args)
                    .await?
            }
        };
        match reply {
            Reply::Int(-1) => Ok(Release::NotHeld),
            Reply::Int(0) => Ok(Release::Released),
            Reply::Int(n) if n > 0 => Ok(Release::StillHeld {
                holds: count(n, &reply)?,
            }),
            other => Err(unexpected("release", &other)),
        }
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        let lease_ms = millis(lease).to_string();
        // Group by slot in a cluster (one script's keys must share a slot; on a single
        // master every lock fits one group) and by script. Order inside a group follows
        // the input.
        let mut groups: BTreeMap<(u16, u8), Vec<usize>> = BTreeMap::new();
        for (i, lock) in locks.iter().enumerate() {
            let slot = match self.transport.topology() {
                Topology::Cluster => key_slot(layout::lock_key(&lock.name)),
                _ => 0,
            };
            groups
                .entry((slot, renew_family(lock.kind)))
                .or_default()
                .push(i);
        }
        let chunks: Vec<Vec<usize>> = groups
            .into_values()
            .flat_map(|group| {
                group
                    .chunks(self.options.renew_batch)
                    .map(<[usize]>::to_vec)
                    .collect::<Vec<_>>()
            })
            .collect();
        let calls = chunks.iter().map(|chunk| {
            let refs: Vec<&LockRef> = chunk.iter().map(|&i| &locks[i]).collect();
            let lease_ms = &lease_ms;
            async move { self.renew_chunk(&refs, lease_ms).await }
        });
        let results = futures_util::future::join_all(calls).await;
        let mut out: Vec<Option<Renewal>> = vec![None; locks.len()];
        for (chunk, outcomes) in chunks.iter().zip(results) {
            for (&i, outcome) in chunk.iter().zip(outcomes) {
                out[i] = Some(outcome);
            }
        }
        out.into_iter()
            .map(|o| o.unwrap_or_else(|| Renewal::Failed(Error::protocol("renewal lost"))))
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let (field, mode) = match lock.kind {
            LockKind::Read => (lock.owner.as_str().to_owned(), "read"),
            LockKind::Write => (format!("{}:write", lock.owner), "write"),
            _ => (lock.owner.as_str().to_owned(), ""),
        };
        let reply = self
            .eval(
                "inspecting",
                &script::MUTEX_INSPECT,
                &[layout::lock_key(&lock.name)],
                &[&field, mode],
            )
            .await?;
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
        let reply = match lock.kind {
            LockKind::Fair => {
                let [queue, deadlines, alive] = layout::fair_queue_keys(name);
                let prefix = layout::mutex_channel(name);
                let keys = [key, &queue, &deadlines, &alive];
                self.eval(
                    "force-releasing",
                    &script::FAIR_FORCE_RELEASE,
                    &keys,
                    &[&prefix, publish],
                )
                .await?
            }
            LockKind::Read | LockKind::Write => {
                let mode = if lock.kind == LockKind::Read {
                    "read"
                } else {
                    "write"
                };
                let channel = layout::rw_channel(name);
                self.eval(
                    "force-releasing",
                    &script::RW_FORCE_RELEASE,
                    &[key],
                    &[mode, &channel, publish],
                )
                .await?
            }
            _ => {
                let channel = layout::mutex_channel(name);
                self.eval(
                    "force-releasing",
                    &script::MUTEX_FORCE_RELEASE,
                    &[key],
                    &[&channel, publish],
                )
                .await?
            }
        };
        match reply {
            Reply::Int(n) => Ok(n == 1),
            other => Err(unexpected("force release", &other)),
        }
    }

    async fn cancel_wait(&self, lock: &LockRef) -> Result<(), Error> {
        let name = &lock.name;
        match lock.kind {
            LockKind::Fair => {}
            LockKind::Mutex => {
                let channel = layout::mutex_channel(name);
                let waiting = layout::waiting_clients_key(name);
                let reservation = layout::reservation_key(name);
                let keys = [layout::lock_key(name), &waiting, &reservation];
                let offer_ms = millis(self.options.reservation).to_string();
                let args = [
                    &*self.wake_id,
                    &channel,
                    self.options.publish.command(),
                    self.listener_count_command(),
                    &offer_ms,
                ];
                return self
                    .eval("leaving the waiters", &script::MUTEX_CANCEL, &keys, &args)
                    .await
                    .map(drop);
            }
            _ => return Ok(()),
        }
        let [queue, deadlines, alive] = layout::fair_queue_keys(name);
        let prefix = layout::mutex_channel(name);
        let keys = [layout::lock_key(name), &queue, &deadlines, &alive];
        let slot = layout::REDISSON_WAIT_SLOT_MS.to_string();
        let args = [
            lock.owner.as_str(),
            &prefix,
            self.options.publish.command(),
            &slot,
        ];
        self.eval("leaving the queue", &script::FAIR_CANCEL, &keys, &args)
            .await
            .map(drop)
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        use std::sync::atomic::Ordering;
        let channel = Self::channel(lock);
        if lock.kind != LockKind::Mutex
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

    fn latches(&self) -> Option<&dyn LatchBackend> {
        Some(self)
    }

    fn semaphores(&self) -> Option<&dyn SemaphoreBackend> {
        Some(self)
    }

    fn expirable_semaphores(&self) -> Option<&dyn lock_core::backend::ExpirableSemaphoreBackend> {
        Some(self)
    }
}

/// Redisson's `RSemaphore`: the available count in the string `name`, the new count
/// published on `redisson_sc:{name}`.
#[async_trait]
impl SemaphoreBackend for RedisBackend {
    async fn try_set_permits(&self, name: &LockName, permits: u64) -> Result<bool, Error> {
        let permits = permits.to_string();
        let channel = layout::semaphore_channel(name);
        let args = [&*permits, &channel, self.options.publish.command()];
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_SET;
        integer(
            "semaphore set",
            self.eval("setting permits", script, &keys, &args).await?,
        )
        .map(|set| set == 1)
    }

    async fn add_permits(&self, name: &LockName, delta: i64) -> Result<i64, Error> {
        let delta = delta.to_string();
        let channel = layout::semaphore_channel(name);
        let args = [&*delta, &channel, self.options.publish.command()];
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_ADD;
        integer(
            "semaphore add",
            self.eval("adding permits", script, &keys, &args).await?,
        )
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        let grant = layout::permit_answer_key(name, request.id);
        let reserved = layout::permit_reservation_key(name);
        let permits = request.permits.to_string();
        let [reserving, so_far_ms, kept_ms] = reservation_args(request.reserve);
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &grant, &reserved, &marker, &peak];
        let args = [&*permits, &reserving, &so_far_ms, &kept_ms];
        let script = &script::SEMAPHORE_ACQUIRE;
        let reply = self.eval("taking permits", script, &keys, &args).await?;
        match integer("semaphore acquire", reply)? {
            1 => Ok(PermitAnswer::Taken),
            0 => Ok(PermitAnswer::Unavailable),
            2 => Ok(PermitAnswer::BeyondPeak),
            other => Err(unexpected("semaphore acquire", &Reply::Int(other))),
        }
    }

    async fn release(&self, name: &LockName, request: PermitRequest) -> Result<i64, Error> {
        let grant = layout::permit_answer_key(name, request.id);
        let channel = layout::semaphore_channel(name);
        let remembered = millis(request.retry_window).to_string();
        let publish = self.options.publish.command();
        let args = [&*channel, publish, &remembered];
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &grant, &marker];
        let script = &script::SEMAPHORE_RELEASE;
        integer(
            "semaphore release",
            self.eval("giving permits back", script, &keys, &args)
                .await?,
        )
    }

    async fn available(&self, name: &LockName) -> Result<i64, Error> {
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_READ;
        integer(
            "semaphore read",
            self.eval("reading permits", script, &keys, &["read"])
                .await?,
        )
    }

    async fn cancel_reservation(&self, name: &LockName, waiter: RequestId) -> Result<(), Error> {
        let keys = [&*layout::permit_reservation_key(name)];
        let waiter = waiter.to_string();
        let script = &script::SEMAPHORE_UNRESERVE;
        self.eval("taking a reservation back", script, &keys, &[&waiter])
            .await
            .map(drop)
    }

    async fn drain(&self, name: &LockName) -> Result<i64, Error> {
        let (marker, peak) = (layout::kind_marker_key(name), layout::permit_peak_key(name));
        let keys = [layout::lock_key(name), &marker, &peak];
        let script = &script::SEMAPHORE_READ;
        integer(
            "semaphore drain",
            self.eval("draining permits", script, &keys, &["drain"])
                .await?,
        )
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.listen_on(&layout::semaphore_channel(name)).await
    }
}

/// The arguments a semaphore script takes for a starving waiter's reservation: its id
/// (empty when not starving), how long it has waited and how long a reservation is kept
/// (ms).
fn reservation_args(reserve: Option<lock_core::backend::PermitReservation>) -> [String; 3] {
    match reserve {
        Some(reserve) => [
            reserve.waiter.to_string(),
            reserve.waited.as_millis().to_string(),
            millis(reserve.kept_for).to_string(),
        ],
        None => [String::new(), "0".to_owned(), "1".to_owned()],
    }
}

/// A script's integer answer.
fn integer(what: &str, reply: Reply) -> Result<i64, Error> {
    match reply {
        Reply::Int(n) => Ok(n),
        other => Err(unexpected(what, &other)),
    }
}

/// Redisson's `RCountDownLatch`: the count in the string `name`, messages on
/// `redisson_countdownlatch__channel__{name}` (`0` opened, `1` closed again).
#[async_trait]
impl LatchBackend for RedisBackend {
    async fn try_set_count(&self, name: &LockName, count: u64) -> Result<bool, Error> {
        let count = count.to_string();
        let [channel, java] = self.latch_channels(name);
        let args = [&*count, &channel, self.options.publish.command(), &java];
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &marker];
        match self
            .eval("setting a latch", &script::LATCH_SET, &keys, &args)
            .await?
        {
            Reply::Int(set) => Ok(set == 1),
            other => Err(unexpected("latch set", &other)),
        }
    }

    async fn count_down(&self, name: &LockName, request: LatchRequest) -> Result<u64, Error> {
        let answer = layout::count_down_answer_key(name, request.id);
        let [channel, java] = self.latch_channels(name);
        let remembered = millis(request.retry_window).to_string();
        let args = [
            &*channel,
            self.options.publish.command(),
            &remembered,
            &java,
        ];
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &answer, &marker];
        let script = &script::LATCH_COUNT_DOWN;
        match self
            .eval("counting a latch down", script, &keys, &args)
            .await?
        {
            Reply::Int(left) => Ok(u64::try_from(left).unwrap_or(0)),
            other => Err(unexpected("latch count-down", &other)),
        }
    }

    async fn count(&self, name: &LockName) -> Result<u64, Error> {
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &marker];
        match self
            .eval("reading a latch", &script::LATCH_COUNT, &keys, &[])
            .await?
        {
            Reply::Int(count) => Ok(u64::try_from(count).unwrap_or(0)),
            other => Err(unexpected("latch count", &other)),
        }
    }

    async fn delete(&self, name: &LockName) -> Result<bool, Error> {
        let [channel, java] = self.latch_channels(name);
        let args = [&*channel, self.options.publish.command(), &java];
        let marker = layout::kind_marker_key(name);
        let keys = [layout::lock_key(name), &marker];
        match self
            .eval("deleting a latch", &script::LATCH_DELETE, &keys, &args)
            .await?
        {
            Reply::Int(deleted) => Ok(deleted == 1),
            other => Err(unexpected("latch delete", &other)),
        }
    }

    async fn listen(&self, name: &LockName) -> Result<Listener, Error> {
        self.listen_on(&layout::latch_listen_channel(name)).await
    }
}

impl RedisBackend {
    /// Where a latch's messages go: the channel our waiters listen on, and Java's
    /// channel when it is another one that a publish next to the key still reaches
    /// (classic pub/sub carries every channel everywhere; sharded pub/sub only the
    /// key's slot, where Java's channel for a hash-tagged name is not), else empty.
    fn latch_channels(&self, name: &LockName) -> [String; 2] {
        let ours = layout::latch_listen_channel(name);
        let java = layout::latch_channel(name);
        let sharded = self.options.publish.command() == PublishMode::Sharded.command();
        if java == ours || sharded {
            [ours, String::new()]
        } else {
            [ours, java]
        }
    }
}

/// A command a script ran was refused (an ACL without it): Redis names the script line,
/// not the command. Finds the command on that line (a literal, or the `KEYS`/`ARGV`
/// element it names) and says which one it was.
fn name_refused_command(
    server: ServerError,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> ServerError {
    let refused = server.code == "NOPERM" || server.message.contains("can't run this command");
    let line = server
        .message
        .rsplit_once("@user_script:")
        .and_then(|(_, rest)| rest.trim_end_matches('.').trim().parse::<usize>().ok());
    let (true, Some(line)) = (refused, line) else {
        return server;
    };
    let command = script
        .source()
        .lines()
        .nth(line.saturating_sub(1))
        .and_then(|text| {
            text.split_once("redis.call(")
                .or_else(|| text.split_once("redis.pcall("))
        })
        .and_then(|(_, call)| call.split([',', ')']).next())
        .map(str::trim)
        .and_then(|first| {
            let index = |prefix: &str| {
                first
                    .strip_prefix(prefix)?
                    .strip_suffix(']')?
                    .parse::<usize>()
                    .ok()
            };
            if let Some(i) = index("ARGV[") {
                args.get(i.checked_sub(1)?).map(|a| (*a).to_owned())
            } else if let Some(i) = index("KEYS[") {
                keys.get(i.checked_sub(1)?).map(|k| (*k).to_owned())
            } else {
                Some(first.trim_matches('\'').to_owned())
            }
        });
    match command {
        Some(command) => ServerError::new(
            "NOPERM",
            format!(
                "the server refused `{command}` in the lock script `{}` (ACL): {}",
                script.name(),
                server.message
            ),
        ),
        None => server,
    }
}

/// Sends a script by SHA, and with its source (which loads it) if the server does not
/// know it (after a restart or `SCRIPT FLUSH`). In a cluster, `EVAL` is routed like
/// `EVALSHA`, so the script lands on the node that needs it.
async fn send_loading<'a, T, F, Fut>(
    script: &'static Script,
    keys: &'a [&'a str],
    args: &'a [&'a str],
    send: F,
) -> Result<T, TransportError>
where
    F: Fn(ScriptCall<'a>) -> Fut,
    Fut: Future<Output = Result<T, TransportError>>,
{
    let mut call = ScriptCall {
        script,
        keys,
        args,
        form: ScriptForm::BySha,
    };
    match send(call).await {
        Err(TransportError::Server(err)) if err.code == "NOSCRIPT" => {
            call.form = ScriptForm::WithSource;
            send(call).await
        }
        other => other,
    }
}

/// A script call's failure as a lock-core error, naming the command an ACL refused.
fn script_failed(
    err: TransportError,
    during: &'static str,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> Error {
    let err = match err {
        TransportError::Server(server) => {
            TransportError::Server(name_refused_command(server, script, keys, args))
        }
        other => other,
    };
    classify(err, during, keys.first().copied().unwrap_or(""))
}

fn classify(err: TransportError, during: &'static str, key: &str) -> Error {
    match err {
        TransportError::Server(server)
            if server.code == "WRONGTYPE" || server.message.contains("WRONGTYPE") =>
        {
            Error::incompatible(
                key,
                WrongType {
                    key: key.to_owned(),
                },
            )
        }
        // The command did not run where it was sent (a slot moved, a node is loading or
        // became a replica): like a broken connection, it is sent again.
        TransportError::Server(server) if not_run_here(&server) => {
            Error::connection(during, server)
        }
        // Out of memory, or busy running another script: the same request may pass later.
        TransportError::Server(server) if matches!(server.code.as_str(), "OOM" | "BUSY") => {
            Error::backend_retryable(during, server)
        }
        TransportError::Server(server) => Error::backend(during, server),
        TransportError::Io(source) => Error::connection(during, source),
    }
}

/// The integers an acquire script answers with (two or three), read without allocating,
/// and a grant's origin.
struct AcquireAnswer {
    items: [i64; 3],
    len: usize,
    origin: Option<RequestId>,
}

impl AcquireAnswer {
    /// A grant (`'<holds>:<token>'`, read as `[1, holds, token]`), or an array of at most
    /// three integers; `None` for anything else.
    fn of(reply: &Reply) -> Option<Self> {
        let replies = match reply {
            Reply::Bytes(grant) => return Self::grant(grant),
            Reply::Array(replies) => replies,
            _ => return None,
        };
        let mut answer = Self {
            items: [0; 3],
            len: 0,
            origin: None,
        };
        for reply in replies {
            let (Reply::Int(n), Some(slot)) = (reply, answer.items.get_mut(answer.len)) else {
                return None;
            };
            *slot = *n;
            answer.len += 1;
        }
        Some(answer)
    }

    /// `'<holds>:<token>:<origin>'`.
    fn grant(grant: &[u8]) -> Option<Self> {
        let (holds, rest) = std::str::from_utf8(grant).ok()?.split_once(':')?;
        let (token, origin) = rest.split_once(':')?;
        Some(Self {
            items: [1, holds.parse().ok()?, token.parse().ok()?],
            len: 3,
            origin: Some(RequestId::from_hex(origin)?),
        })
    }

    fn items(&self) -> &[i64] {
        &self.items[..self.len]
    }
}

/// An acquire script's answer: `'<holds>:<token>:<origin>'` (read as
/// `[1, holds, token]` and the origin),
/// `{0, ttl}` busy, `{2, ttl}` reserved for a starving waiter, `{3, _}` an upgrade that
/// would wait for itself, `{4, ms}` no grants during the restart quarantine (reported
/// through `tracing`).
fn decode_acquire(
    items: Option<&[i64]>,
    origin: Option<RequestId>,
    reply: &Reply,
    name: &LockName,
    fencing: bool,
) -> Result<Acquire, Error> {
    match items {
        Some([1, holds, token]) => Ok(Acquire::Acquired {
            holds: count(*holds, reply)?,
            token: u64::try_from(*token).ok().filter(|&t| fencing && t > 0),
            origin,
        }),
        Some([0, ttl]) => Ok(Acquire::Busy {
            ttl: pttl(*ttl),
            reserved: false,
        }),
        Some([2, ttl]) => Ok(Acquire::Busy {
            ttl: pttl(*ttl),
            reserved: true,
        }),
        Some([4, left]) => {
            let left = pttl(*left);
            events::quarantine_active(name, left);
            Ok(Acquire::Busy {
                ttl: left,
                reserved: false,
            })
        }
        Some([3, _]) => Err(Error::WouldDeadlock {
            name: name.as_str().to_owned(),
        }),
        _ => Err(unexpected("acquire", reply)),
    }
}

/// Error replies that mean the server did not run the command.
fn not_run_here(server: &ServerError) -> bool {
    matches!(
        server.code.as_str(),
        "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "READONLY" | "MASTERDOWN"
    )
}

/// Whole milliseconds, at least one (a zero lease would mean none), at most `u64::MAX`.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn pttl(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}

fn count(n: i64, reply: &Reply) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| unexpected("a hold count", reply))
}

fn unexpected(what: &str, reply: &Reply) -> Error {
    Error::protocol(format!("{what} script answered {reply:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_acquire_answer_is_a_grant_or_two_integers_and_nothing_else() {
        let ints = |ns: &[i64]| Reply::Array(ns.iter().map(|&n| Reply::Int(n)).collect());
        let read = |reply: &Reply| AcquireAnswer::of(reply).map(|a| a.items().to_vec());
        let bytes = |s: &str| Reply::Bytes(s.as_bytes().to_vec());
        let origin = RequestId::random();
        let grant = format!("2:7:{origin}");
        assert_eq!(read(&bytes(&grant)), Some(vec![1, 2, 7]));
        assert_eq!(
            AcquireAnswer::of(&bytes(&grant)).and_then(|a| a.origin),
            Some(origin)
        );
        assert_eq!(read(&bytes("2:7")), None, "a grant without its origin");
        assert_eq!(read(&bytes("2:7:x")), None, "an origin that is no id");
        assert_eq!(read(&bytes("2")), None, "a grant without its token");
        assert_eq!(
            read(&bytes(&format!("2:x:{origin}"))),
            None,
            "a token that is no number"
        );
        assert_eq!(read(&ints(&[0, 250])), Some(vec![0, 250]));
        assert_eq!(read(&ints(&[1, 1, 7, 8])), None, "a fourth integer");
        assert_eq!(
            read(&Reply::Array(vec![Reply::Int(0), Reply::Nil])),
            None,
            "not an integer"
        );
        assert_eq!(read(&Reply::Int(1)), None, "not an array");
        let name = LockName::new("n").expect("valid name");
        let too_long = ints(&[1, 1, 7, 8]);
        let decoded = decode_acquire(None, None, &too_long, &name, true);
        assert!(decoded.is_err(), "an unreadable answer is an error");
    }

    #[test]
    fn the_publish_mode_is_decided_as_redisson_decides_it() {
        let cases = [
            (
                PublishMode::Auto,
                Topology::Cluster,
                true,
                Some(PublishMode::Sharded),
            ),
            (
                PublishMode::Auto,
                Topology::Cluster,
                false,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Auto,
                Topology::Single,
                true,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Classic,
                Topology::Cluster,
                true,
                Some(PublishMode::Classic),
            ),
            (
                PublishMode::Sharded,
                Topology::Cluster,
                false,
                Some(PublishMode::Sharded),
            ),
            (PublishMode::Sharded, Topology::Single, true, None),
        ];
        for (mode, topology, supported, expected) in cases {
            let decided = mode.decide(topology, supported).ok();
            assert_eq!(decided, expected, "{mode:?} on {topology:?} ({supported})");
        }
    }
}
