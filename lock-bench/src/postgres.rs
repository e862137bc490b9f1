//! The PostgreSQL backend side by side with PostgreSQL's own advisory locks
//! (`pg_advisory_lock`), both through tokio-postgres on pools of the same size, on a
//! server the run starts: uncontended throughput, contended hand-off, and what our
//! lock traffic costs an unrelated writer of the same database.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use distlock::Locks;
use lock_testkit::PostgresServer;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::contended::{Kind, contend_with, summarize, work_until};
use crate::scenarios::{Figures, Results, Scale, figures, pairs_per_second};

/// Connections per pool, ours and the advisory locks' alike.
const POOL_SIZE: usize = 16;

/// The contenders' names in the report.
const OURS: &str = "lock (postgres)";
const ADVISORY: &str = "pg_advisory_lock";

async fn ours(server: &PostgresServer) -> Locks {
    let backend = distlock::postgres::Connector::new(server.url())
        .pool_size(POOL_SIZE)
        .connect()
        .await
        .expect("connect to PostgreSQL");
    Locks::new(Arc::new(backend))
}

fn advisory_pool(server: &PostgresServer) -> Pool {
    let config: tokio_postgres::Config = server.url().parse().expect("the server's URL");
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(POOL_SIZE)
        .build()
        .expect("a pool")
}

/// A session-level advisory lock held on the connection that took it (it must be
/// released on that same connection).
struct AdvisoryHold {
    connection: deadpool_postgres::Object,
    key: i64,
}

async fn advisory_lock(pool: &Pool, key: i64) -> Option<AdvisoryHold> {
    let connection = pool.get().await.ok()?;
    connection
        .query_typed("SELECT pg_advisory_lock($1)", &[(&key, Type::INT8)])
        .await
        .ok()?;
    Some(AdvisoryHold { connection, key })
}

async fn advisory_unlock(hold: AdvisoryHold) {
    let unlocked = hold
        .connection
        .query_typed("SELECT pg_advisory_unlock($1)", &[(&hold.key, Type::INT8)])
        .await;
    if let Err(err) = unlocked {
        eprintln!("lock-bench: pg_advisory_unlock: {err}");
    }
}

/// Lock+unlock pairs per second of 64 tasks on distinct keys through one pool.
async fn advisory_pairs_per_second(pool: &Pool, duration: Duration) -> f64 {
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for key in 0..64 {
        let (pool, count) = (pool.clone(), Arc::clone(&count));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                if let Some(hold) = advisory_lock(&pool, key).await {
                    advisory_unlock(hold).await;
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

/// 8 workers, each with its own pool, on one advisory key.
async fn advisory_contended(server: &PostgresServer, seconds: f64) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = advisory_pool(server);
        tasks.push(tokio::spawn(async move {
            work_until(
                deadline,
                || {
                    let pool = pool.clone();
                    async move { advisory_lock(&pool, 1).await }
                },
                advisory_unlock,
            )
            .await
        }));
    }
    summarize(tasks, started).await
}

/// Lock+unlock pairs the paced load of [`writer_commits_per_second`] runs: 8 tasks, each
/// pausing this long after a pair, so that the lock traffic (about a thousand pairs a
/// second) leaves the server CPU to spare and what is measured is contention, not a
/// saturated machine.
const PACE: Duration = Duration::from_millis(5);

/// Commits per second of a writer (one connection, each transaction one INSERT and a
/// NOTIFY on a channel of its own, as an application telling its caches) on a table of
/// its own, alone or while paced lock pairs run beside it (`beside`). Every notifying
/// transaction of a database takes one database-wide lock at commit, so a release that
/// notified would queue the writer's commits behind it; the rest the writer feels is the
/// lock traffic's share of the WAL and the CPU.
async fn writer_commits_per_second(
    server: &PostgresServer,
    beside: Option<&Locks>,
    duration: Duration,
) -> f64 {
    let pool = advisory_pool(server);
    let writer = pool.get().await.expect("a connection");
    writer
        .batch_execute("CREATE TABLE IF NOT EXISTS bench_writes (id bigserial, at timestamptz)")
        .await
        .expect("the writer's table");
    let deadline = Instant::now() + duration;
    let mut pacers = Vec::new();
    if let Some(locks) = beside {
        for task in 0..8 {
            let mutex = locks.mutex(&format!("bench:w:{task}"));
            pacers.push(tokio::spawn(async move {
                while Instant::now() < deadline {
                    if let Ok(guard) = mutex.lock().await
                        && let Err(err) = guard.unlock().await
                    {
                        eprintln!("lock-bench: paced unlock: {err}");
                    }
                    tokio::time::sleep(PACE).await;
                }
            }));
        }
    }
    let mut commits = 0_u64;
    while Instant::now() < deadline {
        writer
            .query_typed(
                "WITH written AS (INSERT INTO bench_writes (at) VALUES (now()) RETURNING id)
                 SELECT pg_notify('bench_writes', id::text) FROM written",
                &[],
            )
            .await
            .expect("the writer's insert");
        commits += 1;
    }
    for pacer in pacers {
        if let Err(err) = pacer.await {
            eprintln!("lock-bench: a paced task failed: {err}");
        }
    }
    commits as f64 / duration.as_secs_f64()
}

/// Uncontended pairs per second (64 tasks, distinct names, one client) and the contended
/// run (8 clients, one name, hold 1 ms, think 1 ms) of both.
pub(crate) async fn postgres(server: &PostgresServer, scale: Scale) -> Results {
    let duration = Duration::from_secs_f64(scale.seconds);
    let ours_client = ours(server).await;
    let ours_rate = pairs_per_second(&ours_client, duration).await;
    let writer_alone = writer_commits_per_second(server, None, duration).await;
    let writer_beside = writer_commits_per_second(server, Some(&ours_client), duration).await;
    let advisory_rate = advisory_pairs_per_second(&advisory_pool(server), duration).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(ours(server).await);
    }
    let mut ours_figures =
        contend_with(clients, 1, "bench:c:postgres", Kind::Mutex, scale.seconds).await;
    let mut advisory_figures = advisory_contended(server, scale.seconds).await;
    ours_figures.extend(figures(&[
        ("pairs_per_s", ours_rate),
        ("writer_commits_per_s_alone", writer_alone),
        ("writer_commits_per_s_beside", writer_beside),
    ]));
    advisory_figures.extend(figures(&[("pairs_per_s", advisory_rate)]));
    let mut results = Results::new();
    results.insert(OURS.into(), ours_figures);
    results.insert(ADVISORY.into(), advisory_figures);
    results
}
