//! A hand-over wakes the waiter it was handed to, whichever of the listeners has slept
//! longest: the clients of one in-process store share one registry of listeners, so
//! the listener that has waited longest is often another client's waiter, and a waiter
//! that asked again on its hint went to the back of the line of sleepers while keeping
//! its place in the store's.

#![cfg(feature = "faults")]
// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

mod counting;

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_core::backend::DEFAULT_PLACE_KEPT_FOR;
use lock_core::memory::MemoryBackend;
use tokio::time::{Instant, sleep};

use counting::counted;

// Would fail if a hand-over woke the listener asleep longest (the second waiter): the
// first, handed the lock, would sleep on until its next hint (a third of its place, about
// 1.7 s later), and the second would ask for nothing.
#[tokio::test(start_paused = true)]
async fn a_hand_over_wakes_its_waiter_though_another_slept_longer() {
    let store = Arc::new(MemoryBackend::new());
    let holder = Locks::new(store.clone());
    let (first, _) = counted(&store);
    let (second, second_asked) = counted(&store);
    let name = "woken-by-name";
    let hint = DEFAULT_PLACE_KEPT_FOR / 3;
    let held = holder.mutex(name).lock().await.unwrap();
    let first_waits = tokio::spawn(async move { first.mutex(name).lock().await });
    // The second waits behind the first in the store, and sleeps from before the first
    // asks again on its hint (and sleeps again, after the second).
    sleep(hint / 2).await;
    let second_waits = tokio::spawn(async move { second.mutex(name).lock().await });
    sleep(hint * 3 / 4).await;
    let asked_before = second_asked.count();
    let released = Instant::now();
    held.unlock().await.unwrap();
    let guard = first_waits.await.unwrap().unwrap();
    let waited = released.elapsed();
    assert!(
        waited < Duration::from_millis(100),
        "the waiter handed the lock held {waited:?} after the release"
    );
    assert_eq!(
        second_asked.count(),
        asked_before,
        "the other waiter was woken to ask"
    );
    guard.unlock().await.unwrap();
    second_waits.await.unwrap().unwrap().unlock().await.unwrap();
}
