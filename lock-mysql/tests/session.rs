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

    use lock_core::backend::session::{LockSession, Taken};
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

    /// The server's count of executed prepared statements.
    fn executed(server: &MariaDbServer) -> u64 {
        let said = server.sql("SHOW GLOBAL STATUS LIKE 'Com_stmt_execute'");
        said.split_whitespace()
            .nth(1)
            .and_then(|count| count.parse().ok())
            .unwrap_or_else(|| panic!("a count: {said:?}"))
    }

    /// The server session that holds `key`'s user-level lock, if any.
    fn holder(server: &MariaDbServer, key: &str) -> Option<u64> {
        server
            .sql(&format!("SELECT IS_USED_LOCK('{key}')"))
            .trim()
            .parse()
            .ok()
    }

    /// A carrier session of `a` (the one that holds `carrier`), with its connection
    /// kept busy for `busy` by a wait for a lock `b` holds: the session, the guards of
    /// `carrier` and of b's lock, and the waiting task.
    async fn busy_carrier(
        (a, a_backend): (&Locks, &GetLockBackend),
        b: &Locks,
        busy: Duration,
    ) -> (
        Arc<lock_mysql::GetLockSession>,
        [lock_core::Guard; 2],
        tokio::task::JoinHandle<()>,
    ) {
        let carrier = a.mutex("carrier").lock().await.unwrap();
        let session = a_backend
            .session_of(&LockName::new("carrier").unwrap())
            .await
            .expect("the carrier holds a lock");
        let blocker = b.mutex("blocker").lock().await.unwrap();
        let waiting = Arc::clone(&session);
        let wait = tokio::spawn(async move {
            let waited = waiting
                .lock(&"blocker".to_owned(), false, None, busy)
                .await
                .unwrap();
            assert!(matches!(waited, Taken::Busy), "b holds it");
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        (session, [carrier, blocker], wait)
    }

    /// Tries and releases that queue behind a running statement go to the server
    /// together: twelve calls in three statements (six at most), each answered as its own, the
    /// grants held by the carrier's session and the releases freeing them. Fails if
    /// every call went alone (twelve statements) or a call got another's answer.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_that_queue_share_a_statement() {
        let server = MariaDbServer::start().await;
        let lease = Duration::from_secs(30);
        let (a, a_backend) = client(&server, lease).await;
        let (b, _) = client(&server, lease).await;
        let taken_by_b = b.mutex("taken-by-b").lock().await.unwrap();
        let (session, _guards, wait) =
            busy_carrier((&a, &a_backend), &b, Duration::from_millis(400)).await;
        let before = executed(&server);
        let keys: Vec<String> = (0..11)
            .map(|n| format!("shared-{n}"))
            .chain(["taken-by-b".to_owned()])
            .collect();
        let tries: Vec<_> = keys
            .iter()
            .map(|key| {
                let (session, key) = (Arc::clone(&session), key.clone());
                tokio::spawn(async move { session.try_lock(&key, false, None).await })
            })
            .collect();
        wait.await.unwrap();
        let mut answers = Vec::new();
        for taken in tries {
            answers.push(taken.await.unwrap().unwrap());
        }
        // Three when every call queued before the wait ended, as it does unless the
        // machine stalls the spawned tasks for most of 400 ms; a few more then.
        let statements = executed(&server) - before;
        assert!(
            (3..=6).contains(&statements),
            "12 calls, at most 4 a statement: {statements} statements"
        );
        for (key, taken) in keys.iter().zip(&answers) {
            if key == "taken-by-b" {
                assert!(matches!(taken, Taken::Busy), "{key}: {taken:?}");
            } else {
                assert!(matches!(taken, Taken::Granted(None)), "{key}: {taken:?}");
                assert_eq!(holder(&server, key), Some(session.connection_id()), "{key}");
            }
        }
        let releases: Vec<_> = keys[..11]
            .iter()
            .map(|key| {
                let (session, key) = (Arc::clone(&session), key.clone());
                tokio::spawn(async move { session.unlock(&key, false).await })
            })
            .collect();
        for released in releases {
            released.await.unwrap().unwrap();
        }
        assert!(!session.is_broken(), "every release found its lock");
        for key in &keys[..11] {
            assert_eq!(holder(&server, key), None, "{key} is free");
        }
        drop(taken_by_b);
    }

    /// A try whose caller goes away while it waits for the connection never leaves
    /// the lock taken. Fails if a queued call were sent, and its grant kept, after its
    /// caller had gone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_whose_caller_went_away_leaves_no_lock() {
        let server = MariaDbServer::start().await;
        let lease = Duration::from_secs(30);
        let (a, a_backend) = client(&server, lease).await;
        let (b, _) = client(&server, lease).await;
        let (session, _guards, wait) =
            busy_carrier((&a, &a_backend), &b, Duration::from_millis(300)).await;
        let gone = {
            let session = Arc::clone(&session);
            tokio::spawn(async move { session.try_lock(&"orphan".to_owned(), false, None).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        gone.abort();
        wait.await.unwrap();
        let next = session
            .try_lock(&"next".to_owned(), false, None)
            .await
            .unwrap();
        assert!(matches!(next, Taken::Granted(None)), "{next:?}");
        assert_eq!(holder(&server, "orphan"), None, "nobody holds the orphan");
        assert!(!session.is_broken());
    }
}
