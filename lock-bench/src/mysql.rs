//! The MySQL backend on MariaDB beside MariaDB's own locks, the floors it is measured
//! against (issue 51), on a server the run starts, through `mysql_async`: the lock every comparison
//! describes first, a row under a unique index (one `INSERT` to take it, one `DELETE` to
//! give it back, each its own commit), and `GET_LOCK`/`RELEASE_LOCK` (the session lock
//! madelson/DistributedLock uses), uncontended and, for `GET_LOCK`, contended.
//!
//! Bare `GET_LOCK` sends one call a statement, as madelson/DistributedLock does; our `GET_LOCK`
//! mode sends the calls that queue on a carrier connection together (see lock-mysql's
//! `session::combined`), which is what it is measured for.
//!
//! The test server commits with `innodb_flush_log_at_trx_commit = 2` (the log written at
//! every commit, flushed once a second), as every contender here does; the figures are
//! ratios within one run.

use std::time::Duration;

use lock_testkit::MariaDbServer;
use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use tokio::time::Instant;

use crate::contended::{Kind, contend_with, summarize, work_until};
use crate::scenarios::measure::{cpu_seconds, cpu_seconds_of};
use crate::scenarios::{Figures, Results, Scale, figures, pairs_per_second, pairs_per_second_of};

/// Connections per pool, as the PostgreSQL scenario's.
const POOL_SIZE: usize = 16;

/// The contenders' names in the report.
const OURS: &str = "lock (mysql)";
const OURS_SESSION: &str = "lock (mysql GET_LOCK mode)";
const ROW: &str = "row floor (INSERT, DELETE)";
const GET_LOCK: &str = "GET_LOCK";

/// A client of ours with as many connections as the floors' pools.
async fn ours(server: &MariaDbServer) -> distlock::Locks {
    distlock::mysql::Connector::new(server.url())
        .pool_size(POOL_SIZE)
        .locks()
        .await
        .expect("connect to MariaDB")
}

/// Our user-level lock mode, on as many carrier sessions as the floors' pools have
/// connections.
async fn ours_session(server: &MariaDbServer) -> distlock::Locks {
    distlock::mysql::Connector::new(server.url())
        .pool_size(POOL_SIZE)
        .session_locks()
        .await
        .expect("connect to MariaDB in the GET_LOCK mode")
}

/// A pool of [`POOL_SIZE`] connections to `server`, over TCP. A connection goes back
/// as it is, its prepared statements kept: by default the driver resets it, one more
/// round trip per pair and every statement prepared again, which made bare `GET_LOCK`
/// half as fast as our mode of it (8.9k against 18.6k pairs/s in a quick run).
fn pool(server: &MariaDbServer) -> Pool {
    let opts = Opts::from_url(&server.url()).expect("the server's URL");
    let constraints = PoolConstraints::new(POOL_SIZE, POOL_SIZE).expect("a pool's bounds");
    let pool_opts = PoolOpts::default()
        .with_constraints(constraints)
        .with_reset_connection(false);
    let opts = OptsBuilder::from_opts(opts)
        .prefer_socket(false)
        .pool_opts(pool_opts);
    Pool::new(opts)
}

/// A lock of the floors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bare {
    /// A row of `bench_rows` inserted and deleted, each statement its own commit.
    Row,
    /// `GET_LOCK` and `RELEASE_LOCK`, on the one connection.
    GetLock,
}

/// A hold of a floor's lock, kept with the connection that took it (a session lock
/// must be released on it; the row lock keeps the same shape).
struct BareHold {
    connection: Conn,
    key: u64,
    bare: Bare,
}

impl Bare {
    /// Takes `key`, waiting for it up to five seconds (`GET_LOCK`) or failing at once
    /// (the row, whose unique index refuses a second holder).
    async fn lock(self, pool: &Pool, key: u64) -> Option<BareHold> {
        let mut connection = pool.get_conn().await.ok()?;
        match self {
            Self::Row => {
                connection
                    .exec_drop(
                        "INSERT INTO bench_rows (name, owner, expires_at) \
                         VALUES (?, 'bench', NOW(6) + INTERVAL 30 SECOND)",
                        (key,),
                    )
                    .await
                    .ok()?;
            }
            Self::GetLock => {
                let granted: Option<i64> = connection
                    .exec_first("SELECT GET_LOCK(?, 5)", (format!("bench:{key}"),))
                    .await
                    .ok()?;
                if granted != Some(1) {
                    return None;
                }
            }
        }
        Some(BareHold {
            connection,
            key,
            bare: self,
        })
    }

    /// Makes what the floor needs (the row lock's table).
    async fn prepare(self, pool: &Pool) {
        if self == Self::Row {
            let mut connection = pool.get_conn().await.expect("a connection");
            connection
                .query_drop(
                    "CREATE TABLE IF NOT EXISTS bench_rows (name BIGINT PRIMARY KEY, \
                     owner VARCHAR(32) NOT NULL, expires_at DATETIME(6) NOT NULL) \
                     ENGINE = InnoDB",
                )
                .await
                .expect("the row floor's table");
        }
    }
}

async fn bare_unlock(mut hold: BareHold) {
    let unlocked = match hold.bare {
        Bare::Row => {
            hold.connection
                .exec_drop(
                    "DELETE FROM bench_rows WHERE name = ? AND owner = 'bench'",
                    (hold.key,),
                )
                .await
        }
        Bare::GetLock => {
            hold.connection
                .exec_drop("SELECT RELEASE_LOCK(?)", (format!("bench:{}", hold.key),))
                .await
        }
    };
    if let Err(err) = unlocked {
        eprintln!("lock-bench: {:?} unlock: {err}", hold.bare);
    }
}

/// Lock+unlock pairs per second of 64 tasks on distinct keys through one pool.
async fn bare_pairs_per_second(server: &MariaDbServer, bare: Bare, duration: Duration) -> f64 {
    let pool = pool(server);
    bare.prepare(&pool).await;
    let rate = pairs_per_second_of(duration, |key| {
        let pool = pool.clone();
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
    .await;
    close(pool).await;
    rate
}

/// 8 workers, each with its own pool, on one `GET_LOCK` name (hold 1 ms, think 1 ms).
async fn get_lock_contended(server: &MariaDbServer, seconds: f64) -> Figures {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let mut pools = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let pool = pool(server);
        pools.push(pool.clone());
        tasks.push(tokio::spawn(async move {
            work_until(
                deadline,
                || {
                    let pool = pool.clone();
                    async move { Bare::GetLock.lock(&pool, 1).await }
                },
                bare_unlock,
            )
            .await
        }));
    }
    let figures = summarize(tasks, started).await;
    for pool in pools {
        close(pool).await;
    }
    figures
}

/// Closes `pool`'s connections, so that the next contender starts on an idle server.
async fn close(pool: Pool) {
    if let Err(err) = pool.disconnect().await {
        eprintln!("lock-bench: closing a MariaDB pool: {err}");
    }
}

/// Uncontended pairs per second (64 tasks, distinct names, one pool of 16 connections)
/// of ours (both modes), the row floor and `GET_LOCK`, and the contended run (8 clients,
/// one name, hold 1 ms, think 1 ms) of ours (both modes) and `GET_LOCK`.
pub(crate) async fn mysql(server: &MariaDbServer, scale: Scale) -> Results {
    let duration = Duration::from_secs_f64(scale.seconds);
    let ours_figures =
        ours_uncontended_and_contended(server, scale, || ours(server), "bench:c:mysql").await;
    let row_figures = uncontended(
        server,
        duration,
        bare_pairs_per_second(server, Bare::Row, duration),
    )
    .await;
    let get_lock_alone = uncontended(
        server,
        duration,
        bare_pairs_per_second(server, Bare::GetLock, duration),
    )
    .await;
    let mut get_lock_figures = get_lock_contended(server, scale.seconds).await;
    get_lock_figures.extend(get_lock_alone);
    let session_figures = ours_uncontended_and_contended(
        server,
        scale,
        || ours_session(server),
        "bench:c:mysql-get-lock",
    )
    .await;
    let mut results = Results::new();
    results.insert(OURS.into(), ours_figures);
    results.insert(OURS_SESSION.into(), session_figures);
    results.insert(ROW.into(), row_figures);
    results.insert(GET_LOCK.into(), get_lock_figures);
    results
}

/// A client of ours (made by `connect`) uncontended, then eight of them on `name`
/// contended.
async fn ours_uncontended_and_contended<F>(
    server: &MariaDbServer,
    scale: Scale,
    connect: impl Fn() -> F,
    name: &'static str,
) -> Figures
where
    F: Future<Output = distlock::Locks>,
{
    let duration = Duration::from_secs_f64(scale.seconds);
    let client = connect().await;
    let alone = uncontended(server, duration, pairs_per_second(&client, duration)).await;
    drop(client);
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(connect().await);
    }
    let mut figures = contend_with(clients, 1, name, Kind::Mutex, scale.seconds).await;
    figures.extend(alone);
    figures
}

/// The pairs per second `run` measures over `duration`, with the client's and the
/// server's CPU per pair meanwhile.
async fn uncontended(
    server: &MariaDbServer,
    duration: Duration,
    run: impl Future<Output = f64>,
) -> Figures {
    let cpu = Cpu::start(server);
    let rate = run.await;
    let mut measured = figures(&[("pairs_per_s", rate)]);
    measured.extend(cpu.per_pair(rate, duration));
    measured
}

/// The CPU time this process and the server have used since a run began.
struct Cpu {
    server_pid: u32,
    client: f64,
    server: f64,
}

impl Cpu {
    fn start(server: &MariaDbServer) -> Self {
        Self {
            server_pid: server.pid(),
            client: cpu_seconds(),
            server: cpu_seconds_of(server.pid()),
        }
    }

    /// The client's and the server's CPU time per pair of a run of `duration` at
    /// `rate` pairs per second, in microseconds.
    fn per_pair(&self, rate: f64, duration: Duration) -> Figures {
        let pairs = rate * duration.as_secs_f64();
        let per_pair = |seconds: f64| {
            if pairs <= 0.0 {
                0.0
            } else {
                seconds * 1e6 / pairs
            }
        };
        figures(&[
            (
                "client_cpu_us_per_pair",
                per_pair(cpu_seconds() - self.client),
            ),
            (
                "server_cpu_us_per_pair",
                per_pair(cpu_seconds_of(self.server_pid) - self.server),
            ),
        ])
    }
}
