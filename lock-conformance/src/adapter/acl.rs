//! ACLs: the minimal ACL is enough for every lock kind, older ACLs still work, and a
//! missing permission is named in the error.

use crate::timing::secs;

use lock_core::{ErrorKind, Holder, Locks};
use lock_redis_protocol::ServerCode;
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

/// What a user needs beside the lock commands to call the scripts as functions and
/// load the library: then it needs no `EVAL` (see [`functions_need_no_eval`]).
pub const FUNCTION_COMMANDS: &str = "+fcall +function|load";

/// The commands a user sends scripts with, which a functions-only ACL denies.
const SCRIPT_COMMANDS: &str = "+evalsha +eval +script|load";

/// The channels waiters listen on.
pub const LOCK_CHANNELS: &str = "resetchannels &redisson_lock__channel:* &redisson_rwlock:*";

/// A server with these users: `locker` (exactly the minimal ACL), `beforewakes` (without
/// the commands releases came to use to wake one client), `nopublish` (without PUBLISH),
/// `nochannels` (without the channels) and `lockchannelsonly` (the locks' own channels,
/// not a client's own); `functions` (functions instead of scripts: no `EVAL`),
/// `fcallonly` (`FCALL` alone: it may not load the library) and `nopublishfunctions`.
/// Every password is `s3cret`.
async fn acl_server() -> RedisServer {
    let functions = LOCK_COMMANDS.replace(SCRIPT_COMMANDS, FUNCTION_COMMANDS);
    assert!(!functions.contains("eval"), "{functions}");
    RedisServer::builder()
        .config_line(format!(
            "user functions on >s3cret ~* {LOCK_CHANNELS} -@all {functions}"
        ))
        .config_line(format!(
            "user fcallonly on >s3cret ~* {LOCK_CHANNELS} -@all {}",
            functions.replace("+function|load", "")
        ))
        .config_line(format!(
            "user nopublishfunctions on >s3cret ~* {LOCK_CHANNELS} -@all {}",
            functions.replace("+publish", "")
        ))
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
    every_lock_kind(connect, || user_spec(&server, "locker")).await;
    let fenced = Locks::builder(connect(user_spec(&server, "locker")).await.unwrap())
        .fencing(true)
        .build()
        .unwrap();
    let guard = fenced.mutex("acl:t").lock().await.unwrap();
    assert!(guard.fencing_token().is_some());
    guard.unlock().await.unwrap();
    assert!(fenced.mutex("acl:every:m").force_unlock().await.is_ok());
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
    publish_is_named_as_refused(connect, user_spec(&server, "nopublish")).await;
}

/// A command refused inside a function is named as inside a script (the server names
/// the library's line).
pub async fn a_missing_command_permission_is_named_in_a_function_too(connect: &AdapterConnect) {
    let server = acl_server().await;
    let spec = user_spec(&server, "nopublishfunctions").server_code(ServerCode::Functions);
    publish_is_named_as_refused(connect, spec).await;
}

async fn publish_is_named_as_refused(connect: &AdapterConnect, spec: ConnectSpec) {
    let locks = locks(connect, spec).await.unwrap();
    // Taking the lock needs no PUBLISH; releasing it does.
    let guard = locks.mutex("acl:nopub").lock().await.unwrap();
    let err = guard.unlock().await.expect_err("the release publishes");
    let text = err.chain().to_string();
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(
        text.contains("NOPERM") && text.contains("refused `publish` in the lock script"),
        "{text}"
    );
}

/// A user allowed functions and denied `EVAL`, as many operators want: every lock kind
/// works, and the client loads the library itself, once, where the server lacks it.
pub async fn functions_need_no_eval(connect: &AdapterConnect) {
    let server = acl_server().await;
    for code in [ServerCode::Functions, ServerCode::Auto] {
        let () = server.command(&["FUNCTION", "FLUSH"]).await;
        let spec = || user_spec(&server, "functions").server_code(code);
        every_lock_kind(connect, spec).await;
        let loaded: Vec<redis::Value> = server.command(&["FUNCTION", "LIST"]).await;
        assert_eq!(loaded.len(), 1, "{code:?}: the client loaded the library");
    }
    let stats = server.command_stats().await;
    assert!(!stats.contains_key("eval") && !stats.contains_key("evalsha"));
    assert!(stats.get("fcall").is_some_and(|fcall| fcall.calls > 0));
}

/// A user allowed `FCALL` alone, on a server without the library: a client that needs
/// functions says at connect what loads them; once an operator loaded them, it works.
pub async fn a_library_the_user_may_not_load_is_named_with_the_command_that_loads_it(
    connect: &AdapterConnect,
) {
    let server = acl_server().await;
    let spec = || user_spec(&server, "fcallonly").server_code(ServerCode::Functions);
    let Err(err) = locks(connect, spec()).await else {
        panic!("the library is missing, and this user may not load it");
    };
    let text = err.chain().to_string();
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(text.contains("distlock functions load"), "{text}");
    let library = lock_redis_protocol::script::library().source();
    let _: String = server.command(&["FUNCTION", "LOAD", library]).await;
    every_lock_kind(connect, spec).await;
}

/// A user with the scripts' commands and without `FCALL` (every ACL written before
/// functions): an `Auto` client sends scripts, after one refused call.
pub async fn an_acl_without_fcall_gets_scripts(connect: &AdapterConnect) {
    let server = acl_server().await;
    every_lock_kind(connect, || user_spec(&server, "locker")).await;
    let stats = server.command_stats().await;
    assert!(
        stats
            .get("evalsha")
            .is_some_and(|evalsha| evalsha.calls > 0)
    );
    assert_eq!(
        stats.get("fcall").map_or(0, |fcall| fcall.calls),
        0,
        "none ran"
    );
}

/// A server that knows neither `FCALL` nor `FUNCTION`, as before Redis 7.0 (here both
/// renamed away): an `Auto` client sends scripts after one refused call, and a client
/// set to functions says what it needs.
pub async fn a_server_without_functions_gets_scripts(connect: &AdapterConnect) {
    let server = RedisServer::builder()
        .config_line("rename-command FCALL \"\"")
        .config_line("rename-command FUNCTION \"\"")
        .start()
        .await;
    every_lock_kind(connect, || ConnectSpec::new(server.url())).await;
    let stats = server.command_stats().await;
    assert!(
        stats
            .get("evalsha")
            .is_some_and(|evalsha| evalsha.calls > 0)
    );
    let strict = ConnectSpec::new(server.url()).server_code(ServerCode::Functions);
    let Err(err) = locks(connect, strict).await else {
        panic!("a server without functions cannot serve a client that needs them");
    };
    let text = err.chain().to_string();
    assert!(text.contains("need Redis 7.0 or later"), "{text}");
}

/// The library lost on a server that kept its data (`FUNCTION FLUSH`, or a restart of
/// a server that persists data but was loaded before): the client loads it again, and a
/// hold taken before is released as usual.
pub async fn a_flushed_library_is_loaded_again(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let spec = || ConnectSpec::new(server.url()).server_code(ServerCode::Functions);
    let locks = locks(connect, spec()).await.unwrap();
    let mutex = locks
        .mutex("functions:flushed")
        .with_holder(Holder::unique());
    let guard = mutex.lock().await.unwrap();
    let () = server.command(&["FUNCTION", "FLUSH"]).await;
    assert_eq!(mutex.hold_count().await.unwrap(), 1);
    let () = server.command(&["FUNCTION", "FLUSH"]).await;
    guard.unlock().await.unwrap();
    let again = mutex.try_lock().await.unwrap().expect("free");
    again.unlock().await.unwrap();
    // Many calls find it missing at once: the client loads it once.
    let () = server.command(&["FUNCTION", "FLUSH"]).await;
    let () = server.command(&["CONFIG", "RESETSTAT"]).await;
    let calls = (0..32).map(|i| {
        let mutex = locks.mutex(&format!("functions:flushed:{i}"));
        async move {
            mutex
                .try_lock()
                .await
                .unwrap()
                .expect("free")
                .unlock()
                .await
        }
    });
    for released in futures_util::future::join_all(calls).await {
        released.unwrap();
    }
    let stats = server.command_stats().await;
    let loads = stats.get("function|load").map_or(0, |load| load.calls);
    assert_eq!(
        loads, 1,
        "one load for the calls that found the library missing"
    );
}

/// Takes and releases every lock kind through clients `spec` makes, one handing a mutex
/// over to another.
async fn every_lock_kind(connect: &AdapterConnect, spec: impl Fn() -> ConnectSpec) {
    let a = locks(connect, spec()).await.unwrap();
    let b = locks(connect, spec()).await.unwrap();
    hand_over(&a, &b, "acl:every:m").await;
    let fair = a.fair_mutex("acl:every:f").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let read = a.rw_lock("acl:every:rw").reader().lock().await.unwrap();
    read.unlock().await.unwrap();
    let write = a.rw_lock("acl:every:rw").writer().lock().await.unwrap();
    write.unlock().await.unwrap();
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
