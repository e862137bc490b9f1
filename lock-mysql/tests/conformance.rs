//! The conformance suite on MariaDB: every scenario the backend's capabilities select, on
//! a server the fixture starts (never one on 3306), each backend a new client of it,
//! connected as a least-privileged service user: the tables made by the statements
//! `Tables::create_sql` prints, as root, and the user given only the grants the README
//! lists (it may not create them, nor anything else).

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use common::least_privileged;
use lock_conformance::{Fixture, OnDemand};
use lock_core::Backend;
use lock_mysql::{Connector, MysqlBackend};
use lock_testkit::MariaDbServer;

/// One MariaDB server, started on first use; every backend is a new client of it.
#[derive(Debug)]
struct MysqlFixture(OnDemand<MariaDbServer, MysqlBackend>);

impl MysqlFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start() -> Self {
        Self(OnDemand::default())
    }
}

#[async_trait]
impl Fixture for MysqlFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let server = self.0.server(least_privileged).await;
        let backend = Connector::new(common::service_url(server))
            .pool_size(4)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connecting: {err}"));
        self.0.backends().keep(backend)
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
        self.0
            .backends()
            .channels(MysqlBackend::subscribed_channels)
    }
}

lock_conformance::conformance_suite!(
    MysqlFixture::start(),
    without[Reservation, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests]
);
