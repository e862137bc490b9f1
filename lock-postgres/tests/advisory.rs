//! The conformance suite on advisory mode (`Connector::connect_advisory`): every scenario
//! its capabilities select, on a server the fixture starts (never the one on 5432), each
//! backend a client of its own with its own sessions.

use std::sync::Arc;

use async_trait::async_trait;
use lock_conformance::{Fixture, OnDemand};
use lock_core::Backend;
use lock_postgres::{AdvisoryBackend, Connector};
use lock_testkit::PostgresServer;

/// One PostgreSQL server, started on first use; every backend is a new client of it.
#[derive(Debug)]
struct AdvisoryFixture(OnDemand<PostgresServer, AdvisoryBackend>);

impl AdvisoryFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start() -> Self {
        Self(OnDemand::default())
    }
}

#[async_trait]
impl Fixture for AdvisoryFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let server = self.0.server(PostgresServer::start).await;
        let backend = Connector::new(server.url())
            .connect_advisory()
            .await
            .unwrap_or_else(|err| panic!("connecting in advisory mode: {err}"));
        self.0.backends().keep(backend)
    }

    /// Tokens are at least the microseconds since the epoch, as the tables' own.
    fn consecutive_tokens(&self) -> bool {
        false
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        self.0
            .backends()
            .channels(AdvisoryBackend::subscribed_channels)
    }
}

mod conformance {
    use super::AdvisoryFixture;
    lock_conformance::conformance_suite!(
        AdvisoryFixture::start(),
        without[Fair, RetrySafe, Reservation, HandsOver, Introspection, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests, WriterHandOver]
    );
}

/// Advisory mode's own faults and promises, each on a server of its own.
mod sessions {
    // reason: a test reports failures by panicking.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use lock_core::{ErrorKind, LockName, Locks};
    use lock_postgres::{AdvisoryBackend, Connector};
    use lock_testkit::{PgBouncer, PostgresServer, postgres_client};
    use tokio::time::{Instant, sleep, timeout};

    /// An advisory client of `server` with a watchdog lease of `lease` and statements
    /// bounded by `response`.
    async fn client(
        server: &PostgresServer,
        lease: Duration,
        response: Duration,
    ) -> (Locks, Arc<AdvisoryBackend>) {
        let backend = Connector::new(server.url())
            .response_timeout(response)
            .connect_advisory()
            .await
            .expect("connects in advisory mode");
        let backend = Arc::new(backend);
        let locks = Locks::builder(Arc::clone(&backend) as Arc<dyn lock_core::Backend>)
            .watchdog_lease(lease)
            .build()
            .expect("valid settings");
        (locks, backend)
    }

    /// A holder whose session the server ends (an operator's `pg_terminate_backend`, a
    /// crashed connection) learns at its next renewal that its hold is lost, and the lock
    /// is free for the next client. Fails if renewals do not check the session: the
    /// guard would go on believing it holds a lock the server gave up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_the_server_ends_is_a_lost_hold() {
        let server = PostgresServer::start().await;
        let lease = Duration::from_millis(600);
        let (a, a_backend) = client(&server, lease, Duration::from_secs(2)).await;
        let (b, _) = client(&server, lease, Duration::from_secs(2)).await;
        let guard = a.mutex("ended").lock().await.unwrap();
        let pid = a_backend
            .session_of(&LockName::new("ended").unwrap())
            .await
            .expect("the lock is held")
            .pid();
        let admin = postgres_client(&server.url()).await;
        let ended: bool = admin
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .unwrap()
            .get(0);
        assert!(ended);
        timeout(lease * 2, guard.lost())
            .await
            .expect("the holder learns it within a renewal or two");
        assert!(!guard.is_held());
        let next = b
            .mutex("ended")
            .try_lock_for(Duration::from_secs(2), None)
            .await
            .unwrap();
        assert!(next.is_some(), "the lock is free once the session ended");
        // The holder's client opens a new session and locks again.
        let again = a.mutex("other").try_lock().await.unwrap();
        assert!(again.is_some());
    }

    /// A waiter waits inside the server, which grants it the lock the moment the holder
    /// gives it back: served well within its first slice of waiting (5 s) and without
    /// listening for a notification. Fails if waiting polled or waited for a message.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_is_granted_the_lock_by_the_server_when_it_comes_free() {
        let server = PostgresServer::start().await;
        let lease = Duration::from_secs(5);
        let (a, _) = client(&server, lease, Duration::from_secs(2)).await;
        let (b, b_backend) = client(&server, lease, Duration::from_secs(2)).await;
        let held = a.mutex("handed").lock().await.unwrap();
        let mutex = b.mutex("handed");
        let waiter =
            tokio::spawn(async move { mutex.try_lock_for(Duration::from_secs(20), None).await });
        sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished());
        assert!(b_backend.subscribed_channels().is_empty());
        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = timeout(Duration::from_secs(3), waiter)
            .await
            .expect("served before its first slice of waiting ends")
            .unwrap()
            .unwrap()
            .expect("granted");
        assert!(released.elapsed() < Duration::from_secs(3));
        assert!(guard.is_held());
        guard.unlock().await.unwrap();
    }

    /// A client waits inside the server with at most as many statements as its pool
    /// size (each holds a connection of the server's few); a waiter beyond them asks
    /// again soon instead, and is served too. Fails if every waiter opened a session of
    /// its own (three sessions of the waiting client instead of two).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiting_statements_are_bounded_by_the_pool_size() {
        let server = PostgresServer::start().await;
        let lease = Duration::from_secs(5);
        let (a, _) = client(&server, lease, Duration::from_secs(2)).await;
        let waiting = Connector::new(format!("{}?application_name=bounded", server.url()))
            .pool_size(1)
            .advisory_locks()
            .await
            .unwrap();
        let first = a.mutex("bounded:1").lock().await.unwrap();
        let second = a.mutex("bounded:2").lock().await.unwrap();
        let waiters: Vec<_> = ["bounded:1", "bounded:2"]
            .into_iter()
            .map(|name| {
                let mutex = waiting.mutex(name);
                tokio::spawn(async move { mutex.try_lock_for(Duration::from_secs(10), None).await })
            })
            .collect();
        sleep(Duration::from_millis(500)).await;
        let admin = postgres_client(&server.url()).await;
        let sessions: i64 = admin
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bounded'",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            sessions <= 2,
            "{sessions} sessions: one carrier and one waiting at most"
        );
        first.unlock().await.unwrap();
        second.unlock().await.unwrap();
        for waiter in waiters {
            let guard = timeout(Duration::from_secs(3), waiter)
                .await
                .expect("every waiter is served")
                .unwrap()
                .unwrap();
            assert!(guard.is_some());
        }
    }

    /// A holder whose server stops answering (paused) cannot renew: its guard says the
    /// hold is lost, its session is given up, and once the server runs again the lock
    /// is free for another client. Fails if an unanswered renewal kept the hold alive.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_paused_server_costs_the_hold_not_the_lock() {
        let server = PostgresServer::start().await;
        let lease = Duration::from_millis(900);
        let response = Duration::from_millis(300);
        let (a, _) = client(&server, lease, response).await;
        let guard = a.mutex("paused").lock().await.unwrap();
        server.pause();
        let lost = timeout(Duration::from_secs(5), guard.lost()).await;
        server.resume();
        lost.expect("the guard learns it lost the hold while the server is paused");
        let (b, _) = client(&server, lease, Duration::from_secs(2)).await;
        let next = b
            .mutex("paused")
            .try_lock_for(Duration::from_secs(5), None)
            .await
            .unwrap();
        assert!(next.is_some(), "the given-up session's lock comes free");
    }

    /// Behind a transaction-mode pooler a session lock would belong to whichever
    /// client's statement ran in that server process: connecting is refused, saying
    /// why. Fails if the connector did not check that its sessions are their own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_transaction_pooler_is_refused_with_the_reason() {
        let server = PostgresServer::start().await;
        let pooler = PgBouncer::start(&server).await;
        let refused = Connector::new(pooler.url())
            .connect_advisory()
            .await
            .expect_err("advisory mode refuses a transaction-mode pooler");
        assert_eq!(refused.kind(), ErrorKind::InvalidConfig, "{refused}");
        assert!(
            refused.to_string().contains("transaction-mode pooler"),
            "{refused}"
        );
    }
}
