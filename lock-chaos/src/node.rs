//! The servers a run's locks live on: Redis nodes, or one PostgreSQL primary with a
//! streaming standby. The faults that act on a server (restart, pause, killing client
//! connections, a failover) go through here.

use lock_testkit::Signal;
use lock_testkit::{PostgresServer, RedisServer};
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::args::BackendKind;

/// One server of the run.
pub(crate) enum Node {
    Redis(RedisServer),
    Postgres(Replicated),
}

/// A PostgreSQL primary and its asynchronous streaming standby.
pub(crate) struct Replicated {
    primary: PostgresServer,
    standby: PostgresServer,
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
                Node::Postgres(Replicated { primary, standby })
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
        }
    }

    /// The URL of this kind of server at `port` (the node's own, or its proxy's).
    pub(crate) fn url_at(&self, port: u16) -> String {
        match self {
            Node::Redis(_) => format!("redis://127.0.0.1:{port}"),
            Node::Postgres(_) => format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        }
    }

    /// What a lock operation sends that the proxy recognizes: its reply can be lost.
    pub(crate) fn lock_request_marker(&self) -> &'static [u8] {
        match self {
            // Functions, which clients call on Redis 7 by default.
            Node::Redis(_) => b"FCALL",
            Node::Postgres(_) => b"SELECT distlock.",
        }
    }

    pub(crate) fn pid(&self) -> u32 {
        match self {
            Node::Redis(server) => server.pid(),
            Node::Postgres(pair) => pair.primary.pid(),
        }
    }

    /// Stops the server as a crash would and starts it again: Redis loses its data,
    /// PostgreSQL keeps what it committed.
    pub(crate) async fn restart(&mut self) {
        match self {
            Node::Redis(server) => server.restart().await,
            Node::Postgres(pair) => pair.primary.restart().await,
        }
    }

    pub(crate) fn pause(&self) {
        match self {
            Node::Redis(server) => server.pause(),
            Node::Postgres(pair) => pair.primary.pause(),
        }
    }

    pub(crate) fn resume(&self) {
        match self {
            Node::Redis(server) => server.resume(),
            Node::Postgres(pair) => pair.primary.resume(),
        }
    }

    /// A failover, for PostgreSQL: the primary crashes and the standby is promoted (the
    /// last commits it had not received are lost). Returns the new primary's port, where
    /// the node's proxy must lead from now on; `None` for a node without a standby.
    /// [`Self::replace_standby`] makes the next standby.
    pub(crate) fn fail_over(&mut self) -> Option<u16> {
        let Node::Postgres(pair) = self else {
            return None;
        };
        let started = std::time::Instant::now();
        tokio::task::block_in_place(|| {
            pair.primary.crash();
            pair.standby.promote();
        });
        eprintln!("chaos: failover: promoted after {:?}", started.elapsed());
        std::mem::swap(&mut pair.primary, &mut pair.standby);
        Some(pair.primary.port())
    }

    /// After [`Self::fail_over`]: a new standby of the promoted server, in place of the
    /// crashed one.
    pub(crate) async fn replace_standby(&mut self) {
        if let Node::Postgres(pair) = self {
            pair.standby = PostgresServer::start_standby(&pair.primary).await;
        }
    }

    /// Closes about 30% of the clients' connections from the server's side (`CLIENT
    /// KILL`, `pg_terminate_backend`). Our own connection may be among them: it is a
    /// fresh one each time, and a failure only skips this fault.
    pub(crate) async fn kill_some_clients(&self, rng: &mut ChaCha8Rng) {
        let outcome = match self {
            Node::Redis(server) => kill_redis_clients(server, rng).await,
            Node::Postgres(pair) => terminate_postgres_backends(&pair.primary, rng).await,
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
