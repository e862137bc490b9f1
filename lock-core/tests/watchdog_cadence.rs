//! The watchdog keeps its cadence on a slow store: a round comes a pause after the one
//! before it began, not after it ended.

#![cfg(feature = "faults")]
// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_core::faults::{Fate, FateSource, FaultLayer, Operation};
use lock_core::memory::MemoryBackend;

/// Every renewal's reply takes `REPLY` to come back.
#[derive(Debug, Default)]
struct SlowRenewals;

const REPLY: Duration = Duration::from_millis(400);

impl FateSource for SlowRenewals {
    fn fate(&self, operation: Operation) -> Fate {
        if operation == Operation::Renew {
            Fate::none().reply_delayed(REPLY)
        } else {
            Fate::none()
        }
    }
}

/// A 900 ms lease renewed every 300 ms, on a store whose renewals answer in 400 ms: a
/// round every pause after the last one ended came 700 ms after the renewal before it,
/// whose answer came 1.1 s after it, past the lease; rounds a pause after the last one
/// began keep every hold. Fails if the pause counts from the end of a round.
#[tokio::test(start_paused = true)]
async fn a_slow_stores_holds_are_renewed_in_time() {
    let store = FaultLayer::<SlowRenewals>::new(Arc::new(MemoryBackend::new()));
    let locks = Locks::new(Arc::new(store));
    let guard = locks
        .mutex("slow-store")
        .acquire()
        .watchdog_lease(Duration::from_millis(900))
        .await
        .unwrap();
    tokio::select! {
        lost = guard.lost() => panic!("the watchdog let the lock go: {lost}"),
        () = tokio::time::sleep(Duration::from_secs(10)) => {}
    }
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
}
