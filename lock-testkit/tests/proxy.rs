//! The fault proxy: forwarding, a reply lost after the command ran, delays, black hole.

use std::time::Duration;

use lock_testkit::{FaultProxy, ProxyFault, RedisServer};
use redis::AsyncCommands;

async fn through(proxy: &FaultProxy) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(proxy.url()).expect("proxy URL");
    let config =
        redis::AsyncConnectionConfig::new().set_response_timeout(Some(Duration::from_millis(500)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connect through the proxy")
}

async fn proxied() -> (RedisServer, FaultProxy) {
    let server = RedisServer::start().await;
    let upstream = format!("127.0.0.1:{}", server.port())
        .parse()
        .expect("address");
    let proxy = FaultProxy::start(upstream).await;
    (server, proxy)
}

#[tokio::test]
async fn forwards_until_told_otherwise() {
    let (server, proxy) = proxied().await;
    assert_ne!(proxy.port(), server.port());
    let mut connection = through(&proxy).await;
    let () = connection
        .set("k", "v")
        .await
        .expect("SET through the proxy");
    let value: String = server.command(&["GET", "k"]).await;
    assert_eq!(value, "v");
}

#[tokio::test]
async fn a_lost_reply_means_the_command_ran_but_the_client_never_heard() {
    let (server, proxy) = proxied().await;
    let mut connection = through(&proxy).await;
    proxy.set(ProxyFault::LoseReplyTo(b"INCR".to_vec()));
    let reply: redis::RedisResult<i64> = connection.incr("counter", 1).await;
    assert!(reply.is_err(), "the reply must not arrive: {reply:?}");
    let counter: i64 = server.command(&["GET", "counter"]).await;
    assert_eq!(counter, 1, "the command must have run on the server");
    assert_eq!(proxy.lost_replies(), 1);
    assert_eq!(proxy.fault(), ProxyFault::Forward, "the fault fires once");
    let mut fresh = through(&proxy).await;
    let counter: i64 = fresh.incr("counter", 1).await.expect("forwarding again");
    assert_eq!(counter, 2);
}

#[tokio::test]
async fn delays_and_black_holes_replies() {
    let (_server, proxy) = proxied().await;
    let mut connection = through(&proxy).await;
    proxy.set(ProxyFault::DelayReplies(Duration::from_millis(200)));
    let started = tokio::time::Instant::now();
    let () = connection
        .set("k", "v")
        .await
        .expect("a delayed reply arrives");
    assert!(started.elapsed() >= Duration::from_millis(200));
    proxy.set(ProxyFault::BlackHole);
    let reply: redis::RedisResult<String> = connection.get("k").await;
    assert!(reply.is_err(), "a black hole answers nothing: {reply:?}");
    proxy.set(ProxyFault::Forward);
    let mut fresh = through(&proxy).await;
    let value: String = fresh.get("k").await.expect("forwarding again");
    assert_eq!(value, "v");
}
