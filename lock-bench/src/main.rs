//! `lock-bench`: the benchmark behind `cargo xtask bench`.
//!
//! Starts its own redis-server processes (never 6379) and a PostgreSQL (never 5432),
//! runs each scenario for each contender (this library on the redis adapter with the
//! `rslock` crate as the peer; on PostgreSQL with PostgreSQL's advisory locks),
//! and writes `target/bench/report.json`, `report.md` and `report.svg`. Every target is
//! a ratio of figures measured in the same run.
//!
//! ```text
//! lock-bench [--quick] [--scenario NAME] [--out DIR]
//! ```

mod alloc;
mod bare;
mod contended;
mod postgres;
mod renewals;
mod report;
mod scenarios;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use lock_testkit::RedisServer;
use scenarios::{Results, Scale};

const SCENARIOS: [&str; 7] = [
    "uncontended",
    "contended",
    "handoff",
    "watchdog",
    "redlock",
    "waiters",
    "postgres",
];

#[tokio::main]
async fn main() -> ExitCode {
    let mut quick = false;
    let mut only: Option<String> = None;
    let mut out = PathBuf::from("target/bench");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--scenario" => only = args.next(),
            "--out" => out = args.next().map_or(out, PathBuf::from),
            other => {
                eprintln!("lock-bench: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    if let Some(name) = &only
        && !SCENARIOS.contains(&name.as_str())
    {
        eprintln!("lock-bench: unknown scenario {name} (one of {SCENARIOS:?})");
        return ExitCode::from(2);
    }
    let scale = if quick {
        Scale {
            seconds: 2.0,
            watchdog_locks: 2_000,
            watchdog_seconds: 4,
            waiters: 2_000,
        }
    } else {
        Scale {
            seconds: 5.0,
            watchdog_locks: 10_000,
            watchdog_seconds: 12,
            waiters: 10_000,
        }
    };
    let mut all: BTreeMap<String, Results> = BTreeMap::new();
    for name in SCENARIOS {
        if only.as_deref().is_some_and(|o| o != name) {
            continue;
        }
        eprintln!("lock-bench: {name}...");
        let started = std::time::Instant::now();
        // A fresh server per scenario, so that none inherits another's keys or stats.
        let results = if name == "redlock" {
            let mut nodes = Vec::new();
            for _ in 0..5 {
                nodes.push(RedisServer::start().await);
            }
            scenarios::redlock(&nodes, scale).await
        } else if name == "postgres" {
            let server = lock_testkit::PostgresServer::start().await;
            postgres::postgres(&server, scale).await
        } else {
            let server = RedisServer::start().await;
            match name {
                "uncontended" => scenarios::uncontended(&server, scale).await,
                "contended" => contended::contended(&server, scale).await,
                "handoff" => scenarios::handoff(&server, scale).await,
                "watchdog" => scenarios::watchdog(&server, scale).await,
                _ => scenarios::waiters(&server, scale).await,
            }
        };
        eprintln!(
            "lock-bench: {name} done in {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            serde_json::to_string(&results).unwrap_or_default()
        );
        all.insert(name.to_owned(), results);
    }
    match report::write(&out, quick, &all) {
        Ok(summary) => {
            eprintln!("{summary}");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("lock-bench: writing the report: {err}");
            ExitCode::FAILURE
        }
    }
}
