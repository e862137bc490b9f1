//! One MariaDB (or MySQL) server (`mariadbd`) in a temporary directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::binary::find_executable;
use crate::ports::{self, PortTaken};
use crate::postgres::still_starting;
use crate::scratch::{self, ScratchDir, scratch_dir};
use crate::signal::{Signal, send, wait_until_stopped};
use crate::template;
use crate::tls::TestCertificates;

/// The message shown when no MariaDB server binaries can be found.
pub(crate) const NOT_FOUND: &str = "MariaDB's server and tools (mariadbd, mariadb-install-db, \
     mariadb-admin, mariadb) not found: install them (Debian/Ubuntu: apt-get install \
     mariadb-server mariadb-client; macOS: brew install mariadb) or set MARIADB_BIN_DIR to \
     a directory holding them; `cargo xtask test` does this for you";

/// Directories searched after `$MARIADB_BIN_DIR` and `PATH` (Debian keeps the server in
/// `/usr/sbin`, off a user's `PATH`).
const FALLBACK_DIRS: [&str; 5] = [
    "/usr/sbin",
    "/usr/bin",
    "/usr/local/mysql/bin",
    "/usr/local/bin",
    "/opt/homebrew/bin",
];

/// How long the first start (making the data directory template) may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(50);

/// The database every server has, which [`MariaDbServer::url`] names.
pub const MARIADB_TEST_DATABASE: &str = "lock_test";

/// The programs a server needs: the server, the tool that makes a data directory, the
/// admin tool (readiness) and the client (a test's side door).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MariaDbBinaries {
    /// `mariadbd` (or `mysqld`).
    pub server: PathBuf,
    /// `mariadb-install-db` (or `mysql_install_db`).
    pub install_db: PathBuf,
    /// `mariadb-admin` (or `mysqladmin`).
    pub admin: PathBuf,
    /// `mariadb` (or `mysql`).
    pub client: PathBuf,
}

/// Finds MariaDB's programs: each in `$MARIADB_BIN_DIR`, then on `PATH`, then in
/// `/usr/sbin`, `/usr/bin`, `/usr/local/mysql/bin`, `/usr/local/bin` and
/// `/opt/homebrew/bin`, under MariaDB's name or MySQL's older one. `None` if one is
/// missing.
#[must_use]
pub fn mariadb_binaries() -> Option<MariaDbBinaries> {
    let find = |names: &[&str]| {
        names
            .iter()
            .find_map(|name| find_executable("MARIADB_BIN_DIR", name, &FALLBACK_DIRS))
    };
    Some(MariaDbBinaries {
        server: find(&["mariadbd", "mysqld"])?,
        install_db: find(&["mariadb-install-db", "mysql_install_db"])?,
        admin: find(&["mariadb-admin", "mysqladmin"])?,
        client: find(&["mariadb", "mysql"])?,
    })
}

/// A MariaDB server on `127.0.0.1`, on a free port (never 3306), with its own data
/// directory in a temporary directory, its `root` user without a password, and a
/// database [`MARIADB_TEST_DATABASE`]. Dropping it stops the server at once and removes
/// the directory.
///
/// Tuned for tests, as the PostgreSQL servers are: a small buffer pool and redo log, no
/// binary log, and commits written to the operating system but not flushed to disk (a
/// test server's data need only survive a crash of the server, not of the machine).
pub struct MariaDbServer {
    bin: MariaDbBinaries,
    port: u16,
    child: Option<Child>,
    dir: ScratchDir,
    /// What the server is started with beyond the common settings.
    extra: Vec<String>,
}

impl std::fmt::Debug for MariaDbServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MariaDbServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl MariaDbServer {
    /// Gives the server a data directory and starts it; returns once it accepts
    /// connections. Panics (with what to install) when the programs are missing.
    pub async fn start() -> Self {
        Self::start_with(Vec::new()).await
    }

    /// As [`Self::start`], with TLS on (the server certificate of `certificates`, for
    /// `127.0.0.1`) and required of every TCP connection (`require_secure_transport`;
    /// the Unix socket, which the tests' administration uses, stays as it is).
    pub async fn start_with_tls(certificates: &TestCertificates) -> Self {
        let file = |name: &str| certificates.file(name).display().to_string();
        Self::start_with(vec![
            format!("--ssl-ca={}", file("ca.crt")),
            format!("--ssl-cert={}", file("server.crt")),
            format!("--ssl-key={}", file("server.key")),
            "--require-secure-transport=ON".to_owned(),
        ])
        .await
    }

    /// A replication primary: as [`Self::start`], writing a binary log, as server
    /// `server_id`.
    pub async fn start_primary(server_id: u32) -> Self {
        Self::start_with(vec![
            format!("--server-id={server_id}"),
            "--log-bin=binlog".to_owned(),
            "--binlog-format=ROW".to_owned(),
        ])
        .await
    }

    /// An asynchronous replica of `primary`, as server `server_id`: it applies the
    /// primary's binary log from its beginning (so it catches up with everything the
    /// primary did since it started) until [`Self::stop_replicating`].
    pub async fn start_replica(primary: &Self, server_id: u32) -> Self {
        // A replica logs what it applies too, so that once promoted, a replica of its own
        // gets everything from its log.
        let replica = Self::start_with(vec![
            format!("--server-id={server_id}"),
            "--log-bin=binlog".to_owned(),
            "--log-slave-updates=ON".to_owned(),
            "--binlog-format=ROW".to_owned(),
        ])
        .await;
        replica.execute(&format!(
            "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {}, \
             MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos; \
             START SLAVE",
            primary.port
        ));
        replica
    }

    /// Stops applying the primary's log: what the primary writes from now on, this
    /// replica lacks.
    pub fn stop_replicating(&self) {
        self.execute("STOP SLAVE");
    }

    /// Makes a replica a primary of its own (as a failover does after the primary died):
    /// it forgets its primary and takes writes.
    pub fn promote(&self) {
        self.execute("STOP SLAVE; RESET SLAVE ALL; SET GLOBAL read_only = 0");
    }

    /// Kills the server (SIGKILL, as a crash would) and leaves it down.
    pub fn crash(&mut self) {
        self.stop();
    }

    async fn start_with(extra: Vec<String>) -> Self {
        let bin = mariadb_binaries().unwrap_or_else(|| panic!("{NOT_FOUND}"));
        let mut server = Self {
            bin,
            port: 0,
            child: None,
            dir: scratch_dir(),
            extra,
        };
        server.init_db();
        for _ in 0..ports::PORT_ATTEMPTS {
            server.port = ports::reserve(false);
            ports::remove_earlier_log(&server.log_path());
            if server.launch().await.is_ok() {
                return server;
            }
            ports::release(server.port, false);
        }
        panic!(
            "mariadbd found its port taken {} times in a row; its log is in {}",
            ports::PORT_ATTEMPTS,
            server.dir.path().display()
        );
    }

    /// The port the server listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of [`MARIADB_TEST_DATABASE`] as `root`.
    #[must_use]
    pub fn url(&self) -> String {
        format!(
            "mysql://root@127.0.0.1:{}/{MARIADB_TEST_DATABASE}",
            self.port
        )
    }

    /// The server's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Runs `sql` as `root` through the server's socket with the `mariadb` client (a
    /// test's side door: setup, inspection, fault injection) and returns what it
    /// printed, one line per row, tab between columns, without headers. Panics with the
    /// server's message when the statement fails.
    #[must_use]
    pub fn sql(&self, sql: &str) -> String {
        let output = Command::new(&self.bin.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["--user=root", "--batch", "--skip-column-names"])
            .arg(format!("--database={MARIADB_TEST_DATABASE}"))
            .args(["--execute", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run the mariadb client: {e}"));
        assert!(
            output.status.success(),
            "{sql:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Runs `sql`, which prints nothing, for its effect (see [`Self::sql`]).
    fn execute(&self, sql: &str) {
        let printed = self.sql(sql);
        assert!(printed.trim().is_empty(), "{sql:?} printed {printed}");
    }

    /// Kills the server (SIGKILL, as a crash would) and starts it again on the same
    /// port with the same data directory: committed data survives (InnoDB recovers it).
    pub async fn restart(&mut self) {
        self.stop();
        let launched = self.launch().await;
        assert!(
            launched.is_ok(),
            "mariadbd could not restart: another process took its port {}",
            self.port
        );
    }

    /// Pauses the server (SIGSTOP): it keeps its connections and answers nothing.
    /// Returns once every thread of it has stopped: a signal to a process stops its
    /// threads one by one, and a thread that has not stopped yet still answers.
    pub fn pause(&self) {
        send(self.pid(), Signal::SIGSTOP);
        wait_until_stopped(self.pid());
    }

    /// Resumes a paused server (SIGCONT).
    pub fn resume(&self) {
        send(self.pid(), Signal::SIGCONT);
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("mariadb.sock")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("mariadb.log")
    }

    /// Gives the server a fresh data directory: a copy of the one `mariadb-install-db`
    /// made for this installation (made once: it takes a few seconds, a copy a few
    /// milliseconds).
    fn init_db(&self) {
        template::copy(&self.template(), &self.data());
    }

    /// The data directory template: `root` without a password (also over TCP), no
    /// anonymous users and no `test` database. Made under a name of its own and renamed
    /// into place, so that servers starting together never copy half of one.
    fn template(&self) -> PathBuf {
        let mut key = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(&self.bin, is_root()), &mut key);
        let key = std::hash::Hasher::finish(&key);
        let template = scratch::base().join(format!("lock-testkit-mariadb-template-{key:016x}"));
        if template.join("mysql").is_dir() {
            return template;
        }
        // Unique to this server: servers of one process may make it at once too.
        let making = self.dir.path().join("template.making");
        let output = Command::new(&self.bin.install_db)
            .args(common_args(&making, &self.dir.path().join("template.tmp")))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {}: {e}", self.bin.install_db.display()));
        assert!(
            output.status.success(),
            "mariadb-install-db in {} failed: {}{}",
            making.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        template::put_in_place(&making, &template, |dir| dir.join("mysql").is_dir());
        template
    }

    /// Starts the server on `self.port` and waits until it answers; [`PortTaken`] if
    /// another process holds the port.
    async fn launch(&mut self) -> Result<(), PortTaken> {
        let init = self.dir.path().join("init.sql");
        std::fs::write(
            &init,
            format!("CREATE DATABASE IF NOT EXISTS {MARIADB_TEST_DATABASE};\n"),
        )
        .unwrap_or_else(|e| panic!("write {}: {e}", init.display()));
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .unwrap_or_else(|e| panic!("open the server's log: {e}"));
        let mut command = Command::new(&self.bin.server);
        command
            .args(common_args(&self.data(), &self.dir.path().join("tmp")))
            .arg(format!("--port={}", self.port))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--socket={}", self.socket().display()))
            .arg(format!(
                "--pid-file={}",
                self.dir.path().join("mariadb.pid").display()
            ))
            .arg(format!("--init-file={}", init.display()))
            .args([
                "--skip-log-bin",
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=300",
            ])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        {
            use std::os::unix::process::CommandExt;
            // Its own process group, so that a signal to the test's group spares it.
            command.process_group(0);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.bin.server.display()));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        let log = self.log_path();
        loop {
            if let Err(taken) = still_starting(self.child.as_mut(), "mariadbd", self.port, &log) {
                self.child = None;
                return Err(taken);
            }
            if self.answers() {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "mariadbd on port {} was not ready after {START_TIMEOUT:?}; its log is in {}",
                self.port,
                self.dir.path().display()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Whether the server answers, with the test database there (the init file runs
    /// before the server takes connections). Asked through its own socket, in its own
    /// directory: a ping of its TCP port could be answered by another test's server
    /// that took the port first, while this one was failing to bind it. mariadbd binds
    /// its TCP port before it makes its socket, so the socket answering means the port
    /// is this server's.
    fn answers(&self) -> bool {
        Command::new(&self.bin.admin)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket().display()))
            .args(["--user=root", "--connect-timeout=2"])
            .arg("ping")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }

    /// Kills the server and waits for it.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Err(err) = child.kill() {
            eprintln!("lock-testkit: killing mariadbd: {err}");
        }
        if let Err(err) = child.wait() {
            eprintln!("lock-testkit: waiting for mariadbd: {err}");
        }
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.stop();
        ports::release(self.port, false);
    }
}

/// The options both `mariadb-install-db` and the server take: the data directory, the
/// directory of temporary files, the test tuning, and, as root, running as root (the
/// server refuses to otherwise).
fn common_args(data: &Path, tmp: &Path) -> Vec<String> {
    std::fs::create_dir_all(tmp).unwrap_or_else(|e| panic!("create {}: {e}", tmp.display()));
    let mut args = vec![
        "--no-defaults".to_owned(),
        format!("--datadir={}", data.display()),
        // A directory of the server's own: a server that starts (or a bootstrap) deletes
        // every temporary table file it finds in its tmpdir, other servers' included,
        // and in a shared /tmp two bootstraps side by side failed each other's
        // (`Unknown table 'mysql.tmp_user_sys'`, `Can't find file '/tmp/#sql-temptable..'`).
        format!("--tmpdir={}", tmp.display()),
        "--skip-name-resolve".to_owned(),
        // Small, but not so small that writes queue behind page flushing: at 16 MB a
        // row inserted and deleted per lock ran at less than half the rate it runs at
        // 64 MB, which the bench's floors would have inherited.
        "--innodb-buffer-pool-size=64M".to_owned(),
        "--innodb-log-file-size=4M".to_owned(),
    ];
    if is_root() {
        args.push("--user=root".to_owned());
    }
    args
}

/// Whether this process runs as root (`id -u` says 0).
fn is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).trim() == "0")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_on_a_free_port_keeps_committed_data_across_a_crash_and_stops() {
        let mut server = MariaDbServer::start().await;
        assert_ne!(server.port(), 3306);
        let _ = server.sql("CREATE TABLE kept (id INT PRIMARY KEY) ENGINE=InnoDB");
        let _ = server.sql("INSERT INTO kept VALUES (7)");
        let first = server.pid();
        server.restart().await;
        assert_ne!(server.pid(), first, "a new server process");
        assert_eq!(server.sql("SELECT id FROM kept").trim(), "7");
        // No anonymous user, which would shadow a named user's logins from localhost.
        assert_eq!(
            server
                .sql("SELECT COUNT(*) FROM mysql.user WHERE user = ''")
                .trim(),
            "0"
        );
        let dir = server.dir.path().to_owned();
        drop(server);
        assert!(!dir.exists(), "the directory was removed");
    }

    #[tokio::test]
    async fn a_paused_server_answers_again_once_resumed() {
        let server = MariaDbServer::start().await;
        server.pause();
        assert!(!server.answers(), "a paused server answered");
        server.resume();
        assert_eq!(server.sql("SELECT 1 + 1").trim(), "2");
    }
}
