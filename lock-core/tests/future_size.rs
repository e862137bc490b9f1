//! A waiting `lock()` future is most of what each of thousands of waiters costs (the
//! bench counts bytes per waiter): this keeps it from growing back. It was 512 bytes
//! while each layer of the acquisition was an `async fn` keeping its own copy of its
//! arguments, and is 248 since they are plain functions around one async block.

use std::sync::Arc;

use lock_core::Locks;
use lock_core::memory::MemoryBackend;

/// Room for small changes, none for another nested layer.
const MOST_BYTES: usize = 320;

#[test]
fn a_lock_future_stays_small() {
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let mutex = locks.mutex("future-size");
    let pending = mutex.lock();
    let size = std::mem::size_of_val(&pending);
    drop(pending);
    assert!(
        size <= MOST_BYTES,
        "the lock() future grew to {size} bytes (at most {MOST_BYTES})"
    );
}
