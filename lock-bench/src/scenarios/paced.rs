//! The server's work per uncontended lock+unlock pair at a fixed rate of pairs, the
//! rate a team that moves from Redisson compares first: ours (as scripts and as
//! functions) beside Redisson's own scripts and `SET NX PX` with a compare-and-delete,
//! all at the same rate, so that each pays the same network work per pair.

use std::sync::Arc;
use std::time::Duration;

use distlock::Locks;
use lock_redis_protocol::ServerCode;
use lock_testkit::RedisServer;
use tokio::time::{Instant, MissedTickBehavior};

use super::uncontended::{Tally, with_code};
use super::{Results, Scale};
use crate::bare::{self, BareLock, Loaded};

/// How many tasks send pairs, each one pair per [`PERIOD`].
const TASKS: u32 = 4;

/// Each task's period: with [`TASKS`] tasks, 4 000 pairs per second.
const PERIOD: Duration = Duration::from_millis(1);

/// How many turns each contender takes (see the uncontended scenario).
const TURNS: usize = 5;

/// The contenders, each at 4 000 pairs per second for `scale.seconds` in all.
pub(crate) async fn paced(server: &RedisServer, scale: Scale) -> Results {
    let turn = Duration::from_secs_f64(scale.seconds / TURNS as f64);
    let scripts = with_code(server, ServerCode::Scripts).await;
    let functions = with_code(server, ServerCode::Functions).await;
    let loaded = Loaded::into(server).await;
    let mut tallies: [Tally; 4] = Default::default();
    for _ in 0..TURNS {
        let [with_scripts, with_functions, redisson, set_nx] = &mut tallies;
        with_scripts
            .run(server, turn, paced_locks(&scripts, turn))
            .await;
        with_functions
            .run(server, turn, paced_locks(&functions, turn))
            .await;
        let pairs = paced_bare(server, &loaded, BareLock::Redisson, turn);
        redisson.run(server, turn, pairs).await;
        let pairs = paced_bare(server, &loaded, BareLock::SetNx, turn);
        set_nx.run(server, turn, pairs).await;
    }
    let names = [
        "lock (redis, scripts)",
        "lock (redis, functions)",
        "Redisson's scripts (redis-rs)",
        "SET NX PX + compare-and-delete (redis-rs)",
    ];
    names
        .into_iter()
        .zip(&tallies)
        .map(|(name, tally)| (name.to_owned(), tally.figures()))
        .collect()
}

/// Pairs per second of our client at the fixed rate.
async fn paced_locks(locks: &Locks, duration: Duration) -> f64 {
    paced_pairs(duration, |task| {
        let mutex = locks.mutex(&format!("bench:paced:{task}"));
        async move {
            let guard = mutex.lock().await.map_err(|e| e.to_string())?;
            guard.unlock().await.map_err(|e| e.to_string())?;
            Ok(true)
        }
    })
    .await
}

/// Pairs per second of a bare redis-rs client sending `lock` at the fixed rate.
async fn paced_bare(
    server: &RedisServer,
    loaded: &Arc<Loaded>,
    lock: BareLock,
    duration: Duration,
) -> f64 {
    let connection = bare::redis_connection(server).await;
    paced_pairs(duration, |task| {
        let mut connection = connection.clone();
        let loaded = Arc::clone(loaded);
        async move {
            let name = format!("bench:paced-bare:{task}");
            bare::send_pair(&mut connection, lock, &loaded, &name).await
        }
    })
    .await
}

/// Runs [`TASKS`] tasks, each starting one pair (`pair(task)`) per [`PERIOD`] and
/// awaiting it, for `duration`; pairs per second, or 0 when a pair failed.
async fn paced_pairs<F, Fut>(duration: Duration, pair: F) -> f64
where
    F: Fn(u32) -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let deadline = Instant::now() + duration;
    let each = (0..TASKS).map(|task| {
        let pair = &pair;
        async move {
            let mut ticks = tokio::time::interval(PERIOD);
            ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
            let mut done = 0u64;
            while Instant::now() < deadline {
                ticks.tick().await;
                if !pair(task).await? {
                    return Err("a pair was not granted and released".to_owned());
                }
                done += 1;
            }
            Ok::<u64, String>(done)
        }
    });
    match futures_util::future::try_join_all(each).await {
        Ok(done) => done.iter().sum::<u64>() as f64 / duration.as_secs_f64(),
        Err(err) => {
            eprintln!("lock-bench: a paced pair failed: {err}");
            0.0
        }
    }
}
