//! Many waiters on one client, and held locks: memory per waiter and per hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use distlock::Locks;
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep};

use super::{Figures, Results, Scale, figures, ours, percentile, sorted};

/// Many tasks waiting on 100 names in one process.
pub(crate) async fn waiters(server: &RedisServer, scale: Scale) -> Results {
    let names = 100;
    let holder = ours(server).await;
    let locks = ours(server).await;
    let mut held = Vec::new();
    for n in 0..names {
        held.push(
            holder
                .mutex(&format!("bench:wt:{n}"))
                .lock()
                .await
                .expect("lock"),
        );
    }
    let before = crate::alloc::live_bytes();
    let done = Arc::new(AtomicU64::new(0));
    let go = Arc::new(AtomicBool::new(true));
    let mut tasks = Vec::with_capacity(scale.waiters);
    for i in 0..scale.waiters {
        let (locks, done, go) = (locks.clone(), Arc::clone(&done), Arc::clone(&go));
        tasks.push(tokio::spawn(async move {
            let mutex = locks.mutex(&format!("bench:wt:{}", i % names));
            if let Ok(guard) = mutex.lock().await {
                let _ = guard.unlock().await;
                if go.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    // Let every waiter subscribe and settle.
    let settle_until = Instant::now() + Duration::from_secs(30);
    loop {
        let channels: Vec<String> = server
            .command(&["PUBSUB", "CHANNELS", "redisson_lock__channel:{*"])
            .await;
        if channels.len() >= names || Instant::now() > settle_until {
            break;
        }
        sleep(Duration::from_millis(100)).await;
    }
    sleep(Duration::from_millis(500)).await;
    let after = crate::alloc::live_bytes();
    let mut numsub_args = vec!["PUBSUB".to_owned(), "NUMSUB".to_owned()];
    numsub_args.extend((0..names).map(|n| format!("redisson_lock__channel:{{bench:wt:{n}}}")));
    let refs: Vec<&str> = numsub_args.iter().map(String::as_str).collect();
    let numsub: Vec<redis::Value> = server.command(&refs).await;
    let counts: Vec<i64> = numsub
        .chunks(2)
        .filter_map(|pair| match pair.get(1) {
            Some(redis::Value::Int(n)) => Some(*n),
            _ => None,
        })
        .collect();
    let max_subscriptions = counts.iter().copied().max().unwrap_or(0);
    let started = Instant::now();
    for guard in held {
        let _ = guard.unlock().await;
    }
    for task in tasks {
        let _ = task.await;
    }
    let drain = started.elapsed().as_secs_f64();
    let mut results = Results::new();
    results.insert(
        "lock (redis)".into(),
        figures(&[
            ("waiters", scale.waiters as f64),
            (
                "bytes_per_waiter",
                (after - before).max(0.0) / scale.waiters as f64,
            ),
            ("max_subscriptions_per_name", max_subscriptions as f64),
            (
                "all_acquired",
                if done.load(Ordering::Relaxed) as usize == scale.waiters {
                    1.0
                } else {
                    0.0
                },
            ),
            ("drain_seconds", drain),
        ]),
    );
    results.insert("lock (redis) held".into(), held_memory(&locks).await);
    results
}

/// How many rounds of [`HELD`] holds [`held_memory`] takes (the first one unmeasured).
const HELD_ROUNDS: usize = 8;

/// How many locks [`held_memory`] holds at once.
const HELD: usize = 1_000;

/// Heap bytes per held lock (one client holding [`HELD`] locks on distinct names), what
/// is left of them once released, and the size of a `lock()` future.
async fn held_memory(locks: &Locks) -> Figures {
    let future_bytes = {
        let mutex = locks.mutex("bench:m:future");
        let pending = mutex.lock();
        std::mem::size_of_val(&pending)
    };
    let mutexes: Vec<_> = (0..HELD)
        .map(|i| locks.mutex(&format!("bench:m:{i}")))
        .collect();
    // A first round grows the client's tables to their working size, so that the
    // measured rounds count what each hold costs, not one-time growth. The count covers
    // the whole process, where a connection's buffer of about 1.4 kB comes and goes at
    // its own pace: bytes left are taken over all measured rounds (a hold that kept
    // memory would add it every round), bytes held are the median round's.
    let mut held = Vec::new();
    let mut first_before = None;
    let mut last_after = 0.0;
    for round in 0..HELD_ROUNDS {
        let before = crate::alloc::live_bytes();
        let mut guards = Vec::with_capacity(HELD);
        for mutex in &mutexes {
            guards.push(mutex.lock().await.expect("lock"));
        }
        let holding = crate::alloc::live_bytes();
        for guard in guards {
            if let Err(err) = guard.unlock().await {
                eprintln!("lock-bench: unlock: {err}");
            }
        }
        last_after = crate::alloc::live_bytes();
        if round > 0 {
            // The guards' vector is counted in neither figure.
            let vector = (HELD * std::mem::size_of::<distlock::Guard>()) as f64;
            held.push((holding - before - vector) / HELD as f64);
            first_before.get_or_insert(before);
        }
    }
    let released_holds = ((HELD_ROUNDS - 1) * HELD) as f64;
    let left = (last_after - first_before.unwrap_or(last_after)) / released_holds;
    figures(&[
        ("lock_future_bytes", future_bytes as f64),
        ("bytes_per_held_lock", percentile(&sorted(held), 0.5)),
        ("bytes_left_per_released_hold", left),
    ])
}
