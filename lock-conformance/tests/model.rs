//! Model-based test: random sequences of lock operations give the same observable results
//! on the in-memory backend (the reference model), on Redis and on PostgreSQL.
//!
//! Each case draws operations (acquire, release, inspect, force-release) for a few owners
//! on a few names, across the mutex, fair and read-write kinds, from a seeded generator,
//! applies each to both backends and compares what they answer. Leases are long, so
//! nothing expires during a case and only logic, not timing, is compared. A failure
//! prints the seed and the operations so far.

use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{Acquire, Release};
use lock_core::memory::MemoryBackend;
use lock_core::{AcquireRequest, Backend, LockKind, LockName, LockRef, Owner, RequestId};
use lock_testkit::{PostgresServer, RedisServer};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// One of `items`, drawn from the case's seeded generator (reproducible from the seed
/// printed on failure).
fn pick<T: Copy>(rng: &mut ChaCha8Rng, items: &[T]) -> T {
    items[rng.random_range(0..items.len())]
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire,
    Release,
    Inspect,
    ForceRelease,
}

/// What a backend answered, without timings.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Acquired(u32),
    Busy,
    Released,
    StillHeld(u32),
    NotHeld,
    State(bool, u32),
    Forced(bool),
    Error(lock_core::ErrorKind),
}

/// Applies `op` to `lock` on `backend`: an acquisition under the id `grant`, or the
/// release of grant `grant`.
async fn apply(backend: &dyn Backend, op: Op, lock: &LockRef, grant: RequestId) -> Seen {
    let lease = Duration::from_secs(60);
    let result = match op {
        Op::Acquire => {
            let mut request = AcquireRequest::new(lease);
            request.id = grant;
            backend.acquire(lock, request).await
        }
        .map(|reply| match reply {
            Acquire::Acquired { holds, .. } => Seen::Acquired(holds),
            _ => Seen::Busy,
        }),
        Op::Release => backend
            .release(lock, lock_core::ReleaseRequest::new(lease, grant))
            .await
            .map(|reply| match reply {
                Release::Released => Seen::Released,
                Release::StillHeld { holds } => Seen::StillHeld(holds),
                _ => Seen::NotHeld,
            }),
        Op::Inspect => backend
            .inspect(lock)
            .await
            .map(|state| Seen::State(state.locked, state.holds)),
        Op::ForceRelease => backend.force_release(lock).await.map(Seen::Forced),
    };
    result.unwrap_or_else(|err| Seen::Error(err.kind()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_store_agrees_with_the_memory_model_on_random_operation_sequences() {
    let (redis_server, postgres_server) =
        tokio::join!(RedisServer::start(), PostgresServer::start());
    let postgres = lock_postgres::Connector::new(postgres_server.url())
        .connect()
        .await
        .unwrap();
    let under_test: [(&str, Arc<dyn Backend>); 2] = [
        (
            "Redis",
            lock_redis::connect_backend(&redis_server.url())
                .await
                .unwrap(),
        ),
        ("PostgreSQL", Arc::new(postgres)),
    ];
    let kinds = [
        LockKind::Mutex,
        LockKind::Fair,
        LockKind::Read,
        LockKind::Write,
    ];
    let ops = [
        Op::Acquire,
        Op::Acquire,
        Op::Acquire,
        Op::Release,
        Op::Release,
        Op::Inspect,
        Op::ForceRelease,
    ];
    let owners = ["a", "b", "c"];
    for case in 0..40u64 {
        let seed = 0x5EED_0000 + case;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let memory: Arc<dyn Backend> = Arc::new(MemoryBackend::new());
        let mut history = Vec::new();
        // Every acquisition's id, by the hold it asked for (a mutex and a fair lock of
        // one owner are one hold): a release names one of them, or a grant never made.
        let mut grants: Vec<(String, RequestId)> = Vec::new();
        for step in 0..60 {
            // Mutex and fair locks share a key, as read and write do: keep the two
            // families on different names, as an application would.
            let family = rng.random_range(0..2u64);
            let kind = if family == 0 {
                pick(&mut rng, &kinds[..2])
            } else {
                pick(&mut rng, &kinds[2..])
            };
            let name = format!("model:{case}:{family}:{}", rng.random_range(0..2u64));
            let lock = LockRef::new(
                kind,
                LockName::new(&name).unwrap(),
                Owner::new("model", pick(&mut rng, &owners)),
            );
            let op = pick(&mut rng, &ops);
            let stored = match kind {
                LockKind::Fair => LockKind::Mutex,
                kind => kind,
            };
            let hold = format!("{stored:?} {name} {}", lock.owner);
            let grant = match op {
                Op::Release => {
                    let made: Vec<RequestId> = grants
                        .iter()
                        .filter(|(of, _)| *of == hold)
                        .map(|(_, id)| *id)
                        .collect();
                    if made.is_empty() || rng.random_ratio(1, 8) {
                        RequestId::random()
                    } else {
                        pick(&mut rng, &made)
                    }
                }
                _ => RequestId::random(),
            };
            let expected = apply(&*memory, op, &lock, grant).await;
            if matches!(op, Op::Acquire) {
                grants.push((hold, grant));
            }
            history.push(format!(
                "{step}: {op:?} {kind:?} {name} {} {grant}",
                lock.owner
            ));
            for (store, backend) in &under_test {
                let actual = apply(&**backend, op, &lock, grant).await;
                assert_eq!(
                    actual,
                    expected,
                    "seed {seed:#x}: {store} and the model disagree after\n{}",
                    history.join("\n")
                );
            }
        }
    }
}
