//! The PostgreSQL backend of the lock library (in progress): locks as lease rows in
//! tables the library creates and migrates itself, expiries on the database clock,
//! waiting by LISTEN/NOTIFY.
//!
//! This first part holds the tables: [`schema::migrate`] creates or migrates them in a
//! schema of the caller's choice ([`schema::SchemaName`], default `distlock`), with a
//! version row, and refuses with a typed [`SchemaError`] a server too old, a missing
//! privilege (named), a newer schema or tables changed by hand. [`notify::Notifications`]
//! keeps the dedicated LISTEN connection of a client and listens again after it breaks.
//! The `Backend` implementation follows.
//!
//! This crate follows the facade's version and is not a stable API of its own.

mod backend;
pub mod error;
pub mod notify;
pub mod schema;

pub use backend::{Connector, PostgresBackend};
pub use error::SchemaError;
