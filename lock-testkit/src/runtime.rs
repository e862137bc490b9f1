//! Work done in a runtime of its own that then shuts down: how a test makes clients whose
//! background tasks died with the runtime that started them.

use std::future::Future;
use std::time::Duration;

/// Runs `work` to its end in a new runtime on a thread of its own, shuts that runtime
/// down (its tasks die with it) and returns what `work` gave.
///
/// # Panics
///
/// If the runtime cannot be built, or `work` panics.
pub fn in_a_runtime_that_stops<F>(work: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                let output = runtime.block_on(work);
                runtime.shutdown_timeout(Duration::from_secs(1));
                output
            })
            .join()
            .expect("the runtime's thread")
    })
}
