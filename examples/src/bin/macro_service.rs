//! A small "service" whose handlers lock with `#[distributed_lock]`.
//!
//! ```text
//! cargo run -p lock-examples --bin macro_service -- redis://127.0.0.1:6379
//! ```
//! Without a URL it uses the in-memory backend. Several "requests" for the same order run
//! at once; the attribute serialises them per order, and the stock update nested inside
//! re-enters the lock it already holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock::distributed_lock;

#[derive(Debug)]
enum ServiceError {
    Lock(distlock::Error),
    OutOfStock,
}

impl From<distlock::Error> for ServiceError {
    fn from(err: distlock::Error) -> Self {
        Self::Lock(err)
    }
}

static STOCK: AtomicU64 = AtomicU64::new(3);

/// Pays for an order: at most one payment per order at a time, waiting up to 2 s.
#[distributed_lock("order:{order_id}", wait = "2s")]
async fn pay(order_id: u64, request: u32) -> Result<(), ServiceError> {
    // The guard is visible to the body: a lost lease must stop the work.
    let guard = distlock::current_guard().expect("inside the lock");
    println!(
        "request {request}: paying order {order_id} (holding {})",
        guard.name()
    );
    take_stock(order_id).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    Ok(())
}

/// Takes one item; called inside `pay`, so the same lock is re-entered, not awaited.
#[distributed_lock("order:{order_id}")]
async fn take_stock(order_id: u64) -> Result<(), ServiceError> {
    let left = STOCK.load(Ordering::SeqCst);
    if left == 0 {
        return Err(ServiceError::OutOfStock);
    }
    STOCK.store(left - 1, Ordering::SeqCst);
    println!("order {order_id}: {} left", left - 1);
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let locks = match std::env::args().nth(1) {
        Some(url) => distlock::redis::connect(&url).await?,
        None => {
            println!("no Redis URL given: using the in-memory backend");
            distlock::memory::locks()
        }
    };
    distlock::set_default(locks)?;
    let requests = (1..=5).map(|request| tokio::spawn(pay(7, request)));
    for (i, outcome) in futures_join(requests).await.into_iter().enumerate() {
        match outcome {
            Ok(Ok(())) => println!("request {}: paid", i + 1),
            Ok(Err(ServiceError::OutOfStock)) => println!("request {}: out of stock", i + 1),
            Ok(Err(ServiceError::Lock(err))) => println!("request {}: {err}", i + 1),
            Err(panic) => println!("request {}: {panic}", i + 1),
        }
    }
    Ok(())
}

/// Waits for every task, in order.
async fn futures_join<T>(
    tasks: impl Iterator<Item = tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut results = Vec::new();
    for task in tasks {
        results.push(task.await);
    }
    results
}
