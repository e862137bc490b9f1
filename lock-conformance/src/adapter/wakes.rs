//! Waking: Redisson peers hear us and we hear them, a release wakes one client with one
//! message and offers it the lock, and a client keeps its own channel.

use crate::timing::{ms, secs};
use std::sync::Arc;
use std::time::Duration;

use lock_core::{Holder, Locks};
use lock_testkit::{RedisCluster, RedisServer};
use tokio::time::Instant;

use super::{
    AdapterConnect, ConnectSpec, await_subscriber, await_subscribers,
    hand_over_to_a_subscribed_waiter, locks, server_and_counted_clients, server_and_two_clients,
};
use crate::scenarios::{eventually, served_then_released, spawn_try_waiter};

/// Review #9: on a Redis 7 cluster the adapter decides for sharded pub/sub, as Redisson
/// does, so that the two wake each other. A Redisson holder (raw commands) unlocks and
/// announces it with `SPUBLISH`: our waiter, subscribed on the channel's shard, gets the
/// lock at once, not when the 10 s lease would have ended. Our release then reaches a
/// raw `SSUBSCRIBE` on that shard. (Before, both adapters subscribed classically, and
/// neither side heard the other.)
pub async fn a_redisson_peer_on_a_cluster_hears_us_and_is_heard(connect: &AdapterConnect) {
    let cluster = RedisCluster::start(3).await;
    let url = cluster.url();
    let ours = locks(connect, ConnectSpec::new(url)).await.unwrap();
    let name = "sharded:m";
    let channel = "redisson_lock__channel:{sharded:m}";
    let shard = cluster.node_for_key(name).await;
    // A Redisson client holds the lock for 10 s.
    let _: i64 = shard
        .command(&["HSET", name, "5f3c6a1e-0000-4000-8000-000000000003:1", "1"])
        .await;
    let _: i64 = shard.command(&["PEXPIRE", name, "10000"]).await;
    let waiter = spawn_try_waiter(ours.mutex(name), secs(8));
    await_subscriber(shard, "SHARDNUMSUB", channel).await;
    // Redisson's unlock: the hash goes, the release is announced on the shard.
    let _: i64 = shard.command(&["DEL", name]).await;
    let _: i64 = shard.command(&["SPUBLISH", channel, "0"]).await;
    let guard = tokio::time::timeout(secs(2), waiter)
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
    let (server, holder, (ours, counted)) = server_and_counted_clients(connect).await;
    let name = "redisson-beside:m";
    let channel = "redisson_lock__channel:{redisson-beside:m}";
    let held = holder.mutex(name).lock().await.unwrap();
    let waiter = spawn_try_waiter(ours.mutex(name), secs(8));
    let mut redisson = raw_subscriber(server.port(), "SUBSCRIBE", channel).await;
    await_subscribers(&server, "NUMSUB", channel, 2).await;
    // Our waiter has asked once more since it subscribed, and is registered.
    counted.listening().await;
    held.unlock().await.unwrap();
    let unlock_message = format!("{channel}\r\n$1\r\n0\r\n");
    let heard = read_until(&mut redisson, b"", unlock_message.as_bytes()).await;
    assert!(
        heard.is_some(),
        "the Redisson waiter did not get Redisson's unlock message"
    );
    served_then_released(waiter, secs(2), "our waiter was woken too").await;
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
    let waiter = spawn_try_waiter(woken.mutex(name), secs(8));
    await_subscriber(&server, "NUMSUB", channel).await;
    // It has asked again since it subscribed, and is registered.
    slow.listening().await;
    slow.set(crate::faulty::AcquireFault::DelayRequest(ms(300)));
    held.unlock().await.unwrap();
    let taken = newcomer.mutex(name).try_lock().await.unwrap();
    assert!(
        taken.is_none(),
        "a newcomer took the lock a release had just offered to the client it woke"
    );
    served_then_released(waiter, secs(3), "the woken client was served").await;
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
    let waiter = spawn_try_waiter(waiting.mutex(name), secs(8));
    await_subscriber(
        &server,
        "NUMSUB",
        "redisson_lock__channel:{starving-offer:m}",
    )
    .await;
    tokio::time::sleep(ms(100)).await;
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
        secs(3),
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
        let (server, holder, (live, counted)) = server_and_counted_clients(connect).await;
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let waiting = format!("redisson_lock_waiting:{{{name}}}");
        let stand_in = "distlock-wake:00000000-0000-4000-8000-0000000000aa";
        let held = holder.mutex(name).lock_with_lease(secs(1)).await.unwrap();
        let on_lock_channel = if on_lock_channel {
            Some(raw_subscriber(server.port(), "SUBSCRIBE", &channel).await)
        } else {
            None
        };
        let own_channel = lock_redis_protocol::layout::own_channel(stand_in);
        let on_own_channel = raw_subscriber(server.port(), "SUBSCRIBE", &own_channel).await;
        let _: i64 = server.command(&["ZADD", &waiting, "1", stand_in]).await;
        let waiter = spawn_try_waiter(live.mutex(name), secs(8));
        let listeners = if on_lock_channel.is_some() { 2 } else { 1 };
        await_subscribers(&server, "NUMSUB", &channel, listeners).await;
        counted.listening().await;
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
            secs(3),
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
    assert!(eventually(secs(2), lock_is_free).await);
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
        eventually(secs(5), || async { own_channels().await.is_empty() }).await,
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
pub(super) async fn raw_subscriber(
    port: u16,
    command: &str,
    channel: &str,
) -> tokio::net::TcpStream {
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
    tokio::time::timeout(secs(2), reading).await.ok()?
}
