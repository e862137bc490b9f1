//! `contend` as the benchmark runs it: the synchronizer kinds against a Redis the test
//! starts, through both adapters, and the mutex on a PostgreSQL and a MariaDB it starts
//! (each in both modes), each reporting work done and no violation.

// reason: a test reports failures by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use lock_testkit::{MariaDbServer, PostgresServer, RedisServer};

/// Runs `contend` with `args` and returns its JSON line.
async fn contend(args: &[&str]) -> serde_json::Value {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_contend"))
        .args(args)
        .output()
        .await
        .expect("contend runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "contend {args:?} failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{stdout:?}: {e}"))
}

/// Runs `contend` for a second with four workers (hold 1 ms, think 1 ms) on `url` with
/// `backend`, `kind` and the `extra` options, and checks that it did work without a
/// violation.
async fn works_without_violations(url: &str, backend: &str, kind: &str, extra: &[&str]) {
    let mut args = vec![
        "--url",
        url,
        "--backend",
        backend,
        "--kind",
        kind,
        "--workers",
        "4",
        "--hold-ms",
        "1",
        "--think-ms",
        "1",
        "--seconds",
        "1",
    ];
    args.extend_from_slice(extra);
    let report = contend(&args).await;
    assert_eq!(report["violations"], 0, "{backend} {kind}: {report}");
    assert_eq!(report["backend"], backend, "{report}");
    assert!(
        report["ops"].as_u64().is_some_and(|ops| ops >= 4),
        "no {kind} work on {backend}: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latch_and_semaphore_kinds_do_work_without_violations() {
    let server = RedisServer::start().await;
    let url = server.url();
    for backend in ["redis", "fred"] {
        for (kind, permits) in [("latch", "1"), ("semaphore", "3")] {
            let extra = ["--permits", permits, "--check-key", "contend:check"];
            works_without_violations(&url, backend, kind, &extra).await;
        }
    }
}

/// Advisory mode: the mutex and the read-write kinds, with hand-offs inside the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_advisory_mode_does_work_without_violations() {
    let server = PostgresServer::start().await;
    for kind in ["mutex", "mixed"] {
        works_without_violations(&server.url(), "postgres-advisory", kind, &[]).await;
    }
}

/// MySQL's two modes: the table mode and the `GET_LOCK` mode, on one MariaDB server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutex_on_mysql_does_work_without_violations_in_both_modes() {
    let server = MariaDbServer::start().await;
    for backend in ["mysql", "mysql-get-lock"] {
        works_without_violations(&server.url(), backend, "mutex", &[]).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mutex_on_postgres_does_work_without_violations() {
    let server = PostgresServer::start().await;
    works_without_violations(&server.url(), "postgres", "mutex", &[]).await;
}
