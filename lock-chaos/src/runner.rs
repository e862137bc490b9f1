//! The run: starts the servers (Redis nodes or a PostgreSQL), the fenced store and the worker processes, injects
//! random faults until the time is up, then asks the store for its verdict.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use lock_testkit::{FaultProxy, ProxyFault};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use crate::node::Node;
use crate::rng::Rng;

/// What `lock-chaos run` is asked for.
#[derive(Debug, Clone)]
pub(crate) struct RunArgs {
    pub(crate) seconds: u64,
    pub(crate) backend: String,
    pub(crate) kind: String,
    pub(crate) workers: usize,
    pub(crate) names: usize,
    pub(crate) lease: Duration,
    pub(crate) seed: u64,
    /// The permits of each semaphore (kind `semaphore`).
    pub(crate) permits: u64,
}

/// The faults, by name. The last one needs several nodes.
const FAULTS: [&str; 8] = [
    "kill_worker",
    "pause_worker",
    "client_kill",
    "restart_node",
    "pause_node",
    "lose_reply",
    "late_request",
    "kill_minority",
];

/// How long a `late_request` is held back: past every answer a store keeps for a
/// request's retries (the default retry window of 5 s, and twice that for the end of a
/// grant), so that the copy delivered then finds nothing remembered of it.
const LATE_BY: Duration = Duration::from_secs(11);

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
                &self.args.backend,
                "--urls",
                &self.urls(),
                "--kind",
                &self.args.kind,
                "--names",
                &self.args.names.to_string(),
                "--store",
                &self.store_addr,
                "--lease-ms",
                &self.args.lease.as_millis().to_string(),
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

    async fn tell_store(&self, line: &str) -> Result<Option<String>, String> {
        let mut socket = TcpStream::connect(&self.store_addr)
            .await
            .map_err(|e| format!("store: {e}"))?;
        socket
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| format!("store: {e}"))?;
        if line != "REPORT" {
            return Ok(None);
        }
        let mut lines = BufReader::new(socket).lines();
        lines.next_line().await.map_err(|e| format!("store: {e}"))
    }
}

fn signal(pid: u32, sig: &str) {
    // A worker killed while paused is gone by the time its SIGCONT comes: that is fine.
    let _ = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
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
    let node_count = if args.backend == "redlock" { 5 } else { 1 };
    let mut nodes = Vec::with_capacity(node_count);
    let mut proxies = Vec::with_capacity(node_count);
    for _ in 0..node_count {
        let node = Node::start(&args.backend).await;
        let address = format!("127.0.0.1:{}", node.port());
        let upstream = address.parse().map_err(|e| format!("{address}: {e}"))?;
        proxies.push(FaultProxy::start(upstream).await);
        nodes.push(node);
    }
    // A waiter may sit through a free period of a restart quarantine plus a lease plus
    // the fault that caused it; longer is a waiter that was not served.
    let stuck_after = args.lease * 6 + Duration::from_secs(2);
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
    };
    for _ in 0..args.workers {
        run.spawn_worker()?;
    }
    let mut rng = Rng::new(args.seed);
    let mut faults: BTreeMap<&str, u64> = FAULTS.iter().map(|f| (*f, 0)).collect();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.seconds);
    let mut last_report = started;
    // Let everybody connect before the first fault.
    tokio::time::sleep(Duration::from_secs(1)).await;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(rng.range(200, 800))).await;
        let fault = pick(&mut rng, &args.backend);
        inject(&mut run, &mut rng, fault).await?;
        *faults.entry(fault).or_default() += 1;
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "chaos: {:>4} s, faults so far {:?}",
                started.elapsed().as_secs(),
                faults
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
    let mut verdict: serde_json::Value =
        serde_json::from_str(&report).map_err(|e| format!("store report {report:?}: {e}"))?;
    let ok = [
        "overlaps_both_valid",
        "stale_writes_accepted",
        "stuck_waiters",
        "over_capacity",
    ]
    .iter()
    .all(|k| verdict[*k].as_u64() == Some(0));
    verdict["seconds"] = started.elapsed().as_secs().into();
    verdict["ops"] = verdict["sections"].clone();
    verdict["backend"] = args.backend.clone().into();
    verdict["kind"] = args.kind.clone().into();
    verdict["seed"] = args.seed.into();
    verdict["faults"] = serde_json::to_value(&faults).map_err(|e| e.to_string())?;
    let _ = run.store.start_kill();
    Ok((verdict.to_string(), ok))
}

fn pick(rng: &mut Rng, backend: &str) -> &'static str {
    // Killing a minority only makes sense with several nodes.
    let choices = if backend == "redlock" {
        &FAULTS[..]
    } else {
        &FAULTS[..FAULTS.len() - 1]
    };
    choices[rng.range(0, choices.len() as u64) as usize]
}

async fn inject(run: &mut Run, rng: &mut Rng, fault: &str) -> Result<(), String> {
    let lease = run.args.lease;
    match fault {
        "kill_worker" => {
            let i = rng.range(0, run.workers.len() as u64) as usize;
            let mut worker = run.workers.swap_remove(i);
            let _ = worker.child.start_kill();
            let _ = worker.child.wait().await;
            run.tell_store(&format!("DEAD {}", worker.id)).await?;
            run.spawn_worker()?;
        }
        "pause_worker" => {
            // A "GC pause" longer than the lease: the worker must find its guard invalid.
            let i = rng.range(0, run.workers.len() as u64) as usize;
            if let Some(pid) = run.workers[i].child.id() {
                let pause = lease * u32::try_from(rng.range(2, 5)).unwrap_or(2);
                signal(pid, "-STOP");
                tokio::spawn(async move {
                    tokio::time::sleep(pause).await;
                    signal(pid, "-CONT");
                });
            }
        }
        "client_kill" => {
            let node = &run.nodes[rng.range(0, run.nodes.len() as u64) as usize];
            node.kill_some_clients(rng).await;
        }
        "restart_node" => {
            let i = rng.range(0, run.nodes.len() as u64) as usize;
            run.nodes[i].restart().await;
        }
        "pause_node" => {
            let node = &run.nodes[rng.range(0, run.nodes.len() as u64) as usize];
            let pause = Duration::from_millis(rng.range(50, 300));
            node.pause();
            tokio::time::sleep(pause).await;
            node.resume();
        }
        "lose_reply" => {
            // The next lock operation through one node's proxy runs, and its reply is
            // lost with the connection (it fires once).
            let i = rng.range(0, run.proxies.len() as u64) as usize;
            let marker = run.nodes[i].lock_request_marker().to_vec();
            run.proxies[i].set(ProxyFault::LoseReplyTo(marker));
        }
        "late_request" => {
            // The next lock operation through one node's proxy is held back on its
            // connection, which the worker gives up on after its response timeout and
            // replaces; the copy is delivered once every answer kept for it is gone.
            let i = rng.range(0, run.proxies.len() as u64) as usize;
            let marker = run.nodes[i].lock_request_marker().to_vec();
            run.proxies[i].set(ProxyFault::HoldRequest(marker, LATE_BY));
        }
        "kill_minority" => {
            // Two of five nodes die for a while, then come back empty.
            let first = rng.range(0, run.nodes.len() as u64) as usize;
            let second =
                (first + 1 + rng.range(0, run.nodes.len() as u64 - 1) as usize) % run.nodes.len();
            for i in [first, second] {
                signal(run.nodes[i].pid(), "-KILL");
            }
            tokio::time::sleep(Duration::from_millis(rng.range(300, 1500))).await;
            for i in [first, second] {
                run.nodes[i].restart().await;
            }
        }
        _ => {}
    }
    Ok(())
}
