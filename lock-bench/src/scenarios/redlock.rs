//! RedLock over five nodes: latency beside rslock and the bare quorum exchange.

use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::time::Instant;

use super::handoff::bare_connection;
use super::{Results, Scale, TURNS, p50_p99, peer};
use crate::bare::{Pair, evalsha};

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
    async fn quorum(&self, sha: &str, keys: &[&str], args: &[&str]) -> usize {
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
            let granted = self.quorum(acquire, &keys, &args).await;
            let (keys, args) = pair.release_call();
            let released = self.quorum(release, &keys, &args).await;
            if granted >= majority && released >= majority {
                samples.push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
        samples
    }
}

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
