//! Contended runs: workers loop acquire, hold 1 ms, release, think 1 ms on one name.
//!
//! Raw waits are not comparable across runtimes (tokio turns a 1 ms sleep into about
//! 2 ms), so every run also reports per lock cycle: the idle time per hand-off (how long
//! the lock sat free between two holders) and the waits divided by the cycle (one
//! worker's hold, release and think).

use std::sync::Arc;
use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

use crate::scenarios::{Adapter, Figures, Results, Scale, figures, peer, percentile, sorted};

/// What one worker did.
#[derive(Debug, Default)]
pub(crate) struct WorkerRun {
    /// Each acquisition's wait, in milliseconds.
    waits: Vec<f64>,
    /// Time spent holding the lock.
    held: Duration,
    /// Time from each acquisition to the end of the think time after its release.
    cycles: Duration,
    /// Critical sections done.
    ops: u64,
}

/// One worker: acquire, hold 1 ms, release, think 1 ms, until `deadline`.
pub(crate) async fn work_until<H, A, R>(
    deadline: Instant,
    mut acquire: impl FnMut() -> A,
    mut release: impl FnMut(H) -> R,
) -> WorkerRun
where
    A: Future<Output = Option<H>>,
    R: Future<Output = ()>,
{
    let mut run = WorkerRun::default();
    while Instant::now() < deadline {
        let asked = Instant::now();
        let Some(taken) = acquire().await else {
            continue;
        };
        let entered = Instant::now();
        run.waits.push((entered - asked).as_secs_f64() * 1000.0);
        sleep(Duration::from_millis(1)).await;
        run.held += entered.elapsed();
        release(taken).await;
        run.ops += 1;
        sleep(Duration::from_millis(1)).await;
        run.cycles += entered.elapsed();
    }
    run
}

/// Which of our locks a contended run takes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Mutex,
    Fair,
    /// The write side of a read-write lock.
    Write,
}

/// Workers of ours on one name: `per_client` tasks on each of `clients`.
pub(crate) async fn contend_with(
    clients: Vec<Locks>,
    per_client: usize,
    name: &'static str,
    kind: Kind,
    seconds: f64,
) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for locks in clients {
        for _ in 0..per_client {
            let locks = locks.clone();
            tasks.push(tokio::spawn(async move {
                work_until(
                    deadline,
                    || {
                        let locks = locks.clone();
                        async move {
                            match kind {
                                Kind::Mutex => locks.mutex(name).lock().await,
                                Kind::Fair => locks.fair_mutex(name).lock().await,
                                Kind::Write => locks.rw_lock(name).writer().lock().await,
                            }
                            .ok()
                        }
                    },
                    |guard| async move {
                        if let Err(err) = guard.unlock().await {
                            eprintln!("lock-bench: unlock: {err}");
                        }
                    },
                )
                .await
            }));
        }
    }
    summarize(tasks, started).await
}

/// The figures of one run from its workers.
pub(crate) async fn summarize(tasks: Vec<JoinHandle<WorkerRun>>, started: Instant) -> Figures {
    let mut all = WorkerRun::default();
    let mut ops = Vec::new();
    for task in tasks {
        match task.await {
            Ok(run) => {
                all.waits.extend(run.waits);
                all.held += run.held;
                all.cycles += run.cycles;
                all.ops += run.ops;
                ops.push(run.ops);
            }
            Err(err) => eprintln!("lock-bench: a worker failed: {err}"),
        }
    }
    let wall = started.elapsed().as_secs_f64();
    let waits = sorted(all.waits);
    let most = ops.iter().copied().max().unwrap_or(0).max(1);
    let fewest = ops.iter().copied().min().unwrap_or(0);
    let total = all.ops as f64;
    let utilization = all.held.as_secs_f64() / wall;
    let cycle_ms = all.cycles.as_secs_f64() * 1000.0 / total.max(1.0);
    let (p50, p99) = (percentile(&waits, 0.50), percentile(&waits, 0.99));
    figures(&[
        ("ops", total),
        ("utilization", utilization),
        (
            "idle_ms_per_handoff",
            wall * (1.0 - utilization.min(1.0)) * 1000.0 / total.max(1.0),
        ),
        ("cycle_ms", cycle_ms),
        ("wait_ms_p50", p50),
        ("wait_ms_p99", p99),
        ("wait_ms_max", waits.last().copied().unwrap_or(0.0)),
        ("wait_cycles_p50", p50 / cycle_ms.max(f64::MIN_POSITIVE)),
        ("wait_cycles_p99", p99 / cycle_ms.max(f64::MIN_POSITIVE)),
        ("fairness_min_over_max", fewest as f64 / most as f64),
    ])
}

/// One run of ours on a fresh name: 8 clients with one worker each, or one client with
/// 64 workers.
async fn contend_ours(
    server: &RedisServer,
    adapter: Adapter,
    kind: Kind,
    one_client: bool,
    seconds: f64,
) -> Figures {
    let (clients, per_client) = if one_client { (1, 64) } else { (8, 1) };
    let mut connected = Vec::new();
    for _ in 0..clients {
        connected.push(adapter.connect(server).await);
    }
    let name = match (kind, one_client) {
        (Kind::Mutex, false) => "bench:c:mutex",
        (Kind::Fair, false) => "bench:c:fair",
        (Kind::Write, false) => "bench:c:rw",
        (Kind::Mutex, true) => "bench:c1:mutex",
        (Kind::Fair, true) => "bench:c1:fair",
        (Kind::Write, true) => "bench:c1:rw",
    };
    contend_with(connected, per_client, name, kind, seconds).await
}

async fn contend_peer(server: &RedisServer, seconds: f64) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let manager = Arc::new(peer(&[server.url()]));
        tasks.push(tokio::spawn(async move {
            let releaser = Arc::clone(&manager);
            work_until(
                deadline,
                || {
                    let manager = Arc::clone(&manager);
                    async move {
                        manager
                            .acquire_no_guard("bench:c:peer".as_bytes(), Duration::from_secs(30))
                            .await
                            .ok()
                    }
                },
                |lock| {
                    let manager = Arc::clone(&releaser);
                    async move { manager.unlock(&lock).await }
                },
            )
            .await
        }));
    }
    summarize(tasks, started).await
}

/// The mutex, the fair lock and the write lock with 8 clients and with 64 tasks on one
/// client; the fred adapter's mutex; the peer with 8 clients.
pub(crate) async fn contended(server: &RedisServer, scale: Scale) -> Results {
    let seconds = scale.seconds;
    let mut results = Results::new();
    for (kind, label) in [
        (Kind::Mutex, "mutex"),
        (Kind::Fair, "fair"),
        (Kind::Write, "write"),
    ] {
        results.insert(
            format!("lock {label} (redis)"),
            contend_ours(server, Adapter::Redis, kind, false, seconds).await,
        );
        results.insert(
            format!("lock {label} (redis, 64 tasks, 1 client)"),
            contend_ours(server, Adapter::Redis, kind, true, seconds).await,
        );
    }
    results.insert(
        "lock mutex (fred)".into(),
        contend_ours(server, Adapter::Fred, Kind::Mutex, false, seconds).await,
    );
    results.insert("rslock".into(), contend_peer(server, seconds).await);
    results
}
