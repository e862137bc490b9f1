//! The conformance suite on PostgreSQL: every scenario the backend's capabilities select,
//! on a server the fixture starts (never the one on 5432).

use std::sync::{Arc, Mutex, PoisonError, Weak};

use async_trait::async_trait;
use lock_conformance::Fixture;
use lock_core::Backend;
use lock_postgres::{Connector, PostgresBackend};
use lock_testkit::PostgresServer;
use tokio::sync::OnceCell;

/// One PostgreSQL server, started on first use; every backend is a new client of it.
#[derive(Debug, Default)]
struct PostgresFixture {
    server: OnceCell<PostgresServer>,
    backends: Mutex<Vec<Weak<PostgresBackend>>>,
}

impl PostgresFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start() -> Self {
        Self::default()
    }
}

#[async_trait]
impl Fixture for PostgresFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let server = self.server.get_or_init(PostgresServer::start).await;
        let backend = Connector::new(server.url())
            .pool_size(4)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connecting to {}: {err}", server.url()));
        let backend = Arc::new(backend);
        self.backends
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&backend));
        backend
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
    PostgresFixture::start(),
    without[Fair, ReadWrite, Reservation, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore]
);
