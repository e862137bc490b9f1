//! Real `redis-server` processes, PostgreSQL servers ([`PostgresServer`]) and MariaDB
//! servers ([`MariaDbServer`]), for tests.
//!
//! Every test gets its own servers: [`RedisServer::start`] runs a standalone server,
//! [`RedisCluster::start`] a cluster of masters. Each server listens on `127.0.0.1` on a
//! free port, keeps its files in a fresh temporary directory, persists nothing, and is
//! killed (and its directory removed) when the value is dropped. Servers never share a
//! port with anything someone else started, and never use 6379.
//!
//! Faults are first-class: [`RedisServer::restart`] (kill -9, then start again on the
//! same port; data is lost), [`RedisServer::pause`] / [`RedisServer::resume`]
//! (SIGSTOP / SIGCONT), [`RedisCluster::restart_node_for_key`],
//! [`kill_pubsub_clients`], and [`FaultProxy`] between a client and a server (a reply
//! lost after the command ran, delayed replies, a black hole).
//!
//! The binary is found by [`redis_server_binary`]: `$REDIS_SERVER_BIN`, then `PATH`,
//! then the usual install directories. `cargo xtask test` installs it when missing.
//!
//! ```no_run
//! # async fn demo() {
//! let server = lock_testkit::RedisServer::start().await;
//! let () = server.command(&["SET", "k", "v"]).await;
//! let value: String = server.command(&["GET", "k"]).await;
//! assert_eq!(value, "v");
//! # }
//! ```

// reason: a test-support crate reports every failure by panicking with a clear message;
// the panics are documented once here rather than on each function.
#![allow(clippy::missing_panics_doc)]

mod binary;
mod cluster;
mod commandstats;
mod mariadb;
mod pgbouncer;
mod ports;
mod postgres;
mod proxy;
mod pubsub;
pub mod redisson;
mod runtime;
mod scratch;
mod sentinel;
mod server;
mod signal;
mod template;
mod tls;

pub use binary::redis_server_binary;
pub use cluster::RedisCluster;
pub use commandstats::{CommandStats, parse_command_stats};
pub use mariadb::{MARIADB_TEST_DATABASE, MariaDbBinaries, MariaDbServer, mariadb_binaries};
pub use pgbouncer::{PgBouncer, pgbouncer_binary};
pub use postgres::{PostgresServer, postgres_bin_dir, postgres_client};
pub use proxy::{FaultProxy, ProxyFault};
pub use pubsub::kill_pubsub_clients;
pub use runtime::in_a_runtime_that_stops;
pub use sentinel::RedisSentinel;
pub use server::{RedisServer, RedisServerBuilder};
pub use signal::{Signal, signal};
pub use tls::TestCertificates;

/// A free port on 127.0.0.1 (never 6379), kept from other testkit servers of this
/// process, for a listener a test adds itself (a TLS port, a silent fake server).
#[must_use]
pub fn free_port() -> u16 {
    ports::reserve(false)
}
