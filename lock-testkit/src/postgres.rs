//! One PostgreSQL server (`initdb` + `postgres`) in a temporary directory.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::time::Instant;

use crate::ports::{self, PortTaken};
use crate::scratch::{self, ScratchDir, scratch_dir};
use crate::signal::{Signal, children, send, wait_until_stopped};
use crate::template;
use crate::tls::TestCertificates;
use binaries::NOT_FOUND;
pub use binaries::postgres_bin_dir;

mod binaries;

/// Removes the directory `path` if it exists.
fn remove_if_there(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => {
            panic!("cannot remove {}: {err}", path.display())
        }
        _ => {}
    }
}

/// How `initdb` makes a data directory (see [`PostgresServer::template`]).
const INITDB_ARGS: [&str; 5] = [
    "--username=postgres",
    "--auth=trust",
    "--encoding=UTF8",
    "--no-sync",
    "--no-instructions",
];

/// How long `initdb` plus the first start may take.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How often readiness is polled.
const POLL: Duration = Duration::from_millis(50);

/// A client of the PostgreSQL server `url` names, its connection driven by a task of
/// its own (a test's side door: setup, inspection, fault injection). Panics when it
/// cannot connect.
pub async fn postgres_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(async move {
        // Ends with the client or with the server; a test sees its own errors.
        if let Err(err) = connection.await {
            eprintln!("test connection to PostgreSQL ended: {err}");
        }
    });
    client
}

/// A PostgreSQL server on `127.0.0.1`, on a free port (never 5432), with its own data
/// directory in a temporary directory, trusting local connections as `postgres`.
/// Dropping it stops the server at once and removes the directory.
///
/// Run as root, it runs `initdb` and the server as the `postgres` system user (PostgreSQL
/// refuses to run as root).
pub struct PostgresServer {
    bin: PathBuf,
    port: u16,
    child: Option<Child>,
    dir: ScratchDir,
    /// The user the processes run as when this process is root.
    run_as: Option<(u32, u32)>,
}

impl std::fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresServer")
            .field("port", &self.port)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

impl PostgresServer {
    /// Creates a cluster with `initdb` and starts it; returns once it accepts
    /// connections. Panics (with what to install) when the binaries are missing.
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// As [`Self::start`], with TLS on (the server certificate of `certificates`, for
    /// `127.0.0.1`) and every TCP connection required to use it (`hostssl` lines only).
    pub async fn start_with_tls(certificates: &TestCertificates) -> Self {
        Self::start_with(Some(certificates)).await
    }

    /// A streaming standby of `primary`, asynchronous, on a port of its own: a base
    /// backup taken with `pg_basebackup -R` (which writes the standby's connection to
    /// the primary), started and ready for read-only connections.
    pub async fn start_standby(primary: &Self) -> Self {
        let dir = scratch_dir();
        if let Some((uid, gid)) = primary.run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.path().display()));
        }
        let mut standby = Self {
            bin: primary.bin.clone(),
            port: 0,
            child: None,
            dir,
            run_as: primary.run_as,
        };
        let mut backup = standby.command("pg_basebackup");
        backup
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
            ])
            .args(["-X", "stream", "-R", "--no-sync", "--checkpoint=fast", "-D"])
            .arg(standby.data());
        run_to_success(&mut backup, "pg_basebackup");
        standby.launch_on_a_free_port().await;
        standby
    }

    /// Promotes a standby to primary and waits until it accepts writes.
    pub fn promote(&self) {
        let mut promote = self.command("pg_ctl");
        promote
            .args(["promote", "-w", "-t", "30", "-D"])
            .arg(self.data());
        run_to_success(&mut promote, "pg_ctl promote");
    }

    /// Stops the server at once, as a crash would (SIGQUIT, no checkpoint), and leaves it
    /// stopped.
    pub fn crash(&mut self) {
        if self.child.is_some() {
            self.resume();
        }
        self.stop();
    }

    /// As [`Self::start`], with what `prepare` does to a new server already done: it
    /// runs once per installation and `key` (the statements it runs, say), on a server
    /// that is then shut down cleanly and kept as a template; every later call starts
    /// from a copy of it. A schema made once instead of by every test of a suite: the
    /// lock functions' migration costs a PostgreSQL server about a second of CPU, a copy
    /// milliseconds.
    pub async fn start_prepared(key: &str, prepare: impl AsyncFnOnce(&Self)) -> Self {
        let mut server = Self::unlaunched();
        let mut hasher = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(server.template(), key), &mut hasher);
        let hash = std::hash::Hasher::finish(&hasher);
        let prepared = scratch::base().join(format!("lock-testkit-pg-prepared-{hash:016x}"));
        if prepared.join("PG_VERSION").is_file() {
            template::copy(&prepared, &server.data());
            server.launch_on_a_free_port().await;
            return server;
        }
        server.init_db();
        server.launch_on_a_free_port().await;
        prepare(&server).await;
        server.shut_down();
        let making = template::making(&prepared);
        remove_if_there(&making);
        template::copy(&server.data(), &making);
        template::put_in_place(&making, &prepared, |dir| dir.join("PG_VERSION").is_file());
        let relaunched = server.launch().await;
        assert!(
            relaunched.is_ok(),
            "postgres could not start again: another process took its port {}",
            server.port
        );
        server
    }

    async fn start_with(tls: Option<&TestCertificates>) -> Self {
        let mut server = Self::unlaunched();
        server.init_db();
        if let Some(certificates) = tls {
            server.require_tls(certificates);
        }
        server.launch_on_a_free_port().await;
        server
    }

    /// A server with a scratch directory and no data directory yet.
    fn unlaunched() -> Self {
        let bin = postgres_bin_dir().unwrap_or_else(|| panic!("{NOT_FOUND}"));
        let dir = scratch_dir();
        let run_as = unprivileged_user();
        if let Some((uid, gid)) = run_as {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))
                .unwrap_or_else(|e| panic!("chown {}: {e}", dir.path().display()));
        }
        Self {
            bin,
            port: 0,
            child: None,
            dir,
            run_as,
        }
    }

    /// Shuts the server down cleanly (a fast shutdown, with its checkpoint) and waits
    /// for it: its data directory is then whole, to be copied.
    fn shut_down(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        send(child.id(), Signal::SIGINT);
        let status = child
            .wait()
            .unwrap_or_else(|e| panic!("waiting for postgres to shut down: {e}"));
        assert!(status.success(), "postgres shut down with {status}");
    }

    /// Launches the server on a free port, trying another while one is taken.
    async fn launch_on_a_free_port(&mut self) {
        for _ in 0..ports::PORT_ATTEMPTS {
            self.port = ports::reserve(false);
            ports::remove_earlier_log(&self.dir.path().join("postgres.log"));
            if self.launch().await.is_ok() {
                return;
            }
            ports::release(self.port, false);
        }
        panic!(
            "postgres found its port taken {} times in a row; its log is in {}",
            ports::PORT_ATTEMPTS,
            self.dir.path().display()
        );
    }

    /// The port the server listens on.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A URL of the `postgres` database as the `postgres` superuser.
    #[must_use]
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A connection string of the `postgres` database as the `postgres` superuser over
    /// the server's Unix socket, which a TLS-only server still serves in plain.
    #[must_use]
    pub fn socket_url(&self) -> String {
        format!(
            "host={} port={} user=postgres dbname=postgres",
            self.dir.path().display(),
            self.port
        )
    }

    /// The postmaster's process id.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Stops the server (immediate shutdown, as a crash would) and starts it again on the
    /// same port with the same data directory: committed data survives.
    pub async fn restart(&mut self) {
        self.stop();
        let launched = self.launch().await;
        assert!(
            launched.is_ok(),
            "postgres could not restart: another process took its port {}",
            self.port
        );
    }

    /// Pauses every process of the server and returns once each has stopped: the
    /// postmaster first (so that it starts no new backend), then each of its children. A signal to the process group would
    /// miss the children, which PostgreSQL moves into sessions of their own.
    pub fn pause(&self) {
        let postmaster = self.pid();
        send(postmaster, Signal::SIGSTOP);
        let children = children(postmaster);
        for child in &children {
            send(*child, Signal::SIGSTOP);
        }
        for process in std::iter::once(postmaster).chain(children) {
            wait_until_stopped(process);
        }
    }

    /// Resumes a paused server: its children, then the postmaster.
    pub fn resume(&self) {
        let postmaster = self.pid();
        for child in children(postmaster) {
            send(child, Signal::SIGCONT);
        }
        send(postmaster, Signal::SIGCONT);
    }

    /// Puts the certificate and key in the data directory (readable by the server's
    /// user only, as PostgreSQL demands), turns `ssl` on, and accepts TCP connections
    /// only over TLS.
    fn require_tls(&self, certificates: &TestCertificates) {
        let data = self.data();
        for (name, mode) in [("server.crt", 0o644), ("server.key", 0o600)] {
            let target = data.join(name);
            std::fs::copy(certificates.file(name), &target)
                .unwrap_or_else(|e| panic!("copy {name}: {e}"));
            std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap_or_else(|e| panic!("chmod {name}: {e}"));
            if let Some((uid, gid)) = self.run_as {
                std::os::unix::fs::chown(&target, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {name}: {e}"));
            }
        }
        let mut conf = File::options()
            .append(true)
            .open(data.join("postgresql.conf"))
            .unwrap_or_else(|e| panic!("open postgresql.conf: {e}"));
        std::io::Write::write_all(
            &mut conf,
            b"\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
        )
        .unwrap_or_else(|e| panic!("write postgresql.conf: {e}"));
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostssl all all ::1/128 trust\n",
        )
        .unwrap_or_else(|e| panic!("write pg_hba.conf: {e}"));
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        if let Some((uid, gid)) = self.run_as {
            use std::os::unix::process::CommandExt;
            command.uid(uid).gid(gid);
        }
        command
    }

    fn log(&self, name: &str) -> File {
        let path = self.dir.path().join(name);
        let file = File::options()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        if let Some((uid, gid)) = self.run_as {
            // The server appends to it as its own user.
            let _ = std::os::unix::fs::chown(&path, Some(uid), Some(gid));
        }
        file
    }

    /// Gives the server a fresh data directory: a copy of the one `initdb` made for this
    /// installation (see [`Self::template`]).
    fn init_db(&self) {
        template::copy(&self.template(), &self.data());
    }

    /// A data directory as `initdb` makes it, made once for this installation and user
    /// and then copied: `initdb` takes about a second of CPU, a copy a few milliseconds,
    /// and a test run starts hundreds of servers. It is made under a name of its own and
    /// renamed into place, so that servers starting together never copy half of one;
    /// when two make it at once, one keeps the other's.
    fn template(&self) -> PathBuf {
        let mut key = std::hash::DefaultHasher::new();
        std::hash::Hash::hash(&(&self.bin, INITDB_ARGS, self.run_as), &mut key);
        let key = std::hash::Hasher::finish(&key);
        let template = scratch::base().join(format!("lock-testkit-pg-template-{key:016x}"));
        if template.join("PG_VERSION").is_file() {
            return template;
        }
        let making = template::making(&template);
        // Left by a run that died while making it.
        remove_if_there(&making);
        let mut initdb = self.command("initdb");
        initdb.args(INITDB_ARGS).arg("--pgdata").arg(&making);
        run_to_success(&mut initdb, &format!("initdb in {}", making.display()));
        template::put_in_place(&making, &template, |dir| dir.join("PG_VERSION").is_file());
        template
    }

    /// Starts the server on `self.port` and waits until it is ready; [`PortTaken`] if
    /// another process holds the port.
    async fn launch(&mut self) -> Result<(), PortTaken> {
        let port = self.port.to_string();
        let sockets = self.dir.path().display().to_string();
        let mut command = self.command("postgres");
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &port, "-k", &sockets, "-h", "127.0.0.1"])
            // Speed over durability: a test server's data need only survive a restart of
            // the server, not of the machine (fsync off). Commits are asynchronous too, as
            // on a server tuned for throughput: the lock functions must ask for durable
            // commits themselves, and the restart tests check that they do.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "max_connections=200"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(self.log("postgres.log"));
        {
            use std::os::unix::process::CommandExt;
            // Its own process group, so that a signal to the test's group spares it.
            command.process_group(0);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start postgres: {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Err(taken) = still_starting(
                self.child.as_mut(),
                "postgres",
                self.port,
                &self.dir.path().join("postgres.log"),
            ) {
                self.child = None;
                return Err(taken);
            }
            let ready = self
                .command("pg_isready")
                .args(["-q", "-h", "127.0.0.1", "-p", &port, "-U", "postgres"])
                .status()
                .is_ok_and(|status| status.success());
            if ready {
                return Ok(());
            }
            assert!(
                Instant::now() < deadline,
                "postgres on port {} was not ready after {START_TIMEOUT:?}",
                self.port
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Immediate shutdown (SIGQUIT: no checkpoint, like a crash), then waits for the
    /// postmaster; SIGKILL if it lingers.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        send(child.id(), Signal::SIGQUIT);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // A paused server would ignore SIGQUIT.
        if self.child.is_some() {
            self.resume();
        }
        self.stop();
        ports::release(self.port, false);
    }
}

/// Runs `command` (without input) and panics with its output unless it succeeds.
fn run_to_success(command: &mut Command, what: &str) {
    let output = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The `postgres` system user's ids when this process runs as root, else `None`.
pub(crate) fn unprivileged_user() -> Option<(u32, u32)> {
    let id = |args: &[&str]| -> Option<u32> {
        let output = Command::new("id").args(args).output().ok()?;
        String::from_utf8_lossy(&output.stdout).trim().parse().ok()
    };
    if id(&["-u"])? != 0 {
        return None;
    }
    let uid = id(&["-u", "postgres"]);
    let gid = id(&["-g", "postgres"]);
    match (uid, gid) {
        (Some(uid), Some(gid)) => Some((uid, gid)),
        _ => panic!(
            "running as root, and PostgreSQL refuses to: create a `postgres` system user \
             (installing the postgresql package does) or run the tests as another user"
        ),
    }
}

/// Checks on the server process `child` (`what`, on `port`) while it starts: `Ok` while it
/// runs, [`PortTaken`] when it exited because its port was taken (the caller may try
/// another), and a panic with its log when it exited for any other reason.
pub(crate) fn still_starting(
    child: Option<&mut Child>,
    what: &str,
    port: u16,
    log: &Path,
) -> Result<(), PortTaken> {
    if let Some(child) = child
        && let Ok(Some(status)) = child.try_wait()
    {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        if ports::log_says_port_taken(&log) {
            return Err(PortTaken);
        }
        panic!("{what} exited ({status}) on port {port}; its log:\n{log}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn starts_on_a_free_port_restarts_with_its_data_and_stops() {
        let mut server = PostgresServer::start().await;
        assert_ne!(server.port(), 5432);
        let data = server.data();
        assert!(data.join("PG_VERSION").is_file());
        let first = server.pid();
        server.restart().await;
        assert_ne!(server.pid(), first, "a new postmaster");
        let dir = server.dir.path().to_owned();
        drop(server);
        assert!(!dir.exists(), "the directory was removed");
    }
}
