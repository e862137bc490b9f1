//! The conformance suite on PostgreSQL: every scenario the backend's capabilities select,
//! on a server the fixture starts (never the one on 5432), once with the client
//! connected to the server itself as a least-privileged service role (the tables made
//! by the printed migration, the role given only the grants the README lists), and
//! once as the tables' owner with its statements going through PgBouncer in
//! transaction mode (its notification connection going to the server, as the README
//! says to set it up).

use std::sync::Arc;

use async_trait::async_trait;
use lock_conformance::{Fixture, Tracked};
use lock_core::Backend;
use lock_postgres::schema::{self, SchemaName};
use lock_postgres::{Connector, PostgresBackend};
use lock_testkit::{PgBouncer, PostgresServer};
use tokio::sync::OnceCell;

/// How the fixture's clients reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// To the server, as a role that may only read the tables and call the functions.
    DirectAsServiceRole,
    /// Through PgBouncer, as the superuser, which migrates on connect.
    TransactionPooler,
}

/// The least-privileged role of [`Route::DirectAsServiceRole`].
const SERVICE_ROLE: &str = "lock_service";

/// The servers of a fixture: PostgreSQL, and PgBouncer in front of it for
/// [`Route::TransactionPooler`].
#[derive(Debug)]
struct Servers {
    postgres: PostgresServer,
    pooler: Option<PgBouncer>,
}

/// One PostgreSQL server, started on first use; every backend is a new client of it.
#[derive(Debug)]
struct PostgresFixture {
    route: Route,
    servers: OnceCell<Servers>,
    backends: Tracked<PostgresBackend>,
}

impl PostgresFixture {
    #[allow(
        clippy::unused_async,
        reason = "the suite's macro awaits every constructor"
    )]
    async fn start(route: Route) -> Self {
        Self {
            route,
            servers: OnceCell::new(),
            backends: Tracked::default(),
        }
    }

    async fn servers(&self) -> &Servers {
        self.servers
            .get_or_init(|| async {
                let postgres = match self.route {
                    Route::DirectAsServiceRole => {
                        let setup = least_privileged_sql();
                        PostgresServer::start_prepared(&setup, async |postgres| {
                            run_as_superuser(postgres, &setup).await;
                        })
                        .await
                    }
                    // The tables' owner would make them on connect; they are made once
                    // for every test, by the same migration (`tests/schema.rs` makes
                    // them on connect).
                    Route::TransactionPooler => {
                        let migration = schema::migration_sql(&SchemaName::default());
                        PostgresServer::start_prepared(&migration, async |postgres| {
                            run_as_superuser(postgres, &migration).await;
                        })
                        .await
                    }
                };
                let pooler = match self.route {
                    Route::DirectAsServiceRole => None,
                    Route::TransactionPooler => Some(PgBouncer::start(&postgres).await),
                };
                Servers { postgres, pooler }
            })
            .await
    }
}

#[async_trait]
impl Fixture for PostgresFixture {
    async fn backend(&self) -> Arc<dyn Backend> {
        let servers = self.servers().await;
        let direct = servers.postgres.url();
        let connector = match &servers.pooler {
            None => Connector::new(format!(
                "postgres://{SERVICE_ROLE}@127.0.0.1:{}/postgres",
                servers.postgres.port()
            )),
            Some(pooler) => Connector::new(pooler.url()).notifications_url(&direct),
        };
        let backend = connector
            .pool_size(4)
            .connect()
            .await
            .unwrap_or_else(|err| panic!("connecting ({:?}): {err}", self.route));
        // Statements are prepared on the server's own sessions only: through PgBouncer
        // in transaction mode a prepared statement would be lost between transactions.
        assert_eq!(
            backend.prepares_statements(),
            self.route == Route::DirectAsServiceRole,
            "{:?}",
            self.route
        );
        self.backends.keep(backend)
    }

    /// Tokens are at least the microseconds since the epoch (a failover's rolled-back
    /// counter still goes up), not one more than the last.
    fn consecutive_tokens(&self) -> bool {
        false
    }

    fn fair_mutex(&self) -> bool {
        true
    }

    /// A writer's release wakes the waiting writers; the table mode's functions do not
    /// queue them to hand the lock over, as the protocol's rules do.
    fn deployment(&self) -> lock_conformance::Deployment {
        lock_conformance::Deployment::writers_only_woken()
    }

    async fn subscribed_channels(&self) -> Vec<String> {
        self.backends.channels(PostgresBackend::subscribed_channels)
    }
}

/// The statements that make the tables with the printed migration, as their owner, and
/// a role with an operator's grants (a service's, and force-release, which the suite's
/// scenarios run), which may create nothing. That a service's grants alone refuse
/// force-release is lock-postgres's `tests/schema.rs`.
fn least_privileged_sql() -> String {
    let schema = SchemaName::default();
    let grants = schema::operator_grants_sql(&schema, SERVICE_ROLE).expect("a valid role");
    format!(
        "{}\nCREATE ROLE {SERVICE_ROLE} LOGIN;\n{grants}",
        schema::migration_sql(&schema)
    )
}

/// Runs `statements` on `postgres` as its superuser.
async fn run_as_superuser(postgres: &PostgresServer, statements: &str) {
    let admin = lock_testkit::postgres_client(&postgres.url()).await;
    admin
        .batch_execute(statements)
        .await
        .expect("the printed migration and grants run");
}

mod direct_as_service_role {
    use super::{PostgresFixture, Route};
    lock_conformance::conformance_suite!(
        PostgresFixture::start(Route::DirectAsServiceRole),
        without[Reservation, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests, WriterHandOver]
    );
}

mod through_pgbouncer {
    use super::{PostgresFixture, Route};
    lock_conformance::conformance_suite!(
        PostgresFixture::start(Route::TransactionPooler),
        without[Reservation, RedisControl, Failover, CountDownLatch, Semaphore, ExpirableSemaphore, WakesOneClient, OrderedRequests, WriterHandOver]
    );
}
