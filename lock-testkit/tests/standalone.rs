//! Standalone servers: start, restart, pause, pub/sub kill, drop.

use std::net::TcpStream;
use std::time::Duration;

use lock_testkit::{RedisServer, kill_pubsub_clients, redis_server_binary};

#[test]
fn the_binary_is_found() {
    assert!(redis_server_binary().is_some());
}

#[tokio::test]
async fn start_then_set_and_get() {
    let server = RedisServer::start().await;
    assert_ne!(server.port(), 6379);
    assert_eq!(server.url(), format!("redis://127.0.0.1:{}", server.port()));
    let () = server.command(&["SET", "k", "v"]).await;
    let value: String = server.command(&["GET", "k"]).await;
    assert_eq!(value, "v");
    let save: Vec<String> = server.command(&["CONFIG", "GET", "save"]).await;
    assert_eq!(save, ["save", ""]);
    let aof: Vec<String> = server.command(&["CONFIG", "GET", "appendonly"]).await;
    assert_eq!(aof, ["appendonly", "no"]);
}

#[tokio::test]
async fn independent_servers_get_distinct_ports() {
    let a = RedisServer::start().await;
    let b = RedisServer::start().await;
    let c = RedisServer::start().await;
    assert_ne!(a.port(), b.port());
    assert_ne!(b.port(), c.port());
    assert_ne!(a.port(), c.port());
    let () = a.command(&["SET", "k", "a"]).await;
    let missing: Option<String> = b.command(&["GET", "k"]).await;
    assert_eq!(missing, None);
}

#[tokio::test]
async fn builder_adds_config_lines() {
    let server = RedisServer::builder()
        .config_line("maxmemory 64mb")
        .start()
        .await;
    let maxmemory: Vec<String> = server.command(&["CONFIG", "GET", "maxmemory"]).await;
    assert_eq!(maxmemory, ["maxmemory", "67108864"]);
}

#[tokio::test]
async fn restart_loses_data_and_keeps_the_port() {
    let mut server = RedisServer::start().await;
    let (port, pid) = (server.port(), server.pid());
    let () = server.command(&["SET", "k", "v"]).await;
    server.restart().await;
    assert_eq!(server.port(), port);
    assert_ne!(server.pid(), pid);
    let value: Option<String> = server.command(&["GET", "k"]).await;
    assert_eq!(value, None);
}

#[tokio::test]
async fn pause_stalls_commands_until_resume() {
    let server = RedisServer::start().await;
    server.pause();
    let stalled = tokio::time::timeout(
        Duration::from_millis(200),
        server.command::<String>(&["PING"]),
    )
    .await;
    assert!(stalled.is_err(), "a paused server answered: {stalled:?}");
    server.resume();
    let pong: String = tokio::time::timeout(Duration::from_secs(5), server.command(&["PING"]))
        .await
        .expect("the resumed server answers");
    assert_eq!(pong, "PONG");
}

#[tokio::test]
async fn kill_pubsub_clients_cuts_subscribers_only() {
    let server = RedisServer::start().await;
    let client = redis::Client::open(server.url()).unwrap();
    let mut pubsub = client.get_async_pubsub().await.unwrap();
    pubsub.subscribe("news").await.unwrap();
    let mut plain = client.get_multiplexed_async_connection().await.unwrap();
    let channels: Vec<String> = server.command(&["PUBSUB", "CHANNELS"]).await;
    assert_eq!(channels, ["news"]);

    let killed = kill_pubsub_clients(&server).await;
    assert!(killed >= 1, "killed {killed}");

    let channels: Vec<String> = server.command(&["PUBSUB", "CHANNELS"]).await;
    assert!(channels.is_empty(), "still subscribed: {channels:?}");
    // The plain connection survives.
    let pong: String = redis::cmd("PING").query_async(&mut plain).await.unwrap();
    assert_eq!(pong, "PONG");
    assert_eq!(kill_pubsub_clients(&server).await, 0);
}

#[tokio::test]
async fn drop_stops_the_server() {
    let server = RedisServer::start().await;
    let (port, dir) = (server.port(), server.dir().to_owned());
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());
    drop(server);
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} still accepts connections"
    );
    assert!(!dir.exists(), "{} was not removed", dir.display());
}

#[tokio::test]
#[should_panic(expected = "Bad directive or wrong number of arguments")]
async fn a_server_that_cannot_start_panics_with_its_log() {
    let _server = RedisServer::builder()
        .config_line("no-such-directive yes")
        .start()
        .await;
}
