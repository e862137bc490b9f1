//! The connection pool: deadpool over `mysql_async` connections, each set up for the lock
//! transactions (read-committed, UTC, bounded row-lock waits).
//!
//! A transaction that fails or times out part-way takes its connection out of the pool
//! for good ([`Pooled::discard`]): dropping it closes the socket, and the server rolls
//! the transaction back. A connection is never handed on with a transaction open.

use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleResult};
use lock_core::Error;
use mysql_async::{Conn, Opts, OptsBuilder};

use crate::error::{Silent, failed};

/// A connection of the pool.
pub(crate) type Pooled = managed::Object<Manager>;

/// The pool.
pub(crate) type Pool = managed::Pool<Manager>;

/// Opens connections to one server.
#[derive(Debug)]
pub(crate) struct Manager {
    opts: Opts,
    connect_timeout: Duration,
}

impl Manager {
    /// Connections as `opts` say, each set up for the lock transactions, every row-lock
    /// wait bounded by `response_timeout`.
    pub(crate) fn new(
        (opts, asked_for_the_socket): (Opts, bool),
        connect_timeout: Duration,
        response_timeout: Duration,
    ) -> Self {
        let lock_wait = response_timeout.as_secs().max(1);
        // A URL that does not ask for the Unix socket keeps to TCP: by default the driver
        // would switch to the server's socket when it runs on the same host.
        let prefer_socket = opts.prefer_socket() && asked_for_the_socket;
        let opts = OptsBuilder::from_opts(opts)
            .prefer_socket(prefer_socket)
            .setup(session_setup(lock_wait))
            .into();
        Self {
            opts,
            connect_timeout,
        }
    }

    /// The options connections are opened with.
    pub(crate) fn opts(&self) -> &Opts {
        &self.opts
    }
}

/// The session settings of every connection: `READ COMMITTED` (under `REPEATABLE READ`
/// the gap locks of one name's statements deadlocked with another name's), the server's
/// clock read in UTC, a row-lock wait of `lock_wait` seconds at most, and a strict
/// `sql_mode` of its own (a combined swap counts on a refused `NULL` to roll back its
/// statement, where a lax mode would store an empty state; see [`crate::swaps`]).
fn session_setup(lock_wait: u64) -> Vec<String> {
    vec![
        "SET SESSION sql_mode = 'STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION'".to_owned(),
        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED".to_owned(),
        "SET time_zone = '+00:00'".to_owned(),
        format!("SET SESSION innodb_lock_wait_timeout = {lock_wait}"),
    ]
}

/// Opens a connection as `opts` say within `bound`.
pub(crate) async fn connect(opts: &Opts, bound: Duration) -> Result<Conn, Error> {
    let during = "connecting to MySQL";
    match tokio::time::timeout(bound, Conn::new(opts.clone())).await {
        Ok(connected) => connected.map_err(|err| failed(err, during)),
        Err(_) => Err(Error::connection(during, Silent { bound })),
    }
}

impl managed::Manager for Manager {
    type Type = Conn;
    type Error = Error;

    async fn create(&self) -> Result<Conn, Error> {
        connect(&self.opts, self.connect_timeout).await
    }

    async fn recycle(&self, _: &mut Conn, _: &Metrics) -> RecycleResult<Error> {
        // A broken connection shows at its next statement, whose transaction then takes
        // it out; checking here would cost a round trip per operation.
        Ok(())
    }
}

/// Takes `conn` out of the pool and closes it (its open transaction, if any, is rolled
/// back by the server).
pub(crate) fn discard(conn: Pooled) {
    drop(managed::Object::take(conn));
}
