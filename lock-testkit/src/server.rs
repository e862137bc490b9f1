//! One `redis-server` process.

use std::fmt::{self, Write as _};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};
use tokio::time::Instant;

use crate::binary::require_binary;
use crate::commandstats::{CommandStats, parse_command_stats};
use crate::ports;
use crate::scratch::{ScratchDir, scratch_dir};
use crate::signal::{Signal, signal};

/// How long a standalone server may take to answer PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a restarted cluster node may take to report `cluster_state:ok`
/// (a restarted master waits about 2 s before it declares itself writable).
const CLUSTER_RESTART_TIMEOUT: Duration = Duration::from_secs(20);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(20);
/// Response timeout for [`RedisServer::command`]: long enough for any test command,
/// short enough that a paused or wedged server fails the test instead of hanging it.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

/// What goes into a server's `redis.conf` besides the fixed lines.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    /// Run as a cluster node (`cluster-enabled yes`, bus port = port + 10000).
    pub(crate) cluster: bool,
    /// Run as a Sentinel (`--sentinel`).
    pub(crate) sentinel: bool,
    /// Extra `redis.conf` lines, written verbatim after the fixed ones.
    pub(crate) extra: Vec<String>,
}

/// Starts a [`RedisServer`] with extra `redis.conf` lines.
///
/// ```no_run
/// # async fn demo() {
/// let server = lock_testkit::RedisServer::builder()
///     .config_line("maxmemory 64mb")
///     .start()
///     .await;
/// # drop(server);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisServerBuilder {
    config: Config,
}

impl RedisServerBuilder {
    /// Adds one `redis.conf` line (for example `"requirepass secret"`), written after the
    /// testkit's own lines so it can override them. Port, bind address and directory
    /// are managed by the testkit and should not be changed here.
    pub fn config_line(mut self, line: impl Into<String>) -> Self {
        self.config.extra.push(line.into());
        self
    }

    /// Makes the server a cluster node. Used by [`crate::RedisCluster`].
    pub(crate) fn cluster_node(mut self) -> Self {
        self.config.cluster = true;
        self
    }

    /// Makes the process a Sentinel. Used by [`crate::RedisSentinel`].
    pub(crate) fn sentinel(mut self) -> Self {
        self.config.sentinel = true;
        self
    }

    /// Starts the server; see [`RedisServer::start`].
    pub async fn start(self) -> RedisServer {
        RedisServer::launch(self.config).await
    }
}

/// A `redis-server` process on `127.0.0.1`, listening on a free port, with its own temp
/// directory and no persistence. Dropping it kills the process and removes the directory.
pub struct RedisServer {
    binary: PathBuf,
    config: Config,
    port: u16,
    child: Child,
    dir: ScratchDir,
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.child.id())
            .field("dir", &self.dir.path())
            .field("cluster", &self.config.cluster)
            .field("extra_config", &self.config.extra)
            .finish_non_exhaustive()
    }
}

/// Why a start attempt failed.
enum NotReady {
    /// The process exited.
    Exited(ExitStatus),
    /// Something else (not our process) answers on the port.
    Foreign,
    /// No answer before the deadline.
    Timeout,
}

impl RedisServer {
    /// Starts a standalone server: fresh temp dir, `save ""`, `appendonly no`, bound to
    /// `127.0.0.1` on a free port. Panics with the server's log tail if it does not
    /// answer PING within about 10 s, and with installation instructions if no
    /// `redis-server` binary is found.
    pub async fn start() -> RedisServer {
        Self::builder().start().await
    }

    /// A builder for servers with extra `redis.conf` lines.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The port the server listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id of the running server.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's temporary directory (config, log, `nodes.conf`).
    #[must_use]
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Each command's calls and microseconds so far (`INFO commandstats`), by name.
    /// Panics as [`RedisServer::command`] does.
    pub async fn command_stats(&self) -> std::collections::BTreeMap<String, CommandStats> {
        let info: String = self.command(&["INFO", "commandstats"]).await;
        parse_command_stats(&info)
    }

    /// Runs one command on a fresh connection and converts the reply.
    /// Panics with the command and the error if it fails (including a 10 s timeout).
    pub async fn command<T: FromRedisValue>(&self, args: &[&str]) -> T {
        self.try_command(args)
            .await
            .unwrap_or_else(|e| panic!("`{}` on {} failed: {e}", args.join(" "), self.url()))
    }

    /// Like [`RedisServer::command`], but a failure (a refused or reset connection, an
    /// error reply) is returned, for servers that may be between states.
    pub async fn try_command<T: FromRedisValue>(&self, args: &[&str]) -> redis::RedisResult<T> {
        let (name, rest) = args
            .split_first()
            .expect("RedisServer::command needs at least the command name");
        let mut conn = connect(self.port, COMMAND_TIMEOUT).await?;
        redis::cmd(name).arg(rest).query_async(&mut conn).await
    }

    /// Kills the process with SIGKILL and starts it again on the same port with the same
    /// config. Data is lost; a cluster node keeps its `nodes.conf`, so it keeps its
    /// identity and slots. Returns once the server answers PING (a cluster node: once it
    /// reports `cluster_state:ok`).
    pub async fn restart(&mut self) {
        self.kill();
        let timeout = if self.config.cluster {
            CLUSTER_RESTART_TIMEOUT
        } else {
            START_TIMEOUT
        };
        let deadline = Instant::now() + timeout;
        loop {
            clear_logs(self.dir.path());
            self.child = spawn(&self.binary, self.dir.path(), self.config.sentinel);
            match wait_ready(&mut self.child, self.port, deadline, self.config.cluster).await {
                Ok(()) => return,
                // The port was grabbed in the moment it was free: wait and try again.
                Err(NotReady::Exited(_)) if Instant::now() < deadline && self.port_was_busy() => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(why) => {
                    self.kill();
                    panic!(
                        "redis-server on port {} did not come back after a restart: {}\n{}",
                        self.port,
                        describe(&why),
                        log_tail(self.dir.path())
                    );
                }
            }
        }
    }

    /// Stops the process with SIGSTOP: it keeps its connections but answers nothing.
    /// Returns once every thread has stopped.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP);
        crate::signal::wait_until_stopped(self.pid());
    }

    /// Continues a paused process with SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT);
    }

    fn signal(&self, sig: Signal) {
        if let Err(err) = signal(self.pid(), sig) {
            panic!("{sig} to redis-server {}: {err}", self.pid());
        }
    }

    /// Starts a server with `config`, retrying on a new port if the chosen one was taken.
    async fn launch(config: Config) -> RedisServer {
        let binary = require_binary();
        let dir = scratch_dir();
        let deadline = Instant::now() + START_TIMEOUT;
        for attempt in 1..=ports::PORT_ATTEMPTS {
            let port = ports::reserve(config.cluster);
            write_config(dir.path(), port, &config);
            clear_logs(dir.path());
            let mut child = spawn(&binary, dir.path(), config.sentinel);
            match wait_ready(&mut child, port, deadline, false).await {
                Ok(()) => {
                    return RedisServer {
                        binary,
                        config,
                        port,
                        child,
                        dir,
                    };
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    ports::release(port, config.cluster);
                    let busy = matches!(why, NotReady::Foreign)
                        || (matches!(why, NotReady::Exited(_)) && log_says_busy(dir.path()));
                    let retry = busy && attempt < ports::PORT_ATTEMPTS && Instant::now() < deadline;
                    assert!(
                        retry,
                        "redis-server ({}) did not start on 127.0.0.1:{port}: {}\n{}",
                        binary.display(),
                        describe(&why),
                        log_tail(dir.path())
                    );
                    // Start the next attempt from a clean directory.
                    let _ = std::fs::remove_file(dir.path().join("nodes.conf"));
                }
            }
        }
        unreachable!("the last attempt panics");
    }

    fn port_was_busy(&self) -> bool {
        log_says_busy(self.dir.path())
    }

    /// SIGKILL and reap the process.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        ports::release(self.port, self.config.cluster);
    }
}

/// A new multiplexed connection to `127.0.0.1:port`.
pub(crate) async fn connect(
    port: u16,
    response_timeout: Duration,
) -> redis::RedisResult<MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(2)))
        .set_response_timeout(Some(response_timeout));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Reads one field (`name:value`) out of an `INFO` or `CLUSTER INFO` reply.
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim_end()
            .strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// Whether the node on `port` reports `cluster_state:ok`.
pub(crate) async fn cluster_state_ok(port: u16) -> bool {
    let Ok(mut conn) = connect(port, Duration::from_millis(500)).await else {
        return false;
    };
    let info: redis::RedisResult<String> = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut conn)
        .await;
    info.is_ok_and(|info| info_field(&info, "cluster_state") == Some("ok"))
}

fn write_config(dir: &Path, port: u16, config: &Config) {
    let dir_str = quote(dir);
    let mut lines = vec![
        format!("port {port}"),
        "bind 127.0.0.1".to_owned(),
        "protected-mode no".to_owned(),
        "daemonize no".to_owned(),
        "save \"\"".to_owned(),
        "appendonly no".to_owned(),
        format!("dir {dir_str}"),
        format!("logfile {}", quote(&dir.join("redis.log"))),
    ];
    if config.cluster {
        lines.push("cluster-enabled yes".to_owned());
        lines.push(format!(
            "cluster-config-file {}",
            quote(&dir.join("nodes.conf"))
        ));
        lines.push("cluster-node-timeout 2000".to_owned());
    }
    lines.extend(config.extra.iter().cloned());
    let mut text = lines.join("\n");
    text.push('\n');
    let path = dir.join("redis.conf");
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// A path as a double-quoted `redis.conf` string.
fn quote(path: &Path) -> String {
    let raw = path.to_string_lossy();
    format!("\"{}\"", raw.replace('\\', "\\\\").replace('"', "\\\""))
}

fn spawn(binary: &Path, dir: &Path, sentinel: bool) -> Child {
    let stderr_path = dir.join("stderr.log");
    let stderr = File::options()
        .create(true)
        .append(true)
        .open(&stderr_path)
        .unwrap_or_else(|e| panic!("open {}: {e}", stderr_path.display()));
    let mut command = Command::new(binary);
    command.arg(dir.join("redis.conf"));
    if sentinel {
        command.arg("--sentinel");
    }
    command
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", binary.display()))
}

/// Polls PING every 20 ms until the process answers (and, with `want_cluster_ok`, until
/// it reports `cluster_state:ok`), checking that the answering process is ours.
async fn wait_ready(
    child: &mut Child,
    port: u16,
    deadline: Instant,
    want_cluster_ok: bool,
) -> Result<(), NotReady> {
    let mut verified = false;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(NotReady::Exited(status));
        }
        if Instant::now() >= deadline {
            return Err(NotReady::Timeout);
        }
        if !verified {
            match answering_pid(port).await {
                Some(pid) if pid == child.id() => verified = true,
                Some(_) => return Err(NotReady::Foreign),
                None => {}
            }
        }
        if verified && (!want_cluster_ok || cluster_state_ok(port).await) {
            return Ok(());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The pid of the server answering PING on `port`, if any.
async fn answering_pid(port: u16) -> Option<u32> {
    let mut conn = connect(port, Duration::from_millis(500)).await.ok()?;
    let _: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .ok()?;
    info_field(&info, "process_id")?.parse().ok()
}

fn describe(why: &NotReady) -> String {
    match why {
        NotReady::Exited(status) => format!("the process exited ({status})"),
        NotReady::Foreign => "another process answers on that port".to_owned(),
        NotReady::Timeout => "no answer to PING in time".to_owned(),
    }
}

/// Removes the logs of an earlier run, so a failure is judged by this run's log only.
fn clear_logs(dir: &Path) {
    for name in ["redis.log", "stderr.log"] {
        ports::remove_earlier_log(&dir.join(name));
    }
}

fn log_says_busy(dir: &Path) -> bool {
    ["redis.log", "stderr.log"].iter().any(|name| {
        std::fs::read_to_string(dir.join(name)).is_ok_and(|text| ports::log_says_port_taken(&text))
    })
}

/// The last lines of the server's log and stderr, for panic messages.
pub(crate) fn log_tail(dir: &Path) -> String {
    const LINES: usize = 30;
    let mut out = String::new();
    for name in ["redis.log", "stderr.log"] {
        let path = dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            continue;
        }
        let start = lines.len().saturating_sub(LINES);
        let _ = writeln!(out, "--- last lines of {} ---", path.display());
        for line in &lines[start..] {
            out.push_str(line);
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("(the server wrote no log)\n");
    }
    out
}
