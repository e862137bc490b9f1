//! PgBouncer in front of a test's PostgreSQL, pooling in transaction mode: the setup in
//! which a statement may run on another server connection than the one before it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::PostgresServer;
use crate::ports;
use crate::postgres::{panic_if_exited, unprivileged_user};
use crate::scratch::ScratchDir;

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
    let mut candidates: Vec<PathBuf> = Vec::new();
    candidates.extend(std::env::var_os("PGBOUNCER_BIN").map(PathBuf::from));
    let dirs = std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default();
    candidates.extend(dirs.into_iter().map(|dir| dir.join("pgbouncer")));
    candidates.extend(
        ["/usr/sbin", "/opt/homebrew/bin", "/usr/local/bin"]
            .iter()
            .map(|dir| PathBuf::from(dir).join("pgbouncer")),
    );
    candidates.into_iter().find(|path| path.is_file())
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
        let dir = ScratchDir::new();
        let port = ports::reserve(false);
        let path = |name: &str| dir.path().join(name).display().to_string();
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
            upstream = server.port(),
            users = path("users.txt"),
            log = path("pgbouncer.log"),
        );
        let write = |name: &str, text: &str| {
            std::fs::write(dir.path().join(name), text)
                .unwrap_or_else(|e| panic!("write {name}: {e}"));
        };
        write("pgbouncer.ini", &config);
        write("users.txt", "\"postgres\" \"\"\n");
        let mut command = Command::new(binary);
        command
            .arg(path("pgbouncer.ini"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some((uid, gid)) = unprivileged_user() {
            use std::os::unix::process::CommandExt;
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.path().display()));
            command.uid(uid).gid(gid);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start pgbouncer: {e}"));
        let mut bouncer = Self {
            port,
            child: Some(child),
            dir,
        };
        bouncer.wait_until_listening().await;
        bouncer
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

    async fn wait_until_listening(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            panic_if_exited(
                self.child.as_mut(),
                "pgbouncer",
                self.port,
                &self.dir.path().join("pgbouncer.log"),
            );
            if tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_ok()
            {
                return;
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
