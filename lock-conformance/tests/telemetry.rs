//! Telemetry people can act on. The gauges follow what waits and what is held: up while
//! a waiter waits or a guard holds permits, back down when it ends, also when its future
//! is dropped. `debug` events tell an acquisition, a hand-off and a release. Each test
//! runs on a current-thread runtime with this thread's recorder or collector, which
//! every task of the client runs under.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_conformance::logs::Logs;
use lock_core::Locks;
use lock_core::memory::MemoryBackend;
use metrics::{
    Counter, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// A gauge's value, as the bits of an `f64`.
#[derive(Debug, Default)]
struct Value(AtomicU64);

impl GaugeFn for Value {
    fn increment(&self, value: f64) {
        self.add(value);
    }
    fn decrement(&self, value: f64) {
        self.add(-value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::SeqCst);
    }
}

impl Value {
    fn add(&self, delta: f64) {
        let mut old = self.0.load(Ordering::SeqCst);
        loop {
            let new = (f64::from_bits(old) + delta).to_bits();
            match self
                .0
                .compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => return,
                Err(now) => old = now,
            }
        }
    }
}

/// Keeps every gauge's value by key, `name{label=value}`.
#[derive(Default)]
struct Gauges(Mutex<HashMap<String, Arc<Value>>>);

impl Gauges {
    /// The gauge's value: a count, so a whole number.
    fn get(&self, key: &str) -> String {
        let gauges = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let value = gauges
            .get(key)
            .map_or(0.0, |value| f64::from_bits(value.0.load(Ordering::SeqCst)));
        format!("{value:.0}")
    }
}

impl Recorder for Gauges {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        let labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        let name = format!("{}{{{}}}", key.name(), labels.join(","));
        let mut gauges = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Gauge::from_arc(Arc::clone(gauges.entry(name).or_default()))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

async fn settle() {
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[tokio::test]
async fn waiter_and_permit_gauges_go_up_and_back_down() {
    let gauges = Gauges::default();
    let _recording = metrics::set_default_local_recorder(&gauges);
    let locks = Locks::new(Arc::new(MemoryBackend::new()));

    let held = locks.mutex("gauges:m").lock().await.unwrap();
    assert_eq!(gauges.get("lock_held{kind=mutex}"), "1");
    let mutex = locks.mutex("gauges:m");
    let waiter = tokio::spawn(async move { mutex.acquire().wait(Duration::from_secs(30)).await });
    settle().await;
    assert_eq!(gauges.get("lock_waiters{kind=mutex}"), "1");
    waiter.abort();
    settle().await;
    assert_eq!(
        gauges.get("lock_waiters{kind=mutex}"),
        "0",
        "a dropped wait"
    );
    held.unlock().await.unwrap();
    assert_eq!(gauges.get("lock_held{kind=mutex}"), "0");

    let semaphore = locks.semaphore("gauges:s");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    let two = semaphore.acquire(2).await.unwrap();
    assert_eq!(gauges.get("semaphore_permits_held{kind=plain}"), "2");
    let waiting = locks.semaphore("gauges:s");
    let waiter = tokio::spawn(async move { waiting.acquire(1).await });
    settle().await;
    assert_eq!(gauges.get("semaphore_waiters{kind=plain}"), "1");
    two.release().await.unwrap();
    let one = waiter.await.unwrap().unwrap();
    assert_eq!(gauges.get("semaphore_waiters{kind=plain}"), "0");
    assert_eq!(gauges.get("semaphore_permits_held{kind=plain}"), "1");
    drop(one);
    assert_eq!(gauges.get("semaphore_permits_held{kind=plain}"), "0");

    let latch = locks.count_down_latch("gauges:l");
    assert!(latch.try_set_count(1).await.unwrap());
    let waiting = locks.count_down_latch("gauges:l");
    let waiter = tokio::spawn(async move { waiting.wait().await });
    settle().await;
    assert_eq!(gauges.get("latch_waiters{}"), "1");
    latch.count_down().await.unwrap();
    waiter.await.unwrap().unwrap();
    assert_eq!(gauges.get("latch_waiters{}"), "0");
    locks.shutdown().await;
}

#[tokio::test]
async fn acquisitions_hand_offs_and_releases_are_debug_events() {
    let (logs, _collecting) = Logs::capture();
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let held = locks.mutex("events:m").lock().await.unwrap();
    let mutex = locks.mutex("events:m");
    let waiter = tokio::spawn(async move { mutex.lock().await });
    settle().await;
    held.unlock().await.unwrap();
    let next = waiter.await.unwrap().unwrap();
    next.unlock().await.unwrap();
    let debug = |text: &str| logs.matching(tracing::Level::DEBUG, text).len();
    assert_eq!(debug("lock acquired"), 1, "{:?}", logs.all());
    assert!(debug("waiter woken by a release") >= 1, "{:?}", logs.all());
    assert_eq!(debug("lock handed off"), 1, "{:?}", logs.all());
    assert_eq!(debug("lock released"), 2, "{:?}", logs.all());
}
