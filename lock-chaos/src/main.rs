//! `lock-chaos`: fault injection for the lock library, in the spirit of Jepsen.
//!
//! ```text
//! lock-chaos run [--seconds S] [--backend redis|fred|redlock|postgres]
//!                [--kind mutex|fair|rw|semaphore] [--permits P]
//!                [--workers W] [--names K] [--lease-ms L] [--seed N]
//! ```
//!
//! `run` starts its own servers (one Redis node, five for RedLock, or one PostgreSQL for
//! `postgres`), a fenced store process and W worker processes that loop on K names:
//! acquire, check `is_held()`, write to the store with the fencing token, hold a random
//! short time, release. Workers reach the servers through fault proxies. Meanwhile it injects
//! random faults: kill -9 a worker (restarted), SIGSTOP a worker for 2 to 4 leases,
//! `CLIENT KILL` (`pg_terminate_backend`) random connections, restart a node as a crash
//! would (Redis loses its data, PostgreSQL keeps what it committed), SIGSTOP a node
//! briefly, lose the reply to a lock operation after it ran, hold a lock operation back
//! on its connection and deliver it 11 s later (past every answer kept for its retries),
//! and for RedLock kill two of five nodes for a while. At the end it prints one
//! JSON line and exits non-zero unless all three invariants are 0:
//!
//! - `overlaps_both_valid`: two workers held one name and both guards said `is_held()`;
//! - `stale_writes_accepted`: the store accepted a write out of token order;
//! - `stuck_waiters`: a waiter sat through a long free period without being served;
//! - `over_capacity` (kind `semaphore`, an expirable semaphore of P permits per name,
//!   default 2): more than P workers overlapped with permits that all said `is_held()`.
//!
//! `worker` and `store` are the other two roles; `run` starts them.

mod node;
mod rng;
mod runner;
mod store;
mod worker;

use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: lock-chaos run [--seconds S] [--backend redis|fred|redlock|postgres] \
[--kind mutex|fair|rw|semaphore] [--permits P] [--workers W] [--names K] [--lease-ms L] \
[--seed N]";

/// `--flag value` pairs after the role.
fn options(args: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        pairs.push((flag.clone(), value.clone()));
    }
    Ok(pairs)
}

fn number(flag: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|_| format!("{flag} takes a whole number, not {value:?}"))
}

fn run_args(args: &[String]) -> Result<runner::RunArgs, String> {
    let mut run = runner::RunArgs {
        seconds: 60,
        backend: "redis".into(),
        kind: "mutex".into(),
        workers: 6,
        names: 3,
        lease: Duration::from_millis(500),
        seed: rng::seed(),
        permits: 2,
    };
    for (flag, value) in options(args)? {
        match flag.as_str() {
            "--seconds" => run.seconds = number(&flag, &value)?,
            "--backend" => run.backend = value,
            "--kind" => run.kind = value,
            "--workers" => run.workers = number(&flag, &value)? as usize,
            "--names" => run.names = number(&flag, &value)? as usize,
            "--lease-ms" => run.lease = Duration::from_millis(number(&flag, &value)?),
            "--seed" => run.seed = number(&flag, &value)?,
            "--permits" => run.permits = number(&flag, &value)?,
            other => return Err(format!("unknown flag {other}\n{USAGE}")),
        }
    }
    if !["redis", "fred", "redlock", "postgres"].contains(&run.backend.as_str()) {
        return Err(format!(
            "--backend {} is not supported (redis, fred, redlock, postgres)",
            run.backend
        ));
    }
    if !["mutex", "fair", "rw", "semaphore"].contains(&run.kind.as_str()) {
        return Err(format!(
            "--kind {} is not supported (mutex, fair, rw, semaphore)",
            run.kind
        ));
    }
    if run.backend == "redlock" && ["fair", "semaphore"].contains(&run.kind.as_str()) {
        return Err(format!("{} cannot span RedLock nodes", run.kind));
    }
    if run.backend == "postgres" && run.kind == "semaphore" {
        return Err("the PostgreSQL backend has no semaphores yet".into());
    }
    if run.permits == 0 || i64::try_from(run.permits).is_err() {
        return Err("--permits must be a positive count".into());
    }
    if run.workers == 0 || run.names == 0 || run.lease < Duration::from_millis(100) {
        return Err("--workers and --names must be positive, --lease-ms at least 100".into());
    }
    Ok(run)
}

fn worker_args(args: &[String]) -> Result<worker::WorkerArgs, String> {
    let mut worker = worker::WorkerArgs {
        id: String::new(),
        backend: "redis".into(),
        urls: Vec::new(),
        kind: "mutex".into(),
        names: 3,
        store: String::new(),
        lease: Duration::from_millis(500),
        wait: Duration::from_secs(30),
        permits: 2,
    };
    for (flag, value) in options(args)? {
        match flag.as_str() {
            "--id" => worker.id = value,
            "--backend" => worker.backend = value,
            "--urls" => worker.urls = value.split(',').map(str::to_owned).collect(),
            "--kind" => worker.kind = value,
            "--names" => worker.names = number(&flag, &value)? as usize,
            "--store" => worker.store = value,
            "--lease-ms" => worker.lease = Duration::from_millis(number(&flag, &value)?),
            "--permits" => worker.permits = number(&flag, &value)?,
            other => return Err(format!("unknown worker flag {other}")),
        }
    }
    if worker.kind == "semaphore" {
        // A restart loses a semaphore's count, and nothing announces it: a waiter comes
        // back after a few leases to set it again.
        worker.wait = worker.lease * 4;
    }
    if worker.urls.is_empty() || worker.store.is_empty() || worker.id.is_empty() {
        return Err("a worker needs --id, --urls and --store".into());
    }
    Ok(worker)
}

async fn main_inner(args: Vec<String>) -> Result<bool, String> {
    match args.first().map(String::as_str) {
        Some("run") => {
            let (verdict, ok) = runner::run(run_args(&args[1..])?).await?;
            println!("{verdict}");
            Ok(ok)
        }
        Some("worker") => worker::run(worker_args(&args[1..])?).await.map(|()| true),
        Some("store") => {
            let mut stuck = Duration::from_secs(5);
            for (flag, value) in options(&args[1..])? {
                match flag.as_str() {
                    "--stuck-ms" => stuck = Duration::from_millis(number(&flag, &value)?),
                    other => return Err(format!("unknown store flag {other}")),
                }
            }
            store::serve("127.0.0.1:0", stuck).await.map(|()| true)
        }
        _ => Err(USAGE.into()),
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match main_inner(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(msg) => {
            eprintln!("lock-chaos: {msg}");
            ExitCode::from(2)
        }
    }
}
