//! The servers a run's locks live on: Redis nodes, one PostgreSQL primary with a
//! streaming standby, or one MariaDB primary with a replica. The faults that act on a server (restart, pause, killing client
//! connections, a failover) go through here.

use lock_testkit::Signal;
use lock_testkit::{MariaDbServer, PostgresServer, RedisServer};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::args::BackendKind;

/// One server of the run.
pub(crate) enum Node {
    Redis(RedisServer),
    Postgres(Replicated),
    Mysql(Replicated<MariaDbServer>),
}

/// A primary and its asynchronous standby (a MariaDB replica's server id is `next_id`,
/// then one more for the next).
pub(crate) struct Replicated<S = PostgresServer> {
    primary: S,
    standby: S,
    next_id: u32,
}

/// A server that can be crashed and a standby promoted in its place.
pub(crate) trait Standby {
    fn crash(&mut self);
    fn promote(&self);
    fn port(&self) -> u16;
}

impl Standby for PostgresServer {
    fn crash(&mut self) {
        PostgresServer::crash(self);
    }
    fn promote(&self) {
        PostgresServer::promote(self);
    }
    fn port(&self) -> u16 {
        PostgresServer::port(self)
    }
}

impl Standby for MariaDbServer {
    fn crash(&mut self) {
        MariaDbServer::crash(self);
    }
    fn promote(&self) {
        MariaDbServer::promote(self);
    }
    fn port(&self) -> u16 {
        MariaDbServer::port(self)
    }
}

impl<S: Standby> Replicated<S> {
    /// The primary crashes and the standby is promoted, and becomes the primary; its
    /// port.
    fn fail_over(&mut self) -> u16 {
        tokio::task::block_in_place(|| {
            self.primary.crash();
            self.standby.promote();
        });
        std::mem::swap(&mut self.primary, &mut self.standby);
        self.primary.port()
    }
}

impl Node {
    /// Starts a server for `backend`; PostgreSQL's failover quarantine (and so its
    /// longest lease) is `quarantine`, set before the standby is made, so that every
    /// server promoted later has it too.
    pub(crate) async fn start(backend: BackendKind, quarantine: std::time::Duration) -> Node {
        match backend {
            BackendKind::Postgres => {
                let primary = PostgresServer::start().await;
                let admin = lock_testkit::postgres_client(&primary.url()).await;
                admin
                    .batch_execute(&format!(
                        "ALTER DATABASE postgres SET distlock.failover_quarantine_ms = {}",
                        quarantine.as_millis()
                    ))
                    .await
                    .unwrap_or_else(|err| panic!("setting the failover quarantine: {err}"));
                let standby = PostgresServer::start_standby(&primary).await;
                Node::Postgres(Replicated {
                    primary,
                    standby,
                    next_id: 0,
                })
            }
            // The quarantine is the workers' setting (`worker::connect`).
            BackendKind::Mysql => {
                let primary = MariaDbServer::start_primary(1).await;
                let standby = MariaDbServer::start_replica(&primary, 2).await;
                Node::Mysql(Replicated {
                    primary,
                    standby,
                    next_id: 3,
                })
            }
            BackendKind::Redis | BackendKind::Fred | BackendKind::Redlock => {
                Node::Redis(RedisServer::start().await)
            }
        }
    }

    pub(crate) fn port(&self) -> u16 {
        match self {
            Node::Redis(server) => server.port(),
            Node::Postgres(pair) => pair.primary.port(),
            Node::Mysql(pair) => pair.primary.port(),
        }
    }

    /// The URL of this kind of server at `port` (the node's own, or its proxy's).
    pub(crate) fn url_at(&self, port: u16) -> String {
        match self {
            Node::Redis(_) => format!("redis://127.0.0.1:{port}"),
            Node::Postgres(_) => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            Node::Mysql(_) => format!(
                "mysql://root@127.0.0.1:{port}/{}",
                lock_testkit::MARIADB_TEST_DATABASE
            ),
        }
    }

    /// What a lock operation sends that the proxy recognizes: its reply can be lost.
    pub(crate) fn lock_request_marker(&self) -> &'static [u8] {
        match self {
            // Functions, which clients call on Redis 7 by default.
            Node::Redis(_) => b"FCALL",
            Node::Postgres(_) => b"SELECT distlock.",
            // The first round trip of a lock transaction.
            Node::Mysql(_) => b"START TRANSACTION",
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        match self {
            Node::Redis(server) => server.pid(),
            Node::Postgres(pair) => pair.primary.pid(),
            Node::Mysql(pair) => pair.primary.pid(),
        }
    }

    /// Stops the server as a crash would and starts it again: Redis loses its data,
    /// PostgreSQL keeps what it committed.
    pub(crate) async fn restart(&mut self) {
        match self {
            Node::Redis(server) => server.restart().await,
            Node::Postgres(pair) => pair.primary.restart().await,
            Node::Mysql(pair) => pair.primary.restart().await,
        }
    }

    pub(crate) fn pause(&self) {
        match self {
            Node::Redis(server) => server.pause(),
            Node::Postgres(pair) => pair.primary.pause(),
            Node::Mysql(pair) => pair.primary.pause(),
        }
    }

    pub(crate) fn resume(&self) {
        match self {
            Node::Redis(server) => server.resume(),
            Node::Postgres(pair) => pair.primary.resume(),
            Node::Mysql(pair) => pair.primary.resume(),
        }
    }

    /// A failover, for PostgreSQL: the primary crashes and the standby is promoted (the
    /// last commits it had not received are lost). Returns the new primary's port, where
    /// the node's proxy must lead from now on; `None` for a node without a standby.
    /// [`Self::replace_standby`] makes the next standby.
    pub(crate) fn fail_over(&mut self) -> Option<u16> {
        let started = std::time::Instant::now();
        let port = match self {
            Node::Postgres(pair) => pair.fail_over(),
            Node::Mysql(pair) => pair.fail_over(),
            Node::Redis(_) => return None,
        };
        eprintln!("chaos: failover: promoted after {:?}", started.elapsed());
        Some(port)
    }

    /// After [`Self::fail_over`]: a new standby of the promoted server, in place of the
    /// crashed one.
    pub(crate) async fn replace_standby(&mut self) {
        match self {
            Node::Postgres(pair) => {
                pair.standby = PostgresServer::start_standby(&pair.primary).await;
            }
            Node::Mysql(pair) => {
                pair.standby = MariaDbServer::start_replica(&pair.primary, pair.next_id).await;
                pair.next_id += 1;
            }
            Node::Redis(_) => {}
        }
    }

    /// Closes about 30% of the clients' connections from the server's side (`CLIENT
    /// KILL`, `pg_terminate_backend`). Our own connection may be among them: it is a
    /// fresh one each time, and a failure only skips this fault.
    pub(crate) async fn kill_some_clients(&self, rng: &mut ChaCha8Rng) {
        let outcome = match self {
            Node::Redis(server) => kill_redis_clients(server, rng).await,
            Node::Postgres(pair) => terminate_postgres_backends(&pair.primary, rng).await,
            Node::Mysql(_) => Ok(()),
        };
        if let Err(err) = outcome {
            eprintln!("chaos: killing client connections: {err}");
        }
    }
}

async fn kill_redis_clients(server: &RedisServer, rng: &mut ChaCha8Rng) -> Result<(), String> {
    let client = redis::Client::open(server.url()).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    for line in list.lines() {
        let id = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("id="))
            .unwrap_or("");
        if !id.is_empty() && rng.random_ratio(30, 100) {
            // The connection may be gone already, or be this one (then the rest are
            // spared this time).
            let killed: redis::RedisResult<i64> = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut conn)
                .await;
            if killed.is_err() {
                break;
            }
        }
    }
    Ok(())
}

async fn terminate_postgres_backends(
    server: &PostgresServer,
    rng: &mut ChaCha8Rng,
) -> Result<(), String> {
    let (client, connection) = tokio_postgres::connect(&server.url(), tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT pid FROM pg_stat_activity
              WHERE application_name LIKE 'distlock%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?;
    for row in rows {
        let pid: i32 = row.get(0);
        if rng.random_ratio(30, 100) {
            client
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    drop(client);
    driver
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())
}

/// Sends `sig` to the process `pid`, reporting a failure (a process already gone is
/// none).
pub(crate) fn signal(pid: u32, sig: Signal) {
    if let Err(err) = lock_testkit::signal(pid, sig) {
        eprintln!("chaos: {sig} to {pid}: {err}");
    }
}
