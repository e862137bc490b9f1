//! Compile-time checks: the public types and the futures of the async methods are `Send`
//! (and the types `Sync`), so they can cross `tokio::spawn` and live in shared state.
//! A type or future that loses either stops this file from compiling.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lock_core::memory::MemoryBackend;
use lock_core::{Error, Guard, Holder, Lock, Locks, LocksBuilder, RwLock};

fn send_sync<T: Send + Sync>() {}

fn send<F: Future + Send>(future: F) -> F {
    future
}

#[test]
fn public_types_are_send_and_sync() {
    send_sync::<Locks>();
    send_sync::<LocksBuilder>();
    send_sync::<Lock>();
    send_sync::<RwLock>();
    send_sync::<Guard>();
    send_sync::<Holder>();
    send_sync::<Error>();
    send_sync::<MemoryBackend>();
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
    send_sync::<lock_core::Acquisition<'_>>();
    drop(send(mutex.try_lock_for(Duration::from_millis(1), None)));
    drop(send(mutex.lock_with_lease(Duration::from_secs(1))));
    drop(send(mutex.is_locked()));
    drop(send(mutex.force_unlock()));
    drop(send(rw.reader().lock()));
    drop(send(rw.writer().try_lock()));
    drop(send(locks.shutdown()));
    drop(send(Holder::scope(async {})));
}

#[tokio::test]
async fn guard_methods_return_send_futures() {
    let locks = Locks::new(Arc::new(MemoryBackend::new()));
    let guard = locks.mutex("auto-traits-guard").lock().await.expect("lock");
    drop(send(guard.lost()));
    send(guard.unlock()).await.expect("unlock");
}
