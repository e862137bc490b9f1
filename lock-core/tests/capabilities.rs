//! A backend's declared capabilities bound what lock-core asks of it: what is not
//! declared is refused with a typed error before anything is sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Acquire, LockState, Release, Renewal};
use lock_core::memory::MemoryBackend;
use lock_core::notify::Listener;
use lock_core::{
    AcquireRequest, Backend, Capabilities, Error, ErrorKind, HoldModel, LockRef, Locks,
    ReleaseRequest,
};

/// The memory backend declaring the mutex only, counting the requests it receives.
#[derive(Debug, Default)]
struct MutexOnly {
    store: MemoryBackend,
    requests: AtomicUsize,
}

impl MutexOnly {
    fn sent(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    fn count(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait]
impl Backend for MutexOnly {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(HoldModel::Lease)
    }

    async fn acquire(&self, lock: &LockRef, request: AcquireRequest) -> Result<Acquire, Error> {
        self.count();
        self.store.acquire(lock, request).await
    }

    async fn release(&self, lock: &LockRef, request: ReleaseRequest) -> Result<Release, Error> {
        self.count();
        self.store.release(lock, request).await
    }

    async fn renew(&self, locks: &[LockRef], lease: Duration) -> Vec<Renewal> {
        self.count();
        self.store.renew(locks, lease).await
    }

    async fn inspect(&self, lock: &LockRef) -> Result<LockState, Error> {
        self.count();
        self.store.inspect(lock).await
    }

    async fn force_release(&self, lock: &LockRef) -> Result<bool, Error> {
        self.count();
        self.store.force_release(lock).await
    }

    async fn listen(&self, lock: &LockRef) -> Result<Listener, Error> {
        self.store.listen(lock).await
    }
}

#[tokio::test]
async fn undeclared_lock_kinds_are_refused_before_anything_is_sent() {
    let backend = Arc::new(MutexOnly::default());
    let locks = Locks::new(backend.clone());
    let fair = locks.fair_mutex("caps:fair").lock().await;
    assert_eq!(
        fair.expect_err("no fair locks").kind(),
        ErrorKind::Unsupported
    );
    let read = locks.rw_lock("caps:rw").reader().try_lock().await;
    assert_eq!(
        read.expect_err("no read-write locks").kind(),
        ErrorKind::Unsupported
    );
    let write = locks.rw_lock("caps:rw").writer().lock().await;
    assert_eq!(
        write.expect_err("no read-write locks").kind(),
        ErrorKind::Unsupported
    );
    let inspected = locks.fair_mutex("caps:fair").is_locked().await;
    assert_eq!(
        inspected.expect_err("no fair locks").kind(),
        ErrorKind::Unsupported
    );
    let forced = locks.rw_lock("caps:rw").writer().force_unlock().await;
    assert_eq!(
        forced.expect_err("no read-write locks").kind(),
        ErrorKind::Unsupported
    );
    assert_eq!(backend.sent(), 0, "a refused kind reached the backend");
    // The declared kind works.
    let guard = locks.mutex("caps:mutex").lock().await.expect("a mutex");
    guard.unlock().await.expect("released");
    assert_eq!(backend.sent(), 2);
}

#[tokio::test]
async fn fencing_on_a_backend_without_it_is_a_configuration_error() {
    let err = Locks::builder(Arc::new(MutexOnly::default()))
        .fencing(true)
        .build()
        .expect_err("the backend issues no tokens");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let lock = LockRef::new(
        lock_core::LockKind::Mutex,
        lock_core::LockName::new("caps:fence").expect("a valid name"),
        lock_core::Owner::new("client", "holder"),
    );
    let raised = MutexOnly::default().raise_fencing(&lock, 7).await;
    assert_eq!(
        raised.expect_err("the default refuses").kind(),
        ErrorKind::Unsupported
    );
}

#[test]
fn composite_capabilities_are_what_every_part_has() {
    let full = Capabilities::new(HoldModel::Session)
        .fair(true)
        .read_write(true)
        .fencing(true)
        .retry_safe(true);
    let lease_mutex = Capabilities::new(HoldModel::Lease).fencing(true);
    let common = Capabilities::common([full, lease_mutex]);
    assert!(!common.fair && !common.read_write && common.fencing && !common.retry_safe);
    assert_eq!(
        common.holds,
        HoldModel::Lease,
        "one lease-based part makes leases"
    );
    assert_eq!(Capabilities::common([full]), full);
}
