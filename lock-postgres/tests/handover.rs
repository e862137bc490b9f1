//! A release of a mutex hands the lock over on the server to the first waiter in the
//! queue, which holds from the release's message and takes the hold up with its next
//! attempt; a waiter that has gone loses it without anybody waiting a lease.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::backend::{Acquire, AcquireRequest, Backend};
use lock_core::{LockKind, LockName, LockRef, Locks, Owner};
use lock_postgres::Connector;
use lock_testkit::{PostgresServer, postgres_client};
use tokio::time::{sleep, timeout};
use tokio_postgres::Client;

mod waiting;

async fn connect(url: &str) -> Locks {
    Locks::new(Arc::new(Connector::new(url).connect().await.unwrap()))
}

/// Waits until `owner_prefix`'s waiter for `name` is in the queue.
async fn queued(probe: &Client, name: &str, owner_prefix: &str) {
    let seen = async {
        loop {
            let rows = probe
                .query(
                    "SELECT 1 FROM distlock.waiters WHERE name = $1 AND starts_with(owner, $2)",
                    &[&name, &owner_prefix],
                )
                .await
                .unwrap();
            if !rows.is_empty() {
                return;
            }
            sleep(Duration::from_millis(5)).await;
        }
    };
    timeout(Duration::from_secs(5), seen)
        .await
        .expect("the waiter queues");
}

/// The owner of `name`'s hold and whether it is still handed (not taken up), if held.
async fn holder(probe: &Client, name: &str) -> Option<(String, bool)> {
    probe
        .query_opt(
            "SELECT owner, handed FROM distlock.holds WHERE name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// A waiter handed the lock holds from the release's message, before anything it sends
/// is answered: here the waiter's role may no longer call the functions once it waits
/// (its attempts answered and its sessions idle), so its take-up fails, and it holds
/// all the same. Without the message's grant it would have had to ask, and failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_holds_from_the_hand_overs_message() {
    let server = PostgresServer::start().await;
    let probe = postgres_client(&server.url()).await;
    let name = "held from the message";
    // The holder migrates; the waiter is a service role with the documented grants.
    let a = connect(&server.url()).await;
    let url = waiting::service_role(&server, &probe, "handed_waiter").await;
    let b = Locks::new(Arc::new(Connector::new(url).connect().await.unwrap()));
    let guard = waiting::hand_to_a_refused_waiter((&a, &b), &probe, name, "handed_waiter").await;
    assert!(guard.is_held());
    let (owner, handed) = holder(&probe, name).await.expect("handed over");
    assert!(owner.starts_with(b.client_id()), "held by {owner}");
    assert!(handed, "the refused take-up took the hold up");
}

/// Waiters are served in the order they queued, and the lock is the first waiter's the
/// moment the release commits: before, the release woke every waiting client and the
/// lock went to whichever asked first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_mutex_to_the_first_waiter_in_the_queue() {
    let server = PostgresServer::start().await;
    let probe = postgres_client(&server.url()).await;
    let name = "handed";
    let (a, b, c) = (
        connect(&server.url()).await,
        connect(&server.url()).await,
        connect(&server.url()).await,
    );
    let held = a.mutex(name).lock().await.unwrap();
    let b_waits = tokio::spawn({
        let lock = b.mutex(name);
        async move { lock.lock().await }
    });
    let b_client = b.client_id().to_owned();
    queued(&probe, name, &b_client).await;
    let c_waits = tokio::spawn({
        let lock = c.mutex(name);
        async move { lock.lock().await }
    });
    let c_client = c.client_id().to_owned();
    queued(&probe, name, &c_client).await;
    held.unlock().await.unwrap();
    let (owner, _) = holder(&probe, name)
        .await
        .expect("handed over at the release");
    assert!(
        owner.starts_with(&b_client),
        "handed to {owner}, not the first waiter"
    );
    let b_guard = timeout(Duration::from_secs(5), b_waits)
        .await
        .expect("the first waiter takes it up")
        .unwrap()
        .unwrap();
    // The waiter holds from the hand-over's message on and takes the hold up in the
    // background: the hold stops being `handed` soon after.
    let taken_up = async {
        while holder(&probe, name).await.is_none_or(|(_, handed)| handed) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(Duration::from_secs(5), taken_up)
        .await
        .expect("the first waiter takes the handed hold up");
    assert!(!c_waits.is_finished(), "the second waiter got it too");
    b_guard.unlock().await.unwrap();
    let (owner, _) = holder(&probe, name).await.expect("handed over again");
    assert!(owner.starts_with(&c_client), "handed to {owner}");
    let c_guard = timeout(Duration::from_secs(5), c_waits)
        .await
        .expect("the second waiter takes it up")
        .unwrap()
        .unwrap();
    c_guard.unlock().await.unwrap();
    assert_eq!(holder(&probe, name).await, None);
}

/// A waiter that queued and then went quiet (its process paused or gone) is handed the
/// lock, but keeps it only for its place's time (1 s here); one that gives up passes it
/// on at once (before its place of 10 s ends). Either way the next waiter does not wait
/// a lease (30 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_has_gone_loses_the_handed_lock_without_a_lease_of_waiting() {
    let server = PostgresServer::start().await;
    let probe = postgres_client(&server.url()).await;
    let (holder_client, next) = (connect(&server.url()).await, connect(&server.url()).await);
    let backend = Connector::new(server.url()).connect().await.unwrap();
    for gives_up in [false, true] {
        let name = format!("gone-{gives_up}");
        let held = holder_client.mutex(&name).lock().await.unwrap();
        // The quiet waiter queues through the backend, once.
        let place = Duration::from_secs(if gives_up { 10 } else { 1 });
        let quiet = LockRef::new(
            LockKind::Mutex,
            LockName::new(&name).unwrap(),
            Owner::new("quiet", "task"),
        );
        let queued_request = AcquireRequest::new(Duration::from_secs(30)).enqueue(place);
        let reply = backend.acquire(&quiet, queued_request).await.unwrap();
        assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
        let waits = tokio::spawn({
            let lock = next.mutex(&name);
            async move { lock.lock().await }
        });
        queued(&probe, &name, next.client_id()).await;
        held.unlock().await.unwrap();
        assert_eq!(
            holder(&probe, &name).await,
            Some(("quiet:task".to_owned(), true)),
            "handed to the quiet waiter"
        );
        let started = Instant::now();
        if gives_up {
            backend.cancel_wait(&quiet, &queued_request).await.unwrap();
        }
        let guard = timeout(Duration::from_secs(10), waits)
            .await
            .expect("the next waiter is served")
            .unwrap()
            .unwrap();
        let waited = started.elapsed();
        let bound = if gives_up { 1_500 } else { 5_000 };
        assert!(
            waited < Duration::from_millis(bound),
            "gives up {gives_up}: the next waiter waited {waited:?}"
        );
        guard.unlock().await.unwrap();
    }
}

/// A cancellation names the acquisition that gives up. One that arrives late (sent in
/// the background, on another pooled connection), after a later acquisition of the same
/// owner (a holder retrying under its own identity) has queued and been handed the lock,
/// leaves that hold and that place alone. Cancelled by owner, the later acquisition lost
/// the lock it was handed to the next client and its place in the queue with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_cancellation_leaves_a_later_acquisitions_handed_hold() {
    let server = PostgresServer::start().await;
    let probe = postgres_client(&server.url()).await;
    let (holder_client, next) = (connect(&server.url()).await, connect(&server.url()).await);
    let backend = Connector::new(server.url()).connect().await.unwrap();
    let name = "late-cancel";
    let held = holder_client.mutex(name).lock().await.unwrap();
    let retrying = LockRef::new(
        LockKind::Mutex,
        LockName::new(name).unwrap(),
        Owner::new("retrying", "task"),
    );
    let place = Duration::from_secs(10);
    let gave_up = AcquireRequest::new(Duration::from_secs(30)).enqueue(place);
    let reply = backend.acquire(&retrying, gave_up).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    let later = AcquireRequest::new(Duration::from_secs(30)).enqueue(place);
    let reply = backend.acquire(&retrying, later).await.unwrap();
    assert!(matches!(reply, Acquire::Busy { .. }), "{reply:?}");
    let waits = tokio::spawn({
        let lock = next.mutex(name);
        async move { lock.lock().await }
    });
    queued(&probe, name, next.client_id()).await;
    held.unlock().await.unwrap();
    assert_eq!(
        holder(&probe, name).await,
        Some(("retrying:task".to_owned(), true)),
        "handed to the later acquisition"
    );
    backend.cancel_wait(&retrying, &gave_up).await.unwrap();
    assert_eq!(
        holder(&probe, name).await,
        Some(("retrying:task".to_owned(), true)),
        "the late cancellation of an earlier acquisition gave the handed hold away"
    );
    match backend.acquire(&retrying, later).await.unwrap() {
        Acquire::Acquired { origin, .. } => assert_eq!(origin, Some(later.id)),
        other => panic!("the later acquisition could not take its hold up: {other:?}"),
    }
    sleep(Duration::from_millis(300)).await;
    assert!(!waits.is_finished(), "the next client holds the lock too");
    // The later acquisition's own cancellation is no late one: had it not taken the hold
    // up, it would give it back; taken up, the hold is its guard's to release.
    let release = lock_core::backend::ReleaseRequest::new(Duration::from_secs(30), later.id);
    backend.release(&retrying, release).await.unwrap();
    let guard = timeout(Duration::from_secs(5), waits)
        .await
        .expect("the next client is served after the release")
        .unwrap()
        .unwrap();
    guard.unlock().await.unwrap();
}
