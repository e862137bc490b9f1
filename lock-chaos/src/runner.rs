//! The run: starts the servers (Redis nodes or a PostgreSQL), the fenced store and the worker processes, injects
//! random faults until the time is up, then asks the store for its verdict.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use lock_testkit::{FaultProxy, ProxyFault, Signal};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::args::{BackendKind, Kind, RunArgs, flag_value};
use crate::node::{Node, signal};
use crate::store::StoreReport;

/// The faults the run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
enum Fault {
    KillWorker,
    PauseWorker,
    ClientKill,
    RestartNode,
    PauseNode,
    LoseReply,
    LateRequest,
    /// Needs several nodes: RedLock's.
    KillMinority,
    /// Needs a standby: PostgreSQL's.
    Failover,
    /// An operator's force-unlock of a name (not of a semaphore's permits).
    ForceUnlock,
}

impl Fault {
    /// Whether the fault can act on `backend`'s servers and locks of `kind`.
    fn applies_to(self, backend: BackendKind, kind: Kind) -> bool {
        match self {
            Fault::KillMinority => backend == BackendKind::Redlock,
            Fault::Failover => matches!(backend, BackendKind::Postgres | BackendKind::Mysql),
            // MariaDB's process list under load crashed it once (see lock-mysql's
            // README); its connections are cut by the proxy's faults instead.
            Fault::ClientKill if backend == BackendKind::Mysql => false,
            Fault::ForceUnlock => kind != Kind::Semaphore,
            Fault::KillWorker
            | Fault::PauseWorker
            | Fault::ClientKill
            | Fault::RestartNode
            | Fault::PauseNode
            | Fault::LoseReply
            | Fault::LateRequest => true,
        }
    }
}

const FAULTS: [Fault; 10] = [
    Fault::KillWorker,
    Fault::PauseWorker,
    Fault::ClientKill,
    Fault::RestartNode,
    Fault::PauseNode,
    Fault::LoseReply,
    Fault::LateRequest,
    Fault::KillMinority,
    Fault::Failover,
    Fault::ForceUnlock,
];

/// The run's one line of output: the store's analysis and what the run did.
#[derive(Debug, Serialize)]
struct Verdict {
    #[serde(flatten)]
    report: StoreReport,
    /// The critical sections (the same as the report's `sections`).
    ops: u64,
    /// Names still held by nobody well past every lease once all workers were dead.
    orphaned_holds: usize,
    orphaned: Vec<String>,
    seconds: u64,
    backend: BackendKind,
    kind: Kind,
    seed: u64,
    faults: BTreeMap<Fault, u64>,
}

/// How long a `late_request` is held back: past every answer a store keeps for a
/// request's retries (the default retry window of 5 s, and twice that for the end of a
/// grant), so that the copy delivered then finds nothing remembered of it.
const LATE_BY: Duration = Duration::from_secs(11);

/// How much longer than its lease a revoked holder may take to learn it: the store
/// times the force-unlock and the worker's check on its own clock, each a message away.
const LEARN_SLACK_MS: u64 = 100;

struct Worker {
    id: String,
    child: Child,
}

/// Everything the run owns; dropping it stops every process.
struct Run {
    args: RunArgs,
    nodes: Vec<Node>,
    /// One per node: workers reach the nodes only through them.
    proxies: Vec<FaultProxy>,
    store: Child,
    store_addr: String,
    workers: Vec<Worker>,
    spawned: usize,
    exe: std::path::PathBuf,
    /// The operator's client (force-unlocks), made on first use.
    operator: Option<distlock::Locks>,
}

impl Run {
    fn urls(&self) -> String {
        self.nodes
            .iter()
            .zip(&self.proxies)
            .map(|(node, proxy)| node.url_at(proxy.port()))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn spawn_worker(&mut self) -> Result<(), String> {
        self.spawned += 1;
        let id = format!("w{}", self.spawned);
        let child = Command::new(&self.exe)
            .args([
                "worker",
                "--id",
                &id,
                "--backend",
                &flag_value(&self.args.backend),
                "--urls",
                &self.urls(),
                "--kind",
                &flag_value(&self.args.kind),
                "--names",
                &self.args.names.to_string(),
                "--store",
                &self.store_addr,
                "--lease-ms",
                &self.args.lease_ms.to_string(),
                "--permits",
                &self.args.permits.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spawn worker: {e}"))?;
        self.workers.push(Worker { id, child });
        Ok(())
    }

    /// The operator's client, through the proxies as the workers' are.
    async fn operator(&mut self) -> Result<distlock::Locks, String> {
        if let Some(locks) = &self.operator {
            return Ok(locks.clone());
        }
        let args = crate::args::WorkerArgs {
            id: "operator".to_owned(),
            backend: self.args.backend,
            urls: self.urls().split(',').map(str::to_owned).collect(),
            kind: self.args.kind,
            names: self.args.names,
            store: self.store_addr.clone(),
            lease_ms: self.args.lease_ms,
            permits: self.args.permits,
        };
        let backend = crate::worker::backend(&args).await?;
        let locks = distlock::Locks::builder(backend)
            .watchdog_lease(self.args.lease())
            .build()
            .map_err(|err| format!("the operator's client: {err}"))?;
        self.operator = Some(locks.clone());
        Ok(locks)
    }

    /// Tells the store that the servers of a node were out of reach since `since` (a
    /// restart, a failover's promotion: a slow one under load took 5 s once), when no
    /// waiter could be served.
    async fn tell_outage(&self, since: Instant) -> Result<(), String> {
        let out = since.elapsed().as_millis();
        self.tell_store(&format!("OUTAGE {out}")).await.map(drop)
    }

    async fn tell_store(&self, line: &str) -> Result<Option<String>, String> {
        let mut socket = TcpStream::connect(&self.store_addr)
            .await
            .map_err(|e| format!("store: {e}"))?;
        socket
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| format!("store: {e}"))?;
        // A report, and the start of a force-unlock (recorded before the force-unlock
        // is sent), are answered; the rest is told.
        if line != "REPORT" && !line.starts_with("FORCING ") {
            return Ok(None);
        }
        let mut lines = BufReader::new(socket).lines();
        lines.next_line().await.map_err(|e| format!("store: {e}"))
    }
}

async fn start_store(
    exe: &std::path::Path,
    stuck_after: Duration,
) -> Result<(Child, String), String> {
    let mut store = Command::new(exe)
        .args(["store", "--stuck-ms", &stuck_after.as_millis().to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawn store: {e}"))?;
    let stdout = store.stdout.take().ok_or("store: no stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .map_err(|_| "store: did not start")?
        .map_err(|e| format!("store: {e}"))?
        .ok_or("store: exited")?;
    let port = first
        .strip_prefix("PORT ")
        .ok_or_else(|| format!("store said {first:?}"))?;
    Ok((store, format!("127.0.0.1:{port}")))
}

/// Runs the whole thing and returns the one-line JSON verdict, and whether every
/// invariant held.
pub(crate) async fn run(args: RunArgs) -> Result<(String, bool), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let node_count = if args.backend == BackendKind::Redlock {
        5
    } else {
        1
    };
    let mut nodes = Vec::with_capacity(node_count);
    let mut proxies = Vec::with_capacity(node_count);
    for _ in 0..node_count {
        // As the workers' restart quarantine (two leases): the default (60 s) would
        // leave the locks quarantined most of a run that fails over every few seconds.
        let node = Node::start(args.backend, args.lease() * 2).await;
        let address = format!("127.0.0.1:{}", node.port());
        let upstream = address.parse().map_err(|e| format!("{address}: {e}"))?;
        proxies.push(FaultProxy::start(upstream).await);
        nodes.push(node);
    }
    // A waiter may sit through a free period of a restart quarantine plus a lease plus
    // the fault that caused it; longer is a waiter that was not served.
    let stuck_after = args.lease() * 6 + Duration::from_secs(2);
    let (store, store_addr) = start_store(&exe, stuck_after).await?;
    let mut run = Run {
        args: args.clone(),
        nodes,
        proxies,
        store,
        store_addr,
        workers: Vec::new(),
        spawned: 0,
        exe,
        operator: None,
    };
    for _ in 0..args.workers {
        run.spawn_worker()?;
    }
    let seed = args.seed.unwrap_or_default();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut faults: BTreeMap<Fault, u64> = FAULTS
        .iter()
        .filter(|fault| fault.applies_to(args.backend, args.kind))
        .map(|f| (*f, 0))
        .collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let mut last_report = started;
    // Let everybody connect before the first fault.
    tokio::time::sleep(Duration::from_secs(1)).await;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..800))).await;
        let fault = pick(&mut rng, args.backend, args.kind);
        // For the post-mortem of a stuck waiter: which faults came before.
        run.tell_store(&format!("FAULT {fault:?}")).await?;
        inject(&mut run, &mut rng, fault).await?;
        *faults.entry(fault).or_default() += 1;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "chaos: {:>4} s, faults so far {}",
                started.elapsed().as_secs(),
                serde_json::to_string(&faults).unwrap_or_default()
            );
        }
    }
    // Stop the workers, then read the verdict.
    for worker in &mut run.workers {
        let _ = worker.child.start_kill();
        let _ = worker.child.wait().await;
    }
    for worker in &run.workers {
        run.tell_store(&format!("DEAD {}", worker.id)).await?;
    }
    let report = run.tell_store("REPORT").await?.ok_or("store: no report")?;
    let report: StoreReport =
        serde_json::from_str(&report).map_err(|e| format!("store report {report:?}: {e}"))?;
    let locks = run.operator().await?;
    let orphaned =
        crate::orphans::orphaned_holds(&locks, args.kind, args.names, args.permits, args.lease())
            .await;
    let ok = report.invariants_hold() && orphaned.is_empty();
    let verdict = Verdict {
        ops: report.sections,
        orphaned_holds: orphaned.len(),
        orphaned,
        report,
        seconds: started.elapsed().as_secs(),
        backend: args.backend,
        kind: args.kind,
        seed,
        faults,
    };
    if let Err(err) = run.store.start_kill() {
        eprintln!("chaos: stopping the store: {err}");
    }
    let verdict = serde_json::to_string(&verdict).map_err(|e| e.to_string())?;
    Ok((verdict, ok))
}

fn pick(rng: &mut ChaCha8Rng, backend: BackendKind, kind: Kind) -> Fault {
    let choices: Vec<Fault> = FAULTS
        .iter()
        .copied()
        .filter(|fault| fault.applies_to(backend, kind))
        .collect();
    choices[rng.random_range(0..choices.len())]
}

/// A failover of one node: its primary crashes, its standby is promoted, and every
/// name leads to the promoted server from now on (connections to the crashed one are
/// broken already); then a new standby.
async fn fail_over(run: &mut Run, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let i = rng.random_range(0..run.nodes.len());
    let out = Instant::now();
    if let Some(port) = run.nodes[i].fail_over() {
        let address = format!("127.0.0.1:{port}");
        let upstream = address.parse().map_err(|e| format!("{address}: {e}"))?;
        run.proxies[i].redirect(upstream);
        run.tell_outage(out).await?;
        run.nodes[i].replace_standby().await;
    }
    Ok(())
}

async fn inject(run: &mut Run, rng: &mut ChaCha8Rng, fault: Fault) -> Result<(), String> {
    let lease = run.args.lease();
    match fault {
        Fault::KillWorker => {
            let i = rng.random_range(0..run.workers.len());
            let mut worker = run.workers.swap_remove(i);
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
            run.tell_store(&format!("DEAD {}", worker.id)).await?;
            run.spawn_worker()?;
        }
        Fault::PauseWorker => {
            // A "GC pause" longer than the lease: the worker must find its guard invalid.
            let i = rng.random_range(0..run.workers.len());
            if let Some(pid) = run.workers[i].child.id() {
                let pause = lease * rng.random_range(2..5);
                signal(pid, Signal::SIGSTOP);
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    signal(pid, Signal::SIGCONT);
                });
            }
        }
        Fault::ClientKill => {
            let node = &run.nodes[rng.random_range(0..run.nodes.len())];
            node.kill_some_clients(rng).await;
        }
        Fault::RestartNode => {
            let i = rng.random_range(0..run.nodes.len());
            let out = Instant::now();
            run.nodes[i].restart().await;
            run.tell_outage(out).await?;
        }
        Fault::PauseNode => {
            let node = &run.nodes[rng.random_range(0..run.nodes.len())];
            let pause = Duration::from_millis(rng.random_range(50..300));
            node.pause();
            tokio::time::sleep(pause).await;
            node.resume();
        }
        Fault::LoseReply => {
            // The next lock operation through one node's proxy runs, and its reply is
            // lost with the connection (it fires once).
            let i = rng.random_range(0..run.proxies.len());
            let marker = run.nodes[i].lock_request_marker().to_vec();
            run.proxies[i].set(ProxyFault::LoseReplyTo(marker));
        }
        Fault::LateRequest => {
            // The next lock operation through one node's proxy is held back on its
            // connection, which the worker gives up on after its response timeout and
            // replaces; the copy is delivered once every answer kept for it is gone.
            let i = rng.random_range(0..run.proxies.len());
            let marker = run.nodes[i].lock_request_marker().to_vec();
            run.proxies[i].set(ProxyFault::HoldRequest(marker, LATE_BY));
        }
        Fault::Failover => fail_over(run, rng).await?,
        Fault::ForceUnlock => {
            // An operator deletes a name's lock whoever holds it: its holder is revoked,
            // and must learn it within its lease (its renewals find the hold gone).
            let name = format!("chaos:{}", rng.random_range(0..run.args.names));
            let locks = run.operator().await?;
            let lock = crate::worker::handle(&locks, run.args.kind, &name, true);
            // The operator's connection shares the workers' faults (killed, restarted
            // servers): a failed force-unlock is tried again, twice, as an operator would.
            // The store hears when the last try began.
            let mut forced = Err(distlock::Error::protocol("not tried"));
            for attempt in 0..3 {
                if attempt > 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                run.tell_store(&format!("FORCING {name}")).await?;
                forced = lock.force_unlock().await;
                if forced.is_ok() {
                    break;
                }
            }
            let learn_ms = run.args.lease_ms + LEARN_SLACK_MS;
            match forced {
                // The writer's side was not held (readers held the name): the deletion
                // revoked nobody, and the readers keep their holds.
                Ok(false) => {
                    run.tell_store(&format!("UNFORCED {name}")).await?;
                }
                Ok(true) => {
                    run.tell_store(&format!("FORCED {name} {learn_ms}")).await?;
                }
                // It may have taken effect with its answer lost: every holder counts as
                // revoked.
                Err(err) => {
                    run.tell_store(&format!("FORCED {name} {learn_ms}")).await?;
                    eprintln!("chaos: a force-unlock of {name} failed: {err}");
                }
            }
        }
        Fault::KillMinority => {
            // Two of five nodes die for a while, then come back empty.
            let first = rng.random_range(0..run.nodes.len());
            let second = (first + 1 + rng.random_range(0..run.nodes.len() - 1)) % run.nodes.len();
            for i in [first, second] {
                signal(run.nodes[i].pid(), Signal::SIGKILL);
            }
            tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
            for i in [first, second] {
                run.nodes[i].restart().await;
            }
        }
    }
    Ok(())
}
