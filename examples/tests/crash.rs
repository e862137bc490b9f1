//! A holder process killed with SIGKILL while it holds a lock, on Redis and on
//! PostgreSQL servers the test starts: the lock stays taken (nobody released it) and
//! comes free by itself within the holder's lease (3 s in `demo`), as nobody renews it.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use distlock::{Backend, Locks};
use lock_testkit::{PostgresServer, RedisServer};
use tokio::io::AsyncReadExt;
use tokio::time::{Instant, timeout};

/// The lease `demo` holds with.
const DEMO_LEASE: Duration = Duration::from_secs(3);

/// Starts `demo --hold-until-killed url name`, waits until it holds, kills it, and
/// checks what the server does with the dead holder's lock.
async fn a_killed_holders_lock_frees_itself(url: &str, backend: Arc<dyn Backend>) {
    let name = "crash:holder";
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_demo"))
        .args(["--hold-until-killed", url, name])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("demo starts");
    let mut out = child.stdout.take().expect("piped");
    let mut said = [0_u8; 16];
    let n = timeout(Duration::from_secs(20), out.read(&mut said))
        .await
        .expect("the holder says it holds")
        .expect("reads the holder's output");
    assert!(
        said[..n].starts_with(b"holding"),
        "{url}: the holder said {:?}",
        &said[..n]
    );
    child.kill().await.expect("SIGKILL");
    let killed = Instant::now();

    let locks = Locks::new(backend);
    let mutex = locks.mutex(name);
    assert!(
        mutex.try_lock().await.unwrap().is_none(),
        "{url}: the lock came free as its holder died, before its lease ran out"
    );
    let guard = timeout(DEMO_LEASE * 2, mutex.lock())
        .await
        .unwrap_or_else(|_| panic!("{url}: the dead holder's lock never came free"))
        .unwrap();
    assert!(
        killed.elapsed() <= DEMO_LEASE + Duration::from_secs(1),
        "{url}: free only after {:?}",
        killed.elapsed()
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_lock_frees_itself_on_redis() {
    let server = RedisServer::start().await;
    let backend = distlock::redis::connect_backend(&server.url())
        .await
        .unwrap();
    a_killed_holders_lock_frees_itself(&server.url(), backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_lock_frees_itself_on_postgres() {
    let server = PostgresServer::start().await;
    let backend = distlock::postgres::connect_backend(&server.url())
        .await
        .unwrap();
    a_killed_holders_lock_frees_itself(&server.url(), backend).await;
}
