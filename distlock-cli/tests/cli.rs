//! The `distlock` command end to end, against real servers it starts: who holds a lock
//! (text and JSON), the held names, watching, force-unlocking with and without
//! confirmation, and its errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // reason: a test fails loudly.

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use distlock::Locks;
use lock_testkit::{MariaDbServer, PostgresServer, RedisCluster, RedisSentinel, RedisServer};
use serde_json::Value;

/// Runs `distlock ARGS` with `stdin` typed in, without `DISTLOCK_URL` unless `url_env`.
async fn distlock(args: &[&str], stdin: &str, url_env: Option<&str>) -> Output {
    let args: Vec<String> = args.iter().map(|&arg| arg.to_owned()).collect();
    let (stdin, url_env) = (stdin.to_owned(), url_env.map(str::to_owned));
    tokio::task::spawn_blocking(move || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
        command
            .args(&args)
            .env_remove("DISTLOCK_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(url) = url_env {
            command.env("DISTLOCK_URL", url);
        }
        let mut child = command.spawn().expect("the distlock binary runs");
        child
            .stdin
            .take()
            .expect("a stdin")
            .write_all(stdin.as_bytes())
            .expect("typed in");
        child.wait_with_output().expect("it ends")
    })
    .await
    .expect("the command's thread")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn json(output: &Output) -> Value {
    assert!(output.status.success(), "{}", text(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("JSON on stdout")
}

/// A client named `orders-7` holding `name`, described in the store.
async fn hold(locks: &Locks, name: &str) -> distlock::Guard {
    let guard = locks.mutex(name).lock().await.unwrap();
    // The client describes itself in a job of its first acquisition.
    tokio::time::sleep(Duration::from_millis(200)).await;
    guard
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_ls_watch_and_force_unlock_on_redis() {
    let server = RedisServer::start().await;
    let url = server.url();
    let backend = distlock::redis::connect_backend(&url).await.unwrap();
    let holder = Locks::builder(backend)
        .client_name("orders-7")
        .build()
        .unwrap();
    let name = "cli:order:42";
    let guard = hold(&holder, name).await;

    let shown = json(&distlock(&["--url", &url, "--json", "show", name], "", None).await);
    assert_eq!(shown["held_as"], "exclusive", "{shown}");
    assert_eq!(shown["holders"][0]["client"]["name"], "orders-7", "{shown}");
    assert_eq!(shown["holders"][0]["client"]["pid"], std::process::id());
    assert_eq!(shown["holders"][0]["client_id"], holder.client_id());
    assert!(shown["lease_left_ms"].as_u64().is_some_and(|ms| ms > 0));
    // DISTLOCK_URL instead of --url; text for people.
    let shown = distlock(&["show", name], "", Some(&url)).await;
    let said = text(&shown.stdout);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(
        said.contains("cli:order:42: exclusive") && said.contains("orders-7"),
        "{said}"
    );

    let listed = json(&distlock(&["--url", &url, "--json", "ls", "cli:"], "", None).await);
    assert_eq!(listed, serde_json::json!([name]));
    let watched = distlock(
        &[
            "--url",
            &url,
            "watch",
            name,
            "--interval-ms",
            "50",
            "--count",
            "3",
        ],
        "",
        None,
    )
    .await;
    assert!(watched.status.success(), "{}", text(&watched.stderr));
    assert_eq!(text(&watched.stdout).matches("held by").count(), 3);

    // Asked, and answered wrong: nothing happens.
    let refused = distlock(&["--url", &url, "force-unlock", name], "order:42\n", None).await;
    assert_eq!(refused.status.code(), Some(3), "{}", text(&refused.stderr));
    assert!(
        text(&refused.stderr).contains("orders-7"),
        "the prompt says who holds it"
    );
    assert!(guard.is_held());
    // Nothing to read (a script without --yes): refused, and told of --yes.
    let unasked = distlock(&["--url", &url, "force-unlock", name], "", None).await;
    assert_eq!(unasked.status.code(), Some(3), "{}", text(&unasked.stderr));
    assert!(
        text(&unasked.stderr).contains("--yes"),
        "{}",
        text(&unasked.stderr)
    );
    assert!(guard.is_held());
    let forced = distlock(
        &["--url", &url, "force-unlock", name],
        "cli:order:42\n",
        None,
    )
    .await;
    assert!(forced.status.success(), "{}", text(&forced.stderr));
    assert!(
        text(&forced.stdout).contains("orders-7"),
        "{}",
        text(&forced.stdout)
    );
    let free = json(&distlock(&["--url", &url, "--json", "show", name], "", None).await);
    assert_eq!(free["held_as"], "free", "{free}");
    let again = json(
        &distlock(
            &["--url", &url, "--json", "force-unlock", name, "--yes"],
            "",
            None,
        )
        .await,
    );
    assert_eq!(again["released"], false);
    drop(guard);
    holder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_on_postgres() {
    let server = PostgresServer::start().await;
    let url = server.url();
    let backend = distlock::postgres::connect_backend(&url).await.unwrap();
    let holder = Locks::builder(backend)
        .client_name("billing-2")
        .fencing(true)
        .build()
        .unwrap();
    let guard = hold(&holder, "cli:invoice:7").await;
    let shown = json(
        &distlock(
            &["--url", &url, "--json", "show", "cli:invoice:7"],
            "",
            None,
        )
        .await,
    );
    assert_eq!(
        shown["holders"][0]["client"]["name"], "billing-2",
        "{shown}"
    );
    assert_eq!(
        shown["fencing_token"],
        guard.fencing_token().unwrap(),
        "{shown}"
    );
    assert!(
        shown["holders"][0]["since_epoch_ms"].as_u64().is_some(),
        "{shown}"
    );
    let listed = json(&distlock(&["--url", &url, "--json", "ls", "cli:"], "", None).await);
    assert_eq!(listed, serde_json::json!(["cli:invoice:7"]));
    guard.unlock().await.unwrap();
    holder.shutdown().await;
}

/// On MySQL (MariaDB): `show` names the holder's client and token, `ls` lists the held
/// name, and `force-unlock` frees it and wakes its waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_ls_and_force_unlock_on_mysql() {
    let server = MariaDbServer::start().await;
    let url = server.url();
    let backend = distlock::mysql::connect_backend(&url).await.unwrap();
    let holder = Locks::builder(backend)
        .client_name("billing-3")
        .fencing(true)
        .build()
        .unwrap();
    let guard = hold(&holder, "cli:invoice:8").await;
    let shown = json(
        &distlock(
            &["--url", &url, "--json", "show", "cli:invoice:8"],
            "",
            None,
        )
        .await,
    );
    assert_eq!(
        shown["holders"][0]["client"]["name"], "billing-3",
        "{shown}"
    );
    assert_eq!(
        shown["fencing_token"],
        guard.fencing_token().unwrap(),
        "{shown}"
    );
    let listed = json(&distlock(&["--url", &url, "--json", "ls", "cli:"], "", None).await);
    assert_eq!(listed, serde_json::json!(["cli:invoice:8"]));
    let released = json(
        &distlock(
            &[
                "--url",
                &url,
                "--json",
                "force-unlock",
                "cli:invoice:8",
                "--yes",
            ],
            "",
            None,
        )
        .await,
    );
    assert_eq!(released["released"], true, "{released}");
    let other = distlock::mysql::connect(&url).await.unwrap();
    let taken = other.mutex("cli:invoice:8").try_lock().await.unwrap();
    assert!(taken.is_some(), "the forced lock is free");
    drop(guard);
    holder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_to_do() {
    let missing = distlock(&["show", "x"], "", None).await;
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        text(&missing.stderr).contains("DISTLOCK_URL"),
        "{}",
        text(&missing.stderr)
    );

    let bad = distlock(&["--url", "http://u:s3cret@h", "show", "x"], "", None).await;
    assert_eq!(bad.status.code(), Some(1));
    let said = text(&bad.stderr);
    assert!(
        said.contains("`http://`")
            && said.contains("redis+cluster://")
            && said.contains("postgres://")
            && !said.contains("s3cret"),
        "{said}"
    );

    let port = lock_testkit::free_port();
    let refused = distlock(
        &["--url", &format!("redis://127.0.0.1:{port}"), "ls"],
        "",
        None,
    )
    .await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        text(&refused.stderr).contains(&format!("127.0.0.1:{port}")),
        "{}",
        text(&refused.stderr)
    );

    let usage = distlock(&["--url", "redis://h", "unlock-everything"], "", None).await;
    assert_eq!(usage.status.code(), Some(2));
}

/// On a cluster, `ls` walks every master: names held on each of three masters (their hash
/// tags put them in different slots) are all listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_and_show_on_a_cluster_walk_every_master() {
    let cluster = RedisCluster::start(3).await;
    let url = cluster.url();
    let backend = distlock::redis::connect_backend(&url).await.unwrap();
    let holder = Locks::builder(backend)
        .client_name("fleet")
        .build()
        .unwrap();
    let names: Vec<String> = (0..12).map(|i| format!("cli:shard:{i}")).collect();
    let mut guards = Vec::new();
    for name in &names {
        guards.push(hold(&holder, name).await);
    }
    let listed = json(&distlock(&["--url", &url, "--json", "ls", "cli:shard:"], "", None).await);
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, serde_json::json!(expected));
    let shown = json(&distlock(&["--url", &url, "--json", "show", &names[5]], "", None).await);
    assert_eq!(shown["holders"][0]["client"]["name"], "fleet", "{shown}");
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    holder.shutdown().await;
}

/// Behind Sentinel, and a hold written in Redisson's layout by a peer that is not this
/// library: shown with its owner id, as a client that did not describe itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_peers_hold_behind_sentinel_is_shown() {
    let sentinel = RedisSentinel::start().await;
    let owner = "3f2a9c1e-0b7d-4e55-9a61-7c2d8e4f1a03:88";
    let () = sentinel
        .master()
        .command(&["HSET", "cli:peer", owner, "1"])
        .await;
    let () = sentinel
        .master()
        .command(&["PEXPIRE", "cli:peer", "30000"])
        .await;
    let url = sentinel.url();
    let shown = distlock(&["--url", &url, "show", "cli:peer"], "", None).await;
    let said = text(&shown.stdout);
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    assert!(
        said.contains(owner) && said.contains("did not describe itself"),
        "{said}"
    );
    let peer = json(&distlock(&["--url", &url, "--json", "show", "cli:peer"], "", None).await);
    assert_eq!(peer["holders"][0]["owner"], owner);
    assert_eq!(peer["holders"][0]["client"], Value::Null);
}

/// `functions load` puts the lock functions on every primary of a cluster, where a
/// client whose user may only call them finds them; on PostgreSQL it says it is Redis's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_load_puts_the_library_on_every_primary() {
    let cluster = RedisCluster::start(3).await;
    let url = cluster.url();
    let loaded = json(&distlock(&["--url", &url, "--json", "functions", "load"], "", None).await);
    let library = lock_redis_protocol::script::library().name();
    assert_eq!(loaded["library"], library, "{loaded}");
    for node in cluster.nodes() {
        let listed: Vec<redis::Value> = node
            .command(&["FUNCTION", "LIST", "LIBRARYNAME", library])
            .await;
        assert_eq!(
            listed.len(),
            1,
            "loaded on the node of port {}",
            node.port()
        );
    }
    let again = distlock(&["--url", &url, "functions", "load"], "", None).await;
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(text(&again.stdout).contains("loaded on every primary"));

    let postgres = PostgresServer::start().await;
    let refused = distlock(&["--url", &postgres.url(), "functions", "load"], "", None).await;
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("for Redis"),
        "{}",
        text(&refused.stderr)
    );
}
