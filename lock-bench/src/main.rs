//! `lock-bench`: the benchmark behind `cargo xtask bench`.
//!
//! Starts its own redis-server processes (never 6379), a PostgreSQL (never 5432) and a
//! MariaDB (never 3306), runs each scenario for each contender (this library on the redis
//! adapter with the `rslock` crate as the peer; on PostgreSQL with PostgreSQL's advisory
//! locks; MariaDB's own locks as the floors of a MySQL backend),
//! and writes `target/bench/report.json`, `report.md` and `report.svg`. Every target is
//! a ratio of figures measured in the same run.
//!
//! ```text
//! lock-bench [--quick] [--scenario NAME] [--out DIR]
//! ```

mod alloc;
mod bare;
mod contended;
mod mysql;
mod postgres;
mod renewals;
mod report;
mod scenarios;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use lock_testkit::RedisServer;
use scenarios::{Results, Scale};

/// The benchmark behind `cargo xtask bench`: every figure beside a peer or a limit
/// measured in the same run.
#[derive(Debug, Parser)]
#[command(name = "lock-bench")]
struct Args {
    /// Shorter measurements (2 s instead of 5) over fewer locks and waiters.
    #[arg(long)]
    quick: bool,
    /// Runs this scenario alone.
    #[arg(long, value_enum)]
    scenario: Option<Scenario>,
    /// Where the report is written.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
}

/// The scenarios, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Uncontended,
    Paced,
    Contended,
    Handoff,
    Watchdog,
    Redlock,
    Waiters,
    Postgres,
    Mysql,
}

impl Scenario {
    /// The name in the report and on the command line.
    fn name(self) -> String {
        self.to_possible_value()
            .map_or_else(|| format!("{self:?}"), |value| value.get_name().to_owned())
    }

    /// Runs this scenario against fresh servers, so that none inherits another's keys
    /// or stats.
    async fn run(self, scale: Scale) -> Results {
        match self {
            Self::Redlock => {
                let mut nodes = Vec::new();
                for _ in 0..5 {
                    nodes.push(RedisServer::start().await);
                }
                scenarios::redlock(&nodes, scale).await
            }
            Self::Postgres => {
                let server = lock_testkit::PostgresServer::start().await;
                postgres::postgres(&server, scale).await
            }
            Self::Mysql => mysql::mysql(&lock_testkit::MariaDbServer::start().await, scale).await,
            Self::Uncontended => scenarios::uncontended(&RedisServer::start().await, scale).await,
            Self::Paced => scenarios::paced(&RedisServer::start().await, scale).await,
            Self::Contended => contended::contended(&RedisServer::start().await, scale).await,
            Self::Handoff => scenarios::handoff(&RedisServer::start().await, scale).await,
            Self::Watchdog => scenarios::watchdog(&RedisServer::start().await, scale).await,
            Self::Waiters => scenarios::waiters(&RedisServer::start().await, scale).await,
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let Args {
        quick,
        scenario,
        out,
    } = Args::parse();
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
    for &each in Scenario::value_variants() {
        if scenario.is_some_and(|only| only != each) {
            continue;
        }
        let name = each.name();
        eprintln!("lock-bench: {name}...");
        let started = std::time::Instant::now();
        let results = each.run(scale).await;
        eprintln!(
            "lock-bench: {name} done in {:.1} s: {}",
            started.elapsed().as_secs_f64(),
            serde_json::to_string(&results).unwrap_or_default()
        );
        all.insert(name, results);
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
