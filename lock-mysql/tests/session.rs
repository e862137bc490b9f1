//! The user-level lock mode (`Connector::connect_session_locks`): the conformance suite on
//! every scenario its capabilities select, as the least-privileged service user, and the
//! mode's own faults and promises.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use lock_conformance::{Fixture, OnDemand};
use lock_core::Backend;
use lock_mysql::{Connector, GetLockBackend};
use lock_testkit::MariaDbServer;

/// One MariaDB server, started on first use; every backend is a new client of it.
#[derive(Debug)]
struct SessionFixture(OnDemand<MariaDbServer, GetLockBackend>);

impl SessionFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start() -> Self {
        Self(OnDemand::default())
    }
}

#[async_trait]
impl Fixture for SessionFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let server = self.0.server(common::least_privileged).await;
        let backend = Connector::new(common::service_url(server))
            .pool_size(4)
            .connect_session_locks()
            .await
            .unwrap_or_else(|err| panic!("connecting in session mode: {err}"));
        self.0.backends().keep(backend)
    }

    /// Tokens are at least the server's clock in microseconds.
    fn consecutive_tokens(&self) -> bool {
        false
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        self.0
            .backends()
            .channels(GetLockBackend::subscribed_channels)
    }
}

mod conformance {
    use super::SessionFixture;
    lock_conformance::conformance_suite!(
        SessionFixture::start(),
        without[Fair, ReadWrite, RetrySafe, Reservation, HandsOver, Introspection, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests, WriterHandOver]
    );
}

/// The mode's own faults and promises, each on a server of its own.
mod sessions {
    // reason: a test reports failures by panicking.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::Arc;
    use std::time::Duration;

    use lock_core::{LockName, Locks};
    use lock_mysql::{Connector, GetLockBackend};
    use lock_testkit::MariaDbServer;
    use tokio::time::{Instant, timeout};

    /// A session-mode client of `server` as root, with a watchdog lease of `lease`.
    async fn client(server: &MariaDbServer, lease: Duration) -> (Locks, Arc<GetLockBackend>) {
        fenced_client(server, lease, false).await
    }

    /// As [`client`], issuing fencing tokens when `fencing`.
    async fn fenced_client(
        server: &MariaDbServer,
        lease: Duration,
        fencing: bool,
    ) -> (Locks, Arc<GetLockBackend>) {
        let backend = Connector::new(server.url())
            .response_timeout(Duration::from_secs(2))
            .connect_session_locks()
            .await
            .expect("connects in session mode");
        let backend = Arc::new(backend);
        let locks = Locks::builder(Arc::clone(&backend) as Arc<dyn lock_core::Backend>)
            .watchdog_lease(lease)
            .fencing(fencing)
            .build()
            .expect("valid settings");
        (locks, backend)
    }

    /// A holder whose session the server ends (an operator's `KILL`, a crashed
    /// connection) learns at its next renewal that its hold is lost, and the lock is free
    /// for the next client. Fails if renewals do not check the session: the guard would
    /// go on believing it holds a lock the server gave up.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_session_the_server_ends_is_a_lost_hold() {
        let server = MariaDbServer::start().await;
        let lease = Duration::from_millis(600);
        let (a, a_backend) = client(&server, lease).await;
        let (b, _) = client(&server, lease).await;
        let guard = a.mutex("ended").lock().await.unwrap();
        let id = a_backend
            .session_of(&LockName::new("ended").unwrap())
            .await
            .expect("the lock is held")
            .connection_id();
        let said = server.sql(&format!("KILL CONNECTION {id}"));
        assert!(said.trim().is_empty(), "{said}");
        let killed = Instant::now();
        let lost = timeout(lease * 2, guard.lost())
            .await
            .expect("lost within two leases of the kill");
        assert!(lost.is_lost(), "{lost}");
        assert!(killed.elapsed() < lease * 2);
        let next = b.mutex("ended").try_lock().await.unwrap();
        assert!(next.is_some(), "the killed session's lock is free");
        // The client opens a new carrier for its next lock.
        let again = a.mutex("ended-again").lock().await.unwrap();
        again.unlock().await.unwrap();
    }

    /// `GET_LOCK` compares names without case and takes 64 characters at most: names
    /// that differ by case only, or beyond 64 characters, are two locks, and a name of
    /// 4 000 characters works. Fails if names went to the server as they are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn names_apart_by_case_or_length_are_two_locks() {
        let server = MariaDbServer::start().await;
        let lease = Duration::from_secs(5);
        let (a, _) = client(&server, lease).await;
        let (b, _) = client(&server, lease).await;
        let long = "n".repeat(4000);
        let pairs = [
            ("Orders:42".to_owned(), "orders:42".to_owned()),
            (format!("{long}a"), format!("{long}b")),
            (
                "distlock-mailbox-x".to_owned(),
                "distlock-mailbox-X".to_owned(),
            ),
        ];
        for (first, second) in pairs {
            let held = a.mutex(&first).try_lock().await.unwrap().expect("free");
            let other = b.mutex(&second).try_lock().await.unwrap();
            assert!(other.is_some(), "{first:.20} and {second:.20} share a lock");
            let same = b.mutex(&first).try_lock().await.unwrap();
            assert!(same.is_none(), "{first:.20} is held");
            held.unlock().await.unwrap();
            other.unwrap().unlock().await.unwrap();
        }
    }

    /// A waiter waits inside the server and is granted the lock the moment its holder
    /// gives it back, with no notification: its `GET_LOCK` returns then.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_is_granted_the_lock_by_the_server_when_it_comes_free() {
        let server = MariaDbServer::start().await;
        let lease = Duration::from_secs(5);
        let (a, _) = client(&server, lease).await;
        let (b, _) = client(&server, lease).await;
        let held = a.mutex("waited").lock().await.unwrap();
        let waiter = tokio::spawn(async move {
            let guard = b.mutex("waited").lock().await.unwrap();
            (Instant::now(), guard)
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let waiting = server.sql(
            "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT GET_LOCK(%'",
        );
        assert_eq!(waiting.trim(), "1", "the waiter waits inside the server");
        let released = Instant::now();
        held.unlock().await.unwrap();
        let (granted, guard) = timeout(Duration::from_secs(2), waiter)
            .await
            .expect("granted")
            .unwrap();
        assert!(granted >= released);
        guard.unlock().await.unwrap();
    }

    /// Fencing tokens of one name only grow, across clients and after the server
    /// restarts (they are at least its clock in microseconds).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fencing_tokens_grow_across_clients_and_restarts() {
        let mut server = MariaDbServer::start().await;
        let lease = Duration::from_secs(5);
        let mut last = 0;
        for round in 0..3 {
            let (locks, _) = fenced_client(&server, lease, true).await;
            for _ in 0..3 {
                let guard = locks.mutex("fenced").lock().await.unwrap();
                let token = guard.fencing_token().expect("a token was asked for");
                assert!(token > last, "round {round}: {token} after {last}");
                last = token;
                guard.unlock().await.unwrap();
            }
            locks.shutdown().await;
            if round == 1 {
                server.restart().await;
            }
        }
    }
}
