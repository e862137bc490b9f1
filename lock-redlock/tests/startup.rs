//! A RedLock starts and serves locks while a minority of its nodes is down (connection
//! refused) or paused (SIGSTOP: connecting times out), and takes in a node that comes up
//! later, through `LazyNode`. With a majority unreachable it answers a typed connection
//! error, in time.

use std::sync::Arc;
use std::time::Duration;

use lock_core::{Backend, ErrorKind, Locks};
use lock_redis::{ConnectorSettings, RedisBackend};
use lock_redlock::{LazyNode, RedLock};
use lock_testkit::RedisServer;
use tokio::time::Instant;

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

fn lazy(url: String) -> Arc<dyn Backend> {
    Arc::new(LazyNode::new(
        url.clone(),
        RedisBackend::CAPABILITIES,
        move || {
            let url = url.clone();
            async move {
                let node = lock_redis::Connector::new(url)
                    .settings(
                        ConnectorSettings::default()
                            .connect_timeout(CONNECT_TIMEOUT)
                            .response_timeout(CONNECT_TIMEOUT),
                    )
                    .connect()
                    .await?;
                Ok(Arc::new(node) as Arc<dyn Backend>)
            }
        },
    ))
}

/// Whether `server` has the key `name` (the node holds its part of the lock).
async fn holds(server: &RedisServer, name: &str) -> bool {
    server.command::<i64>(&["EXISTS", name]).await == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_serves_with_a_minority_down_and_takes_in_a_late_node() {
    let mut live = Vec::new();
    for _ in 0..3 {
        live.push(RedisServer::start().await);
    }
    let paused = RedisServer::start().await;
    let down_url = {
        let gone = RedisServer::start().await;
        gone.url()
    };
    paused.pause();
    let mut urls: Vec<String> = live.iter().map(RedisServer::url).collect();
    urls.push(paused.url());
    urls.push(down_url);
    let nodes = urls.into_iter().map(lazy).collect();
    let locks = RedLock::builder(nodes)
        .node_timeout(Duration::from_secs(1))
        .build()
        .expect("a RedLock of five nodes")
        .locks();

    // Served by the three live nodes.
    let started = Instant::now();
    let guard = locks
        .mutex("startup:m")
        .lock()
        .await
        .expect("a majority is up");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    for server in &live {
        assert!(holds(server, "startup:m").await);
    }
    guard.unlock().await.expect("unlock");

    // The paused node comes back: a later hold reaches it too.
    paused.resume();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let guard = locks.mutex("startup:m").lock().await.expect("lock");
        let joined = holds(&paused, "startup:m").await;
        guard.unlock().await.expect("unlock");
        if joined {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the resumed node never took part"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_majority_a_redlock_answers_a_connection_error_in_time() {
    let live = [RedisServer::start().await, RedisServer::start().await];
    let mut urls: Vec<String> = live.iter().map(RedisServer::url).collect();
    for _ in 0..3 {
        let gone = RedisServer::start().await;
        urls.push(gone.url());
    }
    let nodes = urls.into_iter().map(lazy).collect();
    let locks = Locks::new(Arc::new(
        RedLock::builder(nodes)
            .node_timeout(Duration::from_secs(1))
            .build()
            .expect("built even with most nodes down"),
    ));
    let started = Instant::now();
    let err = locks
        .mutex("startup:minority")
        .try_lock()
        .await
        .expect_err("two of five nodes are no majority");
    assert_eq!(err.kind(), ErrorKind::Connection, "{}", err.chain());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // The grants of the two live nodes are given back in the background, at once.
    let deadline = Instant::now() + Duration::from_secs(2);
    for server in &live {
        while holds(server, "startup:minority").await {
            assert!(Instant::now() < deadline, "a partial hold was left");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
