//! Compile-time checks: the public types and the futures of the async methods are `Send`
//! (and the types `Sync`), so they can cross `tokio::spawn` and live in shared state.
//! A type or future that loses either stops this file from compiling.

use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use lock_core::backend::{
    Acquire, AcquireRequest, Capabilities, HoldModel, Issue, IssueRequest, LatchRequest, LockKind,
    LockRef, LockState, Owner, PermitAnswer, PermitId, PermitRequest, PermitReservation, Release,
    ReleaseRequest, Renewal, RequestId, ReturnRequest, Unsupported, Waiting,
};
use lock_core::memory::MemoryBackend;
use lock_core::notify::{Listener, ReaderTask, Subscriptions, WeakSubscriptions};
use lock_core::{
    Acquisition, Config, CountDownLatch, Error, ErrorKind, ExpirableSemaphore, Guard, Holder,
    LeasedPermits, Lock, LockName, Locks, LocksBuilder, LostReason, Pauses, PermitAcquisition,
    Permits, RwLock, Semaphore,
};

fn send_sync<T: Send + Sync>() {}

fn send<F: Future + Send>(future: F) -> F {
    future
}

#[test]
fn public_types_are_send_and_sync() {
    // The client and its handles.
    send_sync::<Locks>();
    send_sync::<LocksBuilder>();
    send_sync::<Config>();
    send_sync::<Lock>();
    send_sync::<RwLock>();
    send_sync::<Acquisition<'_>>();
    send_sync::<Guard>();
    send_sync::<Holder>();
    send_sync::<LockName>();
    // The synchronizers and what they hand out.
    send_sync::<Semaphore>();
    send_sync::<Permits>();
    send_sync::<ExpirableSemaphore>();
    send_sync::<PermitAcquisition<'_>>();
    send_sync::<LeasedPermits>();
    send_sync::<CountDownLatch>();
    // Errors.
    send_sync::<Error>();
    send_sync::<ErrorKind>();
    send_sync::<LostReason>();
    // The backend contract and its messages.
    send_sync::<MemoryBackend>();
    send_sync::<Unsupported>();
    send_sync::<Capabilities>();
    send_sync::<HoldModel>();
    send_sync::<LockKind>();
    send_sync::<LockRef>();
    send_sync::<Owner>();
    send_sync::<RequestId>();
    send_sync::<AcquireRequest>();
    send_sync::<Acquire>();
    send_sync::<Waiting>();
    send_sync::<ReleaseRequest>();
    send_sync::<Release>();
    send_sync::<Renewal>();
    send_sync::<LockState>();
    send_sync::<PermitRequest>();
    send_sync::<PermitAnswer>();
    send_sync::<PermitReservation>();
    send_sync::<PermitId>();
    send_sync::<IssueRequest>();
    send_sync::<Issue>();
    send_sync::<ReturnRequest>();
    send_sync::<LatchRequest>();
    send_sync::<Subscriptions>();
    send_sync::<WeakSubscriptions>();
    send_sync::<Listener>();
    send_sync::<ReaderTask>();
    send_sync::<Pauses>();
}

/// Only built, never polled: the futures' types are what is checked.
#[test]
fn async_methods_return_send_futures() {
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let mutex = locks.mutex("auto-traits");
    let rw = locks.rw_lock("auto-traits-rw");
    drop(send(mutex.lock()));
    drop(send(mutex.try_lock()));
    drop(send(mutex.acquire().wait(Duration::ZERO).into_future()));
    drop(send(mutex.try_lock_for(Duration::from_millis(1), None)));
    drop(send(mutex.lock_with_lease(Duration::from_secs(1))));
    drop(send(mutex.is_locked()));
    drop(send(mutex.is_held_by_current()));
    drop(send(mutex.hold_count()));
    drop(send(mutex.remaining_lease()));
    drop(send(mutex.force_unlock()));
    drop(send(rw.reader().lock()));
    drop(send(rw.writer().try_lock()));
    drop(send(locks.shutdown()));
    drop(send(Holder::scope(async {})));

    let semaphore = locks.semaphore("auto-traits-semaphore");
    drop(send(semaphore.try_set_permits(1)));
    drop(send(semaphore.add_permits(1)));
    drop(send(semaphore.available()));
    drop(send(semaphore.drain()));
    drop(send(semaphore.acquire(1)));
    drop(send(semaphore.try_acquire(1)));
    drop(send(semaphore.try_acquire_for(1, Duration::ZERO)));

    let expirable = locks.expirable_semaphore("auto-traits-expirable");
    drop(send(expirable.try_set_permits(1)));
    drop(send(expirable.add_permits(1)));
    drop(send(expirable.available()));
    drop(send(expirable.issued()));
    drop(send(
        expirable.acquire(1).wait(Duration::ZERO).into_future(),
    ));
    drop(send(expirable.try_acquire(1)));
    let id = PermitId::random();
    drop(send(expirable.release(id)));
    drop(send(expirable.update_lease(id, Duration::from_secs(1))));

    let latch = locks.count_down_latch("auto-traits-latch");
    drop(send(latch.try_set_count(1)));
    drop(send(latch.count_down()));
    drop(send(latch.count()));
    drop(send(latch.delete()));
    drop(send(latch.wait()));
    drop(send(latch.wait_for(Duration::ZERO)));
}

#[tokio::test]
async fn what_a_hold_hands_out_returns_send_futures() {
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let guard = locks.mutex("auto-traits-guard").lock().await.expect("lock");
    drop(send(guard.lost()));
    send(guard.unlock()).await.expect("unlock");

    let semaphore = locks.semaphore("auto-traits-permits");
    semaphore.try_set_permits(1).await.expect("set");
    let permits = semaphore.acquire(1).await.expect("acquire");
    send(permits.release()).await.expect("release");

    let expirable = locks.expirable_semaphore("auto-traits-leased");
    expirable.try_set_permits(1).await.expect("set");
    let mut leased = expirable.acquire(1).await.expect("acquire");
    drop(send(leased.lost()));
    send(leased.update_lease(Duration::from_secs(5)))
        .await
        .expect("update");
    send(leased.release()).await.expect("release");
}
