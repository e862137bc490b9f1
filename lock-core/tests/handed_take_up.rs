//! A waiter handed the lock holds from the notice and takes the hold up later, once a
//! third of the handed lease has gone: a hold released before then costs the store no
//! take-up, and one kept longer is taken up in time.

#![cfg(feature = "faults")]
// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::Locks;
use lock_core::faults::{Fate, FateSource, FaultLayer, Operation};
use lock_core::memory::MemoryBackend;
use tokio::time::sleep;

/// Counts the acquire requests a client sends, and lets them all through.
#[derive(Debug, Default)]
struct CountingAcquires(AtomicUsize);

impl FateSource for CountingAcquires {
    fn fate(&self, operation: Operation) -> Fate {
        if operation == Operation::Acquire {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Fate::none()
    }
}

/// A holder's client and a waiter's, whose acquire requests are counted, on one store;
/// the waiter is handed `name` and the count of its requests then is returned with its
/// guard.
async fn handed(name: &str) -> (FaultLayer<CountingAcquires>, lock_core::Guard, usize) {
    let store: Arc<MemoryBackend> = Arc::new(MemoryBackend::new());
    let holder = Locks::new(store.clone());
    let counted = FaultLayer::<CountingAcquires>::new(store);
    let waiting = Locks::new(Arc::new(counted.clone()));
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = tokio::spawn({
        let name = name.to_owned();
        async move { waiting.mutex(&name).lock().await }
    });
    sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let guard = waiter.await.unwrap().unwrap();
    let asked = counted.0.load(Ordering::SeqCst);
    (counted, guard, asked)
}

// Would fail if the take-up were sent at once (a third request).
#[tokio::test(start_paused = true)]
async fn a_handed_hold_released_before_its_take_up_is_due_costs_no_take_up() {
    let (counted, guard, asked) = handed("released-soon").await;
    assert_eq!(asked, 2, "a try, and an attempt listening");
    guard.unlock().await.unwrap();
    sleep(Duration::from_secs(10)).await;
    assert_eq!(counted.0.load(Ordering::SeqCst), 2, "no take-up was sent");
}

// Would fail if a take-up were never sent (the count), or came too late for the handed
// lease (the place, 5 s by default: the guard would be lost).
#[tokio::test(start_paused = true)]
async fn a_handed_hold_kept_past_its_due_time_is_taken_up() {
    let (counted, guard, asked) = handed("kept").await;
    sleep(Duration::from_millis(500)).await;
    assert_eq!(counted.0.load(Ordering::SeqCst), asked, "not due yet");
    sleep(Duration::from_secs(2)).await;
    assert_eq!(counted.0.load(Ordering::SeqCst), asked + 1, "taken up");
    sleep(Duration::from_secs(10)).await;
    assert!(guard.is_held(), "held past the handed lease");
    guard.unlock().await.unwrap();
}
