//! PgBouncer in front of a test's PostgreSQL, pooling in transaction mode: the setup in
//! which a statement may run on another server connection than the one before it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::PostgresServer;
use crate::ports;
use crate::ports::PortTaken;
use crate::postgres::{still_starting, unprivileged_user};
use crate::scratch::{ScratchDir, scratch_dir};

/// The message shown when PgBouncer cannot be found.
pub(crate) const NOT_FOUND: &str = "pgbouncer not found: install it (Debian/Ubuntu: apt-get \
     install pgbouncer; macOS: brew install pgbouncer) or set PGBOUNCER_BIN to its path; \
     `cargo xtask test` does this for you";

/// How long PgBouncer may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// The `pgbouncer` program: `$PGBOUNCER_BIN`, then `PATH`, then `/usr/sbin` (Debian's
/// place) and Homebrew's directories.
#[must_use]
pub fn pgbouncer_binary() -> Option<PathBuf> {
    crate::binary::named_by_env("PGBOUNCER_BIN").or_else(|| {
        crate::binary::on_path_or_in(
            "pgbouncer",
            &["/usr/sbin", "/opt/homebrew/bin", "/usr/local/bin"],
        )
    })
}

/// A PgBouncer on a free port of `127.0.0.1` (never 6432's usual one), pooling the
/// `postgres` database of one [`PostgresServer`] in transaction mode, trusting the
/// `postgres` user. Dropping it stops it and removes its directory.
///
/// Run as root, it runs as the `postgres` system user (PgBouncer refuses root).
pub struct PgBouncer {
    port: u16,
    child: Option<Child>,
    dir: ScratchDir,
}

impl std::fmt::Debug for PgBouncer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgBouncer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PgBouncer {
    /// Starts PgBouncer in front of `server`; returns once it accepts connections.
    /// Panics (with what to install) when the program is missing.
    pub async fn start(server: &PostgresServer) -> Self {
        let binary = pgbouncer_binary().unwrap_or_else(|| panic!("{NOT_FOUND}"));
        let dir = scratch_dir();
        write(&dir, "users.txt", "\"postgres\" \"\"\n");
        if let Some((uid, gid)) = unprivileged_user() {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.path().display()));
        }
        let mut bouncer = Self {
            port: 0,
            child: None,
            dir,
        };
        for _ in 0..ports::PORT_ATTEMPTS {
            bouncer.port = ports::reserve(false);
            bouncer.spawn(&binary, server.port());
            if bouncer.wait_until_listening().await.is_ok() {
                return bouncer;
            }
            ports::release(bouncer.port, false);
        }
        panic!(
            "pgbouncer found its port taken {} times in a row; its log is in {}",
            ports::PORT_ATTEMPTS,
            bouncer.dir.path().display()
        );
    }

    /// Writes the configuration for `self.port` and starts the process.
    fn spawn(&mut self, binary: &Path, upstream: u16) {
        let path = |name: &str| self.dir.path().join(name).display().to_string();
        let config = format!(
            "[databases]\n\
             postgres = host=127.0.0.1 port={upstream} dbname=postgres user=postgres\n\
             [pgbouncer]\n\
             listen_addr = 127.0.0.1\n\
             listen_port = {port}\n\
             unix_socket_dir =\n\
             auth_type = trust\n\
             auth_file = {users}\n\
             pool_mode = transaction\n\
             max_client_conn = 1000\n\
             default_pool_size = 40\n\
             ignore_startup_parameters = extra_float_digits,options\n\
             logfile = {log}\n",
            port = self.port,
            users = path("users.txt"),
            log = path("pgbouncer.log"),
        );
        write(&self.dir, "pgbouncer.ini", &config);
        ports::remove_earlier_log(&self.dir.path().join("pgbouncer.log"));
        let mut command = Command::new(binary);
        command
            .arg(path("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = unprivileged_user() {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start pgbouncer: {e}"));
        self.child = Some(child);
    }

    /// The port clients connect to.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of the pooled `postgres` database as `postgres`.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Waits until the process accepts connections; [`PortTaken`] if it exited because
    /// its port was taken.
    async fn wait_until_listening(&mut self) -> Result<(), PortTaken> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Err(taken) = still_starting(
                self.child.as_mut(),
                "pgbouncer",
                self.port,
                &self.dir.path().join("pgbouncer.log"),
            ) {
                self.child = None;
                return Err(taken);
            }
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "pgbouncer on port {} did not listen within {START_TIMEOUT:?}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Writes `text` into the file `name` of `dir`.
fn write(dir: &ScratchDir, name: &str, text: &str) {
    std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(err) = child.kill() {
                eprintln!("lock-testkit: stopping pgbouncer: {err}");
            }
            if let Err(err) = child.wait() {
                eprintln!("lock-testkit: waiting for pgbouncer: {err}");
            }
        }
        ports::release(self.port, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pools_in_transaction_mode_in_front_of_its_server() {
        let server = PostgresServer::start().await;
        let bouncer = PgBouncer::start(&server).await;
        assert_ne!(bouncer.port(), 6432);
        let client = crate::postgres_client(&bouncer.url()).await;
        // Session state does not follow a client across transactions in this mode: the
        // pool hands each transaction whichever server connection is free, so two
        // clients' statements interleaved show more than one server process.
        let other = crate::postgres_client(&bouncer.url()).await;
        let mut pids = std::collections::BTreeSet::new();
        for _ in 0..20 {
            let (a, b) = tokio::join!(
                client.simple_query("SELECT pg_backend_pid(), pg_sleep(0.01)"),
                other.simple_query("SELECT pg_backend_pid(), pg_sleep(0.01)")
            );
            for messages in [a, b] {
                for message in messages.expect("a query through pgbouncer") {
                    if let tokio_postgres::SimpleQueryMessage::Row(row) = message {
                        pids.insert(row.get(0).unwrap_or_default().to_owned());
                    }
                }
            }
        }
        assert!(
            pids.len() >= 2,
            "one server connection for two clients: {pids:?}"
        );
    }
}
