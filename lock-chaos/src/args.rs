//! The command line: `run`, and the `worker` and `store` roles that `run` starts.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Serialize;

/// Fault injection for distlock, in the spirit of Jepsen.
#[derive(Debug, Parser)]
#[command(name = "lock-chaos")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) role: Role,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Role {
    /// Starts the servers, the fenced store and the workers, injects faults, and prints
    /// the verdict as one JSON line.
    Run(RunArgs),
    /// A worker process (`run` starts them).
    Worker(WorkerArgs),
    /// The fenced store (`run` starts it).
    Store(StoreArgs),
}

/// The backend under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum BackendKind {
    /// The redis adapter on one Redis node.
    Redis,
    /// The fred adapter on one Redis node.
    Fred,
    /// RedLock over five Redis nodes (redis adapter).
    Redlock,
    /// PostgreSQL.
    Postgres,
    /// MariaDB (the MySQL backend), a primary with a replica.
    Mysql,
}

/// What the workers take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Kind {
    /// The reentrant mutex.
    Mutex,
    /// The fair mutex.
    Fair,
    /// The read-write lock (one round in five writes).
    Rw,
    /// Permits of an expirable semaphore.
    Semaphore,
}

/// The name a value has on the command line, for the workers `run` starts.
pub(crate) fn flag_value(value: &impl ValueEnum) -> String {
    value
        .to_possible_value()
        .map(|possible| possible.get_name().to_owned())
        .unwrap_or_default()
}

/// What `lock-chaos run` is asked for.
#[derive(Debug, Clone, Args)]
pub(crate) struct RunArgs {
    /// How long faults are injected, in seconds.
    #[arg(long, default_value_t = 60)]
    pub(crate) seconds: u64,
    #[arg(long, value_enum, default_value_t = BackendKind::Redis)]
    pub(crate) backend: BackendKind,
    #[arg(long, value_enum, default_value_t = Kind::Mutex)]
    pub(crate) kind: Kind,
    /// Worker processes.
    #[arg(long, default_value_t = 6)]
    pub(crate) workers: usize,
    /// Lock names the workers share.
    #[arg(long, default_value_t = 3)]
    pub(crate) names: usize,
    /// The workers' lease, in milliseconds (at least 100).
    #[arg(long = "lease-ms", default_value_t = 500)]
    pub(crate) lease_ms: u64,
    /// The seed of the fault schedule (default: a new one each run).
    #[arg(long)]
    pub(crate) seed: Option<u64>,
    /// The permits of each semaphore (kind `semaphore`).
    #[arg(long, default_value_t = 2)]
    pub(crate) permits: u64,
}

impl RunArgs {
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// Refuses what the harness cannot run.
    pub(crate) fn check(&self) -> Result<(), String> {
        let kind = flag_value(&self.kind);
        match (self.backend, self.kind) {
            (BackendKind::Redlock, Kind::Fair | Kind::Semaphore) => {
                return Err(format!("{kind} cannot span RedLock nodes"));
            }
            (BackendKind::Postgres, Kind::Semaphore) => {
                return Err("the PostgreSQL backend has no semaphores yet".into());
            }
            (BackendKind::Mysql, Kind::Semaphore) => {
                return Err("the MySQL backend has no semaphores yet".into());
            }
            _ => {}
        }
        if self.permits == 0 || i64::try_from(self.permits).is_err() {
            return Err("--permits must be a positive count".into());
        }
        if self.workers == 0 || self.names == 0 || self.lease_ms < 100 {
            return Err("--workers and --names must be positive, --lease-ms at least 100".into());
        }
        Ok(())
    }
}

/// What a worker is told on its command line.
#[derive(Debug, Clone, Args)]
pub(crate) struct WorkerArgs {
    #[arg(long)]
    pub(crate) id: String,
    #[arg(long, value_enum)]
    pub(crate) backend: BackendKind,
    /// The servers (through their proxies), comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub(crate) urls: Vec<String>,
    #[arg(long, value_enum)]
    pub(crate) kind: Kind,
    #[arg(long, default_value_t = 3)]
    pub(crate) names: usize,
    /// The store's address.
    #[arg(long)]
    pub(crate) store: String,
    #[arg(long = "lease-ms", default_value_t = 500)]
    pub(crate) lease_ms: u64,
    /// The permits of each semaphore (kind `semaphore`).
    #[arg(long, default_value_t = 2)]
    pub(crate) permits: u64,
}

impl WorkerArgs {
    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }

    /// How long a worker waits for a lock. A restart loses a semaphore's count, and
    /// nothing announces it: a semaphore's waiter comes back after a few leases to set
    /// it again.
    pub(crate) fn wait(&self) -> Duration {
        match self.kind {
            Kind::Semaphore => self.lease() * 4,
            Kind::Mutex | Kind::Fair | Kind::Rw => Duration::from_secs(30),
        }
    }
}

/// What the store is told.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// A waiter that sat through a free period longer than this is stuck (ms).
    #[arg(long = "stuck-ms", default_value_t = 5000)]
    pub(crate) stuck_ms: u64,
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{BackendKind, Cli, Kind, Role};

    #[test]
    fn every_flag_of_the_run_is_kept() {
        let cli = Cli::try_parse_from([
            "lock-chaos",
            "run",
            "--seconds",
            "30",
            "--backend",
            "fred",
            "--kind",
            "semaphore",
            "--permits",
            "3",
            "--workers",
            "4",
            "--names",
            "2",
            "--lease-ms",
            "400",
            "--seed",
            "7",
        ])
        .expect("valid flags");
        let Role::Run(run) = cli.role else {
            panic!("not a run: {cli:?}");
        };
        assert_eq!(
            (run.seconds, run.backend, run.kind, run.permits),
            (30, BackendKind::Fred, Kind::Semaphore, 3)
        );
        assert_eq!(
            (run.workers, run.names, run.lease_ms, run.seed),
            (4, 2, 400, Some(7))
        );
        assert!(run.check().is_ok());
    }

    #[test]
    fn what_cannot_run_is_refused() {
        let run = |extra: &[&str]| {
            let args = ["lock-chaos", "run"].iter().chain(extra).copied();
            match Cli::try_parse_from(args).map(|cli| cli.role) {
                Ok(Role::Run(run)) => run.check(),
                Ok(other) => panic!("not a run: {other:?}"),
                Err(err) => Err(err.to_string()),
            }
        };
        assert!(run(&["--backend", "redlock", "--kind", "fair"]).is_err());
        assert!(run(&["--backend", "postgres", "--kind", "semaphore"]).is_err());
        assert!(run(&["--backend", "memcached"]).is_err());
        assert!(run(&["--lease-ms", "50"]).is_err());
        assert!(run(&["--permits", "0"]).is_err());
        assert!(run(&[]).is_ok());
    }
}
