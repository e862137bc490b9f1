//! A lock handed from one client to a waiting one: latency beside a PING and the bare
//! exchange of the same scripts, and the server's time per round.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Lock, Locks};
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep};

use super::measure::ServerTime;
use super::{Results, Scale, TURNS, figures, ours, p50_p99, percentile, sorted};

/// Two clients ping-pong one lock: from one release being sent to the other acquiring.
pub(crate) async fn handoff(server: &RedisServer, scale: Scale) -> Results {
    let rounds = (scale.seconds * 200.0) as usize;
    let ours = HandoffOurs::connect(server).await;
    let mut floor = HandoffFloor::connect(server).await;
    let mut ping = Ping::connect(server).await;
    let block = rounds.div_ceil(TURNS);
    let (mut our_samples, mut floor_samples, mut ping_samples) = (vec![], vec![], vec![]);
    let (mut granting_samples, mut paused_ping_samples) = (vec![], vec![]);
    let (mut our_time, mut floor_time) = (ServerTime::default(), ServerTime::default());
    for _ in 0..TURNS {
        let before = ServerTime::read(server).await;
        our_samples.extend(ours.rounds(block).await.handoffs);
        let between = ServerTime::read(server).await;
        floor_samples.extend(floor.rounds(block, FloorRelease::Frees).await);
        let after = ServerTime::read(server).await;
        our_time.add(before, between);
        floor_time.add(between, after);
        granting_samples.extend(floor.rounds(block, FloorRelease::Grants).await);
        ping_samples.extend(ping.rounds(PINGS / TURNS, None).await);
        paused_ping_samples.extend(ping.rounds(PINGS / TURNS, Some(ROUND_PAUSE)).await);
    }
    let rounds_run = (block * TURNS) as f64;
    let mut results = Results::new();
    let mut handoffs = p50_p99("handoff_ms", our_samples);
    handoffs.extend(our_time.figures(rounds_run));
    results.insert("lock (redis)".into(), handoffs);
    let mut handoffs = p50_p99("handoff_ms", floor_samples);
    handoffs.extend(floor_time.figures(rounds_run));
    results.insert("bare hand-off".into(), handoffs);
    results.insert(
        "bare server-side hand-over".into(),
        p50_p99("handoff_ms", granting_samples),
    );
    let ping = percentile(&sorted(ping_samples), 0.5);
    let paused_ping = percentile(&sorted(paused_ping_samples), 0.5);
    results.insert(
        "loopback".into(),
        figures(&[
            ("ping_ms_p50", ping),
            ("ping_after_pause_ms_p50", paused_ping),
        ]),
    );
    results
}

/// Two clients of ours handing one mutex over.
pub(crate) struct HandoffOurs {
    holder: Lock,
    waiter: Lock,
}

/// What rounds of a hand-off measured, in milliseconds.
#[derive(Debug, Default)]
pub(crate) struct Handoffs {
    /// From a release being sent to the waiting client holding the lock.
    pub(crate) handoffs: Vec<f64>,
    /// From a release being sent to its answer.
    pub(crate) releases: Vec<f64>,
}

impl HandoffOurs {
    async fn connect(server: &RedisServer) -> Self {
        Self::between(&ours(server).await, &ours(server).await)
    }

    /// The hand-off of one mutex from a client `holder` to a client `waiter`.
    pub(crate) fn between(holder: &Locks, waiter: &Locks) -> Self {
        Self {
            holder: holder.mutex("bench:h"),
            waiter: waiter.mutex("bench:h"),
        }
    }

    /// Times `rounds` hand-offs (see [`Handoffs`]).
    pub(crate) async fn rounds(&self, rounds: usize) -> Handoffs {
        let released_at = Arc::new(std::sync::Mutex::new(Instant::now()));
        let mut samples = Handoffs::default();
        for _ in 0..rounds {
            let held = self.holder.lock().await.expect("lock");
            let waiting = {
                let (waiter, released_at) = (self.waiter.clone(), Arc::clone(&released_at));
                tokio::spawn(async move {
                    let guard = waiter.lock().await.expect("lock");
                    let at = Instant::now();
                    let since = at
                        - *released_at
                            .lock()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let _ = guard.unlock().await;
                    since
                })
            };
            // Let the waiter subscribe and sleep.
            sleep(ROUND_PAUSE).await;
            // The clock starts as the release is sent: the waiter, woken by the release
            // script itself, is often served before the releasing task has seen the
            // release's answer, so a clock started once `unlock()` returned measured
            // less than a round trip.
            let sent = Instant::now();
            *released_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = sent;
            if let Err(err) = held.unlock().await {
                panic!("the bench's release failed: {err}");
            }
            samples.releases.push(sent.elapsed().as_secs_f64() * 1000.0);
            if let Ok(since) = waiting.await {
                samples.handoffs.push(since.as_secs_f64() * 1000.0);
            }
        }
        samples
    }
}

/// How a floor's release hands the key on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum FloorRelease {
    /// The script deletes the key and publishes; the subscriber that hears it takes the
    /// key with `SET NX`: the exchange of a lock without hand-over.
    Frees,
    /// The script sets the key to the subscriber and publishes; the subscriber holds it
    /// when it hears the message: the least any hand-over on the server can cost (one
    /// script and one delivery).
    Grants,
}

/// The floors under a hand-off through redis-rs on this runtime: one bare client's
/// script releases a key and publishes, and a bare subscriber that hears it holds the
/// key (see [`FloorRelease`]); timed from the script being sent to the subscriber
/// holding, as our hand-off is.
struct HandoffFloor {
    releaser: redis::aio::MultiplexedConnection,
    /// Kept: the subscription lives as long as its sink half.
    _subscriptions: redis::aio::PubSubSink,
    /// The subscriber's messages and connection, lent to each round's waiting task.
    taker: Option<(redis::aio::PubSubStream, redis::aio::MultiplexedConnection)>,
    release: redis::Script,
    grant: redis::Script,
}

impl HandoffFloor {
    const KEY: &str = "bench:h:floor";
    const CHANNEL: &str = "bench:h:floor:channel";

    async fn connect(server: &RedisServer) -> Self {
        let url = server.url();
        let (releaser, taker) = (bare_connection(&url).await, bare_connection(&url).await);
        let client = redis::Client::open(url).expect("url");
        let pubsub = client.get_async_pubsub().await.expect("connect");
        let (mut subscriptions, messages) = pubsub.split();
        subscriptions
            .subscribe(Self::CHANNEL)
            .await
            .expect("subscribe");
        let release = redis::Script::new(
            "redis.call('del', KEYS[1]); redis.call('publish', ARGV[1], '0'); return 0",
        );
        let grant = redis::Script::new(
            "redis.call('set', KEYS[1], 'taken'); redis.call('publish', ARGV[1], '1'); return 0",
        );
        Self {
            releaser,
            _subscriptions: subscriptions,
            taker: Some((messages, taker)),
            release,
            grant,
        }
    }

    /// Times (ms) from the release being sent to the subscriber holding the key.
    async fn rounds(&mut self, rounds: usize, how: FloorRelease) -> Vec<f64> {
        let mut samples = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let _: () = redis::cmd("SET")
                .arg(Self::KEY)
                .arg("held")
                .query_async(&mut self.releaser)
                .await
                .expect("set");
            let (mut messages, mut taker) = self.taker.take().expect("the taker is back");
            let waiting = tokio::spawn(async move {
                use futures_util::StreamExt as _;
                messages.next().await.expect("a release message");
                if how == FloorRelease::Grants {
                    return (Instant::now(), messages, taker);
                }
                let won: Option<String> = redis::cmd("SET")
                    .arg(Self::KEY)
                    .arg("taken")
                    .arg("NX")
                    .query_async(&mut taker)
                    .await
                    .expect("set nx");
                assert!(won.is_some(), "the floor's key was free");
                (Instant::now(), messages, taker)
            });
            sleep(ROUND_PAUSE).await;
            let sent = Instant::now();
            let script = match how {
                FloorRelease::Frees => &self.release,
                FloorRelease::Grants => &self.grant,
            };
            let _: i64 = script
                .key(Self::KEY)
                .arg(Self::CHANNEL)
                .invoke_async(&mut self.releaser)
                .await
                .expect("release");
            let (taken_at, messages, taker) = waiting.await.expect("the floor's waiter");
            self.taker = Some((messages, taker));
            samples.push((taken_at - sent).as_secs_f64() * 1000.0);
        }
        samples
    }
}

/// A redis-rs connection of a floor's own, beside our clients.
pub(super) async fn bare_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// How many loopback PINGs the hand-off scenario times, back to back and after a pause.
const PINGS: usize = 500;

/// How long a hand-off round waits before the release (the waiter subscribes and
/// sleeps). Every thread and process of the exchange idles meanwhile, and waking them
/// costs: PINGs are also timed after the same pause.
pub(crate) const ROUND_PAUSE: Duration = Duration::from_millis(2);

/// A connection that times `PING`s.
struct Ping {
    conn: redis::aio::MultiplexedConnection,
}

impl Ping {
    async fn connect(server: &RedisServer) -> Self {
        Self {
            conn: bare_connection(&server.url()).await,
        }
    }

    /// Round-trip times (ms) of `rounds` PINGs, each after `pause` if any.
    async fn rounds(&mut self, rounds: usize, pause: Option<Duration>) -> Vec<f64> {
        let mut samples = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            if let Some(pause) = pause {
                sleep(pause).await;
            }
            let started = Instant::now();
            let _: redis::RedisResult<String> =
                redis::cmd("PING").query_async(&mut self.conn).await;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        samples
    }
}
