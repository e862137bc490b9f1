//! Acquire futures dropped at every point of their life never leave a hold behind:
//! thousands of acquisitions of a free lock are cancelled after 0 to 49 microseconds, on
//! a multi-threaded runtime, and after each the lock must be free again at once. (The
//! narrowest of these races, review #6, has a deterministic test in `acquire.rs`.)

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_core::memory::MemoryBackend;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_racing_a_dropped_acquire_is_released() {
    let store = MemoryBackend::new();
    let locks = Locks::new(Arc::new(store.clone()));
    let lock = locks.mutex("cancel-race");
    for round in 0..3000u32 {
        let cancel_after = Duration::from_micros(u64::from(round % 50));
        if let Ok(Ok(guard)) = tokio::time::timeout(cancel_after, lock.lock()).await {
            guard.unlock().await.expect("unlock");
        }
        let mut freed = false;
        for _ in 0..50 {
            if store.held_locks().is_empty() {
                freed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(
            freed,
            "round {round}: a cancelled acquire left a hold behind"
        );
    }
}
