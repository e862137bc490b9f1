//! The PostgreSQL backend, in table mode and in advisory mode, side by side with
//! PostgreSQL's own advisory locks (`pg_advisory_lock`), all through tokio-postgres on
//! as many connections, on a server the run starts: uncontended throughput, contended
//! hand-off, and what our lock traffic costs an unrelated writer of the same database.
//!
//! Two floors measured in the same run put the figures in proportion: a row lock with
//! nothing but its row (one INSERT to take it, one DELETE to give it back, each its own
//! durable commit), the least any lock kept in a table costs; and the writer beside
//! advisory lock pairs paced as ours are, the least any lock traffic costs the writer.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use distlock::Locks;
use lock_testkit::PostgresServer;
use tokio::time::Instant;
use tokio_postgres::types::Type;

use crate::contended::{Kind, contend_with, summarize, work_until};
use crate::scenarios::{
    Figures, HandoffOurs, ROUND_PAUSE, Results, Scale, figures, p50_p99, pairs_per_second,
    pairs_per_second_of,
};

/// Connections per pool, ours and the advisory locks' alike.
const POOL_SIZE: usize = 16;

/// The contenders' names in the report.
const OURS: &str = "lock (postgres)";
const OURS_ADVISORY: &str = "lock (postgres advisory)";
const ADVISORY: &str = "pg_advisory_lock";
const ADVISORY_PREPARED: &str = "pg_advisory_lock (prepared)";
const ROW: &str = "row floor (INSERT, DELETE)";

async fn ours(server: &PostgresServer) -> Locks {
    let backend = distlock::postgres::Connector::new(server.url())
        .pool_size(POOL_SIZE)
        .connect()
        .await
        .expect("connect to PostgreSQL");
    Locks::new(Arc::new(backend))
}

/// Our advisory mode, on as many carrier sessions as the floors' pools have
/// connections.
async fn ours_advisory(server: &PostgresServer) -> Locks {
    let backend = distlock::postgres::Connector::new(server.url())
        .pool_size(POOL_SIZE)
        .connect_advisory()
        .await
        .expect("connect to PostgreSQL in advisory mode");
    Locks::new(Arc::new(backend))
}

fn advisory_pool(server: &PostgresServer) -> Pool {
    bare_pool(server, Bare::Advisory)
}

/// A pool for `bare`'s statements; the row floor's commits are durable, as ours are
/// (the test server's default is asynchronous).
fn bare_pool(server: &PostgresServer, bare: Bare) -> Pool {
    let mut config: tokio_postgres::Config = server.url().parse().expect("the server's URL");
    if bare == Bare::Row {
        config.options("-c synchronous_commit=on");
    }
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

/// A lock of the floors: PostgreSQL's advisory lock, or a bare row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bare {
    /// `pg_advisory_lock` and `pg_advisory_unlock`, on the one connection.
    Advisory,
    /// The same, as statements prepared once per connection (as sqlx's cache does).
    AdvisoryPrepared,
    /// A row of `bench_rows` inserted and deleted.
    Row,
}

/// A hold of a floor's lock, kept with the connection that took it (an advisory lock
/// must be released on it; the row lock keeps the same shape).
struct BareHold {
    connection: deadpool_postgres::Object,
    key: i64,
    bare: Bare,
}

impl Bare {
    async fn lock(self, pool: &Pool, key: i64) -> Option<BareHold> {
        let connection = pool.get().await.ok()?;
        let statement = match self {
            Bare::Advisory | Bare::AdvisoryPrepared => "SELECT pg_advisory_lock($1)",
            Bare::Row => {
                "INSERT INTO bench_rows (key, owner, expires_at)
                 VALUES ($1, 'bench', now() + interval '30 seconds') ON CONFLICT DO NOTHING"
            }
        };
        send(&connection, self, statement, key).await.ok()?;
        Some(BareHold {
            connection,
            key,
            bare: self,
        })
    }

    /// Makes what the floor needs (the row lock's table).
    async fn prepare(self, pool: &Pool) {
        if self == Bare::Row {
            let connection = pool.get().await.expect("a connection");
            connection
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS bench_rows
                         (key bigint PRIMARY KEY, owner text NOT NULL, expires_at timestamptz NOT NULL)",
                )
                .await
                .expect("the row floor's table");
        }
    }
}

/// Sends `statement` with `key`: unnamed, or prepared once per connection for
/// [`Bare::AdvisoryPrepared`].
async fn send(
    connection: &deadpool_postgres::Object,
    bare: Bare,
    statement: &str,
    key: i64,
) -> Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
    if bare == Bare::AdvisoryPrepared {
        let prepared = connection
            .prepare_typed_cached(statement, &[Type::INT8])
            .await?;
        return connection.query(&prepared, &[&key]).await;
    }
    connection
        .query_typed(statement, &[(&key, Type::INT8)])
        .await
}

async fn bare_unlock(hold: BareHold) {
    let statement = match hold.bare {
        Bare::Advisory | Bare::AdvisoryPrepared => "SELECT pg_advisory_unlock($1)",
        Bare::Row => "DELETE FROM bench_rows WHERE key = $1 AND owner = 'bench'",
    };
    let unlocked = send(&hold.connection, hold.bare, statement, hold.key).await;
    if let Err(err) = unlocked {
        eprintln!("lock-bench: {:?} unlock: {err}", hold.bare);
    }
}

/// Lock+unlock pairs per second of 64 tasks on distinct keys through one pool.
async fn bare_pairs_per_second(server: &PostgresServer, bare: Bare, duration: Duration) -> f64 {
    let pool = bare_pool(server, bare);
    bare.prepare(&pool).await;
    pairs_per_second_of(duration, |key| {
        let pool = pool.clone();
        let key = i64::try_from(key).expect("one of 64 keys");
        move || {
            let pool = pool.clone();
            async move {
                let Some(hold) = bare.lock(&pool, key).await else {
                    return false;
                };
                bare_unlock(hold).await;
                true
            }
        }
    })
    .await
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
                    async move { Bare::Advisory.lock(&pool, 1).await }
                },
                bare_unlock,
            )
            .await
        }));
    }
    summarize(tasks, started).await
}

/// Times (ms) `rounds` hand-offs of `pg_advisory_lock` from one connection to another
/// waiting in the server: from the holder's `pg_advisory_unlock` being sent to the
/// waiter's `pg_advisory_lock` returning, as our hand-offs are timed.
async fn advisory_handoffs(server: &PostgresServer, rounds: usize) -> Vec<f64> {
    let pool = advisory_pool(server);
    let mut samples = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let Some(held) = Bare::Advisory.lock(&pool, HANDOFF_KEY).await else {
            continue;
        };
        let waiting = {
            let pool = pool.clone();
            tokio::spawn(async move {
                let taken = Bare::Advisory.lock(&pool, HANDOFF_KEY).await;
                let at = Instant::now();
                if let Some(taken) = taken {
                    bare_unlock(taken).await;
                }
                at
            })
        };
        // Let the waiter's statement reach the server and wait there.
        tokio::time::sleep(ROUND_PAUSE).await;
        let sent = Instant::now();
        bare_unlock(held).await;
        if let Ok(at) = waiting.await {
            samples.push((at - sent).as_secs_f64() * 1000.0);
        }
    }
    samples
}

/// The advisory lock key of the hand-off floor.
const HANDOFF_KEY: i64 = 4242;

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
    beside: Beside<'_>,
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
    match beside {
        Beside::Nothing => {}
        Beside::Ours(locks) => {
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
        Beside::Bare(bare) => {
            let pool = bare_pool(server, bare);
            bare.prepare(&pool).await;
            for task in 0..8 {
                let pool = pool.clone();
                pacers.push(tokio::spawn(async move {
                    while Instant::now() < deadline {
                        if let Some(hold) = bare.lock(&pool, 1000 + task).await {
                            bare_unlock(hold).await;
                        }
                        tokio::time::sleep(PACE).await;
                    }
                }));
            }
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

/// The lock traffic an unrelated writer runs beside.
#[derive(Clone, Copy)]
enum Beside<'a> {
    Nothing,
    Ours(&'a Locks),
    Bare(Bare),
}

/// Uncontended pairs per second (64 tasks, distinct names, one client) of ours (both
/// modes) and the floors, the contended run (8 clients, one name, hold 1 ms, think 1
/// ms) of ours and the advisory lock, and the writer alone and beside each.
pub(crate) async fn postgres(server: &PostgresServer, scale: Scale) -> Results {
    let duration = Duration::from_secs_f64(scale.seconds);
    let ours_backend = Arc::new(
        distlock::postgres::Connector::new(server.url())
            .pool_size(POOL_SIZE)
            .connect()
            .await
            .expect("connect to PostgreSQL"),
    );
    let ours_client = Locks::new(Arc::clone(&ours_backend) as Arc<dyn distlock::Backend>);
    let ours_rate = pairs_per_second(&ours_client, duration).await;
    let prepared = ours_backend.prepares_statements();
    let writer = |beside| writer_commits_per_second(server, beside, duration);
    let writer_alone = writer(Beside::Nothing).await;
    let writer_beside = writer(Beside::Ours(&ours_client)).await;
    let writer_beside_advisory = writer(Beside::Bare(Bare::Advisory)).await;
    let writer_beside_row = writer(Beside::Bare(Bare::Row)).await;
    let advisory_rate = bare_pairs_per_second(server, Bare::Advisory, duration).await;
    let prepared_rate = bare_pairs_per_second(server, Bare::AdvisoryPrepared, duration).await;
    let row_rate = bare_pairs_per_second(server, Bare::Row, duration).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(ours(server).await);
    }
    let mut ours_figures =
        contend_with(clients, 1, "bench:c:postgres", Kind::Mutex, scale.seconds).await;
    let mut advisory_figures = advisory_contended(server, scale.seconds).await;
    // Two clients handing one lock to and fro, as the handoff scenario on Redis: where
    // a contended hand-off's idle time goes (the release's own answer, the rest).
    let rounds = (scale.seconds * 100.0) as usize;
    let ours_handoffs = HandoffOurs::between(&ours(server).await, &ours(server).await)
        .rounds(rounds)
        .await;
    ours_figures.extend(p50_p99("handoff_ms", ours_handoffs.handoffs));
    ours_figures.extend(p50_p99("release_ms", ours_handoffs.releases));
    advisory_figures.extend(p50_p99(
        "handoff_ms",
        advisory_handoffs(server, rounds).await,
    ));
    let ours_advisory_client = ours_advisory(server).await;
    let ours_advisory_rate = pairs_per_second(&ours_advisory_client, duration).await;
    drop(ours_advisory_client);
    let mut advisory_clients = Vec::new();
    for _ in 0..8 {
        advisory_clients.push(ours_advisory(server).await);
    }
    let mut ours_advisory_figures = contend_with(
        advisory_clients,
        1,
        "bench:c:postgres-advisory",
        Kind::Mutex,
        scale.seconds,
    )
    .await;
    ours_advisory_figures.extend(figures(&[("pairs_per_s", ours_advisory_rate)]));
    ours_figures.extend(figures(&[
        ("pairs_per_s", ours_rate),
        // Whether the uncontended run's calls were prepared (see lock-postgres's README).
        ("prepared", f64::from(u8::from(prepared))),
        ("writer_commits_per_s_alone", writer_alone),
        ("writer_commits_per_s_beside", writer_beside),
    ]));
    advisory_figures.extend(figures(&[
        ("pairs_per_s", advisory_rate),
        ("writer_commits_per_s_alone", writer_alone),
        ("writer_commits_per_s_beside", writer_beside_advisory),
    ]));
    let row_figures = figures(&[
        ("pairs_per_s", row_rate),
        ("writer_commits_per_s_alone", writer_alone),
        ("writer_commits_per_s_beside", writer_beside_row),
    ]);
    let mut results = Results::new();
    results.insert(OURS.into(), ours_figures);
    results.insert(OURS_ADVISORY.into(), ours_advisory_figures);
    results.insert(ADVISORY.into(), advisory_figures);
    results.insert(
        ADVISORY_PREPARED.into(),
        figures(&[("pairs_per_s", prepared_rate)]),
    );
    results.insert(ROW.into(), row_figures);
    results
}
