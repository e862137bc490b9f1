//! A layer overrides only what it changes: everything else goes to the backend it wraps
//! ([`Backend::inner`], [`SemaphoreBackend::below`]); a store that implements a family
//! of operations not at all answers `Unsupported` for every one of them.

// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Acquire, LockState, Release, Renewal, Unsupported};
use lock_core::memory::MemoryBackend;
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, Capabilities, Error, ErrorKind, LatchBackend, LockName, LockRef,
    Locks, PermitAnswer, PermitRequest, ReleaseRequest, SemaphoreBackend,
};

/// Counts the permit requests it passes on; writes the lock operations every backend
/// must, and nothing else.
#[derive(Debug, Default)]
struct CountingPermits {
    store: MemoryBackend,
    permit_requests: AtomicUsize,
}

#[async_trait]
impl Backend for CountingPermits {
    fn capabilities(&self) -> Capabilities {
        self.store.capabilities()
    }

    fn inner(&self) -> Option<&dyn Backend> {
        Some(&self.store)
    }

    fn semaphores(&self) -> &dyn SemaphoreBackend {
        self
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.store.acquire(lock, request).await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        Backend::release(&self.store, lock, request).await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        Backend::renew(&self.store, locks, lease).await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.store.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.store.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        Backend::listen(&self.store, lock).await
    }
}

#[async_trait]
impl SemaphoreBackend for CountingPermits {
    fn below(&self) -> &dyn SemaphoreBackend {
        self.store.semaphores()
    }

    async fn try_acquire(
        &self,
        name: &LockName,
        request: PermitRequest,
    ) -> Result<PermitAnswer, Error> {
        self.permit_requests.fetch_add(1, Ordering::SeqCst);
        self.store.semaphores().try_acquire(name, request).await
    }
}

#[tokio::test]
async fn a_layer_overrides_one_operation_and_the_wrapped_store_answers_the_rest() {
    let layer = Arc::new(CountingPermits::default());
    let locks = Locks::new(layer.clone());
    // The semaphore's other operations, the latches, introspection and the fencing
    // counter are the store's, reached through the layer's defaults.
    let pool = locks.semaphore("layered:pool");
    assert!(pool.try_set_permits(2).await.unwrap());
    let permits = pool.acquire(2).await.unwrap();
    assert_eq!(pool.available().await.unwrap(), 0);
    permits.release().await.unwrap();
    assert_eq!(pool.available().await.unwrap(), 2);
    assert_eq!(layer.permit_requests.load(Ordering::SeqCst), 1);
    let latch = locks.count_down_latch("layered:latch");
    assert!(latch.try_set_count(1).await.unwrap());
    latch.count_down().await.unwrap();
    assert_eq!(latch.count().await.unwrap(), 0);
    let guard = locks.mutex("layered:lock").lock().await.unwrap();
    let info = locks.describe("layered:lock").await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    guard.unlock().await.unwrap();
    let lock = LockRef::new(
        lock_core::LockKind::Mutex,
        LockName::new("layered:fenced").unwrap(),
        lock_core::Owner::new("layer", "test"),
    );
    layer.raise_fencing(&lock, 41).await.unwrap();
    let fenced = Locks::builder(layer.clone()).fencing(true).build().unwrap();
    let guard = fenced.mutex("layered:fenced").lock().await.unwrap();
    assert_eq!(guard.fencing_token(), Some(42), "raised through the layer");
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn a_family_a_store_does_not_implement_answers_unsupported() {
    let name = LockName::new("nothing").unwrap();
    let latches: &dyn LatchBackend = &Unsupported;
    let semaphores: &dyn SemaphoreBackend = &Unsupported;
    assert_eq!(
        latches.count(&name).await.unwrap_err().kind(),
        ErrorKind::Unsupported
    );
    let taken = semaphores.try_acquire(&name, PermitRequest::new(1, Duration::from_secs(1)));
    assert_eq!(taken.await.unwrap_err().kind(), ErrorKind::Unsupported);
}
