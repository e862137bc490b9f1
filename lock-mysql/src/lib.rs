//! The MySQL and MariaDB backend of distlock.
//!
//! Mutexes and fair locks, reentrant, with fencing tokens, retry-safe requests and
//! hand-overs, on the database a service already runs. Each lock name is one row whose
//! value is lock-core's protocol state machine as bytes; an operation locks the row,
//! steps the machine in the client at the server's clock, and writes it back in the
//! same transaction, in two round trips; a name whose row the client wrote last
//! changes in one statement, a compare-and-set on the bytes it wrote. The grant
//! rules are lock-core's own, checked exhaustively there, not a copy in SQL.
//!
//! Waiting needs no polling: a release that hands a lock over writes the waiter's notice
//! into its client's mailbox and interrupts the client's listening statement.
//!
//! ```no_run
//! # async fn run() -> Result<(), lock_core::Error> {
//! let locks = lock_mysql::Connector::new("mysql://app:secret@127.0.0.1:3306/app")
//!     .locks()
//!     .await?;
//! let guard = locks.mutex("orders:42").lock().await?;
//! // ... the protected work ...
//! guard.unlock().await?;
//! # Ok(()) }
//! ```

mod backend;
mod batch;
mod connector;
mod error;
mod introspect;
mod mailbox;
mod notify;
mod pool;
pub mod schema;
mod serving;
pub mod session;
mod state;
mod store;
mod swap;
mod swaps;

pub use backend::MysqlBackend;
pub use connector::{Connector, ConnectorSettings};
pub use schema::Tables;
pub use session::{GetLockBackend, GetLockServer, GetLockSession};

use std::sync::Arc;

use lock_core::{Backend, Error, Locks};

/// Connects to the database `url` names (see [`Connector::new`]) with default settings
/// and returns a client.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped future leaves at most the tables created.
pub async fn connect(url: &str) -> Result<Locks, Error> {
    Ok(Locks::new(connect_backend(url).await?))
}

/// Connects to the database `url` names and returns the backend, for
/// [`Locks::builder`] or to combine several backends.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped future leaves at most the tables created.
pub async fn connect_backend(url: &str) -> Result<Arc<dyn Backend>, Error> {
    Ok(Arc::new(Connector::new(url).connect().await?))
}
