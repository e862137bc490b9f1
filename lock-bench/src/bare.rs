//! Bare clients that send our mutex's acquire and release scripts, with the keys and
//! arguments the adapters send for a free mutex, and nothing else: no lock library
//! around them. They are the floors of the uncontended scenario: what a pair of our
//! scripts costs a client of redis-rs or of fred, beside which the adapters' own cost
//! shows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fred::prelude::{Builder, ClientLike, Config, ConnectionConfig, Options, TcpConfig, Value};
use fred::types::{ClusterHash, CustomCommand};
use lock_core::backend::RequestId;
use lock_core::{LockName, Owner};
use lock_redis_protocol::calls::{self, FixedCall};
use lock_redis_protocol::settings::DEFAULT_RESPONSE_TIMEOUT;
use lock_redis_protocol::{layout, script};
use lock_testkit::RedisServer;
use tokio::time::Instant;

/// How many tasks send pairs at once, as in the adapters' runs.
const TASKS: usize = 64;

/// One acquire of a free mutex and its release, with the keys and arguments the adapters
/// send: the rendered names and the grant's id, from which each call is the protocol's
/// declared struct (so every input sits where its script reads it).
#[derive(Debug)]
pub(crate) struct Pair {
    owner: String,
    lock: String,
    reservation: String,
    waiting: String,
    requests: String,
    token: String,
    grants: String,
    latch: String,
    channel: String,
    grant: String,
}

impl Pair {
    /// A pair on `name` by `owner`, its grant with an id (and so latch keys) of its own.
    pub(crate) fn new(name: &str, owner: &str) -> Self {
        Self::with_grant(name, owner.to_owned(), RequestId::random())
    }

    /// A pair on `name` as the adapters send one outside any holder's scope: by the owner
    /// of its request alone on client `client` (`Owner::of_request`).
    pub(crate) fn sole(name: &str, client: &str) -> Self {
        let grant = RequestId::random();
        let owner = Owner::of_request(client, grant);
        Self::with_grant(name, owner.as_str().to_owned(), grant)
    }

    fn with_grant(name: &str, owner: String, grant: RequestId) -> Self {
        let name = LockName::new(name).expect("a valid lock name");
        Self {
            grants: layout::grants_key(&name, &owner, false),
            owner,
            lock: layout::lock_key(&name).to_owned(),
            reservation: layout::reservation_key(&name),
            waiting: layout::waiting_clients_key(&name),
            requests: layout::waiting_requests_key(&name),
            token: layout::token_key(&name),
            latch: layout::grant_latch_key(&name, grant),
            channel: layout::mutex_channel(&name),
            grant: grant.to_string(),
        }
    }

    /// The acquire, as the adapters send it for the first attempt of a caller that would
    /// wait: its client's wake id, its place, and the grant's latch kept for the default
    /// retry window.
    fn acquire(&self) -> calls::MutexAcquire<'_> {
        calls::MutexAcquire {
            lock: &self.lock,
            reservation: &self.reservation,
            token: &self.token,
            epoch: "bench:epoch",
            waiting: &self.waiting,
            requests: &self.requests,
            grants: &self.grants,
            latch: &self.latch,
            lease_ms: "30000",
            owner: &self.owner,
            starving: "0",
            reservation_ms: "100",
            waited_ms: "0",
            fencing: "0",
            quarantine_ms: "0",
            wake_id: "distlock-wake:bench",
            registered_ms: "35000",
            place_ms: "5000",
            attempt: "1",
            grant: &self.grant,
            latch_ms: "5000",
        }
    }

    /// The release of the acquire's grant.
    fn release(&self) -> calls::MutexRelease<'_> {
        calls::MutexRelease {
            lock: &self.lock,
            waiting: &self.waiting,
            reservation: &self.reservation,
            requests: &self.requests,
            token: &self.token,
            epoch: "bench:epoch",
            grants: &self.grants,
            latch: &self.latch,
            lease_ms: "30000",
            owner: &self.owner,
            channel: &self.channel,
            publish: "publish",
            numsub: "numsub",
            offer_ms: "100",
            quarantine_ms: "0",
            grant: &self.grant,
            latch_ms: "10000",
        }
    }

    /// The acquire's keys and arguments.
    pub(crate) fn acquire_call(&self) -> ([&str; 8], [&str; 13]) {
        let call = self.acquire();
        (call.keys(), call.args())
    }

    /// The release's keys and arguments.
    pub(crate) fn release_call(&self) -> ([&str; 8], [&str; 9]) {
        let call = self.release();
        (call.keys(), call.args())
    }

    /// The acquire, then the release, as redis-rs commands.
    pub(crate) fn redis_commands(&self, (acquire, release): &(String, String)) -> [redis::Cmd; 2] {
        let (acquire_keys, acquire_args) = self.acquire_call();
        let (release_keys, release_args) = self.release_call();
        [
            evalsha(acquire, &acquire_keys, &acquire_args),
            evalsha(release, &release_keys, &release_args),
        ]
    }

    /// The acquire, then the release, as `FCALL`s of our function library.
    fn redis_function_calls(&self) -> [redis::Cmd; 2] {
        let library = script::library();
        let (acquire_keys, acquire_args) = self.acquire_call();
        let (release_keys, release_args) = self.release_call();
        [
            fcall(
                library.function(&script::MUTEX_ACQUIRE),
                &acquire_keys,
                &acquire_args,
            ),
            fcall(
                library.function(&script::MUTEX_RELEASE),
                &release_keys,
                &release_args,
            ),
        ]
    }

    /// The acquire, then the release, as the arguments of fred custom commands.
    fn fred_arguments(&self, (acquire, release): &(String, String)) -> [Vec<Value>; 2] {
        let call = |sha: &str, keys: &[&str], args: &[&str]| {
            let mut call = Vec::with_capacity(2 + keys.len() + args.len());
            call.push(Value::from(sha));
            call.push(Value::from(i64::try_from(keys.len()).unwrap_or(i64::MAX)));
            call.extend(keys.iter().chain(args).map(|text| Value::from(*text)));
            call
        };
        let (acquire_keys, acquire_args) = self.acquire_call();
        let (release_keys, release_args) = self.release_call();
        [
            call(acquire, &acquire_keys, &acquire_args),
            call(release, &release_keys, &release_args),
        ]
    }
}

/// `EVALSHA sha numkeys keys... args...`, a script call as the adapters send it.
pub(crate) fn evalsha<K: AsRef<str>, A: AsRef<str>>(
    sha: &str,
    keys: &[K],
    args: &[A],
) -> redis::Cmd {
    call("EVALSHA", sha, keys, args)
}

/// `FCALL function numkeys keys... args...`, a function call as the adapters send it.
fn fcall<K: AsRef<str>, A: AsRef<str>>(function: &str, keys: &[K], args: &[A]) -> redis::Cmd {
    call("FCALL", function, keys, args)
}

fn call<K: AsRef<str>, A: AsRef<str>>(
    command: &str,
    body: &str,
    keys: &[K],
    args: &[A],
) -> redis::Cmd {
    let mut call = redis::cmd(command);
    call.arg(body).arg(keys.len());
    for key in keys {
        call.arg(key.as_ref());
    }
    for arg in args {
        call.arg(arg.as_ref());
    }
    call
}

/// The SHA1s of the acquire and release scripts, loaded into `server`.
pub(crate) async fn load_scripts(server: &RedisServer) -> Arc<(String, String)> {
    let acquire: String = server
        .command(&["SCRIPT", "LOAD", script::MUTEX_ACQUIRE.source()])
        .await;
    let release: String = server
        .command(&["SCRIPT", "LOAD", script::MUTEX_RELEASE.source()])
        .await;
    Arc::new((acquire, release))
}

/// What a bare client sends for one lock+unlock pair on a name of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BareLock {
    /// Our mutex's acquire and release scripts (`EVALSHA`).
    OurScripts,
    /// The same two as functions of our library (`FCALL`).
    OurFunctions,
    /// Redisson's lock and unlock scripts, the unlock with its latch.
    Redisson,
    /// `SET NX PX`, then a compare-and-delete script: the least a lock can do.
    SetNx,
}

/// The compare-and-delete script of [`BareLock::SetNx`]'s release.
const COMPARE_AND_DELETE: &str = "\
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end \
return 0";

/// What the bare clients need on the server: the SHA1s of the scripts they send (the
/// function library is loaded too).
#[derive(Debug)]
pub(crate) struct Loaded {
    ours: Arc<(String, String)>,
    redisson: (String, String),
    compare_and_delete: String,
}

impl Loaded {
    /// Loads every script and the function library into `server`.
    pub(crate) async fn into(server: &RedisServer) -> Arc<Self> {
        let load = |source: &'static str| async move {
            server.command::<String>(&["SCRIPT", "LOAD", source]).await
        };
        let library = script::library().source();
        let _: String = server
            .command(&["FUNCTION", "LOAD", "REPLACE", library])
            .await;
        Arc::new(Self {
            ours: load_scripts(server).await,
            redisson: (
                load(lock_testkit::redisson::LOCK).await,
                load(lock_testkit::redisson::UNLOCK).await,
            ),
            compare_and_delete: load(COMPARE_AND_DELETE).await,
        })
    }
}

impl BareLock {
    /// The pair's two commands on `name`, each pair with an owner, request ids and
    /// latches of its own, as a client makes them.
    pub(crate) fn commands(self, loaded: &Loaded, name: &str) -> [redis::Cmd; 2] {
        match self {
            Self::OurScripts => Pair::sole(name, "bench-client").redis_commands(&loaded.ours),
            Self::OurFunctions => Pair::sole(name, "bench-client").redis_function_calls(),
            Self::Redisson => {
                let owner = "bench-owner:1";
                let channel = format!("redisson_lock__channel:{{{name}}}");
                let latch = format!("redisson_unlock_latch:{{{name}}}:{}", RequestId::random());
                let (lock, unlock) = &loaded.redisson;
                [
                    evalsha(lock, &[name], &["30000", owner]),
                    evalsha(
                        unlock,
                        &[name, &channel, &latch],
                        &["0", "30000", owner, "publish", "20000"],
                    ),
                ]
            }
            Self::SetNx => {
                let owner = RequestId::random().to_string();
                let mut set = redis::cmd("SET");
                set.arg(name).arg(&owner).arg("NX").arg("PX").arg(30_000);
                [set, evalsha(&loaded.compare_and_delete, &[name], &[&owner])]
            }
        }
    }

    /// Whether the replies are a grant and a release.
    pub(crate) fn succeeded(self, acquired: &redis::Value, released: &redis::Value) -> bool {
        match self {
            Self::OurScripts | Self::OurFunctions => redis_pair_succeeded(acquired, released),
            Self::Redisson => *acquired == redis::Value::Nil && *released == redis::Value::Int(1),
            Self::SetNx => *acquired == redis::Value::Okay && *released == redis::Value::Int(1),
        }
    }

    /// A short name for figures and errors.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::OurScripts => "our scripts",
            Self::OurFunctions => "our functions",
            Self::Redisson => "Redisson's scripts",
            Self::SetNx => "SET NX PX + compare-and-delete",
        }
    }
}

/// Whether a pair's answers are a grant (`'1:0'`: one hold, no token) and a release
/// (`0`).
pub(crate) fn redis_pair_succeeded(acquired: &redis::Value, released: &redis::Value) -> bool {
    matches!(acquired, redis::Value::BulkString(grant) if grant.starts_with(b"1:0:"))
        && *released == redis::Value::Int(0)
}

/// Pairs per second of [`TASKS`] tasks, each on a name of its own, sending one pair
/// after the other through one redis-rs multiplexed connection (as the redis adapter
/// does) for `duration`.
pub(crate) async fn redis_pairs_per_second(
    server: &RedisServer,
    duration: Duration,
    lock: BareLock,
) -> f64 {
    let loaded = Loaded::into(server).await;
    let connection = redis_connection(server).await;
    run_tasks(duration, "redis-rs", |task, pairs| {
        let (loaded, mut connection) = (Arc::clone(&loaded), connection.clone());
        async move {
            let name = format!("bench:bare-redis:{task}");
            while pairs.keep_going() {
                pairs.count(send_pair(&mut connection, lock, &loaded, &name).await?)?;
            }
            Ok(())
        }
    })
    .await
}

/// A redis-rs multiplexed connection to `server`, as the redis adapter opens.
pub(crate) async fn redis_connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .expect("the server's url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect the bare redis-rs client")
}

/// Sends one pair of `lock` on `name`, one command after the other; whether it was
/// granted and released.
pub(crate) async fn send_pair(
    connection: &mut redis::aio::MultiplexedConnection,
    lock: BareLock,
    loaded: &Loaded,
    name: &str,
) -> Result<bool, String> {
    let [acquire, release] = lock.commands(loaded, name);
    let acquired: redis::Value = acquire
        .query_async(connection)
        .await
        .map_err(|e| format!("{}: {e}", lock.label()))?;
    let released: redis::Value = release
        .query_async(connection)
        .await
        .map_err(|e| format!("{}: {e}", lock.label()))?;
    Ok(lock.succeeded(&acquired, &released))
}

/// How a bare fred client's socket sends small writes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FredSocket {
    /// fred's default: the kernel holds a small write while an earlier one is unacknowledged
    /// (Nagle), which merges the one write fred makes per script call.
    Default,
    /// `TCP_NODELAY`, as the fred adapter and redis-rs set it: every write leaves at once.
    NoDelay,
}

/// Pairs per second of [`TASKS`] tasks as in [`redis_pairs_per_second`], through one fred
/// client with the per-call options of the fred adapter (one attempt, the default
/// response timeout) and custom `EVALSHA` commands, as the adapter sends them, over a
/// socket set as `socket` says.
pub(crate) async fn fred_pairs_per_second(
    server: &RedisServer,
    duration: Duration,
    socket: FredSocket,
) -> f64 {
    let scripts = load_scripts(server).await;
    let config = Config::from_url(&server.url()).expect("the server's url");
    let mut builder = Builder::from_config(config);
    if let FredSocket::NoDelay = socket {
        builder.set_connection_config(ConnectionConfig {
            tcp: TcpConfig {
                nodelay: Some(true),
                ..TcpConfig::default()
            },
            ..ConnectionConfig::default()
        });
    }
    let client = builder.build().expect("a fred client");
    client.init().await.expect("connect the bare fred client");
    let options = Options {
        max_attempts: Some(1),
        timeout: Some(DEFAULT_RESPONSE_TIMEOUT),
        ..Options::default()
    };
    let rate = run_tasks(duration, "fred", |task, pairs| {
        let (scripts, client, options) = (Arc::clone(&scripts), client.clone(), options.clone());
        async move {
            let name = format!("bench:bare-fred:{task}");
            let command = || CustomCommand::new_static("EVALSHA", ClusterHash::FirstKey, false);
            while pairs.keep_going() {
                let [acquire, release] = Pair::sole(&name, "bench-client").fred_arguments(&scripts);
                let client = client.with_options(&options);
                let acquired: Value = client
                    .custom(command(), acquire)
                    .await
                    .map_err(|e| e.to_string())?;
                let released: Value = client
                    .custom(command(), release)
                    .await
                    .map_err(|e| e.to_string())?;
                let granted = acquired
                    .as_bytes()
                    .is_some_and(|grant| grant.starts_with(b"1:0:"));
                pairs.count(granted && released == Value::Integer(0))?;
            }
            Ok(())
        }
    })
    .await;
    if let Err(err) = client.quit().await {
        eprintln!("lock-bench: closing the bare fred client failed: {err}");
    }
    rate
}

/// The pairs the tasks of one run did, and when the run ends.
#[derive(Debug)]
struct Pairs {
    done: AtomicU64,
    deadline: Instant,
}

impl Pairs {
    fn keep_going(&self) -> bool {
        Instant::now() < self.deadline
    }

    fn count(&self, succeeded: bool) -> Result<(), String> {
        if !succeeded {
            return Err("a pair was not granted and released".to_owned());
        }
        self.done.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Runs [`TASKS`] tasks made by `task` for `duration`; pairs per second, or 0 (a failed
/// measurement) if any task failed.
async fn run_tasks<F, Fut>(duration: Duration, client: &str, task: F) -> f64
where
    F: Fn(usize, Arc<Pairs>) -> Fut,
    Fut: Future<Output = Result<(), String>> + Send + 'static,
{
    let pairs = Arc::new(Pairs {
        done: AtomicU64::new(0),
        deadline: Instant::now() + duration,
    });
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| tokio::spawn(task(i, Arc::clone(&pairs))))
        .collect();
    let mut failed = false;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                eprintln!("lock-bench: a bare {client} task failed: {err}");
                failed = true;
            }
            Err(err) => {
                eprintln!("lock-bench: a bare {client} task panicked: {err}");
                failed = true;
            }
        }
    }
    if failed {
        return 0.0;
    }
    pairs.done.load(Ordering::Relaxed) as f64 / duration.as_secs_f64()
}
