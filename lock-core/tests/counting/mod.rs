//! A client whose acquire requests are counted, for the tests that count what a waiter
//! asks of its store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lock_core::Locks;
use lock_core::faults::{Fate, FateSource, FaultLayer, Operation};
use lock_core::memory::MemoryBackend;

/// Counts the acquire requests a client sends, and lets them all through.
#[derive(Debug, Default)]
pub(crate) struct CountingAcquires(AtomicUsize);

impl CountingAcquires {
    /// The acquire requests sent so far.
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl FateSource for CountingAcquires {
    fn fate(&self, operation: Operation) -> Fate {
        if operation == Operation::Acquire {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        Fate::none()
    }
}

/// A client of `store` whose acquire requests are counted, and its counter.
pub(crate) fn counted(store: &Arc<MemoryBackend>) -> (Locks, FaultLayer<CountingAcquires>) {
    let layer = FaultLayer::<CountingAcquires>::new(store.clone());
    (Locks::new(Arc::new(layer.clone())), layer)
}
