//! RedLock and MultiLock under faults, on real redis-server processes: paused, killed and
//! restarted nodes; racing and overlapping multi-locks.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lock_core::{Backend, ErrorKind, Locks};
use lock_redis::ConnectorSettings;
use lock_redlock::{MultiLock, NodeErrors, NodeRelease, RedLock};
use lock_testkit::RedisServer;
use tokio::time::{Instant, sleep, timeout};

async fn servers(n: usize) -> Vec<RedisServer> {
    let mut servers = Vec::with_capacity(n);
    for _ in 0..n {
        servers.push(RedisServer::start().await);
    }
    servers
}

async fn connect(server: &RedisServer) -> Arc<dyn Backend> {
    let backend = lock_redis::Connector::new(server.url())
        .settings(
            ConnectorSettings::default()
                .connect_timeout(Duration::from_millis(500))
                .response_timeout(Duration::from_millis(500)),
        )
        .connect()
        .await
        .expect("connect to a test node");
    Arc::new(backend)
}

async fn nodes(servers: &[RedisServer]) -> Vec<Arc<dyn Backend>> {
    let mut nodes = Vec::with_capacity(servers.len());
    for server in servers {
        nodes.push(connect(server).await);
    }
    nodes
}

async fn fields(server: &RedisServer, key: &str) -> Vec<String> {
    server.command(&["HKEYS", key]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_and_releases_on_every_node() {
    let servers = servers(5).await;
    let redlock = Arc::new(RedLock::builder(nodes(&servers).await).build().unwrap());
    let locks = Locks::new(redlock.clone());
    let guard = locks.mutex("rl:basic").lock().await.unwrap();
    let owner = guard.owner().to_owned();
    for server in &servers {
        assert_eq!(fields(server, "rl:basic").await, vec![owner.clone()]);
    }
    let valid = guard.valid_for().expect("held");
    assert!(
        valid > Duration::from_secs(29) && valid <= Duration::from_secs(30),
        "{valid:?}"
    );
    let lock_ref = lock_core::LockRef::new(
        lock_core::LockKind::Mutex,
        lock_core::LockName::new("rl:basic").unwrap(),
        lock_core::Owner::new(locks.client_id(), owner.rsplit_once(':').unwrap().1),
    );
    guard.unlock().await.unwrap();
    // Written once every node has answered; the release returned when three had.
    let deadline = Instant::now() + Duration::from_secs(5);
    let report = loop {
        if let Some(report) = redlock.last_release(&lock_ref) {
            break report;
        }
        assert!(Instant::now() < deadline, "no release report");
        sleep(Duration::from_millis(10)).await;
    };
    for server in &servers {
        assert!(fields(server, "rl:basic").await.is_empty());
    }
    assert_eq!(report.len(), 5);
    assert!(
        report
            .iter()
            .all(|r| matches!(r, NodeRelease::Done(lock_core::backend::Release::Released)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_paused_nodes_still_acquire_within_the_node_timeout() {
    let servers = servers(5).await;
    let node_timeout = Duration::from_millis(200);
    let redlock = RedLock::builder(nodes(&servers).await)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let locks = redlock.locks();
    let rival = RedLock::builder(nodes(&servers).await)
        .node_timeout(node_timeout)
        .build()
        .unwrap()
        .locks();
    servers[1].pause();
    servers[3].pause();
    let started = Instant::now();
    let guard = timeout(Duration::from_secs(3), locks.mutex("rl:paused").lock())
        .await
        .expect("a majority answers")
        .unwrap();
    assert!(
        started.elapsed() < node_timeout * 4,
        "took {:?}",
        started.elapsed()
    );
    assert!(guard.is_held());
    // Another client cannot take it meanwhile.
    assert!(rival.mutex("rl:paused").try_lock().await.unwrap().is_none());
    servers[1].resume();
    servers[3].resume();
    guard.unlock().await.unwrap();
}

/// How many scripts `server` has run, by `INFO commandstats`.
async fn scripts_run(server: &RedisServer) -> u64 {
    let stats: String = server.command(&["INFO", "commandstats"]).await;
    stats
        .lines()
        .filter(|line| line.starts_with("cmdstat_eval") || line.starts_with("cmdstat_fcall"))
        .filter_map(|line| {
            line.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// A node of a RedLock never wakes one waiting client alone: each node would choose its
/// own client (and keep the lock for it a moment), and no client might then win a
/// majority. So a RedLock's waiter registers its client on no node, and a release is
/// heard by every waiting client. Fails if a node's acquire is sent as a plain waiter's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_waiter_registers_its_client_on_no_node() {
    let servers = servers(3).await;
    let holder = RedLock::builder(nodes(&servers).await)
        .build()
        .unwrap()
        .locks();
    let waiter = RedLock::builder(nodes(&servers).await)
        .build()
        .unwrap()
        .locks();
    let guard = holder.mutex("rl:wake").lock().await.unwrap();
    let waiting = tokio::spawn(async move {
        let guard = waiter.mutex("rl:wake").lock().await?;
        guard.unlock().await
    });
    for server in &servers {
        // The holder's acquisition was the first script this node ran; the waiter's
        // first attempt is the second.
        let deadline = Instant::now() + Duration::from_secs(5);
        while scripts_run(server).await < 2 {
            assert!(Instant::now() < deadline, "the waiter asks every node");
            sleep(Duration::from_millis(10)).await;
        }
        let registered: i64 = server
            .command(&["EXISTS", "redisson_lock_waiting:{rl:wake}"])
            .await;
        assert_eq!(registered, 0, "a client registered on a RedLock node");
    }
    guard.unlock().await.unwrap();
    timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the release wakes the waiter")
        .unwrap()
        .unwrap();
}

/// A release answers once a majority has released, as an acquisition does once a
/// majority granted: two paused nodes do not hold it up.
/// Their releases still run when they come back, and the report tells what they said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_answers_once_a_majority_has_released_and_shutdown_waits_for_the_rest() {
    let servers = servers(5).await;
    let node_timeout = Duration::from_secs(2);
    let redlock = Arc::new(
        RedLock::builder(nodes(&servers).await)
            .node_timeout(node_timeout)
            .build()
            .unwrap(),
    );
    let locks = Locks::new(redlock.clone());
    let guard = locks.mutex("rl:quorum-release").lock().await.unwrap();
    let lock_ref = lock_core::LockRef::new(
        lock_core::LockKind::Mutex,
        lock_core::LockName::new("rl:quorum-release").unwrap(),
        lock_core::Owner::new(locks.client_id(), guard.owner().rsplit_once(':').unwrap().1),
    );
    servers[0].pause();
    servers[4].pause();
    let started = Instant::now();
    guard.unlock().await.unwrap();
    // The paused nodes' connections give up after 500 ms (see `connect`), the node
    // timeout after 2 s: an answer before either did not wait for them.
    assert!(
        started.elapsed() < Duration::from_millis(400),
        "the release waited {:?} for the paused nodes",
        started.elapsed()
    );
    assert!(redlock.last_release(&lock_ref).is_none(), "reported early");
    servers[0].resume();
    servers[4].resume();
    // The client's shutdown waits for the rest of the release (`Backend::settle`): it
    // fails here if it returned before the paused nodes answered.
    timeout(node_timeout * 2, locks.shutdown())
        .await
        .expect("the shutdown ends once every node answered");
    assert!(
        redlock.last_release(&lock_ref).is_some(),
        "no release report"
    );
    for server in &servers {
        assert!(fields(server, "rl:quorum-release").await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_dead_nodes_fail_within_the_wait_with_every_nodes_error() {
    let mut servers = servers(5).await;
    let node_timeout = Duration::from_millis(300);
    let redlock = RedLock::builder(nodes(&servers).await)
        .node_timeout(node_timeout)
        .build()
        .unwrap();
    let locks = redlock.locks();
    // Kill three nodes (dropping a server kills it).
    servers.truncate(2);
    let started = Instant::now();
    let wait = Duration::from_secs(2);
    let err = locks
        .mutex("rl:dead")
        .try_lock_for(wait, None)
        .await
        .expect_err("no majority");
    // An attempt sent again just before the wait ran out may take one node timeout.
    assert!(
        started.elapsed() < wait + node_timeout,
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(err.kind(), ErrorKind::Connection);
    let nodes = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<NodeErrors>())
        .expect("every node's error");
    assert_eq!(nodes.of, 5);
    assert_eq!(
        nodes.nodes.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
    // What the live nodes granted is released (by the nodes' tasks, right after the
    // attempt failed).
    for server in &servers {
        let mut released = false;
        for _ in 0..50 {
            if fields(server, "rl:dead").await.is_empty() {
                released = true;
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        assert!(released, "a failed attempt left its grant on a live node");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_gets_the_lock_back_from_the_majority() {
    let mut servers = servers(5).await;
    let lease = Duration::from_millis(600);
    let redlock = RedLock::builder(nodes(&servers).await)
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    let locks = Locks::builder(Arc::new(redlock))
        .watchdog_lease(lease)
        .build()
        .unwrap();
    let guard = locks.mutex("rl:restart").lock().await.unwrap();
    servers[0].restart().await;
    assert!(
        fields(&servers[0], "rl:restart").await.is_empty(),
        "data lost"
    );
    // Renewals (every lease/3) keep the majority and put the lock back on the node.
    let mut restored = false;
    for _ in 0..30 {
        sleep(lease / 6).await;
        if fields(&servers[0], "rl:restart").await == vec![guard.owner().to_owned()] {
            restored = true;
            break;
        }
    }
    assert!(restored, "the restarted node never got the lock back");
    assert!(guard.is_held());
    guard.unlock().await.unwrap();
}

/// One MultiLock client per task, all over the same three names.
async fn multi_clients(server: &RedisServer, names: &[&str], n: usize) -> Vec<Locks> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let backend = connect(server).await;
        let mut builder = MultiLock::builder();
        for name in names {
            builder = builder.lock(Arc::clone(&backend), *name);
        }
        clients.push(builder.build().expect("valid multi-lock").locks());
    }
    clients
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_clients_race_for_a_multilock_and_one_wins_each_round() {
    let server = RedisServer::start().await;
    let clients = multi_clients(&server, &["order:1", "stock:7", "payment:3"], 10).await;
    // Every client waits up to 1 s; the winner keeps its guard until every attempt has
    // returned, so exactly one can win a round (and, with ordered waiting, one does).
    // The wait is long enough for a loaded machine: with 150 ms, a CI run under load
    // once saw a round nobody won.
    for round in 0..8 {
        let attempts = clients.iter().map(|locks| async move {
            locks
                .mutex("checkout")
                .try_lock_for(Duration::from_secs(1), None)
                .await
                .unwrap()
        });
        let guards: Vec<_> = futures_util::future::join_all(attempts)
            .await
            .into_iter()
            .flatten()
            .collect();
        assert_eq!(guards.len(), 1, "round {round}: {} winners", guards.len());
        for guard in guards {
            guard.unlock().await.unwrap();
        }
        // Losers gave back what they took (a loser that timed out gives its kept parts
        // back in the background, right after its wait ended).
        for key in ["order:1", "stock:7", "payment:3"] {
            let mut free = false;
            for _ in 0..50 {
                if fields(&server, key).await.is_empty() {
                    free = true;
                    break;
                }
                sleep(Duration::from_millis(20)).await;
            }
            assert!(free, "round {round}: {key} left held");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_multilocks_in_opposite_orders_both_progress() {
    let server = RedisServer::start().await;
    let forward = multi_clients(&server, &["a", "b", "c"], 1).await;
    let backward = multi_clients(&server, &["c", "b", "a"], 1).await;
    let inside = Arc::new(AtomicUsize::new(0));
    let run = |locks: Locks, inside: Arc<AtomicUsize>| async move {
        for _ in 0..100 {
            let guard = locks.mutex("abc").lock().await.unwrap();
            assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "both inside");
            inside.fetch_sub(1, Ordering::SeqCst);
            guard.unlock().await.unwrap();
        }
    };
    let both = async {
        tokio::join!(
            tokio::spawn(run(forward[0].clone(), Arc::clone(&inside))),
            tokio::spawn(run(backward[0].clone(), Arc::clone(&inside))),
        )
    };
    let (a, b) = timeout(Duration::from_secs(30), both)
        .await
        .expect("no deadlock or livelock: both finish 100 rounds");
    a.unwrap();
    b.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_multilock_keeps_nothing_after_it_gives_up() {
    let server = RedisServer::start().await;
    let holder = multi_clients(&server, &["x:2"], 1).await;
    let waiter = multi_clients(&server, &["x:1", "x:2", "x:3"], 1).await;
    let held = holder[0].mutex("x").lock().await.unwrap();
    let outcome = waiter[0]
        .mutex("xs")
        .try_lock_for(Duration::from_millis(300), None)
        .await
        .unwrap();
    assert!(outcome.is_none());
    // x:1 (ordered before the busy x:2) was kept while waiting and is given back.
    let mut freed = false;
    for _ in 0..50 {
        if fields(&server, "x:1").await.is_empty() && fields(&server, "x:3").await.is_empty() {
            freed = true;
            break;
        }
        sleep(Duration::from_millis(20)).await;
    }
    assert!(freed, "a waiter that gave up kept parts");
    held.unlock().await.unwrap();
}
