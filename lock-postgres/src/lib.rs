//! The PostgreSQL backend of distlock: locks as lease rows in tables the
//! library creates and migrates itself, expiries on the database clock, waiting by
//! LISTEN/NOTIFY.
//!
//! [`Connector`] (or [`connect`]) gives a [`PostgresBackend`]: the reentrant mutex, the
//! fair lock and the read-write lock, with fencing tokens and retried requests answered
//! once, every operation one statement that needs no session (usable through a
//! transaction-mode pooler). [`schema::migrate`] creates or migrates the tables in a
//! schema of the caller's choice ([`schema::SchemaName`], default `distlock`), with a
//! version row, and refuses with a typed [`SchemaError`] a server too old, a missing
//! privilege (named), a newer schema or tables changed by hand. [`notify::Notifications`]
//! keeps the dedicated LISTEN connection of a client and listens again after it breaks.
//! [`Connector::connect_advisory`] gives an [`AdvisoryBackend`] instead: the mutex and the
//! read-write lock as session advisory locks ([`advisory`]). [`transaction`] locks, and
//! checks a table-mode hold, inside the caller's own transaction.
//!
//! This crate follows the facade's version and is not a stable API of its own.

// Every public item of a library crate says what it is.
#![warn(missing_docs)]

pub mod advisory;
mod backend;
mod calls;
mod channel;
mod combine;
mod connector;
mod direct;
pub mod error;
mod introspect;
pub mod notify;
pub mod schema;
mod statements;
mod timeouts;
mod tls;
pub mod transaction;

pub use advisory::{AdvisoryBackend, AdvisoryServer, AdvisorySession};
pub use backend::{MAX_NAME_BYTES, MAX_OWNER_BYTES, PostgresBackend};
pub use connector::{Connector, ConnectorSettings, QUERIES_APPLICATION_NAME};
pub use error::{SchemaError, ServerMessage};
pub use timeouts::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};
/// The driver, for [`transaction`]'s functions: they take its `GenericClient`, so a
/// service's own connection must come from this version.
pub use tokio_postgres;

use std::sync::Arc;

use lock_core::{Backend, Error, Locks};

/// Connects to the server `url` names (see [`Connector::new`]) with default settings
/// and returns a client.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped future leaves at most a migration rolled back.
pub async fn connect(url: &str) -> Result<Locks, Error> {
    Ok(Locks::new(connect_backend(url).await?))
}

/// Connects to the server `url` names and returns the backend, for
/// [`Locks::builder`] or to combine several backends.
///
/// # Cancel safety
///
/// Cancel-safe: a dropped future leaves at most a migration rolled back.
pub async fn connect_backend(url: &str) -> Result<Arc<dyn Backend>, Error> {
    Ok(Arc::new(Connector::new(url).connect().await?))
}
