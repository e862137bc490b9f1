//! The adapter suite: what every Redis adapter must do when connecting, whatever the
//! driver. Bad input is a typed error within the connect timeout; the URL forms reach
//! their deployments; the minimal ACL is enough and a missing permission is named; replica
//! acknowledgement confirms or refuses; TLS works and fails cleanly.
//!
//! An adapter's test file passes an [`AdapterConnect`] to [`adapter_tests!`](crate::adapter_tests).

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use lock_core::{Backend, Error, Locks};
use lock_testkit::RedisServer;

use tokio::time::Instant;

mod acl;
mod connect;
mod contender;
mod faults;
mod fleets;
mod handover;
mod late_listener;
mod peers;
mod redisson_process;
mod replication;
mod wakes;

pub use acl::*;
pub use connect::*;
pub use faults::*;
pub use fleets::*;
pub use handover::*;
pub(crate) use peers::REDISSON_LOCK;
pub use replication::*;
pub use wakes::*;

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
    /// How the scripts reach the server (`None`: the default).
    pub server_code: Option<lock_redis_protocol::ServerCode>,
}

impl ConnectSpec {
    fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            connect_timeout: secs(2),
            response_timeout: None,
            root_certificate: None,
            replica_ack: None,
            restart_quarantine: None,
            server_code: None,
        }
    }

    fn server_code(mut self, code: lock_redis_protocol::ServerCode) -> Self {
        self.server_code = Some(code);
        self
    }
}

/// Connects an adapter as the spec says.
pub type AdapterConnect =
    Arc<dyn Fn(ConnectSpec) -> BoxFuture<'static, Result<Arc<dyn Backend>, Error>> + Send + Sync>;

/// How the adapter suite connects a Redis adapter whose connector is `C`; `trusting`
/// makes a connector trust a PEM root certificate (for `rediss://`).
#[must_use]
pub fn through<C>(trusting: fn(C, Vec<u8>) -> C) -> AdapterConnect
where
    C: lock_core::Connect<Settings = lock_redis_protocol::ConnectorSettings>,
{
    Arc::new(move |spec: ConnectSpec| {
        Box::pin(async move {
            let mut connector = C::new(spec.url.clone()).settings(settings_of(&spec));
            if let Some(pem) = spec.root_certificate {
                connector = trusting(connector, pem);
            }
            Ok(Arc::new(connector.connect().await?) as Arc<dyn Backend>)
        })
    })
}

/// The connector settings a spec asks for.
fn settings_of(spec: &ConnectSpec) -> lock_redis_protocol::ConnectorSettings {
    let mut settings =
        lock_redis_protocol::ConnectorSettings::default().connect_timeout(spec.connect_timeout);
    if let Some(timeout) = spec.response_timeout {
        settings = settings.response_timeout(timeout);
    }
    if let Some(quarantine) = spec.restart_quarantine {
        settings = settings.restart_quarantine(quarantine);
    }
    if let Some(code) = spec.server_code {
        settings = settings.server_code(code);
    }
    match spec.replica_ack {
        Some((replicas, timeout)) => settings.replica_ack(replicas, timeout),
        None => settings,
    }
}

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
            a_missing_command_permission_is_named_in_a_function_too,
            functions_need_no_eval,
            a_library_the_user_may_not_load_is_named_with_the_command_that_loads_it,
            an_acl_without_fcall_gets_scripts,
            a_server_without_functions_gets_scripts,
            a_flushed_library_is_loaded_again,
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
            a_database_the_server_lacks_is_a_config_error,
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
            a_release_hands_the_lock_to_the_waiting_acquisition,
            a_waiter_that_has_gone_loses_the_handed_lock_within_its_place,
            a_later_acquisition_of_the_owner_joins_a_handed_mutex,
            a_handed_writer_is_woken_beside_its_clients_reader,
            nothing_is_handed_over_while_a_redisson_peer_listens,
            mixed_fleets_keep_exclusion_and_wake_each_other,
            mixed_fleets_share_a_mutex_with_a_redisson_process,
            mixed_fleets_give_late_listeners_their_share,
            mixed_fleets_share_a_fair_lock,
            mixed_fleets_share_a_write_lock,
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

/// A server, a client of it, and a second client whose lock acquisitions are counted,
/// for a scenario to wait for its waiter by [`FaultyBackend::listening`].
async fn server_and_counted_clients(
    connect: &AdapterConnect,
) -> (RedisServer, Locks, (Locks, crate::faulty::FaultyBackend)) {
    let server = RedisServer::start().await;
    let holder = locks(connect, ConnectSpec::new(server.url()))
        .await
        .unwrap();
    let counted =
        crate::faulty::FaultyBackend::new(connect(ConnectSpec::new(server.url())).await.unwrap());
    let counted_locks = Locks::new(std::sync::Arc::new(counted.clone()));
    (server, holder, (counted_locks, counted))
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
    let bound = spec.connect_timeout * 2 + secs(1);
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
    hand_over_once(a, b, name, tokio::time::sleep(ms(50))).await;
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
    tokio::time::timeout(secs(2), waiter)
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
    let deadline = Instant::now() + secs(5);
    loop {
        let counts: Vec<redis::Value> = server.command(&["PUBSUB", count, channel]).await;
        if matches!(counts.get(1), Some(redis::Value::Int(n)) if *n >= wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fewer than {wanted} subscribed to {channel} (PUBSUB {count})"
        );
        tokio::time::sleep(ms(10)).await;
    }
}
