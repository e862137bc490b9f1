//! The scenarios. Each returns, per contender, named figures; every figure that matters
//! is compared with a peer or a limit measured in the same run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use distlock::{Lock, Locks};
use lock_testkit::{CommandStats, RedisServer};
use tokio::time::{Instant, sleep};

use crate::bare::{self, FredSocket, Pair, evalsha};
use crate::renewals;

/// Figures of one contender in one scenario.
pub(crate) type Figures = BTreeMap<String, f64>;
/// Figures by contender.
pub(crate) type Results = BTreeMap<String, Figures>;

/// How long each timed scenario runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) seconds: f64,
    pub(crate) watchdog_locks: usize,
    pub(crate) watchdog_seconds: u64,
    pub(crate) waiters: usize,
}

pub(crate) fn figures(pairs: &[(&str, f64)]) -> Figures {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), round(*v)))
        .collect()
}

fn round(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The p-th percentile (0..=1) of sorted samples.
pub(crate) fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

pub(crate) fn sorted(mut samples: Vec<f64>) -> Vec<f64> {
    samples.sort_by(f64::total_cmp);
    samples
}

/// Which of our Redis adapters a contender uses.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Adapter {
    Redis,
    Fred,
}

impl Adapter {
    pub(crate) async fn connect(self, server: &RedisServer) -> Locks {
        let connected = match self {
            Self::Redis => distlock::redis::connect(&server.url()).await,
            Self::Fred => distlock::fred::connect(&server.url()).await,
        };
        connected.expect("connect")
    }
}

async fn ours(server: &RedisServer) -> Locks {
    Adapter::Redis.connect(server).await
}

/// Lock+unlock pairs per second of 64 tasks on distinct names through one client.
pub(crate) async fn pairs_per_second(locks: &Locks, duration: Duration) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for task in 0..64 {
        let (locks, count) = (locks.clone(), Arc::clone(&count));
        tasks.push(tokio::spawn(async move {
            let mutex = locks.mutex(&format!("bench:u:{task}"));
            while Instant::now() < deadline {
                if let Ok(guard) = mutex.lock().await
                    && guard.unlock().await.is_ok()
                {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    count.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

pub(crate) fn peer(urls: &[String]) -> rslock::LockManager {
    rslock::LockManager::new(urls.to_vec())
}

/// rslock's lock+unlock pairs per second of 64 tasks on distinct names.
async fn peer_pairs_per_second(server: &RedisServer, duration: Duration) -> f64 {
    let manager = Arc::new(peer(&[server.url()]));
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for task in 0..64 {
        let (manager, count) = (Arc::clone(&manager), Arc::clone(&count));
        tasks.push(tokio::spawn(async move {
            let name = format!("bench:p:{task}");
            while Instant::now() < deadline {
                if let Ok(lock) = manager.lock(name.as_bytes(), Duration::from_secs(30)).await {
                    manager.unlock(&lock).await;
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        if let Err(err) = task.await {
            eprintln!("lock-bench: an rslock task failed: {err}");
        }
    }
    count.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

/// What one contender's runs cost, summed over its turns.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    seconds: f64,
    pairs: f64,
    client_cpu: f64,
    allocations: f64,
    server_cpu: f64,
    reads: f64,
    /// The server's time in commands (`INFO commandstats`), steadier than its CPU time.
    commands: ServerTime,
}

impl Tally {
    /// Runs one turn of a contender (`run` reports pairs per second over `duration`) and
    /// adds what it did and cost: the CPU time of this process and of the server, and the
    /// allocations of this process (all of its tasks count, the driver's too, for every
    /// contender alike).
    async fn run(
        &mut self,
        server: &RedisServer,
        duration: Duration,
        run: impl Future<Output = f64>,
    ) {
        let (client_before, server_before) = (cpu_seconds(), server_cpu_seconds(server).await);
        let reads_before = server_reads(server).await;
        let commands_before = ServerTime::read(server).await;
        let allocations_before = crate::alloc::allocations();
        let rate = run.await;
        self.commands
            .add(commands_before, ServerTime::read(server).await);
        self.allocations += crate::alloc::allocations() - allocations_before;
        self.client_cpu += cpu_seconds() - client_before;
        self.server_cpu += server_cpu_seconds(server).await - server_before;
        self.reads += server_reads(server).await - reads_before;
        self.pairs += rate * duration.as_secs_f64();
        self.seconds += duration.as_secs_f64();
    }

    /// Pairs per second, and each cost per pair.
    fn figures(&self) -> Figures {
        let pairs = self.pairs.max(1.0);
        figures(&[
            (
                "pairs_per_s",
                self.pairs / self.seconds.max(f64::MIN_POSITIVE),
            ),
            ("client_cpu_us_per_pair", self.client_cpu * 1e6 / pairs),
            ("client_allocations_per_pair", self.allocations / pairs),
            ("server_cpu_us_per_pair", self.server_cpu * 1e6 / pairs),
            ("server_command_us_per_pair", self.commands.total_us / pairs),
            ("server_reads_per_pair", self.reads / pairs),
        ])
    }
}

/// How many times redis-server has read from its clients' sockets (`INFO stats`): the
/// fewer reads per pair, the more commands each read brought (the server's cost per
/// command falls with it).
async fn server_reads(server: &RedisServer) -> f64 {
    let info: String = server.command(&["INFO", "stats"]).await;
    info.lines()
        .find_map(|l| l.strip_prefix("total_reads_processed:"))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
}

/// CPU time redis-server has used (user + system), from `INFO cpu`.
async fn server_cpu_seconds(server: &RedisServer) -> f64 {
    let info: String = server.command(&["INFO", "cpu"]).await;
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

/// Lock+unlock pairs per second, 64 tasks on distinct names through one client, with
/// the client's and the server's CPU per pair; the server's own limit for our scripts;
/// and bare redis-rs and fred clients sending the same two scripts. The contenders take
/// [`UNCONTENDED_TURNS`] turns each, so that a drift of the machine weighs on all of them
/// alike (the ratio to the server's limit moved by 0.15 between two runs of the same
/// binary when each contender ran in one go).
pub(crate) async fn uncontended(server: &RedisServer, scale: Scale) -> Results {
    let turn = Duration::from_secs_f64(scale.seconds / UNCONTENDED_TURNS as f64);
    let redis = Adapter::Redis.connect(server).await;
    let fred = Adapter::Fred.connect(server).await;
    let quarantined = with_quarantine(server).await;
    let (mut ours, mut theirs, mut rslock, mut limit) = Default::default();
    let mut ours_quarantined = Tally::default();
    let (mut bare_redis, mut bare_fred, mut bare_fred_nodelay) = Default::default();
    for _ in 0..UNCONTENDED_TURNS {
        Tally::run(&mut ours, server, turn, pairs_per_second(&redis, turn)).await;
        let pairs = pairs_per_second(&quarantined, turn);
        Tally::run(&mut ours_quarantined, server, turn, pairs).await;
        Tally::run(&mut limit, server, turn, server_limit(server, turn)).await;
        Tally::run(&mut theirs, server, turn, pairs_per_second(&fred, turn)).await;
        Tally::run(
            &mut rslock,
            server,
            turn,
            peer_pairs_per_second(server, turn),
        )
        .await;
        let bare = bare::redis_pairs_per_second(server, turn);
        Tally::run(&mut bare_redis, server, turn, bare).await;
        let bare = bare::fred_pairs_per_second(server, turn, FredSocket::Default);
        Tally::run(&mut bare_fred, server, turn, bare).await;
        let bare = bare::fred_pairs_per_second(server, turn, FredSocket::NoDelay);
        Tally::run(&mut bare_fred_nodelay, server, turn, bare).await;
    }
    let mut results = Results::new();
    results.insert("lock (redis)".into(), Tally::figures(&ours));
    results.insert(
        "lock (redis, restart quarantine)".into(),
        Tally::figures(&ours_quarantined),
    );
    results.insert("lock (fred)".into(), Tally::figures(&theirs));
    results.insert("rslock".into(), Tally::figures(&rslock));
    // The floors: our two scripts from bare clients (see `bare`).
    results.insert(
        "bare scripts (redis-rs)".into(),
        Tally::figures(&bare_redis),
    );
    results.insert("bare scripts (fred)".into(), Tally::figures(&bare_fred));
    results.insert(
        "bare scripts (fred, TCP_NODELAY)".into(),
        Tally::figures(&bare_fred_nodelay),
    );
    // Its client CPU is the pipelining load's, not a lock client's.
    results.insert("server limit".into(), Tally::figures(&limit));
    results
}

/// A redis-adapter client with the restart quarantine on, past the quarantine a fresh
/// server's first grant waits.
async fn with_quarantine(server: &RedisServer) -> Locks {
    let quarantine = Duration::from_millis(200);
    let settings = distlock::redis::ConnectorSettings::default().restart_quarantine(quarantine);
    let locks = distlock::redis::Connector::new(server.url())
        .settings(settings)
        .locks()
        .await
        .expect("connect");
    let first = locks
        .mutex("bench:quarantine")
        .lock()
        .await
        .expect("a grant");
    first.unlock().await.expect("a release");
    locks
}

/// How many turns each contender of the uncontended scenario takes.
const UNCONTENDED_TURNS: usize = 5;

/// How many pairs each connection of the server-limit load keeps in flight.
const LIMIT_PIPELINE: usize = 16;
/// How many connections the server-limit load uses.
const LIMIT_CONNECTIONS: usize = 4;

/// The server's own limit for our scripts: lock+unlock pairs per second of our mutex
/// acquire and release scripts, each pair on a fresh name with the keys and arguments
/// the adapters send (a first acquire, a last release that publishes), pipelined so
/// that the server, not a client's round trips, sets the pace.
async fn server_limit(server: &RedisServer, duration: Duration) -> f64 {
    let scripts = bare::load_scripts(server).await;
    let client = redis::Client::open(server.url()).expect("the server's url");
    let deadline = Instant::now() + duration;
    let mut loads = Vec::new();
    for connection in 0..LIMIT_CONNECTIONS {
        let scripts = Arc::clone(&scripts);
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect for the server limit");
        loads.push(tokio::spawn(async move {
            let mut pairs = 0u64;
            while Instant::now() < deadline {
                let mut pipe = redis::pipe();
                for _ in 0..LIMIT_PIPELINE {
                    let name = format!("bench:limit:{connection}:{pairs}");
                    pairs += 1;
                    for command in Pair::new(&name, "bench-owner").redis_commands(&scripts) {
                        pipe.add_command(command);
                    }
                }
                let replies: Vec<redis::Value> = pipe
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                check_pairs(&replies)?;
            }
            Ok::<u64, String>(pairs)
        }));
    }
    let mut pairs = 0;
    for load in loads {
        match load.await {
            Ok(Ok(done)) => pairs += done,
            Ok(Err(err)) => {
                eprintln!("lock-bench: the server-limit load failed: {err}");
                return 0.0;
            }
            Err(err) => {
                eprintln!("lock-bench: a server-limit task failed: {err}");
                return 0.0;
            }
        }
    }
    pairs as f64 / duration.as_secs_f64()
}

/// Every pair was granted and released.
fn check_pairs(replies: &[redis::Value]) -> Result<(), String> {
    for pair in replies.chunks(2) {
        let succeeded = match pair {
            [acquired, released] => bare::redis_pair_succeeded(acquired, released),
            _ => false,
        };
        if !succeeded {
            return Err(format!("an unexpected reply: {pair:?}"));
        }
    }
    Ok(())
}

/// Two clients ping-pong one lock: from one release being sent to the other acquiring.
pub(crate) async fn handoff(server: &RedisServer, scale: Scale) -> Results {
    let rounds = (scale.seconds * 200.0) as usize;
    let ours = HandoffOurs::connect(server).await;
    let mut floor = HandoffFloor::connect(server).await;
    let mut ping = Ping::connect(server).await;
    let block = rounds.div_ceil(TURNS);
    let (mut our_samples, mut floor_samples, mut ping_samples) = (vec![], vec![], vec![]);
    let (mut our_time, mut floor_time) = (ServerTime::default(), ServerTime::default());
    for _ in 0..TURNS {
        let before = ServerTime::read(server).await;
        our_samples.extend(ours.rounds(block).await);
        let between = ServerTime::read(server).await;
        floor_samples.extend(floor.rounds(block).await);
        let after = ServerTime::read(server).await;
        our_time.add(before, between);
        floor_time.add(between, after);
        ping_samples.extend(ping.rounds(PINGS / TURNS).await);
    }
    let rounds_run = (block * TURNS) as f64;
    let mut results = Results::new();
    let mut handoffs = p50_p99("handoff_ms", our_samples);
    handoffs.extend(our_time.figures(rounds_run));
    results.insert("lock (redis)".into(), handoffs);
    let mut handoffs = p50_p99("handoff_ms", floor_samples);
    handoffs.extend(floor_time.figures(rounds_run));
    results.insert("bare hand-off".into(), handoffs);
    let ping = percentile(&sorted(ping_samples), 0.5);
    results.insert("loopback".into(), figures(&[("ping_ms_p50", ping)]));
    results
}

/// The server's time for a contender's rounds, from `INFO commandstats`: a hand-off's
/// floor is mostly the server's, and a script's time per call on a server that idles
/// between rounds is about three times its time under a steady load (stop 14's runs).
#[derive(Debug, Default, Clone, Copy)]
struct ServerTime {
    /// Microseconds of every command but `INFO` (the reading's own).
    total_us: f64,
    /// Microseconds and calls of `EVALSHA`.
    script_us: f64,
    script_calls: f64,
}

impl ServerTime {
    /// The server's totals so far.
    async fn read(server: &RedisServer) -> Self {
        Self::from_stats(&server.command_stats().await)
    }

    /// The totals in the server's figures per command.
    fn from_stats(stats: &BTreeMap<String, CommandStats>) -> Self {
        let mut time = Self::default();
        for (command, stats) in stats {
            if command != "info" {
                time.total_us += stats.usec;
            }
            if command == "evalsha" {
                time.script_us += stats.usec;
                time.script_calls += stats.calls as f64;
            }
        }
        time
    }

    /// Adds what the server spent between two readings.
    fn add(&mut self, before: Self, after: Self) {
        self.total_us += after.total_us - before.total_us;
        self.script_us += after.script_us - before.script_us;
        self.script_calls += after.script_calls - before.script_calls;
    }

    /// Server microseconds per round, and per script call.
    fn figures(&self, rounds: f64) -> Figures {
        figures(&[
            ("server_us_per_round", self.total_us / rounds),
            (
                "script_server_us_per_call",
                self.script_us / self.script_calls,
            ),
        ])
    }
}

/// The p50 and p99 of `samples`, named `<what>_p50` and `<what>_p99`.
fn p50_p99(what: &str, samples: Vec<f64>) -> Figures {
    let samples = sorted(samples);
    figures(&[
        (format!("{what}_p50").as_str(), percentile(&samples, 0.5)),
        (format!("{what}_p99").as_str(), percentile(&samples, 0.99)),
    ])
}

/// Two clients of ours handing one mutex over.
struct HandoffOurs {
    holder: Lock,
    waiter: Lock,
}

impl HandoffOurs {
    async fn connect(server: &RedisServer) -> Self {
        let (a, b) = (ours(server).await, ours(server).await);
        Self {
            holder: a.mutex("bench:h"),
            waiter: b.mutex("bench:h"),
        }
    }

    /// Times (ms) from a release being sent to the waiting client holding the lock.
    async fn rounds(&self, rounds: usize) -> Vec<f64> {
        let released_at = Arc::new(std::sync::Mutex::new(Instant::now()));
        let mut samples = Vec::with_capacity(rounds);
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
            sleep(Duration::from_millis(2)).await;
            // The clock starts as the release is sent: the waiter, woken by the release
            // script itself, is often served before the releasing task has seen the
            // release's answer, so a clock started once `unlock()` returned measured
            // less than a round trip.
            *released_at
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
            if let Err(err) = held.unlock().await {
                panic!("the bench's release failed: {err}");
            }
            if let Ok(since) = waiting.await {
                samples.push(since.as_secs_f64() * 1000.0);
            }
        }
        samples
    }
}

/// The floor under a hand-off through redis-rs on this runtime: one bare client deletes
/// a key and publishes in one script, and a bare subscriber that hears it takes the key
/// with `SET NX` on its own connection; timed from the script being sent to the `SET`
/// being answered, as our hand-off is.
struct HandoffFloor {
    releaser: redis::aio::MultiplexedConnection,
    /// Kept: the subscription lives as long as its sink half.
    _subscriptions: redis::aio::PubSubSink,
    /// The subscriber's messages and connection, lent to each round's waiting task.
    taker: Option<(redis::aio::PubSubStream, redis::aio::MultiplexedConnection)>,
    release: redis::Script,
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
        Self {
            releaser,
            _subscriptions: subscriptions,
            taker: Some((messages, taker)),
            release,
        }
    }

    /// Times (ms) from the release being sent to the subscriber holding the key.
    async fn rounds(&mut self, rounds: usize) -> Vec<f64> {
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
            sleep(Duration::from_millis(2)).await;
            let sent = Instant::now();
            let _: i64 = self
                .release
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
async fn bare_connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).expect("url");
    client
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// How many loopback PINGs the hand-off scenario times.
const PINGS: usize = 500;

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

    /// Round-trip times (ms) of `rounds` PINGs.
    async fn rounds(&mut self, rounds: usize) -> Vec<f64> {
        let mut samples = Vec::with_capacity(rounds);
        for _ in 0..rounds {
            let started = Instant::now();
            let _: redis::RedisResult<String> =
                redis::cmd("PING").query_async(&mut self.conn).await;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        samples
    }
}

/// CPU time of this process (user + system), from `/proc/self/stat`.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after ") ".
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

async fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.command_stats().await;
    ["evalsha", "eval"]
        .iter()
        .filter_map(|command| stats.get(*command))
        .map(|stats| stats.calls)
        .sum()
}

/// Script calls the server has run and renewals the watchdog has reported, at one moment.
struct RenewalCounts {
    script_calls: u64,
    renewals: renewals::Renewals,
}

/// Both counts, read right after a watchdog round reported its renewals. A round reports
/// once all its calls were answered, and the next one starts an interval (1 s) later, so
/// the server's count then holds every call of the rounds reported and no other. (Reading
/// them in a moment of 50 ms without change could catch a round whose calls had all run
/// but whose client had not reported yet.)
async fn renewal_counts_after_a_round(server: &RedisServer) -> RenewalCounts {
    let reported = || renewals::so_far().expect("the bench installs no other recorder");
    let start = reported();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let now = reported();
        if now != start {
            return RenewalCounts {
                script_calls: script_calls(server).await,
                renewals: now,
            };
        }
        assert!(
            Instant::now() < deadline,
            "the watchdog reported no round in 5 s"
        );
        sleep(Duration::from_millis(1)).await;
    }
}

/// One client holds many locks with a 3 s lease for 12 s.
pub(crate) async fn watchdog(server: &RedisServer, scale: Scale) -> Results {
    let lease = Duration::from_secs(3);
    let locks = Locks::builder(
        distlock::redis::connect_backend(&server.url())
            .await
            .expect("connect"),
    )
    .watchdog_lease(lease)
    .build()
    .expect("settings");
    let mut guards = Vec::with_capacity(scale.watchdog_locks);
    for i in 0..scale.watchdog_locks {
        guards.push(
            locks
                .mutex(&format!("bench:w:{i}"))
                .lock()
                .await
                .expect("lock"),
        );
    }
    let before = renewal_counts_after_a_round(server).await;
    let cpu_before = cpu_seconds();
    sleep(Duration::from_secs(scale.watchdog_seconds)).await;
    let after = renewal_counts_after_a_round(server).await;
    let cpu = cpu_seconds() - cpu_before;
    let calls = (after.script_calls - before.script_calls) as f64;
    // Each renewal is one lock renewed in one round.
    let renewed = after.renewals.renewed - before.renewals.renewed;
    let failed = after.renewals.failed - before.renewals.failed;
    let rounds = renewed as f64 / scale.watchdog_locks as f64;
    let still_valid = guards.iter().filter(|g| g.is_held()).count();
    let on_server: i64 = server.command(&["DBSIZE"]).await;
    let all_held =
        still_valid == scale.watchdog_locks && on_server as usize >= scale.watchdog_locks;
    for guard in guards {
        let _ = guard.unlock().await;
    }
    let per_100 = calls / rounds / (scale.watchdog_locks as f64 / 100.0);
    let mut results = Results::new();
    results.insert(
        "lock (redis)".into(),
        figures(&[
            ("locks", scale.watchdog_locks as f64),
            ("rounds", rounds),
            ("script_calls_per_round", calls / rounds),
            ("script_calls_per_100_locks_per_round", per_100),
            ("failed_renewals", failed as f64),
            ("client_cpu_seconds", cpu),
            ("all_held", if all_held { 1.0 } else { 0.0 }),
        ]),
    );
    results
}

/// Lock+unlock pair times (ms) of `rounds` sequential pairs on one name.
async fn latency_ours(locks: &Locks, rounds: usize) -> Vec<f64> {
    let mutex = locks.mutex("bench:r");
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        if let Ok(guard) = mutex.lock().await {
            let _ = guard.unlock().await;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    samples
}

/// rslock's lock+unlock pair times (ms) of `rounds` sequential pairs on one name.
async fn latency_peer(manager: &rslock::LockManager, rounds: usize) -> Vec<f64> {
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let started = Instant::now();
        if let Ok(lock) = manager
            .lock("bench:rp".as_bytes(), Duration::from_secs(30))
            .await
        {
            manager.unlock(&lock).await;
            samples.push(started.elapsed().as_secs_f64() * 1000.0);
        }
    }
    samples
}

/// The floor under RedLock on these nodes: a bare client sends our own acquire script to
/// every node at once and goes on when a majority answered, then the release script the
/// same way. What RedLock costs above this is ours.
struct QuorumFloor {
    nodes: Vec<redis::aio::MultiplexedConnection>,
}

impl QuorumFloor {
    fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    async fn connect(urls: &[String]) -> Self {
        use lock_redis_protocol::script::{MUTEX_ACQUIRE, MUTEX_RELEASE};

        let mut nodes = Vec::with_capacity(urls.len());
        for url in urls {
            let mut connection = bare_connection(url).await;
            for script in [&MUTEX_ACQUIRE, &MUTEX_RELEASE] {
                let _: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script.source())
                    .query_async(&mut connection)
                    .await
                    .expect("SCRIPT LOAD");
            }
            nodes.push(connection);
        }
        Self { nodes }
    }

    /// Sends one script call to every node; returns how many of the first majority of
    /// answers were not errors.
    async fn quorum(&self, sha: &str, keys: &[String], args: &[&str]) -> usize {
        use futures_util::StreamExt as _;

        let calls = self
            .nodes
            .iter()
            .map(|node| {
                let mut node = node.clone();
                let call = evalsha(sha, keys, args);
                async move { call.query_async::<redis::Value>(&mut node).await }
            })
            .collect::<futures_util::stream::FuturesUnordered<_>>();
        let answered = calls.filter(|reply| std::future::ready(reply.is_ok()));
        answered.take(self.majority()).count().await
    }

    /// Pair times (ms) of rounds `first..first + rounds` (each round has latch keys of
    /// its own, so that no round is answered from an earlier one's latch).
    async fn rounds(&self, first: usize, rounds: usize) -> Vec<f64> {
        use lock_redis_protocol::script::{MUTEX_ACQUIRE, MUTEX_RELEASE};

        let majority = self.majority();
        let (acquire, release) = (MUTEX_ACQUIRE.sha1(), MUTEX_RELEASE.sha1());
        let mut samples = Vec::with_capacity(rounds);
        for _ in first..first + rounds {
            let started = Instant::now();
            let pair = Pair::new("bench:q", "bench-floor:1");
            let (keys, args) = pair.acquire_call();
            let granted = self.quorum(acquire, keys, &args).await;
            let (keys, args) = pair.release_call();
            let released = self.quorum(release, keys, &args).await;
            if granted >= majority && released >= majority {
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        samples
    }
}

/// How many blocks each contender's rounds of a latency scenario are split into, taken
/// in turn: a drift of the machine during the scenario (a neighbour's load, the clock
/// speed) then weighs on every contender alike instead of on whoever ran at the time.
const TURNS: usize = 10;

pub(crate) async fn redlock(nodes: &[RedisServer], scale: Scale) -> Results {
    let rounds = (scale.seconds * 300.0) as usize;
    let urls: Vec<String> = nodes.iter().map(RedisServer::url).collect();
    let mut backends = Vec::new();
    for url in &urls {
        backends.push(
            distlock::redis::connect_backend(url)
                .await
                .expect("connect"),
        );
    }
    let five = distlock::redlock::RedLock::builder(backends)
        .build()
        .expect("nodes")
        .locks();
    let one = distlock::redis::connect(&urls[0]).await.expect("connect");
    let floor = QuorumFloor::connect(&urls).await;
    let (peer_five, peer_one) = (peer(&urls), peer(&urls[..1]));
    let block = rounds.div_ceil(TURNS);
    let mut samples: [Vec<f64>; 5] = Default::default();
    for turn in 0..TURNS {
        samples[0].extend(latency_ours(&five, block).await);
        samples[1].extend(latency_ours(&one, block).await);
        samples[2].extend(latency_peer(&peer_five, block).await);
        samples[3].extend(floor.rounds(turn * block, block).await);
        samples[4].extend(latency_peer(&peer_one, block).await);
    }
    let names = [
        "lock redlock x5",
        "lock single",
        "rslock x5",
        "bare quorum x5",
        "rslock single",
    ];
    names
        .into_iter()
        .zip(samples)
        .map(|(name, samples)| (name.to_owned(), p50_p99("pair_ms", samples)))
        .collect()
}

/// Many tasks waiting on 100 names in one process.
pub(crate) async fn waiters(server: &RedisServer, scale: Scale) -> Results {
    let names = 100;
    let holder = ours(server).await;
    let locks = ours(server).await;
    let mut held = Vec::new();
    for n in 0..names {
        held.push(
            holder
                .mutex(&format!("bench:wt:{n}"))
                .lock()
                .await
                .expect("lock"),
        );
    }
    let before = crate::alloc::live_bytes();
    let done = Arc::new(AtomicU64::new(0));
    let go = Arc::new(AtomicBool::new(true));
    let mut tasks = Vec::with_capacity(scale.waiters);
    for i in 0..scale.waiters {
        let (locks, done, go) = (locks.clone(), Arc::clone(&done), Arc::clone(&go));
        tasks.push(tokio::spawn(async move {
            let mutex = locks.mutex(&format!("bench:wt:{}", i % names));
            if let Ok(guard) = mutex.lock().await {
                let _ = guard.unlock().await;
                if go.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Let every waiter subscribe and settle.
    let settle_until = Instant::now() + Duration::from_secs(30);
    loop {
        let channels: Vec<String> = server
            .command(&["PUBSUB", "CHANNELS", "redisson_lock__channel:{*"])
            .await;
        if channels.len() >= names || Instant::now() > settle_until {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_millis(500)).await;
    let after = crate::alloc::live_bytes();
    let mut numsub_args = vec!["PUBSUB".to_owned(), "NUMSUB".to_owned()];
    numsub_args.extend((0..names).map(|n| format!("redisson_lock__channel:{{bench:wt:{n}}}")));
    let refs: Vec<&str> = numsub_args.iter().map(String::as_str).collect();
    let numsub: Vec<redis::Value> = server.command(&refs).await;
    let counts: Vec<i64> = numsub
        .chunks(2)
        .filter_map(|pair| match pair.get(1) {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        })
        .collect();
    let max_subscriptions = counts.iter().copied().max().unwrap_or(0);
    let started = Instant::now();
    for guard in held {
        let _ = guard.unlock().await;
    }
    for task in tasks {
        let _ = task.await;
    }
    let drain = started.elapsed().as_secs_f64();
    let mut results = Results::new();
    results.insert(
        "lock (redis)".into(),
        figures(&[
            ("waiters", scale.waiters as f64),
            (
                "bytes_per_waiter",
                (after - before).max(0.0) / scale.waiters as f64,
            ),
            ("max_subscriptions_per_name", max_subscriptions as f64),
            (
                "all_acquired",
                if done.load(Ordering::Relaxed) as usize == scale.waiters {
                    1.0
                } else {
                    0.0
                },
            ),
            ("drain_seconds", drain),
        ]),
    );
    results.insert("lock (redis) held".into(), held_memory(&locks).await);
    results
}

/// How many rounds of [`HELD`] holds [`held_memory`] takes (the first one unmeasured).
const HELD_ROUNDS: usize = 8;

/// How many locks [`held_memory`] holds at once.
const HELD: usize = 1_000;

/// Heap bytes per held lock (one client holding [`HELD`] locks on distinct names), what
/// is left of them once released, and the size of a `lock()` future.
async fn held_memory(locks: &Locks) -> Figures {
    let future_bytes = {
        let mutex = locks.mutex("bench:m:future");
        let pending = mutex.lock();
        std::mem::size_of_val(&pending)
    };
    let mutexes: Vec<_> = (0..HELD)
        .map(|i| locks.mutex(&format!("bench:m:{i}")))
        .collect();
    // A first round grows the client's tables to their working size, so that the
    // measured rounds count what each hold costs, not one-time growth. The count covers
    // the whole process, where a connection's buffer of about 1.4 kB comes and goes at
    // its own pace: bytes left are taken over all measured rounds (a hold that kept
    // memory would add it every round), bytes held are the median round's.
    let mut held = Vec::new();
    let mut first_before = None;
    let mut last_after = 0.0;
    for round in 0..HELD_ROUNDS {
        let before = crate::alloc::live_bytes();
        let mut guards = Vec::with_capacity(HELD);
        for mutex in &mutexes {
            guards.push(mutex.lock().await.expect("lock"));
        }
        let holding = crate::alloc::live_bytes();
        for guard in guards {
            if let Err(err) = guard.unlock().await {
                eprintln!("lock-bench: unlock: {err}");
            }
        }
        last_after = crate::alloc::live_bytes();
        if round > 0 {
            // The guards' vector is counted in neither figure.
            let vector = (HELD * std::mem::size_of::<distlock::Guard>()) as f64;
            held.push((holding - before - vector) / HELD as f64);
            first_before.get_or_insert(before);
        }
    }
    let released_holds = ((HELD_ROUNDS - 1) * HELD) as f64;
    let left = (last_after - first_before.unwrap_or(last_after)) / released_holds;
    figures(&[
        ("lock_future_bytes", future_bytes as f64),
        ("bytes_per_held_lock", percentile(&sorted(held), 0.5)),
        ("bytes_left_per_released_hold", left),
    ])
}

#[cfg(test)]
mod tests {
    use lock_testkit::parse_command_stats;

    use super::ServerTime;

    fn equal(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn server_time_sums_every_command_but_info_and_counts_scripts_apart() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=4,usec=100,usec_per_call=25.00,rejected_calls=0,failed_calls=1\r\n\
            cmdstat_info:calls=9,usec=900,usec_per_call=100.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_set:calls=2,usec=6,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_eval:calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n";
        let time = ServerTime::from_stats(&parse_command_stats(info));
        assert!(
            equal(time.total_us, 136.0),
            "time.total_us = {}",
            time.total_us
        );
        assert!(
            equal(time.script_us, 100.0),
            "time.script_us = {}",
            time.script_us
        );
        assert!(
            equal(time.script_calls, 4.0),
            "time.script_calls = {}",
            time.script_calls
        );
        let mut sum = ServerTime::default();
        sum.add(ServerTime::default(), time);
        sum.add(
            time,
            ServerTime::from_stats(&parse_command_stats(
                &info.replace("usec=100,", "usec=150,"),
            )),
        );
        assert!(
            equal(sum.script_us, 150.0),
            "sum.script_us = {}",
            sum.script_us
        );
        assert!(
            equal(sum.figures(2.0)["server_us_per_round"], 93.0),
            "sum.figures(2.0)[server_us_per_round] = {}",
            sum.figures(2.0)["server_us_per_round"]
        );
    }
}
