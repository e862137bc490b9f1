//! [`RedisBackend`]: the lock protocol over any [`Transport`].
//!
//! This module holds the backend's state and what every operation shares; each family
//! of operations lives in its own file: the locks, the semaphore, the expirable
//! semaphore, the latch; running a script and reading its failure (`call`); reading an
//! acquire's answer (`answer`).

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Capabilities, HoldModel, LockKind, LockRef};
use lock_core::notify::{Listener, ReaderTask, Subscriptions};
use lock_core::{Error, LockName};

use crate::events;
use crate::layout;
use crate::slot::key_slot;
use crate::transport::{NotificationSink, Reply, Topology, Transport, TransportError};

mod answer;
mod call;
mod code;
mod expirable;
mod introspect;
mod latch;
mod locks;
mod options;
mod release;
mod renew;
mod semaphore;

pub use options::{ProtocolOptions, PublishMode, ServerCode};

/// The Redis lock protocol (Redisson's data layout) over a [`Transport`].
pub struct RedisBackend {
    transport: Arc<dyn Transport>,
    /// Cluster hash tags by slot, for the per-slot restart epoch keys.
    slot_tags: std::sync::Mutex<std::collections::HashMap<u16, String>>,
    subscriptions: Subscriptions,
    options: ProtocolOptions,
    /// Functions or scripts, as the options ask and the server allows.
    code: code::CodeForm,
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
        .wakes_one_client(true)
        .hands_over(true)
        .introspection(true);

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
            code: code::CodeForm::new(options.server_code),
            options,
            alive: Arc::new(tokio::sync::watch::Sender::new(())),
            own_channel: layout::own_channel(&wake_id).into(),
            wake_id: Arc::from(wake_id),
            own_listener: tokio::sync::OnceCell::new(),
            reader: std::sync::OnceLock::new(),
            registered_a_waiter: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Readies the server for this client's calls, so that its first lock call pays
    /// nothing for them: where they go as functions, one call finds the library (loading
    /// it where it is missing), or this client turns to scripts (see [`ServerCode`]).
    /// Adapters call it at connect.
    ///
    /// # Errors
    ///
    /// A [`Backend`](lock_core::ErrorKind::Backend) error when a client set to
    /// [`ServerCode::Functions`] finds the library missing and may not load it (it says
    /// what loads it), or the server cannot run functions. A connection that fails here
    /// is no error: the server may be restarting, and the client's first call finds (or
    /// loads) the library as any call does.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only reads, and loading is idempotent.
    pub async fn prepare(&self) -> Result<(), Error> {
        if self.code.form() != crate::script::ScriptForm::Function {
            return Ok(());
        }
        let key = layout::client_key(&self.wake_id);
        let call = crate::calls::ClientRead { client: &key };
        match self.run("preparing the server's functions", &call).await {
            Err(err) if err.kind() == lock_core::ErrorKind::Connection => {
                tracing::debug!(
                    target: lock_core::TRACING_TARGET,
                    error = %err.chain(),
                    "the server's functions were not checked at connect; the first call will"
                );
                Ok(())
            }
            done => done.map(drop),
        }
    }

    /// Loads the function library ([`script::library`](crate::script::library)) on every
    /// primary of the deployment, as `distlock functions load` does: what clients set to
    /// [`ServerCode::Functions`] need where their own user may not load it. Loading it
    /// again is harmless. Returns the library's name.
    ///
    /// # Errors
    ///
    /// A [`Backend`](lock_core::ErrorKind::Backend) error when the server refuses it (a
    /// server before Redis 7.0, or an ACL without `FUNCTION LOAD`), a connection error
    /// when it cannot be reached.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: loading is idempotent, and a load cut short may be run again.
    pub async fn load_functions(&self) -> Result<&'static str, Error> {
        let library = crate::script::library();
        let limit = Some(self.transport.response_timeout());
        let loaded =
            TransportError::within(limit, self.transport.load_library(library.source())).await;
        match loaded {
            Ok(()) => Ok(library.name()),
            Err(TransportError::Server(refused)) => Err(Error::backend(
                "loading the function library",
                crate::transport::Refused::new("FUNCTION LOAD", refused),
            )),
            Err(TransportError::Io(source)) => {
                Err(Error::connection("loading the function library", source))
            }
        }
    }

    /// Where the adapter delivers messages and reconnect events.
    #[must_use]
    pub fn notification_sink(&self) -> NotificationSink {
        NotificationSink::new(
            self.subscriptions.clone(),
            &self.alive,
            (Arc::clone(&self.wake_id), Arc::clone(&self.own_channel)),
            self.options.replica_ack.is_none(),
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
    fn channel(lock: &LockRef, family: Family) -> String {
        match family {
            Family::Fair => layout::fair_waiter_channel(&lock.name, lock.owner.as_str()),
            Family::Read | Family::Write => layout::rw_channel(&lock.name),
            Family::Mutex => layout::mutex_channel(&lock.name),
        }
    }
}

/// The lock kinds this protocol serves, so that every match on a kind is exhaustive.
/// Lock-core's [`LockKind`] may grow: a kind this protocol does not know is refused with
/// a typed error, never served as a mutex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    Mutex,
    Fair,
    Read,
    Write,
}

impl Family {
    fn of(kind: LockKind) -> Result<Self, Error> {
        match kind {
            LockKind::Mutex => Ok(Self::Mutex),
            LockKind::Fair => Ok(Self::Fair),
            LockKind::Read => Ok(Self::Read),
            LockKind::Write => Ok(Self::Write),
            _ => Err(Error::unsupported("this lock kind on Redis")),
        }
    }
}

fn flag(on: bool) -> &'static str {
    if on { "1" } else { "0" }
}

/// A script's integer answer.
fn integer(what: &str, reply: Reply) -> Result<i64, Error> {
    match reply {
        Reply::Int(n) => Ok(n),
        other => Err(unexpected(what, &other)),
    }
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
