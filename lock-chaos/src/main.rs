//! `lock-chaos`: fault injection for distlock, in the spirit of Jepsen.
//!
//! ```text
//! lock-chaos run [--seconds S] [--backend redis|fred|redlock|postgres|mysql]
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
//! and for RedLock kill two of five nodes for a while; an operator force-unlocks a name
//! (not a semaphore's). At the end it prints one JSON line and exits non-zero unless
//! every invariant is 0:
//!
//! - `overlaps_both_valid`: two workers held one name and both guards said `is_held()`;
//! - `stale_writes_accepted`: the store accepted a write out of token order;
//! - `stuck_waiters`: a waiter sat through a long free period without being served;
//! - `revoked_not_learnt`: a worker whose hold a force-unlock revoked (one held when the
//!   force-unlock began, and found held by it) still found its guard held more than its
//!   lease after the force-unlock began (until then it may overlap the next holder:
//!   revocation with notice, its fencing token the older);
//! - `orphaned_holds`: once every worker is dead, a name the operator cannot take within
//!   four leases and two seconds (a hold nobody will release or renew, beyond its lease);
//! - `over_capacity` (kind `semaphore`, an expirable semaphore of P permits per name,
//!   default 2): more than P workers overlapped with permits that all said `is_held()`.
//!
//! `worker` and `store` are the other two roles; `run` starts them.

mod analysis;
mod args;
mod node;
mod orphans;
mod runner;
mod store;
mod worker;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::args::{Cli, Role};

async fn main_inner(role: Role) -> Result<bool, String> {
    match role {
        Role::Run(mut run) => {
            run.check()?;
            run.seed.get_or_insert_with(rand::random);
            let (verdict, ok) = runner::run(run).await?;
            println!("{verdict}");
            Ok(ok)
        }
        Role::Worker(worker) => worker::run(worker).await.map(|()| true),
        Role::Store(store) => {
            let stuck = Duration::from_millis(store.stuck_ms);
            store::serve("127.0.0.1:0", stuck).await.map(|()| true)
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let Cli { role } = Cli::parse();
    match main_inner(role).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(msg) => {
            eprintln!("lock-chaos: {msg}");
            ExitCode::from(2)
        }
    }
}
