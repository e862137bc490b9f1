//! The conformance suite on MariaDB: every scenario the backend's capabilities select, on
//! a server the fixture starts (never one on 3306), each backend a new client of it,
//! connected as a least-privileged service user: the tables made by the statements
//! `Tables::create_sql` prints, as root, and the user given only the grants the README
//! lists (it may not create them, nor anything else).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use lock_conformance::Fixture;
use lock_core::Backend;
use lock_mysql::{Connector, MysqlBackend, Tables};
use lock_testkit::{MARIADB_TEST_DATABASE, MariaDbServer};
use tokio::sync::OnceCell;

/// The least-privileged user the suite's clients connect as.
const SERVICE_USER: &str = "lock_service";
const SERVICE_PASSWORD: &str = "service-secret";

/// Starts the server, makes the tables as root, and a user with the README's grants.
async fn least_privileged() -> MariaDbServer {
    let server = MariaDbServer::start().await;
    let tables = Tables::default();
    let mut script = vec![
        tables.create_sql(),
        format!("CREATE USER '{SERVICE_USER}'@'%' IDENTIFIED BY '{SERVICE_PASSWORD}';"),
    ];
    for table in ["names", "wakes", "clients", "epoch"] {
        script.push(format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {MARIADB_TEST_DATABASE}.{}{table} \
             TO '{SERVICE_USER}'@'%';",
            tables.prefix()
        ));
    }
    let script = script.join("\n");
    let said = server.sql(&script);
    assert!(said.trim().is_empty(), "{said}");
    server
}

/// One MariaDB server, started on first use; every backend is a new client of it.
#[derive(Debug)]
struct MysqlFixture {
    server: OnceCell<MariaDbServer>,
    backends: Mutex<Vec<Weak<MysqlBackend>>>,
}

impl MysqlFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start() -> Self {
        Self {
            server: OnceCell::new(),
            backends: Mutex::default(),
        }
    }
}

#[async_trait]
impl Fixture for MysqlFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let server = self.server.get_or_init(least_privileged).await;
        let url = format!(
            "mysql://{SERVICE_USER}:{SERVICE_PASSWORD}@127.0.0.1:{}/{MARIADB_TEST_DATABASE}",
            server.port()
        );
        let backend = Connector::new(url)
            .pool_size(4)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connecting: {err}"));
        let backend = Arc::new(backend);
        self.backends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&backend));
        backend
    }

    /// A name's tokens begin at the microseconds since the epoch when its row is
    /// made, and go up by one from there.
    fn consecutive_tokens(&self) -> bool {
        false
    }

    /// The mutex's waiters are served in arrival order, as the fair lock's.
    fn fair_mutex(&self) -> bool {
        true
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        let backends = self
            .backends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut channels: Vec<String> = backends
            .iter()
            .filter_map(Weak::upgrade)
            .flat_map(|backend| backend.subscribed_channels())
            .collect();
        channels.sort();
        channels.dedup();
        channels
    }
}

lock_conformance::conformance_suite!(
    MysqlFixture::start(),
    without[Reservation, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests]
);
