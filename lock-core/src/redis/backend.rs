//! [`RedisBackend`]: the lock protocol over any [`Transport`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::Error;
use crate::backend::{
    Acquire, AcquireRequest, Backend, LockKind, LockRef, LockState, Release, Renewal,
};
use crate::notify::{Listener, Subscriptions};
use crate::redis::layout;
use crate::redis::script::{self, Script};
use crate::redis::slot::key_slot;
use crate::redis::transport::{NotificationSink, Reply, Topology, Transport, TransportError};

/// How releases are published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PublishMode {
    /// `PUBLISH`/`SUBSCRIBE`: works everywhere; in a cluster every node forwards it.
    #[default]
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7 cluster): only the slot's shard carries it. Redisson
    /// uses this on Redis 7 clusters, so choose it to share locks with such a peer.
    Sharded,
}

impl PublishMode {
    fn command(self) -> &'static str {
        match self {
            Self::Classic => "publish",
            Self::Sharded => "spublish",
        }
    }
}

/// Settings of the Redis lock protocol.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ProtocolOptions {
    /// How releases are published. Default: [`PublishMode::Classic`].
    pub publish: PublishMode,
    /// Most locks renewed by one script call. Default: 100, as Redisson.
    pub renew_batch: usize,
    /// How long a starving waiter's reservation of a lock's next free moment lasts
    /// without being refreshed; it bounds how long a waiter that died while starving can
    /// keep a free lock from others. Default: 100 ms.
    pub reservation: Duration,
}

impl Default for ProtocolOptions {
    fn default() -> Self {
        Self {
            publish: PublishMode::Classic,
            renew_batch: 100,
            reservation: Duration::from_millis(100),
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

    /// Sets how long a starving waiter's reservation lasts (at least 1 ms).
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
    subscriptions: Subscriptions,
    options: ProtocolOptions,
    alive: Arc<()>,
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
    /// Runs the protocol over `transport`.
    ///
    /// The adapter feeds what its subscription connection receives into
    /// [`RedisBackend::notification_sink`].
    #[must_use]
    pub fn new(transport: Arc<dyn Transport>, options: ProtocolOptions) -> Self {
        let subscriptions = Subscriptions::new(transport.clone());
        Self {
            transport,
            subscriptions,
            options,
            alive: Arc::new(()),
        }
    }

    /// Where the adapter delivers messages and reconnect events.
    #[must_use]
    pub fn notification_sink(&self) -> NotificationSink {
        NotificationSink::new(self.subscriptions.clone(), &self.alive)
    }

    /// Channels this client is subscribed to for its waiters (for diagnostics).
    #[must_use]
    pub fn subscribed_channels(&self) -> Vec<String> {
        self.subscriptions.channels()
    }

    async fn eval(
        &self,
        during: &'static str,
        script: &Script,
        keys: &[&str],
        args: &[&str],
    ) -> Result<Reply, Error> {
        self.transport
            .eval(script, keys, args)
            .await
            .map_err(|err| classify(err, during, keys.first().copied().unwrap_or("")))
    }

    fn channel(lock: &LockRef) -> String {
        match lock.kind {
            LockKind::Mutex => layout::mutex_channel(&lock.name),
        }
    }

    async fn renew_chunk(&self, locks: &[&LockRef], lease_ms: &str) -> Vec<Renewal> {
        let keys: Vec<&str> = locks.iter().map(|l| layout::lock_key(&l.name)).collect();
        let mut args: Vec<&str> = Vec::with_capacity(locks.len() + 1);
        args.push(lease_ms);
        args.extend(locks.iter().map(|l| l.owner.as_str()));
        match self
            .eval("renewing", &script::MUTEX_RENEW, &keys, &args)
            .await
        {
            Ok(Reply::Array(items)) if items.len() == locks.len() => items
                .iter()
                .map(|item| match item {
                    Reply::Int(1) => Renewal::Renewed,
                    _ => Renewal::Gone,
                })
                .collect(),
            Ok(other) => {
                let err = Arc::new(unexpected("renew", &other));
                locks.iter().map(|_| Renewal::Failed(err.clone())).collect()
            }
            Err(err) => {
                let err = Arc::new(err);
                locks.iter().map(|_| Renewal::Failed(err.clone())).collect()
            }
        }
    }
}

#[async_trait]
impl Backend for RedisBackend {
    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        let lease_ms = millis(request.lease).to_string();
        let reservation_ms = millis(self.options.reservation).to_string();
        let waited_ms = millis(request.waited).to_string();
        let key = layout::lock_key(&lock.name);
        let reservation = layout::reservation_key(&lock.name);
        let reply = self
            .eval(
                "acquiring",
                &script::MUTEX_ACQUIRE,
                &[key, &reservation],
                &[
                    &lease_ms,
                    lock.owner.as_str(),
                    if request.starving { "1" } else { "0" },
                    &reservation_ms,
                    &waited_ms,
                ],
            )
            .await?;
        match pair(&reply) {
            Some((1, holds)) => Ok(Acquire::Acquired {
                holds: count(holds, &reply)?,
            }),
            Some((0, ttl)) => Ok(Acquire::Busy {
                ttl: pttl(ttl),
                reserved: false,
            }),
            Some((2, ttl)) => Ok(Acquire::Busy {
                ttl: pttl(ttl),
                reserved: true,
            }),
            _ => Err(unexpected("acquire", &reply)),
        }
    }

    async fn release(&self, lock: &LockRef, lease: Duration) -> Result<Release, Error> {
        let lease_ms = millis(lease).to_string();
        let channel = Self::channel(lock);
        let reply = self
            .eval(
                "releasing",
                &script::MUTEX_RELEASE,
                &[layout::lock_key(&lock.name)],
                &[
                    &lease_ms,
                    lock.owner.as_str(),
                    &channel,
                    self.options.publish.command(),
                ],
            )
            .await?;
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
        // Group by slot in a cluster (one script's keys must share a slot); on a single
        // master every lock fits one group. Order inside a group follows the input.
        let mut groups: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
        for (i, lock) in locks.iter().enumerate() {
            let slot = match self.transport.topology() {
                Topology::Cluster => key_slot(layout::lock_key(&lock.name)),
                _ => 0,
            };
            groups.entry(slot).or_default().push(i);
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
            .map(|o| {
                o.unwrap_or_else(|| Renewal::Failed(Arc::new(Error::protocol("renewal lost"))))
            })
            .collect()
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        let reply = self
            .eval(
                "inspecting",
                &script::MUTEX_INSPECT,
                &[layout::lock_key(&lock.name)],
                &[lock.owner.as_str()],
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
        let channel = Self::channel(lock);
        let reply = self
            .eval(
                "force-releasing",
                &script::MUTEX_FORCE_RELEASE,
                &[layout::lock_key(&lock.name)],
                &[&channel, self.options.publish.command()],
            )
            .await?;
        match reply {
            Reply::Int(n) => Ok(n == 1),
            other => Err(unexpected("force release", &other)),
        }
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.subscriptions.listen(&Self::channel(lock)).await
    }
}

fn classify(err: TransportError, during: &'static str, key: &str) -> Error {
    match err {
        TransportError::Server(server)
            if server.code == "WRONGTYPE" || server.message.contains("WRONGTYPE") =>
        {
            Error::WrongType {
                key: key.to_owned(),
            }
        }
        TransportError::Server(server) => Error::backend(during, server),
        TransportError::Io(source) => Error::Connection { during, source },
    }
}

fn millis(d: Duration) -> u128 {
    d.as_millis().max(1)
}

fn pair(reply: &Reply) -> Option<(i64, i64)> {
    match reply {
        Reply::Array(items) => match items.as_slice() {
            [Reply::Int(a), Reply::Int(b)] => Some((*a, *b)),
            _ => None,
        },
        _ => None,
    }
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
