//! One client locking and unlocking alone: throughput and the CPU and server time per
//! pair, beside rslock, the bare drivers sending our scripts, and the server's limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::measure::{ServerTime, cpu_seconds, server_cpu_seconds, server_reads};
use super::{Adapter, Figures, Results, Scale, figures, pairs_per_second, peer};
use crate::bare;
use crate::bare::{BareLock, FredSocket, Pair};
use lock_redis_protocol::{ConnectorSettings, ServerCode};

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
pub(super) struct Tally {
    seconds: f64,
    pairs: f64,
    client_cpu: f64,
    allocations: f64,
    server_cpu: f64,
    reads: f64,
    /// The server's time in scripts (`INFO commandstats`), steadier than its CPU time.
    commands: ServerTime,
}

impl Tally {
    /// Runs one turn of a contender (`run` reports pairs per second over `duration`) and
    /// adds what it did and cost: the CPU time of this process and of the server, and the
    /// allocations of this process (all of its tasks count, the driver's too, for every
    /// contender alike).
    pub(super) async fn run(
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
    pub(super) fn figures(&self) -> Figures {
        let pairs = self.pairs.max(1.0);
        figures(&[
            (
                "pairs_per_s",
                self.pairs / self.seconds.max(f64::MIN_POSITIVE),
            ),
            ("client_cpu_us_per_pair", self.client_cpu * 1e6 / pairs),
            ("client_allocations_per_pair", self.allocations / pairs),
            ("server_cpu_us_per_pair", self.server_cpu * 1e6 / pairs),
            // Scripts alone: every contender compared on it sends nothing else per pair,
            // and the sum over every command counts what the scripts call twice.
            ("server_script_us_per_pair", self.commands.script_us / pairs),
            ("server_reads_per_pair", self.reads / pairs),
        ])
    }
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
    let functions = with_code(server, ServerCode::Functions).await;
    let (mut ours, mut theirs, mut rslock, mut limit) = Default::default();
    let (mut ours_quarantined, mut ours_functions) = Default::default();
    let (mut bare_redis, mut bare_fred, mut bare_fred_nodelay) = Default::default();
    let (mut bare_functions, mut bare_redisson, mut bare_set_nx) = Default::default();
    for _ in 0..UNCONTENDED_TURNS {
        Tally::run(&mut ours, server, turn, pairs_per_second(&redis, turn)).await;
        let pairs = pairs_per_second(&functions, turn);
        Tally::run(&mut ours_functions, server, turn, pairs).await;
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
        for (tally, lock) in [
            (&mut bare_redis, BareLock::OurScripts),
            (&mut bare_functions, BareLock::OurFunctions),
            (&mut bare_redisson, BareLock::Redisson),
            (&mut bare_set_nx, BareLock::SetNx),
        ] {
            let bare = bare::redis_pairs_per_second(server, turn, lock);
            Tally::run(tally, server, turn, bare).await;
        }
        let bare = bare::fred_pairs_per_second(server, turn, FredSocket::Default);
        Tally::run(&mut bare_fred, server, turn, bare).await;
        let bare = bare::fred_pairs_per_second(server, turn, FredSocket::NoDelay);
        Tally::run(&mut bare_fred_nodelay, server, turn, bare).await;
    }
    // The floors: our calls from bare clients (see `bare`); the peers' floors,
    // Redisson's own scripts and the least a lock can send; and the server limit, whose
    // client CPU is the pipelining load's, not a lock client's.
    [
        ("lock (redis)", &ours),
        ("lock (redis, restart quarantine)", &ours_quarantined),
        ("lock (redis, functions)", &ours_functions),
        ("lock (fred)", &theirs),
        ("rslock", &rslock),
        ("bare scripts (redis-rs)", &bare_redis),
        ("bare functions (redis-rs)", &bare_functions),
        ("bare Redisson scripts (redis-rs)", &bare_redisson),
        ("bare SET NX PX (redis-rs)", &bare_set_nx),
        ("bare scripts (fred)", &bare_fred),
        ("bare scripts (fred, TCP_NODELAY)", &bare_fred_nodelay),
        ("server limit", &limit),
    ]
    .into_iter()
    .map(|(name, tally)| (name.to_owned(), tally.figures()))
    .collect()
}

/// A redis-adapter client whose scripts reach the server as `code` says.
pub(super) async fn with_code(server: &RedisServer, code: ServerCode) -> Locks {
    with_settings(server, ConnectorSettings::default().server_code(code)).await
}

/// A redis-adapter client with `settings`.
async fn with_settings(server: &RedisServer, settings: ConnectorSettings) -> Locks {
    distlock::redis::Connector::new(server.url())
        .settings(settings)
        .locks()
        .await
        .expect("connect")
}

/// A redis-adapter client with the restart quarantine on, past the quarantine a fresh
/// server's first grant waits.
async fn with_quarantine(server: &RedisServer) -> Locks {
    let quarantine = Duration::from_millis(200);
    let settings = ConnectorSettings::default().restart_quarantine(quarantine);
    let locks = with_settings(server, settings).await;
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
                    for command in Pair::sole(&name, "bench-client").redis_commands(&scripts) {
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
