//! ACLs: the minimal ACL is enough for every lock kind, older ACLs still work, and a
//! missing permission is named in the error.

use crate::timing::secs;

use lock_core::{ErrorKind, Locks};
use lock_testkit::RedisServer;

use super::{AdapterConnect, ConnectSpec, fails_in_time, hand_over, locks};

/// The commands the lock scripts and the adapters run (documented in the READMEs).
pub const LOCK_COMMANDS: &str = "+ping +hello +evalsha +eval +script|load \
     +subscribe +unsubscribe +exists +type +time +get +set +incr +del +pexpire +pttl \
     +hexists +hget +hset +hdel +hlen +hgetall +hincrby +publish +lindex +lpop +rpush \
     +lrem +zadd +zscore +zrem \
     +zcard +zrange +zpopmin +pubsub|numsub +pubsub|shardnumsub";

/// The commands with which a release wakes one waiting client instead of all of them.
pub const WAKE_COMMANDS: &str = "+zcard +zrange +zpopmin +pubsub|numsub +pubsub|shardnumsub";

/// The channels waiters listen on.
pub const LOCK_CHANNELS: &str = "resetchannels &redisson_lock__channel:* &redisson_rwlock:*";

/// A server with five users: `locker` (exactly the minimal ACL), `beforewakes` (without
/// the commands releases came to use to wake one client), `nopublish` (without PUBLISH),
/// `nochannels` (without the channels) and `lockchannelsonly` (the locks' own channels,
/// not a client's own). Every password is `s3cret`.
async fn acl_server() -> RedisServer {
    RedisServer::builder()
        .config_line(format!(
            "user lockchannelsonly on >s3cret ~* resetchannels &redisson_lock__channel:{{* \
             -@all {LOCK_COMMANDS}"
        ))
        .config_line(format!(
            "user locker on >s3cret ~* {LOCK_CHANNELS} -@all {LOCK_COMMANDS}"
        ))
        .config_line(format!(
            "user beforewakes on >s3cret ~* {LOCK_CHANNELS} -@all {}",
            LOCK_COMMANDS.replace(WAKE_COMMANDS, "")
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

fn user_spec(server: &RedisServer, user: &str) -> ConnectSpec {
    ConnectSpec::new(format!("redis://{user}:s3cret@127.0.0.1:{}", server.port()))
}

pub async fn wrong_password_is_a_config_error_within_the_timeout(connect: &AdapterConnect) {
    let server = acl_server().await;
    let wrong = ConnectSpec::new(format!("redis://locker:nope@127.0.0.1:{}", server.port()));
    let err = fails_in_time(connect, wrong).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", err.chain());
    assert!(
        !err.chain().to_string().contains("nope"),
        "the password is not echoed"
    );
}

pub async fn the_minimal_acl_is_enough_for_every_lock_kind(connect: &AdapterConnect) {
    let server = acl_server().await;
    let a = locks(connect, user_spec(&server, "locker")).await.unwrap();
    let b = locks(connect, user_spec(&server, "locker")).await.unwrap();
    hand_over(&a, &b, "acl:m").await;
    let fair = a.fair_mutex("acl:f").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let read = a.rw_lock("acl:rw").reader().lock().await.unwrap();
    read.unlock().await.unwrap();
    let write = a.rw_lock("acl:rw").writer().lock().await.unwrap();
    write.unlock().await.unwrap();
    let fenced = Locks::builder(connect(user_spec(&server, "locker")).await.unwrap())
        .fencing(true)
        .build()
        .unwrap();
    let guard = fenced.mutex("acl:t").lock().await.unwrap();
    assert!(guard.fencing_token().is_some());
    guard.unlock().await.unwrap();
    assert!(a.mutex("acl:m").force_unlock().await.is_ok());
}

/// An ACL written before releases woke one client (without the commands that counts
/// and picks it) still releases and wakes: every waiting client is told, as before.
pub async fn an_acl_without_the_wake_commands_still_releases(connect: &AdapterConnect) {
    let server = acl_server().await;
    assert!(!LOCK_COMMANDS.replace(WAKE_COMMANDS, "").contains("zpopmin"));
    let a = locks(connect, user_spec(&server, "beforewakes"))
        .await
        .unwrap();
    let b = locks(connect, user_spec(&server, "beforewakes"))
        .await
        .unwrap();
    hand_over(&a, &b, "acl:before-wakes").await;
    hand_over(&b, &a, "acl:before-wakes").await;
}

/// An ACL that allows the locks' channels alone, not the channel on which a release
/// can wake one client by itself (`redisson_lock__channel:<wake id>`): the waiter's
/// subscription to it is refused, and releases wake the client on the lock's channel.
pub async fn an_acl_without_a_clients_own_channel_still_hands_over(connect: &AdapterConnect) {
    let server = acl_server().await;
    let a = locks(connect, user_spec(&server, "lockchannelsonly"))
        .await
        .unwrap();
    let b = locks(connect, user_spec(&server, "lockchannelsonly"))
        .await
        .unwrap();
    for _ in 0..2 {
        hand_over(&a, &b, "acl:own-channel").await;
        hand_over(&b, &a, "acl:own-channel").await;
    }
}

pub async fn a_missing_command_permission_is_named_in_the_error(connect: &AdapterConnect) {
    let server = acl_server().await;
    let locks = locks(connect, user_spec(&server, "nopublish"))
        .await
        .unwrap();
    // Taking the lock needs no PUBLISH; releasing it does.
    let guard = locks.mutex("acl:nopub").lock().await.unwrap();
    let err = guard.unlock().await.expect_err("the release publishes");
    let text = err.chain().to_string();
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(
        text.contains("NOPERM") && text.contains("publish"),
        "{text}"
    );
}

pub async fn a_missing_channel_permission_is_named_in_the_error(connect: &AdapterConnect) {
    let server = acl_server().await;
    let holder = locks(connect, user_spec(&server, "locker")).await.unwrap();
    let waiter = locks(connect, user_spec(&server, "nochannels"))
        .await
        .unwrap();
    let held = holder.mutex("acl:nochan").lock().await.unwrap();
    // Waiting needs a subscription to the lock's channel.
    let err = tokio::time::timeout(secs(5), waiter.mutex("acl:nochan").lock())
        .await
        .expect("refused, not hung")
        .expect_err("subscribing is refused");
    let text = err.chain().to_string();
    assert!(
        text.contains("refused `SUBSCRIBE redisson_lock__channel:{acl:nochan}`"),
        "{text}"
    );
    held.unlock().await.unwrap();
}
