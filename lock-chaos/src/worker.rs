//! A worker process: loops on a few names, taking the lock, writing to the fenced store
//! with its token (after checking `is_held()`), holding a random short time, releasing.

use std::sync::Arc;
use std::time::Duration;

use distlock::{Backend, Lock, Locks};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::args::{BackendKind, Kind, WorkerArgs};

/// The connection to the store: commands in order, replies when a command has one.
struct Store {
    write: OwnedWriteHalf,
    read: tokio::io::Lines<BufReader<OwnedReadHalf>>,
}

impl Store {
    async fn send(&mut self, line: String) -> Result<(), String> {
        self.write
            .write_all(format!("{line}\n").as_bytes())
            .await
            .map_err(|e| format!("store: {e}"))
    }

    async fn ask(&mut self, line: String) -> Result<String, String> {
        self.send(line).await?;
        self.read
            .next_line()
            .await
            .map_err(|e| format!("store: {e}"))?
            .ok_or_else(|| "store: closed".to_owned())
    }
}

pub(crate) async fn backend(args: &WorkerArgs) -> Result<Arc<dyn Backend>, String> {
    // Grants wait out a restart of a node that lost its data: the quarantine covers the
    // longest lease in use.
    let quarantine = args.lease() * 2;
    // The same settings through either adapter's connector.
    let settings = distlock::redis::ConnectorSettings::default()
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_millis(500))
        .ping_interval(Duration::from_secs(1))
        .restart_quarantine(quarantine);
    let redis = |url: String| {
        distlock::redis::Connector::new(url)
            .settings(settings.clone())
            .connect()
    };
    match args.backend {
        BackendKind::Redis => shared(redis(args.urls[0].clone()).await),
        BackendKind::Fred => {
            let fred = distlock::fred::Connector::new(args.urls[0].clone()).settings(settings);
            shared(fred.connect().await)
        }
        BackendKind::Redlock => {
            let mut nodes = Vec::new();
            for url in &args.urls {
                // A node that is down when the worker (re)starts is left out of nothing:
                // keep retrying until it answers, the runner restarts killed nodes.
                nodes.push(loop {
                    match shared(redis(url.clone()).await) {
                        Ok(node) => break node,
                        Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                });
            }
            let redlock = distlock::redlock::RedLock::builder(nodes)
                .node_timeout(Duration::from_millis(100))
                .build()
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(redlock))
        }
        BackendKind::Postgres => {
            let postgres = distlock::postgres::Connector::new(args.urls[0].clone()).pool_size(4);
            shared(postgres.connect().await)
        }
        BackendKind::Mysql => {
            // The runner's quarantine: two leases (see `Node::start`).
            let settings = distlock::mysql::ConnectorSettings::default()
                .pool_size(4)
                .failover_quarantine(args.lease() * 2);
            let mysql = distlock::mysql::Connector::new(args.urls[0].clone()).settings(settings);
            shared(mysql.connect().await)
        }
    }
}

/// A connected backend as the worker keeps it, or why it could not connect.
fn shared<B: Backend>(connected: Result<B, distlock::Error>) -> Result<Arc<dyn Backend>, String> {
    connected
        .map(|backend| Arc::new(backend) as Arc<dyn Backend>)
        .map_err(|err| format!("connect: {err}"))
}

pub(crate) fn handle(locks: &Locks, kind: Kind, name: &str, write: bool) -> Lock {
    match kind {
        Kind::Fair => locks.fair_mutex(name),
        Kind::Rw if write => locks.rw_lock(name).writer(),
        Kind::Rw => locks.rw_lock(name).reader(),
        // Semaphore rounds take no lock (see `semaphore_round`).
        Kind::Mutex | Kind::Semaphore => locks.mutex(name),
    }
}

/// Runs until killed.
pub(crate) async fn run(args: WorkerArgs) -> Result<(), String> {
    let backend = loop {
        match backend(&args).await {
            Ok(backend) => break backend,
            Err(err) => {
                eprintln!("worker {}: {err}; retrying", args.id);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    // A killed worker's place in a fair queue lapses after two leases.
    let locks = Locks::builder(backend)
        .watchdog_lease(args.lease())
        .fair_waiter_timeout(args.lease() * 2)
        .fencing(true)
        .build()
        .map_err(|e| e.to_string())?;
    let socket = TcpStream::connect(&args.store)
        .await
        .map_err(|e| format!("store: {e}"))?;
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let mut store = Store {
        write,
        read: BufReader::new(read).lines(),
    };
    let mut rng = ChaCha8Rng::seed_from_u64(rand::random());
    loop {
        let name = format!("chaos:{}", rng.random_range(0..args.names));
        if args.kind == Kind::Semaphore {
            semaphore_round(&locks, &args, &name, &mut rng, &mut store).await?;
        } else {
            lock_round(&locks, &args, &name, &mut rng, &mut store).await?;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..5))).await;
    }
}

/// How long to hold: mostly short; one in ten spans several renewals, so that faults
/// land while something is held.
fn hold_time(rng: &mut ChaCha8Rng, lease: Duration) -> Duration {
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX).max(51);
    Duration::from_millis(if rng.random_ratio(10, 100) {
        rng.random_range(50..lease_ms)
    } else {
        rng.random_range(0..15)
    })
}

/// One critical section under a lock, reported to the fenced store.
async fn lock_round(
    locks: &Locks,
    args: &WorkerArgs,
    name: &str,
    rng: &mut ChaCha8Rng,
    store: &mut Store,
) -> Result<(), String> {
    let id = &args.id;
    let writes = args.kind != Kind::Rw || rng.random_ratio(20, 100);
    let lock = handle(locks, args.kind, name, writes);
    let asked = Instant::now();
    let guard = match lock.try_lock_for(args.wait(), None).await {
        Ok(Some(guard)) => guard,
        Ok(None) => return Ok(()),
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Ok(());
        }
    };
    let token = guard.fencing_token().unwrap_or(0);
    let (mode, use_it) = if writes {
        ("w".to_owned(), format!("WRITE {name} {id} {token}"))
    } else {
        ("r".to_owned(), format!("READ {name} {id}"))
    };
    let section = Section {
        name,
        mode,
        token,
        use_it,
    };
    section
        .run(store, args, rng, asked, || guard.is_held())
        .await?;
    // Whatever the release answers (the hold may be gone), the section ends here.
    let _ = guard.unlock().await;
    store.send(format!("LEAVE {name} {id}")).await
}

/// One critical section as the fenced store hears of it.
struct Section<'a> {
    name: &'a str,
    /// `w`, `r`, or `sP` for a permit of P.
    mode: String,
    token: u64,
    /// The command sent when the check says held (it has a reply).
    use_it: String,
}

impl Section<'_> {
    /// Reports the wait and the entry, holds for a random time, then reports the check
    /// and uses what is held if `held()` says so.
    async fn run(
        &self,
        store: &mut Store,
        args: &WorkerArgs,
        rng: &mut ChaCha8Rng,
        asked: Instant,
        held: impl Fn() -> bool,
    ) -> Result<(), String> {
        let (name, id) = (self.name, &args.id);
        let waited = asked.elapsed().as_millis();
        store.send(format!("WAIT {name} {id} {waited}")).await?;
        let (token, mode) = (self.token, &self.mode);
        store
            .send(format!("ENTER {name} {id} {token} {mode}"))
            .await?;
        tokio::time::sleep(hold_time(rng, args.lease())).await;
        // Announce the check before making it: if this process pauses in between, the
        // store's record of the valid period ends early, never late.
        store.send(format!("VALID {name} {id}")).await?;
        if held() {
            store.ask(self.use_it.clone()).await.map(drop)
        } else {
            store.send(format!("LOST {name} {id}")).await
        }
    }
}

/// One section under a permit of an expirable semaphore of `args.permits`: the store
/// counts how many valid permit holders overlap.
async fn semaphore_round(
    locks: &Locks,
    args: &WorkerArgs,
    name: &str,
    rng: &mut ChaCha8Rng,
    store: &mut Store,
) -> Result<(), String> {
    let id = &args.id;
    let semaphore = locks.expirable_semaphore(name);
    // As a service does at start; again each round, since a restart loses the count.
    // A wait that runs out comes back here: a count lost while waiting is set again.
    let asked = Instant::now();
    let permit = match semaphore.try_set_permits(args.permits).await {
        Ok(_) => semaphore.acquire(1).wait(args.wait()).await,
        Err(err) => Err(err),
    };
    let permit = match permit {
        Ok(permit) => permit,
        Err(err) if err.is_timeout() => return Ok(()),
        Err(_) => {
            tokio::time::sleep(Duration::from_millis(20)).await;
            return Ok(());
        }
    };
    let section = Section {
        name,
        mode: format!("s{}", args.permits),
        token: 0,
        use_it: format!("READ {name} {id}"),
    };
    section
        .run(store, args, rng, asked, || permit.is_held())
        .await?;
    // Whatever the release answers (the permit may be gone), the section ends here.
    let _ = permit.release().await;
    store.send(format!("LEAVE {name} {id}")).await
}
