//! A backend written against the facade alone: `distlock::backend` re-exports everything
//! the `Backend` trait needs, so a backend crate depends on `distlock` and nothing else.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use distlock::backend::{
    Acquire, AcquireRequest, Capabilities, HoldModel, LockRef, LockState, Release, ReleaseRequest,
    Renewal, async_trait, notify::Listener,
};
use distlock::memory::MemoryBackend;
use distlock::{Backend, Error, ErrorKind, Locks};

/// A store that counts acquisitions, keeping its state in a memory backend.
#[derive(Debug, Default)]
struct Counting {
    store: MemoryBackend,
    acquisitions: AtomicUsize,
}

#[async_trait]
impl Backend for Counting {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(HoldModel::Lease).read_write(true)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.acquisitions.fetch_add(1, Ordering::SeqCst);
        self.store.acquire(lock, request).await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.store.release(lock, request).await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        self.store.renew(locks, lease).await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.store.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.store.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.store.listen(lock).await
    }
}

#[tokio::test]
async fn a_backend_built_from_the_facade_serves_locks() {
    let backend = Arc::new(Counting::default());
    let locks = Locks::new(backend.clone());
    let guard = locks.mutex("facade").lock().await.expect("the mutex");
    let reading = locks
        .rw_lock("facade:rw")
        .reader()
        .lock()
        .await
        .expect("a read hold");
    assert!(guard.is_held() && reading.is_held());
    guard.unlock().await.expect("released");
    reading.unlock().await.expect("released");
    assert_eq!(backend.acquisitions.load(Ordering::SeqCst), 2);
    let fair = locks.fair_mutex("facade:fair").try_lock().await;
    assert_eq!(
        fair.expect_err("not declared").kind(),
        ErrorKind::Unsupported
    );
}
