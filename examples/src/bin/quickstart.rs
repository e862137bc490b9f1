//! The smallest useful program: take a lock, work under it, release it.
//!
//! ```text
//! cargo run -p lock-examples --bin quickstart -- redis://127.0.0.1:6379
//! ```
//! Without a URL it uses the in-memory backend.

use std::time::Duration;

#[tokio::main]
async fn main() -> Result<(), distlock::Error> {
    let locks = match std::env::args().nth(1) {
        Some(url) => distlock::redis::connect(&url).await?,
        None => {
            println!("no Redis URL given: using the in-memory backend");
            distlock::memory::locks()
        }
    };

    let order = locks.mutex("order:42");
    let guard = order.lock().await?;
    println!("holding {} as {}", guard.name(), guard.owner());

    // Race the work against the loss of the lock: a lease that could not be renewed
    // must stop the work, not let it continue unprotected.
    tokio::select! {
        () = tokio::time::sleep(Duration::from_millis(200)) => println!("work done"),
        err = guard.lost() => return Err(err),
    }
    guard.unlock().await?;

    // A bounded wait with an explicit lease (no watchdog): `None` if it stays busy.
    match order
        .try_lock_for(Duration::from_secs(1), Some(Duration::from_secs(5)))
        .await?
    {
        Some(guard) => {
            println!("got it again, valid for {:?}", guard.valid_for());
            guard.unlock().await?;
        }
        None => println!("still busy after 1 s"),
    }
    // Releases run in background tasks (a dropped guard's always does): let them finish
    // before the runtime stops, or a lock stays held until its lease ends.
    locks.shutdown().await;
    Ok(())
}
