//! Waiting without polling on a real MariaDB the test starts: a release that hands a
//! lock over interrupts the waiter's listening statement, so the waiter hears of it at
//! once, long before it would ask again on its own (a third of its place, ten seconds
//! here). Without the interruption the waiter would sleep through the bound.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lock_core::backend::{Acquire, AcquireRequest, Backend, LockKind, LockRef, ReleaseRequest};
use lock_core::{LockName, Owner};
use lock_mysql::Connector;
use lock_testkit::MariaDbServer;
use tokio::time::timeout;

fn lock(kind: LockKind, owner: &str) -> LockRef {
    LockRef::new(
        kind,
        LockName::new("wake").unwrap(),
        Owner::new(owner, "task"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_over_wakes_the_waiter_at_once() {
    let server = MariaDbServer::start().await;
    let holder = Connector::new(server.url()).connect().await.unwrap();
    let waiter = Connector::new(server.url()).connect().await.unwrap();
    for kind in [LockKind::Mutex, LockKind::Fair] {
        let (held, waiting) = (lock(kind, "holder"), lock(kind, "waiter"));
        let lease = Duration::from_secs(30);
        let first = AcquireRequest::new(lease);
        let reply = holder.acquire(&held, first).await.unwrap();
        assert!(matches!(reply, Acquire::Acquired { .. }), "{reply:?}");
        let queued = AcquireRequest::new(lease).enqueue(Duration::from_secs(30));
        let listener = waiter.listen(&waiting).await.unwrap();
        let reply = waiter.acquire(&waiting, queued).await.unwrap();
        assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
        let notified = listener.notified();
        holder
            .release(&held, ReleaseRequest::new(lease, first.id))
            .await
            .unwrap();
        timeout(Duration::from_secs(3), notified)
            .await
            .unwrap_or_else(|_| panic!("{kind}: the waiter was not woken"));
        assert!(
            listener.take_handed(queued.id).is_some(),
            "{kind}: the notice names the hand-over"
        );
        let reply = waiter.acquire(&waiting, queued).await.unwrap();
        assert!(
            matches!(reply, Acquire::Acquired { .. }),
            "{kind}: {reply:?}"
        );
        waiter
            .release(&waiting, ReleaseRequest::new(lease, queued.id))
            .await
            .unwrap();
    }
}
