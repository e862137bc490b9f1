//! A waiter handed the lock holds from the notice and takes the hold up later, once a
//! third of the handed lease has gone: a hold released before then costs the store no
//! take-up, and one kept longer is taken up in time.

#![cfg(feature = "faults")]
// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

mod counting;

use std::sync::Arc;
use std::time::Duration;

use lock_core::Locks;
use lock_core::memory::MemoryBackend;
use tokio::time::sleep;

use counting::{CountingAcquires, counted};
use lock_core::faults::FaultLayer;

/// A holder's client and a waiter's, whose acquire requests are counted, on one store;
/// the waiter is handed `name` and the count of its requests then is returned with its
/// guard.
async fn handed(name: &str) -> (FaultLayer<CountingAcquires>, lock_core::Guard, usize) {
    let store: Arc<MemoryBackend> = Arc::new(MemoryBackend::new());
    let holder = Locks::new(store.clone());
    let (waiting, counted) = counted(&store);
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let name = name.to_owned();
        async move { waiting.mutex(&name).lock().await }
    });
    sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let asked = counted.count();
    (counted, guard, asked)
}

// Would fail if the take-up were sent at once (a third request).
#[tokio::test(start_paused = true)]
async fn a_handed_hold_released_before_its_take_up_is_due_costs_no_take_up() {
    let (counted, guard, asked) = handed("released-soon").await;
    assert_eq!(asked, 2, "a try, and an attempt listening");
    guard.unlock().await.unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counted.count(), 2, "no take-up was sent");
}

// Would fail if a take-up were never sent (the count), or came too late for the handed
// lease (the place, 5 s by default: the guard would be lost).
#[tokio::test(start_paused = true)]
async fn a_handed_hold_kept_past_its_due_time_is_taken_up() {
    let (counted, guard, asked) = handed("kept").await;
    sleep(Duration::from_millis(500)).await;
    assert_eq!(counted.count(), asked, "not due yet");
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counted.count(), asked + 1, "taken up");
    sleep(Duration::from_secs(10)).await;
    assert!(guard.is_held(), "held past the handed lease");
    guard.unlock().await.unwrap();
}
