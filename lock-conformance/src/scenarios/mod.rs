//! The scenarios. Each takes a fixture and panics (with a message saying what broke) when
//! the backend misbehaves. Timing checks use short leases and generous bounds.

use crate::timing::{ms, secs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{Error, ErrorKind};

use crate::faulty::FaultyBackend;
use tokio::time::{Instant, sleep, timeout};

mod exclusion;
mod leases;
mod server;
mod waiting;

pub use exclusion::*;
pub use leases::*;
pub use server::*;
pub use waiting::*;

/// A unique lock name per call, so scenarios never collide on a shared store.
pub(crate) fn unique(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "conformance:{prefix}:{}:{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The lease of the scenarios that check the watchdog keeps a hold: it renews every
/// third of it, so a hold is lost only when the machine stalls a renewal for two
/// thirds of it. At 300 ms a PostgreSQL renewal on a loaded two-core machine once took
/// longer than that (a stall of 200 ms lost a write hold).
pub(crate) fn watchdog_lease() -> Duration {
    crate::timing::ms(900)
}

/// Polls `check` every 10 ms until it is true or `within` passes.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        sleep(ms(10)).await;
    }
}

/// Waits until `check` holds, and fails the test with `what` if it does not within
/// `within`.
pub(crate) async fn wait_until<F, Fut>(within: Duration, what: &str, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    assert!(eventually(within, check).await, "{what}");
}

/// A client of its own whose lock acquisitions are counted, and the counter: a scenario
/// waits for its waiter with [`FaultyBackend::listening`] instead of a pause.
pub(crate) async fn counted_client(fx: &dyn crate::Fixture) -> (lock_core::Locks, FaultyBackend) {
    let counted = FaultyBackend::new(fx.backend().await);
    (
        lock_core::Locks::new(std::sync::Arc::new(counted.clone())),
        counted,
    )
}

/// The kind of the error `r` must be.
/// A task that waits for `lock`, lets go at once and returns when it got it.
pub(crate) fn spawn_waiter(lock: lock_core::Lock) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let at = Instant::now();
        guard.unlock().await.unwrap();
        at
    })
}

/// Releases `held` and returns how long after the release `waiter` got the lock; the
/// waiter must be served within `bound`.
pub(crate) async fn handover_gap(
    held: lock_core::Guard,
    waiter: tokio::task::JoinHandle<Instant>,
    bound: Duration,
) -> Duration {
    let released = Instant::now();
    held.unlock().await.unwrap();
    let acquired = timeout(bound, waiter)
        .await
        .expect("the waiter was served")
        .unwrap();
    acquired.saturating_duration_since(released)
}

/// A task that tries `lock` for up to `wait`.
pub(crate) type TryWaiter =
    tokio::task::JoinHandle<Result<Option<lock_core::Guard>, lock_core::Error>>;

/// Starts a task that tries `lock` for up to `wait`.
pub(crate) fn spawn_try_waiter(lock: lock_core::Lock, wait: Duration) -> TryWaiter {
    tokio::spawn(async move { lock.try_lock_for(wait, None).await })
}

/// Waits up to `bound` for `waiter` to get its lock (`what` says what failed when it
/// does not), then releases it.
pub(crate) async fn served_then_released(waiter: TryWaiter, bound: Duration, what: &str) {
    let guard = timeout(bound, waiter)
        .await
        .unwrap_or_else(|_| panic!("{what}"))
        .unwrap()
        .unwrap()
        .expect("the lock was free");
    guard.unlock().await.unwrap();
}

/// Waits for every waiter task to be served, 10 s at most each.
pub(crate) async fn all_served(waiters: Vec<tokio::task::JoinHandle<()>>) {
    for waiter in waiters {
        timeout(secs(10), waiter)
            .await
            .expect("every waiter is served")
            .unwrap();
    }
}

pub(crate) fn kind<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorKind {
    r.expect_err("the call must fail").kind()
}
