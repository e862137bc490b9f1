//! The scenarios. Each returns, per contender, named figures; every figure that matters
//! is compared with a peer or a limit measured in the same run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::time::Instant;

mod handoff;
pub(crate) mod measure;
mod paced;
mod redlock;
mod uncontended;
mod waiters;
mod watchdog;

pub(crate) use handoff::{HandoffOurs, ROUND_PAUSE, handoff};
pub(crate) use paced::paced;
pub(crate) use redlock::redlock;
pub(crate) use uncontended::uncontended;
pub(crate) use waiters::waiters;
pub(crate) use watchdog::watchdog;

/// How many blocks each contender's rounds of a latency scenario are split into, taken
/// in turn: a drift of the machine during the scenario (a neighbour's load, the clock
/// speed) then weighs on every contender alike instead of on whoever ran at the time.
const TURNS: usize = 10;

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
    pairs_per_second_of(duration, |task| {
        let mutex = locks.mutex(&format!("bench:u:{task}"));
        move || {
            let mutex = mutex.clone();
            async move {
                match mutex.lock().await {
                    Ok(guard) => guard.unlock().await.is_ok(),
                    Err(_) => false,
                }
            }
        }
    })
    .await
}

/// Pairs per second of 64 tasks, each on its own key (0 to 63) for `duration`: `task`
/// makes a task's pair for its key, which says whether the pair counts (taken and given
/// back).
pub(crate) async fn pairs_per_second_of<P, F>(duration: Duration, task: impl Fn(u64) -> P) -> f64
where
    P: FnMut() -> F + Send + 'static,
    F: Future<Output = bool> + Send,
{
    let count = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + duration;
    let mut tasks = Vec::new();
    for key in 0..64 {
        let (mut pair, count) = (task(key), Arc::clone(&count));
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                if pair().await {
                    count.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        if let Err(err) = task.await {
            eprintln!("lock-bench: a task of pairs failed: {err}");
        }
    }
    count.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}

pub(crate) fn peer(urls: &[String]) -> rslock::LockManager {
    rslock::LockManager::new(urls.to_vec())
}

/// The p50 and p99 of `samples`, named `<what>_p50` and `<what>_p99`.
pub(crate) fn p50_p99(what: &str, samples: Vec<f64>) -> Figures {
    let samples = sorted(samples);
    figures(&[
        (format!("{what}_p50").as_str(), percentile(&samples, 0.5)),
        (format!("{what}_p99").as_str(), percentile(&samples, 0.99)),
    ])
}
