//! The fault layer does to each operation what its fate says: a request lost on its way
//! never reaches the store, a lost reply comes after the store ran it, a late copy runs
//! once more, a deaf subscription hears nothing.

#![cfg(feature = "faults")]
// reason: a test panics on unexpected errors.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use lock_core::backend::{Acquire, LockKind};
use lock_core::faults::{Fate, FateSource, FaultLayer, Happened, Operation};
use lock_core::memory::MemoryBackend;
use lock_core::{AcquireRequest, Backend, ErrorKind, LockName, LockRef, Owner};

/// Gives the next acquisition the fate set, and records what happened.
#[derive(Debug, Default)]
struct Next {
    fate: Mutex<Fate>,
    happened: Mutex<Vec<Happened>>,
}

impl Next {
    fn set(&self, fate: Fate) {
        *self.fate.lock().unwrap_or_else(PoisonError::into_inner) = fate;
    }

    fn seen(&self) -> Vec<Happened> {
        self.happened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl FateSource for Next {
    fn fate(&self, operation: Operation) -> Fate {
        if operation != Operation::Acquire && operation != Operation::Listen {
            return Fate::none();
        }
        std::mem::take(&mut *self.fate.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn happened(&self, _: Operation, what: Happened) {
        self.happened
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }
}

fn lock(owner: &str) -> LockRef {
    LockRef::new(
        LockKind::Mutex,
        LockName::new("faulted").unwrap(),
        Owner::new(owner, "task"),
    )
}

fn request() -> AcquireRequest {
    AcquireRequest::new(Duration::from_secs(30))
}

#[tokio::test(start_paused = true)]
async fn a_request_lost_on_its_way_never_reaches_the_store() {
    let store = Arc::new(MemoryBackend::new());
    let layer = FaultLayer::<Next>::new(store.clone());
    layer.set(Fate::none().delayed(Duration::from_millis(50)).failed());
    let err = layer.acquire(&lock("a"), request()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("reaching the backend"), "{err}");
    assert!(!store.inspect(&lock("b")).await.unwrap().locked);
    assert_eq!(layer.seen(), [Happened::LostOnItsWay]);
}

#[tokio::test(start_paused = true)]
async fn a_lost_reply_comes_after_the_store_ran_the_request() {
    let store = Arc::new(MemoryBackend::new());
    let layer = FaultLayer::<Next>::new(store.clone());
    layer.set(Fate::none().reply_lost());
    let err = layer.acquire(&lock("a"), request()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(store.inspect(&lock("b")).await.unwrap().locked, "not run");
    assert_eq!(layer.seen(), [Happened::ReplyLost]);
}

#[tokio::test(start_paused = true)]
async fn a_late_copy_runs_again_after_its_original() {
    let store = Arc::new(MemoryBackend::new());
    let layer = FaultLayer::<Next>::new(store.clone());
    let first = request();
    layer.set(Fate::none().copied_after(Duration::from_secs(1)));
    let granted = layer.acquire(&lock("a"), first).await.unwrap();
    assert!(matches!(granted, Acquire::Acquired { holds: 1, .. }));
    // The copy finds its grant alive and takes nothing more: one hold, as the store's
    // retry rule says; what matters here is that it arrived.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(layer.seen(), [Happened::LateCopyDelivered]);
    assert_eq!(store.inspect(&lock("a")).await.unwrap().holds, 1);
}

#[tokio::test(start_paused = true)]
async fn a_deaf_subscription_hears_no_release() {
    let store = Arc::new(MemoryBackend::new());
    let layer = FaultLayer::<Next>::new(store.clone());
    layer.set(Fate::none().deaf());
    let deaf = Backend::listen(&layer, &lock("b")).await.unwrap();
    let hearing = Backend::listen(&layer, &lock("b")).await.unwrap();
    let (deaf_heard, heard) = (deaf.notified(), hearing.notified());
    tokio::pin!(deaf_heard, heard);
    deaf_heard.as_mut().enable();
    heard.as_mut().enable();
    layer.acquire(&lock("a"), request()).await.unwrap();
    let held = store.inspect(&lock("a")).await.unwrap();
    assert!(held.locked);
    assert!(store.force_release(&lock("a")).await.unwrap());
    tokio::time::timeout(Duration::from_secs(1), heard)
        .await
        .expect("the other subscription hears the release");
    let nothing = tokio::time::timeout(Duration::from_secs(1), deaf_heard).await;
    assert!(nothing.is_err(), "the deaf subscription heard a release");
}
