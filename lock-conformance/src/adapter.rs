//! The adapter suite: what every Redis adapter must do when connecting, whatever the
//! driver. Bad input is a typed error within the connect timeout; the URL forms reach
//! their deployments; the minimal ACL is enough and a missing permission is named; replica
//! acknowledgement confirms or refuses; TLS works and fails cleanly.
//!
//! An adapter's test file passes an [`AdapterConnect`] to [`adapter_tests!`](crate::adapter_tests).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lock_core::{Backend, Error, ErrorKind, Holder, Locks};
use lock_redis_protocol::NotReplicated;
use lock_testkit::{FaultProxy, ProxyFault, RedisCluster, RedisSentinel, RedisServer};

use crate::scenarios::{eventually, served_then_released, spawn_try_waiter};
use tokio::time::Instant;

/// What a scenario asks an adapter to connect with: a URL and settings every adapter's
/// connector has.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConnectSpec {
    /// Any URL form (`redis://`, `rediss://`, `redis+cluster://`, `redis+sentinel://`).
    pub url: String,
    /// The connector's connect timeout.
    pub connect_timeout: Duration,
    /// The connector's response timeout (`None`: the default).
    pub response_timeout: Option<Duration>,
    /// A PEM root certificate to trust for `rediss://`.
    pub root_certificate: Option<Vec<u8>>,
    /// Replica acknowledgement: how many replicas, within how long.
    pub replica_ack: Option<(u32, Duration)>,
    /// The restart quarantine.
    pub restart_quarantine: Option<Duration>,
}

impl ConnectSpec {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connect_timeout: Duration::from_secs(2),
            response_timeout: None,
            root_certificate: None,
            replica_ack: None,
            restart_quarantine: None,
        }
    }
}

/// Connects an adapter as the spec says.
pub type AdapterConnect =
    Arc<dyn Fn(ConnectSpec) -> BoxFuture<'static, Result<Arc<dyn Backend>, Error>> + Send + Sync>;

/// Expands to one test per adapter scenario, for the adapter `$connect` (an
/// [`AdapterConnect`]).
#[macro_export]
macro_rules! adapter_tests {
    ($connect:expr) => {
        $crate::__adapter_tests!($connect;
            bad_urls_are_config_errors_before_any_network,
            refused_connection_is_a_connection_error,
            silent_server_is_a_connection_error_within_the_timeout,
            cluster_url_on_a_standalone_server_is_an_error,
            single_server_url_on_a_cluster_node_is_a_config_error,
            sentinel_with_an_unknown_master_is_an_error_within_the_timeout,
            wrong_password_is_a_config_error_within_the_timeout,
            the_minimal_acl_is_enough_for_every_lock_kind,
            a_missing_command_permission_is_named_in_the_error,
            a_missing_channel_permission_is_named_in_the_error,
            without_a_replica_an_acquisition_is_not_replicated_and_given_back,
            with_a_replica_every_lock_kind_works,
            locks_work_over_tls_and_a_wrong_setup_is_a_typed_error,
            dropping_a_client_closes_its_connections,
            a_script_whose_reply_was_lost_is_not_sent_again,
            an_outage_as_long_as_the_retry_window_leaves_no_hold,
            a_release_delivered_after_its_window_ends_nothing_more,
            plain_permits_outlive_an_outage_longer_than_the_retry_window,
            a_call_ends_within_the_response_timeout_while_the_network_is_down,
            a_missing_password_and_an_unknown_host_fail_at_connect,
            a_redisson_peer_on_a_cluster_hears_us_and_is_heard,
            a_redisson_waiter_hears_our_release_beside_our_waiters,
            a_newcomer_cannot_take_a_lock_offered_to_the_client_woken_for_it,
            an_acl_without_the_wake_commands_still_releases,
            a_release_that_wakes_one_client_sends_one_message,
            an_acl_without_a_clients_own_channel_still_hands_over,
            a_client_keeps_its_own_channel_across_waits,
            a_client_not_yet_listening_on_the_locks_channel_is_told_alone,
            a_release_keeps_a_starving_waiters_reservation_for_an_offers_time,
            a_grant_clears_an_unreadable_reservation_and_holds_count_down,
            clients_outliving_their_connect_runtime_still_hand_over,
            a_rollback_without_a_restart_starts_the_quarantine,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __adapter_tests {
    ($connect:expr; $($scenario:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                $crate::adapter::$scenario(&$connect).await;
            }
        )*
    };
}

async fn locks(connect: &AdapterConnect, spec: ConnectSpec) -> Result<Locks, Error> {
    connect(spec).await.map(Locks::new)
}

/// A standalone server and two clients of it.
async fn server_and_two_clients(connect: &AdapterConnect) -> (RedisServer, Locks, Locks) {
    let server = RedisServer::start().await;
    let (a, b) = two_clients(connect, &server.url()).await;
    (server, a, b)
}

/// Two clients of the deployment at `url`.
async fn two_clients(connect: &AdapterConnect, url: &str) -> (Locks, Locks) {
    let a = locks(connect, ConnectSpec::new(url)).await.unwrap();
    let b = locks(connect, ConnectSpec::new(url)).await.unwrap();
    (a, b)
}

/// Connecting with `spec` fails, within the connect timeout plus a margin; returns the
/// error.
async fn fails_in_time(connect: &AdapterConnect, spec: ConnectSpec) -> Error {
    let bound = spec.connect_timeout * 2 + Duration::from_secs(1);
    let started = Instant::now();
    let result = connect(spec).await;
    let took = started.elapsed();
    assert!(took < bound, "failing took {took:?}");
    match result {
        Ok(_) => panic!("connected where it should have failed"),
        Err(err) => err,
    }
}

/// Takes and releases one lock through `locks`.
pub async fn round_trip(locks: &Locks) {
    let guard = locks.mutex("adapter:round-trip").lock().await.unwrap();
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
}

/// Takes and hands over one lock between two clients: the waiter is woken by the
/// release notification.
async fn hand_over(a: &Locks, b: &Locks, name: &str) {
    hand_over_once(a, b, name, tokio::time::sleep(Duration::from_millis(50))).await;
}

/// Like [`hand_over`], but `a` releases once `waiting` is over.
async fn hand_over_once(a: &Locks, b: &Locks, name: &str, waiting: impl Future<Output = ()>) {
    let held = a.mutex(name).lock().await.unwrap();
    let waiter = {
        let mutex = b.mutex(name);
        tokio::spawn(async move { mutex.lock().await.map(drop) })
    };
    waiting.await;
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter was woken")
        .unwrap()
        .unwrap();
}

/// A `redis+cluster://` URL of the local nodes (or proxies) on `ports`.
fn cluster_url(ports: impl Iterator<Item = u16>) -> String {
    let hosts: Vec<String> = ports.map(|port| format!("127.0.0.1:{port}")).collect();
    format!("redis+cluster://{}", hosts.join(","))
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

pub async fn bad_urls_are_config_errors_before_any_network(connect: &AdapterConnect) {
    for url in [
        "",
        "http://localhost",
        "redis://:notaport",
        "redis+cluster://",
        "redis+cluster://,",
        "redis+cluster://a:notaport",
        "redis+sentinel://127.0.0.1:1",
        "not a url",
    ] {
        let started = Instant::now();
        let err = fails_in_time(connect, ConnectSpec::new(url)).await;
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url:?}: {err}");
        assert!(!chain(&err).contains("notaport"), "the URL is not echoed");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{url:?} took a while"
        );
    }
}

pub async fn refused_connection_is_a_connection_error(connect: &AdapterConnect) {
    // A port that was free a moment ago: nothing listens there.
    let port = lock_testkit::free_port();
    let mut spec = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    spec.connect_timeout = Duration::from_millis(500);
    let err = fails_in_time(connect, spec).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", chain(&err));
}

pub async fn silent_server_is_a_connection_error_within_the_timeout(connect: &AdapterConnect) {
    // Accepts connections and never answers: the handshake must not hang.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut spec = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    spec.connect_timeout = Duration::from_millis(500);
    let err = fails_in_time(connect, spec).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", chain(&err));
    accepting.abort();
}

pub async fn cluster_url_on_a_standalone_server_is_an_error(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let spec = ConnectSpec::new(format!("redis+cluster://127.0.0.1:{}", server.port()));
    let err = fails_in_time(connect, spec).await;
    assert!(
        matches!(err.kind(), ErrorKind::InvalidConfig | ErrorKind::Connection),
        "{}",
        chain(&err)
    );
}

pub async fn single_server_url_on_a_cluster_node_is_a_config_error(connect: &AdapterConnect) {
    let cluster = RedisCluster::start(3).await;
    let err = fails_in_time(connect, ConnectSpec::new(cluster.urls()[0].clone())).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", chain(&err));
    // The cluster form of the same nodes works.
    let url = cluster_url(cluster.nodes().iter().map(RedisServer::port));
    let (a, b) = two_clients(connect, &url).await;
    hand_over(&a, &b, "adapter:cluster").await;
}

pub async fn sentinel_with_an_unknown_master_is_an_error_within_the_timeout(
    connect: &AdapterConnect,
) {
    let deployment = RedisSentinel::start().await;
    let url = deployment
        .url()
        .replace(deployment.master_name(), "no-such-master");
    let mut spec = ConnectSpec::new(url);
    spec.connect_timeout = Duration::from_secs(1);
    let err = fails_in_time(connect, spec).await;
    assert!(
        matches!(err.kind(), ErrorKind::InvalidConfig | ErrorKind::Connection),
        "{}",
        chain(&err)
    );
    // The right name works.
    let (a, b) = two_clients(connect, &deployment.url()).await;
    hand_over(&a, &b, "adapter:sentinel").await;
}

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
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", chain(&err));
    assert!(!chain(&err).contains("nope"), "the password is not echoed");
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
    let text = chain(&err);
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

pub async fn without_a_replica_an_acquisition_is_not_replicated_and_given_back(
    connect: &AdapterConnect,
) {
    let server = RedisServer::start().await;
    let mut spec = ConnectSpec::new(server.url());
    spec.replica_ack = Some((1, Duration::from_millis(200)));
    let acked = locks(connect, spec).await.unwrap();
    let err = acked
        .mutex("ack:none")
        .lock()
        .await
        .expect_err("no replica confirms");
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<NotReplicated>());
    assert_eq!(
        source,
        Some(&NotReplicated {
            wanted: 1,
            acknowledged: 0
        }),
        "{err}"
    );
    let plain = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let guard = plain.mutex("ack:none").try_lock().await.unwrap();
    assert!(guard.is_some(), "the unconfirmed acquisition was left held");
}

pub async fn with_a_replica_every_lock_kind_works(connect: &AdapterConnect) {
    let deployment = RedisSentinel::start().await;
    let mut spec = ConnectSpec::new(deployment.url());
    spec.replica_ack = Some((1, Duration::from_secs(1)));
    let locks = locks(connect, spec).await.unwrap();
    locks
        .mutex("ack:m")
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let fair = locks.fair_mutex("ack:f").lock().await.unwrap();
    fair.unlock().await.unwrap();
    let read = locks.rw_lock("ack:rw").reader().lock().await.unwrap();
    read.unlock().await.unwrap();
    // The acquisition reached the replica before the call returned.
    let held = locks.rw_lock("ack:rw").writer().lock().await.unwrap();
    let replica = deployment.replica().unwrap();
    let fields: Vec<String> = replica.command(&["HKEYS", "ack:rw"]).await;
    assert!(fields.contains(&"mode".to_owned()), "{fields:?}");
    held.unlock().await.unwrap();
}

/// Needs the adapter's TLS support (its `tls` feature).
pub async fn locks_work_over_tls_and_a_wrong_setup_is_a_typed_error(connect: &AdapterConnect) {
    let certificates = lock_testkit::TestCertificates::generate();
    let tls_port = lock_testkit::free_port();
    let server = certificates
        .serve(RedisServer::builder(), tls_port)
        .start()
        .await;
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let trusting = |url: &str| {
        let mut spec = ConnectSpec::new(url);
        spec.root_certificate = Some(certificates.ca_pem());
        spec
    };
    let a = match locks(connect, trusting(&url)).await {
        Ok(locks) => locks,
        Err(err) => panic!("connecting over TLS: {}", chain(&err)),
    };
    let b = locks(connect, trusting(&url)).await.unwrap();
    hand_over(&a, &b, "tls:m").await;

    // An untrusted server certificate.
    let err = fails_in_time(connect, ConnectSpec::new(url.clone())).await;
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{}",
        chain(&err)
    );
    // TLS to the plain port.
    let plain = format!("rediss://127.0.0.1:{}", server.port());
    let err = fails_in_time(connect, trusting(&plain)).await;
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::InvalidConfig),
        "{}",
        chain(&err)
    );
}

/// Like [`hand_over`], but `a` releases only once the server counts `b`'s subscription to
/// the lock's channel: a fixed sleep does not prove that `b` waited on a loaded machine.
async fn hand_over_to_a_subscribed_waiter(server: &RedisServer, a: &Locks, b: &Locks, name: &str) {
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let subscribed = await_subscriber(server, "NUMSUB", &channel);
    hand_over_once(a, b, name, subscribed).await;
}

/// Waits up to 5 s until `PUBSUB <count> channel` (`NUMSUB`, or `SHARDNUMSUB` for
/// sharded pub/sub) on `server` counts a subscriber.
async fn await_subscriber(server: &RedisServer, count: &str, channel: &str) {
    await_subscribers(server, count, channel, 1).await;
}

/// Waits up to 5 s until `PUBSUB <count> channel` on `server` counts `wanted`
/// subscribers or more.
async fn await_subscribers(server: &RedisServer, count: &str, channel: &str, wanted: i64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let counts: Vec<redis::Value> = server.command(&["PUBSUB", count, channel]).await;
        if matches!(counts.get(1), Some(redis::Value::Int(n)) if *n >= wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {wanted} subscribed to {channel} (PUBSUB {count})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The ids of the server's connections that a lock client opened since `before` was
/// taken. The test's own probes (one fresh connection per command, whose close the
/// server may not have processed yet) are left out by the only commands they run.
async fn client_ids_since(server: &RedisServer, before: &HashSet<u64>) -> HashSet<u64> {
    let list: String = server.command(&["CLIENT", "LIST"]).await;
    list.lines()
        .filter(|line| {
            let command = field(line, "cmd").unwrap_or("NULL");
            !(command == "NULL" || command == "client|list" || command.starts_with("pubsub|"))
        })
        .filter_map(|line| field(line, "id")?.parse().ok())
        .filter(|id| !before.contains(id))
        .collect()
}

/// The value of `name=` in one line of `CLIENT LIST`.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

pub async fn dropping_a_client_closes_its_connections(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let before = client_ids_since(&server, &HashSet::new()).await;
    let (a, b) = two_clients(connect, &server.url()).await;
    // Each client waits once, so each has its notification connection open as well as
    // its command connection.
    hand_over_to_a_subscribed_waiter(&server, &a, &b, "adapter:drop").await;
    hand_over_to_a_subscribed_waiter(&server, &b, &a, "adapter:drop").await;
    let opened = client_ids_since(&server, &before).await;
    assert!(
        opened.len() >= 4,
        "commands and notifications each: {opened:?}"
    );
    drop((a, b));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = client_ids_since(&server, &before).await;
        if left.is_disjoint(&opened) {
            break;
        }
        assert!(Instant::now() < deadline, "connections {left:?} left open");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Review #2 and #7 through a real connection reset (the script ran, its reply was
/// lost), on a standalone server and on a cluster reached through proxies the nodes
/// announce: no driver sends the script again by itself, and lock-core's own retry under
/// the same request id is answered by the server's latch, so a release counts once and
/// reports success; a grant whose caller stopped waiting is undone at once, not left
/// for its lease.
pub async fn a_script_whose_reply_was_lost_is_not_sent_again(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let address = format!("127.0.0.1:{}", server.port());
    let proxy = FaultProxy::start(address.parse().unwrap()).await;
    let standalone = locks(connect, ConnectSpec::new(proxy.url())).await.unwrap();
    lose_one_release(&standalone, &proxy, "adapter:lost-reply").await;
    lose_one_grant(&standalone, &proxy, "adapter:lost-grant").await;

    let cluster = RedisCluster::start_behind_proxies(3).await;
    let url = cluster_url(cluster.proxies().iter().map(FaultProxy::port));
    let clustered = locks(connect, ConnectSpec::new(url)).await.unwrap();
    let name = "adapter:lost-reply-cluster";
    let node = cluster.node_index_for_key(name).await;
    lose_one_release(&clustered, &cluster.proxies()[node], name).await;
    let name = "adapter:lost-grant-cluster";
    let node = cluster.node_index_for_key(name).await;
    lose_one_grant(&clustered, &cluster.proxies()[node], name).await;
}

/// Every script call ends within the response timeout, whatever the network does: a
/// paused server, a connection that broke, and a new connection that cannot be made (the
/// proxy accepts it and then forwards nothing, so a driver's handshake hangs for the
/// connect timeout, which is longer). A `try_lock` sends one request, so it must end as a
/// connection error within about the response timeout.
pub async fn a_call_ends_within_the_response_timeout_while_the_network_is_down(
    connect: &AdapterConnect,
) {
    const RESPONSE: Duration = Duration::from_millis(400);
    let server = RedisServer::start().await;
    let proxy = FaultProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).await;
    let mut spec = ConnectSpec::new(proxy.url());
    spec.connect_timeout = Duration::from_secs(3);
    spec.response_timeout = Some(RESPONSE);
    let locks = locks(connect, spec).await.unwrap();
    let mutex = locks.mutex("adapter:bounded");
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let bounded = |what: &'static str| {
        let mutex = mutex.clone();
        async move {
            let started = Instant::now();
            let tried = tokio::time::timeout(Duration::from_secs(10), mutex.try_lock())
                .await
                .unwrap_or_else(|_| panic!("{what}: the call never ended"));
            let took = started.elapsed();
            assert!(
                matches!(&tried, Err(err) if err.kind() == ErrorKind::Connection),
                "{what}: {tried:?}"
            );
            assert!(
                took < RESPONSE + Duration::from_millis(600),
                "{what}: the call took {took:?}, the response timeout is {RESPONSE:?}"
            );
        }
    };
    server.pause();
    bounded("a paused server").await;
    server.resume();
    // The paused request's late answer reaches the driver, which has given up on it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.set(ProxyFault::BlackHole);
    let killed: i64 = server.command(&["CLIENT", "KILL", "TYPE", "normal"]).await;
    assert!(killed >= 1, "the script connection was not killed");
    // A driver may learn of the broken connection from this call, or reconnect on its
    // own; either way its next connection hangs in the black hole.
    bounded("a broken connection").await;
    bounded("a reconnection that hangs").await;
    proxy.set(ProxyFault::Forward);
    let back = eventually(Duration::from_secs(10), || async {
        mutex.try_lock().await.is_ok_and(|guard| guard.is_some())
    })
    .await;
    assert!(back, "no call went through once the network was back");
}

/// N12 (review 2): a grant's reply is lost, and the network then stays down longer than
/// the retry window: every resend fails, the caller gets an error, and the undo runs once
/// the network is back. It ends the grant, which is still alive: another client gets the
/// lock within seconds, not after the 30 s lease. (Before, the undo found the grant's
/// latch expired and left the hold for its lease.)
pub async fn an_outage_as_long_as_the_retry_window_leaves_no_hold(connect: &AdapterConnect) {
    const WINDOW: Duration = Duration::from_millis(800);
    let (server, proxy, locks) = behind_a_proxy(connect, WINDOW).await;
    let mutex = locks.mutex("adapter:outage");
    // Every script is loaded first, so the reply lost is the grant's, not a NOSCRIPT.
    mutex.lock().await.unwrap().unlock().await.unwrap();
    proxy.set(ProxyFault::LoseReplyThenBlackHole(b"EVALSHA".to_vec()));
    let failed = mutex.lock().await;
    assert!(
        failed.is_err(),
        "the network was down for the whole window: {failed:?}"
    );
    assert_eq!(proxy.lost_replies(), 1, "the grant's reply was lost");
    tokio::time::sleep(Duration::from_millis(100)).await;
    proxy.set(ProxyFault::Forward);
    let other = fresh_client(connect, &server).await;
    let taken = tokio::time::timeout(Duration::from_secs(5), other.mutex("adapter:outage").lock())
        .await
        .expect("a grant nobody learnt of was left for its lease");
    taken.unwrap().unlock().await.unwrap();
}

/// N13 (review 2): a holder's release is held back on its connection past the retry
/// window; the client gives up on that connection, sends the release again on a new one
/// (it runs), and the holder locks again. Then the held copy of the first release is
/// delivered: it ends nothing more, and the holder's new grant still excludes everyone.
/// (Before, the copy found its latch expired and released the new hold.)
pub async fn a_release_delivered_after_its_window_ends_nothing_more(connect: &AdapterConnect) {
    const WINDOW: Duration = Duration::from_millis(600);
    let server = RedisServer::start().await;
    let proxy = FaultProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).await;
    let mut spec = ConnectSpec::new(proxy.url());
    spec.response_timeout = Some(Duration::from_millis(200));
    let locks = Locks::builder(connect(spec).await.unwrap())
        .retry_window(WINDOW)
        .build()
        .unwrap();
    let mutex = locks
        .mutex("adapter:late-release")
        .with_holder(Holder::unique());
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let first = mutex.lock().await.unwrap();
    proxy.set(ProxyFault::HoldRequest(b"EVALSHA".to_vec(), WINDOW * 3));
    first
        .unlock()
        .await
        .expect("the release is sent again on a new connection");
    assert_eq!(proxy.held_requests(), 1, "the first release was held back");
    let second = mutex.lock().await.unwrap();
    // The held copy is delivered now.
    tokio::time::sleep(WINDOW * 3).await;
    let other = fresh_client(connect, &server).await;
    let intruder = other
        .mutex("adapter:late-release")
        .try_lock()
        .await
        .unwrap();
    assert!(
        !(intruder.is_some() && second.is_held()),
        "TWO OWNERS: a release delivered after its window ended a later grant"
    );
    drop(intruder);
    second.unlock().await.unwrap();
}

/// N7 (review 2): plain permits have no lease, so nothing may give up on them. A grant
/// whose reply was lost while the network then stayed down past the retry window is
/// given back once it is up again, and so are permits whose release could not be
/// sent for that long (the caller gets an error; the release goes on).
pub async fn plain_permits_outlive_an_outage_longer_than_the_retry_window(
    connect: &AdapterConnect,
) {
    const WINDOW: Duration = Duration::from_millis(800);
    let (server, proxy, locks) = behind_a_proxy(connect, WINDOW).await;
    let semaphore = locks.semaphore("adapter:outage-permits");
    assert!(semaphore.try_set_permits(2).await.unwrap());
    // Every script is loaded first, so the reply lost is the grant's.
    semaphore.acquire(1).await.unwrap().release().await.unwrap();
    let observer = fresh_client(connect, &server).await;
    let available = || async {
        observer
            .semaphore("adapter:outage-permits")
            .available()
            .await
            .unwrap()
    };
    // Whether both permits come back within a few seconds.
    let both_back = || {
        crate::scenarios::eventually(Duration::from_secs(5), || async { available().await == 2 })
    };

    proxy.set(ProxyFault::LoseReplyThenBlackHole(b"EVALSHA".to_vec()));
    let tried = semaphore.try_acquire(1).await;
    assert!(tried.is_err(), "the grant's reply was lost: {tried:?}");
    assert_eq!(available().await, 1, "the grant ran");
    tokio::time::sleep(WINDOW + Duration::from_millis(100)).await;
    proxy.set(ProxyFault::Forward);
    let back = both_back().await;
    assert!(
        back,
        "a grant nobody learnt of was lost: {} of 2",
        available().await
    );

    let permits = semaphore.acquire(2).await.unwrap();
    proxy.set(ProxyFault::BlackHole);
    let released = permits.release().await;
    assert!(released.is_err(), "nothing answered: {released:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.set(ProxyFault::Forward);
    let back = both_back().await;
    assert!(
        back,
        "a release given up lost permits: {} of 2",
        available().await
    );
}

/// A server, a fault proxy in front of it, and a client through the proxy whose calls
/// give up quickly (connect 300 ms, response 200 ms) and which sends a request again for
/// `window`.
async fn behind_a_proxy(
    connect: &AdapterConnect,
    window: Duration,
) -> (RedisServer, FaultProxy, Locks) {
    let server = RedisServer::start().await;
    let proxy = FaultProxy::start(format!("127.0.0.1:{}", server.port()).parse().unwrap()).await;
    let mut spec = ConnectSpec::new(proxy.url());
    spec.connect_timeout = Duration::from_millis(300);
    spec.response_timeout = Some(Duration::from_millis(200));
    let locks = Locks::builder(connect(spec).await.unwrap())
        .retry_window(window)
        .build()
        .unwrap();
    (server, proxy, locks)
}

/// A client of `server` straight, without the proxy.
async fn fresh_client(connect: &AdapterConnect, server: &RedisServer) -> Locks {
    locks(connect, ConnectSpec::new(server.url()))
        .await
        .expect("a direct client")
}

/// Takes `name` with a `try_lock` through `proxy`, losing the grant's reply: the caller
/// gets an error at once, and another client gets the lock within seconds, not after
/// the 30 s lease.
async fn lose_one_grant(locks: &Locks, proxy: &FaultProxy, name: &str) {
    let mutex = locks.mutex(name);
    // Every script is loaded first, so the reply lost is the grant's, not a NOSCRIPT.
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let lost_before = proxy.lost_replies();
    proxy.set(ProxyFault::LoseReplyTo(b"EVALSHA".to_vec()));
    let tried = mutex.try_lock().await;
    assert!(tried.is_err(), "the grant's reply was lost: {tried:?}");
    assert_eq!(proxy.lost_replies(), lost_before + 1);
    let other = locks.mutex(name).with_holder(Holder::unique());
    let taken = tokio::time::timeout(Duration::from_secs(5), other.lock()).await;
    taken
        .expect("a grant nobody learnt of was left for its lease")
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// Holds `name` twice and releases once through `proxy`, losing the release's reply.
async fn lose_one_release(locks: &Locks, proxy: &FaultProxy, name: &str) {
    let mutex = locks.mutex(name).with_holder(Holder::unique());
    // Every script is loaded first, so the reply lost is the release's, not a NOSCRIPT.
    mutex.lock().await.unwrap().unlock().await.unwrap();
    let outer = mutex.lock().await.unwrap();
    let inner = mutex.lock().await.unwrap();
    proxy.set(ProxyFault::LoseReplyTo(b"EVALSHA".to_vec()));
    let lost = inner.unlock().await;
    assert_eq!(proxy.lost_replies(), 1, "no reply was lost: {lost:?}");
    // The client reconnects in the background; ask until it answers.
    let deadline = Instant::now() + Duration::from_secs(5);
    let holds = loop {
        match mutex.hold_count().await {
            Ok(holds) => break holds,
            Err(err) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                drop(err);
            }
            Err(err) => panic!("the client never reconnected: {}", chain(&err)),
        }
    };
    assert_eq!(holds, 1, "the release ran twice");
    assert!(
        lost.is_ok(),
        "a release whose reply was lost is sent again and answered by the latch: {lost:?}"
    );
    assert!(outer.is_held());
    outer.unlock().await.unwrap();
}

/// A server that requires a password, reached without one, is refused at connect (as a
/// wrong password is), not at the first lock; an unreachable host is named in the error.
pub async fn a_missing_password_and_an_unknown_host_fail_at_connect(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    // Set after start: the testkit's readiness check has no password.
    let () = server
        .command(&["CONFIG", "SET", "requirepass", "s3cret"])
        .await;
    let anonymous = ConnectSpec::new(format!("redis://127.0.0.1:{}", server.port()));
    let err = fails_in_time(connect, anonymous).await;
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{}", chain(&err));
    let text = chain(&err).to_lowercase();
    assert!(
        text.contains("auth") || text.contains("password"),
        "the error says authentication failed: {text}"
    );

    let port = lock_testkit::free_port();
    let nowhere = ConnectSpec::new(format!("redis://127.0.0.1:{port}"));
    let err = fails_in_time(connect, nowhere).await;
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", chain(&err));
    assert!(
        chain(&err).contains(&format!("127.0.0.1:{port}")),
        "the error names the address it tried: {}",
        chain(&err)
    );
}

/// Review #9: on a Redis 7 cluster the adapter decides for sharded pub/sub, as Redisson
/// does, so that the two wake each other. A Redisson holder (raw commands) unlocks and
/// announces it with `SPUBLISH`: our waiter, subscribed on the channel's shard, gets the
/// lock at once, not when the 10 s lease would have ended. Our release then reaches a
/// raw `SSUBSCRIBE` on that shard. (Before, both adapters subscribed classically, and
/// neither side heard the other.)
pub async fn a_redisson_peer_on_a_cluster_hears_us_and_is_heard(connect: &AdapterConnect) {
    let cluster = RedisCluster::start(3).await;
    let url = cluster_url(cluster.nodes().iter().map(RedisServer::port));
    let ours = locks(connect, ConnectSpec::new(url)).await.unwrap();
    let name = "sharded:m";
    let channel = "redisson_lock__channel:{sharded:m}";
    let shard = cluster.node_for_key(name).await;
    // A Redisson client holds the lock for 10 s.
    let _: i64 = shard
        .command(&["HSET", name, "5f3c6a1e-0000-4000-8000-000000000003:1", "1"])
        .await;
    let _: i64 = shard.command(&["PEXPIRE", name, "10000"]).await;
    let waiter = spawn_try_waiter(ours.mutex(name), Duration::from_secs(8));
    await_subscriber(shard, "SHARDNUMSUB", channel).await;
    // Redisson's unlock: the hash goes, the release is announced on the shard.
    let _: i64 = shard.command(&["DEL", name]).await;
    let _: i64 = shard.command(&["SPUBLISH", channel, "0"]).await;
    let guard = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the Redisson release woke our waiter")
        .unwrap()
        .unwrap()
        .expect("the lock was free");
    // A Redisson waiter, subscribed on the shard, hears our release.
    let mut subscriber = raw_subscriber(shard.port(), "SSUBSCRIBE", channel).await;
    guard.unlock().await.unwrap();
    let heard = read_until(&mut subscriber, b"", b"smessage").await;
    assert!(
        heard.is_some(),
        "our release did not reach a sharded subscriber"
    );
}

/// A Redisson waiter (a raw `SUBSCRIBE` on the lock's channel) listens beside one of our
/// waiting clients: our release must tell it with `0`, Redisson's unlock message, not
/// with the wake id of our client alone (which Redisson would not take as a release),
/// and our waiter is served too.
pub async fn a_redisson_waiter_hears_our_release_beside_our_waiters(connect: &AdapterConnect) {
    let (server, holder, ours) = server_and_two_clients(connect).await;
    let name = "redisson-beside:m";
    let channel = "redisson_lock__channel:{redisson-beside:m}";
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = spawn_try_waiter(ours.mutex(name), Duration::from_secs(8));
    let mut redisson = raw_subscriber(server.port(), "SUBSCRIBE", channel).await;
    await_subscribers(&server, "NUMSUB", channel, 2).await;
    // Our waiter has asked once more since it subscribed, and is registered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.unwrap();
    let unlock_message = format!("{channel}\r\n$1\r\n0\r\n");
    let heard = read_until(&mut redisson, b"", unlock_message.as_bytes()).await;
    assert!(
        heard.is_some(),
        "the Redisson waiter did not get Redisson's unlock message"
    );
    served_then_released(waiter, Duration::from_secs(2), "our waiter was woken too").await;
}

/// A release that wakes one client alone offers it the lock for a moment: a newcomer's
/// try right after the release finds it taken, although the woken client is slow to come
/// (its requests take 300 ms here), and the woken client gets it. Without the offer the
/// newcomer takes it and the client that was told goes to the back.
pub async fn a_newcomer_cannot_take_a_lock_offered_to_the_client_woken_for_it(
    connect: &AdapterConnect,
) {
    let server = RedisServer::start().await;
    let spec = || ConnectSpec::new(server.url());
    let holder = locks(connect, spec()).await.unwrap();
    let newcomer = locks(connect, spec()).await.unwrap();
    let slow = crate::faulty::FaultyBackend::new(connect(spec()).await.unwrap());
    let woken = Locks::new(Arc::new(slow.clone()));
    let name = "offer:m";
    let channel = "redisson_lock__channel:{offer:m}";
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = spawn_try_waiter(woken.mutex(name), Duration::from_secs(8));
    await_subscriber(&server, "NUMSUB", channel).await;
    // It has asked again since it subscribed, and is registered.
    tokio::time::sleep(Duration::from_millis(100)).await;
    slow.set(crate::faulty::AcquireFault::DelayRequest(
        Duration::from_millis(300),
    ));
    held.unlock().await.unwrap();
    let taken = newcomer.mutex(name).try_lock().await.unwrap();
    assert!(
        taken.is_none(),
        "a newcomer took the lock a release had just offered to the client it woke"
    );
    served_then_released(
        waiter,
        Duration::from_secs(3),
        "the woken client was served",
    )
    .await;
}

/// A release that finds the lock reserved for a starving waiter keeps that reservation
/// for at least an offer's time (100 ms), and no longer: the waiter, woken by this
/// release, must have the time to come, and a waiter that vanished must not keep the
/// lock from everybody. The reservation is written by hand here without an expiry, so
/// that it cannot lapse before the release runs however slow the machine (one with 20 ms
/// left did under load); to the release it is one with less than an offer left. The
/// bounds are checked against the moment the release was sent, so a slow reply only
/// loosens them.
pub async fn a_release_keeps_a_starving_waiters_reservation_for_an_offers_time(
    connect: &AdapterConnect,
) {
    const OFFER: Duration = Duration::from_millis(100);
    let (server, holder, waiting) = server_and_two_clients(connect).await;
    let name = "starving-offer:m";
    let reservation = "redisson_lock_reserved:{starving-offer:m}";
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = spawn_try_waiter(waiting.mutex(name), Duration::from_secs(8));
    await_subscriber(
        &server,
        "NUMSUB",
        "redisson_lock__channel:{starving-offer:m}",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let () = server
        .command(&["SET", reservation, "1:a-starving-waiter"])
        .await;
    let sent = Instant::now();
    held.unlock().await.unwrap();
    let read = "return {redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1])}";
    let (owner, left): (Option<String>, i64) =
        server.command(&["EVAL", read, "1", reservation]).await;
    let since_sent = sent.elapsed();
    // PTTL counts whole milliseconds.
    let rounding = Duration::from_millis(2);
    match owner {
        Some(owner) => {
            assert_eq!(
                owner, "1:a-starving-waiter",
                "the reservation changed hands"
            );
            let left = u64::try_from(left).unwrap_or_else(|_| {
                panic!("the release left a starving waiter's reservation without an expiry")
            });
            let until = since_sent + Duration::from_millis(left) + rounding;
            assert!(
                until >= OFFER,
                "the reservation lasts {until:?} from the release, less than an offer"
            );
            assert!(
                Duration::from_millis(left) <= OFFER,
                "the reservation has {left} ms left, more than an offer"
            );
        }
        None => assert!(
            since_sent + rounding >= OFFER,
            "the reservation lapsed {since_sent:?} after the release, within an offer"
        ),
    }
    served_then_released(
        waiter,
        Duration::from_secs(3),
        "the waiter was served once the reservation lapsed",
    )
    .await;
}

/// The mutex scripts' bookkeeping, read off the server. A grant of a free lock deletes a
/// reservation it cannot read (written by hand here, without its `<start>:` prefix): the
/// grant skips that delete only where it found no reservation at all. A reentrant hold
/// counts down, and the lock hash stays until its last release, which deletes it
/// without counting down first.
pub async fn a_grant_clears_an_unreadable_reservation_and_holds_count_down(
    connect: &AdapterConnect,
) {
    let server = RedisServer::start().await;
    let locks = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let (name, reservation) = ("bookkeeping:m", "redisson_lock_reserved:{bookkeeping:m}");
    let () = server
        .command(&["SET", reservation, "not-a-reservation", "PX", "60000"])
        .await;
    let mutex = locks.mutex(name).with_holder(Holder::unique());
    let first = mutex.lock().await.unwrap();
    let left: i64 = server.command(&["EXISTS", reservation]).await;
    assert_eq!(left, 0, "the grant left an unreadable reservation behind");
    let second = mutex.lock().await.unwrap();
    let holds: Vec<String> = server.command(&["HVALS", name]).await;
    assert_eq!(holds, ["2"], "a reentry counts on the server");
    first.unlock().await.unwrap();
    let holds: Vec<String> = server.command(&["HVALS", name]).await;
    assert_eq!(holds, ["1"], "a release of two holds counts down");
    second.unlock().await.unwrap();
    let kept: i64 = server.command(&["EXISTS", name]).await;
    assert_eq!(kept, 0, "the last release left the lock hash behind");
}

/// A release that wakes one client alone sends one message, on that client's own
/// channel, and nothing on the lock's channel, which every waiting client listens on
/// (each heard every release before, and all but one ignored it). The client woken here
/// is a stand-in written by hand: registered first, listening on the lock's channel and
/// on its own on two bare connections. It never comes, and the live waiter, told
/// nothing, asks again when the holder's lease (1 s) would have ended: it is served
/// then, the offer to the stand-in having lapsed.
pub async fn a_release_that_wakes_one_client_sends_one_message(connect: &AdapterConnect) {
    let mut scene = StandIn::set_up(connect, "one-message:m", true).await;
    scene.release_tells_the_stand_in_alone().await;
    let on_lock_channel = scene
        .on_lock_channel
        .as_mut()
        .expect("listens on the lock's");
    let fanned_out = read_until(on_lock_channel, b"", b"message").await;
    assert!(
        fanned_out.is_none(),
        "the release was also sent on the lock's channel: {:?}",
        fanned_out.map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
    );
    scene.live_waiter_is_served().await;
}

/// The stand-in scenes: a lock held with a 1 s lease (once the stand-in's offer lapses
/// nobody wakes the live waiter, which asks again when that lease would have ended); a
/// stand-in client written by hand, registered first and listening on its own channel on
/// a bare connection (and on the lock's on another, if asked); a live waiter of another
/// client registered behind it.
struct StandIn {
    server: RedisServer,
    _clients: (Locks, Locks),
    held: Option<lock_core::Guard>,
    waiter: Option<crate::scenarios::TryWaiter>,
    channel: String,
    own_channel: String,
    on_own_channel: tokio::net::TcpStream,
    on_lock_channel: Option<tokio::net::TcpStream>,
}

impl StandIn {
    /// Sets the scene up on `name`; returns once the live waiter has asked again since
    /// it subscribed.
    async fn set_up(connect: &AdapterConnect, name: &str, on_lock_channel: bool) -> Self {
        let (server, holder, live) = server_and_two_clients(connect).await;
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let waiting = format!("redisson_lock_waiting:{{{name}}}");
        let stand_in = "distlock-wake:00000000-0000-4000-8000-0000000000aa";
        let held = holder
            .mutex(name)
            .lock_with_lease(Duration::from_secs(1))
            .await
            .unwrap();
        let on_lock_channel = if on_lock_channel {
            Some(raw_subscriber(server.port(), "SUBSCRIBE", &channel).await)
        } else {
            None
        };
        let own_channel = lock_redis_protocol::layout::own_channel(stand_in);
        let on_own_channel = raw_subscriber(server.port(), "SUBSCRIBE", &own_channel).await;
        let _: i64 = server.command(&["ZADD", &waiting, "1", stand_in]).await;
        let waiter = spawn_try_waiter(live.mutex(name), Duration::from_secs(8));
        let listeners = if on_lock_channel.is_some() { 2 } else { 1 };
        await_subscribers(&server, "NUMSUB", &channel, listeners).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        Self {
            server,
            _clients: (holder, live),
            held: Some(held),
            waiter: Some(waiter),
            channel,
            own_channel,
            on_own_channel,
            on_lock_channel,
        }
    }

    /// Releases the lock; the stand-in is told alone, on its own channel.
    async fn release_tells_the_stand_in_alone(&mut self) {
        let held = self.held.take().expect("released once");
        held.unlock().await.unwrap();
        let (own, channel) = (&self.own_channel, &self.channel);
        let told = format!("{own}\r\n${}\r\n{channel}\r\n", channel.len());
        assert!(
            read_until(&mut self.on_own_channel, b"", told.as_bytes())
                .await
                .is_some(),
            "the client woken alone was not told on its own channel"
        );
    }

    /// The live waiter gets the lock once the holder's lease would have ended.
    async fn live_waiter_is_served(mut self) {
        let waiter = self.waiter.take().expect("one waiter");
        served_then_released(
            waiter,
            Duration::from_secs(3),
            "the live waiter was served once the offer lapsed",
        )
        .await;
        drop(self.server);
    }
}

/// A registered client that listens on its own channel but not yet on the lock's (it
/// subscribes after the attempt that registered it is answered) is told alone: the
/// release does not tell every listener of the lock's channel because fewer listen there
/// than are registered. A stand-in plays that client with a raw subscription to its own
/// channel; a live waiter of another client listens on the lock's channel behind it.
pub async fn a_client_not_yet_listening_on_the_locks_channel_is_told_alone(
    connect: &AdapterConnect,
) {
    let mut scene = StandIn::set_up(connect, "not-yet-listening:m", false).await;
    scene.release_tells_the_stand_in_alone().await;
    scene.live_waiter_is_served().await;
}

/// A client subscribes its own channel with its first mutex waiter and keeps it: a later
/// wait subscribes the lock's channel alone (one SUBSCRIBE, not two), and the own channel
/// goes with the client.
pub async fn a_client_keeps_its_own_channel_across_waits(connect: &AdapterConnect) {
    let (server, a, b) = server_and_two_clients(connect).await;
    let name = "own-channel:kept";
    let own_channels = || async {
        let mut channels: Vec<String> = server.command(&["PUBSUB", "CHANNELS"]).await;
        channels.retain(|channel| lock_redis_protocol::layout::is_own_channel(channel));
        channels
    };
    let lock_is_free = || async { server.command::<i64>(&["EXISTS", name]).await == 0 };
    hand_over_to_a_subscribed_waiter(&server, &a, &b, name).await;
    let kept = own_channels().await;
    assert_eq!(kept.len(), 1, "the waiting client's own channel: {kept:?}");
    // The waiter dropped its guard: its release is on its way.
    assert!(eventually(Duration::from_secs(2), lock_is_free).await);
    let before = subscribe_calls(&server).await;
    hand_over_to_a_subscribed_waiter(&server, &a, &b, name).await;
    assert_eq!(
        subscribe_calls(&server).await - before,
        1,
        "a later wait subscribes the lock's channel alone"
    );
    assert_eq!(own_channels().await, kept);
    drop(b);
    assert!(
        eventually(Duration::from_secs(5), || async {
            own_channels().await.is_empty()
        })
        .await,
        "the own channel outlived its client"
    );
}

/// How many SUBSCRIBE commands the server has run (`INFO commandstats`).
async fn subscribe_calls(server: &RedisServer) -> u64 {
    server
        .command_stats()
        .await
        .get("subscribe")
        .map_or(0, |stats| stats.calls)
}

/// A bare connection to the server on `port` that ran `command` (`SUBSCRIBE` or
/// `SSUBSCRIBE`) on `channel`, as a Redisson waiter's does; panics if it was not confirmed.
async fn raw_subscriber(port: u16, command: &str, channel: &str) -> tokio::net::TcpStream {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let request = format!(
        "*2\r\n${}\r\n{command}\r\n${}\r\n{channel}\r\n",
        command.len(),
        channel.len()
    );
    let confirmation = command.to_lowercase();
    let confirmed = read_until(&mut stream, request.as_bytes(), confirmation.as_bytes()).await;
    assert!(confirmed.is_some(), "the raw {command} was not confirmed");
    stream
}

/// Writes `request`, then reads until the bytes read contain `wanted` (within 2 s).
async fn read_until(
    stream: &mut tokio::net::TcpStream,
    request: &[u8],
    wanted: &[u8],
) -> Option<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream.write_all(request).await.ok()?;
    let mut seen = Vec::new();
    let reading = async {
        let mut buffer = [0u8; 512];
        loop {
            let n = stream.read(&mut buffer).await.ok()?;
            if n == 0 {
                return None;
            }
            seen.extend_from_slice(&buffer[..n]);
            if seen.windows(wanted.len()).any(|window| window == wanted) {
                return Some(seen.clone());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), reading)
        .await
        .ok()?
}

/// N8 (second review): two clients connected in a runtime that then shut down go on in
/// another. Their notification readers died with the first runtime; the next wait starts
/// them again on the caller's runtime, so a waiter is woken by the release, not left to
/// find the lock free when it asks again. Checked for clients that had already waited in
/// the first runtime and for a name they never used, on a standalone server and on a
/// cluster (sharded pub/sub where the servers have it).
pub async fn clients_outliving_their_connect_runtime_still_hand_over(connect: &AdapterConnect) {
    let server = RedisServer::start().await;
    let name = "adapter:runtime";
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let waiting = await_subscriber(&server, "NUMSUB", &channel);
    let (a, b) = clients_of_a_runtime_that_stopped(connect, &server.url(), name, waiting);
    hand_over_to_a_subscribed_waiter(&server, &a, &b, name).await;
    hand_over_to_a_subscribed_waiter(&server, &b, &a, "adapter:runtime-new").await;

    let cluster = RedisCluster::start(3).await;
    let url = cluster_url(cluster.nodes().iter().map(RedisServer::port));
    let name = "adapter:runtime-cluster";
    let shard = cluster.node_for_key(name).await;
    let channel = format!("redisson_lock__channel:{{{name}}}");
    let waiting = await_subscriber(shard, "SHARDNUMSUB", &channel);
    let (a, b) = clients_of_a_runtime_that_stopped(connect, &url, name, waiting);
    hand_over_once(
        &a,
        &b,
        name,
        await_subscriber(shard, "SHARDNUMSUB", &channel),
    )
    .await;
}

/// Connects two clients of `url` in a runtime of their own, hands `name` over between
/// them once there (`waiting` resolves once the waiter listens), and shuts that runtime
/// down.
fn clients_of_a_runtime_that_stopped(
    connect: &AdapterConnect,
    url: &str,
    name: &str,
    waiting: impl Future<Output = ()> + Send,
) -> (Locks, Locks) {
    lock_testkit::in_a_runtime_that_stops(async {
        let (a, b) = two_clients(connect, url).await;
        hand_over_once(&a, &b, name, waiting).await;
        (a, b)
    })
}

/// Second review, N5: a server's dataset can go back in time without a restart. M1 and
/// M2 replicate; M2 is promoted beside M1 (a split brain), A locks `x` on M1, M1 becomes
/// M2's replica and takes M2's data (no `x`), then M1 is promoted again. M1's run id
/// never changed, and the quarantine tied to it let B have `x` 0.4 ms later while A's
/// guard still held it. The quarantine now follows the replication id, which every
/// promotion changes: B waits it out, by when A knows its hold is gone.
pub async fn a_rollback_without_a_restart_starts_the_quarantine(connect: &AdapterConnect) {
    let (m1, m2) = (RedisServer::start().await, RedisServer::start().await);
    let lease = Duration::from_millis(1500);
    let quarantine = Duration::from_secs(2);
    let client = async || {
        let spec = ConnectSpec {
            restart_quarantine: Some(quarantine),
            ..ConnectSpec::new(m1.url())
        };
        Locks::builder(connect(spec).await.unwrap())
            .watchdog_lease(lease)
            .build()
            .unwrap()
    };
    let (a, b) = (client().await, client().await);
    replicate(&m2, &m1).await;
    // A fresh server's first grant waits out the quarantine; the epoch then reaches M2.
    tokio::time::timeout(quarantine * 3, a.mutex("rollback:warm-up").lock())
        .await
        .expect("granted after the quarantine")
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let _: i64 = m1.command(&["WAIT", "1", "2000"]).await;
    let _: String = m2.command(&["REPLICAOF", "NO", "ONE"]).await;
    let held = tokio::time::timeout(Duration::from_secs(1), a.mutex("x").lock())
        .await
        .expect("granted at once: no rollback yet")
        .unwrap();
    let _: String = m2
        .command(&["CONFIG", "SET", "repl-diskless-sync-delay", "0"])
        .await;
    replicate(&m1, &m2).await;
    let _: String = m1.command(&["REPLICAOF", "NO", "ONE"]).await;
    let failed_back = Instant::now();
    let taken = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match b.mutex("x").lock().await {
                Ok(guard) => return guard,
                // Requests sent while M1 was a replica may still be answered READONLY.
                Err(err) if err.kind() == ErrorKind::Connection => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(err) => panic!("unexpected error after the failback: {err:?}"),
            }
        }
    })
    .await
    .expect("B gets x after the quarantine");
    assert!(
        !held.is_held(),
        "TWO OWNERS: B got x {:?} after the failback while A's guard held it",
        failed_back.elapsed()
    );
    assert!(
        failed_back.elapsed() >= quarantine * 9 / 10,
        "granted {:?} after the failback, inside the quarantine",
        failed_back.elapsed()
    );
    taken.unlock().await.unwrap();
}

/// Makes `replica` a replica of `master` and waits until it has synchronised.
async fn replicate(replica: &RedisServer, master: &RedisServer) {
    let port = master.port().to_string();
    let _: String = replica.command(&["REPLICAOF", "127.0.0.1", &port]).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = replica.command(&["INFO", "replication"]).await;
        if info.contains("master_link_status:up") {
            return;
        }
        assert!(Instant::now() < deadline, "the replica never synchronised");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
