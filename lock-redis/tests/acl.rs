//! ACL users: the minimal permissions a lock user needs are enough for every lock kind,
//! and a user missing one gets a typed error naming what the server refused.

// reason: test helpers panic on unexpected errors, like the tests themselves.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use lock_core::{ErrorKind, Locks};
use lock_testkit::RedisServer;

/// The commands the lock scripts and the adapter run (documented in the README).
const LOCK_COMMANDS: &str = "+ping +hello +evalsha +eval +script|load \
     +subscribe +unsubscribe +exists +type +time +get +set +incr +del +pexpire +pttl \
     +hexists +hget +hset +hdel +hlen +hgetall +hincrby +publish +lindex +lpop +rpush \
     +lrem +zadd +zscore +zrem";

/// The channels waiters listen on.
const LOCK_CHANNELS: &str = "resetchannels &redisson_lock__channel:* &redisson_rwlock:*";

async fn server() -> RedisServer {
    RedisServer::builder()
        .config_line(format!(
            "user locker on >s3cret ~* {LOCK_CHANNELS} -@all {LOCK_COMMANDS}"
        ))
        .config_line(format!(
            "user nopublish on >s3cret ~* {LOCK_CHANNELS} -@all {} ",
            LOCK_COMMANDS.replace("+publish", "")
        ))
        .config_line(format!(
            "user nochannels on >s3cret ~* resetchannels -@all {LOCK_COMMANDS}"
        ))
        .start()
        .await
}

fn url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:s3cret@127.0.0.1:{}", server.port())
}

async fn client(server: &RedisServer, user: &str) -> Result<Locks, lock_core::Error> {
    lock_redis::Connector::new(url(server, user))
        .connect_timeout(Duration::from_secs(2))
        .locks()
        .await
}

/// The error's whole chain, as a person would read it.
fn chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_minimal_acl_is_enough_for_every_lock_kind() {
    let server = server().await;
    let a = client(&server, "locker").await.unwrap();
    let b = client(&server, "locker").await.unwrap();
    // Mutex with a waiter woken by pub/sub.
    let held = a.mutex("acl:m").lock().await.unwrap();
    let waiter = {
        let m = b.mutex("acl:m");
        tokio::spawn(async move { m.lock().await.map(drop) })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    // Fair, read-write and fencing.
    a.fair_mutex("acl:f")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    a.rw_lock("acl:rw")
        .read()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    a.rw_lock("acl:rw")
        .write()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let fenced = Locks::builder(
        lock_redis::connect_backend(&url(&server, "locker"))
            .await
            .unwrap(),
    )
    .fencing(true)
    .build()
    .unwrap();
    let guard = fenced.mutex("acl:t").lock().await.unwrap();
    assert!(guard.fencing_token().is_some());
    guard.unlock().await.unwrap();
    assert!(a.mutex("acl:m").force_unlock().await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_password_is_a_config_error_within_the_timeout() {
    let server = server().await;
    let started = tokio::time::Instant::now();
    let wrong = format!("redis://locker:nope@127.0.0.1:{}", server.port());
    let err = lock_redis::Connector::new(wrong)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", chain(&err));
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_command_permission_is_named_in_the_error() {
    let server = server().await;
    let locks = client(&server, "nopublish").await.unwrap();
    // Taking the lock needs no PUBLISH; releasing it does.
    let guard = locks.mutex("acl:nopub").lock().await.unwrap();
    let err = guard.unlock().await.expect_err("the release publishes");
    assert_eq!(err.kind(), ErrorKind::Backend, "{}", chain(&err));
    let text = chain(&err);
    assert!(
        text.contains("NOPERM") && text.contains("publish"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_channel_permission_is_named_in_the_error() {
    let server = server().await;
    let holder = client(&server, "locker").await.unwrap();
    let waiter = client(&server, "nochannels").await.unwrap();
    let held = holder.mutex("acl:nochan").lock().await.unwrap();
    // Waiting needs a subscription to the lock's channel.
    let err = tokio::time::timeout(Duration::from_secs(5), waiter.mutex("acl:nochan").lock())
        .await
        .expect("refused, not hung")
        .expect_err("subscribing is refused");
    let text = chain(&err);
    assert!(
        text.contains("refused `SUBSCRIBE redisson_lock__channel:{acl:nochan}`"),
        "{text}"
    );
    held.unlock().await.unwrap();
}
