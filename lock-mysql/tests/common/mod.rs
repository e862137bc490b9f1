//! What the MariaDB suites share: a server with the lock tables made as root and a
//! least-privileged service user.

use lock_mysql::Tables;
use lock_testkit::{MARIADB_TEST_DATABASE, MariaDbServer};

/// The least-privileged user the suite's clients connect as.
const SERVICE_USER: &str = "lock_service";
const SERVICE_PASSWORD: &str = "service-secret";

/// Starts the server, makes the tables as root, and a user with the README's grants.
pub(crate) async fn least_privileged() -> MariaDbServer {
    let server = MariaDbServer::start().await;
    let tables = Tables::default();
    let mut script = vec![
        tables.create_sql(),
        format!("CREATE USER '{SERVICE_USER}'@'%' IDENTIFIED BY '{SERVICE_PASSWORD}';"),
    ];
    for table in ["names", "wakes", "clients", "epoch", "tokens"] {
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

/// The URL of the test database on `server` as the service user.
pub(crate) fn service_url(server: &MariaDbServer) -> String {
    format!(
        "mysql://{SERVICE_USER}:{SERVICE_PASSWORD}@127.0.0.1:{}/{MARIADB_TEST_DATABASE}",
        server.port()
    )
}
