//! A try (no time to wait) on a semaphore answers at once, even while other waiters of
//! the same client stand in its line: a client's semaphore waiters ask the store one at
//! a time, and a try that stood in that line waited for every waiter ahead, however
//! long (found by `#[distributed_lock(kind = semaphore, wait = "0s")]`, which hung
//! behind calls waiting for permits).

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_core::memory::MemoryBackend;
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_answers_at_once_beside_waiting_waiters() {
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let plain = locks.semaphore("tries:plain");
    plain.add_permits(1).await.expect("permits set");
    let expirable = locks.expirable_semaphore("tries:expirable");
    expirable.add_permits(1).await.expect("permits set");
    let held = (
        plain.acquire(1).await.expect("the permit"),
        expirable.acquire(1).await.expect("the permit"),
    );
    // A waiter of this client for each: it stands at the head of the client's line.
    let waiting = (
        tokio::spawn({
            let plain = plain.clone();
            async move { plain.acquire(1).await.map(drop) }
        }),
        tokio::spawn({
            let expirable = expirable.clone();
            async move { expirable.acquire(1).await.map(drop) }
        }),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let tried = timeout(Duration::from_secs(2), plain.try_acquire(1))
        .await
        .expect("a try on the plain semaphore answers at once");
    assert!(tried.expect("no error").is_none(), "no permit is free");
    let tried = timeout(Duration::from_secs(2), expirable.try_acquire(1))
        .await
        .expect("a try on the expirable semaphore answers at once");
    assert!(tried.expect("no error").is_none(), "no permit is free");
    drop(held);
    for waiter in [waiting.0, waiting.1] {
        timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is served once the permit is back")
            .expect("the task ran")
            .expect("served");
    }
}
