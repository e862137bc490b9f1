//! `contend`: N workers, each with its own client, fight over one lock and report how it
//! went as one JSON line. Other tools (the benchmark, the chaos harness) rely on this
//! contract, so its flags and output fields only ever grow.
//!
//! ```text
//! contend --url URL [--backend redis|fred|postgres|postgres-advisory|mysql|mysql-get-lock|redlock|memory] [--kind mutex|fair|read|write|mixed|multi|semaphore|latch] [--name NAME]
//!         --workers N --hold-ms H --think-ms T --seconds S
//!         [--distinct] [--lease-ms L] [--check-key KEY] [--permits P]
//! ```
//!
//! Each worker loops: acquire, hold H ms, release, pause T ms. Exclusion is checked with
//! an independent in-process counter per lock name and, with `--check-key`, with an
//! `INCR`/`DECR` of KEY on the same Redis (a violation whenever `INCR` returns anything
//! but 1). Kinds: `mutex`, `fair`, `read` (all readers), `write` (all writers) and
//! `mixed` (one operation in five writes); for read-write kinds a writer adds 1 000 000 to
//! KEY instead and must see exactly that, a reader adds 1 and must see no writer.
//! `semaphore` takes one permit of a semaphore reset to `--permits P` (default 1) at the
//! start: never more than P workers may be inside, on the counter and on KEY. `latch`
//! runs rounds of a count-down latch of N (a fresh one per round): each worker works H
//! ms, counts down, waits for the latch to open, pauses T ms; a wait is from its count
//! down to its wake-up, and a waiter woken before all N counted down is a violation.
//! `--url` takes every URL form of the adapters (`redis://`, `rediss://`,
//! `redis+cluster://h:p,h:p`, `redis+sentinel://h:p,h:p/NAME`) for `redis` and `fred`;
//! `--check-key` needs a single-server URL.
//! `--backend postgres --url postgres://...` runs on PostgreSQL (the mutex kind so far;
//! `--check-key` needs Redis); `--backend postgres-advisory` on its advisory mode (session
//! advisory locks: mutex, read, write and mixed kinds). `--backend redlock --url URL1,URL2,...` runs a RedLock
//! over those nodes; `--kind multi
//! --name a,b,c` takes a MultiLock over the listed names. Output fields: `backend`, `kind`, `workers`, `ops`, `ops_per_s`, `utilization`
//! (total time held / wall time), `wait_ms_p50`/`p99`/`max`, `fairness_min_over_max`
//! (fewest over most ops of one worker), `violations`, `permits`.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::{Parser, ValueEnum};
use distlock::Locks;
use tokio::time::Instant;

/// N workers, each with its own client, fight over one lock; one JSON line reports
/// how it went.
#[derive(Debug, Clone, Parser)]
#[command(name = "contend")]
struct Args {
    /// The server (every URL form of the adapters; RedLock: URL1,URL2,...). Default:
    /// $`REDIS_URL`.
    #[arg(long, env = "REDIS_URL")]
    url: Option<String>,
    #[arg(long, value_enum, default_value_t = BackendKind::Redis)]
    backend: BackendKind,
    #[arg(long, value_enum, default_value_t = Kind::Mutex)]
    kind: Kind,
    /// The lock's name (`multi`: a,b,c).
    #[arg(long, default_value = "contend")]
    name: String,
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    workers: u16,
    /// How long each worker holds the lock (ms).
    #[arg(long = "hold-ms", default_value_t = 1)]
    hold_ms: u64,
    /// How long each worker pauses between holds (ms).
    #[arg(long = "think-ms", default_value_t = 1)]
    think_ms: u64,
    /// How long the run lasts (seconds, fractions allowed).
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    seconds: f64,
    /// One lock name per worker instead of one for all.
    #[arg(long)]
    distinct: bool,
    /// A lease instead of the watchdog (ms).
    #[arg(long = "lease-ms")]
    lease_ms: Option<u64>,
    /// A Redis key every critical section INCRs and DECRs as an independent check.
    #[arg(long = "check-key")]
    check_key: Option<String>,
    /// The semaphore's permits (kind `semaphore`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    permits: u64,
}

/// What the locks live on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum BackendKind {
    Redis,
    Fred,
    Postgres,
    /// PostgreSQL's session advisory locks (`Connector::connect_advisory`).
    #[value(name = "postgres-advisory")]
    #[serde(rename = "postgres-advisory")]
    PostgresAdvisory,
    /// MySQL or MariaDB (`mysql://user@host/database`).
    Mysql,
    /// MySQL's or MariaDB's user-level locks (`Connector::connect_session_locks`).
    #[value(name = "mysql-get-lock")]
    #[serde(rename = "mysql-get-lock")]
    MysqlGetLock,
    Redlock,
    Memory,
}

/// What the workers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Kind {
    Mutex,
    Fair,
    /// Every worker reads.
    Read,
    /// Every worker writes.
    Write,
    /// One operation in five writes.
    Mixed,
    /// A MultiLock over the names in `--name a,b,c`.
    Multi,
    Semaphore,
    Latch,
}

impl Args {
    fn workers(&self) -> usize {
        usize::from(self.workers)
    }

    fn hold(&self) -> Duration {
        Duration::from_millis(self.hold_ms)
    }

    fn think(&self) -> Duration {
        Duration::from_millis(self.think_ms)
    }

    fn lease(&self) -> Option<Duration> {
        self.lease_ms.map(Duration::from_millis)
    }
}

fn positive_seconds(value: &str) -> Result<f64, String> {
    match value.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds.is_finite() => Ok(seconds),
        _ => Err(format!("{value:?} is not a positive number of seconds")),
    }
}

/// One client per worker: its own connections and its own UUID.
async fn client(args: &Args, memory: &distlock::memory::MemoryBackend) -> Result<Locks, String> {
    let url = || {
        args.url
            .as_deref()
            .ok_or_else(|| format!("--url (or REDIS_URL) is required for {:?}", args.backend))
    };
    let backend: Arc<dyn distlock::Backend> = match args.backend {
        BackendKind::Memory => Arc::new(memory.clone()),
        BackendKind::Redis => distlock::redis::connect_backend(url()?)
            .await
            .map_err(|e| e.chain().to_string())?,
        BackendKind::Fred => distlock::fred::connect_backend(url()?)
            .await
            .map_err(|e| e.chain().to_string())?,
        BackendKind::Postgres => distlock::postgres::connect_backend(url()?)
            .await
            .map_err(|e| e.chain().to_string())?,
        BackendKind::Mysql => distlock::mysql::connect_backend(url()?)
            .await
            .map_err(|e| e.chain().to_string())?,
        BackendKind::MysqlGetLock => Arc::new(
            distlock::mysql::Connector::new(url()?)
                .connect_session_locks()
                .await
                .map_err(|e| e.chain().to_string())?,
        ),
        BackendKind::PostgresAdvisory => Arc::new(
            distlock::postgres::Connector::new(url()?)
                .connect_advisory()
                .await
                .map_err(|e| e.chain().to_string())?,
        ),
        BackendKind::Redlock => {
            // Each node connects on first use: the RedLock starts, and serves with a
            // majority, while some nodes are down; they join when they come up.
            let nodes = url()?
                .split(',')
                .map(|node| {
                    let node = node.trim().to_owned();
                    let capabilities = distlock::redis::RedisBackend::CAPABILITIES;
                    let lazy =
                        distlock::redlock::LazyNode::new(node.clone(), capabilities, move || {
                            let node = node.clone();
                            async move { distlock::redis::connect_backend(&node).await }
                        });
                    Arc::new(lazy) as Arc<dyn distlock::Backend>
                })
                .collect();
            let redlock = distlock::redlock::RedLock::builder(nodes)
                .build()
                .map_err(|e| e.chain().to_string())?;
            Arc::new(redlock)
        }
    };
    if args.kind == Kind::Multi {
        let mut multi = distlock::redlock::MultiLock::builder();
        for name in args.name.split(',') {
            multi = multi.lock(Arc::clone(&backend), name.trim());
        }
        return Ok(multi.build().map_err(|e| e.chain().to_string())?.locks());
    }
    Ok(Locks::new(backend))
}

#[derive(Debug, Default)]
struct WorkerReport {
    ops: u64,
    held: Duration,
    waits_ms: Vec<f64>,
    violations: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("contend: {msg}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<String, String> {
    let memory = distlock::memory::MemoryBackend::new();
    let checker = match &args.check_key {
        Some(key) => {
            let url = args.url.as_deref().ok_or("--check-key needs --url")?;
            let client = redis::Client::open(url).map_err(|e| e.to_string())?;
            let conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| e.to_string())?;
            Some((conn, key.clone()))
        }
        None => None,
    };
    let mut clients = Vec::with_capacity(args.workers());
    for _ in 0..args.workers() {
        clients.push(client(&args, &memory).await?);
    }
    if args.kind == Kind::Semaphore {
        // Reset: whatever an earlier run left, exactly P permits are there now.
        for w in 0..args.workers() {
            let semaphore = clients[0].semaphore(&lock_name(&args, w));
            semaphore.drain().await.map_err(|e| e.chain().to_string())?;
            let permits = i64::try_from(args.permits).map_err(|e| e.to_string())?;
            semaphore
                .add_permits(permits)
                .await
                .map_err(|e| e.chain().to_string())?;
            if !args.distinct {
                break;
            }
        }
    }
    let inside: Arc<HashMap<String, AtomicU64>> = Arc::new(
        (0..args.workers())
            .map(|w| (lock_name(&args, w), AtomicU64::new(0)))
            .collect(),
    );
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(args.seconds);
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    if args.kind == Kind::Latch {
        // A fresh prefix per run: latches of an earlier run never mix with these.
        let run_id = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let rounds = Arc::new(Rounds {
            prefix: format!("{}:{run_id:x}", args.name),
            counted: AtomicU64::new(0),
            entered: std::sync::Mutex::new((0, None)),
        });
        for (w, locks) in clients.into_iter().enumerate() {
            let (args, rounds, errors) = (args.clone(), Arc::clone(&rounds), Arc::clone(&errors));
            tasks.push(tokio::spawn(async move {
                latch_worker(w, &args, &locks, &rounds, deadline, &errors).await
            }));
        }
    } else {
        for (w, locks) in clients.into_iter().enumerate() {
            let args = args.clone();
            let inside = Arc::clone(&inside);
            let checker = checker.clone();
            let errors = Arc::clone(&errors);
            tasks.push(tokio::spawn(async move {
                worker(w, &args, &locks, &inside, checker, deadline, &errors).await
            }));
        }
    }
    let mut reports = Vec::new();
    for task in tasks {
        reports.push(task.await.map_err(|e| e.to_string())?);
    }
    let wall = started.elapsed().as_secs_f64();
    if errors.load(Ordering::Relaxed) > 0 && reports.iter().all(|r| r.ops == 0) {
        return Err("every acquire failed; is the server reachable?".into());
    }
    Ok(summarize(&args, &reports, wall))
}

fn lock_name(args: &Args, worker: usize) -> String {
    if args.distinct {
        format!("{}:{worker}", args.name)
    } else {
        args.name.clone()
    }
}

/// What one critical section counts as on the exclusion counters: a writer (or any
/// exclusive lock) adds `WRITER`, a reader adds 1. A writer must find 0; a reader must find
/// no writer.
const WRITER: u64 = 1_000_000;

/// Whether operation `op` of worker `w` writes. `mixed` makes one in five operations a
/// write (80 % readers), spread evenly over workers and time.
fn writes(kind: Kind, w: usize, op: u64) -> bool {
    match kind {
        // Readers, and semaphore holders: each counts 1 inside.
        Kind::Read | Kind::Semaphore => false,
        Kind::Mixed => (op + w as u64).is_multiple_of(5),
        Kind::Mutex | Kind::Fair | Kind::Write | Kind::Multi | Kind::Latch => true,
    }
}

/// What a worker holds inside: a lock's guard or a semaphore's permits.
enum Held {
    Guard(distlock::Guard),
    Permits(distlock::Permits),
}

/// The handle a worker uses for one operation.
fn handle(locks: &Locks, kind: Kind, name: &str, write: bool) -> distlock::Lock {
    match kind {
        Kind::Fair => locks.fair_mutex(name),
        // A MultiLock client: the name only labels the guard.
        Kind::Multi => locks.mutex("multi"),
        Kind::Read | Kind::Write | Kind::Mixed if write => locks.rw_lock(name).writer(),
        Kind::Read | Kind::Write | Kind::Mixed => locks.rw_lock(name).reader(),
        // Semaphore and latch workers take no lock.
        Kind::Mutex | Kind::Semaphore | Kind::Latch => locks.mutex(name),
    }
}

async fn worker(
    w: usize,
    args: &Args,
    locks: &Locks,
    inside: &HashMap<String, AtomicU64>,
    mut checker: Option<(redis::aio::MultiplexedConnection, String)>,
    deadline: Instant,
    errors: &AtomicU64,
) -> WorkerReport {
    let name = lock_name(args, w);
    let semaphore = args.kind == Kind::Semaphore;
    let mut report = WorkerReport::default();
    let Some(counter) = inside.get(&name) else {
        return report;
    };
    let mut op = 0u64;
    while Instant::now() < deadline {
        let write = writes(args.kind, w, op);
        op += 1;
        let asked = Instant::now();
        let acquired = if semaphore {
            locks.semaphore(&name).acquire(1).await.map(Held::Permits)
        } else {
            let lock = handle(locks, args.kind, &name, write);
            match args.lease() {
                Some(lease) => lock.lock_with_lease(lease).await,
                None => lock.lock().await,
            }
            .map(Held::Guard)
        };
        let held = match acquired {
            Ok(guard) => guard,
            Err(err) => {
                errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("worker {w}: {}", err.chain());
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let entered = Instant::now();
        report
            .waits_ms
            .push((entered - asked).as_secs_f64() * 1000.0);
        let delta = if write { WRITER } else { 1 };
        let before = counter.fetch_add(delta, Ordering::SeqCst);
        let violated = if semaphore {
            before >= args.permits
        } else {
            (write && before != 0) || (!write && before >= WRITER)
        };
        if violated {
            report.violations += 1;
        }
        // The check key follows the contract: exclusive kinds INCR it and expect 1;
        // read-write kinds add WRITER for a writer (expecting exactly WRITER) or 1 for a
        // reader (expecting no writer).
        let exclusive_kind = matches!(
            args.kind,
            Kind::Mutex | Kind::Fair | Kind::Multi | Kind::Semaphore
        );
        let key_delta = if exclusive_kind { 1 } else { delta };
        if let Some((conn, key)) = checker.as_mut() {
            let n: redis::RedisResult<u64> = redis::cmd("INCRBY")
                .arg(&*key)
                .arg(key_delta)
                .query_async(conn)
                .await;
            let exclusive = match n {
                Ok(n) if semaphore => n <= args.permits,
                Ok(n) if write => n == key_delta,
                Ok(n) => n < WRITER,
                Err(_) => false,
            };
            if !exclusive {
                report.violations += 1;
            }
        }
        tokio::time::sleep(args.hold()).await;
        if let Some((conn, key)) = checker.as_mut() {
            let _: redis::RedisResult<i64> = redis::cmd("DECRBY")
                .arg(&*key)
                .arg(key_delta)
                .query_async(conn)
                .await;
        }
        counter.fetch_sub(delta, Ordering::SeqCst);
        report.held += entered.elapsed();
        report.ops += 1;
        let released = match held {
            Held::Guard(guard) => guard.unlock().await,
            Held::Permits(permits) => permits.release().await,
        };
        if let Err(err) = released {
            errors.fetch_add(1, Ordering::Relaxed);
            eprintln!("worker {w}: unlock: {}", err.chain());
        }
        tokio::time::sleep(args.think()).await;
    }
    report
}

/// The latch rounds of one run: round r uses the latch `<prefix>:<r>`, and `counted`
/// counts every count-down made, so that a woken waiter can tell whether all of its
/// round's arrived.
struct Rounds {
    prefix: String,
    counted: AtomicU64,
    /// The highest round any worker entered, and the round nobody enters once the
    /// deadline passed: every worker stops after the same round, none waits for a round
    /// the others never join.
    entered: std::sync::Mutex<(u64, Option<u64>)>,
}

impl Rounds {
    /// Whether round `round` (from 1) is run.
    fn enter(&self, round: u64, deadline: Instant) -> bool {
        let mut state = self
            .entered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (entered, closed) = &mut *state;
        if closed.is_some_and(|closed| round >= closed) {
            return false;
        }
        if Instant::now() >= deadline && *entered < round {
            *closed = Some(round);
            return false;
        }
        *entered = (*entered).max(round);
        true
    }
}

/// Rounds of a count-down latch of N workers until the deadline: work H ms, count down,
/// wait for the latch to open (the measured wait), pause T ms.
async fn latch_worker(
    w: usize,
    args: &Args,
    locks: &Locks,
    rounds: &Rounds,
    deadline: Instant,
    errors: &AtomicU64,
) -> WorkerReport {
    let mut report = WorkerReport::default();
    let workers = u64::from(args.workers);
    let mut round = 0u64;
    loop {
        round += 1;
        if !rounds.enter(round, deadline) {
            break;
        }
        let latch = locks.count_down_latch(&format!("{}:{round}", rounds.prefix));
        let worked = Instant::now();
        tokio::time::sleep(args.hold()).await;
        report.held += worked.elapsed();
        let counted = async {
            latch.try_set_count(workers).await?;
            rounds.counted.fetch_add(1, Ordering::SeqCst);
            latch.count_down().await?;
            let counted_down = Instant::now();
            latch.wait_for(Duration::from_secs(10)).await?;
            Ok::<_, distlock::Error>(counted_down.elapsed())
        };
        match counted.await {
            Ok(waited) => {
                // Round r (from 1) opens only after all r * N count-downs.
                if rounds.counted.load(Ordering::SeqCst) < round * workers {
                    report.violations += 1;
                }
                report.waits_ms.push(waited.as_secs_f64() * 1000.0);
                report.ops += 1;
            }
            Err(err) => {
                errors.fetch_add(1, Ordering::Relaxed);
                eprintln!("worker {w}: latch: {}", err.chain());
                break;
            }
        }
        tokio::time::sleep(args.think()).await;
    }
    report
}

fn summarize(args: &Args, reports: &[WorkerReport], wall: f64) -> String {
    let ops: u64 = reports.iter().map(|r| r.ops).sum();
    let held: f64 = reports.iter().map(|r| r.held.as_secs_f64()).sum();
    let mut waits: Vec<f64> = reports
        .iter()
        .flat_map(|r| r.waits_ms.iter().copied())
        .collect();
    waits.sort_by(f64::total_cmp);
    let pct = |p: f64| -> f64 {
        if waits.is_empty() {
            return 0.0;
        }
        let rank = ((p * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
        waits[rank - 1]
    };
    let most = reports.iter().map(|r| r.ops).max().unwrap_or(0);
    let fewest = reports.iter().map(|r| r.ops).min().unwrap_or(0);
    let fairness = if most == 0 {
        0.0
    } else {
        fewest as f64 / most as f64
    };
    let round = |x: f64| (x * 1000.0).round() / 1000.0;
    serde_json::json!({
        "backend": args.backend,
        "kind": args.kind,
        "workers": args.workers,
        "ops": ops,
        "ops_per_s": round(ops as f64 / wall),
        "utilization": round(held / wall),
        "wait_ms_p50": round(pct(0.50)),
        "wait_ms_p99": round(pct(0.99)),
        "wait_ms_max": round(waits.last().copied().unwrap_or(0.0)),
        "fairness_min_over_max": round(fairness),
        "violations": reports.iter().map(|r| r.violations).sum::<u64>(),
        "permits": args.permits,
    })
    .to_string()
}
